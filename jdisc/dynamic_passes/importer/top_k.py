"""The top-k custom calls jax writes, as StableHLO jdisc already compiles: a stable sort along
the reduction axis, largest (or by the given comparator) first, then the first k of that axis
(`real_dynamic_slice`, whose limit the shape propagation derives from the dims it is computed
from). Each call becomes a call of a private function, which the pass pipeline inlines.

* `stablehlo.dynamic_top_k(x, k)`: `lax.top_k` with a k that depends on a dim. XLA's order:
  floats by their total order (NaN above +inf, +0 above -0), ties by the lower index.
* `ApproxTopK(x, indices, init value, init index)`: `lax.approx_max_k` / `approx_min_k` on
  CPU, sorted by the call's own comparator function, as XLA:CPU's fallback. With
  `aggregate_to_topk` the first k: the exact top k is a valid answer (its recall is 1).
  Without it, as many as the result type holds along the axis (XLA:CPU returns the whole
  sorted axis: every element is a candidate); jax only writes that form with a static axis.
* `stablehlo.dynamic_approx_top_k(x, indices, init value, init index, k, shape operands)`:
  the same with a k computed from the dims (`x.shape[-1] // 2`).
"""

from __future__ import annotations

from jaxlib.mlir import ir

from jdisc.dynamic_passes.importer.mlir_helpers import call_helper


def rewrite(module: ir.Module, ops) -> None:
    """Replace every top-k custom call among `ops` by a call of its sort function."""
    calls = [o for o in ops if o.name == "stablehlo.custom_call" and
             "call_target_name" in o.attributes]
    for n, o in enumerate(calls):
        target = ir.StringAttr(o.attributes["call_target_name"]).value
        if target == "stablehlo.dynamic_top_k" and len(o.operands) == 2 and len(o.results) == 2:
            x = ir.RankedTensorType(o.operands[0].type)
            _replace(module, o, f"jd_dynamic_top_k_{n}", [0, 1], x.rank - 1, "",
                     _total_order(x))
        elif target in ("ApproxTopK", "stablehlo.dynamic_approx_top_k") and \
                len(o.results) == 2 and len(o.operands) >= (4 if target == "ApproxTopK" else 5):
            config = _approx_config(o, dynamic=target != "ApproxTopK")
            if config is None:
                continue
            axis, k, comparator = config
            _replace(module, o, f"jd_approx_top_k_{n}", list(range(len(o.operands))), axis,
                     k, None, comparator)


def _approx_config(o, dynamic: bool):
    """(reduction axis, k, comparator symbol) of an approximate top-k call jdisc can answer
    as XLA:CPU does; k is a number, "%p4" (the dynamic form's k operand) or "" (all of the
    axis). None for a call it cannot read."""
    if "mhlo.backend_config" not in o.attributes or "called_computations" not in o.attributes:
        return None
    config = ir.DictAttr(o.attributes["mhlo.backend_config"])
    if any(key not in config for key in ("reduction_dim", "aggregate_to_topk")) or \
            not dynamic and "top_k" not in config:
        return None
    called = ir.ArrayAttr(o.attributes["called_computations"])
    if len(called) != 1:
        return None
    axis = ir.IntegerAttr(config["reduction_dim"]).value
    out = ir.RankedTensorType(o.results[0].type)
    if not 0 <= axis < out.rank:
        return None
    if str(config["aggregate_to_topk"]) == "true":
        k = "%p4" if dynamic else str(ir.IntegerAttr(config["top_k"]).value)
    elif out.is_dynamic_dim(axis):      # the whole axis, as XLA:CPU's fallback returns it
        k = ""
    else:
        k = str(out.shape[axis])
    return axis, k, ir.FlatSymbolRefAttr(called[0]).value


def _total_order(x: ir.RankedTensorType) -> list[str]:
    el = str(x.element_type)
    kind = "TOTALORDER" if el.startswith(("f", "bf")) else \
        "UNSIGNED" if el.startswith("ui") or el == "i1" else "SIGNED"
    return [f"%gt = stablehlo.compare GT, %a, %b, {kind} : (tensor<{el}>, tensor<{el}>) -> "
            f"tensor<i1>"]


def _replace(module: ir.Module, o, name: str, used: list[int], axis: int, k: str,
             compare: list[str] | None, comparator: str | None = None) -> None:
    operands = [o.operands[i] for i in used]
    text = _function(name, [str(v.type) for v in operands],
                     [ir.RankedTensorType(v.type) for v in operands],
                     [ir.RankedTensorType(r.type) for r in o.results], axis, k, compare,
                     comparator)
    call_helper(module, o, name, text, operands)


