"""Shared machinery of the fuzz tests (test_fuzz.py): drawing shapes, dynamic axes, sizes and
inputs, and the differential check against jax.jit with one compile per example."""

import os
import warnings

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import jdisc
from conftest import assert_outputs_match

N_FAST = int(os.environ.get("JDISC_FUZZ_EXAMPLES", "12"))
N_SLOW = int(os.environ.get("JDISC_FUZZ_SLOW_EXAMPLES", "150"))
NAMES = ("a", "b")
SIZES = (0, 1, 2, 3, 5, 7)
ULPS4 = {np.dtype(np.float32): 4 * 2.0 ** -23, np.dtype(np.float64): 4 * 2.0 ** -52}
ALL_DTYPES = (np.float32, np.float64, np.int32, np.int8, np.uint8, np.bool_)
NUM_DTYPES = (np.float32, np.float64, np.int32, np.int8, np.uint8)
FLOATS = (np.float32, np.float64)


class SizeZeroRefusal(UserWarning):
    """jdisc raised a JdiscError for a size-0 call that jax.jit runs (recorded, not failed)."""


def fuzz(body):
    """Make a fast test (default run) and a `slow` twin from one property body(data).

    The default run is derandomized, so CI draws the same examples every time (a failure is
    reproducible, not a coin toss); the slow twin explores new random examples each run."""
    def make(n, derandomize):
        return settings(max_examples=n, deadline=None, derandomize=derandomize, database=None,
                        suppress_health_check=[HealthCheck.too_slow,
                                               HealthCheck.filter_too_much])(
            given(data=st.data())(body))
    return make(N_FAST, True), pytest.mark.slow(make(N_SLOW, False))


# -- shapes, sizes and inputs ------------------------------------------------------------------

def draw_shape(data, rmin=1, rmax=4, dmin=0, dmax=7):
    rank = data.draw(st.integers(rmin, rmax), label="rank")
    return [data.draw(st.integers(dmin, dmax)) for _ in range(rank)]


def draw_dynamic(data, shape, candidates=None, nmax=2):
    """Pick one or two axes of `shape` to be dynamic: returns a template (ints and names)."""
    candidates = list(range(len(shape))) if candidates is None else list(candidates)
    k = data.draw(st.integers(1, min(nmax, len(candidates))), label="n dynamic")
    axes = data.draw(st.permutations(candidates), label="dynamic axes")[:k]
    tmpl = list(shape)
    for name, ax in zip(NAMES, sorted(axes)):
        tmpl[ax] = name
    return tmpl


def dyn_axes(*tmpls):
    """dynamic_axes for arguments with these shape templates."""
    return tuple({i: d for i, d in enumerate(t) if isinstance(d, str)} or None for t in tmpls)


def draw_envs(data, first, mins=None):
    """Three assignments name -> size: `first` (the drawn shape) and two more, 0 and 1 among
    the candidates; the call with all sizes nonzero goes first (it triggers the compile)."""
    mins = mins or {}
    names = sorted(first)
    envs = [dict(first)]
    for _ in range(2):
        envs.append({n: data.draw(st.sampled_from([s for s in SIZES if s >= mins.get(n, 0)]
                                                  or [mins[n]]), label=f"size {n}")
                     for n in names})
    envs.sort(key=lambda e: 0 in e.values())
    return envs


def first_env(tmpl_shape_pairs, mins=None):
    env = {}
    for tmpl, shape in tmpl_shape_pairs:
        for t, s in zip(tmpl, shape):
            if isinstance(t, str):
                env[t] = max(s, (mins or {}).get(t, 0))
    return env


def concrete(tmpl, env):
    return tuple(env[d] if isinstance(d, str) else d for d in tmpl)


def values(rng, shape, dtype, kind="normal"):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        if kind == "ties":                       # many equal values: order/stability matters
            return rng.integers(-3, 4, shape).astype(dtype) / 2
        if kind == "unit":
            return rng.uniform(0.5, 1.5, shape).astype(dtype)
        return (2 * rng.standard_normal(shape)).astype(dtype)
    info = np.iinfo(dtype)
    if kind == "ties":
        return rng.integers(max(info.min, -3), min(info.max, 4), shape).astype(dtype)
    x = rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
    if x.size and kind == "extremes":            # wrap-around must match XLA's
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 4))] = rng.choice(
            [info.min, info.max], max(1, flat.size // 4))
    return x


def draw_rng(data):
    return np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))


# -- the differential check ---------------------------------------------------------------------

def check(fn, dynamic_axes, make_args, envs, tol=0.0, constraints=(), x64=False):
    """Compile fn once with jdisc; at each env compare with jax.jit; one compile in all."""
    with jax.enable_x64(x64):
        jf = jdisc.jit(fn, dynamic_axes=dynamic_axes, constraints=constraints, bridge=False)
        ref = jax.jit(fn)
        compiled = False
        for env in envs:
            args = make_args(env)
            try:
                want = ref(*args)
            except Exception:                    # jax itself refuses this size: nothing to compare
                continue
            try:
                got = jf(*args)
            except jdisc.UnsupportedOpError:
                if compiled:
                    raise
                assume(False)                     # not supported yet: not this family's bug
            except jdisc.JdiscError as err:
                if 0 not in env.values():
                    raise
                warnings.warn(SizeZeroRefusal(f"{fn.__name__} {env}: "
                                              f"{type(err).__name__}: {err}"))
                continue
            compiled = True
            assert_outputs_match(got, want, tol, f"{getattr(fn, '__name__', fn)} at {env}")
        assert jf.stats()["compiles"] <= 1


def float_tol(dtype, terms=1):
    dtype = np.dtype(dtype)
    return ULPS4[dtype] * max(1, terms) if dtype.kind == "f" else 0.0
