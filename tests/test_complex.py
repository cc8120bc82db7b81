"""complex64 and complex128 through the pipeline, differential against jax.jit at several
values of every dynamic dim: elementwise ops (on a grid of finite and special values, where
XLA's handling of infinities, NaNs and signed zeros is the reference), conversions,
comparisons, reductions, GEMMs, data movement and packages.

Tolerances: elementwise results are compared normwise, |got - want| <= tol * |want|, with tol
2e-6 for complex64 (about 16 f32 ulps: jdisc's formulas for exp, log, pow, ... are libm's, and
XLA's are its own, so they round differently) and 1e-14 for complex128; where a part is NaN or
infinite the two must agree exactly. Reductions and GEMMs get the usual scale-relative bound
(conftest.assert_close) of their accumulation order.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import assert_close, check_against_jax

TOL = {np.complex64: 2e-6, np.complex128: 1e-14}
SPECIAL = [0.0, -0.0, 1e-30, 0.5, -0.7, 1.0, 3.0, -20.0, 100.0, 1e30, np.inf, -np.inf, np.nan]


def grid(dtype, values=SPECIAL):
    """Every value + value*i over `values`: finite, tiny, huge, infinite, NaN, signed zeros."""
    re, im = np.meshgrid(values, values)
    z = np.empty(re.size, dtype)
    z.real, z.imag = re.reshape(-1), im.reshape(-1)
    return z


def assert_same_values(got, want, tol, what):
    """Part by part: both NaN, or equal (infinities, signed zeros' values), or within
    tol * |want| normwise (`tol` may be an array), or both below the smallest normal number
    (XLA:CPU flushes denormal results to zero)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    with np.errstate(invalid="ignore"):
        diff = np.abs(got.astype(np.complex128) - want)
    tiny = np.finfo(got.real.dtype).tiny if got.dtype.kind in "fc" else 0
    close = (diff <= tol * np.abs(want)) | (diff <= tiny)
    parts = [(got.real, want.real), (got.imag, want.imag)] if got.dtype.kind == "c" else \
        [(got, want)]
    same = np.ones(got.shape, bool)
    for g, w in parts:
        same &= (np.isnan(g) & np.isnan(w)) | (g == w)
    bad = np.nonzero(~(same | close))[0]
    assert bad.size == 0, f"{what}: {bad.size} differ, e.g. at {bad[:3]}: {got[bad[:3]]} " \
                          f"vs XLA {want[bad[:3]]}"


UNARY = {
    "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": jax.lax.rsqrt, "sin": jnp.sin,
    "cos": jnp.cos, "tan": jnp.tan, "tanh": jnp.tanh, "log1p": jnp.log1p, "expm1": jnp.expm1,
    "abs": jnp.abs, "sign": jnp.sign, "sigmoid": jax.nn.sigmoid, "negative": jnp.negative,
    "conj": jnp.conj, "real": jnp.real, "imag": jnp.imag, "angle": jnp.angle,
    "square": jnp.square, "reciprocal": jnp.reciprocal, "isnan": jnp.isnan,
    "isfinite": jnp.isfinite, "isinf": jnp.isinf,
}
BINARY = {
    "add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply,
    "divide": jnp.divide, "power": jax.lax.pow, "equal": jnp.equal, "not_equal": jnp.not_equal,
}


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_elementwise_ops_on_special_values(dtype):
    # one program for every op (one compile), called at several lengths of the grid
    x64 = dtype == np.complex128
    with jax.enable_x64(x64):
        z = grid(dtype)
        # 1e30 is left out of the second operand of divide and power: XLA's f32 formulas
        # overflow inside (e.g. (inf+0.5i) / (1e-30+1e30i) is NaN+inf i in XLA, inf-inf i here)
        w = grid(dtype, [v for v in SPECIAL if v != 1e30])
        w = np.resize(w[::-1], z.shape)
        # z ** w rounds like exp(w log z): its error grows with |w log z|
        with np.errstate(all="ignore"):
            exponent = np.nan_to_num(np.abs(w * np.log(np.abs(z))), posinf=0)

        def every_op(z, w):
            return ({name: fn(z) for name, fn in UNARY.items()},
                    {name: fn(z, w) for name, fn in BINARY.items()})
        jf = jdisc.jit(every_op, dynamic_axes=({0: "n"}, {0: "n"}))
        for n in (0, 1, z.size):
            got, want = jf(z[:n], w[:n]), jax.jit(every_op)(z[:n], w[:n])
            for name in UNARY:
                assert_same_values(got[0][name], want[0][name], TOL[dtype], f"{name} n={n}")
            for name in BINARY:
                tol = TOL[dtype] * (np.maximum(1, exponent[:n]) if name == "power" else 1)
                assert_same_values(got[1][name], want[1][name], tol, f"{name} n={n}")
        assert jf.stats()["compiles"] == 1


def crandn(rng, shape, dtype=np.complex64):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


TRANSCENDENTAL = {
    "arcsin": jnp.arcsin, "arccos": jnp.arccos, "arctan": jnp.arctan, "sinh": jnp.sinh,
    "cosh": jnp.cosh, "arcsinh": jnp.arcsinh, "arccosh": jnp.arccosh, "arctanh": jnp.arctanh,
    "log10": jnp.log10, "log2": jnp.log2, "exp2": jnp.exp2,
    "power_int": lambda z: z ** 3, "power_real": lambda z: z ** 0.5,
}


@pytest.mark.parametrize("name", sorted(TRANSCENDENTAL))
def test_jnp_functions_built_from_complex_ops(rng, name):
    fn = TRANSCENDENTAL[name]
    for dtype in (np.complex64, np.complex128):
        with jax.enable_x64(dtype == np.complex128):
            check_against_jax(fn, ({0: "n"},), lambda n: (crandn(rng, (n, 3), dtype),),
                              [0, 1, 5, 97], tol=20 * TOL[dtype])


def test_conversions_to_and_from_every_dtype(rng):
    with jax.enable_x64(True):
        for dt in (np.float16, jnp.bfloat16, np.float32, np.float64, np.int8, np.int32,
                   np.int64, np.uint8, np.uint32, np.bool_):
            for cdt in (np.complex64, np.complex128):
                # complex -> real keeps the real part, as XLA does (jax warns about it)
                fn = lambda z, x: (jax.lax.convert_element_type(z, dt),
                                   x.astype(cdt), z.astype(np.complex128).astype(np.complex64))
                check_against_jax(
                    fn, ({0: "n"}, {0: "n"}),
                    lambda n: (crandn(rng, (n,), cdt) * 50,
                               (rng.standard_normal(n) * 50).astype(dt)),
                    [0, 1, 13])


def test_complex_from_parts_and_where(rng):
    def fn(a, b, z):
        c = jax.lax.complex(a, b)
        return c, jnp.where(a > 0, z, c), c == z, jnp.where(z != 0, z, 1j)
    check_against_jax(fn, ({0: "n"}, {0: "n"}, {0: "n"}),
                      lambda n: (rng.standard_normal(n).astype(np.float32),
                                 rng.standard_normal(n).astype(np.float32),
                                 crandn(rng, (n,))), [0, 1, 7, 100])


def test_complex_constants_of_every_shape(rng):
    table = crandn(rng, (5, 3))

    def fn(z):
        big = jnp.asarray(np.arange(3000).astype(np.complex64) * (1 - 2j))   # the data section
        return (z * table[None] + jnp.complex64(2 - 1j), z.sum() + big[:3].sum(),
                jnp.full((2,), np.nan + 2j, np.complex64) + z[0, 0, 0])
    check_against_jax(fn, ({0: "n"},), lambda n: (crandn(rng, (n, 5, 3)),), [1, 2, 9], tol=1e-5)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_reductions(rng, dtype):
    def fn(z):
        return (z.sum(0), z.sum(1), jnp.prod(z[:, :4] * 0.5, 1), z.mean(), jnp.cumsum(z, 0),
                jnp.abs(z).max(1), jnp.linalg.norm(z, axis=1), jnp.vdot(z, z))
    with jax.enable_x64(dtype == np.complex128):
        check_against_jax(fn, ({0: "n"},), lambda n: (crandn(rng, (n, 6), dtype),),
                          [0, 1, 5, 64], tol=1e-5 if dtype == np.complex64 else 1e-12)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_matmul_and_einsum(rng, dtype):
    def fn(a, b, x):
        return a @ b, jnp.einsum("bij,bjk->bik", x, x), a @ b.real.astype(dtype), a.T @ a.conj()
    with jax.enable_x64(dtype == np.complex128):
        check_against_jax(fn, ({0: "m"}, None, {0: "b", 1: "k", 2: "k"}),
                          lambda n: (crandn(rng, (n, 8), dtype), crandn(rng, (8, 5), dtype),
                                     crandn(rng, (2, n, n), dtype)),
                          [0, 1, 3, 40], tol=1e-5 if dtype == np.complex64 else 1e-12)


def test_data_movement(rng):
    def fn(z, idx):
        return (z.T, z[::-1, 1:], jnp.pad(z, 1), jnp.concatenate([z, z * 1j]), z[idx],
                z.at[idx].add(1j), jnp.sort(z, axis=0), jnp.argsort(z[:, 0]),
                jnp.roll(z, 1, 0), jnp.broadcast_to(z[:, None], (z.shape[0], 2, 4)))
    check_against_jax(fn, ({0: "n"}, {0: "k"}),
                      lambda n: (np.round(crandn(rng, (n, 4))), rng.integers(0, n, n) if n
                                 else np.zeros(0, np.int64)),
                      [1, 2, 17])


def test_package_round_trip(tmp_path, rng):
    fn = lambda z, x: (z * x, jnp.abs(z))
    z, x = crandn(rng, (5,)), rng.standard_normal(5).astype(np.float32)
    path = tmp_path / "m.jdisc"
    jdisc.export_package(fn, z, x, dynamic_axes=({0: "n"}, {0: "n"})).save(path)
    loaded = jdisc.load(path)
    for n in (0, 1, 7):
        z, x = crandn(rng, (n,)), rng.standard_normal(n).astype(np.float32)
        for g, w in zip(loaded(z, x), fn(z, x)):
            assert_close(g, w, 1e-6)
