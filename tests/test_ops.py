"""Differential tests of data-movement ops (gather, slices, pads, reverse, dynamic slices)
against jax.jit, each at several values of its dynamic dims. Results are bit-exact: these ops
only move values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import assert_close, check_against_jax, to_ir


def check(fn, dynamic_axes, make_args, sizes, constraints=(), tol=0.0):
    check_against_jax(fn, dynamic_axes, make_args, sizes, tol, constraints)


def mat(rng, rows, cols=7):
    return rng.standard_normal((rows, cols)).astype(np.float32)


def test_numpy_style_slicing_of_dynamic_axes(rng):
    # x[:, 1:] and x[-1] on dynamic axes lower to dynamic_gather
    check(lambda x: (x[:, 1:], x[-1], x[:, 3], x[1:, ::2]), ({0: "B"},),
          lambda n: (mat(rng, n),), [2, 5, 31], constraints=("B >= 2",))
    check(lambda x: x[:, 1:] * 2, ({0: "B", 1: "S"},),
          lambda n: (mat(rng, 3, n),), [1, 2, 40])


def test_reverse_and_pad(rng):
    check(lambda x: (jnp.flip(x), jnp.pad(x, ((1, 2), (0, 3)))), ({0: "B"},),
          lambda n: (mat(rng, n),), [0, 1, 7, 64])
    # x[::-1] traces to a gather of size-1 slices; at B == 0 they exceed the operand, but the
    # result is empty, as jax.jit's is (tests/test_refusals.py)
    check(lambda x: x[::-1], ({0: "B"},), lambda n: (mat(rng, n),), [0, 1, 3])
    check(lambda x: jax.lax.pad(x, 0.5, ((1, 2, 1), (-1, 3, 2))), ({0: "B"},),
          lambda n: (mat(rng, n),), [1, 2, 9])


def test_dynamic_slice_and_update_clamp_like_xla(rng):
    def f(x, u, i, j):
        return (jax.lax.dynamic_slice(x, (i, j), (2, 3)),
                jax.lax.dynamic_update_slice(x, u, (i, j)))
    for i, j in ((0, 0), (1, 2), (-5, 100), (99, -1)):      # out-of-range starts are clamped
        check(f, ({0: "B"}, None, None, None),
              lambda n: (mat(rng, n), np.ones((2, 3), np.float32), np.int32(i), np.int32(j)),
              [2, 3, 11], constraints=("B >= 2",))


def test_embedding_lookup_and_take_along_axis(rng):
    table = rng.standard_normal((50, 16)).astype(np.float32)
    check(lambda t, ids: t[ids], (None, {0: "B", 1: "S"}),
          lambda n: (table, rng.integers(0, 50, (3, n)).astype(np.int32)), [1, 5, 17])
    check(lambda x, i: jnp.take_along_axis(x, i, axis=1), ({0: "B"}, {0: "B"}),
          lambda n: (mat(rng, n), rng.integers(0, 7, (n, 3)).astype(np.int32)), [1, 4, 13])
    # indices out of range: gather clamps them into the operand, as XLA does
    check(lambda t, ids: jnp.take(t, ids, axis=0, mode="clip"), (None, {0: "B"}),
          lambda n: (table, rng.integers(-20, 70, (n,)).astype(np.int32)), [1, 8])


def test_gather_in_a_model(rng):
    # embeddings + positional slice + layer norm, all with a dynamic sequence length
    emb = rng.standard_normal((100, 32)).astype(np.float32)
    pos = rng.standard_normal((512, 32)).astype(np.float32)

    def f(ids):
        h = jnp.asarray(emb)[ids] + jnp.asarray(pos)[: ids.shape[1]][None]
        mu = h.mean(-1, keepdims=True)
        return (h - mu) * jax.lax.rsqrt(((h - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    check(f, ({0: "B", 1: "S"},), lambda n: (rng.integers(0, 100, (2, n)).astype(np.int32),),
          [1, 9, 128], constraints=("S <= 512",), tol=2e-6)


def test_reductions_with_any_body(rng):
    # argmax/argmin are variadic reductions whose body compares and selects (ties: first index)
    def f(x):
        return jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.any(x > 1, axis=1), \
            jnp.prod(x, axis=1), (jnp.max(x, 1), jnp.argmax(x, 1))

    def make(n):
        x = mat(rng, n)
        x[0, 2] = x[0, 5] = 9.0      # a tie
        return (x,)
    check(f, ({0: "B"},), make, [1, 5, 40], tol=1e-6)


def test_sort_argsort_top_k_stable_with_nans(rng):
    def f(x):
        return jnp.sort(x, axis=1), jnp.argsort(x, axis=0), jnp.sort(-x, axis=1), \
            jax.lax.top_k(x, 3)

    def make(n):
        x = rng.integers(-3, 3, (n, 7)).astype(np.float32)    # many ties: stability matters
        x[0, 0] = np.nan
        x[-1, 1] = -0.0
        return (x,)
    check(f, ({0: "B"},), make, [1, 5, 300])


def test_top_k_as_jax_0_9_exports_it(rng):
    """jax 0.9 writes lax.top_k as `custom_call @mhlo.topk`; it compiles as top_k does, with
    ties and a NaN (NaN sorts largest, as in jax)."""
    text = """
    func.func public @main(%x: tensor<?x7xf32>) -> (tensor<?x3xf32>, tensor<?x3xi32>) {
      %0:2 = stablehlo.custom_call @mhlo.topk(%x) {mhlo.attributes = {k = 3 : i64},
          mhlo.version = 1 : i64} : (tensor<?x7xf32>) -> (tensor<?x3xf32>, tensor<?x3xi32>)
      return %0#0, %0#1 : tensor<?x3xf32>, tensor<?x3xi32>
    }"""
    m = jdisc.compile_stablehlo(text)
    for n in (0, 1, 5, 37):
        x = rng.integers(-3, 3, (n, 7)).astype(np.float32)
        if n:
            x[0, 4] = np.nan
        got, want = m(x), jax.jit(lambda x: jax.lax.top_k(x, 3))(x)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("lower", [True, False])
def test_triangular_solve_through_blas(rng, left, lower):
    # jax lowers this to a LAPACK custom call on CPU; jdisc maps it to stablehlo's op (trsm)
    for ta in (False, True):
        for unit in (False, True):
            def f(a, b):
                return jax.lax.linalg.triangular_solve(a, b, left_side=left, lower=lower,
                                                       transpose_a=ta, unit_diagonal=unit)

            def make(n):
                a = (rng.standard_normal((n, 4, 4)) + 4 * np.eye(4)).astype(np.float32)
                b = rng.standard_normal((n, 4, 5) if left else (n, 5, 4)).astype(np.float32)
                return a, b
            # well-conditioned (diagonally dominant) 4x4 solves: a few f32 ulps of the result
            check(f, ({0: "B"}, {0: "B"}), make, [1, 3], tol=2e-5)


def test_reduce_window_cumulative_and_pooling(rng):
    def pools(x):
        mx = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        av = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return mx, av / 4
    check(pools, ({0: "B"},), lambda n: (rng.standard_normal((n, 9, 8, 3)).astype(np.float32),),
          [1, 4], tol=2e-6)
    check(lambda x: (jnp.cumsum(x, 1), jnp.cumprod(x, 1), jax.lax.cummax(x, 1)), ({0: "B"},),
          lambda n: (rng.standard_normal((n, 7)).astype(np.float32),), [1, 6], tol=2e-6)


def test_cumulative_ops_along_a_dynamic_axis(rng):
    # jax emits a `stablehlo.dynamic_reduce_window` custom call (window and padding depend on
    # the dim); summation order differs from XLA's, so sums get a tolerance of a few ulps of
    # the running total (|total| <~ 3*sqrt(n) here)
    check(lambda x: (jnp.cumsum(x, 0), jax.lax.cummax(x, 0), jax.lax.cummin(x, 1)),
          ({0: "N", 1: "M"},), lambda n: (rng.standard_normal((n, 5)).astype(np.float32),),
          [1, 2, 7, 130], tol=4e-6)
    check(lambda x: jnp.cumprod(1 + 0.01 * x, axis=0), ({0: "N"},),
          lambda n: (rng.standard_normal((n, 3)).astype(np.float32),), [1, 3, 64], tol=2e-6)


def test_cumulative_windows_are_running_scans(rng):
    # a window spanning its whole axis (jnp.cumsum, cummax, cumprod) is a running scan, O(n)
    # (it was a window loop per element, O(n^2): 76 s for cumsum over 300k elements); it adds
    # in the window loop's order, so a float32 cumsum is numpy's sequential one bit for bit
    from jdisc.lowering.reductions import scan_axis
    # (the product's factors near 1 are an input: 1 + 1e-3 * x in the function would be one
    # fused multiply-add, as in XLA, and numpy's reference rounds twice)
    f = lambda x, p: (jnp.cumsum(x, 0), jax.lax.cummax(x, 1), jnp.cumprod(p, 0))
    jf = jdisc.jit(f, dynamic_axes=({0: "N", 1: "M"}, {0: "N", 1: "M"}))
    for n, m in [(1, 1), (2, 3), (13, 1), (100003, 2)]:
        x = rng.standard_normal((n, m)).astype(np.float32)
        p = np.float32(1) + np.float32(1e-3) * x
        got = jf(x, p)
        np.testing.assert_array_equal(np.asarray(got[0]), np.cumsum(x, 0, dtype=np.float32))
        np.testing.assert_array_equal(np.asarray(got[1]), np.maximum.accumulate(x, 1))
        np.testing.assert_array_equal(np.asarray(got[2]), np.multiply.accumulate(p, 0))
    windows = [op for k in jf.compiled_for(x, p).program.kernels for op in k.ops
               if op.name == "reduce_window"]
    assert len(windows) == 3 and [scan_axis(op) for op in windows] == [0, 1, 0]
    # reversed (padded above) and strided windows keep the window loop
    g = lambda x: jax.lax.cumsum(x, 0, reverse=True)
    x = rng.standard_normal((37, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jdisc.jit(g, dynamic_axes=({0: "N"},))(x)),
                               np.asarray(jax.jit(g)(x)), rtol=1e-5, atol=1e-5)


def test_compile_stablehlo_from_a_portable_artifact(rng):
    # any producer's StableHLO: here jax.export's serialized portable artifact (VHLO bytecode)
    from jax import export
    n = export.symbolic_shape("n")[0]
    exp = export.export(jax.jit(lambda x: jnp.tanh(x) @ x.T))(
        jax.ShapeDtypeStruct((n, 4), jnp.float32))
    f = jdisc.compile_stablehlo(exp.mlir_module_serialized)
    for rows in (1, 6):
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        (got,) = f(x)
        assert_close(got, np.tanh(x) @ x.T, 2e-6)
    with pytest.raises(jdisc.ShapeError):
        f(np.ones((3, 5), np.float32))


def _assert_same_results(got, want):
    """Bit-identical results, shapes and dtypes included (sorts and selections: no rounding)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_top_k_with_a_k_from_a_dim(dtype, rng):
    # jax writes lax.top_k with a symbolic k as custom_call @stablehlo.dynamic_top_k
    def f(x):
        return jax.lax.top_k(x, x.shape[-1] - 1)
    jf = jdisc.jit(f, dynamic_axes=({0: "B", 1: "N"},))
    for b, n in [(3, 1), (1, 2), (0, 5), (2, 7), (5, 13), (4, 64)]:
        if dtype == np.float32:
            x = rng.standard_normal((b, n)).astype(dtype)
            if b and n >= 5:     # XLA's order: NaN first, +0 above -0, ties by lower index
                x[0, :5] = [np.nan, -0.0, 0.0, 0.5, 0.5]
        else:
            x = rng.integers(-4, 4, (b, n)).astype(dtype)       # many ties
        _assert_same_results(jf(x), jax.jit(f)(x))
    assert jf.stats()["compiles"] == 1


