"""Fusion plans (fast tier, no C compiler) and speculative kernel versions (full tier)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc.bench import workloads as W
from jdisc.lowering.codegen import generate
from jdisc.lowering.stitch_loops import ACROSS_BUFFERED
from conftest import assert_close, check_against_jax, to_ir


def kernel_kinds(prog):
    return [k.kind for k in prog.kernels]


@pytest.mark.fast
def test_softmax_is_one_stitch_kernel():
    prog = to_ir(W.softmax, ({0: "B", 1: "S"},), np.ones((2, 5), np.float32))
    assert kernel_kinds(prog) == ["stitch"]
    k = prog.kernels[0]
    assert sum(op.name == "reduce" for op in k.ops) == 2 and k.row_rank == 1


@pytest.mark.fast
def test_layer_norm_is_one_stitch_kernel():
    p = W.ln_params(64)
    prog = to_ir(lambda x, g, b: W.layer_norm(x, g, b), ({0: "B", 1: "S"}, None, None),
                 np.ones((2, 3, 64), np.float32), p["gamma"], p["beta"])
    assert kernel_kinds(prog) == ["stitch"]


@pytest.mark.fast
def test_ln_gelu_residual_softmax_chain_is_one_kernel():
    wl = W.workloads()["W2"]
    prog = to_ir(wl.fn, wl.dynamic_axes, *wl.make_args(2, 3, np.random.default_rng(0)))
    assert kernel_kinds(prog) == ["stitch"]
    assert sum(op.name == "reduce" for op in prog.kernels[0].ops) == 4
    assert prog.memory.arena_bytes == 0          # nothing but the output touches memory


@pytest.mark.fast
def test_bert_layer_kernels_are_gemms_plus_eight():
    # 8 GEMMs (Q, K, V, scores, context, output projection, FFN in, FFN out) and 8 others:
    # bias + head transpose for Q, K and V (their consumers are GEMMs, which need memory),
    # the attention softmax (one stitch kernel with scale and mask), the context transpose,
    # residual + LayerNorm twice (stitch), bias + GELU (loop).
    wl = W.workloads()["W1"]
    prog = to_ir(wl.fn, wl.dynamic_axes, *wl.make_args(2, 3, np.random.default_rng(0)))
    kinds = kernel_kinds(prog)
    assert kinds.count("dot") == 8
    assert len(kinds) <= 8 + 8, kinds
    assert kinds.count("stitch") == 3


@pytest.mark.fast
def test_broadcasts_are_never_materialised():
    wl = W.workloads()["W1"]
    prog = to_ir(wl.fn, wl.dynamic_axes, *wl.make_args(2, 3, np.random.default_rng(0)))
    assert not any(k.root.name == "broadcast_in_dim" for k in prog.kernels)


@pytest.mark.fast
def test_expensive_values_are_not_recomputed_per_broadcast_element():
    # exp(x) of shape [B] is broadcast to [B, 64]: it must be computed once, not 64 times
    def f(x, y):
        return jnp.exp(x)[:, None] * y
    prog = to_ir(f, ({0: "B"}, {0: "B"}), np.ones(3, np.float32), np.ones((3, 64), np.float32))
    (k,) = prog.kernels
    assert k.kind == "loop" and k.row_rank == 1      # rows of B: exp computed once per row
    src = generate(prog).source
    body = src[src.index("for (int64_t row = jd_lo"):]
    assert body.index("expf(") < body.index("for (int64_t c = 0")


@pytest.mark.fast
def test_column_reduction_fuses_its_input():
    prog = to_ir(lambda x: jnp.tanh(x).sum(axis=0), ({0: "N"},), np.ones((5, 8), np.float32))
    assert kernel_kinds(prog) == ["reduce"]


@pytest.mark.fast
def test_generated_stitch_kernel_is_vectorisable_shape():
    wl = W.workloads()["W2"]
    src = generate(to_ir(wl.fn, wl.dynamic_axes,
                         *wl.make_args(2, 3, np.random.default_rng(0)))).source
    assert "jd_parallel(" in src and "for (int64_t q = 0; q < 64; q++)" in src   # lanes
    assert "rowbuf0" in src                  # a row reused across phases stays in a row buffer


def _softmax_log_density(x):
    """A whole-array softmax and a log density over a vector of dynamic length: stitch
    kernels of one row, with a row buffer (exp) and three phases."""
    p = jax.nn.softmax(x)
    return p, jnp.sum(-0.5 * x * x - 0.9189385), jnp.max(jnp.abs(x), initial=0.0)


@pytest.mark.fast
def test_one_row_stitch_kernel_runs_in_lanes():
    # a kernel with one row has no rows to run across: no block of rows, no across-rows loop
    # (whose C compiled in 4 times the time), only the row's lanes
    prog = to_ir(_softmax_log_density, ({0: "N"},), np.ones(5, np.float32))
    assert "stitch" in kernel_kinds(prog)
    src = generate(prog).source
    assert "for (int64_t q = 0; q < 64; q++)" in src and "const int across" not in src


def test_one_row_stitch_kernel_matches_xla_at_every_length(rng):
    jf = jdisc.jit(_softmax_log_density, dynamic_axes=({0: "N"},))
    want = jax.jit(_softmax_log_density)
    for n in (0, 1, 2, 15, 16, 17, 63, 64, 65, 79, 80, 127, 129, 1031):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        for got, ref in zip(jf(x), want(x)):
            # f32 sums of up to 1031 terms, added in another order than XLA's: about sqrt(n)
            # ulps of the sum's scale (6e-8 each)
            assert_close(got, ref, 1e-5)
    assert jf.stats()["compiles"] == 1


def _long_row_reductions(x, y):
    """A softmax over rows of S x 3 columns (two column dims: the column index is split) plus
    y, and a product over them: every loop of a long row's path (a max, a row buffer, a sum,
    the output along the row, a product)."""
    e = jnp.exp(x - jnp.max(x, axis=(1, 2), keepdims=True))
    return e / jnp.sum(e, axis=(1, 2), keepdims=True) + y, jnp.prod(1.0 + 0.01 * x, axis=(1, 2))


def _long_row_oracle(x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    e = np.exp(x - np.max(x, axis=(1, 2), keepdims=True))
    return e / np.sum(e, axis=(1, 2), keepdims=True) + y, np.prod(1.0 + 0.01 * x, axis=(1, 2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_long_rows_last_columns_are_reduced_once_and_written(rng, dtype):
    # a row that runs alone (128 columns or more; a softmax's, 256 or more) ends in one block
    # of 16 that overlaps the block before it (stitch_loops.py `wide`): the columns in both
    # are written twice and must be reduced once. Rows of 3 x S columns: 129 (1 past a block:
    # the product alone, the softmax across), 159, 258, 261, 288 (none), 513, 771
    with jax.enable_x64(dtype == np.float64):
        jf = jdisc.jit(_long_row_reductions, dynamic_axes=({0: "B", 1: "S"},) * 2,
                       bridge=False)
        src = generate(to_ir(_long_row_reductions, ({0: "B", 1: "S"},) * 2,
                             *(np.ones((2, 50, 3), dtype),) * 2)).source
        assert "for (int64_t cs = 0; cs < n_cols; cs += 16)" in src
        for b, s in ((3, 43), (1, 53), (2, 86), (3, 87), (4, 96), (2, 171), (2, 257)):
            x = (rng.standard_normal((b, s, 3)) * 2).astype(dtype)
            y = rng.standard_normal((b, s, 3)).astype(dtype)
            # a product of up to 771 factors rounds 771 times (half an ulp each: at most 4.6e-5
            # of it in f32, 8.6e-14 in f64), a sum fewer; a column reduced twice or left out
            # moves the product by about 1 %
            tol = 5e-5 if dtype == np.float32 else 1e-13
            for what, got, want in zip(("softmax", "prod"), jf(x, y), _long_row_oracle(x, y)):
                assert_close(got, want.astype(dtype), tol, f"{what} at {b, s}")
        assert jf.stats()["compiles"] == 1


def _short_row_outputs(x, y):
    """A softmax over rows plus an input that only the output reads, and one scaled and
    truncated to int32: outputs of 4 bytes (and of 8 under x64) written from the lanes of a
    block of rows."""
    return (jax.nn.softmax(x, axis=-1) + y,
            (jax.nn.softmax(x * 2, axis=-1) * 1000).astype(jnp.int32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_short_rows_move_between_rows_and_lanes_exactly(rng, dtype):
    # rows under 128 columns run 16 at a time, one lane each: 4-byte inputs and outputs move
    # between rows and lanes by 16 x 16 tiles (jd_lanes.h), the last tile of a row overlapping
    # the one before it, a short block's lanes past its rows written nowhere; 8-byte ones
    # value by value. Blocks of 1, 7 and 16 rows and a 16-row block then 7; rows shorter
    # than a tile, one tile, a tile and one column, 100 to 255 columns (a softmax's rows run
    # across up to 255: stitch_loops.py ACROSS_BUFFERED)
    with jax.enable_x64(dtype == np.float64):
        axes = ({0: "B", 1: "S"},) * 2
        src = generate(to_ir(_short_row_outputs, axes, *(np.ones((2, 3), dtype),) * 2)).source
        # x and y (read by the output alone) staged by tiles in f32, the int32 output in both
        assert ("jd_to_lanes32(stage1" in src) == (dtype == np.float32)
        assert "jd_from_lanes32(jd_rows" in src
        jf = jdisc.jit(_short_row_outputs, dynamic_axes=axes, bridge=False)
        want = jax.jit(_short_row_outputs)
        for b, s in ((1, 3), (7, 16), (16, 17), (23, 1), (23, 15), (7, 33), (23, 100),
                     (16, 127), (3, 128), (5, 200), (2, 255)):
            x = (rng.standard_normal((b, s)) * 3).astype(dtype)
            y = rng.standard_normal((b, s)).astype(dtype)
            got, ref = jf(x, y), want(x, y)
            # a softmax: a few ulps of the row's sum, which rounds in another order
            assert_close(got[0], ref[0], 1e-6 if dtype == np.float32 else 1e-14, f"{b, s}")
            # p * 1000 truncated: a last-ulp difference in p may truncate the other way
            assert np.abs(np.asarray(got[1]) - np.asarray(ref[1])).max() <= 1, f"{b, s}"
        assert jf.stats()["compiles"] == 1


def _masked_attention_softmax(s, m, bias):
    """BERT's scores: scaled, plus an additive mask per batch and key ([B, S] broadcast over
    heads and queries) and a bias per key shared by every batch ([1, S])."""
    return jax.nn.softmax(s / 8.0 + m[:, None, None, :] + bias[:, None, None, :], axis=-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_masked_softmax_stages_its_broadcast_mask_by_rows(rng, dtype):
    # the mask and the bias are runs of their inputs along each row: short rows stage them
    # by tiles (stitch.py row_broadcast), the lanes of a block reading different batches'
    # masks where the block straddles two batches (3 x 12 x 5 rows: blocks of 16 cross them)
    with jax.enable_x64(dtype == np.float64):
        axes = ({0: "B", 2: "S", 3: "S"}, {0: "B", 1: "S"}, {1: "S"})
        src = generate(to_ir(_masked_attention_softmax, axes, np.ones((2, 12, 3, 3), dtype),
                             np.ones((2, 3), dtype), np.ones((1, 3), dtype))).source
        assert ("jd_to_lanes32(stage2" in src) == (dtype == np.float32)
        jf = jdisc.jit(_masked_attention_softmax, dynamic_axes=axes, bridge=False)
        for b, s in ((1, 1), (3, 5), (2, 16), (3, 17), (2, 33), (1, 100), (2, 127), (1, 128)):
            x = (rng.standard_normal((b, 12, s, s)) * 4).astype(dtype)
            m = np.where(rng.random((b, s)) < 0.3, -1e4, 0.0).astype(dtype)
            bias = rng.standard_normal((1, s)).astype(dtype)
            ref = jax.jit(_masked_attention_softmax)(x, m, bias)
            # a softmax: a few ulps of the row's sum, which rounds in another order
            assert_close(jf(x, m, bias), ref, 1e-6 if dtype == np.float32 else 1e-14,
                         f"{b, s}")
        assert jf.stats()["compiles"] == 1


def _flax_masked_softmax(s, m):
    """flax's attention weights: a float mask [B, 1, S, S] compared with 0, broadcast over the
    heads, selects the scores or the lowest float, then a softmax over the keys."""
    return jax.nn.softmax(jnp.where(m != 0, s, jnp.finfo(s.dtype).min), axis=-1)


def test_masked_softmax_computes_a_broadcast_boolean_mask_once_per_element(rng):
    # the mask's compare, computed in [B, 1, S, S] and broadcast over the heads: short rows
    # compute it once per element into a staged copy (as 4-byte 0s and 1s, stitch.py), where
    # the max's loop and the exp's loop each gathered the mask across the block's rows
    axes = ({0: "B", 2: "S", 3: "S"}, {0: "B", 2: "S", 3: "S"})
    src = generate(to_ir(_flax_masked_softmax, axes, np.ones((2, 3, 4, 4), np.float32),
                         np.ones((2, 1, 4, 4), np.float32))).source
    assert "int32_t *stage1 = (int32_t *)calloc(" in src
    jf = jdisc.jit(_flax_masked_softmax, dynamic_axes=axes, bridge=False)
    for b, s in ((1, 1), (3, 5), (2, 16), (3, 17), (2, 59), (1, 100), (1, 300)):
        x = (rng.standard_normal((b, 3, s, s)) * 4).astype(np.float32)
        m = (rng.random((b, 1, s, s)) < 0.7).astype(np.float32)
        ref = jax.jit(_flax_masked_softmax)(x, m)
        # a softmax: a few ulps of the row's sum, which rounds in another order
        assert_close(jf(x, m), ref, 1e-6, f"{b, s}")
    assert jf.stats()["compiles"] == 1


def _gather_concat(x, idx, keep):
    """A gathered, masked half beside the original: a concat kernel over [B, S, 8] halves."""
    g = jnp.take_along_axis(x, idx[..., None], axis=1)
    return jnp.concatenate([x, jnp.where(keep[..., None], g, jnp.nan)], axis=-1)


_GATHER_CONCAT_AXES = ({0: "B", 1: "S"},) * 3


def _gather_concat_args(rng, b, s):
    return (rng.standard_normal((b, s, 8)).astype(np.float32),
            rng.integers(0, max(s, 1), (b, s)).astype(np.int32), rng.random((b, s)) < 0.7)


@pytest.mark.fast
def test_concat_keeps_its_short_inner_loop():
    # unrolled whole, the 8-wide inner loop made GCC vectorise the S loop with a strided load
    # per step and lane (0.6 s of compile for this kernel); kept, it compiles in 35 ms
    prog = to_ir(_gather_concat, _GATHER_CONCAT_AXES,
                 *_gather_concat_args(np.random.default_rng(0), 2, 3))
    assert "concat" in kernel_kinds(prog)
    src = generate(prog).source
    assert src.count("#pragma GCC unroll 1\n") >= 2, "each operand's inner loop is kept"


def test_concat_with_kept_inner_loops_matches_xla(rng):
    jf = jdisc.jit(_gather_concat, dynamic_axes=_GATHER_CONCAT_AXES)
    for b, s in ((1, 1), (1, 2), (3, 5), (2, 17), (4, 97)):
        args = _gather_concat_args(rng, b, s)
        assert_close(jf(*args), jax.jit(_gather_concat)(*args), 0)   # copies and a select
    assert jf.stats()["compiles"] == 1



def _int_reductions(x, k):
    """An `any`, an `all` and an integer sum and max over each row: no float reduction."""
    return (jnp.any(x > 2.0, axis=-1), jnp.all(x > -2.0, axis=-1), jnp.sum(k, axis=-1),
            jnp.max(k, axis=-1, initial=-2**31))


_INT_AXES = ({0: "B", 1: "S"}, {0: "B", 1: "S"})


def _int_args(rng, b, s):
    return (rng.standard_normal((b, s)).astype(np.float32) * 1.5,
            rng.integers(-2**31, 2**31 - 1, (b, s), dtype=np.int64).astype(np.int32))


@pytest.mark.fast
def test_integer_row_reductions_take_one_accumulator_per_long_row():
    # any order gives an integer reduction's result: a long row is a plain loop, no lanes
    prog = to_ir(_int_reductions, _INT_AXES, *_int_args(np.random.default_rng(0), 2, 3))
    src = generate(prog).source
    assert "stitch" in kernel_kinds(prog)
    assert "q < 64" not in src and "acc0_l[1]" in src
    assert "const int across" in src    # short rows still run across the block's rows


def test_integer_row_reductions_match_xla(rng):
    jf = jdisc.jit(_int_reductions, dynamic_axes=_INT_AXES)
    want = jax.jit(_int_reductions)
    for b, s in ((1, 0), (3, 1), (2, 5), (17, 63), (5, 64), (3, 65), (2, 131), (1, 1031)):
        args = _int_args(rng, b, s)
        for got, ref in zip(jf(*args), want(*args)):
            assert_close(got, ref, 0)          # exact: wrapping sums, any order
    assert jf.stats()["compiles"] == 1


def _float_extremes(x):
    """A max and a min over each row, one with an init value inside the data's range, and
    the max of values made in the kernel (0 * inf: the CPU's default NaN has its sign set)."""
    return (jnp.max(x, axis=-1, initial=-jnp.inf), jnp.min(x, axis=-1, initial=jnp.inf),
            jnp.max(x, axis=-1, initial=0.25),
            jnp.max(x * jnp.where(x > 3, 0, 1).astype(x.dtype), axis=-1, initial=-jnp.inf))


def _extremes_oracle(x):
    """_float_extremes by StableHLO's rules: a NaN anywhere in the row gives NaN, max(-0, +0)
    is +0 and min(-0, +0) is -0. (XLA's CPU reductions of a few thousand values drop NaNs,
    so jax.jit is no reference for those rows.)"""
    def extreme(v, init, big):
        nan = np.isnan(v).any(axis=-1)
        clean = np.where(np.isnan(v), -np.inf if big else np.inf, v)
        out = np.max(clean, axis=-1, initial=init) if big else \
            np.min(clean, axis=-1, initial=init)
        plus = ((v == 0) & ~np.signbit(v)).any(axis=-1) | ((out == 0) & ~np.signbit(init))
        minus = ((v == 0) & np.signbit(v)).any(axis=-1) | ((out == 0) & np.signbit(init))
        zero = np.where(plus, 0.0, -0.0) if big else np.where(minus, -0.0, 0.0)
        return np.where(nan, np.nan, np.where(out == 0, zero, out)).astype(v.dtype)
    with np.errstate(invalid="ignore"):
        made = x * np.where(x > 3, 0, 1).astype(x.dtype)
    return (extreme(x, -np.inf, True), extreme(x, np.inf, False), extreme(x, 0.25, True),
            extreme(made, -np.inf, True))


def _extreme_rows(rng, b, s, dtype):
    x = rng.standard_normal((b, s)).astype(dtype)
    for row in range(b):        # each row its own mix of signed zeros, NaNs and infinities
        kind = row % 6
        if kind == 0 and s:
            x[row] = -0.0
            x[row, rng.integers(s)] = 0.0
        elif kind == 1:
            x[row] = np.where(rng.random(s) < 0.5, 0.0, -0.0)
        elif kind == 2 and s:
            x[row, rng.integers(s)] = np.nan
        elif kind == 3:
            x[row] = -np.inf
        elif kind == 4 and s:
            x[row, rng.integers(s)] = np.inf      # times 0: a NaN made in the kernel
        elif kind == 5:
            x[row] = np.abs(x[row])
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_and_min_reductions_follow_stablehlo(rng, dtype):
    # every path of a stitch kernel's reduction: rows across a block (short; 4 accumulators
    # a row, the last group of columns repeating the last: 3, 5 and 15 columns), lanes
    # (long), with NaNs (of either sign), infinities and signed zeros, each row its own mix
    with jax.enable_x64(dtype == np.float64):
        jf = jdisc.jit(_float_extremes, dynamic_axes=({0: "B", 1: "S"},), bridge=False)
        for b, s in ((1, 0), (6, 1), (7, 2), (9, 3), (8, 5), (12, 15), (18, 16), (13, 63),
                     (6, 64), (7, 65),
                     (12, 100), (6, 1031), (6, 4099)):
            x = _extreme_rows(rng, b, s, dtype)
            for got, ref in zip(jf(x), _extremes_oracle(x)):
                got = np.asarray(got)
                assert got.dtype == ref.dtype == dtype
                np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{b, s}")
                ok = ~np.isnan(ref)
                np.testing.assert_array_equal(got[ok], ref[ok], err_msg=f"{b, s}")
                np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(ref[ok]))
        assert jf.stats()["compiles"] == 1


