"""The CNN kernels against jax.jit: the direct convolution (blocks of positions x features in
registers, a contiguous fast path, zeros outside the input), and reduce / reduce_window kernels
vectorised over a kept innermost dim (global average, pooling over NHWC), at sizes that hit
their tails: block and vector remainders, widths below one block, size 0 and 1 dims."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import assert_close, check_against_jax


def check(fn, dynamic_axes, make_args, sizes, tol, constraints=()):
    return check_against_jax(fn, dynamic_axes, make_args, sizes, tol, constraints)


def _kernels(jf, args) -> str:
    return jf.compiled_for(*args).c_source


# -- direct convolution ----------------------------------------------------------------------

# input dims ("B" dynamic, sizes 13, 1, 5, 6, 7 and up from `min`), kernel HWIO, conv attrs
CONVS = [
    # NHWC 3x3 SAME, 3 -> 40 features: one block of 32 and a narrower one of 8
    dict(xs=("B", 9, 3), ws=(3, 3, 3, 40), strides=(1, 1), padding="SAME"),
    # widths around the 6-position block: 1, 5, 6, 7, 9, 10, 13 (dynamic W; 1 to 3 positions
    # left over run one at a time, 4 or 5 as one more block); 17 features
    dict(xs=(4, "B", 5), ws=(3, 3, 5, 17), strides=(1, 1), padding="SAME"),
    # strides, asymmetric and negative padding, kernel (rhs) dilation
    dict(xs=(11, "B", 4), ws=(2, 3, 4, 6), strides=(2, 3), padding=((2, 0), (1, -1)),
         rhs=(1, 2), min=5),
    # negative low padding (one dim at a time: XLA:CPU gets both at once wrong): the first
    # block of a row skips input
    dict(xs=(6, "B", 2), ws=(2, 3, 2, 3), strides=(1, 1), padding=((1, 1), (-1, 0)), min=4),
    dict(xs=(6, "B", 2), ws=(2, 3, 2, 3), strides=(1, 1), padding=((-1, 1), (1, 1))),
    # negative high padding: a partial last block still reads inside the input
    dict(xs=(5, "B", 3), ws=(1, 3, 3, 4), strides=(1, 1), padding=((0, 0), (1, -2)), min=4),
    # input (lhs) dilation: the innermost taps are not one run of input
    dict(xs=(6, "B", 3), ws=(3, 2, 3, 5), strides=(1, 1), padding=((1, 1), (2, 1)),
         lhs=(2, 2)),
    # feature groups: 3 groups of 2 -> 4, 1x1 and 5x1 kernels
    dict(xs=("B", 7, 6), ws=(1, 1, 2, 12), strides=(1, 1), padding="VALID", groups=3),
    dict(xs=(9, "B", 6), ws=(5, 1, 3, 4), strides=(2, 1), padding="SAME", groups=2),
    # a single output feature, a single input feature
    dict(xs=(6, "B", 1), ws=(3, 3, 1, 1), strides=(1, 1), padding="VALID", min=3),
]


@pytest.mark.parametrize("spec", CONVS)
def test_direct_convolution_blocks_and_tails(rng, spec):
    def f(x, w):
        return jax.lax.conv_general_dilated(
            x, w, spec["strides"], spec["padding"], lhs_dilation=spec.get("lhs"),
            rhs_dilation=spec.get("rhs"), dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=spec.get("groups", 1))
    w = rng.standard_normal(spec["ws"]).astype(np.float32)
    dyn = spec["xs"].index("B") + 1
    lo = spec.get("min", 1)

    def make(n):
        shape = (2,) + tuple(n if d == "B" else d for d in spec["xs"])
        return rng.standard_normal(shape).astype(np.float32), w
    sizes = [13] + [n for n in (1, 5, 6, 7, 9, 10) if n >= lo] + [lo]
    jf, args = check(f, ({dyn: "B"}, None), make, sizes, 3e-5,
                     constraints=(f"B >= {lo}",) if lo > 1 else ())
    assert "(&(jd_conv_args){" in _kernels(jf, args)


@pytest.mark.parametrize("groups", [1, 2])
def test_direct_convolution_feature_widths(rng, groups):
    # a group's features go in blocks of 32, then 16, then the rest padded to 16 (jd_conv.h):
    # widths below, at and past each
    for cout_g in (1, 7, 16, 17, 33, 48, 69):
        w = rng.standard_normal((3, 2, 3, cout_g * groups)).astype(np.float32)

        def f(x, w=w):
            return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=groups,
                                                dimension_numbers=("NHWC", "HWIO", "NHWC"))
        check(f, ({2: "W"},), lambda n: (rng.standard_normal((2, 5, n, 3 * groups))
                                         .astype(np.float32),), [9, 1, 7], 3e-5)


def test_negative_low_padding_against_numpy(rng):
    # XLA:CPU gives wrong values for a 1-D convolution whose low padding is negative once the
    # batch has more than one image (found by a sweep of the conv unit, 2026-12-07): checked
    # here against numpy instead
    w = rng.standard_normal((3, 3, 32)).astype(np.float32)

    def f(x):
        return jax.lax.conv_general_dilated(x, w, (1,), ((-1, 1),),
                                            dimension_numbers=("NWC", "WIO", "NWC"))
    jf = jdisc.jit(f, dynamic_axes=({0: "B", 1: "S"},), constraints=("S >= 3",), bridge=False)
    for b, s in ((2, 7), (3, 13), (1, 4)):
        x = rng.standard_normal((b, s, 3)).astype(np.float32)
        xs = np.concatenate([x[:, 1:], np.zeros((b, 1, 3), np.float32)], axis=1)
        want = sum(np.einsum("bsc,cf->bsf", xs[:, t:t + s - 2], w[t]) for t in range(3))
        assert_close(jf(x), want, 3e-5, f"b={b} s={s}")


def test_direct_convolution_size_zero_and_layouts(rng):
    # NCHW / OIHW in, NHWC out; batch 0 and 1; spatial dims that give 0 and 1 output rows
    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                            dimension_numbers=("NCHW", "OIHW", "NHWC"))
    w = rng.standard_normal((7, 3, 3, 2)).astype(np.float32)
    check(f, ({0: "B", 2: "H"}, None),
          lambda n: (rng.standard_normal((n % 3, 3, n, 6)).astype(np.float32), w),
          [5, 3, 4, 2], 3e-5, constraints=("H >= 2",))


@pytest.mark.parametrize("dims", [1, 3])
def test_direct_convolution_1d_and_3d(rng, dims):
    spatial = "DHW"[3 - dims:]
    dn = ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")
    w = rng.standard_normal((3,) * dims + (4, 9)).astype(np.float32)

    def f(x, k):
        return jax.lax.conv_general_dilated(x, k, (1,) * dims, "SAME", dimension_numbers=dn)
    check(f, ({1: "S"}, None),
          lambda n: (rng.standard_normal((2, n) + (5,) * (dims - 1) + (4,)).astype(np.float32), w),
          [8, 1, 3], 3e-5)


def test_direct_convolution_f64_and_parallel_rows(rng):
    # big enough (2 x 32 x 32 x 16 -> 48, 3x3: 14M multiply-adds) for the parallel row loop
    with jax.enable_x64(True):
        def f(x, w):
            return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                dimension_numbers=("NHWC", "HWIO", "NHWC"))
        w32 = rng.standard_normal((3, 3, 16, 48)).astype(np.float32)
        jf, args = check(f, ({0: "B"}, None),
                         lambda n: (rng.standard_normal((n, 32, 32, 16)).astype(np.float32), w32),
                         [2, 1], 3e-5)
        assert "jd_parallel(" in _kernels(jf, args)       # rows on the pool when large
        w64 = rng.standard_normal((3, 3, 5, 20))
        check(f, ({1: "H"}, None), lambda n: (rng.standard_normal((2, n, 9, 5)), w64),
              [9, 2], 1e-12)


@pytest.mark.parametrize("reverse", ["[true, false]", "[false, true]", "[true, true]"])
def test_direct_convolution_window_reversal(rng, reverse):
    # jax never emits window reversal: set it on the exported StableHLO; reversing a kernel
    # dim is convolving with the kernel flipped along it
    from jax import export

    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 2), ((1, 1), (0, 2)),
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))
    b = export.symbolic_shape("b")[0]
    text = export.export(jax.jit(f))(jax.ShapeDtypeStruct((b, 5, 9, 3), np.float32),
                                     jax.ShapeDtypeStruct((3, 2, 3, 4), np.float32)).mlir_module()
    assert text.count("pad = [[1, 1], [0, 2]]") == 1
    g = jdisc.compile_stablehlo(text.replace(
        "pad = [[1, 1], [0, 2]]", f"pad = [[1, 1], [0, 2]], reverse = {reverse}"))
    w = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    flipped = np.flip(w, [i for i, r in enumerate(reverse[1:-1].split(", ")) if r == "true"])
    for n in (2, 1, 0):
        x = rng.standard_normal((n, 5, 9, 3)).astype(np.float32)
        (got,) = g(x, w)
        assert_close(got, f(x, flipped), 3e-5, f"n={n}")


def test_convolution_with_a_dynamic_kernel_shape_uses_im2col(rng):
    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))
    jf, args = check(f, ({0: "B"}, {3: "O"}),
                     lambda n: (rng.standard_normal((2, 6, 5, 3)).astype(np.float32),
                                rng.standard_normal((3, 3, 3, n)).astype(np.float32)),
                     [4, 1], 3e-5)
    assert "(&(jd_conv_args){" not in _kernels(jf, args)


# -- reductions and pooling over rows ----------------------------------------------------------

def test_reductions_keeping_the_innermost_dim(rng):
    def f(x):
        return (x.mean(axis=(1, 2)), jnp.max(x, axis=0, initial=-100.0),
                jnp.argmax(x, axis=1), jnp.sum(x, axis=(0, 2)),
                jnp.min(x[:, 0], axis=0, initial=100.0))
    jf, args = check(f, ({0: "B", 2: "W"},),
                     lambda n: (rng.standard_normal((n % 4, 3, n, 17)).astype(np.float32),),
                     [6, 1, 4, 0, 5], 2e-6)
    assert "#pragma omp simd" in _kernels(jf, args)


def test_global_average_of_relu_nhwc(rng):
    b = rng.standard_normal(33).astype(np.float32)
    check(lambda x: jax.nn.relu(x + b).mean(axis=(1, 2)), ({0: "B", 1: "H", 2: "W"},),
          lambda n: (rng.standard_normal((n, n + 1, 2 * n, 33)).astype(np.float32),),
          [3, 1, 0, 8], 2e-6)


@pytest.mark.parametrize("channels", [1, 3, 17, 32])
def test_pooling_over_nhwc_rows(rng, channels):
    def pools(x):
        # (SAME with a stride > 1 on a dynamic dim would be stablehlo.dynamic_reduce_window)
        mx = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 1, 2, 1), "SAME")
        av = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        dil = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 1, 1, 1),
                                    ((0, 0), (1, 2), (0, 1), (0, 0)),
                                    window_dilation=(1, 2, 1, 1), base_dilation=(1, 1, 2, 1))
        return mx, av, dil
    jf, args = check(pools, ({0: "B", 1: "H"},),
                     lambda n: (rng.standard_normal((n % 3, n, 7, channels)).astype(np.float32),),
                     [5, 2, 3, 4], 2e-6, constraints=("H >= 2",))
    assert "n_lanes" in _kernels(jf, args)


def test_pooling_rank_2_and_window_on_the_last_dim(rng):
    # [N, C] windows over N (rows path without an inner loop); windows over the last dim
    # (the per-element path)
    def f(x):
        return (jax.lax.reduce_window(x, 0.0, jax.lax.add, (3, 1), (1, 1), "SAME"),
                jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2), (1, 2), "VALID"))
    check(f, ({0: "N"},), lambda n: (rng.standard_normal((n, 6)).astype(np.float32),),
          [7, 1, 0], 2e-6)
