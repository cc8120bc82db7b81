"""The bridge: a program's first call runs with `jax.jit` while jdisc compiles in the background.

A jdisc compile costs a few XLA compiles (mostly the C compiler), and a user's first call
waits for it. With the bridge (the default; `jit(..., bridge=False)` or `JDISC_BRIDGE=0`
turn it off) the first call of each program checks its arguments, runs with `jax.jit` at its
exact shape, and starts jdisc's compile in a thread: only at sizes known to meet the dims and
constraints (export/concrete.py), since jax.jit would run a call that the program refuses.
While the compile runs, a later call at shapes `jax.jit` has run runs that same executable (no
XLA compile, no wait: a loop over one shape keeps going), and a call at new shapes that the
program would take (the same leaves and static sizes, sizes that meet the dims and
constraints), where jdisc's compile should take several XLA compiles more (RACE_FACTOR),
races a quick XLA compile of its own against jdisc's compile, the C compiler stepping back
meanwhile: whichever is ready first serves it. Measured on two cores (benchmarks/
first_call.py, a b c a b c, and W7's decoder loop): docs/performance.md. Other calls wait for
jdisc's program, and every call after the compile is the same as without the bridge.

The bridge's XLA compile is a quick one (`QUICK_OPTIONS`: LLVM at -O0 behind XLA's own HLO
passes): it serves one call, or a few while jdisc compiles, and jdisc's compile starts only
once it is done, so every millisecond it takes is on the path of a stream of new shapes. On
two cores it took 0.21 s instead of 0.38 for W7's decoder step and 0.08 instead of 0.13 for
W1, and its code ran 1.3x (W1) to 2.3x (W7's step) slower (CHANGELOG.md).

The bridge is skipped where it would cost more than it saves: inside a JAX trace (the trace
must embed jdisc's program), and when this cache directory has compiled the same function
before (`seen`/`remember`): then the compile is mostly a cache hit, cheaper than an XLA
compile. That test is a hint keyed by the function's code, never a correctness question: a
wrong guess only makes the first call compile in the foreground, as without the bridge.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401 - its exit hook first: see _join_at_exit
import contextlib
import hashlib
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable

import jax
import numpy as np

from jdisc.custom_calls.compiler import cache_dir
from jdisc.custom_calls.runs import reporting, yield_cpus
from jdisc.version import __version__


def default() -> bool:
    """Whether jit(..., bridge=None) bridges: `JDISC_BRIDGE=0` turns the default off."""
    return os.environ.get("JDISC_BRIDGE", "1").strip().lower() not in ("0", "false", "no", "")


# XLA's options for the bridge's compile: LLVM's optimisation level (XLA's default is 2)
QUICK_OPTIONS = {"xla_backend_optimization_level": 0}

# The most argument shapes the bridge runs with XLA while one compile of jdisc's runs
MAX_SHAPES = 8

# A new shape races an XLA compile against jdisc's compile only where what is left of jdisc's
# (its own estimate) exceeds this many XLA compiles like the first call's: a race slows
# jdisc's compile by what the XLA compile takes from it, and every later call that waits for
# jdisc's program pays for it. Measured on two cores (docs/performance.md): W7's decoder
# loop, 0.32 s left against a first XLA compile of 0.10-0.15 s, raced at its second step,
# which came 0.03-0.10 s sooner, and every later one waited 0.1-0.2 s longer (jdisc's C
# compiles 0.50 s instead of 0.35)
RACE_FACTOR = 4
# A first XLA compile quicker than this was a cache hit of jax's (the function jitted before in
# this process, or jax's persistent cache), no measure of an XLA compile: then no race
CACHE_HIT_S = 0.01

UNSERVED = object()     # Bridge.call's answer when jdisc's program is to serve the call


class Bridge:
    """A compile running in the background, and the `jax.jit` that served the first call."""

    def __init__(self, fn: Callable, build: Callable[[], Any], name: str,
                 admits: Callable[[list], bool] = lambda args: False):
        self.fn = fn                   # jax.jit of the function (a fallback's, if jdisc fails)
        self._quick: dict = {}         # (shapes, placement) -> the bridge's XLA executable
        self._settings = _thread_settings()      # the caller's jax.enable_x64(...) and such
        self.result: Any = None        # the Compiled entry, or the exception the compile raised
        self._first_out: Any = None    # the first call's results, until they are computed
        self._served: set = set()      # the argument shapes jax.jit has run at
        self._admits = admits          # whether jdisc's program would take these arguments
        self._lock = threading.Lock()
        self._finished = False         # the compile is over (set under _wake)
        self._eta: float | None = None  # when it should be over (monotonic), once known
        self._quick_s = 0.0            # the first call's XLA compile, seconds
        self._wake = threading.Condition()      # a compile ended, or the estimate came
        # the interpreter's exit waits for the compile (_join_at_exit): a daemon thread killed
        # inside jaxlib or the compiler driver aborts the process, and the finished program
        # is in the cache for the next process
        self.thread = threading.Thread(target=self._run, args=(build,), daemon=False,
                                       name=f"jdisc compile of {name}")
        _RUNNING.add(self.thread)

    def _run(self, build: Callable[[], Any]) -> None:
        # hand the GIL back at once: Thread.start() waits for this thread to begin, and the
        # export's Python would otherwise hold the caller for a switch interval (~5-10 ms)
        time.sleep(0)
        first, self._first_out = self._first_out, None
        try:        # and leave the CPUs to the first call's computation until it is done
            jax.block_until_ready(first)
        except Exception:       # noqa: BLE001 - the caller sees the call's own error
            pass
        del first
        before = [state.swap_local(value) for state, value in self._settings]
        try:
            with _short_switches(), reporting(self._expect):
                self.result = build()
        except BaseException as err:        # noqa: BLE001 - re-raised by the caller
            self.result = err
        finally:
            for (state, _), value in reversed(list(zip(self._settings, before))):
                state.set_local(value)
            with self._wake:
                self._finished = True
                self._wake.notify_all()

    def _expect(self, seconds: float) -> None:
        """The compile's estimate of what is left (runs.reporting)."""
        with self._wake:
            self._eta = time.monotonic() + seconds
            self._wake.notify_all()

    def first_call(self, args: list) -> Any:
        """The first call, with jax.jit, then the compile's start. Measured on two cores
        (W1-W4 first calls): the thread started before the call, waiting for it, made the
        first call 5-10 ms slower; the compile started beside XLA's compile, jdisc's export
        and passes competed with jax's tracing for the GIL and made it 1.4-2x slower, and the
        stream no faster. The compile waits for the call's results (jax dispatches them
        asynchronously), so as not to take a core from that computation."""
        try:
            self._first_out = self._run_quick(args)
            self._served.add(_shapes(args))      # jax.jit has compiled for these shapes
            return self._first_out
        finally:
            self.start()

    def _run_quick(self, args: list) -> Any:
        """The first call: `self.fn` on `args` through an executable compiled with
        QUICK_OPTIONS (the function's own errors raise here)."""
        key = (_shapes(args), _placement(args))
        exe = self._quick.get(key)
        if exe is None:
            lowered = self.fn.lower(*args)
            t0 = time.monotonic()
            exe = self._quick[key] = _quick_compile(lowered)
            self._quick_s = time.monotonic() - t0
        return exe(*args)

    def serves(self, args: list) -> bool:
        """Whether a call with `args` goes to the bridge: the compile still runs, and jax.jit
        has run their shapes, or jdisc's program would take them (`admits`) and the bridge
        has run fewer than MAX_SHAPES shapes."""
        if self.done():
            return False
        shapes = _shapes(args)
        return shapes in self._served or len(self._served) < MAX_SHAPES and self._admits(args)

    def call(self, args: list) -> Any:
        """A call the bridge serves (`serves`): its results, or UNSERVED when jdisc's compile
        ended before an XLA executable for a new shape was ready (the caller then runs
        jdisc's program)."""
        if not self.thread.ident:
            return self.first_call(args)
        key = (_shapes(args), _placement(args))
        exe = self._quick.get(key)
        if exe is None:
            exe = self._race(args, key)
            if exe is None:
                return UNSERVED
        return exe(*args)

    def _race(self, args: list, key: tuple) -> Any:
        """A new shape while jdisc compiles: once the compile knows what is left of it
        (runs.reporting), either the wait for it (None), where that is less than
        RACE_FACTOR XLA compiles like the first call's, or XLA's quick compile for the shape in a
        thread of its own, raced against it, the C compiler's runs stepping back meanwhile
        (runs.yield_cpus): whichever ends first serves the call, that executable or
        jdisc's program (None). An XLA compile that loses finishes in the background, its
        executable dropped."""
        with self._wake:    # the estimate comes after the passes and the C generation
            self._wake.wait_for(lambda: self._finished or self._eta is not None)
            if self._finished or self._quick_s < CACHE_HIT_S or \
                    self._eta - time.monotonic() < RACE_FACTOR * self._quick_s:
                return None
        with yield_cpus():
            try:
                lowered = self.fn.lower(*args)
            except Exception:       # noqa: BLE001 - jdisc's program decides, as without it
                return None
            return self._race_quick(lowered, key)

    def _race_quick(self, lowered, key: tuple) -> Any:
        box: dict = {}

        def compile_it():
            t0 = time.monotonic()
            try:
                box["exe"] = _quick_compile(lowered)
            except Exception:       # noqa: BLE001 - jdisc's program decides such a call
                box["failed"] = True
            # a compile slower than the first call's (jax's caches) weighs on the next race
            self._quick_s = max(self._quick_s, time.monotonic() - t0)
            with self._wake:
                self._wake.notify_all()
        thread = threading.Thread(target=compile_it, daemon=False, name="jdisc bridge compile")
        _RUNNING.add(thread)
        thread.start()
        with self._wake:
            self._wake.wait_for(lambda: box or self._finished)
        exe = box.get("exe")
        if exe is not None and not self._finished:
            self._quick[key] = exe
            self._served.add(key[0])
        return None if self._finished else exe

    def start(self) -> None:
        with self._lock:        # the first call and a waiting call may race here
            if not self.thread.ident:
                self.thread.start()

    def wait(self) -> Any:
        """The compile's result (starting it if the first call has not): the entry or error."""
        self.start()
        self.thread.join()
        return self.result

    def done(self) -> bool:
        return self._finished or bool(self.thread.ident) and not self.thread.is_alive()