@pytest.mark.fast
def test_kernels_with_transcendentals_share_rows_from_fewer_elements():
    # a softmax's exp costs several loads' time: its rows go to the pool from a quarter of
    # the elements a plain elementwise kernel needs (loops.py parallel_min_work)
    x = np.ones((2, 3), np.float32)
    src = generate(to_ir(lambda x: jax.nn.softmax(x, axis=-1), ({0: "B", 1: "S"},), x)).source
    assert f">= {1 << 16})" in src and f">= {1 << 18})" not in src
    src = generate(to_ir(lambda x: jnp.tanh(x) * 2, ({0: "B", 1: "S"},), x)).source
    assert f">= {1 << 16})" in src
    src = generate(to_ir(lambda x: x * 2 + 1, ({0: "B", 1: "S"},), x)).source
    assert f">= {1 << 18})" in src and f">= {1 << 16})" not in src


SPECULATIVE = """
func.func @main(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %n = stablehlo.get_dimension_size %a, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
  %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
  %c4 = stablehlo.constant dense<4> : tensor<1xi32>
  %s = stablehlo.concatenate %n1, %c4, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %bb = stablehlo.dynamic_broadcast_in_dim %b, %s, dims = [0, 1]
      : (tensor<?x4xf32>, tensor<2xi32>) -> tensor<?x4xf32>
  %r = stablehlo.add %a, %bb : tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}
"""


