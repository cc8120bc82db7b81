"""Control flow (DyCL): `while`, `if` and `case` become host C around compiled sub-programs.

StableHLO regions may read any value of the enclosing program. Two passes turn each region into
a `Program` of its own, which then goes through the same passes as the top level (fusion and the
memory plan run inside loop bodies), and whose C function the launcher calls per iteration:

* `forward_loop_invariants` (before shape propagation): a loop-carried value that the body
  returns unchanged is the loop's operand in every iteration, so its uses read the operand
  directly (jax's `scan` and `fori_loop` carry their constants, their inputs and their trip
  count that way). Its shape computations then stay known to the propagation.
* `outline_regions` (after dead code elimination): every value a region reads from outside
  becomes a parameter of the region ("capture") and an operand of the control op; free values
  (constants, iota, dimension values, broadcasts of them) are cloned into the region instead.
  A `while` body that updates a carried buffer through a `dynamic_update_slice` (jax's `scan`
  stacking its outputs), a scatter or an inner loop is marked to update it in place
  (`confirm_in_place` checks the last two once the body is planned).

The control op keeps its regions; `op.programs` holds one Program per region, whose inputs are
the region's parameters (carried values first, then captures) and whose outputs its results.
"""

from __future__ import annotations

import itertools

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.dynamic_passes.ir.ops import CONTROL_OPS
from jdisc.dynamic_passes.ir.program import ArgSpec, Block, Op, Program, Value, walk
from jdisc.dynamic_passes.passes.fusion import is_duplicable
from jdisc.dynamic_passes.passes.memory_plan import alias_roots

ALIGN = 64


def replace_uses(block: Block, old: Value, new: Value) -> None:
    """Every read of `old` in the block (nested regions included) reads `new` instead."""
    for op in walk(block):
        op.operands = [new if v is old else v for v in op.operands]
    _replace_results(block, old, new)


def _replace_results(block: Block, old: Value, new: Value) -> None:
    block.results = [new if v is old else v for v in block.results]
    for op in block.ops:
        for region in op.regions:
            _replace_results(region, old, new)


# --------------------------------------------------------------------------- loop invariants

def forward_loop_invariants(prog: Program) -> Program:
    """Pass: carried values a `while` body returns unchanged are read from the operand."""
    _forward_block(prog.body)
    return prog


def _forward_block(block: Block) -> None:
    for op in block.ops:
        for region in op.regions:
            _forward_block(region)
        if op.name != "while":
            continue
        cond, body = op.regions
        keep = []
        for i, init in enumerate(op.operands):
            if body.results[i] is body.params[i]:
                replace_uses(cond, cond.params[i], init)
                replace_uses(body, body.params[i], init)
                replace_uses(block, op.results[i], init)
            else:
                keep.append(i)
        if len(keep) == len(op.operands):
            continue
        op.operands = [op.operands[i] for i in keep]
        op.results = [op.results[i] for i in keep]
        for region in (cond, body):
            region.params = [region.params[i] for i in keep]
        body.results = [body.results[i] for i in keep]


# --------------------------------------------------------------------------- outlining

def outline_regions(prog: Program) -> Program:
    """Pass: each control op's regions become Programs with explicit captures."""
    counter = itertools.count()
    _outline_block(prog.body, counter)
    return prog


def _outline_block(block: Block, counter) -> None:
    new_ops: list[Op] = []
    for op in block.ops:
        if op.name in CONTROL_OPS:
            for region in op.regions:
                _outline_block(region, counter)     # innermost first: captures bubble up
            _outline_op(op, next(counter))
            op.operands = [_materialized(v, new_ops) for v in op.operands]
        new_ops.append(op)
    block.ops = new_ops


