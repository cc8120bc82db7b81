"""The C compiler's runs as processes: each in a process group of its own, stepping back
(nice) while a caller waits on other work (`yield_cpus`), and the thread-local callback by
which a compile reports what is left of it (`reporting`, read by the bridge). compiler.py
decides what to compile; this module only runs it."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from typing import Callable

from jdisc.errors import CompileError

_OUTPUT_TAIL_CHARS = 4000


# While a caller waits for other work than this process's C compiles (the bridge's XLA compile
# for a new shape, bridge.py), the compiler's runs step back: those running and those that
# start then run this much nicer than the process (their process group: the driver, cc1, as)
YIELD_NICE = 10

_yield_lock = threading.Lock()
_yielding = [0]                 # callers waiting on other work
_running: set[int] = set()      # the process groups of the compiler's runs


def _step_back(pgid: int) -> None:
    try:
        nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + YIELD_NICE)
        os.setpriority(os.PRIO_PGRP, pgid, nice)
    except (OSError, AttributeError):   # ended already, or no such call here
        pass


@contextlib.contextmanager
def yield_cpus():
    """While inside, this process's C compiler runs at nice YIELD_NICE (only lowered: a run
    that started inside stays there until it ends, a tenth of a second or so). Measured on
    two cores: docs/performance.md, "The first call"."""
    with _yield_lock:
        _yielding[0] += 1
        for pgid in _running:
            _step_back(pgid)
    try:
        yield
    finally:
        with _yield_lock:
            _yielding[0] -= 1


_progress = threading.local()     # the thread's `reporting` callback


@contextlib.contextmanager
def reporting(expect: Callable[[float], None]):
    """While inside, a compile in this thread calls `expect(seconds)` once it knows what is
    left: its units' C compiles (units.compile_cost, spread over compile_jobs() workers, the
    longest at least) and the link. A compile that finds its library in the cache calls
    nothing."""
    before, _progress.expect = getattr(_progress, "expect", None), expect
    try:
        yield
    finally:
        _progress.expect = before


def expecting() -> Callable[[float], None] | None:
    """The callback `reporting` set in this thread, if any."""
    return getattr(_progress, "expect", None)


def missing_compiler(cmd: list[str], err: OSError) -> CompileError:
    return CompileError(
        f"could not run the C compiler {shlex.join(cmd)!r}: {err}. "
        "Install a C compiler (gcc or clang) or point JDISC_CC at one, "
        "e.g. JDISC_CC='clang' or JDISC_CC='/usr/bin/gcc-12'."
    )


def run_compiler(cmd: list[str], compiler: list[str], c_path: str) -> None:
    try:        # a process group of its own: yield_cpus lowers the driver and its children
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                process_group=0)
    except OSError as e:
        raise missing_compiler(compiler, e) from e
    with _yield_lock:
        _running.add(proc.pid)
        if _yielding[0]:
            _step_back(proc.pid)
    try:
        output, _ = proc.communicate()
    finally:
        with _yield_lock:
            _running.discard(proc.pid)
        if proc.poll() is None:         # interrupted: the group is not the terminal's
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
    out_path = cmd[cmd.index("-o") + 1]
    if proc.returncode != 0 or os.path.getsize(out_path) == 0:
        out = output.strip()
        if len(out) > _OUTPUT_TAIL_CHARS:
            out = "[... earlier output trimmed ...]\n" + out[-_OUTPUT_TAIL_CHARS:]
        raise CompileError(
            f"C compiler failed (exit code {proc.returncode}) on generated code.\n"
            f"command: {shlex.join(cmd)}\n"
            f"C source: {c_path}\n"
            f"compiler output:\n{out or '(none)'}"
        )
