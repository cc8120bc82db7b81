"""jdisc.jit(..., bridge=True): the first call starts jdisc's compile in the background and is
served by jax.jit at its exact shape; once jdisc's program is ready every call runs it."""

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import XLA_COMPILES as _XLA, assert_close, in_threads


def _wait_ready(f, x, timeout=300):
    t0 = time.monotonic()
    while not all(b.thread.ident and b.done() for b in f._bridges.values()) and \
            time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    f(x)                        # collects the finished compile


def test_bridged_calls_then_jdisc():
    g = lambda x: jnp.tanh(x) * jnp.sum(x, axis=-1, keepdims=True)
    f = jdisc.jit(g, dynamic_axes=({0: "b"},), bridge=True)
    xs = [np.linspace(-1, 1, 3 * n, dtype=np.float32).reshape(n, 3) for n in (1, 2, 5, 13)]
    assert_close(f(xs[0]), jax.jit(g)(xs[0]), 1e-6)          # served by jax.jit or jdisc
    _wait_ready(f, xs[0])
    assert f.stats()["compiles"] == 1 and not f._bridges
    _XLA.count, _XLA.enabled = 0, True
    try:
        outs = [f(x) for x in xs]
    finally:
        _XLA.enabled = False
    assert _XLA.count == 0                                    # jdisc's program from now on
    for x, y in zip(xs, outs):
        assert_close(y, jax.jit(g)(x), 1e-6)
    assert f.stats()["calls"] == 2 + len(xs)


def _slow_c_compiler(monkeypatch, seconds):
    """Every C compile of jdisc's takes `seconds` more, and the compile's estimate of what is
    left of it (runs.reporting, which the bridge reads) says so."""
    from jdisc.custom_calls import compiler
    real = compiler._build

    def slow(*a, **k):
        time.sleep(seconds)
        return real(*a, **k)
    monkeypatch.setattr(compiler, "_build", slow)
    monkeypatch.setattr(compiler, "LINK_S", compiler.LINK_S + seconds)


def test_first_call_does_not_wait_for_the_c_compiler(monkeypatch):
    # a slow C compiler does not delay the call
    g = lambda x: x * 3 + 1
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    _slow_c_compiler(monkeypatch, 2.0)
    x = np.arange(4, dtype=np.float32)
    t0 = time.monotonic()
    assert_close(f(x), x * 3 + 1, 0)
    assert time.monotonic() - t0 < 1.5 and f.stats()["bridged_calls"] == 1
    assert f.compiled_for(x).program is not None              # waits for the compile
    assert_close(f(x), x * 3 + 1, 0)
    assert f.stats()["compiles"] == 1


def test_calls_while_jdisc_compiles_do_not_wait_for_it(monkeypatch, cache):
    # a loop over one shape keeps going on jax.jit's executable while jdisc compiles (no XLA
    # compile more), a new shape gets a quick XLA compile of its own, and jdisc serves every
    # call once its program is ready
    g = lambda x: jnp.cos(x) * 2 - 1
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    _slow_c_compiler(monkeypatch, 3.0)
    x, y = np.linspace(0, 1, 7, dtype=np.float32), np.linspace(0, 1, 11, dtype=np.float32)
    t0 = time.monotonic()
    with _XLA.counting() as first:
        for _ in range(5):
            assert_close(f(x), np.cos(x) * 2 - 1, 1e-6)
    with _XLA.counting() as new:
        for _ in range(3):
            assert_close(f(y), np.cos(y) * 2 - 1, 1e-6)
    assert time.monotonic() - t0 < 2.0          # none waited for the 3-second compile
    assert first[0] == 1 and new[0] == 1 and f.stats()["bridged_calls"] == 8 and f._bridges
    _wait_ready(f, x)
    with _XLA.counting() as after:
        for z in (x, y, np.linspace(0, 1, 5, dtype=np.float32)):
            assert_close(f(z), np.cos(z) * 2 - 1, 1e-6)
    assert after[0] == 0 and f.stats()["bridged_calls"] == 8 and f.stats()["compiles"] == 1
    assert not f._bridges