def _outline_op(op: Op, n: int) -> None:
    captures: list[Value] = []
    for region in op.regions:
        for v in _free_values(region):
            if v not in captures and not _clonable(v):
                captures.append(v)
    roles = {"while": ("cond", "body")}.get(op.name) or [f"branch{i}"
                                                         for i in range(len(op.regions))]
    programs = []
    for role, region in zip(roles, op.regions):
        env: dict[int, Value] = {}
        cloned: list[Op] = []
        params = []
        for v in captures:
            p = Value(v.dtype, v.shape, sym=v.sym)
            env[v.id] = p
            params.append(p)
        for v in _free_values(region):
            _localize(v, env, cloned)
        for v in _free_values(region):
            replace_uses(region, v, env[v.id])
        region.ops = cloned + region.ops
        region.results = [_materialized(v, region.ops) for v in region.results]
        region.params = region.params + params
        name = f"r{n}_{role}"
        programs.append(Program(
            name, region,
            [ArgSpec(f"{name}.in{i}", p.dtype, p.shape) for i, p in enumerate(region.params)],
            [ArgSpec(f"{name}.out{i}", v.dtype, v.shape) for i, v in enumerate(region.results)],
            checks=list(region.checks)))
    op.operands = op.operands + captures
    op.programs = programs
    if op.name == "while":
        _mark_in_place(op)


def _free_values(block: Block) -> list[Value]:
    """Values the block reads but does not define, in order of first use."""
    defined = {v.id for v in block.params}
    for op in walk(block):
        defined.update(r.id for r in op.results)
        for region in op.regions:
            defined.update(p.id for p in region.params)
    free: dict[int, Value] = {}
    for op in walk(block):
        for v in op.operands:
            if v.id not in defined:
                free.setdefault(v.id, v)
    for v in block.results:
        if v.id not in defined:
            free.setdefault(v.id, v)
    return list(free.values())


def _clonable(v: Value) -> bool:
    """Produced by an op that costs nothing to recompute: cloned into the region."""
    p = v.producer
    return p is not None and is_duplicable(p) and all(
        _clonable(x) for x in p.operands)


def _localize(v: Value, env: dict[int, Value], cloned: list[Op]) -> Value:
    if v.id in env:
        return env[v.id]
    p = v.producer
    operands = [_localize(x, env, cloned) for x in p.operands]
    results = [Value(r.dtype, r.shape, sym=r.sym) for r in p.results]
    clone = Op(p.name, operands, results, dict(p.attrs), p.loc)
    cloned.append(clone)
    for r, c in zip(p.results, results):
        env[r.id] = c
    return env[v.id]


def _materialized(v: Value, ops: list[Op]) -> Value:
    """v itself when it lives in a buffer; else a copy that does (control ops read memory)."""
    if v.producer is None or not is_duplicable(v.producer):
        return v
    copy = Value(v.dtype, v.shape, sym=v.sym)
    ops.append(Op("convert", [v], [copy], {}, v.producer.loc))
    return copy


def _mark_in_place(op: Op) -> None:
    """Carried buffers the body changes in place, writing its result for them into the
    carried buffer itself (the loop keeps one buffer for them, not two):
    * through one dynamic_update_slice of themselves, their only use (jax's `scan` stacking its
      outputs): the update is copied into the buffer;
    * through one scatter of themselves (nodes of a tree updated at chosen indices), or as the
      initial value of an inner `while` that carries them (a loop in a loop): the scatter
      skips its copy of the operand, and the inner loop starts on the buffer. Other reads of
      the buffer are allowed when they come first: `confirm_in_place` checks that once the
      body's kernels are planned, and withdraws what it cannot show."""
    body = op.programs[1].body
    uses: dict[int, int] = {}       # reads of each value in the body, one walk for all
    for u in walk(body):
        for v in u.operands:
            uses[v.id] = uses.get(v.id, 0) + 1
    returned: dict[int, int] = {}
    for v in body.results:
        returned[v.id] = returned.get(v.id, 0) + 1
    in_place = []
    for i, p in enumerate(body.params[:len(op.results)]):
        r = body.results[i]
        prod = r.producer
        if prod is None or p.id in returned or returned[r.id] != 1:
            continue
        if prod.name == "dynamic_update_slice" and prod.operands[0] is p and uses.get(p.id) == 1:
            new_ops: list[Op] = []
            prod.operands = [p] + [_materialized(v, new_ops) for v in prod.operands[1:]]
            at = body.ops.index(prod)
            body.ops[at:at] = new_ops
            prod.attrs["in_place"] = True
            in_place.append(i)
        elif (prod.name == "scatter" and prod.operands[0] is p
              or prod.name == "while" and _carried_init(prod, r) is p):
            in_place.append(i)       # a candidate until confirm_in_place
    op.attrs["in_place"] = tuple(in_place)