def test_speculative_broadcast_versions_each_run():
    f = jdisc.compile_stablehlo(SPECULATIVE)
    (k,) = f.program.kernels
    assert len(k.versions) == 2 and "d1_0 == d0_0" in k.versions[0]
    assert "_v0(" in f.cprog.source and "_v1(" in f.cprog.source
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b_same, b_one = np.ones((3, 4), np.float32), np.full((1, 4), 10, np.float32)
    assert_close(f(a, b_same)[0], a + b_same, 0)     # version 0: no broadcast
    assert_close(f(a, b_one)[0], a + b_one, 0)       # version 1: broadcast of a size-1 dim
    with pytest.raises(jdisc.ShapeError, match="must be 1 or equal"):
        f(a, np.ones((2, 4), np.float32))


def test_memory_reuse_with_sizes_that_would_collide(rng):
    # buffers of B*S and B*S*S elements alternate; a plan that confused them would overwrite
    # live data at some shapes. Differential at shapes where either is larger.
    def f(x, w):
        h = jnp.tanh(x @ w)                       # [B, S, 8]
        a = jnp.einsum("bsd,btd->bst", h, h)      # [B, S, S]
        z = jax.nn.softmax(a, axis=-1) @ h        # [B, S, 8]
        return jnp.tanh(z).sum(-1) + jnp.exp(a).mean(-1)
    jf = jdisc.jit(f, dynamic_axes=({0: "B", 1: "S"}, None))
    w = rng.standard_normal((16, 8)).astype(np.float32) / 4
    for b, s in ((1, 1), (3, 2), (2, 9), (1, 40), (5, 3)):
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        assert_close(jf(x, w), jax.jit(f)(x, w), 2e-5)
    assert jf.stats()["compiles"] == 1


