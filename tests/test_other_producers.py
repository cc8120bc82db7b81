"""StableHLO that other producers write and jax.export does not: `torch_index_select`, and the
batch-norm ops (the
StableHLO spec's formulas, against numpy in f64; f32 reductions over at most 4 x 13 elements
per feature, so 1e-5 of the output's scale). The deprecated `dot` is in test_ops.py."""

import numpy as np
import pytest

import jdisc
from conftest import assert_close

X, V = "tensor<?x3x?xf32>", "tensor<3xf32>"
INPUTS = {"inference": ["x", "s", "o", "m", "v"], "training": ["x", "s", "o"],
          "grad": ["x", "s", "m", "v", "dy"]}


def _module(kind: str) -> str:
    names = INPUTS[kind]
    types = [X if n in ("x", "dy") else V for n in names]
    outs = [X] if kind == "inference" else [X, V, V]
    res = "%0" if len(outs) == 1 else f"%0:{len(outs)}"
    ret = "%0" if len(outs) == 1 else ", ".join(f"%0#{i}" for i in range(len(outs)))
    return (f"func.func @main({', '.join(f'%{n}: {t}' for n, t in zip(names, types))}) -> "
            f"({', '.join(outs)}) {{\n"
            f"  {res} = \"stablehlo.batch_norm_{kind}\"({', '.join('%' + n for n in names)}) "
            f"{{epsilon = 0.001 : f32, feature_index = 1 : i64}} : ({', '.join(types)}) -> "
            f"({', '.join(outs)})\n  return {ret} : {', '.join(outs)}\n}}")


def _b(v):
    return v[None, :, None]


@pytest.mark.parametrize("kind", ["inference", "training", "grad"])
def test_batch_norm_ops(kind, rng):
    f = jdisc.compile_stablehlo(_module(kind))
    for n, m in [(1, 1), (2, 5), (4, 13), (0, 3)]:
        if kind != "inference" and n * m == 0:
            continue                       # a mean over no elements: 0 / 0
        x = rng.standard_normal((n, 3, m))
        s, o, mu = (rng.standard_normal(3) for _ in range(3))
        v, dy = rng.random(3), rng.standard_normal((n, 3, m))
        args = {"x": x, "s": s, "o": o, "m": mu, "v": v, "dy": dy}
        got = f(*(args[k].astype(np.float32) for k in INPUTS[kind]))
        if kind == "inference":
            want = [(x - _b(mu)) / np.sqrt(_b(v) + 1e-3) * _b(s) + _b(o)]
        elif kind == "training":
            bm, bv = x.mean((0, 2)), x.var((0, 2))
            want = [(x - _b(bm)) / np.sqrt(_b(bv) + 1e-3) * _b(s) + _b(o), bm, bv]
        else:
            inv = 1 / np.sqrt(_b(v) + 1e-3)
            xh = (x - _b(mu)) * inv
            go, gs = dy.sum((0, 2)), (dy * xh).sum((0, 2))
            want = [_b(s) * inv * (dy - _b(go) / (n * m) - xh * _b(gs) / (n * m)), gs, go]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w.astype(np.float32), 1e-5, f"{kind} at {n}x3x{m}")


@pytest.mark.parametrize("axis", [0, 1])
def test_torch_index_select(axis, rng):
    xt = "tensor<?x4xf32>" if axis == 0 else "tensor<3x?xf32>"
    out = "tensor<2x?x4xf32>" if axis == 0 else "tensor<3x2x?xf32>"
    f = jdisc.compile_stablehlo(
        f"func.func @main(%x: {xt}, %i: tensor<2x?xi32>) -> {out} {{\n"
        f'  %0 = "stablehlo.torch_index_select"(%x, %i) {{dim = {axis} : i64, batch_dims = 0 : '
        f"i64}} : ({xt}, tensor<2x?xi32>) -> {out}\n  return %0 : {out}\n}}")
    for n, k in [(1, 1), (5, 3), (7, 0)]:
        x = rng.standard_normal((n, 4) if axis == 0 else (3, n)).astype(np.float32)
        i = rng.integers(0, n, (2, k)).astype(np.int32)
        (got,) = f(x, i)
        assert_close(got, np.take(x, i, axis=axis), 0)


CHLO_BROADCASTS = """
func.func @main(%a: tensor<?x4xf32>, %b: tensor<?x1xf32>, %c: tensor<?xf32>)
    -> (tensor<?x4xf32>, tensor<?x?xf32>, tensor<?x?xi1>) {
  %0 = chlo.broadcast_add %a, %b : (tensor<?x4xf32>, tensor<?x1xf32>) -> tensor<?x4xf32>
  %1 = chlo.broadcast_multiply %b, %c : (tensor<?x1xf32>, tensor<?xf32>) -> tensor<?x?xf32>
  %2 = chlo.broadcast_compare %b, %c {comparison_direction = #chlo<comparison_direction GT>}
      : (tensor<?x1xf32>, tensor<?xf32>) -> tensor<?x?xi1>
  return %0, %1, %2 : tensor<?x4xf32>, tensor<?x?xf32>, tensor<?x?xi1>
}
"""


