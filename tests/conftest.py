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
    both_nan = np.isnan(got) & np.isnan(want)
    assert not (np.isnan(got) ^ np.isnan(want)).any(), f"{what}: NaNs differ"
    got, want = np.where(both_nan, 0, got), np.where(both_nan, 0, want)
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


def check_against_jax(fn, dynamic_axes, make_args, sizes, tol=0.0, constraints=()):
    """jdisc.jit(fn) against jax.jit(fn) at each size (one compile for all); returns the jdisc
    function and the last arguments."""
    import jax
    import jdisc
    jf = jdisc.jit(fn, dynamic_axes=dynamic_axes, constraints=constraints)
    args = None
    for n in sizes:
        args = make_args(n)
        jax.tree_util.tree_map(lambda g, w: assert_close(g, w, tol, f"n={n}"),
                               jf(*args), jax.jit(fn)(*args))
    assert jf.stats()["compiles"] == 1
    return jf, args


_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


class XlaCompileCounter:
    """Counts XLA backend compiles reported through jax.monitoring while enabled (one instance
    per test module: each registers one listener)."""

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