def test_top_k_with_k_half_a_dim_in_a_sampler(rng):
    def f(logits):
        vals, idx = jax.lax.top_k(logits, logits.shape[0] // 2)
        return jnp.sum(vals * 2.0), idx
    jf = jdisc.jit(f, dynamic_axes=({0: "V"},))
    for v in (1, 2, 11, 100):
        x = rng.standard_normal(v).astype(np.float32)
        got, want = jf(x), jax.jit(f)(x)
        assert_close(got[0], want[0], 1e-5)
        np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))


@pytest.mark.parametrize("which", ["max", "min"])
def test_approx_top_k_answers_exactly(which, rng):
    # lax.approx_max_k / approx_min_k: custom_call @ApproxTopK on CPU; the exact top k is a
    # valid answer and what XLA:CPU's fallback returns (distinct values: no ties to order)
    if which == "max":
        f, axes, shapes = (lambda x: jax.lax.approx_max_k(x, 3)), ({0: "B"},), \
            [(0, 16), (1, 16), (5, 16), (31, 16)]
    else:
        f, axes, shapes = (lambda x: jax.lax.approx_min_k(x, 2, reduction_dimension=0)), \
            ({1: "B"},), [(7, 0), (7, 1), (7, 4), (7, 13)]
    jf = jdisc.jit(f, dynamic_axes=axes)
    for shape in shapes:
        x = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32) - 7.5
        _assert_same_results(jf(x), jax.jit(f)(x))
    assert jf.stats()["compiles"] == 1


