"""Memory plan: one arena per call, with intermediate buffers packed into reusable slots.

Intermediates are the outputs of non-alias kernels that are not program results (results go
straight into the caller's output buffers). An alias kernel (a reshape) has no buffer of its own:
reading it reads its root, found by following `kernel.root.operands[0]` through alias kernels.
Params and non-splat constants live outside the arena.

Liveness, in kernel indices: a buffer is live from the kernel that writes it to the last kernel
that reads it, directly or through an alias (a result that aliases an intermediate keeps its root
live to the end: the launcher copies it out after the last kernel). Intervals are closed, so a
kernel's inputs and outputs share a slot only in place (below).

In place: a single-output loop kernel whose input X dies at it, has its output's dtype and shape
and is read only at the index of the element the kernel writes (through elementwise ops: the
test donation uses) writes its output over X (`in_place_inputs`, `Kernel.writes_over`). Its C
reads X through the output pointer, so every pointer stays `restrict` and GCC sees each element
read before it is written. A bias and GELU after a GEMM then write the lines the GEMM just left
in the cache instead of fresh ones (CHANGELOG.md; a bias and ReLU are the GEMM's epilogue:
gemm_epilogue.py).

Greedy reuse, in execution order: a new buffer takes its in-place input's slot, else a free slot
(all of whose buffers died before this kernel) that it provably fits in, the smallest such (ties:
lowest index); otherwise it opens a slot. A slot's size is that of its first buffer and never
changes.

Sizes are `64 * floordiv(bytes + 63, 64)`. The rounding folds to an exact polynomial when every
coefficient of `bytes` is a multiple of 64 (`3072*B*S`), but otherwise leaves a floordiv atom
that interval bounds cannot compare with another one. Rounding up to 64 is monotone, so a fit is
also accepted when the unrounded byte counts prove it: raw_slot >= raw_buf implies
round(raw_slot) >= round(raw_buf). No fit is ever decided by `==` on expressions.
"""

from __future__ import annotations

from dataclasses import dataclass

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.dynamic_passes.ir.ops import SAME_INDEX
from jdisc.dynamic_passes.ir.program import Program, Value
from jdisc.dynamic_passes.passes.fusion import Kernel

ALIGN = 64


@dataclass(frozen=True)
class Slot:
    """One region of the per-call arena."""
    index: int
    size: Dim                      # bytes, a multiple of ALIGN
    offset: Dim                    # bytes from the arena start: sum of earlier slots' sizes
    raw: Dim = 0                   # unrounded bytes of its first buffer: size == round_up(raw)
    buffers: tuple[str, ...] = ()  # who uses it, by kernel name (for describe and dumps)

    def fits(self, v: Value) -> bool:
        """v provably fits: by rounded sizes, or by raw sizes (rounding up is monotone)."""
        return _fits(self.size, self.raw, buffer_bytes(v), raw_bytes(v))


@dataclass(frozen=True)
class MemoryPlan:
    slots: tuple[Slot, ...]
    assignment: dict[int, int]      # root buffer value id -> slot index, every intermediate
    arena_bytes: Dim                # sum of slot sizes
    # value id -> (index of the writing kernel, index of the last reader); len(kernels) = end
    live: dict[int, tuple[int, int]]

    def describe(self) -> list[str]:
        lines = [f"slot {s.index}: size {s.size}, offset {s.offset}: {', '.join(s.buffers)}"
                 for s in self.slots]
        lines.append(f"arena: {self.arena_bytes} bytes in {len(self.slots)} slots for "
                     f"{len(self.assignment)} buffers")
        return lines


def raw_bytes(v: Value) -> Dim:
    return v.num_elements() * numpy_dtype(v.dtype).itemsize


def round_up(n: Dim) -> Dim:
    return symbolic.floordiv(n + (ALIGN - 1), ALIGN) * ALIGN


def buffer_bytes(v: Value) -> Dim:
    """Bytes the arena reserves for v: its size rounded up to a multiple of ALIGN."""
    return round_up(raw_bytes(v))