def _carried_init(loop: Op, r: Value) -> Value | None:
    """The initial value of the loop's carried value whose result is r."""
    j = next((j for j, v in enumerate(loop.results) if v is r), None)
    return loop.operands[j] if j is not None and j < len(loop.operands) else None


def confirm_in_place(op: Op) -> None:
    """For a `while` whose body is planned: keep a scatter or inner-loop candidate of
    `_mark_in_place` only when its kernel may write into the carried buffer P: no kernel after
    it reads P or a view of P, it reads P once and only as what it updates (the scatter's
    operand, the inner loop's initial value), and no result of the body is a view of P.
    Candidates withdrawn get their two buffers back."""
    body = op.programs[1]
    roots = alias_roots(body)
    # one pass over the kernels: where each buffer is last read, and whether a kernel reads
    # it through a view; which kernel computes each op
    last_read: dict[int, int] = {}
    viewed: set[tuple[int, int]] = set()        # (kernel index, root id) read through a view
    kernel_of: dict[int, int] = {}
    for idx, k in enumerate(body.kernels):
        kernel_of[id(k.root)] = idx
        if k.kind == "alias":
            continue
        for v in k.inputs:
            root = roots.get(v.id, v).id
            last_read[root] = idx
            if root != v.id:
                viewed.add((idx, root))
    returned_views = {roots[v.id].id for v in body.body.results if v.id in roots}
    kept = []
    for i in op.attrs.get("in_place", ()):
        r = body.body.results[i]
        prod = r.producer
        if prod.name == "dynamic_update_slice":
            kept.append(i)
            continue
        p = body.body.params[i]
        at = kernel_of.get(id(prod))
        ok = (at is not None and sum(v is p for v in prod.operands) == 1
              and p.id not in returned_views and last_read.get(p.id, -1) <= at
              and (at, p.id) not in viewed)
        if ok:
            if prod.name == "scatter":     # an inner loop needs no mark: it compares pointers
                prod.attrs["in_place"] = True
            kept.append(i)
    op.attrs["in_place"] = tuple(kept)


# --------------------------------------------------------------------------- scratch layout

def round_up(n: Dim) -> Dim:
    return symbolic.floordiv(n + (ALIGN - 1), ALIGN) * ALIGN


def scratch_layout(op: Op) -> tuple[dict[int, Dim], Dim, Dim]:
    """Where a control op's scratch memory goes: for a `while`, the second buffer of every
    carried value not updated in place (index -> byte offset); then the arena its regions
    share (they never run at the same time). Returns (offsets, arena offset, total bytes)."""
    offsets: dict[int, Dim] = {}
    at: Dim = 0
    if op.name == "while":
        in_place = op.attrs.get("in_place", ())
        for i, r in enumerate(op.results[:_n_carried(op)]):
            if i not in in_place:
                offsets[i] = at
                at = at + round_up(r.num_elements() * numpy_dtype(r.dtype).itemsize)
    arena: Dim = 0
    for sub in op.programs:
        arena = sub.memory.arena_bytes if arena == 0 else symbolic.dmax(
            arena, sub.memory.arena_bytes)
    return offsets, at, at + arena


def _n_carried(op: Op) -> int:
    return len(op.results) - (1 if op.attrs.get("scratch") else 0)
