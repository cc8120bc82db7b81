"""Symbolic padding in the convolution path: strided `SAME` convolutions and pooling over dynamic
spatial dims (the padding depends on the dim, e.g. on its parity), convolution transposes, and
padding expressions of either sign straight from StableHLO. Each case is compiled once and
compared with jax.jit at several values of every dynamic dim."""

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from jax import lax

import jdisc
from conftest import assert_close, check_against_jax

NHWC = ("NHWC", "HWIO", "NHWC")
SIZES = (0, 1, 2, 5, 6, 7, 13, 32)     # even and odd: SAME padding differs with the parity


def _rand(rng, *shape, dtype=np.float32):
    x = rng.standard_normal(shape) * 3
    return x.astype(dtype) if np.dtype(dtype).kind == "f" else np.round(x).astype(dtype)


def _conv(strides, **kw):
    return lambda x, k: lax.conv_general_dilated(x, k, strides, "SAME", dimension_numbers=NHWC,
                                                 **kw)


# (case name, function of (x, k), dynamic axes of x, x shape as a function of n, kernel shape,
#  dtype). f32/f64 with a static kernel run the direct kernel; i32 runs im2col + GEMM.
CASES = [
    ("stride2_H", _conv((2, 2)), {1: "H"}, lambda n: (2, n, 6, 2), (3, 3, 2, 4), np.float32),
    ("stride2_HW", _conv((2, 3)), {1: "H", 2: "W"}, lambda n: (2, n, n + 3, 2), (3, 3, 2, 5),
     np.float32),
    ("stride2_NHW", _conv((2, 2)), {0: "N", 1: "H", 2: "W"}, lambda n: (n % 3, n, n + 1, 3),
     (3, 3, 3, 4), np.float32),
    ("stride2_dilated", _conv((2, 2), rhs_dilation=(2, 3)), {1: "H", 2: "W"},
     lambda n: (2, n, n + 2, 2), (3, 3, 2, 4), np.float32),
    ("stride3_even_kernel", _conv((3, 2)), {1: "H", 2: "W"}, lambda n: (1, n, n + 1, 2),
     (4, 2, 2, 3), np.float32),
    ("stride2_groups", _conv((2, 2), feature_group_count=2), {1: "H"},
     lambda n: (2, n, 5, 4), (3, 3, 2, 6), np.float32),
    ("stride2_f64", _conv((2, 2)), {1: "H", 2: "W"}, lambda n: (1, n, n, 2), (3, 3, 2, 3),
     np.float64),
    ("stride2_i32_im2col", _conv((2, 2)), {1: "H", 2: "W"}, lambda n: (2, n, n + 1, 2),
     (3, 3, 2, 4), np.int32),
    ("stride2_1d", lambda x, k: lax.conv_general_dilated(x, k, (2,), "SAME",
                                                         dimension_numbers=("NWC", "WIO", "NWC")),
     {1: "W"}, lambda n: (2, n, 3), (5, 3, 2), np.float32),
    ("stride2_nchw", lambda x, k: lax.conv_general_dilated(x, k, (2, 2), "SAME"),
     {2: "H", 3: "W"}, lambda n: (2, 2, n, n + 3), (4, 2, 3, 3), np.float32),
]


@pytest.mark.parametrize("name, fn, axes, xshape, kshape, dtype", CASES,
                         ids=[c[0] for c in CASES])
def test_strided_same_convolution(rng, name, fn, axes, xshape, kshape, dtype):
    k = _rand(rng, *kshape, dtype=dtype)
    with jax.enable_x64(dtype == np.float64):
        check_against_jax(lambda x: fn(x, k), (axes,),
                          lambda n: (_rand(rng, *xshape(n), dtype=dtype),), SIZES,
                          tol=1e-5 if dtype != np.int32 else 0)


def test_strided_same_convolution_with_a_dynamic_kernel_uses_im2col(rng):
    # a kernel with a dynamic dim (the output features) takes the im2col + GEMM path
    jf, args = check_against_jax(
        _conv((2, 2)), ({1: "H", 2: "W"}, {3: "O"}),
        lambda n: (_rand(rng, 2, n, n + 1, 3), _rand(rng, 3, 3, 3, n % 4 + 1)), SIZES, tol=1e-5)
    assert "(&(jd_conv_args){" not in jf.compiled_for(*args).c_source


