"""`stablehlo.dynamic_top_k` (a custom call: `lax.top_k` with a k that depends on a dim) as
StableHLO jdisc already compiles: a stable sort of (x, iota) along the last axis, largest first,
then the first k of each row (`real_dynamic_slice`, whose limit k the shape propagation derives
from the dims it is computed from).

The order is XLA's: floats by their total order (NaN above +inf, +0 above -0), ties by the lower
index. Each call becomes a call of a private function, which the pass pipeline inlines."""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func

TARGET = "stablehlo.dynamic_top_k"


def rewrite(module: ir.Module, ops) -> None:
    """Replace every dynamic_top_k custom call among `ops` by a call of its sort function."""
    found = [o for o in ops if o.name == "stablehlo.custom_call" and
             "call_target_name" in o.attributes and
             ir.StringAttr(o.attributes["call_target_name"]).value == TARGET and
             len(o.operands) == 2 and len(o.results) == 2]
    for n, o in enumerate(found):
        x, k = (ir.RankedTensorType(v.type) for v in o.operands)
        vals, idx = (ir.RankedTensorType(r.type) for r in o.results)
        name = f"jd_dynamic_top_k_{n}"
        text = _function(name, x, k, vals, idx)
        with module.context:
            helper = ir.Module.parse(text)
            module.body.append(helper.body.operations[0])     # moved into the module
            with ir.InsertionPoint(o), o.location:
                call = func.CallOp([vals, idx], name, list(o.operands))
        for old, rep in zip(o.results, call.results):
            old.replace_all_uses_with(rep)
        o.erase()


def _compare_type(element: ir.Type) -> str:
    text = str(element)
    if text.startswith(("f", "bf")):
        return "TOTALORDER"
    return "UNSIGNED" if text.startswith("ui") or text == "i1" else "SIGNED"


def _function(name: str, x: ir.RankedTensorType, k: ir.RankedTensorType,
              vals: ir.RankedTensorType, idx: ir.RankedTensorType) -> str:
    rank, axis = x.rank, x.rank - 1
    el, iel = str(x.element_type), str(idx.element_type)
    lines = [f"func.func private @{name}(%x: {x}, %k: {k}) -> ({vals}, {idx}) {{"]
    dims = []
    for d in range(rank):
        if x.is_dynamic_dim(d):
            lines.append(f"  %s{d} = stablehlo.get_dimension_size %x, dim = {d} : ({x}) -> "
                         f"tensor<i32>")
            lines.append(f"  %d{d} = stablehlo.reshape %s{d} : (tensor<i32>) -> tensor<1xi32>")
        else:
            lines.append(f"  %d{d} = stablehlo.constant dense<{x.shape[d]}> : tensor<1xi32>")
        dims.append(f"%d{d}")
    shape_t = f"tensor<{rank}xi32>"
    ones_1 = ", ".join(["tensor<1xi32>"] * rank)
    lines.append(f"  %shape = stablehlo.concatenate {', '.join(dims)}, dim = 0 : ({ones_1}) -> "
                 f"{shape_t}")
    sizes = ["?" if x.is_dynamic_dim(d) else str(x.shape[d]) for d in range(rank)]
    iota_t = f"tensor<{'x'.join(sizes)}x{iel}>"
    lines.append(f"  %iota = stablehlo.dynamic_iota %shape, dim = {axis} : ({shape_t}) -> {iota_t}")
    lines += [
        '  %sorted:2 = "stablehlo.sort"(%x, %iota) ({',
        f"    ^bb0(%a: tensor<{el}>, %b: tensor<{el}>, %i: tensor<{iel}>, %j: tensor<{iel}>):",
        f"      %gt = stablehlo.compare GT, %a, %b, {_compare_type(x.element_type)} : "
        f"(tensor<{el}>, tensor<{el}>) -> tensor<i1>",
        "      stablehlo.return %gt : tensor<i1>",
        f"  }}) {{dimension = {axis} : i64, is_stable = true}} : ({x}, {iota_t}) -> ({x}, {iota_t})",
        f"  %k32 = stablehlo.convert %k : ({k}) -> tensor<i32>",
        "  %kk = stablehlo.reshape %k32 : (tensor<i32>) -> tensor<1xi32>",
        f"  %limit = stablehlo.concatenate {', '.join(dims[:-1] + ['%kk'])}, dim = 0 : "
        f"({ones_1}) -> {shape_t}",
        f"  %zero = stablehlo.constant dense<0> : {shape_t}",
        f"  %one = stablehlo.constant dense<1> : {shape_t}",
        f"  %v = stablehlo.real_dynamic_slice %sorted#0, %zero, %limit, %one : ({x}, {shape_t}, "
        f"{shape_t}, {shape_t}) -> {vals}",
        f"  %ix = stablehlo.real_dynamic_slice %sorted#1, %zero, %limit, %one : ({iota_t}, "
        f"{shape_t}, {shape_t}, {shape_t}) -> {idx}",
        f"  return %v, %ix : {vals}, {idx}",
        "}",
    ]
    return "\n".join(lines) + "\n"