@pytest.mark.parametrize("which", ["max", "min"])
def test_approx_top_k_without_aggregation_is_the_sorted_axis(which, rng):
    # aggregate_to_topk=False: XLA:CPU's fallback returns the whole axis, sorted (every element
    # is a candidate); jax writes it only for a static axis and k, the other axes may be dynamic
    if which == "max":
        f, axes, shapes = (lambda x: jax.lax.approx_max_k(x, 4, aggregate_to_topk=False)), \
            ({0: "B"},), [(0, 40), (1, 40), (7, 40)]
    else:
        f, axes, shapes = (lambda x: jax.lax.approx_min_k(
            x, 3, reduction_dimension=0, aggregate_to_topk=False)), ({1: "B"},), \
            [(13, 1), (13, 5), (13, 0)]
    jf = jdisc.jit(f, dynamic_axes=axes)
    for shape in shapes:
        x = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32) - 9.5
        _assert_same_results(jf(x), jax.jit(f)(x))
    assert jf.stats()["compiles"] == 1


@pytest.mark.parametrize("which", ["max", "min"])
def test_approx_top_k_with_k_from_a_dim(which, rng):
    # k from the shapes: custom_call @stablehlo.dynamic_approx_top_k, k an operand
    if which == "max":
        f, axes, shapes = (lambda x: jax.lax.approx_max_k(x, x.shape[-1] // 2)), \
            ({0: "B", 1: "N"},), [(1, 2), (3, 7), (2, 31), (5, 100)]
    else:
        f, axes, shapes = (lambda x: jax.lax.approx_min_k(x, x.shape[0] - 1,
                                                          reduction_dimension=0)), \
            ({0: "N"},), [(2, 3), (5, 3), (29, 3)]
    jf = jdisc.jit(f, dynamic_axes=axes, constraints=("N >= 2",))
    for shape in shapes:
        x = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32) - 9.5
        _assert_same_results(jf(x), jax.jit(f)(x))
    assert jf.stats()["compiles"] == 1


def test_random_choice_without_replacement(rng):
    # rows drawn without replacement from a table with a dynamic width (jax.export cannot trace a
    # permutation of a dynamic-size axis, so the drawn axis is static here)
    def f(key_data, x):
        key = jax.random.wrap_key_data(key_data)
        return jax.random.choice(key, x, (3,), replace=False)
    jf = jdisc.jit(f, dynamic_axes=(None, {1: "N"}))
    key_data = jax.random.key_data(jax.random.key(3))
    for n in (0, 1, 2, 17):
        x = rng.standard_normal((5, n)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(jf(key_data, x)),
                                      np.asarray(jax.jit(f)(key_data, x)))
    # a typed key itself is refused with a message that says what to pass instead
    with pytest.raises(jdisc.DtypeError, match="key_data"):
        jdisc.jit(lambda key, x: jax.random.choice(key, x, (3,), replace=False),
                  dynamic_axes=(None, {1: "N"}))(jax.random.key(3), x)


@pytest.mark.parametrize("lhs,rhs", [("?x4", "4x3"), ("4", "4x?"), ("?", "?"), ("3x?", "?")])
def test_legacy_dot_from_other_producers(lhs, rhs, rng):
    # `stablehlo.dot` (deprecated; older exporters and other frameworks write it)
    out = ([lhs.split("x")[0]] if "x" in lhs else []) + ([rhs.split("x")[1]] if "x" in rhs else [])
    rt = lambda t: f"tensor<{t + 'x' if t else ''}f32>"
    text = (f"func.func @main(%a: {rt(lhs)}, %b: {rt(rhs)}) -> {rt('x'.join(out))} {{\n"
            f"  %0 = stablehlo.dot %a, %b, precision = [HIGHEST, HIGHEST] : ({rt(lhs)}, "
            f"{rt(rhs)}) -> {rt('x'.join(out))}\n  return %0 : {rt('x'.join(out))}\n}}")
    f = jdisc.compile_stablehlo(text)
    for n in (0, 1, 7):
        a = rng.standard_normal([n if d == "?" else int(d) for d in lhs.split("x")])
        b = rng.standard_normal([n if d == "?" else int(d) for d in rhs.split("x")])
        (got,) = f(a.astype(np.float32), b.astype(np.float32))
        assert_close(got, np.dot(a, b).astype(np.float32), 1e-5)


def _exported_with_names():
    """A jax.export.Exported with a named, constrained dim, a keyword input and a dict result."""
    from jax import export
    b, = export.symbolic_shape("batch", constraints=("batch >= 2",))

    def fn(x, w, *, scale):
        return {"out": jnp.tanh(x @ w) * scale, "rows": jnp.sum(x, axis=1)}
    return export.export(jax.jit(fn))(jax.ShapeDtypeStruct((b, 4), jnp.float32),
                                      jax.ShapeDtypeStruct((4, 3), jnp.float32),
                                      scale=jax.ShapeDtypeStruct((), jnp.float32))


@pytest.mark.parametrize("form", ["exported", "serialized"])
def test_compile_stablehlo_from_a_jax_exported(form, rng):
    exp = _exported_with_names()
    f = jdisc.compile_stablehlo(exp if form == "exported" else exp.serialize())
    assert f.cprog.dim_vars == ("batch",)                    # jax.export's name, not d0_0
    assert [s.name for s in f.cprog.inputs] == ["args[0]", "args[1]", "scale"]
    w = rng.standard_normal((4, 3)).astype(np.float32)
    for rows in (2, 3, 7, 64):
        x = rng.standard_normal((rows, 4)).astype(np.float32)
        got = f(x, w, scale=np.float32(0.5))
        want = exp.call(x, w, scale=np.float32(0.5))
        assert set(got) == {"out", "rows"}                     # the Exported's output structure
        for key in got:
            assert_close(got[key], want[key], 2e-6)
    with pytest.raises(jdisc.ShapeError, match="batch >= 2"):     # its constraint, checked
        f(np.ones((1, 4), np.float32), w, scale=np.float32(1))
    with pytest.raises(jdisc.ArgumentError, match="structure"):
        f(np.ones((3, 4), np.float32), w, np.float32(1))


def test_single_result_of_an_exported_is_an_array(rng):
    from jax import export
    n, = export.symbolic_shape("n")
    exp = export.export(jax.jit(jnp.cumsum))(jax.ShapeDtypeStruct((n,), jnp.float32))
    f = jdisc.compile_stablehlo(exp.serialize())
    for size in (0, 1, 5):
        x = rng.standard_normal(size).astype(np.float32)
        got = f(x)
        assert isinstance(got, jax.Array)
        assert_close(got, np.cumsum(x), 1e-5)


def test_exported_for_another_platform_is_refused():
    from jax import export
    exp = export.export(jax.jit(jnp.sin), platforms=("cuda",))(
        jax.ShapeDtypeStruct((3,), jnp.float32))
    with pytest.raises(jdisc.JdiscError, match="platforms=\\('cpu',\\)"):
        jdisc.compile_stablehlo(exp)


@pytest.mark.parametrize("spec", [
    dict(strides=(1, 1), padding="SAME", dn=("NHWC", "HWIO", "NHWC"), xs=(9, 8, 3), ws=(3, 3, 3, 4)),
    dict(strides=(2, 1), padding=((1, 0), (1, 1)), lhs=(1, 2), rhs=(2, 1),
         dn=("NCHW", "OIHW", "NHWC"), xs=(3, 8, 8), ws=(4, 3, 3, 3)),
    dict(strides=(1, 1), padding="VALID", dn=("NHWC", "HWIO", "NHWC"), groups=2, xs=(7, 7, 4),
         ws=(2, 2, 2, 6)),
    dict(strides=(1,), padding="SAME", dn=("NWC", "WIO", "NWC"), xs=(11, 3), ws=(5, 3, 2)),
])
def test_convolution_im2col_gemm(rng, spec):
    def f(x, w):
        return jax.lax.conv_general_dilated(
            x, w, spec["strides"], spec["padding"], lhs_dilation=spec.get("lhs"),
            rhs_dilation=spec.get("rhs"), dimension_numbers=spec["dn"],
            feature_group_count=spec.get("groups", 1))
    w = rng.standard_normal(spec["ws"]).astype(np.float32)
    # sums of up to 27 products: a few f32 ulps of the output scale
    check(f, ({0: "B"}, None), lambda n: (rng.standard_normal((n,) + spec["xs"]).astype(np.float32), w),
          [1, 3], tol=2e-5)


def test_reduce_precision_bit_exact(rng):
    x = np.concatenate([rng.standard_normal(500).astype(np.float32)
                        * np.float32(10.0) ** rng.integers(-8, 8, 500).astype(np.float32),
                        np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65520, 1e-5, 6e-5,
                                  3e38], np.float32)])
    for e, m in [(5, 10), (8, 7), (2, 1), (8, 0), (3, 5)]:
        check(lambda v: jax.lax.reduce_precision(v, exponent_bits=e, mantissa_bits=m),
              ({0: "N"},), lambda n: (x[:n],), [1, len(x)])


