"""Subnormal floats as XLA:CPU has them: flushed to zero in arithmetic (FTZ) and read as zero
(DAZ), while copies keep them; on the calling thread, on the pool's workers and inside an XLA
custom call; the caller's own mode untouched afterwards. JDISC_SUBNORMALS=keep keeps IEEE
gradual underflow. Results are compared with jax.jit bit for bit (signed zeros included), on
both sides of the boundary: the smallest normal, the largest subnormal, the smallest one."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from subprocess_support import run_python


def _edges(dtype) -> np.ndarray:
    tiny = np.finfo(dtype).tiny                       # the smallest normal
    below = np.nextafter(tiny, dtype(0))              # the largest subnormal
    least = np.nextafter(dtype(0), dtype(1))          # the smallest subnormal
    v = [tiny, below, least, tiny / 3, 2 * tiny, 1.0, 0.0]
    return np.array(v + [-x for x in v], dtype)


OPS = {
    "maximum": lambda x: jnp.maximum(x, 0),           # relu: DAZ reads a subnormal as 0
    "scale": lambda x: x * 2,
    "halve": lambda x: x / 4,                         # normal in, subnormal out: flushed
    "compare": lambda x: (x > 0).astype(jnp.int32),
    "difference": lambda x: x - x[::-1],
    "exp": lambda x: jnp.exp(x - 88.5),             # f32: results around 4e-39, subnormal
    "add_zero": lambda x: x + 0.0,                    # XLA folds it: x itself, -0.0 kept
    "copy": lambda x: jnp.concatenate([x[::-1], x]),  # no arithmetic: subnormals stay
    "sum": lambda x: jnp.sum(x * x[::-1]),
    "sign": jnp.sign,                                 # a subnormal is 0: -0.0 or 0.0 as XLA
    "sign_bf16": lambda x: jnp.sign(x.astype(jnp.bfloat16)).astype(x.dtype),
}


def _bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_like_xla_bit_for_bit(name, dtype):
    if name == "exp" and dtype == np.float64:
        pytest.skip("f64 exp is within an ulp of XLA's, not bit for bit (test_ops.py)")
    fn = OPS[name]
    with jax.enable_x64(dtype == np.float64):
        jf = jdisc.jit(fn, dynamic_axes=({0: "n"},))
        for reps in (1, 3):
            x = np.tile(_edges(dtype), reps)
            got, want = jf(x), jax.jit(fn)(x)
            np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{name} {x}")
        assert jf.stats()["compiles"] == 1


def test_the_callers_mode_is_restored():
    jf = jdisc.jit(lambda x: x * 2, dynamic_axes=({0: "n"},))
    tiny = np.finfo(np.float32).tiny
    assert np.asarray(jf(np.full(3, tiny / 4, np.float32)))[0] == 0     # flushed inside
    # numpy's arithmetic on this thread after the call: gradual underflow, as before it
    assert np.float32(tiny) / np.float32(4) != 0
    assert np.multiply(np.full(3, tiny, np.float32), np.float32(0.25))[0] != 0


def test_inside_jax_jit():
    f = jdisc.jit(lambda x: jnp.maximum(x, 0) * 2, dynamic_axes=({0: "n"},))
    x = _edges(np.float32)
    got = jax.jit(lambda x: f(x) + 1.0)(x)           # the custom call on XLA's thread
    want = jax.jit(lambda x: jnp.maximum(x, 0) * 2 + 1.0)(x)
    np.testing.assert_array_equal(_bits(got), _bits(want))


POOL = textwrap.dedent("""
    import os
    import jax, numpy as np
    import jdisc
    tiny = np.finfo(np.float32).tiny
    # a GEMM large enough for the pool (jd_gemm.h): rows of subnormals, whose products sum to
    # tiny / 2 (exact) or, read as zero, to 0; the other rows small integers (exact)
    a = np.resize(np.arange(-3, 4, dtype=np.float32), (999, 64))
    a[::3] = tiny / 128
    b = np.ones((64, 70), np.float32)
    b[:, ::2] = 2.0
    fn = lambda a, b: a @ b
    jf = jdisc.jit(fn, dynamic_axes=({0: "m"}, None))
    got = np.asarray(jf(a, b))
    jobs = jf.compiled_for(a, b).executable.library.handle.jd_pool_jobs()
    keep = os.environ.get("JDISC_SUBNORMALS") == "keep"
    # XLA flushes; with `keep` the reference is exact arithmetic (f64), rounded once
    ref = (a.astype(np.float64) @ b).astype(np.float32) if keep else np.asarray(jax.jit(fn)(a, b))
    same = np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    kept = bool(np.any((got != 0) & (np.abs(got) < tiny)))
    print(jobs > 0, same, kept)
""")


@pytest.mark.parametrize("mode", ["default", "keep"])
def test_on_the_pools_workers_and_as_an_option(mode):
    env = {"JDISC_NUM_THREADS": "3"} | ({"JDISC_SUBNORMALS": "keep"} if mode == "keep" else {})
    proc = run_python(POOL, timeout=240, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pool_used, same, kept = proc.stdout.split()
    assert pool_used == "True", "the loop did not run on the pool"
    assert same == "True", f"{mode}: results differ from the reference"
    assert kept == ("True" if mode == "keep" else "False")
