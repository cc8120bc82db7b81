"""Kernel planning: which ops become which kernel, and which values live in memory.

A `Kernel` computes its `outputs` (materialised buffers) from its `inputs` (buffers); the ops in
`ops` are evaluated element by element inside one loop nest, so a value computed inside a kernel
never touches memory. The planner here is the base one: each op that does real work is its own
kernel, and cheap index-only producers (constants, iota, broadcasts, dimension values) are
inlined into their consumers, so a broadcast is never materialised.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jdisc.dynamic_passes.ir import Op, Program, Value

# Producers that are inlined into every consumer: they cost an index computation, no memory.
INLINE_OPS = frozenset({"constant", "iota", "dim_constant", "broadcast_in_dim"})


@dataclasses.dataclass(eq=False)
class Kernel:
    name: str
    kind: str              # loop | reduce | concat | dot | alias
    ops: list[Op]          # evaluated inside, in program order; the root op last
    outputs: list[Value]   # buffers written
    inputs: list[Value]    # buffers read

    @property
    def root(self) -> Op:
        return self.ops[-1]

    def describe(self) -> str:
        ops = ", ".join(f"{op.name}@{op.loc}" for op in self.ops)
        return f"{self.name} [{self.kind}] {ops}"


def _is_inlined(v: Value) -> bool:
    """True when consumers recompute `v` inside their own loops instead of reading memory."""
    op = v.producer
    if op is None:
        return False
    if op.name == "constant":
        return is_splat(op.attrs["value"])
    return op.name in INLINE_OPS


def is_splat(arr) -> bool:
    if arr.size <= 1:
        return True
    rows = arr.reshape(-1).view(np.uint8).reshape(arr.size, arr.itemsize)
    return bool((rows == rows[0]).all())


def _kind(op: Op) -> str:
    if op.name == "dot_general":
        return "dot"
    if op.name == "reduce":
        return "reduce"
    if op.name == "concatenate":
        return "concat"
    return "loop"


def plan_kernels(prog: Program) -> Program:
    """Pass: group ops into kernels (`prog.kernels`) and decide what is materialised."""
    kernels: list[Kernel] = []
    results = {v.id for v in prog.body.results}
    for op in prog.body.ops:
        if not op.results:
            continue
        inlined = all(_is_inlined(r) for r in op.results) and not any(
            r.id in results for r in op.results)
        if inlined:
            continue
        if op.name == "constant" and not _is_inlined(op.result):
            continue   # a static array in the generated C: a buffer with no kernel
        if op.name == "reshape" and not _is_inlined(op.operands[0]):
            kind, ops = "alias", [op]   # same bytes, new shape: no kernel runs
        else:
            kind = _kind(op)
            ops = _inlined_producers(op) + [op]
        inputs = _inputs_of(ops)
        name = f"jd_k{len(kernels)}_{op.name}"
        kernels.append(Kernel(name, kind, ops, list(op.results), inputs))
    prog.kernels = kernels
    return prog


def _inlined_producers(op: Op) -> list[Op]:
    """Inlined ops that `op` reads, transitively, in program order."""
    seen: dict[int, Op] = {}

    def visit(v: Value):
        p = v.producer
        if p is not None and _is_inlined(v) and id(p) not in seen:
            for x in p.operands:
                visit(x)
            seen[id(p)] = p

    for v in op.operands:
        visit(v)
    return list(seen.values())


def _inputs_of(ops: list[Op]) -> list[Value]:
    inside = {r.id for op in ops for r in op.results}
    out: dict[int, Value] = {}
    for op in ops:
        for v in op.operands:
            if v.id not in inside:
                out.setdefault(v.id, v)
    return list(out.values())
