"""Fusion planning: which ops run together in one kernel, and which values live in memory.

A `Kernel` computes its `outputs` (materialised buffers) from its `inputs` (buffers); the ops in
`ops` are evaluated inside one loop nest, so a value computed inside a kernel never touches
memory. Kinds:

* `loop`   -- elementwise ops, broadcasts, reshapes, transposes, slices as index arithmetic
              (loop fusion); broadcasts are never materialised;
* `stitch` -- one or more reductions over the trailing ("column") dims with their producers and
              consumers in one kernel (input fusion + DISC's stitch fusion): each row is reduced
              and reused while it is in cache (softmax, LayerNorm, LN+GELU+residual+softmax);
* `reduce` -- a reduction over other dims with its producers fused in;
* `concat`, `dot` (a BLAS call), `alias` (a reshape of a buffer, or a bitcast_convert to another
  bit width: the same bytes, no code runs);
* `bitcast` -- a bitcast_convert between bit widths that is not an alias (its operand is computed
  in the kernel, or i1 bits are packed): the operand's bytes written as the result's;
* `rng` -- rng_bit_generator: counter-based random bits and the new state;
* `while`, `if`, `case` -- host control flow around the regions' own kernels (control_flow.py),
  and `update` -- a loop body's in-place dynamic_update_slice of a carried buffer.

The planner walks ops from the outputs back (consumers first) and absorbs a producer into its
consumers' kernel when every consumer is in that kernel and fusing does not recompute expensive
work; a reduction joins its consumers when the kernel keeps the row structure. Row structure is
validated afterwards; a reduction that breaks it is materialised and the plan is redone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.dtypes import bit_width
from jdisc.dynamic_passes.ir.ops import (EXPENSIVE, FREE_OPS, LOOP_OPS, MEMORY_OPERANDS,
                                         ROOT_KINDS, SAME_INDEX)
from jdisc.dynamic_passes.ir.program import Op, Program, Value


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What a dot kernel's GEMM does to its product before storing it (gemm_epilogue.py):
    adds `bias` (a vector along the product's last axis, or None) to every row, then, if
    `relu`, takes max(x, 0) (NaN kept, -0 to +0, as stablehlo.maximum)."""
    gemm: Op
    bias: Value | None
    relu: bool


@dataclasses.dataclass(eq=False)
class Kernel:
    name: str
    kind: str              # loop | stitch | reduce | dot | alias | while | rng | ...
    ops: list[Op]          # evaluated inside, in program order; the root op last
    outputs: list[Value]   # buffers written
    inputs: list[Value]    # buffers read
    row_rank: int = 0      # stitch: how many leading dims index rows
    versions: list[str] = dataclasses.field(default_factory=list)   # speculative versions
    # broadcast (operand dim, result dim) pairs that only the launcher's checks prove equal:
    # the planner fused on them, so the lowering must index with them equal too
    equal_dims: frozenset = frozenset()
    # value ids of an input and an output that may share memory (a donated input's buffer
    # given to the output: memory_plan.plan_donation); declared without `restrict`
    shared_buffers: frozenset = frozenset()
    # value ids of inputs whose arena slot the (single) output takes: the kernel reads them
    # through its output pointer (memory_plan.in_place_inputs)
    writes_over: frozenset = frozenset()
    # dot: the elementwise ops after the GEMM that its pieces apply as they finish (a bias
    # along the rows, a ReLU: gemm_epilogue.py); they follow the root in `ops`
    epilogue: "Epilogue | None" = None

    @property
    def root(self) -> Op:
        """The op the kernel is built around: the last of `ops`, or a dot kernel's GEMM when
        an epilogue follows it."""
        return self.epilogue.gemm if self.epilogue is not None else self.ops[-1]

    def describe(self) -> str:
        ops = ", ".join(f"{op.name}@{op.loc}" for op in self.ops if op.name != "constant")
        return f"{self.name} [{self.kind}] {ops}"