def test_multi_output_fusion_of_siblings(rng):
    def f(x, y):
        return jnp.tanh(x) * y, x + 2 * y      # two outputs over the same shape, same inputs
    prog = to_ir(f, ({0: "N"}, {0: "N"}), np.ones((3, 8), np.float32), np.ones((3, 8), np.float32))
    assert kernel_kinds(prog) == ["loop"] and len(prog.kernels[0].outputs) == 2
    jf = jdisc.jit(f, dynamic_axes=({0: "N"}, {0: "N"}))
    for n in (1, 7, 300):
        x, y = rng.standard_normal((2, n, 8)).astype(np.float32)
        jax.tree_util.tree_map(lambda g, w: assert_close(g, w, 2e-6), jf(x, y), jax.jit(f)(x, y))


def test_multi_output_fusion_keeps_dependencies(rng):
    # b depends on a reduction computed after a; merging b into a's kernel would read it early
    def f(x):
        a = x * 2
        m = jnp.max(x, axis=1, keepdims=True)
        return a, x - m
    jf = jdisc.jit(f, dynamic_axes=({0: "N"},))
    for n in (1, 5):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        jax.tree_util.tree_map(lambda g, w: assert_close(g, w, 0), jf(x), jax.jit(f)(x))


def test_row_shaped_value_spread_along_columns_is_not_a_row_value():
    # arange(n)[:, None] == arange(n)[None, :]: one iota of shape [N] (== the row shape) read
    # at the row index by one broadcast and at the column index by the other; caching it once
    # per row gave an all-true mask
    def diag_and_rest(a):
        n = a.shape[0]
        eye = jnp.arange(n)[:, None] == jnp.arange(n)[None, :]
        return jnp.sum(jnp.where(eye, a, 0.0), axis=1), jnp.where(eye, 0.0, a)

    f = jdisc.jit(diag_and_rest, dynamic_axes=({0: "N", 1: "N"},))
    for n in (1, 2, 3, 17):
        a = np.arange(n * n, dtype=np.float32).reshape(n, n)
        d, rest = f(a)
        assert_close(d, np.diag(a).astype(np.float32), 0)
        assert_close(rest, a - np.diag(np.diag(a)), 0)