POOLS = [
    ("max_same_HW", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                                "SAME"), {1: "H", 2: "W"}, lambda n: (2, n, n + 1, 3)),
    ("sum_same_NH", lambda x: lax.reduce_window(x, 0.0, lax.add, (1, 2, 3, 1), (1, 2, 2, 1),
                                                "SAME"), {0: "N", 1: "H"}, lambda n: (n % 4, n, 5, 3)),
    ("max_same_stride3", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1),
                                                     (1, 3, 3, 1), "SAME"),
     {1: "H", 2: "W"}, lambda n: (1, n, n + 2, 2)),
    ("max_pool_grad", jax.grad(lambda x: lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME").sum()),
     {1: "H", 2: "W"}, lambda n: (2, n, n + 1, 3)),
]


@pytest.mark.parametrize("name, fn, axes, xshape", POOLS, ids=[p[0] for p in POOLS])
def test_strided_same_pooling(rng, name, fn, axes, xshape):
    check_against_jax(fn, (axes,), lambda n: (_rand(rng, *xshape(n)),), SIZES, tol=1e-5)


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2), (0, 1))])
def test_convolution_transpose_with_dynamic_spatial_dims(rng, padding):
    k = _rand(rng, 3, 3, 2, 4)
    f = lambda x: lax.conv_transpose(x, k, (2, 2), padding, dimension_numbers=NHWC)
    check_against_jax(f, ({1: "H", 2: "W"},), lambda n: (_rand(rng, 2, n, n + 2, 2),), SIZES,
                      tol=1e-5)


