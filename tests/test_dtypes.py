"""f16/bf16, integer bit operations and conversions: jdisc.jit against jax.jit (XLA:CPU), each
compiled once with a dynamic axis and run at several sizes.

Tolerances, and why (measured with jax 0.10.2 on x86-64):
* Integers, conversions, compares, selects, max/min: bit-exact.
* f16/bf16 arithmetic: XLA:CPU computes each op in f32 and rounds the result to the 16-bit type
  (round to nearest even); jdisc does the same, so ops whose f32 result is correctly rounded
  (add, sub, mul, div, sqrt, ...) are bit-exact. exp/tanh/log use f32 implementations that
  differ from XLA's by an f32 ulp or two, which changes the 16-bit result only when the f32
  result sits on a rounding boundary: allowed 1 ulp of the 16-bit type (measured: 0).
* bf16 results below 2^-126 compare as zeros: XLA:CPU's arithmetic flushes them (it runs with
  FTZ/DAZ), jdisc keeps them, as it does for f32 (bf16 conversions, bit moves, are exact).
* f16 softmax: XLA rewrites `e / broadcast(sum)` into `e * (1/sum rounded to f16)`; jdisc
  divides (correctly rounded), so 1 ulp (measured: 1 ulp in ~40% of elements; bf16: 0).
* jnp.sum of f16/bf16 accumulates in f32 (jax converts before the reduce); both round one f32
  sum whose order differs: 1 ulp (measured: 0). A reduce whose body adds f16/bf16 itself
  rounds after every step in XLA and in jdisc, in different orders past ~24 elements: exact
  for data whose partial sums are exact, else within the recursive-summation bound.
* dot_general of f16/bf16: f32 accumulation, one rounding (as XLA): 1 ulp (measured: 0) for
  the short sums of test_half_dot_accumulates_in_f32. Since 2026-12-07 jdisc sums with an f32
  GEMM (OpenBLAS's order, not XLA's), so longer sums differ by the f32 rounding of two orders
  (k * 2^-24 * sum |a b|) before the one rounding: test_half_gemms_run_as_f32_gemms.

Elementwise checks run XLA once on the whole data and jdisc on subsets of it (`check_rows`):
XLA compiles once per shape and would otherwise dominate the file's run time.
"""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import jdisc

SIZES = (1, 7, 33)
HALVES = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                              np.uint8, np.uint16, np.uint32, np.uint64)]
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def leaves(tree):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def assert_bits(got, want, what=""):
    """Same dtype, shape and bytes (NaN payloads included)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    u = _UINT[got.dtype.itemsize] if got.dtype != np.bool_ else np.bool_
    bad = got.view(u) != want.view(u)
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ, e.g. "
                           f"{got[bad][:4]} vs {want[bad][:4]}")


def flush_subnormals(a):
    """bf16 values below 2^-126 as signed zeros (see the module docstring)."""
    if a.dtype != HALVES[1]:
        return a
    bits = a.view(np.uint16)
    return np.where((bits & 0x7f80) == 0, bits & 0x8000, bits).astype(np.uint16).view(a.dtype)


def half_ulps(got, want, what="") -> int:
    """Largest distance in units of the last place of a 16-bit float array; NaN must match NaN
    (any payload); bf16 subnormals count as zeros."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    got, want = flush_subnormals(got), flush_subnormals(want)
    gn, wn = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    assert (gn == wn).all(), f"{what}: NaN at different places: {got} vs {want}"

    def ordered(a):
        b = a.view(np.uint16).astype(np.int32)
        return np.where(b & 0x8000, 0x8000 - b, b)
    d = np.abs(ordered(got) - ordered(want))[~gn]
    return int(d.max()) if d.size else 0


def check_rows(fn, args, rng, compare=assert_bits, x64=False):
    """fn must be elementwise along axis 0 of every argument and result (all of one length L,
    one dynamic dim): jdisc runs on rows picked at random (SIZES of them) and on all L rows,
    compared (`compare(got, want, what)`) with one jax.jit run over all L rows."""
    with jax.enable_x64(x64):
        jf = jdisc.jit(fn, dynamic_axes=({0: "n"},) * len(args))
        want = leaves(jax.jit(fn)(*args))
        for n in SIZES + (None,):
            rows = slice(None) if n is None else rng.integers(0, len(args[0]), n)
            for k, (g, w) in enumerate(zip(leaves(jf(*[a[rows] for a in args])), want)):
                compare(g, w[rows], f"output {k} ({w.dtype}), n={n or len(args[0])}")
        assert jf.stats()["compiles"] == 1