def test_transposed_gemm_results_fold_into_the_gemm(rng):
    # jax's weight gradient is transpose(dot(g, x)); (G^T X)^T = X^T G is one GEMM, no copy
    p = W.mlp_params(d_in=16, hidden=32, d_out=8)

    def step(params, x, y):
        return jax.grad(lambda q: jnp.mean((W.mlp(q, x) - y) ** 2))(params)
    x, y = np.ones((3, 16), np.float32), np.ones((3, 8), np.float32)
    prog = to_ir(step, (None, {0: "N"}, {0: "N"}), p, x, y)
    assert not [k for k in prog.kernels if any(op.name == "transpose" for op in k.ops)]
    f = jdisc.jit(step, dynamic_axes=(None, {0: "N"}, {0: "N"}))
    for n in (1, 5, 40):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        y = rng.standard_normal((n, 8)).astype(np.float32)
        jax.tree_util.tree_map(lambda a, b: assert_close(a, b, 1e-5), f(p, x, y),
                               jax.jit(step)(p, x, y))


def _in_place_chain(x, w, b):
    """Elementwise kernels after GEMMs, each writing over the GEMM output that dies at it (the
    memory plan's in-place rule), one of them reading that output twice, one with a mask."""
    h = jax.nn.relu(x @ w + b)                      # bias + ReLU over the GEMM's output
    g = jax.nn.gelu(h @ w, approximate=True)        # GELU, the output read 3 times
    m = x @ w
    z = jnp.where(m > 0, m * g, -m)                 # two inputs, only m dies here
    return (z @ w).sum(-1), g[:, 0]


