"""Replacing an op of an MLIR module by a call of a private function written as StableHLO text
(the import's rewrites of custom calls and deprecated ops: top_k.py, legacy_ops.py). The pass
pipeline's `inline` then puts the function's body in its place."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func


def dims_of(value: str, t: ir.RankedTensorType, prefix: str) -> tuple[list[str], str]:
    """Lines binding `%{prefix}{d}` (tensor<1xi32>) to each dim of `value` (of type t), then
    `%{prefix}` to the whole shape (tensor<rank x i32>); returns (lines, shape type)."""
    lines = []
    for d in range(t.rank):
        if t.is_dynamic_dim(d):
            lines.append(f"%{prefix}s{d} = stablehlo.get_dimension_size {value}, dim = {d} : "
                         f"({t}) -> tensor<i32>")
            lines.append(f"%{prefix}{d} = stablehlo.reshape %{prefix}s{d} : (tensor<i32>) -> "
                         f"tensor<1xi32>")
        else:
            lines.append(f"%{prefix}{d} = stablehlo.constant dense<{t.shape[d]}> : "
                         f"tensor<1xi32>")
    shape_t = f"tensor<{t.rank}xi32>"
    if t.rank:
        lines.append(f"%{prefix} = stablehlo.concatenate "
                     f"{', '.join(f'%{prefix}{d}' for d in range(t.rank))}, dim = 0 : "
                     f"({', '.join(['tensor<1xi32>'] * t.rank)}) -> {shape_t}")
    return lines, shape_t


def call_helper(module: ir.Module, o: ir.Operation, name: str, text: str,
                operands: list | None = None) -> None:
    """Replace `o` by a call of the function `name`, the last function in `text` (a module of
    its own, in o's context), with o's operands (or `operands`) and o's result types."""
    operands = list(o.operands) if operands is None else operands
    with module.context:
        helper = ir.Module.parse(text)
        module.body.append(helper.body.operations[-1])     # moved into the module
        with ir.InsertionPoint(o), o.location:
            call = func.CallOp([r.type for r in o.results], name, operands)
    for old, rep in zip(o.results, call.results):
        old.replace_all_uses_with(rep)
    o.erase()