def half_values(dt, n, rng, specials=True):
    """n values of a 16-bit float type: special values first, then random ones."""
    dt = np.dtype(dt)
    fin = float(ml_dtypes.finfo(dt).max)
    sp = [0.0, -0.0, np.inf, -np.inf, np.nan, fin, -fin, 1.0, -2.5, 1e-3]
    if dt == np.float16:
        sp += [6e-8, -3e-6, 6.1e-5]   # subnormals (bf16's sit where XLA flushes to zero)
    vals = rng.standard_normal(n) * 3
    if specials:
        vals[:min(n, len(sp))] = sp[:n]
    return vals.astype(dt)


def fit(arrays, n):
    """Each array repeated or cut to length n (so they can share one dynamic dim)."""
    return [np.resize(a, n) for a in arrays]


# ------------------------------------------------------------------------------ f16 / bf16

@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
def test_half_elementwise(dt, rng):
    names = ["add", "sub", "mul", "div", "scaled", "max", "min", "neg", "abs", "sqrt", "floor",
             "sign", "clamp", "where", "exp", "tanh", "log"]

    def fn(x, y):
        return [x + y, x - y, x * y, x / y, x * 1.5 - y / 2, jnp.maximum(x, y),
                jnp.minimum(x, y), -x, jnp.abs(x), jnp.sqrt(jnp.abs(x)), jnp.floor(x),
                jnp.sign(x), jnp.clip(x, -1, 2), jnp.where(x > y, x, y * y),
                jnp.exp(x), jnp.tanh(y), jnp.log(jnp.abs(x)),
                x < y, x == y, jnp.isfinite(x)]

    def compare(g, w, what):
        if g.dtype == np.bool_:
            return assert_bits(g, w, what)
        k = int(what.split()[1])
        assert half_ulps(g, w, what) <= (1 if names[k] in ("exp", "tanh", "log") else 0), (
            names[k], what, g, w)

    x = half_values(dt, 200, rng)
    y = np.concatenate([half_values(dt, 20, rng)[::-1], half_values(dt, 180, rng, False)])
    check_rows(fn, [x, y], rng, compare)


def test_half_fused_chain_rounds_after_every_op(rng):
    # XLA:CPU rounds each op's f32 result to the 16-bit type; so must jdisc, even when fused
    f = lambda x, y, z: ((x * y + z) * x - y, (x.astype(jnp.float32) * 3).astype(y.dtype) + y)
    for dt in HALVES:
        check_rows(f, [rng.standard_normal(1000).astype(dt) for _ in range(3)], rng)


def test_half_gelu_shares_its_rows_sooner_than_an_f32_one(rng):
    # a kernel of many bf16 ops (each computes in f32 and rounds) costs several times an f32
    # one's per element: it runs on the pool from fewer elements (loops.parallel_min_work)
    # (jmp's bf16 MLP: its GELU kernels over 54,752 elements ran on one thread)
    gelu = lambda x: jax.nn.gelu(x, approximate=True) * 2
    axes = ({0: "n"},)
    least = {}
    for dt in (np.float32, ml_dtypes.bfloat16):
        jf = jdisc.jit(gelu, dynamic_axes=axes)
        src = jf.compiled_for(np.zeros(3, dt)).c_source
        least[dt] = [int(n) for n in re.findall(r"jd_parallel\(.*>= (\d+)\);", src)]
        x = (rng.standard_normal(40000) * 3).astype(dt)
        # jdisc's tanh and XLA's differ by an ulp or two of f32 (test_half_elementwise): an
        # f32 GELU by a few ulps (1e-5 relative), and where 1 + tanh cancels (x < -4, XLA's
        # tanh is -1 there) by x * 0.5 * 2 ulp(1), under 2e-6 for |x| <= 16; a bf16 one by at
        # most two bf16 ulps where a rounding goes the other way before the last ops (2^-7)
        tol = 1e-5 if dt == np.float32 else 2.0 ** -7
        np.testing.assert_allclose(np.asarray(jf(x)).astype(np.float64),
                                   np.asarray(jax.jit(gelu)(x)).astype(np.float64),
                                   rtol=tol, atol=2e-6, err_msg=str(dt))
    (f32,), (bf16,) = least.values()
    assert bf16 < 40000 < f32, least


