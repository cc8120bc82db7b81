"""Ops other producers still write, as the ops jdisc compiles (run by the MLIR import before
jaxlib's pass pipeline). jaxlib's `stablehlo-legalize-deprecated-ops` pass would do this too,
but it also rewrites `broadcast` into a `broadcast_in_dim` that fails to verify when the result
is dynamic, which jdisc compiles as it is.

* `stablehlo.dot` (vector or matrix operands): a `dot_general` contracting the last axis of
  the left operand with the first of the right one, with the same precision config.
* `get_tuple_element` of a `tuple` made in the function: the element itself (nested tuples
  too); a tuple that is still used afterwards (a function's tuple argument or result) stays,
  and is refused as an unsupported type.
* `torch_index_select` (`take` along `dim`, the first `batch_dims` axes of the operand and the
  indices paired up; negative values of either count from the end): a `dynamic_gather` with
  those as batching dims; out-of-range indices are clamped.
* `batch_norm_inference`, `batch_norm_training`, `batch_norm_grad`: the StableHLO spec's
  formulas in elementwise ops and reductions over every axis but `feature_index` (in the
  operand's element type), as a function of their own.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

from jdisc.dynamic_passes.importer.mlir_helpers import call_helper, dims_of
from jdisc.errors import UnsupportedOpError

_BATCH_NORMS = ("stablehlo.batch_norm_inference", "stablehlo.batch_norm_training",
                "stablehlo.batch_norm_grad")


def rewrite(module: ir.Module, ops) -> None:
    # tuple ops by their position in `ops` (Python wrappers of MLIR operations are not
    # reliable dictionary keys once the module has been edited; values are)
    tuples: set[int] = set()
    made_by = {o.results[0]: i for i, o in enumerate(ops) if o.name == "stablehlo.tuple"}
    for n, o in enumerate(ops):
        if o.name == "stablehlo.get_tuple_element":
            src = made_by.get(o.operands[0])        # None for a block argument
            if src is not None:
                index = ir.IntegerAttr(o.attributes["index"]).value
                o.results[0].replace_all_uses_with(ops[src].operands[index])
                o.erase()
                tuples.add(src)
        elif o.name in _BATCH_NORMS:
            name = f"jd_{o.name.split('.')[1]}_{n}"
            call_helper(module, o, name, _batch_norm(o, name))
        elif o.name == "stablehlo.torch_index_select":
            name = f"jd_torch_index_select_{n}"
            call_helper(module, o, name, _index_select(o, name))
        elif o.name == "stablehlo.dot" and len(o.operands) == 2:
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
    # each tuple once, outer ones (later in the function) first: an inner tuple is unused once
    # the outer tuple that held it is gone
    for i in sorted(tuples, reverse=True):
        if not list(ops[i].results[0].uses):
            ops[i].erase()


def _batch_norm(o, name: str) -> str:
    kind = o.name.split(".")[1]
    x = ir.RankedTensorType(o.operands[0].type)
    el, fi = str(x.element_type), ir.IntegerAttr(o.attributes["feature_index"]).value
    eps = ir.FloatAttr(o.attributes["epsilon"]).value
    vec = str(o.operands[1].type)
    sc = f"tensor<{el}>"
    params = ", ".join(f"%p{i}: {v.type}" for i, v in enumerate(o.operands))
    results = ", ".join(str(r.type) for r in o.results)
    body, shape_t = dims_of("%p0", x, "xs")
    others = ", ".join(str(d) for d in range(x.rank) if d != fi)

    def bcast(v: str, out: str, dims: str = str(fi)) -> None:
        src = vec if dims else sc
        body.append(f"%{out} = stablehlo.dynamic_broadcast_in_dim {v}, %xs, dims = [{dims}] : "
                    f"({src}, {shape_t}) -> {x}")

    def op(out: str, what: str, *args: str, t: str = str(x)) -> None:
        body.append(f"%{out} = stablehlo.{what} {', '.join(args)} : {t}")

    def reduce_sum(out: str, v: str) -> None:
        body.extend([f'%{out} = "stablehlo.reduce"({v}, %zero) ({{',
                     f"^bb0(%a: {sc}, %b: {sc}):",
                     f"  %s = stablehlo.add %a, %b : {sc}",
                     f"  stablehlo.return %s : {sc}",
                     f"}}) {{dimensions = array<i64: {others}>}} : ({x}, {sc}) -> {vec}"])

    body.append(f"%zero = stablehlo.constant dense<0.0> : {sc}")
    body.append(f"%one = stablehlo.constant dense<1.0> : {sc}")
    body.append(f"%eps = stablehlo.constant dense<{eps!r}> : {sc}")
    bcast("%eps", "epsb", "")
    if kind in ("batch_norm_training", "batch_norm_grad"):
        bcast("%one", "onesb", "")
        reduce_sum("count", "%onesb")               # elements per feature, as a float
    if kind == "batch_norm_training":
        reduce_sum("sum", "%p0")
        op("mean", "divide", "%sum", "%count", t=vec)
        bcast("%mean", "meanb")
        op("centered", "subtract", "%p0", "%meanb")
        op("sq", "multiply", "%centered", "%centered")
        reduce_sum("sqsum", "%sq")
        op("var", "divide", "%sqsum", "%count", t=vec)
        bcast("%var", "varb")
    else:
        bcast("%p2" if kind == "batch_norm_grad" else "%p3", "meanb")
        bcast("%p3" if kind == "batch_norm_grad" else "%p4", "varb")
        op("centered", "subtract", "%p0", "%meanb")
    op("veps", "add", "%varb", "%epsb")
    op("inv", "rsqrt", "%veps")
    op("xhat", "multiply", "%centered", "%inv")
    bcast("%p1", "scaleb")
    if kind == "batch_norm_grad":
        reduce_sum("goffset", "%p4")
        op("dyx", "multiply", "%p4", "%xhat")
        reduce_sum("gscale", "%dyx")
        bcast("%goffset", "goffsetb")
        bcast("%gscale", "gscaleb")
        bcast("%count", "countb")
        op("mo", "divide", "%goffsetb", "%countb")
        op("ms", "divide", "%gscaleb", "%countb")
        op("xms", "multiply", "%xhat", "%ms")
        op("t1", "subtract", "%p4", "%mo")
        op("t2", "subtract", "%t1", "%xms")
        op("si", "multiply", "%scaleb", "%inv")
        op("gx", "multiply", "%si", "%t2")
        outs = ["%gx", "%gscale", "%goffset"]
    else:
        bcast("%p2", "offsetb")
        op("scaled", "multiply", "%xhat", "%scaleb")
        op("y", "add", "%scaled", "%offsetb")
        outs = ["%y", "%mean", "%var"] if kind == "batch_norm_training" else ["%y"]
    body.append(f"return {', '.join(outs)} : {results}")
    return (f"func.func private @{name}({params}) -> ({results}) {{\n  "
            + "\n  ".join(body) + "\n}\n")


def _index_select(o, name: str) -> str:
    x, idx = (ir.RankedTensorType(v.type) for v in o.operands)
    out = o.results[0].type
    # negative values count from the end: `dim` of the operand's rank, `batch_dims` of the
    # indices' rank (as torch's index_select and the StableHLO converters that emit it do)
    axis = ir.IntegerAttr(o.attributes["dim"]).value
    nb = ir.IntegerAttr(o.attributes["batch_dims"]).value
    axis, nb = axis + x.rank if axis < 0 else axis, nb + idx.rank if nb < 0 else nb
    if not (0 <= nb <= idx.rank and nb <= axis < x.rank):
        raise UnsupportedOpError(
            f"stablehlo.torch_index_select at {o.location}: dim = "
            f"{ir.IntegerAttr(o.attributes['dim']).value} and batch_dims = "
            f"{ir.IntegerAttr(o.attributes['batch_dims']).value} do not fit an operand of rank "
            f"{x.rank} and indices of rank {idx.rank} (needs 0 <= batch_dims <= dim < "
            f"{x.rank} and batch_dims <= {idx.rank}, negative values counted from the end)")
    body, _ = dims_of("%p0", x, "xs")
    sizes = [f"%xs{d}" if d != axis and d >= nb else "%unit" for d in range(x.rank)]
    body.insert(0, "%unit = stablehlo.constant dense<1> : tensor<1xi32>")
    body.append(f"%sizes = stablehlo.concatenate {', '.join(sizes)}, dim = 0 : "
                f"({', '.join(['tensor<1xi32>'] * x.rank)}) -> tensor<{x.rank}xi32>")
    # result: x.shape[:axis] + idx.shape[nb:] + x.shape[axis + 1:], the batch axes first
    rank = x.rank - 1 + idx.rank - nb
    offsets = [d for d in range(rank) if not (d < nb or axis <= d < axis + idx.rank - nb)]
    batch = ", ".join(map(str, range(nb)))
    body.append(f'%r = "stablehlo.dynamic_gather"(%p0, %p1, %sizes) {{dimension_numbers = '
                f"#stablehlo.gather<offset_dims = [{', '.join(map(str, offsets))}], "
                f"collapsed_slice_dims = [{axis}], operand_batching_dims = [{batch}], "
                f"start_indices_batching_dims = [{batch}], start_index_map = [{axis}], "
                f"index_vector_dim = {idx.rank}>, indices_are_sorted = false}} : "
                f"({x}, {idx}, tensor<{x.rank}xi32>) -> {out}")
    body.append(f"return %r : {out}")
    return (f"func.func private @{name}(%p0: {x}, %p1: {idx}) -> {out} {{\n  "
            + "\n  ".join(body) + "\n}\n")