def test_scatter_add_set_max_with_repeated_and_dropped_indices(rng):
    def f(x, i, u):
        return (x.at[i].add(u), x.at[i].set(u), x.at[i].max(u),
                x.at[i, 1:3].multiply(u[:, :2]), x.at[i + 100].add(u, mode="drop"))
    idx = np.array([0, 2, 2], np.int32)      # a repeated index combines in update order
    check(f, ({0: "B"}, None, None),
          lambda n: (mat(rng, n, 4), idx, rng.standard_normal((3, 4)).astype(np.float32)),
          [3, 9], constraints=("B >= 3",), tol=1e-6)


def _masked_scatters(x, i, u, m, flag):
    s = x.at[i].add(-u)
    return (jnp.where(m, x.at[i].add(u), x),            # updates only where m holds
            jnp.where(m, x, x.at[i].set(u)),            # the two swapped: where m does not
            jnp.where(flag, x.at[i].max(u), x),         # a scalar mask
            jnp.where(m[:, :1], x.at[i + 5].multiply(u, mode="drop"), x),  # a broadcast one
            jnp.where(m, s, x), s * 2)                  # a scatter read twice: not folded


def test_scatter_under_a_select_of_its_operand(rng):
    # select(m, scatter(x, ...), x) is one scatter that skips the updates whose target m
    # masks (passes/simplify.py), as jax's batched while_loop writes its carried values back;
    # repeated indices, dropped indices, both polarities, scalar and broadcast masks
    idx = np.array([0, 2, 2, 1], np.int32)

    def make(n):
        m = rng.random((n, 4)) < 0.5
        m[2] = [True, False, True, False]
        return (mat(rng, n, 4), idx, rng.standard_normal((4, 4)).astype(np.float32), m,
                np.bool_(n % 2))
    check(_masked_scatters, ({0: "N"}, None, None, {0: "N"}, None), make, [3, 4, 9],
                  constraints=("N >= 3",), tol=1e-6)


