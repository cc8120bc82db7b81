"""Convolutions in one layout: input [N, spatial..., C], kernel [spatial..., C/groups, O],
output [N, spatial..., O]. Other layouts get explicit transposes (fused into loop kernels), so
the convolution kernels (lowering/conv.py: direct, or im2col + GEMM) handle one layout."""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.program import Op, Program, Value


def _transpose(v: Value, perm: tuple[int, ...], loc: str) -> tuple[Op | None, Value]:
    if perm == tuple(range(v.rank)):
        return None, v
    out = Value(v.dtype, tuple(v.shape[p] for p in perm))
    return Op("transpose", [v], [out], {"permutation": perm}, loc), out


HALF = ("f16", "bf16")


def canonicalize_convolutions(prog: Program) -> Program:
    """Pass: every convolution reads NHWC/HWIO and writes NHWC (transposes inserted), in f32
    or f64: a f16/bf16 one is computed in f32 and rounded once, as XLA:CPU computes it."""
    new_ops: list[Op] = []
    for op in prog.body.ops:
        if op.name != "convolution":
            new_ops.append(op)
            continue
        widen, narrow = _widened(op)
        new_ops += widen
        _canonical(op, new_ops)
        new_ops += narrow
    prog.body.ops = new_ops
    return prog


def _widened(op: Op) -> tuple[list[Op], list[Op]]:
    """A convolution with f16/bf16 operands or result: f32 operands (converts before it) and
    an f32 result (a convert after it, back to the result's type). No-ops otherwise."""
    values = [*op.operands, op.results[0]]
    if not any(v.dtype in HALF for v in values):
        return [], []
    before = []
    for j, v in enumerate(op.operands):
        if v.dtype in HALF:
            wide = Value("f32", v.shape)
            before.append(Op("convert", [v], [wide], {}, op.loc))
            op.operands[j] = wide
    out = op.results[0]
    if out.dtype not in HALF:
        return before, []
    wide = Value("f32", out.shape)
    op.results = [wide]
    wide.producer = op
    return before, [Op("convert", [wide], [out], {}, op.loc)]


def _canonical(op: Op, new_ops: list[Op]) -> None:
    """The convolution in NHWC/HWIO -> NHWC, with its transposes, appended to new_ops."""
    dn = op.attrs["dimension_numbers"]
    x, k = op.operands
    t_x, x2 = _transpose(x, (dn["in_batch"], *dn["in_spatial"], dn["in_feature"]), op.loc)
    t_k, k2 = _transpose(k, (*dn["k_spatial"], dn["k_in"], dn["k_out"]), op.loc)
    new_ops += [t for t in (t_x, t_k) if t is not None]
    out = op.results[0]
    order = (dn["out_batch"], *dn["out_spatial"], dn["out_feature"])
    canon = Value(out.dtype, tuple(out.shape[d] for d in order))
    ns = len(dn["in_spatial"])
    op.operands = [x2, k2]
    op.attrs["dimension_numbers"] = {
        "in_batch": 0, "in_feature": ns + 1, "in_spatial": tuple(range(1, ns + 1)),
        "k_in": ns, "k_out": ns + 1, "k_spatial": tuple(range(ns)),
        "out_batch": 0, "out_feature": ns + 1, "out_spatial": tuple(range(1, ns + 1))}
    if op.attrs.get("batch_group_count", 1) != 1:
        new_ops += _split_batch_groups(op, out if order == tuple(range(out.rank)) else canon)
        if order == tuple(range(out.rank)):
            return
    elif order == tuple(range(out.rank)):
        new_ops.append(op)
        return
    else:
        op.results = [canon]
        canon.producer = op
        new_ops.append(op)
    inverse = tuple(order.index(d) for d in range(out.rank))
    back = Op("transpose", [canon], [out], {"permutation": inverse}, op.loc)
    new_ops.append(back)


def _split_batch_groups(op: Op, out: Value) -> list[Op]:
    """batch_group_count G (a weight gradient of a grouped convolution): batch slice g of the
    input with output-feature slice g of the kernel, for each g, concatenated along the output
    features. Operands are already NHWC / HWIO."""
    g_count = op.attrs["batch_group_count"]
    x, k = op.operands
    n = symbolic.floordiv(x.shape[0], g_count)
    o = symbolic.floordiv(k.shape[-1], g_count)
    ops, parts = [], []
    for g in range(g_count):
        xs = Value(x.dtype, (n,) + x.shape[1:])
        ks = Value(k.dtype, k.shape[:-1] + (o,))
        ops.append(Op("slice", [x], [xs], {"start_indices": (g * n,) + (0,) * (x.rank - 1),
                      "limit_indices": ((g + 1) * n,) + x.shape[1:], "strides": (1,) * x.rank},
                      op.loc))
        ops.append(Op("slice", [k], [ks], {"start_indices": (0,) * (k.rank - 1) + (g * o,),
                      "limit_indices": k.shape[:-1] + ((g + 1) * o,),
                      "strides": (1,) * k.rank}, op.loc))
        part = Value(out.dtype, out.shape[:-1] + (o,))
        attrs = dict(op.attrs, batch_group_count=1)
        ops.append(Op("convolution", [xs, ks], [part], attrs, op.loc))
        parts.append(part)
    ops.append(Op("concatenate", parts, [out], {"dimension": out.rank - 1}, op.loc))
    return ops
