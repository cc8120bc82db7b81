"""Regression tests for the bug classes found on real programs (issue 11): each one as the user
program that exposed it and as the smallest form of the root cause, against jax.jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import assert_close, assert_compile_linear, check_against_jax

SIZES = (1, 2, 3, 5, 7, 13)


# -- 1. per-row values are decided from index maps, not shapes ---------------------------------

def test_outer_difference_after_adding_an_axis():
    # x[None, :] has shape [1, N]; read along columns, not once per row
    f = lambda x: -(x[:, None] - x[None, :])[None]
    check_against_jax(f, ({0: "S"},), lambda n: (np.arange(n, dtype=np.float32) * 1.5,), SIZES)


def test_flax_style_causal_mask():
    def make_causal_mask(x):   # what flax.linen.make_causal_mask computes
        idx = jnp.broadcast_to(jnp.arange(x.shape[-1], dtype=jnp.int32), x.shape)
        return (idx[..., :, None] >= idx[..., None, :])[..., None, :, :].astype(jnp.float32)
    check_against_jax(make_causal_mask, ({0: "B", 1: "S"},),
                      lambda n: (np.zeros((2, n), np.int32),), SIZES)


def test_padding_mask_merged_into_causal_mask_for_heads():
    def mask(pad, causal):
        return jnp.minimum(pad[:, None, :], causal)[:, None] > 0
    rng = np.random.default_rng(0)
    check_against_jax(
        mask, ({0: "B", 1: "S"}, {0: "S", 1: "S"}),
        lambda n: ((rng.random((3, n)) > 0.4).astype(np.float32),
                   np.tril(np.ones((n, n), np.float32))), SIZES)


def test_row_value_read_through_transpose_is_not_cached():
    f = lambda x: jnp.exp(x[:, :1]) + jnp.exp(x[:, :1]).T   # [N,1] + [1,N]
    check_against_jax(f, ({0: "N"},), lambda n: (np.linspace(0, 1, 2 * n, dtype=np.float32)
                                                .reshape(n, 2),), SIZES, tol=2e-6)


def test_stitch_row_value_and_column_value_of_one_shape():
    def f(x):   # softmax, then a per-row max broadcast along a new middle axis
        s = jax.nn.softmax(x, axis=-1)
        return s[:, None, :] * jnp.max(x, axis=-1)[None, :, None]
    check_against_jax(f, ({0: "N", 1: "M"},), lambda n: (np.linspace(-1, 1, n * 3, dtype=np.float32)
                                                        .reshape(n, 3),), SIZES, tol=2e-6)


# -- 2. fused groups stay convex; no kernel reads a buffer before it is written -------------------

def test_masked_variance_leaves_and_reenters_a_group():
    def f(x, d):
        return jnp.sum(x - jnp.sum(x, 0, keepdims=True) / d, 0, keepdims=True) / d
    d = np.array([[2.0, 3.0, 4.0]], np.float32)
    check_against_jax(f, ({0: "b"}, None),
                      lambda n: (np.arange(3 * n, dtype=np.float32).reshape(n, 3), d), SIZES,
                      tol=2e-6)


def test_jnp_var_with_where_keepdims():
    def f(x, m):
        return jnp.var(x, axis=0, keepdims=True, where=m)
    rng = np.random.default_rng(1)
    check_against_jax(f, ({0: "b"}, {0: "b"}),
                      lambda n: (rng.standard_normal((n, 4)).astype(np.float32),
                                 np.ones((n, 4), bool)), (1, 2, 5, 13), tol=1e-5)


def test_value_read_by_a_fused_op_and_by_a_materialised_broadcast():
    # v feeds a multiply (fused, broadcast along columns) and v[None], a program output that is
    # its own kernel: that kernel reads v, so v must be written even though the multiply
    # recomputes it
    def g(x):
        v = x.reshape(x.shape[0], 1)
        return v * x, v[None]
    check_against_jax(g, ({0: "a"},), lambda n: (np.arange(n, dtype=np.float32),), SIZES)


# -- 3. compile time is linear in the depth of a fused DAG --------------------------------------

def _shared_dag(chains, depth):
    def f(x):
        xs = [x + 1e-4 * i for i in range(chains)]
        for step in range(depth):
            xs = [v * v + v for v in xs]
            if chains > 1 and step % 50 == 0:   # chains mix now and then: more sharing
                xs = [xs[i] + 0.5 * xs[(i + 1) % chains] for i in range(chains)]
        return sum(xs)
    return f


@pytest.mark.parametrize("chains", [1, 3])
def test_deep_shared_dag_compiles_fast(chains):
    # x = x*x + x reads x three times: a walk per path is 3^depth; the compiler must be linear.
    # StableHLO -> IR -> every pass -> C (not the C compiler): 0.45 s for 1,800 ops here with the
    # tests' IR and plan checks; a walk per path would take hours.
    assert_compile_linear(lambda d: _shared_dag(chains, d), (np.full(5, 1e-3, np.float32),),
                          ({0: "n"},))
    f = _shared_dag(chains, 200)
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    for n in (1, 4):
        x = np.full(n, 1e-3, np.float32)
        assert_close(jf(x), jax.jit(f)(x), 1e-5)


# -- 6. a reduce's init value is applied once per result element ---------------------------------
# With an init that is not the reducer's identity, XLA:CPU's answer depends on the shape: a
# reduction over one element becomes a reshape (init dropped), long rows are reduced in several
# partial sums that each start from the init (lax.reduce(x, 3, add, (1,)) over 40 elements adds 9).
# The StableHLO interpreter, and jdisc, apply it exactly once; the reference is numpy.

_NP = {jax.lax.add: np.add, jax.lax.mul: np.multiply, jax.lax.max: np.maximum,
       jax.lax.min: np.minimum}


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("op, init", [(jax.lax.add, 3), (jax.lax.mul, 2), (jax.lax.max, 5),
                                      (jax.lax.min, -4)])
@pytest.mark.parametrize("axes", [(1,), (0,), (0, 1)])
def test_reduce_with_a_non_identity_init(op, init, axes, dtype):
    f = lambda x: (jax.lax.reduce(x, dtype(init), op, axes),
                   jax.lax.reduce(x * 2, dtype(init), op, axes))
    jf = jdisc.jit(f, dynamic_axes=({1: "n"},))
    rng = np.random.default_rng(2)
    for n in (0, 1, 6, 17, 40):
        x = (rng.integers(-3, 4, (2, n)) if op is not jax.lax.mul
             else rng.choice([-1, 1], (2, n))).astype(dtype)
        for got, xs in zip(jf(x), (x, x * 2)):
            want = _NP[op].reduce(xs, axis=axes, initial=dtype(init))   # init once
            assert_close(got, np.asarray(want, dtype), 0, f"n={n}")
    assert jf.stats()["compiles"] == 1


def test_reduce_with_a_non_identity_init_in_a_stitch_kernel():
    f = lambda x: x - jax.lax.reduce(x, np.float32(1.5), jax.lax.add, (1,))[:, None]
    jf = jdisc.jit(f, dynamic_axes=({1: "n"},))
    for n in (1, 6, 17, 40):   # the reduction's consumer joins it: 16 lanes, one init
        x = np.ones((3, n), np.float32)
        assert_close(jf(x), x - (n + 1.5), 0, f"n={n}")


def test_row_reductions_with_rows_of_size_one():
    # a static row dim of size 1 is always index 0: still the reduction's own row
    f = lambda x: (jnp.max(x, axis=1), x - jnp.max(x, axis=-1, keepdims=True) * x[:, :1])
    for shape in ((1, 3), (1, 1)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 1
        jax.tree_util.tree_map(lambda g, w: assert_close(g, w, 0),
                               jdisc.jit(f, dynamic_axes=(None,))(x), jax.jit(f)(x))
    check_against_jax(f, ({1: "n"},), lambda n: (np.linspace(-1, 1, n, dtype=np.float32)[None],),
                      SIZES)


# -- found by the program fuzzer (tests/program_fuzz.py), each the shrunk program -----------------

def test_softmax_over_a_single_static_element():
    # every value of the stitch kernel is a row value (rows and columns of size 1): the
    # reduction input is not buffered per column, and the divide reads the row's scalar
    f = lambda x: jax.nn.softmax(x, axis=0)
    for shape in ((1,), (1, 1)):
        x = np.full(shape, 0.75, np.float32)
        assert_close(jdisc.jit(f, dynamic_axes=(None,))(x), jax.jit(f)(x), 1e-7)
    check_against_jax(f, ({0: "n"},), lambda n: (np.linspace(-1, 1, n, dtype=np.float32),),
                      SIZES, tol=2e-7)


def test_reduction_read_by_a_window_kernel():
    # the total is not fused into the cummax (reduce_window) kernel, which cannot render it
    f = lambda x: jax.lax.cummax(jnp.sum(x) * x, axis=0)
    x = np.array([0.5], np.float32)
    assert_close(jdisc.jit(f, dynamic_axes=(None,))(x), jax.jit(f)(x), 0)
    check_against_jax(f, ({0: "n"},), lambda n: (np.linspace(-1, 1, n, dtype=np.float32),),
                      SIZES, tol=1e-6)


def test_negative_padding_makes_a_dim_that_must_be_checked():
    # `a - 1` must be >= 0 at run time: a shape-propagation check, so a fact the memory plan
    # (and its checker) may use: the slot of [a - 1, 2a, a - 1] is non-negative for a >= 1
    def f(x):
        v = jax.lax.pad(x, jnp.float32(0.0), ((0, -1, 0), (1, 0, 1)))
        v = jax.lax.broadcast_in_dim(v, (v.shape[0], v.shape[1], v.shape[0]), (0, 1))
        return jnp.sum(v, axis=1, keepdims=True)
    make = lambda n: (np.arange(n * n, dtype=np.float32).reshape(n, n),)
    jf, _ = check_against_jax(f, ({0: "a", 1: "a"},), make, SIZES)
    with pytest.raises(jdisc.ShapeError, match=r"negative dimension a - 1.*a = 0"):
        jf(*make(0))


def test_slice_of_a_dim_that_may_be_shorter_than_the_slice():
    # x[:, 1:3] has min(a, 3) - 1 columns; `>= 0` is a fact, so its buffer's size is provably
    # non-negative (the plan checker used to refuse it)
    f = lambda x: (x[:, 1:3] + x[:, 1:3].shape[1], x[:, 1:3] * x[:, 1:3].shape[1])
    check_against_jax(f, ({0: "a", 1: "a"},),
                      lambda n: (np.arange(n * n, dtype=np.float32).reshape(n, n),), SIZES)


def test_dynamic_slice_of_a_symbolic_size_clamps_its_start_on_the_host():
    # jax clamps the start of a dynamic_slice with a symbolic size into the operand:
    # clamp(0, start, dim - size), evaluated symbolically (it used to be refused)
    f = lambda x: (jax.lax.dynamic_slice_in_dim(x[:, 1::2], 3, 1, axis=0),
                   jax.lax.dynamic_slice_in_dim(x, 2, x.shape[1] // 2, axis=1))
    check_against_jax(f, ({1: "b"},), lambda n: (np.arange(n, dtype=np.int32)[None] % 3 == 0,),
                      SIZES)


def test_slot_size_whose_sign_shows_only_in_its_factors():
    # [b, b, b, b - min(b, 2)]: the expanded size 4b^3*... - 4b^3*min(b, 2) hides that it is a
    # product of non-negative dims; the plan checker sees it from the value in the slot
    f = lambda x, y: jnp.einsum("ijk,lin->jkln", x, y[:, :, 2:])
    make = lambda n: (np.linspace(-2, 2, n ** 3, dtype=np.float32).reshape(n, n, n),) * 2
    check_against_jax(f, ({0: "b", 1: "b", 2: "b"},) * 2, make, (1, 2, 3, 5), tol=1e-6)


def test_clz_of_a_negative_constant():
    # found by the fuzzer, and not a jdisc bug: XLA constant-folds clz(-2) to -32 (its compiled
    # kernels give 0); jdisc gives 0 whether the value is a constant or an argument
    g = lambda x: jax.lax.clz(jnp.arange(x.shape[0], dtype=jnp.int32) - 2)
    for n in (1, 3, 5):
        want = np.array([32 - int(v).bit_length() if v >= 0 else 0 for v in range(-2, n - 2)],
                        np.int32)
        assert_close(jdisc.jit(g, dynamic_axes=(None,))(np.zeros(n, np.int32)), want, 0)
        assert_close(jdisc.jit(g, dynamic_axes=({0: "n"},))(np.zeros(n, np.int32)), want, 0)
        assert_close(jax.jit(jax.lax.clz)(np.arange(n, dtype=np.int32) - 2), want, 0)


def test_scan_over_a_strided_slice_of_a_dynamic_dim():
    # the scan's per-step dynamic_slice has sizes jax computes with floor_divide (a launcher
    # computation, not a Dim): the data-start slice is still recognised, its sizes bound
    def f(x0, x1):
        return jax.lax.scan(lambda c, x: (c + x[0, :c.shape[1]].sum(), c), x0, x1[:, :, 2::3])
    make = lambda n: (np.arange(n, dtype=np.float32)[None] / 4,
                      np.linspace(-1, 1, 2 * n, dtype=np.float32).reshape(2, 1, n))
    check_against_jax(f, ({1: "b"}, {2: "b"}), make, (0, 1, 2, 3, 7, 13), tol=1e-6)


def test_row_reduction_read_by_a_reduction_over_a_leading_dim():
    # the sum over axis 0 is not a row reduction: it cannot be the stitch kernel of the min
    f = lambda x: jnp.sum(jnp.min(x, axis=2, keepdims=True), axis=0)
    x = np.arange(2, dtype=np.int32).reshape(1, 2, 1)
    assert_close(jdisc.jit(f, dynamic_axes=(None,))(x), jax.jit(f)(x), 0)
    check_against_jax(f, ({0: "a", 1: "b"},),
                      lambda n: (np.arange(n * 3 * 4, dtype=np.int32).reshape(n, 3, 4) % 7,),
                      SIZES)


def test_scan_stacking_a_slice_with_a_min_size():
    # found by the fuzzer (batch seed 34000069): the scan's stacked output has
    # 4*a*(a - min(a, 2)) bytes, expanded to 4a^2 - 4a*min(a, 2); the plan checker could not
    # show the slot size non-negative (min(a, 2) <= a was never used) and refused the program
    def f(x0, x1):
        v3 = jnp.broadcast_to(x0, (x0.shape[0], x1[:, 2:].shape[1]))
        return jax.lax.scan(lambda c, x: (c, c), v3, v3)[1]
    make = lambda n: (np.linspace(-1, 1, n, dtype=np.float32).reshape(n, 1),
                      np.zeros((n, n), np.float32))
    check_against_jax(f, ({0: "a"}, {0: "a", 1: "a"}), make, (0, 1, 2, 3, 7), tol=0)


def test_loop_carry_whose_size_expands_to_a_square_of_a_min():
    # found by the fuzzer (batch seed 35000009): the fori_loop's scratch (a second buffer of
    # the carry, [a, a - min(a, 2), a, a - min(a, 2)]) has a size whose expanded polynomial
    # has negative terms; the plan checker now reads its sign from the carried dims
    def f(x1, x2):
        a = x1.shape[0]
        v3 = x2[:, 2:]
        v4 = jax.lax.broadcast_in_dim(x1, (a, v3.shape[1], a, v3.shape[1]), (0, 1))
        return jax.lax.fori_loop(0, 2, lambda i, c: -c + 1, v4)
    make = lambda n: (np.arange(n, dtype=np.int32).reshape(n, 1), np.zeros((n, n), np.int32))
    check_against_jax(f, ({0: "a"}, {0: "a", 1: "a"}), make, (0, 1, 2, 3, 5), tol=0)


def test_stitch_row_read_through_a_broadcast_only_the_checks_prove_exact():
    # found by the fuzzer (batch seed 35000051): the padded rows are a + max(a - 1, 0) - 1, the
    # softmax's broadcasts say 2*a - 2; the planner fused the softmax on the launcher's check
    # that the two agree, but the lowering judged the broadcast with the bare algebra, read the
    # row maximum "at another row" and refused. Both now use the facts the checks establish.
    f = lambda x: jax.nn.softmax(jax.lax.pad(x, -2.0, ((-1, 0, 1), (-1, 2, 0), (0, 0, 0))), axis=2)
    make = lambda n: (np.linspace(-1, 1, n, dtype=np.float32).reshape(n, 1, 1),)
    check_against_jax(f, ({0: "a"},), make, (1, 2, 3, 7, 13), tol=1e-6)


def test_branch_result_whose_size_the_launcher_derives():
    # found by the fuzzer (slow tier, batch seed 14559357): both branches of a cond broadcast to
    # [ceil(a / 2), a, 1], a size jax writes as a select on signs (a dim `_h0` the launcher
    # derives); its `>= 0` check stayed in the branch, while the program around the cond
    # allocates the cond's result (of that size) before a branch runs, and the plan checker
    # refused the program. The check now goes to the program that derives the dim.
    def f(x1):
        a = x1.shape[0]
        v2 = jax.lax.reduce_window(x1, -jnp.inf, jax.lax.max, (1, 2, 3), (2, 1, 1), "SAME")
        v3 = jax.lax.cond(jnp.asarray(a) > 1, lambda p: jax.nn.logsumexp(p, axis=2, keepdims=True),
                          lambda p: jnp.sum(p, axis=2, keepdims=True), v2)
        return v3[:, :, ::3]
    make = lambda n: (np.linspace(-2, 2, n * n, dtype=np.float32).reshape(n, n, 1),)
    check_against_jax(f, ({0: "a", 1: "a"},), make, (0, 1, 2, 3, 7, 13), tol=1e-6)


def test_shifts_by_out_of_range_amounts_in_a_parallel_kernel():
    # found by the fuzzer (slow tier, batch seed 16248555): x1 << x0 and x2 << x0 in one loop
    # kernel over [4, 4, 2] int32, shift amounts -3..3; GCC 12 (-O3, AVX2) if-converted the
    # shift's range test and gave 0 in 3 of 32 lanes. The kernel carried JD_KEEP_BRANCHES, which
    # avoids that miscompile, but its loop lives in its parallel loop's function, which did
    # not; it does now (test_compiler_probe.py checks the generated C for every such loop)
    def f(x0, x1, x2):
        v3 = jax.lax.shift_left(x2, x0)
        return jax.lax.shift_left(x1, x0), v3
    rng = np.random.default_rng(16248555002)
    x0 = rng.integers(-3, 3, (4, 4, 2), endpoint=True).astype(np.int32)
    x1 = rng.integers(-3, 2, (4, 4, 2), endpoint=True).astype(np.int32)
    x2 = rng.integers(-5, 50, (1, 1, 1), endpoint=True).astype(np.int32)
    for got, want in zip(jdisc.jit(f)(x0, x1, x2), jax.jit(f)(x0, x1, x2)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    make = lambda n: (np.arange(-40, 8 * n - 40, dtype=np.int32).reshape(n, 4, 2) % 37 - 3,
                      np.arange(8 * n, dtype=np.int32).reshape(n, 4, 2) - 5,
                      np.full((1, 1, 1), 7, np.int32))
    check_against_jax(f, ({0: "n"}, {0: "n"}, None), make, (1, 2, 3, 7, 13, 64), tol=0)


def test_variadic_reduce_over_inputs_whose_sizes_agree_only_at_run_time():
    # found by the fuzzer (batch seed 38100041): argmax over a pad with interior padding; the
    # padded size is b + max(b - 1, 0) + 1 and argmax's iota 2*b, equal for b >= 1 only. No
    # check was emitted for the reduce's two inputs, so the plan checker refused the program;
    # now the launcher checks it (at b = 0, jax.export's program itself has no meaning)
    f = lambda x: jnp.argmax(jax.lax.pad(x, jnp.float32(0.0), ((1, 0, 1), (0, 0, 0))), axis=0)
    make = lambda n: (np.linspace(-1, 1, 3 * n, dtype=np.float32).reshape(n, 3),)
    check_against_jax(f, ({0: "b"},), make, (1, 2, 3, 7, 13), tol=0)
    with pytest.raises(jdisc.errors.ShapeError, match="b = 0"):
        jdisc.jit(f, dynamic_axes=({0: "b"},))(np.zeros((0, 3), np.float32))


@pytest.mark.parametrize("dtype, pref", [(np.float32, None), (np.float64, None),
                                          (jnp.bfloat16, np.float32), (np.float16, None)])
def test_contraction_of_size_one_keeps_the_sign_of_zero(dtype, pref):
    # found by the fuzzer (batch seed 38100052): XLA turns a dot whose contraction has size 1
    # into a multiply, so 0 * -1 is -0; the GEMM accumulated from +0 and gave +0 (seen through
    # a bitcast). Static and dynamic k, a batch dim too.
    def f(a, b):
        return jnp.einsum("zij,zil->zjl", a, b, preferred_element_type=pref)
    with jax.enable_x64(dtype == np.float64):
        for k, axes in [(1, (None, None)), (1, ({1: "k"}, {1: "k"})), (3, ({1: "k"}, {1: "k"}))]:
            a = np.zeros((2, k, 3), dtype)
            b = np.linspace(-2, 2, 2 * k * 4).reshape(2, k, 4).astype(dtype)
            got = np.asarray(jdisc.jit(f, dynamic_axes=axes)(a, b)).astype(np.float64)
            want = np.asarray(jax.jit(f)(a, b)).astype(np.float64)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_same_pooling_over_a_strided_slice_of_a_dynamic_dim():
    # found by the fuzzer (batch seed 40000425): x[:, 2::2] has floordiv(a - min(a, 2) + 1, 2)
    # rows; interval bounds put a - min(a, 2) + 1 at >= -1, so shape propagation left jax's
    # floor-division pattern (a select on its sign) to the launcher and the plan checker could
    # not show the pooled buffer's size non-negative. Bounds now see a - min(a, 2) >= 0.
    def f(x):
        v = x[:, 2::2, :]
        return jax.lax.reduce_window(v, jnp.float32(jnp.inf), jax.lax.min, (1, 2, 1), (1, 2, 2),
                                     "SAME") * 1.0
    make = lambda n: (np.linspace(-1, 1, n * n, dtype=np.float32).reshape(n, n, 1),)
    check_against_jax(f, ({0: "a", 1: "a"},), make, (1, 2, 3, 4, 7, 13), tol=0)


@pytest.mark.parametrize("k, start", [(2, -1), (2, 1), (1, 0), (3, 5)])
def test_update_from_a_slice_of_its_own_operand_in_place(k, start, monkeypatch):
    # found by the fuzzer (batch seed 10955150): dynamic_update_slice(x, x[:2], -1) then a
    # transpose, x donated. jdisc was right; XLA:CPU (jax 0.10.2) was not: it fuses the update
    # into an in-place loop that reads rows it has already written ([0, 0, 0] for x = [0, 1, 2]).
    # The reference here is jax run op by op (no fusion), static and dynamic rows, in place.
    monkeypatch.setenv("JDISC_DONATE_MIN_BYTES", "0")

    def f(x):
        return jax.lax.dynamic_update_slice_in_dim(x, x[:k], start, axis=0).T
    for n, axes in [(3, (None,)), (3, ({0: "n"},)), (7, ({0: "n"},)), (13, ({0: "n"},))]:
        x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        with jax.disable_jit():
            want = np.asarray(f(jnp.asarray(x)))
        jf = jdisc.jit(f, dynamic_axes=axes, donate_argnums=(0,), bridge=False)
        got = np.asarray(jf(jnp.asarray(x)))
        np.testing.assert_array_equal(got, want)


def test_tile_of_a_slice_of_a_strided_valid_convolution():
    # found by the fuzzer (batch seed 6495373): the tile's size 3*h1 - 3*h0 (h0, h1 the slice's
    # bounds, which the launcher derives from jax's floor-division selects) had the check
    # h1 - h0 >= 0, which the prover used only when the fact's first term was positive: the
    # plan checker refused the program (an internal compiler error)
    def f(x):
        w = (jnp.arange(4, dtype=jnp.float32).reshape(2, 1, 2) % 3 - 1.0) * 0.5
        v = jax.lax.conv_general_dilated(x, w, (2,), "VALID")
        v = jax.lax.dynamic_slice_in_dim(v, 1, 1, axis=0)
        return jnp.sum(jnp.tile(v, (2, 3, 3)), axis=0, keepdims=True)
    make = lambda n: (np.linspace(-1, 1, n, dtype=np.float32).reshape(1, 1, n),)
    check_against_jax(f, ({2: "a"},), make, (1, 2, 3, 5, 8, 13), tol=1e-6)