@pytest.mark.fast
def test_a_select_of_a_scatter_and_its_operand_is_one_scatter():
    prog = to_ir(_masked_scatters, ({0: "N"}, None, None, {0: "N"}, None),
                 np.ones((3, 4), np.float32), np.zeros(4, np.int32),
                 np.ones((4, 4), np.float32), np.ones((3, 4), bool), np.bool_(True))
    scatters = [k.root for k in prog.kernels if k.kind == "scatter"]
    masked = sorted(op.attrs["mask_when"] for op in scatters if len(op.operands) == 4)
    assert masked == [False, True, True, True] and len(scatters) == 5
    # the one select of a scatter left is that of the scatter read twice
    assert sum(op.name == "select" and any(v.producer is not None and v.producer.name ==
                                           "scatter" for v in op.operands)
               for k in prog.kernels for op in k.ops) == 1


def test_select_and_scatter_from_max_pool_gradient(rng):
    def pool_grad(x):
        def loss(v):
            return jax.lax.reduce_window(v, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                         "SAME").sum()
        return jax.grad(loss)(x)
    check(pool_grad, ({0: "B"},),
          lambda n: (rng.standard_normal((n, 5, 6, 2)).astype(np.float32),), [1, 3], tol=0)


def test_index_moving_ops_read_other_rows_of_per_row_values(rng):
    # regression (found by test_fuzz): flip(iota) of shape [n, 1] was cached once per row
    check(lambda v: (jnp.argsort(v, axis=0, descending=True), jnp.flip(v * 2, 0),
                     jnp.flip(jax.lax.broadcasted_iota(jnp.int32, v.shape, 0), 0)),
          ({0: "B"},), lambda n: (rng.standard_normal((n, 1)).astype(np.float32),), [1, 3, 9])


