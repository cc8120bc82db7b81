"""Shared test setup: a private jdisc cache per test session, and differential helpers."""

import atexit
import contextlib
import os
import shutil
import tempfile

import numpy as np
import pytest

os.environ.setdefault("JDISC_CHECK_PLAN", "1")   # every compile's plans are checked (plan_check.py)
os.environ.setdefault("JDISC_VERIFY", "1")       # the IR verified after every pass (verify.py)
# The first call of a program runs jdisc's own program, not jax.jit's (the bridge, bridge.py,
# on by default for users): the differential tests compare jdisc with jax.jit from the first
# call on, whatever the environment says. tests/test_bridge.py tests the default.
os.environ["JDISC_BRIDGE"] = "0"

# Tests never touch the user's cache; one directory per session keeps compiles shared within it.
if "JDISC_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="jdisc-test-cache-")
    os.environ["JDISC_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)


def assert_close(got, want, tol, what=""):
    """max |got - want| <= tol * max(1, max |want|): a relative bound on the output's scale.

    Scale-relative rather than elementwise-relative because outputs such as softmax
    probabilities have many entries near 0, where f32 rounding makes elementwise ratios noise.
    """
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.size == 0:
        return
    if got.dtype.kind in "biu" or tol == 0:
        np.testing.assert_array_equal(got, want, err_msg=what)   # NaNs compare equal here
        return
    if got.dtype.kind == "c":   # NaNs are compared part by part
        got = np.stack([got.real, got.imag], -1)
        want = np.stack([want.real, want.imag], -1)
    both_nan = np.isnan(got) & np.isnan(want)
    assert not (np.isnan(got) ^ np.isnan(want)).any(), f"{what}: NaNs differ"
    # infinities exactly, each where jax has the same one; then left out of the scale and the
    # error (an infinite scale would let every finite difference through)
    inf = np.isinf(want)
    assert (np.isinf(got) == inf).all() and (got[inf] == want[inf]).all(), \
        f"{what}: infinities differ"
    got, want = np.where(both_nan | inf, 0, got), np.where(both_nan | inf, 0, want)
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:.1g} * {scale:.3g}"


# the compile cache in a fresh folder, and C compiler runs counted through a JDISC_CC wrapper
@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("JDISC_CACHE_DIR", str(d))
    monkeypatch.delenv("JDISC_SANITIZE", raising=False)
    return d


@pytest.fixture
def counting_cc(tmp_path, monkeypatch):
    """Point JDISC_CC at a wrapper; returns a function giving the number of compiles so far
    (builds of a library: not `--version`, nor the compiler probes of custom_calls/probe.py)."""
    log = tmp_path / "cc.log"
    script = tmp_path / "cc-wrapper"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -shared "*)\n'
        f'  echo "$$ $*" >> "{log}"\n'
        '  if [ -n "$JDISC_TEST_CC_SLEEP" ]; then sleep "$JDISC_TEST_CC_SLEEP"; fi\n'
        "esac\n"
        'exec cc "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("JDISC_CC", str(script))

    def count() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    return count


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def to_ir(fn, dynamic_axes, *args, constraints=()):
    """The IR jdisc.jit(fn) compiles for these arguments, after every pass (no C compiler)."""
    from jdisc.api import lower_to_ir
    return lower_to_ir(fn, *args, dynamic_axes=dynamic_axes, constraints=constraints)


def compile_cpu_seconds(fn, args, dynamic_axes):
    """CPU seconds of jdisc's own stages for `fn` (after jax.export, before the C compiler),
    best of three, with the garbage collector off. Tests compare two program sizes with it: a
    ratio does not depend on the machine's speed, and a full cycle collection walks every object
    the earlier tests left alive, which would charge the heap's size to the compiler."""
    import gc
    import time
    from jdisc import driver
    from jdisc.export.specs import leaf_specs, normalize_dynamic_axes, positional_names
    names = positional_names(fn, len(args))
    leaves, tree = leaf_specs(args, normalize_dynamic_axes(dynamic_axes, names), names)
    exported = driver.compile(driver.FunctionSource(fn, leaves, tree), "f",
                              until="export").exported
    spent = []
    for _ in range(3):
        gc.collect()
        gc.disable()
        try:
            t = time.thread_time()
            driver.compile(exported, "f", until="c")
            spent.append(time.thread_time() - t)
        finally:
            gc.enable()
    return min(spent)