def test_a_new_shape_waits_where_jdisc_should_be_ready_before_an_xla_compile(monkeypatch,
                                                                             cache):
    # the compile's estimate of what is left of it against the first call's XLA compile
    from jdisc import bridge
    real = bridge._quick_compile

    def slow(lowered):
        time.sleep(1.0)
        return real(lowered)
    monkeypatch.setattr(bridge, "_quick_compile", slow)
    g = lambda x: jnp.cos(x) + x
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    x, y = np.linspace(0, 1, 7, dtype=np.float32), np.linspace(0, 1, 12, dtype=np.float32)
    with _XLA.counting() as seen:
        assert_close(f(x), np.cos(x) + x, 1e-6)
        assert_close(f(y), np.cos(y) + y, 1e-6)     # waits: no XLA compile for it
    assert seen[0] == 1 and f.stats()["bridged_calls"] == 1 and f.stats()["compiles"] == 1


def test_no_race_after_a_first_compile_that_hit_a_cache_of_jax(monkeypatch, cache):
    # such a compile says nothing of what an XLA compile costs: a new shape waits for jdisc
    from jdisc import bridge
    monkeypatch.setattr(bridge, "CACHE_HIT_S", 1e9)
    g = lambda x: jnp.sin(x) * x
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    _slow_c_compiler(monkeypatch, 1.0)
    x, y = np.linspace(0, 1, 7, dtype=np.float32), np.linspace(0, 1, 12, dtype=np.float32)
    with _XLA.counting() as seen:
        assert_close(f(x), np.sin(x) * x, 1e-6)
        assert_close(f(y), np.sin(y) * y, 1e-6)
    assert seen[0] == 1 and f.stats()["bridged_calls"] == 1 and f.stats()["compiles"] == 1


def test_the_interpreter_switches_threads_often_while_a_compile_runs(monkeypatch, cache):
    # a bridged call takes the GIL a few times, and each time waited up to the switch
    # interval (5 ms) for the compile's Python; the interval is short while a compile runs
    # in the background, and what it was once none does
    import sys
    from jdisc import bridge
    before = sys.getswitchinterval()
    g = lambda x: jnp.sin(x) - 1
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    _slow_c_compiler(monkeypatch, 2.0)
    x = np.linspace(0, 1, 6, dtype=np.float32)
    assert_close(f(x), np.sin(x) - 1, 1e-6)
    t0 = time.monotonic()
    while sys.getswitchinterval() != bridge.SWITCH_S and time.monotonic() - t0 < 1.5:
        time.sleep(0.01)        # the compile's thread starts once the call's results are in
    assert f._bridges and sys.getswitchinterval() == bridge.SWITCH_S
    _wait_ready(f, x)
    assert not f._bridges and sys.getswitchinterval() == before


def test_bad_arguments_fail_at_the_first_call():
    f = jdisc.jit(lambda x: x + 1, dynamic_axes=({3: "n"},), bridge=True)
    with pytest.raises(jdisc.ShapeError, match="names axis 3, but the argument has rank 1"):
        f(np.ones(3, np.float32))


def test_a_failed_background_compile_raises_or_falls_back():
    g = lambda x: (x.astype(jnp.int4) * 2).astype(jnp.float32)   # i4: not supported
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    x = np.ones(8, np.float32)
    with pytest.raises(jdisc.UnsupportedOpError):
        f(x)
        f.compiled_for(x)
    fb = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True, fallback="xla")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fb(x)
        assert fb.compiled_for(x) is not None
        assert_close(fb(x), jax.jit(g)(x), 0)
    assert fb.stats()["fallbacks"] == 1


def test_the_bridge_is_the_default_unless_turned_off(monkeypatch):
    g = lambda x: x + 1
    monkeypatch.delenv("JDISC_BRIDGE", raising=False)
    assert jdisc.jit(g).bridge and not jdisc.jit(g, bridge=False).bridge
    monkeypatch.setenv("JDISC_BRIDGE", "0")
    assert not jdisc.jit(g).bridge and jdisc.jit(g, bridge=True).bridge