def test_convolution_with_batch_groups_from_a_depthwise_weight_gradient(rng):
    # the weight gradient of a depthwise convolution is a convolution with batch_group_count
    # equal to the channels; jdisc splits it into one convolution per batch group
    w = rng.standard_normal((3, 3, 1, 4)).astype(np.float32)

    def grad_w(x, w):
        conv = lambda w: jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=x.shape[-1]).sum()
        return jax.grad(conv)(w)
    # sums over B*H*W products of N(0,1) values: ~4 ulp of a total of size ~sqrt(B*H*W)*3
    check(grad_w, ({0: "B", 1: "H"}, None),
          lambda n: (rng.standard_normal((n, n + 2, 6, 4)).astype(np.float32), w), [1, 2, 5],
          tol=1e-5)


def test_chlo_scan_reverse_is_refused_not_miscompiled():
    from jaxlib.mlir.dialects import chlo
    if not hasattr(chlo, "ScanOp"):
        pytest.skip("this jaxlib has no chlo.scan (jaxlib < 0.10)")
    text = """
    func.func @main(%x: tensor<4xi32>, %c: tensor<i32>) -> (tensor<4xi32>, tensor<i32>) {
      %0:2 = chlo.scan(%x) inits (%c) dimension=0 attributes {is_reverse = true} {
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %1 = stablehlo.add %a, %b : tensor<i32>
        stablehlo.return %1, %1 : tensor<i32>, tensor<i32>
      } : (tensor<4xi32>, tensor<i32>) -> (tensor<4xi32>, tensor<i32>)
      return %0#0, %0#1 : tensor<4xi32>, tensor<i32>
    }"""
    with pytest.raises(jdisc.UnsupportedOpError, match="is_reverse"):
        jdisc.compile_stablehlo(text)