def is_splat(arr) -> bool:
    """Every element has the same bytes. A weight's first elements already differ: those are
    compared first, so asking about a 16 MB constant costs microseconds, not a full pass."""
    if arr.size <= 1:
        return True
    rows = arr.reshape(-1).view(np.uint8).reshape(arr.size, arr.itemsize)
    return bool((rows[:64] == rows[0]).all() and (rows == rows[0]).all())


def is_free(op: Op) -> bool:
    """Recomputed inside every consumer; never a kernel or a buffer of its own."""
    return op.name in FREE_OPS or (op.name == "constant" and is_splat(op.attrs["value"]))


def is_duplicable(op: Op) -> bool:
    """Pulled into every kernel that reads it: free ops and broadcasts (index arithmetic)."""
    return is_free(op) or op.name == "broadcast_in_dim"


def is_resizing_bitcast(op: Op) -> bool:
    """A bitcast_convert between bit widths: it adds or removes a trailing axis."""
    return op.name == "bitcast_convert" and (bit_width(op.operands[0].dtype)
                                             != bit_width(op.results[0].dtype))


def root_kind(op: Op) -> str | None:
    """The kernel kind of an op that is never fused into another op's kernel."""
    return "bitcast" if is_resizing_bitcast(op) else ROOT_KINDS.get(op.name)


def _numel(v: Value) -> symbolic.Dim:
    return v.num_elements()


# "these two dims are provably equal": the planner's prover, the program's constraint analysis
# where there is one (facts the launcher checks let more ops share a kernel)
Same = Callable[[symbolic.Dim, symbolic.Dim], bool]


def _all_same(same: Same, xs, ys) -> bool:
    return all(same(a, b) for a, b in zip(xs, ys))


def _row_reduce_rank(op: Op) -> int | None:
    """For a reduce over the trailing dims of its input: how many leading dims it keeps."""
    if op.name != "reduce" or len(op.results) != 1:
        return None
    dims = tuple(sorted(op.attrs["dimensions"]))
    x = op.operands[0]
    k = x.rank - len(dims)
    return k if dims == tuple(range(k, x.rank)) and len(dims) > 0 else None


class _Group:
    def __init__(self, root: Op):
        self.root = root
        self.ops: list[Op] = [root]
        self.expanded: dict[int, bool] = {id(root): False}
        self.row_rank: int | None = None
        if root.name == "reduce":
            self.full = root.operands[0].shape
            self.row_rank = _row_reduce_rank(root)
        else:
            self.full = root.results[0].shape if root.results else ()

    @property
    def kind(self) -> str:
        if _in_place(self.root):
            return "update"
        kind = root_kind(self.root)
        if kind is not None:
            return kind
        if any(op.name == "reduce" for op in self.ops):
            return "stitch" if self.row_rank is not None else "reduce"
        return "loop"

    def row_numel(self):
        if self.row_rank is None:
            return None
        n: symbolic.Dim = 1
        for d in self.full[:self.row_rank]:
            n = n * d
        return n


def _effective_users(v: Value, users: dict[int, list[Op]], materialised: set[int], same: Same,
                     expanding: bool = False) -> list[tuple[Op, bool]]:
    """Consumers of v, looking through the broadcasts that are recomputed in their consumers
    (not those written to memory: such a broadcast is a kernel reading v); each with whether
    the path expands v."""
    out = []
    for u in users.get(v.id, []):
        if u.name == "broadcast_in_dim" and u.results[0].id not in materialised:
            grows = not same(_numel(u.results[0]), _numel(v))
            out += _effective_users(u.results[0], users, materialised, same, expanding or grows)
        else:
            out.append((u, expanding))
    return out


