"""Index maps of the ops a kernel fuses, as obligations on the symbolic shapes.

Inside a kernel every value is rendered at an index (lowering/kernels.py): an op maps an index
of its result to the indices of its operands its semantics reads. For each op, `index_obligations`
lists what those reads need of the shapes to stay in bounds, given that the result's index is in
bounds: `start + stride*(size - 1) < dim` for a slice, `slice size <= dim` for a dynamic_slice
or a gather (whose starts are clamped to `[0, dim - size]`), equal dims for elementwise operands
and transposes, equal element counts for a reshape, sizes adding up for a concatenate, an operand
dim of 1 or >= the result's for a broadcast (the renderer reads `dim == 1 ? 0 : i` where it
cannot tell). Pad and dynamic_update_slice read their operands only under an in-bounds guard.
plan_check.py decides the obligations under the program's constraints.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.dtypes import bit_width
from jdisc.dynamic_passes.ir.ops import SAME_INDEX
from jdisc.dynamic_passes.ir.program import Op, Value


Fact = tuple     # (lhs, cmp, rhs)


@dataclasses.dataclass(frozen=True)
class Obligation:
    """What one op's index map needs: any one of `alternatives` (each a conjunction of facts)
    must hold, unless the op touches no element (`count`, the elements it reads or writes,
    is 0; None when the obligation holds regardless)."""
    what: str
    alternatives: tuple
    count: Dim | None = None

    def key(self):
        return self.alternatives, self.count

    def shown(self) -> str:
        alts = [" and ".join(f"{l} {c} {r}" for l, c, r in alt) for alt in self.alternatives]
        return " or ".join(f"({a})" if len(self.alternatives) > 1 else a for a in alts)


def _need(out: list, what: str, *alternatives, count: Dim | None = None) -> None:
    """Record an obligation unless one alternative is trivially true (equal expressions)."""
    alts = []
    for alt in alternatives:
        facts = tuple(f for f in alt if not (f[1] in ("==", "<=", ">=") and f[0] == f[2]))
        if not facts:
            return
        alts.append(facts)
    out.append(Obligation(what, tuple(alts), count))


def _impossible(out: list, what: str) -> None:
    out.append(Obligation(what, (((0, "==", 1),),)))


def _same_shape(out: list, x: Value, shape, what: str, count: Dim | None) -> None:
    if x.rank != len(shape):
        return _impossible(out, f"{what}: rank {x.rank} against rank {len(shape)}")
    for a, (xd, d) in enumerate(zip(x.shape, shape)):
        _need(out, f"{what}, axis {a}", ((xd, "==", d),), count=count)


def _rule_elementwise(op: Op, out: list) -> None:
    v = op.results[0]
    if op.name == "bitcast_convert" and bit_width(op.operands[0].dtype) != bit_width(v.dtype):
        return      # between widths: a kernel of its own (bitcast), not an index map
    for i, x in enumerate(op.operands):
        if x.rank:      # rank-0 operands are read at ()
            _same_shape(out, x, v.shape, f"operand {i} read at the result's index",
                        prod(v.shape))


def _rule_broadcast(op: Op, out: list) -> None:
    x, v = op.operands[0], op.results[0]
    dims = op.attrs["broadcast_dimensions"]
    if len(dims) != x.rank or any(not 0 <= d < v.rank for d in dims):
        return _impossible(out, f"broadcast_dimensions {dims} for rank {x.rank} -> {v.rank}")
    for j, d in enumerate(dims):
        xd, od = x.shape[j], v.shape[d]
        if xd == 1:
            continue    # read at 0
        # read at the result's index, or at 0 when the dim turns out to be 1 at run time
        _need(out, f"operand axis {j} broadcast to result axis {d}", ((xd, "==", od),),
              ((xd, ">=", od),), ((xd, "==", 1),), (((xd - 1) * (xd - od), "==", 0),),
              count=prod(v.shape))


def _rule_transpose(op: Op, out: list) -> None:
    x, v = op.operands[0], op.results[0]
    perm = op.attrs["permutation"]
    if sorted(perm) != list(range(x.rank)) or len(perm) != v.rank:
        return _impossible(out, f"permutation {perm} of rank {x.rank}")
    for k, p in enumerate(perm):
        _need(out, f"result axis {k} reads operand axis {p}", ((x.shape[p], "==", v.shape[k]),),
              count=prod(v.shape))


def _rule_reshape(op: Op, out: list) -> None:
    x, v = op.operands[0], op.results[0]
    _need(out, "element counts", ((x.num_elements(), "==", v.num_elements()),))


def _rule_slice(op: Op, out: list) -> None:
    x, v = op.operands[0], op.results[0]
    starts, limits, strides = (op.attrs[k] for k in ("start_indices", "limit_indices", "strides"))
    if not x.rank == v.rank == len(starts) == len(limits) == len(strides):
        return _impossible(out, "slice attributes of the wrong length")
    count = prod(v.shape)
    for a, (d, s, l, st, n) in enumerate(zip(x.shape, starts, limits, strides, v.shape)):
        _need(out, f"axis {a}: the start", ((s, ">=", 0),), count=count)
        # the last index read, start + stride*(size - 1), is below the dim: directly, or
        # because the size is ceil((limit - start) / stride) and limit <= dim
        _need(out, f"axis {a}: the last index read", ((s + st * (n - 1), "<=", d - 1),),
              ((n, "==", symbolic.floordiv(l - s + st - 1, st)), (st, ">=", 1), (l, "<=", d)),
              count=count)


def _rule_reverse(op: Op, out: list) -> None:
    x, v = op.operands[0], op.results[0]
    _same_shape(out, x, v.shape, "reversed operand", prod(v.shape))


def _rule_concatenate(op: Op, out: list) -> None:
    v, axis = op.results[0], op.attrs["dimension"]
    total: Dim = 0
    for i, x in enumerate(op.operands):
        if x.rank != v.rank:
            return _impossible(out, f"operand {i} has rank {x.rank}, the result {v.rank}")
        total = total + x.shape[axis]
        for a in range(v.rank):
            if a != axis:
                _need(out, f"operand {i} axis {a}", ((x.shape[a], "==", v.shape[a]),),
                      count=x.num_elements())
    _need(out, f"the operands' sizes along axis {axis} add up to the result's",
          ((total, "==", v.shape[axis]),))


def _rule_dynamic_slice(op: Op, out: list) -> None:
    x, v = op.operands[0], op.results[0]
    sizes = op.attrs["slice_sizes"]
    if not x.rank == v.rank == len(sizes) == len(op.operands) - 1:
        return _impossible(out, "dynamic_slice with mismatched ranks")
    count = prod(sizes)
    for a, (d, n, r) in enumerate(zip(x.shape, sizes, v.shape)):
        # starts are clamped to [0, dim - size]: in bounds when size <= dim
        _need(out, f"axis {a}: the slice size", ((n, "<=", d),), count=count)
        _need(out, f"axis {a}: the result size", ((r, "==", n),), count=count)


def _rule_dynamic_update_slice(op: Op, out: list) -> None:
    x, u, v = op.operands[0], op.operands[1], op.results[0]
    _same_shape(out, x, v.shape, "the operand read at the result's index", prod(v.shape))
    if u.rank != x.rank or len(op.operands) != 2 + x.rank:
        return _impossible(out, "dynamic_update_slice with mismatched ranks")
    for a, (d, n) in enumerate(zip(x.shape, u.shape)):   # reads of the update are guarded
        _need(out, f"axis {a}: the update fits the operand", ((n, "<=", d),),
              count=u.num_elements())


def _rule_gather(op: Op, out: list) -> None:
    x, indices, v = op.operands[0], op.operands[1], op.results[0]
    dn, sizes = op.attrs["dimension_numbers"], op.attrs["slice_sizes"]
    if len(sizes) != x.rank:
        return _impossible(out, "slice_sizes of the wrong length")
    count = prod(v.shape)
    for k, (d, n) in enumerate(zip(x.shape, sizes)):   # starts clamped to [0, dim - size]
        _need(out, f"operand axis {k}: the slice size", ((n, "<=", d),), count=count)
    skipped = set(dn["collapsed_slice_dims"]) | set(dn["operand_batching_dims"])
    window = [d for d in range(x.rank) if d not in skipped]
    offset_dims = list(dn["offset_dims"])
    if len(window) != len(offset_dims):
        return _impossible(out, "offset_dims do not match the window")
    for j, d in enumerate(window):
        _need(out, f"result axis {offset_dims[j]}: a window along operand axis {d}",
              ((v.shape[offset_dims[j]], "<=", sizes[d]),), count=count)
    ivd = dn["index_vector_dim"]
    index_dims = [d for d in range(indices.rank) if d != ivd]
    batch_out = [i for i in range(v.rank) if i not in offset_dims]
    if len(batch_out) != len(index_dims):
        return _impossible(out, "batch dims of the result and the indices differ in number")
    for i, dd in zip(batch_out, index_dims):
        _need(out, f"result axis {i} reads indices axis {dd}",
              ((v.shape[i], "<=", indices.shape[dd]),), count=count)
    if ivd < indices.rank:
        _need(out, "the index vector", ((len(dn["start_index_map"]), "<=", indices.shape[ivd]),),
              count=count)
    for od, idim in zip(dn["operand_batching_dims"], dn["start_indices_batching_dims"]):
        _need(out, f"operand batching axis {od}", ((indices.shape[idim], "<=", x.shape[od]),),
              count=count)


def _rule_reduce(op: Op, out: list) -> None:
    n = len(op.results)
    dims = set(op.attrs["dimensions"])
    for i, (x, r) in enumerate(zip(op.operands[:n], op.results)):
        kept = [d for a, d in enumerate(x.shape) if a not in dims]
        if len(kept) != r.rank:
            return _impossible(out, f"result {i} has rank {r.rank}, not {len(kept)}")
        for a, (d, rd) in enumerate(zip(kept, r.shape)):
            _need(out, f"result {i} axis {a}", ((d, "==", rd),), count=x.num_elements())
        if i:
            _same_shape(out, x, op.operands[0].shape, f"input {i} against input 0",
                        x.num_elements())


def _rule_scalar_operands(positions: slice) -> Callable:
    def rule(op: Op, out: list) -> None:
        for i, x in enumerate(op.operands[positions]):
            if x.rank:
                _impossible(out, f"operand {i} must be a scalar, has rank {x.rank}")
    return rule


_RULES: dict[str, Callable] = {
    "broadcast_in_dim": _rule_broadcast, "transpose": _rule_transpose,
    "reshape": _rule_reshape, "slice": _rule_slice, "reverse": _rule_reverse,
    "concatenate": _rule_concatenate, "dynamic_slice": _rule_dynamic_slice,
    "dynamic_update_slice": _rule_dynamic_update_slice, "gather": _rule_gather,
    "reduce": _rule_reduce, "pad": _rule_scalar_operands(slice(1, 2)),
}


def index_obligations(op: Op) -> list[Obligation]:
    """What `op`'s index map needs of the symbolic shapes (empty for ops without one)."""
    rule = _RULES.get(op.name) or (_rule_elementwise if op.name in SAME_INDEX else None)
    out: list[Obligation] = []
    if rule is not None and op.results:
        rule(op, out)
    return out