def _quick_compile(lowered) -> Any:
    try:
        return lowered.compile(compiler_options=QUICK_OPTIONS)
    except Exception:       # noqa: BLE001 - an XLA without the option: its default
        return lowered.compile()


# The interpreter's switch interval while a compile runs in the background (_short_switches)
SWITCH_S = 0.0005

_switch_lock = threading.Lock()
_switching = [0, 0.0]       # background compiles running, the interval before the first began


@contextlib.contextmanager
def _short_switches():
    """While a compile runs in the background, the interpreter hands the GIL from thread to
    thread every SWITCH_S instead of every 5 ms (Python's default): a bridged call takes the
    GIL a few times, and each time it waited up to the interval for the compile's Python
    (the export, the passes, the C generation). Measured on two cores (benchmarks/
    first_call.py's loop, 20 calls at one shape from a cold start, two runs each way): W2
    0.124-0.129 s -> 0.087-0.096 (`jax.jit` 0.087-0.093), W4 0.083-0.102 -> 0.055-0.056; the
    first call and a stream of new shapes unchanged (docs/performance.md)."""
    with _switch_lock:
        if _switching[0] == 0:
            _switching[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(SWITCH_S, _switching[1]))
        _switching[0] += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switching[0] -= 1
            if _switching[0] == 0:
                sys.setswitchinterval(_switching[1])