def _assign(prog: Program, forced: set[int], same: Same) -> list[_Group]:
    users: dict[int, list[Op]] = {}
    for op in prog.body.ops:
        for v in op.operands:
            users.setdefault(v.id, []).append(op)
    # values that must be in memory: results, and what library calls / sorts / control ops
    # read (a free value there, e.g. the zeros a scatter adds into, is materialised)
    results = {v.id for v in prog.body.results} | {
        v.id for op in prog.body.ops if op.name in MEMORY_OPERANDS or _in_place(op)
        for v in op.operands}
    group_of: dict[int, _Group] = {}
    groups: list[_Group] = []
    for op in reversed(prog.body.ops):
        if not op.results or op.name == "constant" and not (
                is_splat(op.attrs["value"]) and op.results[0].id in results):
            continue   # constants have static buffers; a splat one read from memory gets a kernel
        v = op.results[0]
        if is_duplicable(op) and v.id not in results:
            continue
        target = None
        if len(op.results) == 1 and v.id not in results and id(op) not in forced:
            eff = _effective_users(v, users, results, same)
            ugroups = {id(group_of[id(u)]): group_of[id(u)] for u, _ in eff if id(u) in group_of}
            if len(ugroups) == 1 and all(id(u) in group_of for u, _ in eff):
                g = next(iter(ugroups.values()))
                if _can_absorb(g, op, eff, same):
                    target = g
        if target is None:
            target = _Group(op)
            groups.append(target)
        else:
            target.ops.append(op)
            if op.name == "reduce":
                target.row_rank = _row_reduce_rank(op)
        group_of[id(op)] = target
    for g in groups:
        g.ops.reverse()   # program order, root last
    return groups[::-1]


def _in_place(op: Op) -> bool:
    """A dynamic_update_slice of a loop-carried buffer, written in place (control_flow.py)."""
    return op.name == "dynamic_update_slice" and bool(op.attrs.get("in_place"))


def _can_absorb(g: _Group, op: Op, eff_users: list[tuple[Op, bool]], same: Same) -> bool:
    if g.root.name in MEMORY_OPERANDS or any(u.name in MEMORY_OPERANDS for u, _ in eff_users):
        return False   # library calls and sorts read their operands from memory
    if _in_place(g.root) or any(_in_place(u) for u, _ in eff_users) or _in_place(op):
        return False   # an in-place update copies a buffer into the carried one
    if root_kind(op) is not None:
        return False
    v = op.results[0]
    if op.name == "reduce":
        k = _row_reduce_rank(op)
        if k is None or root_kind(g.root) is not None:
            return False   # only loop/stitch kernels render a reduction of their producers
        if g.root.name == "reduce" and _row_reduce_rank(g.root) != k:
            return False   # a reduce over other dims (a leading one) cannot stitch it
        if g.row_rank is not None and g.row_rank != k:
            return False
        x = op.operands[0]
        if x.rank != len(g.full) or not _all_same(same, x.shape, g.full):
            return False
        g.expanded[id(op)] = False
        return True
    if op.name not in LOOP_OPS:
        return False
    if op.name == "transpose" and g.root.name == "reduce_window" and \
            op.attrs["permutation"][-1] != v.rank - 1:
        # a window kernel's lanes run along the last dim; through this transpose each lane
        # would be a strided read, once per window position (an NCHW pool over channels-last,
        # as equinox's): the transposed value is written once instead, by a tiled loop kernel
        return False
    expanded = any(g.expanded.get(id(u), True) or grows or not _reads_whole(u, v, same)
                   for u, grows in eff_users)
    j = _row_prefix(v, g.full, same)
    row_level = j is not None and (g.row_rank == j or g.row_rank is None
                                   and g.root.name != "reduce")
    if expanded and op.name in EXPENSIVE and not row_level:
        return False
    if expanded and op.name in EXPENSIVE and g.row_rank is None and g.root.name != "reduce":
        g.row_rank = j     # a per-row value (e.g. 1/sqrt(var)): rows are the leading j dims
    g.expanded[id(op)] = expanded and not row_level
    return True


def _row_prefix(v: Value, full, same: Same) -> int | None:
    """j when v's shape is full[:j] followed by 1s (one value per row of the leading j dims)."""
    j = v.rank
    while j > 0 and v.shape[j - 1] == 1:
        j -= 1
    if j == 0 or j >= len(full) or not _all_same(same, v.shape[:j], full):
        return None
    return j


def _reads_whole(user: Op, v: Value, same: Same) -> bool:
    """The user reads each element of v about once (no broadcast expansion)."""
    if user.name == "reduce":
        return True
    return same(_numel(user.results[0]), _numel(v))