def test_row_reductions_at_every_size_class(rng):
    # a stitch kernel's reductions have a version per row length (lowering/stitch.py: rows
    # shorter than 128 columns in blocks of 16 rows, longer rows in 64 lanes, then 16, then one
    # per lane): lengths on each side of each boundary, with sums, a max and
    # a min in one row, against jax.jit; then max and min by StableHLO's rules, bit for bit:
    # NaN wins, max(-0, +0) = +0, min(-0, +0) = -0 (XLA:CPU's own vectorised max drops a NaN
    # and returns -0 in long rows, so the reference is numpy with those rules)
    def f(x):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return ((x - mean) * jax.lax.rsqrt(var + 1e-5), jax.nn.softmax(x, axis=-1),
                jnp.max(x, axis=-1), jnp.min(x, axis=-1))
    lengths = [1, 2, 3, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 191, 1000]
    check(f, ({0: "B", 1: "N"},),
          lambda n: (rng.standard_normal((3, n)).astype(np.float32),), lengths, tol=2e-6)

    g = lambda x: (jnp.max(x, axis=-1), jnp.min(x, axis=-1))
    jg = jdisc.jit(g, dynamic_axes=({0: "B", 1: "N"},))
    for n in lengths:
        x = rng.standard_normal((6, n)).astype(np.float32)
        x[0] = -0.0
        x[1] = -0.0
        x[1, n // 2] = 0.0
        x[2] = 0.0
        x[2, n - 1] = -0.0
        x[3, n // 3] = np.nan
        x[4] = -np.inf
        x[5] = np.abs(x[5])
        x[5, 0] = 0.0
        nan = np.isnan(x).any(axis=-1)
        plus_zero = ((x == 0) & ~np.signbit(x)).any(axis=-1)
        minus_zero = ((x == 0) & np.signbit(x)).any(axis=-1)
        big = np.max(np.where(np.isnan(x), -np.inf, x), axis=-1)
        small = np.min(np.where(np.isnan(x), np.inf, x), axis=-1)
        big = np.where(big == 0, np.where(plus_zero, 0.0, -0.0), big)
        small = np.where(small == 0, np.where(minus_zero, -0.0, 0.0), small)
        for got, want in zip(jg(x), (big, small)):
            got, want = np.asarray(got), np.where(nan, np.nan, want).astype(np.float32)
            assert np.array_equal(got, want, equal_nan=True) and \
                np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan])), (n, got, want)


def test_short_rows_in_blocks(rng):
    # rows shorter than 128 columns run 16 at a time (lowering/stitch.py): row counts on each
    # side of a block, rows over two dims, a per-row input and a per-row output (logsumexp),
    # a mask read along the row, and a reduction over two trailing dims; each shape against
    # jax.jit, and each row of a block again alone (the last, partial block of a call)
    def f(x, bias, mask):
        logits = jnp.where(mask, x + bias[..., None], -1e9)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        norm = (x - mean) * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + 1e-5)
        return (jax.nn.softmax(logits, axis=-1), jax.nn.logsumexp(x, axis=-1), norm,
                jnp.max(x, axis=-1), jnp.sum(x[..., :, None] * x[..., None, :], axis=(-2, -1)))
    axes = ({0: "B", 1: "S", 2: "N"}, {0: "B", 1: "S"}, {0: "B", 1: "S", 2: "N"})

    def args(b, s, n):
        x = rng.standard_normal((b, s, n)).astype(np.float32)
        return x, rng.standard_normal((b, s)).astype(np.float32), x > -1.0
    def run(jf, shapes):
        for b, s, n in shapes:
            a = args(b, s, n)
            for k, (got, want) in enumerate(zip(jf(*a), jax.jit(f)(*a))):
                assert_close(got, want, 2e-6, f"output {k} at {(b, s, n)}")
            if b * s == 0:
                continue
            whole = jf(*a)
            for i in range(s):
                for got, w in zip(jf(*(t[:1, i:i + 1] for t in a)), whole):
                    assert_close(got, w[:1, i:i + 1], 2e-6, f"row {i} alone at {(b, s, n)}")
        assert jf.stats()["compiles"] == 1
    run(jdisc.jit(f, dynamic_axes=axes),
        [(1, 1, 1), (1, 15, 3), (2, 8, 7), (1, 17, 15), (3, 11, 16), (2, 16, 40), (1, 33, 63),
         (1, 5, 64), (2, 9, 127), (0, 4, 5), (2, 3, 1)])
    # a row length known when compiling: short rows across the rows when there are 16 of
    # them (fewer: one row at a time), long rows one at a time in as many lanes as they fill
    rows_only = ({0: "B", 1: "S"},) * 3
    for n in (3, 20, 100):
        run(jdisc.jit(f, dynamic_axes=rows_only), [(1, 17, n), (2, 5, n), (1, 16, n), (3, 11, n)])