def alias_roots(prog: Program) -> dict[int, Value]:
    """Alias output id -> the value whose buffer it shares (aliases of aliases followed)."""
    parent = {k.outputs[0].id: k.root.operands[0] for k in prog.kernels if k.kind == "alias"}
    roots: dict[int, Value] = {}
    for vid, v in parent.items():
        while v.id in parent:
            v = parent[v.id]
        roots[vid] = v
    return roots


def live_ranges(prog: Program) -> tuple[list[tuple[Value, str]], dict[int, tuple[int, int]]]:
    """Intermediate buffers in definition order (with a name each) and their live ranges."""
    results = {v.id for v in prog.body.results}
    roots = alias_roots(prog)
    buffers: list[tuple[Value, str]] = []
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for idx, k in enumerate(prog.kernels):
        if k.kind == "alias":
            continue   # no memory is touched: the readers of the alias count, below
        for v in k.inputs:
            root = roots.get(v.id, v)
            if root.id in first:
                last[root.id] = idx
        for j, v in enumerate(k.outputs):
            if v.id not in results and v.id not in first:
                name = k.name if len(k.outputs) == 1 else f"{k.name}.{j}"
                buffers.append((v, name))
                first[v.id] = last[v.id] = idx
    end = len(prog.kernels)
    for v in prog.body.results:
        root = roots.get(v.id, v)
        if root.id in first:
            last[root.id] = end
    return buffers, {vid: (first[vid], last[vid]) for vid in first}


@dataclass
class _OpenSlot:
    size: Dim
    raw: Dim           # unrounded bytes of the first buffer (for monotone fit proofs)
    free_after: int    # the largest last-use index of its buffers
    names: list[str]


def _fits(slot_size: Dim, slot_raw: Dim, size: Dim, raw: Dim) -> bool:
    return (symbolic.prove_ge(slot_size, size) is True
            or symbolic.prove_ge(slot_raw, raw) is True)


def _tighter(a: _OpenSlot, b: _OpenSlot) -> bool:
    """a is provably no bigger than b and not provably the same size."""
    return (_fits(b.size, b.raw, a.size, a.raw)
            and symbolic.prove_eq(a.size, b.size) is not True)


def in_place_inputs(prog: Program, live: dict[int, tuple[int, int]]
                    ) -> dict[int, tuple[Value, Kernel]]:
    """Output id -> (the input buffer its kernel may write it over, that kernel): the kernel is a
    single-output loop kernel, the input an intermediate (a slot of the arena) that the kernel
    reads directly (not also through a view) and last, with the output's dtype and shape, read
    only at the index of the element written (`reads_only_in_place`). Each element is then read
    before it is overwritten, whatever the order of threads and lanes."""
    prove_eq = prog.constraints.prove_eq if prog.constraints is not None else symbolic.prove_eq
    roots = alias_roots(prog)
    pairs: dict[int, tuple[Value, Kernel]] = {}
    for idx, k in enumerate(prog.kernels):
        if k.kind != "loop" or len(k.outputs) != 1 or k.outputs[0].id not in live:
            continue
        v = k.outputs[0]
        dying = [x for x in k.inputs if x.id != v.id and x.id in live and live[x.id][1] == idx
                 and x.dtype == v.dtype and x.rank == v.rank]
        if not dying:
            continue
        viewed = {roots[y.id].id for y in k.inputs if y.id in roots}   # read through a view
        elementwise = in_place_reads(k, prove_eq)       # one walk per kernel: linear overall
        for x in dying:
            if x.id not in viewed and x.id in elementwise and \
                    all(prove_eq(a, b) is True for a, b in zip(x.shape, v.shape)):
                pairs[v.id] = (x, k)
                break
    return pairs