def test_a_new_shape_the_program_would_refuse_waits_for_jdisc(monkeypatch, cache):
    # jax.jit would run these calls; jdisc's program refuses them, and so does the bridge: a
    # static axis of another size, a size no dim expression fits, a broken constraint
    g = lambda x, y: jnp.sum(x, axis=1) + y[::2]
    f = jdisc.jit(g, dynamic_axes=({0: "n"}, {0: "2*n"}), constraints=("n <= 50",),
                  bridge=True)
    _slow_c_compiler(monkeypatch, 1.0)
    x, y = np.ones((3, 4), np.float32), np.arange(6, dtype=np.float32)
    assert_close(f(x, y), jax.jit(g)(x, y), 0)
    with _XLA.counting() as seen:
        for bad, why in [((np.ones((3, 5), np.float32), y), "expected 4"),
                         ((x, np.arange(7, dtype=np.float32)), "expected 2"),
                         ((np.ones((60, 4), np.float32), np.ones(120, np.float32)),
                          "constraint")]:
            with pytest.raises(jdisc.ShapeError, match=why):
                f(*bad)
    assert seen[0] == 0 and f.stats()["bridged_calls"] == 1 and f.stats()["compiles"] == 1


def test_the_bridge_runs_a_bounded_number_of_shapes(monkeypatch, cache):
    from jdisc import bridge
    monkeypatch.setattr(bridge, "MAX_SHAPES", 3)
    g = lambda x: jnp.tanh(x) * jnp.sum(x, axis=-1, keepdims=True)
    f = jdisc.jit(g, dynamic_axes=({0: "b"},), bridge=True)
    _slow_c_compiler(monkeypatch, 2.0)
    xs = [np.linspace(-1, 1, 3 * n, dtype=np.float32).reshape(n, 3) for n in (2, 0, 1, 7, 2)]
    with _XLA.counting() as seen:
        outs = [f(x) for x in xs]
    assert seen[0] == 3                 # 2, 0, 1 with XLA; 7 waits for jdisc, 2 runs jdisc's
    assert f.stats()["bridged_calls"] == 3 and f.stats()["compiles"] == 1
    for x, y in zip(xs, outs):
        assert isinstance(y, jax.Array)
        assert_close(y, jax.jit(g)(x), 1e-6)


def test_a_new_shape_takes_jdisc_when_its_program_is_ready_first(monkeypatch, cache):
    # the bridge's XLA compile for a new shape races jdisc's compile: the call never waits
    # longer than the wait for jdisc alone
    from jdisc import bridge
    real, slow = bridge._quick_compile, []

    def slow_after_first(lowered):
        if slow:
            time.sleep(3.0)
        slow.append(1)
        return real(lowered)
    monkeypatch.setattr(bridge, "_quick_compile", slow_after_first)
    g = lambda x: jnp.sin(x) + 2
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    _slow_c_compiler(monkeypatch, 0.5)
    x, y = np.ones(5, np.float32), np.linspace(0, 1, 9, dtype=np.float32)
    assert_close(f(x), np.sin(x) + 2, 1e-6)
    t0 = time.monotonic()
    assert_close(f(y), np.sin(y) + 2, 1e-6)
    assert time.monotonic() - t0 < 2.5
    assert f.stats()["bridged_calls"] == 1 and f.stats()["compiles"] == 1 and not f._bridges


def test_a_first_call_inside_a_trace_is_not_bridged(cache):
    g = lambda x: x * 2 + 1
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    x = np.arange(5, dtype=np.float32)
    assert_close(jax.jit(lambda v: f(v) - 1)(x), x * 2, 0)
    assert f.stats().get("bridged_calls", 0) == 0 and f.stats()["compiles"] == 1


def test_a_function_compiled_before_in_this_cache_is_not_bridged(cache):
    # its compile is then mostly a cache hit, cheaper than an XLA compile: no bridge
    def g(x):
        return jnp.cos(x) + 3
    x = np.arange(6, dtype=np.float32)
    first = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    first(x)
    first.compiled_for(x)
    again = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    assert_close(again(x), np.cos(x) + 3, 1e-6)
    assert again.stats().get("bridged_calls", 0) == 0
    assert again.stats()["compiles"] == 1 and again.stats()["cache_hits"] == 1
    other = jdisc.jit(g, dynamic_axes=({0: "m"},), bridge=True)   # another configuration
    other(x)
    assert other.stats()["bridged_calls"] == 1
    other.compiled_for(x)