def _shapes(args: list) -> tuple:
    """What decides whether jax.jit compiles again for `args` (the statics and the pytree are
    the program's key already): each leaf's shape, dtype and weak type."""
    return tuple((np.shape(x), str(getattr(x, "dtype", type(x))), getattr(x, "weak_type", None))
                 for x in jax.tree_util.tree_leaves(args))


def _placement(args: list) -> tuple:
    """Where jax.jit would run `args`, besides their shapes: the arrays' shardings and jax's
    default device (an executable is compiled for one placement)."""
    return (tuple(getattr(x, "sharding", None) for x in jax.tree_util.tree_leaves(args)),
            getattr(jax.config, "jax_default_device", None))


def _thread_settings() -> list:
    """(state, value) for each of jax's settings that the calling thread has made for itself
    (`with jax.enable_x64(True):`, `jax.default_matmul_precision(...)`, ...): jax keeps them per
    thread, so the compile's thread takes them on, or it would export another program (int64
    inputs as int32 without x64). Empty where jax's config is not as expected."""
    try:
        from jax._src import config
        unset = config.config_ext.unset
        return [(state, value) for state in vars(config).values()
                if isinstance(state, config.State)
                for value in (state.get_local(),) if value is not unset]
    except Exception:       # noqa: BLE001 - then no settings of the caller's are known
        return []


_RUNNING: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()


def _join_at_exit() -> None:
    """Wait for the compiles still running. Called by threading's exit hooks, newest first:
    registered after concurrent.futures' own (imported above), it runs while the compiler
    driver's thread pools still take work; non-daemon threads are joined only after them."""
    for thread in list(_RUNNING):
        if thread.ident:
            thread.join()


try:
    threading._register_atexit(_join_at_exit)      # CPython >= 3.9
except (AttributeError, RuntimeError):      # pragma: no cover - then joined as non-daemons
    pass


def _identity(fun: Callable) -> str:
    """The function's code: module, qualified name, file, line and bytecode (a closure's
    captured values are not in it: two closures of one code share a hint)."""
    target = getattr(fun, "__wrapped__", fun)
    code = getattr(target, "__code__", None) or getattr(
        getattr(target, "__call__", None), "__code__", None)
    parts = [getattr(target, "__module__", ""), getattr(target, "__qualname__",
                                                         type(target).__qualname__)]
    if code is not None:
        parts += [code.co_filename, str(code.co_firstlineno),
                  hashlib.sha256(code.co_code).hexdigest()]
    return "\0".join(map(str, parts))


def _hint_path(fun: Callable, key: Any, config: str) -> str:
    text = "\0".join([__version__, _identity(fun), repr(key), config])
    digest = hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()
    return os.path.join(cache_dir(), "seen", digest[:2], digest)


def seen(fun: Callable, key: Any, config: str) -> bool:
    """Whether this cache directory has compiled this function for this key before."""
    try:
        return os.path.exists(_hint_path(fun, key, config))
    except Exception:       # noqa: BLE001 - a hint only: an odd key or a full disk bridges
        return False


def remember(fun: Callable, key: Any, config: str) -> None:
    """Record a finished compile (an empty file; `jdisc cache clear` removes them)."""
    try:
        path = _hint_path(fun, key, config)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass
    except Exception:       # noqa: BLE001 - a hint only
        pass