def assert_compile_linear(make_fn, args, dynamic_axes, depths=(50, 200)):
    """jdisc's compile time grows at most linearly from make_fn(depths[0]) to make_fn(depths[1]):
    the ratio of CPU times stays under twice the ratio of sizes (a linear compiler gives about the
    size ratio or less, fixed costs included; a quadratic one the square, an exponential one
    never finishes)."""
    small, large = (compile_cpu_seconds(make_fn(d), args, dynamic_axes) for d in depths)
    scale = depths[1] / depths[0]
    assert large < 2 * scale * max(small, 0.01), \
        f"depth {depths[0]}: {small:.3f} s, depth {depths[1]}: {large:.3f} s (x{large / max(small, 1e-9):.1f})"


def check_against_jax(fn, dynamic_axes, make_args, sizes, tol=0.0, constraints=()):
    """`differential` at each size n of `sizes` (arguments `make_args(n)`); returns the jdisc
    function and the last arguments."""
    arg_sets = {f"n={n}": make_args(n) for n in sizes}
    jf = differential(fn, dynamic_axes, arg_sets, tol, constraints=constraints)
    return jf, list(arg_sets.values())[-1] if arg_sets else None


def differential(fn, dynamic_axes, arg_sets, tol=0.0, *, constraints=(), what=None):
    """The differential test: jdisc.jit(fn) against jax.jit(fn) on every argument set.

    One jdisc compile serves every set and no XLA compile happens during the jdisc calls;
    outputs are jax.Arrays with jax's pytree structure, dtypes and shapes, each leaf within
    `assert_close(tol)` (`tol` a number, or a function of the expected leaf). `arg_sets`: a
    dict {label: args} or a sequence of argument tuples, all made before anything is counted.
    Returns the jdisc function."""
    import jax
    import jdisc
    if not isinstance(arg_sets, dict):
        arg_sets = {_input_shapes(args): args for args in arg_sets}
    what = what or getattr(fn, "__name__", "fn")
    jf = jdisc.jit(fn, dynamic_axes=dynamic_axes, constraints=constraints)
    outs = []
    with XLA_COMPILES.counting() as seen:
        for args in arg_sets.values():
            outs.append(jf(*args))
    assert seen[0] == 0, f"{what}: {seen[0]} XLA compile(s) during the jdisc calls"
    assert jf.stats()["compiles"] == 1, f"{what}: {jf.stats()}"
    ref = jax.jit(fn)
    for (label, args), got in zip(arg_sets.items(), outs):
        assert_outputs_match(got, ref(*args), tol, f"{what} at {label}")
    return jf


def in_threads(work, n: int) -> list:
    """Run work(0) .. work(n - 1) in n threads at once; the exceptions they raised."""
    import threading
    errors = []

    def run(i):
        try:
            work(i)
        except Exception as err:        # noqa: BLE001 - returned to the test
            errors.append(err)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def assert_outputs_match(got, want, tol, where):
    """jdisc's outputs `got` against jax's `want`: the same pytree, jax.Arrays, each leaf within
    `assert_close(tol)` (`tol` a number or a function of the expected leaf)."""
    import jax
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want), where
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert isinstance(g, jax.Array), f"{where}: a {type(g).__name__}, not a jax.Array"
        assert_close(g, w, tol(w) if callable(tol) else tol, where)


def _input_shapes(args) -> str:
    import jax
    shapes = [np.shape(a) for a in jax.tree_util.tree_leaves(args) if np.ndim(a)][-3:]
    return f"input shapes {shapes}"


_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


class XlaCompileCounter:
    """Counts XLA backend compiles reported through jax.monitoring while enabled (each instance
    registers a listener: the suite shares XLA_COMPILES)."""

    def __init__(self):
        self.count = 0
        self.enabled = False
        import jax.monitoring
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event, duration, **kwargs):
        if self.enabled and event == _BACKEND_COMPILE:
            self.count += 1

    @contextlib.contextmanager
    def counting(self):
        """Yields a one-element list that holds, on exit, the XLA compiles seen inside."""
        seen = [0]
        before, self.enabled = self.count, True
        try:
            yield seen
        finally:
            self.enabled = False
            seen[0] = self.count - before


XLA_COMPILES = XlaCompileCounter()   # shared by every test module that counts
