"""Tuple-typed arguments and results of `@main`, as their elements.

Other producers (older XLA exporters, hand-written StableHLO) pass tuples in and out of the
entry function. jdisc compiles arrays, so `flatten_main_tuples` rewrites `@main` over the
tuples' leaves (depth first): each tuple argument becomes its leaves, rebuilt with
`stablehlo.tuple` at the top of the body, and each tuple result is taken apart with
`stablehlo.get_tuple_element` before the return. Every get_tuple_element then reads a tuple
made in the function, which legacy_ops resolves, so no tuple value is left. The returned trees say how the
caller's nested Python tuples map onto the leaves (`flatten_args`, `unflatten_results`).
"""

from __future__ import annotations

from typing import Any, Sequence

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import func, stablehlo

# a tree: None for an array, a tuple of trees for a tuple
Tree = Any

def _is_tuple(t: ir.Type) -> bool:
    return str(t).startswith("tuple<")


def _tree(t: ir.Type) -> Tree:
    if _is_tuple(t):
        tt = ir.TupleType(t)
        return tuple(_tree(tt.get_type(i)) for i in range(tt.num_types))
    return None


def _leaf_types(t: ir.Type) -> list[ir.Type]:
    if _is_tuple(t):
        tt = ir.TupleType(t)
        return [leaf for i in range(tt.num_types) for leaf in _leaf_types(tt.get_type(i))]
    return [t]


def flatten_main_tuples(module: ir.Module) -> tuple[list[Tree], list[Tree]] | None:
    """Rewrite `@main` over the leaves of its tuple arguments and results (in place); returns
    (input trees, result trees), or None when it has no tuples."""
    main = next((op.operation for op in module.body.operations
                 if op.operation.name == "func.func"
                 and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main"), None)
    if main is None:
        return None
    fn_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    ins, outs = list(fn_type.inputs), list(fn_type.results)
    if not any(_is_tuple(t) for t in ins + outs):
        return None
    blk = main.regions[0].blocks[0]
    with module.context, main.location:
        first = blk.operations[0]
        old_args = list(blk.arguments)

        def build(t: ir.Type):
            """A value of type t made from new leaf arguments (tuples built before `first`)."""
            if not _is_tuple(t):
                return blk.add_argument(t, main.location)
            tt = ir.TupleType(t)
            parts = [build(tt.get_type(i)) for i in range(tt.num_types)]
            with ir.InsertionPoint(first):
                return stablehlo.TupleOp(parts).result

        for arg, t in zip(old_args, ins):
            arg.replace_all_uses_with(build(t))
        for i in reversed(range(len(old_args))):
            blk.erase_argument(i)
        ret = blk.operations[len(blk.operations) - 1]
        flat = []

        def take(value, t: ir.Type) -> None:
            if not _is_tuple(t):
                flat.append(value)
                return
            tt = ir.TupleType(t)
            for i in range(tt.num_types):
                with ir.InsertionPoint(ret):
                    part = stablehlo.GetTupleElementOp(value, i).result
                take(part, tt.get_type(i))

        for value, t in zip(list(ret.operands), outs):
            take(value, t)
        with ir.InsertionPoint(ret):
            func.ReturnOp(flat)
        ret.erase()
        leaf_ins = [leaf for t in ins for leaf in _leaf_types(t)]
        leaf_outs = [leaf for t in outs for leaf in _leaf_types(t)]
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(leaf_ins, leaf_outs))
        for key in ("arg_attrs", "res_attrs"):   # they described the tuples
            if key in main.attributes:
                del main.attributes[key]
    return [_tree(t) for t in ins], [_tree(t) for t in outs]


def flatten_args(trees: Sequence[Tree], args: Sequence[Any]) -> list[Any]:
    """The leaves of `args` (one per tree; a tuple tree takes a Python tuple or list)."""
    if len(args) != len(trees):
        from jdisc.errors import ArgumentError
        raise ArgumentError(f"expected {len(trees)} argument(s), got {len(args)}")
    out: list[Any] = []

    def walk(tree: Tree, x: Any, where: str) -> None:
        if tree is None:
            out.append(x)
            return
        if not isinstance(x, (tuple, list)) or len(x) != len(tree):
            from jdisc.errors import ArgumentError
            raise ArgumentError(f"argument {where} is a tuple of {len(tree)} in the module; "
                                f"got {type(x).__name__}"
                                + (f" of {len(x)}" if isinstance(x, (tuple, list)) else ""))
        for i, (t, v) in enumerate(zip(tree, x)):
            walk(t, v, f"{where}[{i}]")

    for i, (tree, x) in enumerate(zip(trees, args)):
        walk(tree, x, f"args[{i}]")
    return out


def leaf_names(trees: Sequence[Tree]) -> list[str]:
    """`args[1][0]`-style names of the leaves, in order."""
    out: list[str] = []

    def walk(tree: Tree, where: str) -> None:
        if tree is None:
            out.append(where)
        else:
            for i, t in enumerate(tree):
                walk(t, f"{where}[{i}]")
    for i, tree in enumerate(trees):
        walk(tree, f"args[{i}]")
    return out


def unflatten_results(trees: Sequence[Tree], leaves: Sequence[Any]) -> list[Any]:
    """The results as nested tuples, one entry per result of the module's `@main`."""
    it = iter(leaves)

    def build(tree: Tree) -> Any:
        return next(it) if tree is None else tuple(build(t) for t in tree)
    return [build(t) for t in trees]