def test_flax_downsampling_stem(rng):
    nn = pytest.importorskip("flax.linen")

    class Stem(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(8, (3, 3), strides=2, padding="SAME")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = nn.Conv(4, (3, 3), strides=(2, 1), padding="SAME", kernel_dilation=2)(x)
            x = nn.avg_pool(x, (2, 2), strides=(2, 2), padding="SAME")
            return nn.ConvTranspose(3, (3, 3), strides=(2, 2), padding="SAME")(x)

    model = Stem()
    params = model.init(jax.random.PRNGKey(0), np.ones((1, 9, 9, 3), np.float32))
    check_against_jax(model.apply, (None, {0: "N", 1: "H", 2: "W"}),
                      lambda n: (params, _rand(rng, n % 3 + 1, n, n + 3, 3)),
                      (1, 2, 5, 6, 13), tol=1e-4)


def _strided_stack(rng, depth):
    ks = [_rand(rng, 3, 3, 2, 2) * 0.3 for _ in range(depth)]

    def f(x):
        for k in ks:
            x = jnp.tanh(lax.conv_general_dilated(x, k, (2, 2), "SAME", dimension_numbers=NHWC))
        return x
    return f


def test_deep_strided_stacks_compile_to_c_linear_in_depth(rng):
    # jax computes each layer's SAME padding from its own formula for the previous layer's
    # size: written out as trees the launcher's C (and the constraint analysis) grew
    # exponentially with the number of strided layers (4 layers: 4 MB of C)
    from jdisc.api import lower_to_ir
    from jdisc.lowering.codegen import generate
    x = np.ones((1, 64, 64, 2), np.float32)
    sizes = [len(generate(lower_to_ir(_strided_stack(rng, d), x,
                                      dynamic_axes=({1: "H", 2: "W"},))).source) for d in (3, 6)]
    assert sizes[1] < 3 * sizes[0], sizes
    check_against_jax(_strided_stack(rng, 6), ({1: "H", 2: "W"},),
                      lambda n: (_rand(rng, 1, n, 2 * n + 1, 2),), (1, 2, 7, 33, 64), tol=1e-5)


def _floor_shapes(x):                 # x [B, H]
    B, H = x.shape
    top = jnp.max(x, initial=0.0)
    return (jnp.zeros((B, (H - 1) // 2 + 1)) + top,     # a strided pool's size, as jax
            jnp.zeros(((H - 2) % 3, 2)) + top)          # computes it


def test_jax_floor_division_of_dims_is_symbolic(rng):
    # jnp.floor_divide / jnp.remainder lower `(H - 1) // 2` on a dim as a truncating divide
    # and remainder corrected by a select, whose parts may be negative (H = 0): the launcher
    # computed them as host values `_hN`, so an eqx pool's reshape to its own size took a
    # kernel of divisions per element (`shape_contents.floor_select`)
    from jdisc.api import lower_to_ir
    prog = lower_to_ir(_floor_shapes, np.ones((2, 5), np.float32),
                       dynamic_axes=({0: "B", 1: "H"},))
    assert [tuple(map(str, r.shape)) for r in prog.body.results] == [
        ("B", "floordiv(H + 1, 2)"), ("mod(H + 1, 3)", "2")]
    check_against_jax(_floor_shapes, ({0: "B", 1: "H"},), lambda n: (_rand(rng, 2, n),),
                      (0, 1, 2, 3, 4, 7, 13))


# Padding as arbitrary symbolic expressions of the dims (low and high differ, the low one can
# be negative), from StableHLO: H % 2 - 1 and 2 - H % 2 on H, W // 3 and W % 3 on W.
_HLO = """
func.func @main(%x: tensor<2x?x?x2xT>, %k: tensor<3x3x2x4xT>) -> tensor<2x?x?x4xT> {
  %h = stablehlo.get_dimension_size %x, dim = 1 : (tensor<2x?x?x2xT>) -> tensor<i32>
  %w = stablehlo.get_dimension_size %x, dim = 2 : (tensor<2x?x?x2xT>) -> tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %c2 = stablehlo.constant dense<2> : tensor<i32>
  %c3 = stablehlo.constant dense<3> : tensor<i32>
  %hm = stablehlo.remainder %h, %c2 : tensor<i32>
  %lo0 = stablehlo.subtract %hm, %c1 : tensor<i32>
  %hi0 = stablehlo.subtract %c2, %hm : tensor<i32>
  %lo1 = stablehlo.divide %w, %c3 : tensor<i32>
  %hi1 = stablehlo.remainder %w, %c3 : tensor<i32>
  %a = stablehlo.reshape %lo0 : (tensor<i32>) -> tensor<1xi32>
  %b = stablehlo.reshape %hi0 : (tensor<i32>) -> tensor<1xi32>
  %c = stablehlo.reshape %lo1 : (tensor<i32>) -> tensor<1xi32>
  %d = stablehlo.reshape %hi1 : (tensor<i32>) -> tensor<1xi32>
  %p = stablehlo.concatenate %a, %b, %c, %d, dim = 0
      : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
  %pp = stablehlo.reshape %p : (tensor<4xi32>) -> tensor<2x2xi32>
  %r = "stablehlo.dynamic_conv"(%x, %k, %pp) <{batch_group_count = 1 : i64,
      dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
      feature_group_count = 1 : i64, window_strides = array<i64: 2, 1>,
      lhs_dilation = array<i64: LD, 1>, rhs_dilation = array<i64: 1, 2>}>
      : (tensor<2x?x?x2xT>, tensor<3x3x2x4xT>, tensor<2x2xi32>) -> tensor<2x?x?x4xT>
  return %r : tensor<2x?x?x4xT>
}
"""


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("lhs_dilation", [1, 2])
def test_padding_expressions_from_stablehlo(rng, dtype, lhs_dilation):
    t = "f32" if dtype == np.float32 else "i32"
    f = jdisc.compile_stablehlo(_HLO.replace("xT>", f"x{t}>").replace("LD", str(lhs_dilation)))
    (conv,) = [k for k in f.program.kernels if k.kind == "conv"]
    assert any(not isinstance(p, int) for p in conv.root.attrs["padding"])
    k = _rand(rng, 3, 3, 2, 4, dtype=dtype)
    for h in SIZES:
        w = h + 4
        x = _rand(rng, 2, h, w, 2, dtype=dtype)
        pad = ((h % 2 - 1, 2 - h % 2), (w // 3, w % 3))
        want = lax.conv_general_dilated(x, k, (2, 1), pad, lhs_dilation=(lhs_dilation, 1),
                                        rhs_dilation=(1, 2), dimension_numbers=NHWC)
        assert_close(f(x, k)[0], want, 1e-5 if dtype == np.float32 else 0, f"H={h}")
