"""Which values of a row-parallel kernel can be computed once per row.

A loop or stitch kernel iterates rows (its leading k output dims) and, inside each row, columns.
A value may be computed once per row, before the column loop, only if EVERY read of it inside
the kernel is at the same element for the whole row. Its shape does not say so: after
`x[:, None] - x[None, :]`, the operand `x[None, :]` has shape [1, N] and a value of shape [N, 1]
may be read along the columns through a transpose or a broadcast into another axis. So the
answer comes from the index maps: starting at the outputs (read at the row index and varying
columns), each op's semantics maps the index of its result to the indices its operands are read
at, and a value is per-row when all its reads are at `(i0, ..., i{k-1}, 0, ..., 0)` -- the index
the renderer evaluates it at (`Renderer.load` with `row_values`).

Index components are abstract: ("row", j) is the row index i_j, ZERO is the constant 0 and
ANY is anything else (a column index, arithmetic). Several reads of one value are joined
componentwise (different components become ANY), so the test "joined index == row index" holds
exactly when every read is at the row index. One pass over the kernel's ops, consumers first.
"""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.ops import SAME_INDEX
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import CompileError
from jdisc.lowering.loops import reshape_groups   # the renderer's own grouping

ZERO = "0"
ANY = None


def _norm(v: Value, idx: tuple) -> tuple:
    """A component along a dim of size 1 can only be 0 (every in-bounds read is)."""
    return tuple(ZERO if d == 1 else c for c, d in zip(idx, v.shape))


def _join(a: tuple | None, b: tuple) -> tuple:
    if a is None:
        return b
    return tuple(x if x == y else ANY for x, y in zip(a, b))


def _operand_indices(op: Op, idx: tuple, assume: frozenset) -> list[tuple]:
    """The abstract index each operand of `op` is read at when its result is read at idx."""
    name = op.name
    if name in SAME_INDEX:
        return [idx if x.rank else () for x in op.operands]
    if name == "broadcast_in_dim":
        x, v = op.operands[0], op.results[0]
        sub = []
        for j, d in enumerate(op.attrs["broadcast_dimensions"]):
            xd, od = x.shape[j], v.shape[d]
            if xd == 1:
                sub.append(ZERO)
            elif symbolic.prove_eq(xd, od) is True or (xd, od) in assume or idx[d] == ZERO:
                sub.append(idx[d])
            else:   # decided at run time (size 1 or not): unknown here
                sub.append(ANY)
        return [tuple(sub)]
    if name == "transpose":
        sub = [ANY] * len(idx)
        for k, p in enumerate(op.attrs["permutation"]):
            sub[p] = idx[k]
        return [tuple(sub)]
    if name == "reshape":
        return [_reshape_index(op.results[0], op.operands[0], idx)]
    if name == "slice":
        sub = tuple(c if s == 0 and (st == 1 or c == ZERO) else ANY
                    for c, s, st in zip(idx, op.attrs["start_indices"], op.attrs["strides"]))
        return [sub]
    if name == "reduce":   # stitch kernels: each row is reduced over its columns
        n = len(op.operands) // 2
        keep = [d for d in range(op.operands[0].rank) if d not in op.attrs["dimensions"]]
        sub = [ANY] * op.operands[0].rank
        for k, d in enumerate(keep):
            sub[d] = idx[k] if k < len(idx) else ANY
        return [tuple(sub)] * n + [()] * n
    # pad, reverse, dynamic_slice, gather, ...: reads at moved positions
    return [tuple(ANY for _ in range(x.rank)) for x in op.operands]


def _reshape_index(v: Value, x: Value, idx: tuple) -> tuple:
    sub = [ANY] * x.rank
    for out_dims, in_dims in reshape_groups(v.shape, x.shape):
        comps = [idx[i] for i in out_dims]
        if all(c == ZERO for c in comps):
            for j in in_dims:
                sub[j] = ZERO
            continue
        big_out = [i for i in out_dims if v.shape[i] != 1]
        big_in = [j for j in in_dims if x.shape[j] != 1]
        for j in in_dims:
            if x.shape[j] == 1:
                sub[j] = ZERO
        if len(big_out) == 1 and len(big_in) == 1 and all(
                idx[i] == ZERO for i in out_dims if i not in big_out):
            sub[big_in[0]] = idx[big_out[0]]
    return tuple(sub)


def row_values(kernel: Kernel, rows_dims, written: set[int],
               assume: frozenset = frozenset()) -> set[int]:
    """Ids of the values in `kernel` read only at the row index (i0..i{k-1}, 0, ...): safe to
    compute once per row. Values in `written` (outputs, written per element; a stitch kernel's
    reduce results, which are per-row accumulators) never count; a reduce result read at
    any other index than its row is a planning error (fusion's row-structure validation keeps
    such reads out of stitch kernels). `assume`: broadcast dim pairs this version of the
    kernel indexes as equal (the renderer's)."""
    k = len(rows_dims)
    reads = _reads(kernel, k, assume)
    # the row index as _norm writes it: a row dim of size 1 is always index 0
    row = tuple(ZERO if d == 1 else ("row", j) for j, d in enumerate(rows_dims))
    inside = {r.id for op in kernel.ops for r in op.results}
    at_row = {vid for vid, idx in reads.items()
              if vid in inside and len(idx) >= k and idx[:k] == row
              and all(c == ZERO for c in idx[k:])}
    for op in kernel.ops:
        if op.name == "reduce" and kernel.kind == "stitch" and any(
                r.id in reads and r.id not in at_row for r in op.results):
            raise CompileError(
                f"internal error: kernel {kernel.name} reads the row reduction "
                f"stablehlo.reduce at {op.loc} at another row than its own")
    return at_row - written


def _reads(kernel: Kernel, k: int, assume: frozenset) -> dict[int, tuple]:
    """Value id -> the join of the abstract indices the kernel reads it at."""
    reads: dict[int, tuple] = {}
    for out in kernel.outputs:
        idx = tuple(("row", j) if j < k else ANY for j in range(out.rank))
        reads[out.id] = _norm(out, idx)
    for op in reversed(kernel.ops):
        if not op.results or not op.operands:
            continue
        idx = reads.get(op.results[0].id)
        if idx is None:
            continue
        for x, sub in zip(op.operands, _operand_indices(op, idx, assume)):
            reads[x.id] = _join(reads.get(x.id), _norm(x, sub))
    return reads