def _validate(g: _Group, order: dict[int, int], same: Same) -> set[int]:
    """Reduces of a stitch group that break its row structure (empty when valid)."""
    if g.kind != "stitch":
        return set()
    ops = sorted(_free_producers(g.ops) + g.ops, key=lambda o: order[id(o)])
    k, full = g.row_rank, g.full
    row_n = g.row_numel()
    inside = {r.id: op for op in ops for r in op.results}
    deps: dict[int, set[int]] = {}   # value id -> in-group reduces it depends on
    bad: set[int] = set()
    for op in ops:
        dep = set()
        for x in op.operands:
            dep |= deps.get(x.id, set())
        if op.name == "reduce":
            deps[op.results[0].id] = dep | {id(op)}
            if not _all_same(same, op.operands[0].shape, full):
                bad |= deps[op.results[0].id]
            continue
        r = op.results[0]
        deps[r.id] = dep
        if not dep:
            continue
        is_full = r.rank == len(full) and _all_same(same, r.shape, full)
        is_row = same(_numel(r), row_n)
        ok = is_full or is_row
        if op.name == "broadcast_in_dim" and ok:
            x = op.operands[0]
            if x.id in inside and deps.get(x.id):
                dims = op.attrs["broadcast_dimensions"]
                ok = same(_numel(x), row_n) and tuple(dims[:k]) == tuple(range(k)) and all(
                    x.shape[j] == 1 for j in range(k, x.rank))
        elif op.name == "reshape" and not is_row:
            ok = False
        elif op.name not in SAME_INDEX | {"broadcast_in_dim", "reshape"}:
            ok = False   # index-moving ops must not read per-row results across rows
        if not ok:
            bad |= dep
    return bad


def plan_kernels(prog: Program) -> Program:
    """Pass: group ops into kernels (`prog.kernels`) and decide what is materialised, with the
    program's constraint analysis as the prover of equal dims."""
    constraints = prog.constraints
    prove_eq = constraints.prove_eq if constraints is not None else symbolic.prove_eq
    prog.kernels = plan_groups(prog, prove_eq)
    return prog


def plan_groups(prog: Program, prove_eq: Callable) -> list[Kernel]:
    """The kernels of `prog`; `prove_eq(a, b)` is True when dims a and b are provably equal."""
    def same(a, b) -> bool:
        return prove_eq(a, b) is True

    constraints = prog.constraints
    forced: set[int] = set()
    order = {id(op): i for i, op in enumerate(prog.body.ops)}
    while True:
        groups = _assign(prog, forced, same)
        bad = set().union(*(_validate(g, order, same) for g in groups)) if groups else set()
        if not bad:
            break
        forced |= bad
    clusters = _merge_siblings(groups, order, same)
    kernels: list[Kernel] = []
    written = {m.root.results[0].id for c in clusters for m in c if m.root.results}
    for cluster in clusters:
        g = cluster[-1]
        kind = g.kind
        group_ops = [op for member in cluster for op in member.ops]
        ops = sorted(_free_producers(group_ops, written) + group_ops,
                     key=lambda o: order[id(o)])
        if kind in ("loop", "bitcast") and _is_alias(g):
            kind = "alias"   # same bytes, new shape (or new dtype): no kernel runs
        name = f"jd_k{len(kernels)}_{'_'.join(_name_parts(group_ops))}"
        outputs = [member.root.results[0] for member in cluster] if len(cluster) > 1 \
            else list(g.root.results)
        kernels.append(Kernel(name, kind, ops, outputs, inputs_of(ops), g.row_rank or 0,
                              equal_dims=_checked_equal_dims(ops, constraints)))
    return kernels