def test_short_rows_across_read_their_inputs_every_way(rng):
    # across the rows of a block (lowering/stitch.py), inputs read at the element's own index
    # are copied column by column first; these are read otherwise: reversed along the row (a
    # load per lane), along the columns only (a scale), per row; and an integer division by
    # a per-element input (lanes past a partial block repeat its last row, so they divide by
    # what that row divides by, never by leftover scratch); int32 rows too
    def f(x, g, b, num, den, z):
        y = x + x.T * 0.5 + g[None, :] * b[:, None]
        q = jnp.sum(num // den, axis=-1) + jnp.max(num % den, axis=-1)
        return (jax.nn.softmax(y, axis=-1), q, jax.nn.log_softmax(jnp.flip(z, -1) + z, axis=-1),
                jnp.sum(num * 3, axis=-1), (y - y.mean(-1, keepdims=True)) * g)
    axes = ({0: "N", 1: "N"}, {0: "N"}, {0: "N"}, {0: "N", 1: "N"}, {0: "N", 1: "N"},
            {0: "N", 1: "N"})
    jf = jdisc.jit(f, dynamic_axes=axes)
    for n in (1, 2, 15, 16, 17, 33, 63, 64, 70):
        x = rng.standard_normal((n, n)).astype(np.float32)
        num = rng.integers(-50, 50, (n, n)).astype(np.int32)
        den = rng.integers(1, 9, (n, n)).astype(np.int32) * rng.choice([-1, 1], (n, n))
        args = (x, rng.standard_normal(n).astype(np.float32),
                rng.standard_normal(n).astype(np.float32), num, den.astype(np.int32),
                rng.standard_normal((n, n)).astype(np.float32))
        for k, (got, want) in enumerate(zip(jf(*args), jax.jit(f)(*args))):
            assert_close(got, want, 0 if k in (1, 3) else 3e-6, f"output {k} at n = {n}")
    assert jf.stats()["compiles"] == 1


def test_a_rows_result_does_not_depend_on_its_batch(rng):
    # the order in which a row's values are combined depends on its length alone
    # (lowering/stitch.py): the same row in batches of 1, 15, 16 and 17 rows (no whole block
    # of 16, one, a partial block) gives the same bits as in a batch of 40, at lengths short
    # and long, unknown and known when compiling
    def f(x):
        return (jax.nn.softmax(x, axis=-1), jnp.sum(x, axis=-1), jax.nn.logsumexp(x, axis=-1),
                (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1.0))
    unknown = jdisc.jit(f, dynamic_axes=({0: "B", 1: "N"},))
    for n in (1, 3, 13, 16, 40, 63, 64, 100, 128, 200):
        x = rng.standard_normal((40, n)).astype(np.float32)
        for jf in (unknown, jdisc.jit(f, dynamic_axes=({0: "B"},))):
            whole = [np.asarray(a) for a in jf(x)]
            for rows in (1, 15, 16, 17):
                for k, part in enumerate(jf(x[24 - rows:24])):
                    assert np.array_equal(np.asarray(part)[-1], whole[k][23]), (n, rows, k)
    assert unknown.stats()["compiles"] == 1


def test_assert_close_fails_where_jax_has_an_infinity_and_jdisc_does_not():
    # the suite's comparison: an infinity in the expected output must not make the bound
    # infinite (3.0 against inf passed before 2026-12-06); equal infinities pass
    inf = np.float32(np.inf)
    want = np.array([1.0, inf, -inf], np.float32)
    assert_close(want.copy(), want, 1e-6, "equal")
    for got in ([1.0, 3.0, -inf], [1.0, inf, inf], [1.0, inf, 0.0], [1.5, inf, -inf]):
        with pytest.raises(AssertionError):
            assert_close(np.array(got, np.float32), want, 1e-6, "differs")
    with pytest.raises(AssertionError):      # an infinity jax does not have
        assert_close(np.array([1.0, inf], np.float32), np.array([1.0, 2.0], np.float32), 1e-6)