def test_kernels_writing_in_place_match_jax(rng):
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    prog = to_ir(_in_place_chain, ({0: "N"}, None, None), np.ones((3, 64), np.float32), w, b)
    shared = [k for k in prog.kernels if k.writes_over]
    assert len(shared) >= 2 and all(k.kind == "loop" for k in shared)
    # 1, small primes and a size the pool splits over threads; under the sanitizer too
    check_against_jax(_in_place_chain, ({0: "N"}, None, None),
                      lambda n: (rng.standard_normal((n, 64)).astype(np.float32), w, b),
                      [1, 2, 7, 61, 4099], tol=2e-5)


def test_transposes_that_move_the_last_dim_run_in_tiles_and_stay_exact(rng):
    """A loop kernel that transposes its input's last dim away reads across its rows; it
    runs in tiles where a row's input lines would leave L1 (lowering/loops.py TILE_ROWS).
    Each way it can run is exact, with a fused op and two outputs: the whole row (lines
    that fit), tiles 32 columns wide, 16 and 8 wide (strides of 2 and 4 KB put the lines in
    2 and 1 of L1's sets), at sizes 0, 1, primes and past a tile's 64 rows."""
    def f(x):
        t = jnp.transpose(x, (0, 2, 1))
        return t * 2.0 + 1.0, jnp.transpose(x, (2, 1, 0))
    jf = jdisc.jit(f, dynamic_axes=({0: "b", 1: "n", 2: "m"},))
    prog = to_ir(f, ({0: "b", 1: "n", 2: "m"},), np.ones((2, 3, 5), np.float32))
    src = generate(prog).source
    assert src.count("for (int64_t cb = 0; cb < n_cols; cb += tw)") == 2   # both kernels
    shapes = [(0, 3, 4), (2, 0, 3), (3, 4, 0), (1, 1, 1), (2, 3, 5),
              (3, 100, 100),        # rows of 100 lines at 400 B: whole rows
              (2, 300, 67),         # 300 lines a row at 268 B: whole rows
              (2, 700, 67),         # 700 lines: tiles of 32
              (2, 97, 512),         # a stride of 2 KB: tiles of 16
              (1, 70, 1024),        # 4 KB: tiles of 8
              (1, 1024, 131)]       # a stride of 524 B, 1024 lines a row: tiles of 32
    for s in shapes:
        x = rng.standard_normal(s).astype(np.float32)
        got = jf(x)
        assert_close(got[0], np.transpose(x, (0, 2, 1)) * 2 + 1, 0)
        assert_close(got[1], np.transpose(x, (2, 1, 0)), 0)
    assert jf.stats()["compiles"] == 1