def _checked_equal_dims(ops: list[Op], constraints) -> frozenset:
    """The broadcast dim pairs of `ops` that the program's checks (not the algebra) prove
    equal, e.g. `2*a - 2` and `a + max(a - 1, 0) - 1` under the check `a + max(a-1, 0) >= 1`."""
    if constraints is None:
        return frozenset()
    pairs = set()
    for op in ops:
        if op.name != "broadcast_in_dim":
            continue
        x, v = op.operands[0], op.results[0]
        for j, d in enumerate(op.attrs["broadcast_dimensions"]):
            xd, od = x.shape[j], v.shape[d]
            if xd != 1 and symbolic.prove_eq(xd, od) is not True and \
                    constraints.prove_eq(xd, od) is True:
                pairs.add((xd, od))
    return frozenset(pairs)


def _is_alias(g: _Group) -> bool:
    root = g.root
    same_bytes = root.name == "reshape" or is_resizing_bitcast(root) and "i1" not in (
        root.operands[0].dtype, root.results[0].dtype)
    return same_bytes and len(g.ops) == 1 and not _free_value(root.operands[0])


def _merge_siblings(groups: list[_Group], order: dict[int, int], same: Same
                    ) -> list[list[_Group]]:
    """Multi-output fusion: loop kernels over the same shape that read a common buffer and do
    not depend on each other become one kernel writing several outputs (each input is read
    once per element instead of once per kernel)."""
    clusters: list[list[_Group]] = []
    readers: list[set[int]] = []          # per cluster: ids of buffers its kernels read
    writes: list[set[int]] = []           # per cluster: ids of the buffers it writes

    written = {r.id for g in groups for r in g.root.results}

    def reads(g: _Group) -> set[int]:
        # what the kernel will read from memory: its ops' operands and, through the
        # broadcasts and other duplicable ops it recomputes, their operands too
        return {v.id for v in inputs_of(_free_producers(g.ops, written) + g.ops)}

    for g in groups:
        mine = reads(g)
        target = None
        if g.kind == "loop" and not _is_alias(g) and len(g.root.results) == 1:
            out = g.root.results[0]
            later_writes: set[int] = set()   # written by the clusters after ci
            for ci in range(len(clusters) - 1, -1, -1):
                c = clusters[ci]
                head = c[-1]
                if mine & (later_writes | writes[ci]):
                    break   # g reads a buffer written at or after ci: it cannot run at ci
                later_writes |= writes[ci]
                if head.kind == "loop" and not _is_alias(head) and \
                        (head.row_rank or 0) == (g.row_rank or 0) and readers[ci] & mine and \
                        head.root.results[0].rank == out.rank and \
                        _all_same(same, head.root.results[0].shape, out.shape):
                    target = ci
                    break
        produced = {r.id for r in g.root.results}
        if target is None:
            clusters.append([g])
            readers.append(mine)
            writes.append(produced)
        else:
            clusters[target].append(g)
            readers[target] |= mine
            writes[target] |= produced
    return clusters


def _free_value(v: Value) -> bool:
    return v.producer is not None and is_duplicable(v.producer)


def _name_parts(ops: list[Op]) -> list[str]:
    parts: list[str] = []
    for op in ops:
        if op.name in ("broadcast_in_dim", "reshape", "convert", "constant") and len(ops) > 1:
            continue
        if op.name not in parts:
            parts.append(op.name)
    return parts[:4] or [ops[-1].name]


def _free_producers(ops: list[Op], written: set[int] = frozenset()) -> list[Op]:
    """Duplicable ops (splat constants, iota, dim values, broadcasts) the group reads,
    transitively, in program order; not those another kernel writes to memory."""
    inside = {id(op) for op in ops}
    seen: dict[int, Op] = {}

    def visit(v: Value):
        p = v.producer
        if p is None or id(p) in inside or id(p) in seen or not is_duplicable(p) \
                or v.id in written:
            return
        for x in p.operands:
            visit(x)
        seen[id(p)] = p

    for op in ops:
        for v in op.operands:
            visit(v)
    return list(seen.values())


def inputs_of(ops: list[Op]) -> list[Value]:
    """The values the ops read that none of them makes (a kernel's inputs), in order."""
    inside = {r.id for op in ops for r in op.results}
    out: dict[int, Value] = {}
    for op in ops:
        for v in op.operands:
            if v.id not in inside:
                out.setdefault(v.id, v)
    return list(out.values())