def plan_memory(prog: Program) -> Program:
    """Pass: assign every intermediate buffer a slot of one arena (`prog.memory`)."""
    buffers, live = live_ranges(prog)
    in_place = in_place_inputs(prog, live)
    slots: list[_OpenSlot] = []
    assignment: dict[int, int] = {}
    for v, name in buffers:
        start, stop = live[v.id]
        raw = raw_bytes(v)
        size = round_up(raw)
        best = None
        x, k = in_place.get(v.id, (None, None))
        if x is not None and _fits(slots[assignment[x.id]].size, slots[assignment[x.id]].raw,
                                   size, raw):
            best = assignment[x.id]         # x's slot: x dies at k, the kernel writing v
            name += " (in place)"
            k.writes_over = k.writes_over | {x.id}
        else:
            for i, slot in enumerate(slots):
                if slot.free_after < start and _fits(slot.size, slot.raw, size, raw):
                    if best is None or _tighter(slot, slots[best]):
                        best = i
        if best is None:
            best = len(slots)
            slots.append(_OpenSlot(size, raw, stop, []))
        slot = slots[best]
        slot.free_after = max(slot.free_after, stop)
        slot.names.append(name)
        assignment[v.id] = best
    frozen: list[Slot] = []
    offset: Dim = 0
    for i, s in enumerate(slots):
        frozen.append(Slot(i, s.size, offset, s.raw, tuple(s.names)))
        offset = offset + s.size
    plan = MemoryPlan(tuple(frozen), assignment, offset, live)
    prog.memory = plan
    return prog


# ---- donation ---------------------------------------------------------------------------------



def plan_donation(prog: Program) -> Program:
    """Pass: which donated inputs give their buffer to a result (`prog.donation`, pairs of
    param position and result position; `prog.donated` lists the donated params).

    A donated input P gives its buffer to a result R when R has P's dtype and shape and:
    * R is written by one single-output loop kernel K that reads P only at the element it
      writes (through elementwise ops on operands of R's shape): every element of P is read
      before R overwrites it, whatever the order of threads and lanes;
    * no kernel after K reads P or a view of it, and no result is P or a view of it (the
      launcher copies those at the end).
    K's C then declares the two pointers without `restrict`. A donated input that gives its
    buffer to nothing is left alone: the call allocates R as usual."""
    prog.donation = ()
    if not prog.donated:
        return prog
    constraints = prog.constraints
    prove_eq = constraints.prove_eq if constraints is not None else symbolic.prove_eq
    roots = alias_roots(prog)
    results = prog.body.results
    result_roots = {roots.get(v.id, v).id for v in results}
    first_result = {}
    for j, v in enumerate(results):
        first_result.setdefault(v.id, j)
    writer = {v.id: (idx, k) for idx, k in enumerate(prog.kernels) if k.kind != "alias"
              for v in k.outputs}
    last_read: dict[int, int] = {}
    for idx, k in enumerate(prog.kernels):
        if k.kind != "alias":
            for v in k.inputs:
                last_read[roots.get(v.id, v).id] = idx
    taken: set[int] = set()
    pairs = []
    for pos in sorted(prog.donated):
        p = prog.body.params[pos]
        if p.id in result_roots:
            continue
        for v in results:
            j = first_result[v.id]
            if j in taken or v.id not in writer or v.dtype != p.dtype or v.rank != p.rank \
                    or not all(prove_eq(a, b) is True for a, b in zip(v.shape, p.shape)):
                continue
            idx, k = writer[v.id]
            if k.kind != "loop" or len(k.outputs) != 1 or last_read.get(p.id, -1) > idx \
                    or any(roots.get(x.id, x).id == p.id and x.id != p.id for x in k.inputs) \
                    or not reads_only_in_place(k, p, prove_eq):
                continue
            taken.add(j)
            pairs.append((pos, j))
            k.shared_buffers = k.shared_buffers | {p.id, v.id}
            break
    prog.donation = tuple(pairs)
    return prog


def reads_only_in_place(k, p: Value, prove_eq) -> bool:
    """Every read of p inside kernel k is at the index of the element k writes: the paths from
    k's output to p pass only elementwise ops whose operands have their result's shape."""
    return p.id in in_place_reads(k, prove_eq)


def in_place_reads(k, prove_eq) -> set[int]:
    """The ids of the values kernel k reads only at the index of the element it writes
    (`reads_only_in_place`), all of them in one walk over its ops."""
    out = k.outputs[0]
    in_place = {out.id: True}
    for op in reversed(k.ops):
        res = op.results[0] if op.results else None
        if res is None or res.id not in in_place:
            continue
        same = in_place[res.id] and op.name in SAME_INDEX
        for x in op.operands:
            here = same and x.rank == res.rank and all(
                prove_eq(a, b) is True for a, b in zip(x.shape, res.shape))
            in_place[x.id] = in_place.get(x.id, True) and here
    return {vid for vid, ok in in_place.items() if ok}