def test_a_softmax_over_transposed_scores_stages_each_lanes_row():
    # scores laid out [B, S, H, T] (nnx's attention has its einsum's output so), transposed to
    # [B, H, S, T] into a masked softmax over T: each row is a run of the input, but a block's
    # rows are far apart, so across the rows each read was a gather and the loop stayed scalar
    # (6x slower than each row alone at T = 59), and such kernels ran rows of 16 or more
    # alone. Now each lane's row is computed contiguously into the block's rows, then moved
    # into the lanes by tiles (stitch_loops.py `rowstage`), and short rows run across the
    # block's rows as other softmaxes' do; results at every length, both ways.
    import jax
    import jax.numpy as jnp
    import jdisc

    def attend(s):
        s = jnp.transpose(s * 0.5, (0, 2, 1, 3))                # [B, H, S, T]
        n = s.shape[-1]
        causal = jnp.tril(jnp.ones((n, n), bool))
        return jax.nn.softmax(jnp.where(causal, s, -1e30), axis=-1)

    f = jdisc.jit(attend, dynamic_axes=({0: "b", 1: "s", 3: "s"},))
    rng = np.random.default_rng(3)
    ref = jax.jit(attend)
    for b, s in [(1, 1), (2, 2), (1, 15), (2, 16), (1, 17), (3, 31), (1, 59), (2, 64), (1, 65),
                 (1, 127), (1, 128), (1, 131)]:
        x = rng.standard_normal((b, s, 2, s)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(f(x)), np.asarray(ref(x)), rtol=3e-6,
                                   atol=1e-7, err_msg=f"b={b}, s={s}")
    assert f.stats()["compiles"] == 1
    c = f.compiled_for(x).c_source
    assert f"const int across = n_cols < {ACROSS_BUFFERED};" in c
    assert "jd_to_lanes32(stage0, jd_rows, n_cols);" in c and "rowstage" in c


