"""Ops other producers still write, as the ops jdisc compiles (run by the MLIR import before
jaxlib's pass pipeline). jaxlib's `stablehlo-legalize-deprecated-ops` pass would do this too,
but it also rewrites `broadcast` into a `broadcast_in_dim` that fails to verify when the result
is dynamic, which jdisc compiles as it is.

* `stablehlo.dot` (vector or matrix operands): a `dot_general` contracting the last axis of
  the left operand with the first of the right one, with the same precision config.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo


def rewrite(ops) -> None:
    for o in ops:
        if o.name == "stablehlo.dot" and len(o.operands) == 2:
            lhs, rhs = o.operands
            rank = ir.RankedTensorType(lhs.type).rank
            dims = stablehlo.DotDimensionNumbers.get(
                lhs_batching_dimensions=[], rhs_batching_dimensions=[],
                lhs_contracting_dimensions=[rank - 1], rhs_contracting_dimensions=[0])
            precision = o.attributes["precision_config"] if "precision_config" in o.attributes \
                else None
            with ir.InsertionPoint(o), o.location:
                new = stablehlo.DotGeneralOp(o.results[0].type, lhs, rhs, dims,
                                             precision_config=precision)
            o.results[0].replace_all_uses_with(new.result)
            o.erase()
