"""A worker process: a crash in generated code (or in XLA) fails one check, not the caller
(`Worker` runs `check` and whole batches in a subprocess; `serve` is the subprocess's loop)."""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys

from .check import check, is_error
from .facts import Failure, Invalid
from .generator import OPS_RANGES, batch_seeds, random_batch


class Crash(Exception):
    """The worker process died (a signal) or hung while checking."""


class Worker:
    """Runs `check` in a subprocess (pickled requests and replies over pipes), restarted after
    a crash. Its stdout is the protocol; anything the process prints goes to stderr."""

    def __init__(self, timeout_s: float = 600):
        self.proc = None
        self.timeout_s = timeout_s

    def _start(self):
        # the tests folder, where `fuzzing` is a package: the worker's programs and failures
        # are then pickled as fuzzing.facts classes, as the caller's are
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = (f"import sys; sys.path.insert(0, {tests!r}); from fuzzing.worker import serve; "
                "serve()")
        env = dict(os.environ)
        env.setdefault("JDISC_CHECK_PLAN", "1")      # as in the tests: plans are checked
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)

    def check(self, progs, envs, seeds) -> list[list[Failure]]:
        """Failures per program; raises Invalid when a program is not well defined at `envs`
        (a subset of the sizes it was generated for can be one: facts depend on the sizes)."""
        return self._call(("check", progs, envs, list(seeds)))

    def batch(self, seed: int, n: int, ranges=OPS_RANGES, weights: dict | None = None):
        """(programs, envs, failures per program) of batch `seed` (generated with the op
        weights `weights`, default the generator's), generated and checked in the worker;
        failures None when the check raised or crashed (see check_programs)."""
        gen = self._call(("batch", seed, n, tuple(ranges), weights))
        try:
            return self._reply()
        except (Crash, RuntimeError, Invalid):     # check_programs will find out more
            return gen[1], gen[2], None

    def _reply(self):
        try:
            reply = _receive(self.proc.stdout, self.timeout_s)
        except (OSError, EOFError, TimeoutError) as err:
            self.close()
            raise Crash(f"worker died ({err or type(err).__name__})") from None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _call(self, request):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            _send(self.proc.stdin, request)
        except OSError as err:
            self.close()
            raise Crash(f"worker died ({err})") from None
        return self._reply()

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            rc = self.proc.returncode
            self.proc = None
            return rc


def _send(f, obj):
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _receive(f, timeout_s=None):
    def read(n):
        out = b""
        while len(out) < n:
            if timeout_s is not None and not select.select([f], [], [], timeout_s)[0]:
                raise TimeoutError(f"no reply in {timeout_s} s")
            chunk = os.read(f.fileno(), n - len(out))
            if not chunk:
                raise EOFError("worker exited")
            out += chunk
        return out
    n, = struct.unpack("<Q", read(8))
    return pickle.loads(read(n))


def _serve_batch(seed, n, ranges, weights):
    progs, envs = random_batch(seed, n, ranges, weights)
    _send(_PROTO_OUT, ("generated", progs, envs))      # the caller knows them if this crashes
    fails = check(progs, envs, batch_seeds(seed, n))
    return progs, envs, None if is_error(fails) else fails


_PROTO_OUT = None


def serve():
    """The worker's loop: read requests, reply with the result or the error raised."""
    global _PROTO_OUT
    _PROTO_OUT = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                                   # stray prints go to stderr
    proto_in = sys.stdin.buffer
    while True:
        try:
            request = _receive(proto_in)
        except EOFError:
            return
        try:
            if request[0] == "check":
                reply = check(*request[1:])
            else:
                reply = _serve_batch(*request[1:])
        except Invalid as err:          # not well defined at the sizes asked: the caller decides
            reply = err
        except Exception as err:                    # noqa: BLE001 - sent back to the caller
            reply = RuntimeError(f"{request[0]} raised {type(err).__name__}: {err}")
        _send(_PROTO_OUT, reply)