def _function(name: str, types: list[str], ins: list[ir.RankedTensorType],
              results: list[ir.RankedTensorType], axis: int, k: str,
              compare: list[str] | None, comparator: str | None) -> str:
    """The function's text: (x, k) for dynamic_top_k (the indices an iota; `k` unused), or every
    operand of an approximate top-k call (x and its indices; the init values and shape operands
    unused) with `comparator` its comparison function and `k` its static k, the name of its k
    operand, or "" for the whole axis."""
    x = ins[0]
    rank = x.rank
    el, iel = str(x.element_type), str(results[1].element_type)
    lines = []
    if comparator is not None:      # declared here so that the helper module verifies
        lines.append(f"func.func private @{comparator}(tensor<{el}>, tensor<{el}>, "
                     f"tensor<{iel}>, tensor<{iel}>) -> tensor<i1>")
        compare = [f"%gt = func.call @{comparator}(%a, %b, %i, %j) : (tensor<{el}>, "
                   f"tensor<{el}>, tensor<{iel}>, tensor<{iel}>) -> tensor<i1>"]
    params = ", ".join(f"%p{i}: {t}" for i, t in enumerate(types))
    lines.append(f"func.func private @{name}({params}) -> ({results[0]}, {results[1]}) {{")
    dims = []
    for d in range(rank):
        if x.is_dynamic_dim(d):
            lines.append(f"  %s{d} = stablehlo.get_dimension_size %p0, dim = {d} : ({x}) -> "
                         f"tensor<i32>")
            lines.append(f"  %d{d} = stablehlo.reshape %s{d} : (tensor<i32>) -> tensor<1xi32>")
        else:
            lines.append(f"  %d{d} = stablehlo.constant dense<{x.shape[d]}> : tensor<1xi32>")
        dims.append(f"%d{d}")
    shape_t, ones = f"tensor<{rank}xi32>", ", ".join(["tensor<1xi32>"] * rank)
    sizes = ["?" if x.is_dynamic_dim(d) else str(x.shape[d]) for d in range(rank)]
    index_t = f"tensor<{'x'.join(sizes)}x{iel}>"
    if comparator is None:
        lines.append(f"  %shape = stablehlo.concatenate {', '.join(dims)}, dim = 0 : ({ones}) -> "
                     f"{shape_t}")
        lines.append(f"  %idx = stablehlo.dynamic_iota %shape, dim = {axis} : ({shape_t}) -> "
                     f"{index_t}")
        lines.append(f"  %k32 = stablehlo.convert %p1 : ({types[1]}) -> tensor<i32>")
        lines.append("  %kk = stablehlo.reshape %k32 : (tensor<i32>) -> tensor<1xi32>")
        index = "%idx"
    else:
        index, index_t = "%p1", types[1]
        if k.startswith("%"):       # a k operand (tensor<i32>)
            lines.append(f"  %kk = stablehlo.reshape {k} : (tensor<i32>) -> tensor<1xi32>")
        elif k:
            lines.append(f"  %kk = stablehlo.constant dense<{k}> : tensor<1xi32>")
    limit = dims[:axis] + ["%kk" if k or comparator is None else dims[axis]] + dims[axis + 1:]
    lines += [
        f'  %sorted:2 = "stablehlo.sort"(%p0, {index}) ({{',
        f"    ^bb0(%a: tensor<{el}>, %b: tensor<{el}>, %i: tensor<{iel}>, %j: tensor<{iel}>):",
        *(f"      {line}" for line in compare),
        "      stablehlo.return %gt : tensor<i1>",
        f"  }}) {{dimension = {axis} : i64, is_stable = true}} : ({x}, {index_t}) -> "
        f"({x}, {index_t})",
        f"  %limit = stablehlo.concatenate {', '.join(limit)}, dim = 0 : ({ones}) -> {shape_t}",
        f"  %zero = stablehlo.constant dense<0> : {shape_t}",
        f"  %one = stablehlo.constant dense<1> : {shape_t}",
        f"  %v = stablehlo.real_dynamic_slice %sorted#0, %zero, %limit, %one : ({x}, {shape_t}, "
        f"{shape_t}, {shape_t}) -> {results[0]}",
        f"  %ix = stablehlo.real_dynamic_slice %sorted#1, %zero, %limit, %one : ({index_t}, "
        f"{shape_t}, {shape_t}, {shape_t}) -> {results[1]}",
        f"  return %v, %ix : {results[0]}, {results[1]}",
        "}",
    ]
    return "\n".join(lines) + "\n"