@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
def test_half_conversions_both_ways(dt, rng):
    other = HALVES[1] if dt == HALVES[0] else HALVES[0]
    targets = [np.float32, np.float64, other, np.int8, np.int32, np.int64, np.uint8,
               np.uint32, np.uint64, np.bool_]
    # from every 16-bit pattern (NaN payloads, infinities, subnormals). Not bf16 subnormals to
    # f64: XLA flushes them (f32 -> f64 with DAZ), jdisc does not
    every = np.arange(65536, dtype=np.uint16).view(dt)
    if dt == HALVES[1]:
        every = every[(every.view(np.uint16) & 0x7f80 != 0) | (every.view(np.uint16) & 0x7fff == 0)]
    check_rows(lambda x: [lax.convert_element_type(x, t) for t in targets], [every], rng,
               x64=True)

    # into the 16-bit type: f32 bit patterns (rounding boundaries, overflow, subnormals, NaN
    # payloads), f64 (twice rounded through f32, as XLA), integers (also through f32) and bool
    f32 = np.concatenate([
        np.array([65504, 65519.996, 65520, 1e6, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
                  1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 3.4e38,
                  -0.0], np.float32),
        np.array([0x7fa02000, 0xffc00001, 0x7f800001], np.uint32).view(np.float32),
        rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    f64 = np.concatenate([
        np.array([1 + 2.0 ** -11 + 2.0 ** -40, 2.0 ** -25 + 2.0 ** -50, np.nan, -np.inf, 1e300,
                  65519.99]),
        rng.standard_normal(2000) * 10.0 ** rng.integers(-7, 7, 2000)])
    if dt == HALVES[1]:        # results in f32's subnormal range: XLA flushes (FTZ), jdisc not
        f64 = f64[(np.abs(f64) >= np.finfo(np.float32).tiny) | (f64 == 0) | np.isnan(f64)]
    i32 = np.concatenate([
        np.array([0x01010001, 0x01010000, 2 ** 31 - 1, -2 ** 31, 65504, 65520, -1], np.int32),
        rng.integers(-2 ** 31, 2 ** 31, 2000).astype(np.int32)])
    i64 = np.concatenate([np.array([2 ** 63 - 1, -2 ** 63, (1 << 56) + (1 << 48) + 1]),
                          rng.integers(-2 ** 62, 2 ** 62, 2000)])
    u64 = np.array([2 ** 64 - 1, 2 ** 63, 0, 12345, (1 << 56) + (1 << 48) + 1], np.uint64)
    sources = fit([f32, f64, i32, i64, np.arange(256, dtype=np.uint8), u64,
                   np.array([True, False])], f32.size)
    check_rows(lambda *xs: [lax.convert_element_type(x, dt) for x in xs], sources, rng,
               x64=True)


@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
def test_half_reductions(dt, rng):
    def fn(x):
        return dict(sum=x.sum(axis=1),                 # jax accumulates in f32
                    max=x.max(axis=1), min=x.min(axis=0),
                    half_sum=lax.reduce(x, np.array(0, dt), lax.add, (1,)),   # in f16/bf16
                    softmax=jax.nn.softmax(x, axis=-1))
    jf = jdisc.jit(fn, dynamic_axes=({1: "n"},))
    u = 2.0 ** -(11 if dt == np.float16 else 8)
    for n in SIZES:
        x = half_values(dt, 3 * n, rng, specials=False).reshape(3, n)
        got, want = jf(x), jax.jit(fn)(x)
        for k in ("max", "min"):
            assert_bits(np.asarray(got[k]), np.asarray(want[k]), f"{k} n={n}")
        assert half_ulps(np.asarray(got["sum"]), np.asarray(want["sum"])) <= 1, n
        assert half_ulps(np.asarray(got["softmax"]), np.asarray(want["softmax"])) <= (
            1 if dt == np.float16 else 0), n
        # XLA and jdisc both round after every add, in different orders: each is within
        # (n-1) u sum|x| of the exact sum
        bound = 2 * (n - 1) * u * np.abs(x.astype(np.float64)).sum(axis=1)
        err = np.abs(np.asarray(got["half_sum"], np.float64)
                     - np.asarray(want["half_sum"], np.float64))
        assert (err <= bound).all(), (n, err, bound)
        # small integers: every partial sum is exact, so every order gives the same bits
        xi = rng.integers(-4, 5, (3, n)).astype(dt)
        got, want = jf(xi), jax.jit(fn)(xi)
        for k in ("sum", "half_sum"):
            assert_bits(np.asarray(got[k]), np.asarray(want[k]), f"{k} n={n}")
    # NaN and infinities propagate through max
    x = np.array([[1, np.nan, 3], [-np.inf, -1, 2], [np.inf, 0, -0.0]], dt)
    assert_bits(np.asarray(jf(x)["max"]), np.asarray(jax.jit(fn)(x)["max"]), "max nan")


@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
def test_half_dot_accumulates_in_f32(dt, rng):
    f = lambda a, b: (a @ b, jnp.dot(a, b, preferred_element_type=jnp.float32))
    jf = jdisc.jit(f, dynamic_axes=({1: "k"}, {0: "k"}))
    for n in SIZES:
        a = rng.standard_normal((4, n)).astype(dt)
        b = rng.standard_normal((n, 5)).astype(dt)
        (g16, g32), (w16, w32) = leaves(jf(a, b)), leaves(jax.jit(f)(a, b))
        assert half_ulps(g16, w16, f"n={n}") <= 1
        np.testing.assert_allclose(g32, w32, rtol=1e-5, atol=1e-5 * n)
    # 4000 ones: a 16-bit accumulator would stop at 256 (bf16) / 2048 (f16)
    g16, _ = jf(np.ones((4, 4000), dt), np.ones((4000, 5), dt))
    assert (np.asarray(g16, np.float32) == 4000).all()


def test_half_constants_iota_and_storage(rng):
    for dt in HALVES:
        table = np.array([1.5, np.nan, np.inf, -0.0, 3e-3, float(ml_dtypes.finfo(dt).max)], dt)

        def f(x):   # a non-splat constant (NaN, inf, -0, max), splats, a 16-bit iota
            return (x[:, None] * table[None, :] - 1, x / 2 + x / 4 * table[4],
                    x + jnp.arange(x.shape[0], dtype=dt))
        jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
        for n in SIZES:
            x = half_values(dt, n, rng)
            for g, w in zip(jf(x), jax.jit(f)(x)):
                assert half_ulps(np.asarray(g), np.asarray(w), f"{dt} n={n}") == 0
        # stored as 16-bit patterns (kernels read and write jd_f16/jd_bf16), computed in f32
        src = jf.compiled_for(np.zeros(3, dt)).c_source
        short = "f16" if dt == np.float16 else "bf16"
        assert f"typedef uint16_t jd_{short};" in src and f"const jd_{short} *restrict" in src
        assert f"jd_{short}_to_f32(" in src and f"jd_f32_to_{short}(" in src


# ------------------------------------------------------------------------------ integers

def _int_edges(dt):
    info = np.iinfo(dt)
    vals = [0, 1, 2, 5, info.max, info.min, info.max - 1, 0x55 % (info.max + 1)]
    if info.min < 0:
        vals += [-1, -2, info.min + 1]
    return np.array(vals, dtype=dt)


def _bit_ops(x, s):
    dt = np.dtype(x.dtype)
    flip = np.dtype(f"{'u' if dt.kind == 'i' else 'i'}{dt.itemsize}")
    same_width = {1: flip, 2: np.float16, 4: np.float32, 8: np.float64}[dt.itemsize]
    return [lax.shift_left(x, s), lax.shift_right_logical(x, s),
            lax.shift_right_arithmetic(x, s), lax.population_count(x), lax.clz(x),
            ~x, x & s, x | s, x ^ s, lax.bitcast_convert_type(x, flip),
            lax.bitcast_convert_type(lax.bitcast_convert_type(x, same_width), dt)]


def test_integer_bit_ops(rng):
    # every edge value against every shift amount 0..bits+1 and out-of-range ones (negative
    # amounts count as huge unsigned ones), for every integer dtype in one program
    args = []
    for dt in INTS:
        bits = dt.itemsize * 8
        amounts = np.array(list(range(bits + 2)) + [bits * 2, int(np.iinfo(dt).max)]
                           + ([-1, int(np.iinfo(dt).min)] if dt.kind == "i" else []), dtype=dt)
        args += [a.ravel() for a in np.meshgrid(_int_edges(dt), amounts)]
    args = fit(args, max(a.size for a in args))
    check_rows(lambda *xs: [_bit_ops(x, s) for x, s in zip(xs[::2], xs[1::2])], args, rng,
               x64=True)


def test_bool_logic_and_conversions(rng):
    def fn(a, b, x):
        return (a & b, a | b, a ^ b, ~a, a.astype(jnp.int32), a.astype(jnp.float32),
                a.astype(jnp.bfloat16), x.astype(jnp.bool_), (x > 1).astype(jnp.uint8))
    a = np.array([True, False, True, False, True, True, False, False] * 5)
    b = np.array([True, True, False, False, True, False, True, False] * 5)
    x = np.array([0, -0.0, np.nan, 0.1, np.inf, -1, 2, -np.inf] * 5, np.float32)
    check_rows(fn, [a, b, x], rng)


def test_integer_divide_and_remainder(rng):
    # XLA: x / 0 == -1 (all ones), x % 0 == x, INT_MIN / -1 == INT_MIN, INT_MIN % -1 == 0
    dts = [np.dtype(t) for t in (np.int8, np.int32, np.int64, np.uint8, np.uint32)]
    args = [a.ravel() for dt in dts for a in np.meshgrid(_int_edges(dt), _int_edges(dt))]
    check_rows(lambda *xs: [(lax.div(x, y), lax.rem(x, y), x * y, x - y)
                            for x, y in zip(xs[::2], xs[1::2])],
               fit(args, max(a.size for a in args)), rng, x64=True)


def test_integer_power_follows_xla():
    # jax has no integer `lax.pow`; StableHLO does. XLA's rule for negative exponents:
    # 1 -> 1, -1 -> +-1 by parity, anything else -> 0; overflow wraps.
    fn = jdisc.compile_stablehlo("""
      func.func @main(%x: tensor<?xi32>, %y: tensor<?xi32>) -> tensor<?xi32> {
        %0 = stablehlo.power %x, %y : tensor<?xi32>
        return %0 : tensor<?xi32>
      }""")
    x = np.array([2, -3, 1, -1, -1, 0, 0, 5, 7, 2, 3], np.int32)
    y = np.array([10, 3, -5, -3, -4, 0, 3, -1, 0, 31, 40], np.int32)
    want = [1024, -27, 1, -1, 1, 1, 0, 0, 1, -2 ** 31, 3 ** 40]
    want = np.array([w % 2 ** 32 for w in want], np.uint64).astype(np.uint32).view(np.int32)
    for n in SIZES[:2] + (x.size,):
        np.testing.assert_array_equal(np.asarray(fn(x[:n], y[:n])[0]), want[:n])


FLOAT_EDGES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, -1.0, -1.5, 1.5, 2.5,
               127.9, -128.9, -129.0, 255.0, 255.5, 256.0, -300.0, 65535.5, 65536.0,
               2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 3e9, 4294967040.0,
               4294967296.0, 9.2233720368547758e18, -9.2233720368547758e18, 9.3e18,
               1.8446744073709552e19, 2e19, 1e20, -1e20]


def test_float_to_int_saturates_like_xla(rng):
    # truncate toward zero; out of range saturates to the type's min/max; NaN -> 0
    targets = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
    check_rows(lambda a, b: [lax.convert_element_type(x, t) for x in (a, b) for t in targets],
               [np.array(FLOAT_EDGES, np.float32), np.array(FLOAT_EDGES, np.float64)], rng,
               x64=True)


def test_int_to_float_rounds_once(rng):
    # int64 -> f32 rounds once (not through f64); u64 and i64 extremes
    a = np.array([(1 << 60) + (1 << 36) + 1, 2 ** 63 - 1, -2 ** 63, 2 ** 53 + 1, -7, 0, 3,
                  (1 << 40) + 1], np.int64)
    b = np.array([2 ** 64 - 1, 2 ** 63, 2 ** 53 + 1, 0, 1, 2 ** 32, 12345, 2 ** 24 + 1],
                 np.uint64)
    c = np.array([2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1, -(2 ** 24) - 3, 0, 1, -1, 77], np.int32)
    check_rows(lambda *xs: [lax.convert_element_type(v, t) for v in xs
                            for t in (np.float32, np.float64)], [a, b, c], rng, x64=True)


# bitcast_convert between bit widths: tests/test_bitcast.py


def _same_floats(got, want):
    """Equal as IEEE values: NaN where XLA has NaN, and the sign of every zero."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_and_min_of_signed_zeros_nans_and_infinities(dtype):
    # jd_fmax / jd_fmin resolve equal zeros without signbit() (so that GCC vectorises them):
    # every pair of special values, elementwise, in a reduction and in a max-pool window
    # (no subnormals: XLA's CPU kernels flush them to zero, jdisc's do not)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 2.5],
                       dtype)
    a = np.repeat(special, len(special))[None].repeat(3, 0)
    b = np.tile(special, len(special))[None].repeat(3, 0)
    with jax.enable_x64(dtype == np.float64):
        fns = {
            "elementwise": lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b)),
            "clamp": lambda a, b: (lax.clamp(b, a, jnp.float32(0.5).astype(a.dtype)),
                                   lax.clamp(jnp.float32(-0.0).astype(a.dtype), a, b)),
            "reduce": lambda a, b: (jnp.max(jnp.stack([a, b], -1), -1),
                                    jnp.min(jnp.stack([a, b], -1), -1)),
            "window": lambda a, b: (lax.reduce_window(jnp.stack([a, b], -1), -jnp.inf,
                                                      lax.max, (1, 1, 2), (1, 1, 2), "VALID"),
                                    lax.reduce_window(jnp.stack([a, b], -1), jnp.inf,
                                                      lax.min, (1, 1, 2), (1, 1, 2), "VALID")),
        }
        for name, f in fns.items():
            got = jdisc.jit(f, dynamic_axes=({0: "n"}, {0: "n"}))(a, b)
            want = jax.jit(f)(a, b)
            for g, w in zip(got, want):
                _same_floats(g, w)


@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
def test_half_gemms_run_as_f32_gemms(dt, rng):
    # f16/bf16 dots widen both operands to f32 and run one f32 GEMM of the runtime (in pieces
    # on the pool), rounded once: batched, with either operand transposed, with an f32 result,
    # at sizes where the pieces split rows, columns and matrices; NaN and inf propagate
    def f(a, b, c):
        return (jnp.einsum("bmk,bkn->bmn", a, b), jnp.einsum("bmk,bnk->bmn", a, c),
                jnp.einsum("bkm,bkn->bmn", a.transpose(0, 2, 1), b,
                           preferred_element_type=jnp.float32))
    axes = ({0: "b", 1: "m", 2: "k"}, {0: "b", 1: "k", 2: "n"}, {0: "b", 1: "n", 2: "k"})
    jf = jdisc.jit(f, dynamic_axes=axes)
    src = jf.compiled_for(*(np.zeros((1, 2, 2), dt),) * 3).c_source
    assert "jd_dot(JD_GEMM_F32," in src
    # a dot kernel's C reads nothing in a branch: GCC may if-convert (and so vectorise) the
    # loop that rounds the f32 results, a NaN select per element (codegen.needs_branches)
    assert "JD_KEEP_BRANCHES int" not in src
    for b, m, k, n in [(1, 1, 3, 1), (2, 0, 4, 3), (1, 5, 0, 2), (3, 7, 5, 11), (1, 130, 64, 97),
                       (2, 67, 2, 300)]:
        a = rng.standard_normal((b, m, k)).astype(dt)
        bb = rng.standard_normal((b, k, n)).astype(dt)
        c = rng.standard_normal((b, n, k)).astype(dt)
        if a.size:
            a.flat[0], bb.flat[-1] = np.nan, np.inf
        got, want = leaves(jf(a, bb, c)), leaves(jax.jit(f)(a, bb, c))
        # the two sum k f32 products in different orders (OpenBLAS's, XLA's), each within
        # k * 2^-24 * sum |a b| of the exact sum, then round once to the result's type (half
        # an ulp: 2^-11 relative for f16, 2^-8 for bf16)
        a64, b64, c64 = (x.astype(np.float64) for x in (a, bb, c))
        with np.errstate(invalid="ignore"):     # NaN and inf inputs: those entries are NaN
            mag = [np.abs(a64) @ np.abs(b64), np.abs(a64) @ np.abs(c64).transpose(0, 2, 1),
                   np.abs(a64) @ np.abs(b64)]
        for i, (g, w) in enumerate(zip(got, want)):
            where = f"{i}: {b, m, k, n}"
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            assert (np.isnan(g64) == np.isnan(w64)).all(), where
            fin = np.isfinite(w64)
            assert (g64[~fin & ~np.isnan(w64)] == w64[~fin & ~np.isnan(w64)]).all(), where
            r = 2.0 ** -24 if g.dtype == np.float32 else \
                2.0 ** -11 if g.dtype == np.float16 else 2.0 ** -8
            with np.errstate(invalid="ignore"):
                bound = 2 * k * 2.0 ** -24 * mag[i] + 2 * r * np.abs(w64) + 1e-30
                assert (np.abs(g64 - w64)[fin] <= bound[fin]).all(), where
    assert jf.stats()["compiles"] == 1


@pytest.mark.parametrize("dt", HALVES, ids=lambda d: d.name)
def test_half_convolutions_run_as_f32_convolutions(dt, rng):
    # f16/bf16 convolutions (refused before) widen their operands to f32, convolve in f32 and
    # round once, as XLA:CPU does: NCHW strided SAME (equinox's layout), NHWC grouped, and one
    # with an f32 result (preferred_element_type)
    def f(x, k, kg):
        a = lax.conv_general_dilated(x, k, (2, 2), "SAME")
        xh = x.transpose(0, 2, 3, 1)
        b = lax.conv_general_dilated(xh, kg, (1, 1), ((1, 0), (0, 1)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=2)
        c = lax.conv_general_dilated(x, k, (1, 1), "VALID", preferred_element_type=jnp.float32)
        return a, b, c
    axes = ({0: "b", 2: "h", 3: "w"}, None, None)
    jf = jdisc.jit(f, dynamic_axes=axes)
    k = rng.standard_normal((6, 4, 3, 3)).astype(dt)
    kg = rng.standard_normal((2, 2, 2, 6)).astype(dt)
    ab = lambda x: jnp.abs(x).astype(jnp.float32)        # noqa: E731
    for b, h, w in [(1, 3, 3), (2, 7, 5), (0, 4, 4), (3, 13, 6)]:
        x = rng.standard_normal((b, 4, h, w)).astype(dt)
        if x.size:
            x.flat[5] = np.inf
        got, want = leaves(jf(x, k, kg)), leaves(jax.jit(f)(x, k, kg))
        mag = leaves(jax.jit(f)(ab(x), ab(k), ab(kg)))
        for i, (g, wt, m, terms) in enumerate(zip(got, want, mag, (36, 8, 36))):
            assert g.dtype == wt.dtype and g.shape == wt.shape, i
            g64, w64 = np.asarray(g, np.float64), np.asarray(wt, np.float64)
            assert (np.isnan(g64) == np.isnan(w64)).all(), (i, b, h, w)
            fin = np.isfinite(w64)
            assert (g64[~fin & ~np.isnan(w64)] == w64[~fin & ~np.isnan(w64)]).all()
            # two f32 summation orders of `terms` products, then one rounding to the result's
            # type on each side (as in test_half_gemms_run_as_f32_gemms)
            r = 2.0 ** -24 if g.dtype == np.float32 else \
                2.0 ** -11 if g.dtype == np.float16 else 2.0 ** -8
            bound = 2 * terms * 2.0 ** -24 * np.asarray(m, np.float64) + 2 * r * np.abs(w64)
            with np.errstate(invalid="ignore"):     # inf - inf off the finite entries
                assert (np.abs(g64 - w64)[fin] <= bound[fin] + 1e-30).all(), (i, b, h, w)
    assert jf.stats()["compiles"] == 1
