"""Chains of data movement folded to one reshape.

A transpose, a `broadcast_in_dim` that only adds size-1 dims and a reshape that only adds or
drops size-1 dims each move dims around without touching an element. Programs chain them: an
NCHW layer library moves the channels last for a pool and back after it, and a convolution's
canonical layout (convolutions.py) moves them last again, with a size-1 group dim added and
dropped in between (equinox's Conv2d after its MaxPool2d). Followed from the value where the
chain starts, such a chain often ends with that value's dims in their own order: the result is
then a reshape of it (an alias, no kernel) or the value itself, and the copies and strided
reads of the transposes in between go away.

`fold_layout_moves` tracks, for each value a move produces, its chain's first value and which
of that value's dims each of its dims is (size-1 dims the chain added: none). One pass over the
ops, O(rank) each.
"""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.program import Op, Program, Value


def fold_layout_moves(prog: Program) -> Program:
    """Pass: a chain of transposes and size-1 reshapes / broadcasts whose result holds its
    first value's dims in their order -> a reshape of that value, or the value itself."""
    origin: dict[int, tuple[Value, tuple]] = {}
    subst: dict[int, Value] = {}
    ops: list[Op] = []
    for op in prog.body.ops:
        if subst:
            op.operands = [subst.get(v.id, v) for v in op.operands]
        moves = _moves(op)
        if moves is None:
            ops.append(op)
            continue
        x, r = op.operands[0], op.results[0]
        src, at = origin.get(x.id, (x, tuple(range(x.rank))))
        dims = tuple(None if d is None else at[d] for d in moves)
        origin[r.id] = (src, dims)
        if src is x or not _in_order(src, dims):
            ops.append(op)
        elif _same_shape(src.shape, r.shape):
            subst[r.id] = src
        else:
            ops.append(Op("reshape", [src], [r], {}, op.loc))
    if subst:
        prog.body.results = [subst.get(v.id, v) for v in prog.body.results]
    live = {v.id for v in prog.body.results}
    kept = []
    for op in reversed(ops):     # the moves a fold left unread go
        if _moves(op) is None or any(r.id in live for r in op.results):
            kept.append(op)
            live.update(v.id for v in op.operands)
    prog.body.ops = kept[::-1]
    return prog


def _is_one(d) -> bool:
    return isinstance(d, int) and d == 1


def _same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(symbolic.prove_eq(x, y) is True for x, y in zip(a, b))


def _in_order(src: Value, dims: tuple) -> bool:
    """The dims, read in order, are src's dims of size other than 1, in src's order."""
    kept = [d for d in dims if d is not None and not _is_one(src.shape[d])]
    return kept == [d for d in range(src.rank) if not _is_one(src.shape[d])]


def _moves(op: Op) -> tuple | None:
    """For a pure move, the operand dim each result dim is (None: a size-1 dim it adds);
    None for any other op."""
    if len(op.results) != 1 or not op.operands:
        return None
    x, r = op.operands[0], op.results[0]
    if op.name == "transpose":
        return tuple(op.attrs["permutation"])
    if op.name == "broadcast_in_dim" and len(op.operands) == 1:
        bd = op.attrs["broadcast_dimensions"]
        if not all(symbolic.prove_eq(x.shape[j], r.shape[k]) is True for j, k in enumerate(bd)):
            return None     # a dim that grows: not a move
        if not all(_is_one(r.shape[k]) for k in range(r.rank) if k not in bd):
            return None
        where = {k: j for j, k in enumerate(bd)}
        return tuple(where.get(k) for k in range(r.rank))
    if op.name == "reshape" and len(op.operands) == 1:
        xs = [j for j in range(x.rank) if not _is_one(x.shape[j])]
        rs = [k for k in range(r.rank) if not _is_one(r.shape[k])]
        if len(xs) != len(rs) or not all(symbolic.prove_eq(x.shape[j], r.shape[k]) is True
                                         for j, k in zip(xs, rs)):
            return None
        where = dict(zip(rs, xs))
        return tuple(where.get(k) for k in range(r.rank))
    return None