def test_a_process_that_exits_during_the_compile_exits_cleanly(tmp_path):
    # regression: the compile thread was a daemon, killed inside jaxlib at exit, and the
    # process aborted (exit code 134, "terminate called ..."). The exit now waits for the
    # compile, so the next process finds the program in the cache and is not bridged.
    import subprocess
    import sys
    code = ("import numpy as np, jax.numpy as jnp, jdisc\n"
            "def g(x):\n    return jnp.tanh(x) * 2\n"
            "f = jdisc.jit(g, dynamic_axes=({0: 'n'},))\n"
            "y = f(np.ones(5, np.float32))\n"
            "print(f.stats().get('bridged_calls', 0), f.stats()['compiles'])\n")
    env = dict(__import__("os").environ, JDISC_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("JDISC_BRIDGE", None)       # the default, as users get it
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for proc in runs:
        assert proc.returncode == 0 and "terminate" not in proc.stderr, proc.stderr
    assert runs[0].stdout.split() == ["1", "0"]      # bridged; compiled after the call
    assert runs[1].stdout.split() == ["0", "1"]      # compiled before: a cache hit, no bridge


def test_two_threads_make_the_first_calls_at_once(cache):
    # one call is bridged, the other runs on the bridge too or waits for the compile; both
    # get the right answer
    g = lambda x: jnp.sin(x) * 3
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    xs = [np.linspace(0, 1, n, dtype=np.float32) for n in (5, 9)]
    outs = [None, None]

    def work(i):
        outs[i] = f(xs[i])
    errors = in_threads(work, 2)
    assert not errors, errors
    for x, y in zip(xs, outs):
        assert_close(y, np.sin(x) * 3, 1e-6)
    _wait_ready(f, xs[0])
    assert f.stats()["compiles"] == 1 and 1 <= f.stats()["bridged_calls"] <= 2


def test_the_background_compile_takes_the_callers_x64_mode(cache):
    # regression: jax.enable_x64 is per thread, and the compile's thread exported int64 inputs
    # as int32 (a bitcast to int32 then had the wrong shape at every later call)
    def fn(x):
        return jax.lax.bitcast_convert_type(x, jnp.int32), x * 3
    with jax.enable_x64(True):
        f = jdisc.jit(fn, dynamic_axes=({0: "n"},), bridge=True)
        for n in (3, 0, 1, 5):
            x = np.arange(n, dtype=np.int64) - 2
            for got, want in zip(f(x), jax.jit(fn)(x)):
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        _wait_ready(f, x)
        for n in (3, 0, 1, 5, 2):           # jdisc's program, exported with int64 inputs
            x = np.arange(n, dtype=np.int64) - 2
            for got, want in zip(f(x), jax.jit(fn)(x)):
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert f.stats()["bridged_calls"] >= 1 and f.stats()["compiles"] == 1


@pytest.mark.parametrize("axes, constraints, match", [
    ({0: "_"}, (), "argument 'x' axis 0"),
    ({0: "n"}, ("n < 3 +",), "invalid dimension names or constraints"),
])
def test_bad_dimension_names_and_constraints_fail_at_the_first_call(axes, constraints, match):
    # they are the arguments' errors: checked before the call goes to jax.jit
    f = jdisc.jit(lambda x: x + 1, dynamic_axes=(axes,), constraints=constraints, bridge=True)
    with pytest.raises(jdisc.ArgumentError, match=match):
        f(np.ones(3, np.float32))
    assert f.stats().get("bridged_calls", 0) == 0


@pytest.mark.parametrize("axes, constraints, sizes", [
    ({0: "n"}, ("n >= 4",), (2, 5)),
    ({0: "8*k"}, (), (9, 16)),
    ({0: "n"}, ("n % 8 == 0",), (12, 8)),
    ({0: "2*h + 1"}, ("h <= 3",), (9, 7)),
])
def test_a_first_call_the_program_refuses_is_refused_as_without_the_bridge(
        axes, constraints, sizes, cache):
    # regression: the bridge ran such a first call with jax.jit and returned its result, and a
    # call at the same size failed once the program was compiled. Now the bridge serves only
    # sizes known to meet the dims and constraints; the others go to the program's check.
    bad, good = sizes
    f = jdisc.jit(lambda x: x * 2, dynamic_axes=(axes,), constraints=constraints, bridge=True)
    with pytest.raises(jdisc.ShapeError):
        f(np.ones(bad, np.float32))
    assert f.stats().get("bridged_calls", 0) == 0 and f.stats()["compiles"] == 1
    with pytest.raises(jdisc.ShapeError):
        f(np.ones(bad, np.float32))
    assert_close(f(np.ones(good, np.float32)), np.full(good, 2, np.float32), 0)
    g = jdisc.jit(lambda x: x * 3, dynamic_axes=(axes,), constraints=constraints, bridge=True)
    assert_close(g(np.ones(good, np.float32)), np.full(good, 3, np.float32), 0)
    assert g.stats()["bridged_calls"] == 1          # a size that meets them is bridged
    g.compiled_for(np.ones(good, np.float32))


def test_the_bridge_compiles_quickly_and_by_default_where_xla_lacks_the_option(monkeypatch,
                                                                            cache):
    # the bridge's one XLA compile takes QUICK_OPTIONS (it serves a call or a few while jdisc
    # compiles); an XLA that refuses them compiles with its defaults, and the call is right
    from jdisc import bridge
    seen = []
    real = jax.stages.Lowered.compile

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("compiler_options", args[0] if args else None))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(jax.stages.Lowered, "compile", spy)
    x = np.linspace(-2, 2, 9, dtype=np.float32)
    g = lambda x: jnp.sin(x) * 2 + jnp.exp(x)
    f = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True)
    assert_close(f(x), jax.jit(g)(x), 1e-6)
    assert f.stats()["bridged_calls"] == 1 and seen[0] == bridge.QUICK_OPTIONS
    f.compiled_for(x)
    seen.clear()
    monkeypatch.setattr(bridge, "QUICK_OPTIONS", {"xla_no_such_option": 1})
    h = lambda x: jnp.cos(x) - x
    f = jdisc.jit(h, dynamic_axes=({0: "n"},), bridge=True)
    assert_close(f(x), jax.jit(h)(x), 1e-6)
    assert f.stats()["bridged_calls"] == 1 and seen[:2] == [{"xla_no_such_option": 1}, None]
    f.compiled_for(x)