def test_chlo_broadcasting_ops_with_dynamic_shapes(rng):
    # chlo-legalize-to-stablehlo leaves shape.shape_of / cstr_broadcastable / assuming /
    # broadcast around them: the witness is a run-time check, the region runs inline
    f = jdisc.compile_stablehlo(CHLO_BROADCASTS)
    for n, k in [(0, 3), (1, 1), (3, 1), (5, 7), (1, 0)]:
        a = rng.standard_normal((n, 4)).astype(np.float32)
        b = rng.standard_normal((n, 1)).astype(np.float32)
        c = rng.standard_normal(k).astype(np.float32)
        got = f(a, b, c)
        for g, want in zip(got, (a + b, b * c, b > c)):
            np.testing.assert_array_equal(np.asarray(g), want)
    with pytest.raises(jdisc.ShapeError, match="do not broadcast"):
        f(np.ones((3, 4), np.float32), np.ones((2, 1), np.float32), np.ones(5, np.float32))


def test_torch_index_select_with_batch_dims(rng):
    # the first batch_dims axes of operand and indices pair up: out[b, j, c] = x[b, i[b, j], c]
    f = jdisc.compile_stablehlo(
        "func.func @main(%x: tensor<?x?x3xf32>, %i: tensor<?x?xi32>) -> tensor<?x?x3xf32> {\n"
        '  %0 = "stablehlo.torch_index_select"(%x, %i) {dim = 1 : i64, batch_dims = 1 : i64}'
        " : (tensor<?x?x3xf32>, tensor<?x?xi32>) -> tensor<?x?x3xf32>\n"
        "  return %0 : tensor<?x?x3xf32>\n}")
    for b, n, k in [(1, 1, 1), (2, 5, 3), (3, 7, 0), (0, 2, 2)]:
        x = rng.standard_normal((b, n, 3)).astype(np.float32)
        i = rng.integers(0, n, (b, k)).astype(np.int32)
        (got,) = f(x, i)
        assert_close(got, np.take_along_axis(x, i[:, :, None], axis=1), 0)


def test_torch_index_select_counts_negative_dims_from_the_end(rng):
    # dim = -1 of a rank-3 operand is axis 2; batch_dims = -1 of rank-2 indices is 1:
    # out[b, c, k] = x[b, c, i[b, k]] (IREE's end-to-end case)
    t3, t2 = "tensor<?x?x?xi32>", "tensor<?x?xi32>"
    f = jdisc.compile_stablehlo(
        f"func.func @main(%x: {t3}, %i: {t2}) -> {t3} {{\n"
        f'  %0 = "stablehlo.torch_index_select"(%x, %i) <{{batch_dims = -1 : i64, dim = -1 : '
        f"i64}}> : ({t3}, {t2}) -> {t3}\n  return %0 : {t3}\n}}")
    for b, c, n, k in [(1, 1, 1, 1), (2, 3, 5, 4), (3, 2, 7, 0), (0, 2, 3, 2), (2, 0, 3, 3)]:
        x = rng.integers(-50, 50, (b, c, n)).astype(np.int32)
        i = rng.integers(0, n, (b, k)).astype(np.int32)
        (got,) = f(x, i)
        want = np.take_along_axis(x, np.broadcast_to(i[:, None, :], (b, c, k)), axis=2)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_torch_index_select_out_of_range_dims_are_refused():
    t = "tensor<?x4xf32>"
    with pytest.raises(jdisc.UnsupportedOpError, match=r"dim = -3 and batch_dims = 0 do not "
                                                        r"fit an operand of rank 2"):
        jdisc.compile_stablehlo(
            f"func.func @main(%x: {t}, %i: tensor<?xi32>) -> tensor<?x4xf32> {{\n"
            f'  %0 = "stablehlo.torch_index_select"(%x, %i) {{dim = -3 : i64, batch_dims = 0 : '
            f"i64}} : ({t}, tensor<?xi32>) -> tensor<?x4xf32>\n  return %0 : tensor<?x4xf32>\n}}")


def test_deprecated_broadcast_takes_unknown_result_dims_from_its_sizes(rng):
    # the result type leaves the new leading dims `?`; `sizes` says what they are
    f = jdisc.compile_stablehlo(
        "func.func @main(%x: tensor<?x?xi32>) -> tensor<?x?x?x?xi32> {\n"
        "  %0 = stablehlo.broadcast %x, sizes = [3, 1] : (tensor<?x?xi32>) -> tensor<?x?x?x?xi32>\n"
        "  return %0 : tensor<?x?x?x?xi32>\n}")
    for shape in [(2, 3), (1, 1), (0, 4), (5, 0)]:
        x = rng.integers(-9, 9, shape).astype(np.int32)
        (got,) = f(x)
        np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(x, (3, 1) + shape))