def test_a_pool_over_channels_moved_last_reads_them_from_a_tiled_transpose(rng):
    # equinox pools NCHW by moving the channels last, reduce_window, and back: fused into the
    # window kernel, each of its lanes (the channels) was a strided read, at every window
    # position (equinox's CNN spent most of its time in that GroupNorm + ReLU + max-pool
    # kernel). The transpose (with its producers) is a loop kernel of its own now.
    from jax import lax

    def pool(x, s):                                        # x [B, C, H, W]
        y = jnp.moveaxis(jnp.maximum(x * s, 0), 1, -1)     # [B, H, W, C]
        y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                              ((0, 0), (1, 1), (1, 1), (0, 0)))
        return jnp.moveaxis(y, -1, 1)

    axes = ({0: "b", 2: "h", 3: "w"}, None)
    prog = to_ir(pool, axes, np.ones((2, 8, 5, 7), np.float32), np.float32(2))
    window = [k for k in prog.kernels if k.kind == "window"]
    assert len(window) == 1 and not any(op.name == "transpose" for op in window[0].ops)
    check_against_jax(pool, axes, lambda n: (
        rng.standard_normal((n % 3 + 1, 8, n, n + 2)).astype(np.float32), np.float32(1.5)),
        (0, 1, 2, 5, 8, 13))


def test_moves_that_end_in_the_order_they_began_fold_away(rng):
    # equinox's MaxPool2d hands its NHWC window result back as NCHW and its Conv2d adds and
    # drops a group dim and moves the channels last again: the chain ends where it began, so
    # it folds to the value itself (it was a kernel of divisions per element, and a copy)
    def back_and_forth(x):                                   # x [B, H, W, C]
        y = jnp.transpose(x * 2, (0, 3, 1, 2))[:, None]     # [B, 1, C, H, W]
        y = y.reshape(y.shape[0], y.shape[2], y.shape[3], y.shape[4])
        return jnp.transpose(y, (0, 2, 3, 1)) + 1            # [B, H, W, C]

    def elsewhere(x):                                        # ends out of order: kept
        y = jnp.transpose(x * 2, (0, 3, 1, 2))[:, None]
        return jnp.transpose(y, (0, 1, 3, 2, 4)) + 1          # [B, 1, H, C, W]

    axes = ({0: "b", 1: "h", 2: "w"},)
    x = np.ones((2, 3, 5, 4), np.float32)
    names = [op.name for op in to_ir(back_and_forth, axes, x).body.ops]
    assert "transpose" not in names, names
    names = [op.name for op in to_ir(elsewhere, axes, x).body.ops]
    assert names.count("transpose") == 2, names
    for f in (back_and_forth, elsewhere):
        check_against_jax(f, axes, lambda n: (
            rng.standard_normal((n % 3, n, n + 1, 4)).astype(np.float32),), (0, 1, 2, 7))