_PLACEMENTS = r"""
import time
import jax, jax.numpy as jnp, numpy as np, jdisc
from jdisc.custom_calls import compiler
real = compiler._build
def slow(*a, **k):             # the compile outlasts the calls below: the bridge serves them
    time.sleep(3)
    return real(*a, **k)
compiler._build, compiler.LINK_S = slow, compiler.LINK_S + 3
d = jax.devices()
assert len(d) == 2, d
g = lambda x: jnp.sin(x) * 2
f, xf = jdisc.jit(g, dynamic_axes=({0: "n"},), bridge=True), jax.jit(g)
a = np.linspace(0, 1, 8, dtype=np.float32)
calls = [(None, jax.device_put(a, d[0])), (None, jax.device_put(a, d[1])),
         (jax.default_device(d[1]), a), (None, a)]
def call_all():
    for ctx, x in calls:
        if ctx is None:
            got, want = f(x), xf(x)
        else:
            with ctx:
                got, want = f(x), xf(x)
        assert got.devices() == want.devices(), (got.devices(), want.devices())
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
call_all()
# every call ran on the bridge: the second and third with a quick XLA compile for their
# placement, the numpy array's (not the first call's argument kind) with one of its own
assert f.stats()["bridged_calls"] == 4 and f.stats()["compiles"] == 0, f.stats()
while f._bridges and not all(b.done() for b in f._bridges.values()):
    time.sleep(0.05)
call_all()              # jdisc's program places its results as jax.jit does too
assert f.stats()["bridged_calls"] == 4 and f.stats()["compiles"] == 1, f.stats()
print("ok")
"""


def test_bridged_calls_at_the_first_shape_run_where_jax_jit_would(cache):
    # regression: a call at the first call's shape with its array on another device ran the
    # first call's executable, compiled for the first device, and raised a ValueError
    from subprocess_support import run_python
    proc = run_python(_PLACEMENTS, XLA_FLAGS="--xla_force_host_platform_device_count=2",
                      JDISC_CACHE_DIR=str(cache))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
