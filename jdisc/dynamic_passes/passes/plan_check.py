"""The plan checker: invariants of a program's kernel plan and memory plan, verified.

Run after fusion (`prog.kernels`) and the memory plan (`prog.memory`) of every program (the top
level and each control-flow region) when `JDISC_CHECK_PLAN=1` (pipeline.run_passes); the test
suite turns it on for every compile. A violation is a bug in jdisc's planners, never in the
user's program: it raises CompileError naming the kernels, ops and values involved.

1. Schedule (fused groups are convex). Every value a kernel reads is a program input, a
   non-splat constant (a static array), a value computed by an op of the same kernel (its own,
   or a duplicable op it recomputes: splat constants, iota, dimension values, broadcasts), or a
   buffer written by an EARLIER kernel. Every kernel input is read by one of its ops and every
   output computed by one; no value has two writers. With one writer per value, "every input
   written earlier" is exactly "the kernel order is a topological order of the kernel graph",
   so no dataflow path can leave a kernel and re-enter it.
2. Buffers are written before they are read (1, by kernel order), and every program output is
   written by some kernel (or is an input or constant).
3. Memory. Liveness is recomputed here from the kernel order (written at its kernel, live to its
   last reader, reads through alias kernels counted, an aliased program output kept to the end)
   and checked against the arena layout: every intermediate has a slot; a buffer fits its slot
   (raw bytes provably <= the slot's size); slots lie one after another in the arena (each
   offset provably >= the previous offset + size, the arena provably covers the last), so two
   buffers can only share memory by sharing a slot; and buffers sharing a slot have disjoint
   closed live intervals, except a buffer written in place over one that dies at its kernel
   (a single-output loop kernel that reads the dying one through its output pointer, only at
   the index written). Sorting by start makes this n log n, with no pairwise comparisons.
4. Index maps. Each op inside a kernel maps an in-bounds index of its result to the indices of
   its operands it reads (broadcast_in_dim, transpose, reshape, slice, reverse, concatenate,
   dynamic_slice and gather after clamping, dynamic_update_slice, elementwise ops, reduce;
   pad's and dynamic_update_slice's guarded reads need no bound). By induction from the
   kernel's loop over its output, all reads are in bounds when every op's map is. Each map
   yields obligations over the symbolic shapes, e.g. `start + stride*(size - 1) < dim`
   (plan_index.py); a loop kernel's extra outputs must have the shape of the first.
5. Donation. A result that takes a donated input's buffer (`prog.donation`) has the input's
   dtype and byte size, is written by a single-output loop kernel whose pointers for the two
   are not `restrict`, and no later kernel reads the input (or a view of it), nor is any result
   the input or a view of it.

Policy for index obligations. An obligation is decided under the program's constraints
(`prog.constraints`: every launcher check of the program and, in a region, of its scope holds
when kernels run), and holds when
  * it is proven, or
  * the op touches no element (its result, or a dynamic_update_slice's update, is provably
    empty; jdisc's shape checks apply only to non-empty reads, as XLA's do), or
  * a run-time check covers it: a launcher check of the same fact, or the "unless empty" form
    `min(count, slack) <= 0` that shape propagation emits, is among the constraints' facts.
An obligation that is disproven (it fails whenever the op runs) or unproven (neither proven nor
covered by a check: nothing stops an out-of-bounds read at run time) is an error. Unproven is
treated as an error, not a warning: every bound jdisc cannot prove must be a run-time check, so
a missing one is a planner/shape-propagation bug. The provers are conservative (a fact they
cannot derive reads as unproven), which is why checks are matched by the same expressions
shape_prop writes them with.

Everything is linear in the number of ops, kernels and buffers (plus the sort per slot); proofs
are memoised per obligation, so a broadcast recomputed in many kernels is proven once.
"""

from __future__ import annotations

import math
from typing import Callable

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.constraints import ShapeConstraints
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.program import Program, Value
from jdisc.dynamic_passes.passes.fusion import Kernel, is_duplicable, is_splat
from jdisc.dynamic_passes.passes.memory_plan import raw_bytes, reads_only_in_place, round_up
from jdisc.dynamic_passes.passes.plan_index import Obligation, index_obligations
from jdisc.errors import CompileError

MAX_LISTED = 20     # problems listed in one error (the rest are counted)


def check_plan(prog: Program, recursive: bool = False) -> Program:
    """Raise CompileError when the kernel or memory plan of `prog` breaks an invariant.
    With `recursive`, the region programs of its control ops are checked too."""
    problems = _problems(prog)
    if problems:
        shown = problems[:MAX_LISTED]
        more = len(problems) - len(shown)
        raise CompileError(
            f"internal compiler error: the kernel/memory plan of '{prog.name}' breaks "
            f"{len(problems)} invariant(s) (a bug in jdisc, not in the program: a planner broke "
            f"it, or shape propagation left a bound without a run-time check):\n"
            + "\n".join(f"  {p}" for p in shown)
            + (f"\n  ... and {more} more" if more else ""), stage="plan check")
    if recursive:
        for k in prog.kernels:
            for sub in k.root.programs if k.ops else ():
                check_plan(sub, recursive=True)
    return prog


def _problems(prog: Program) -> list[str]:
    out = check_schedule(prog)
    if not out:             # liveness and slots are meaningless on a broken schedule
        out += check_memory(prog)
        out += check_donation(prog)
    out += check_index_maps(prog)
    return out


# ---------------------------------------------------------------------------- naming

def _scratch_sized(v: Value, ge) -> bool:
    """A control op's scratch (control_flow.scratch_layout) is rounded-up copies of carried
    values plus the largest of its regions' arenas, whose slots the regions' own checks show
    non-negative: it is >= 0 when every carried value's dims are (its expanded size alone
    hides that: 4b*(a - min(a, 2))^2 reads 4a^2*b - 8ab*min(a, 2) + 4b*min(a, 2)^2)."""
    op = getattr(v, "producer", None)
    if op is None or not op.attrs.get("scratch") or not op.results or op.results[-1] is not v:
        return False
    return all(ge(d, 0) for r in op.results[:-1] for d in r.shape)


def describe_value(v: Value) -> str:
    p = v.producer
    what = "a program input" if p is None else f"stablehlo.{p.name} at {p.loc}"
    return f"%{v.id} ({v.type_str()}, {what})"


def _kname(kernels: list[Kernel], i: int) -> str:
    return f"kernel #{i} {kernels[i].name} [{kernels[i].kind}]"


# ---------------------------------------------------------------------------- 1 and 2

def _static_values(prog: Program) -> set[int]:
    """Values that are in memory before any kernel runs: inputs and non-splat constants."""
    out = {v.id for v in prog.body.params}
    for op in prog.body.ops:
        if op.name == "constant" and not is_splat(op.attrs["value"]):
            out.add(op.results[0].id)
    return out


def writers(prog: Program) -> tuple[dict[int, int], list[str]]:
    """Value id -> index of the kernel writing it; problems for values written twice."""
    writer: dict[int, int] = {}
    problems = []
    for i, k in enumerate(prog.kernels):
        for v in k.outputs:
            if v.id in writer:
                problems.append(f"{describe_value(v)} is written by two kernels: "
                                f"{_kname(prog.kernels, writer[v.id])} and "
                                f"{_kname(prog.kernels, i)}")
            else:
                writer[v.id] = i
    return writer, problems


def check_schedule(prog: Program) -> list[str]:
    """Invariants 1 and 2 (see the module docstring)."""
    kernels = prog.kernels
    static = _static_values(prog)
    writer, problems = writers(prog)
    computed_in: dict[int, int] = {}     # value id -> a kernel computing it (not duplicable)
    for i, k in enumerate(kernels):
        for op in k.ops:
            if not is_duplicable(op):
                for r in op.results:
                    computed_in.setdefault(r.id, i)
    for i, k in enumerate(kernels):
        inside = {r.id for op in k.ops for r in op.results}
        declared = {v.id for v in k.inputs}
        read: set[int] = set()
        for op in k.ops:
            for v in op.operands:
                if v.id in inside:
                    continue
                read.add(v.id)
                if v.id not in declared:
                    problems.append(f"{_kname(kernels, i)}: stablehlo.{op.name} at {op.loc} "
                                    f"reads {describe_value(v)}, which the kernel neither "
                                    f"computes nor takes as an input")
        for v in k.inputs:
            if v.id in inside:
                problems.append(f"{_kname(kernels, i)} takes {describe_value(v)} as an input "
                                f"but also computes it")
            elif v.id not in read:
                problems.append(f"{_kname(kernels, i)} takes {describe_value(v)} as an input "
                                f"that none of its ops reads")
            if v.id in static:
                continue
            w = writer.get(v.id)
            if w is None:
                c = computed_in.get(v.id)
                where = (f"{_kname(kernels, c)} computes it but never writes it to memory"
                         if c is not None else "no kernel computes it")
                problems.append(f"{_kname(kernels, i)} reads {describe_value(v)}: {where}")
            elif w >= i:
                problems.append(
                    f"{_kname(kernels, i)} reads {describe_value(v)} before "
                    f"{_kname(kernels, w)} writes it: the kernel order is not a valid schedule"
                    + (" (a dataflow path leaves the kernel and re-enters it)" if w == i else ""))
        for v in k.outputs:
            if v.id not in inside:
                problems.append(f"{_kname(kernels, i)} writes {describe_value(v)}, which none "
                                f"of its ops computes")
    for j, v in enumerate(prog.body.results):
        if v.id not in static and v.id not in writer:
            problems.append(f"program output {j} {describe_value(v)} is never written by any "
                            f"kernel")
    return problems


# ---------------------------------------------------------------------------- 3

def check_memory(prog: Program, prover: ShapeConstraints | None = None) -> list[str]:
    """Invariant 3: buffers live at the same time never share arena memory."""
    plan = prog.memory
    if plan is None:
        return []
    sc = prover or constraints_of(prog)
    memo: dict = {}

    def ge(a, b) -> bool:       # many buffers and slots share their size expressions
        if (a, b) not in memo:
            memo[a, b] = a == b or sc.prove_ge(a, b) is True
        return memo[a, b]

    kernels = prog.kernels
    results = {v.id for v in prog.body.results}
    parent = {k.outputs[0].id: k.root.operands[0] for k in kernels if k.kind == "alias"}

    def root(v: Value) -> Value:
        seen = 0
        while v.id in parent and seen <= len(parent):
            v, seen = parent[v.id], seen + 1
        return v

    arena: dict[int, tuple[Value, int]] = {}     # root id -> (value, writing kernel)
    for i, k in enumerate(kernels):
        if k.kind == "alias":
            continue
        for v in k.outputs:
            if v.id not in results:
                arena[v.id] = (v, i)
    last = {vid: i for vid, (_, i) in arena.items()}
    for i, k in enumerate(kernels):
        if k.kind == "alias":
            continue
        for v in k.inputs:
            r = root(v)
            if r.id in last:
                last[r.id] = max(last[r.id], i)
    for v in prog.body.results:
        r = root(v)
        if r.id in last:      # an output aliasing an intermediate is copied out at the end
            last[r.id] = len(kernels)
    problems = []
    slots = {s.index: s for s in plan.slots}
    by_slot: dict[int, list[tuple[int, int, Value]]] = {}
    slot_is_rounded: dict[int, bool] = {}       # size == round_up(raw): raw bytes suffice
    sized: set[int] = set()                     # slots holding a value: size >= 0 shown
    for vid, (v, start) in arena.items():
        si = plan.assignment.get(vid)
        if si is None or si not in slots:
            problems.append(f"{describe_value(v)}, written by {_kname(kernels, start)}, has no "
                            f"arena slot")
            continue
        slot = slots[si]
        need = raw_bytes(v)
        if si not in slot_is_rounded:
            slot_is_rounded[si] = slot.size == round_up(slot.raw)
        rounded = slot_is_rounded[si]
        fits = (rounded and ge(slot.raw, need)) or ge(slot.size, need)
        if not fits:
            problems.append(f"{describe_value(v)} needs {need} bytes but slot {si} holds "
                            f"{slot.size}: not provably enough")
        elif si not in sized and (all(ge(d, 0) for d in v.shape) or _scratch_sized(v, ge)):
            # size >= need = itemsize * (a product of dims each >= 0): the product's sign is
            # seen from its factors, which the expanded polynomial hides
            sized.add(si)
        by_slot.setdefault(si, []).append((start, last[vid], v))
    for si, users in sorted(by_slot.items()):
        users.sort(key=lambda u: (u[0], u[1]))
        busy_until, holder = -1, None
        for start, stop, v in users:
            if holder is not None and start <= busy_until and not (
                    start == busy_until and _in_place(kernels[start], holder, v, sc)):
                problems.append(
                    f"slot {si} (offset {slots[si].offset}) is shared by {describe_value(holder)}"
                    f" and {describe_value(v)}, both live at kernel #{start} "
                    f"{kernels[min(start, len(kernels) - 1)].name}")
            if stop > busy_until:
                busy_until, holder = stop, v
    ordered = sorted(plan.slots, key=lambda s: s.index)
    end: symbolic.Dim = 0
    for s in ordered:
        if not ge(s.offset, end):
            problems.append(f"slot {s.index} at offset {s.offset} may overlap the slot before "
                            f"it (which ends at {end})")
        if s.index not in sized and not ge(s.size, 0):
            problems.append(f"slot {s.index} has a size {s.size} that may be negative")
        end = s.offset + s.size
    if ordered and not ge(plan.arena_bytes, end):
        problems.append(f"the arena ({plan.arena_bytes} bytes) may end before its last slot "
                        f"(at {end})")
    return problems


def _in_place(k: Kernel, x: Value, v: Value, sc: ShapeConstraints) -> bool:
    """Kernel k may write v over x, which dies at k: a single-output loop kernel writing v that
    reads x through its output pointer (`writes_over`), only at the index it writes."""
    return (k.kind == "loop" and k.outputs == [v] and any(y is x for y in k.inputs)
            and x.id in k.writes_over and x.dtype == v.dtype
            and sc.prove_eq(raw_bytes(x), raw_bytes(v)) is True
            and reads_only_in_place(k, x, sc.prove_eq))


# ---------------------------------------------------------------------------- 4

def check_donation(prog: Program) -> list[str]:
    """Invariant 5: a donated input's buffer is overwritten only once nothing reads it."""
    if not prog.donation:
        return []
    sc = constraints_of(prog)
    problems = []
    parent = {k.outputs[0].id: k.root.operands[0] for k in prog.kernels if k.kind == "alias"}

    def root(v: Value) -> Value:
        while v.id in parent:
            v = parent[v.id]
        return v

    writer = {v.id: i for i, k in enumerate(prog.kernels) if k.kind != "alias"
              for v in k.outputs}
    for pos, j in prog.donation:
        p, r = prog.body.params[pos], prog.body.results[j]
        i = writer.get(r.id)
        k = prog.kernels[i] if i is not None else None
        where = f"result {j} {describe_value(r)} in the buffer of input {pos}"
        if k is None or k.kind != "loop" or len(k.outputs) != 1 or \
                not {p.id, r.id} <= k.shared_buffers:
            problems.append(f"{where}: not written by a single-output loop kernel that knows "
                            f"the two share memory")
            continue
        if p.dtype != r.dtype or sc.prove_eq(raw_bytes(p), raw_bytes(r)) is not True:
            problems.append(f"{where}: dtype or size differ")
        late = [kk.name for kk in prog.kernels[i + 1:] if kk.kind != "alias"
                and any(root(x).id == p.id for x in kk.inputs)]
        if late:
            problems.append(f"{where}: read after {k.name} overwrites it, by {late}")
        if any(root(v).id == p.id for v in prog.body.results):
            problems.append(f"{where}: the input is also a result")
    return problems


def constraints_of(prog: Program) -> ShapeConstraints:
    if prog.constraints is not None:
        return prog.constraints
    return ShapeConstraints.from_program(prog.scope or prog)


def check_index_maps(prog: Program, prover: ShapeConstraints | None = None) -> list[str]:
    """Invariant 4: every op inside a kernel reads its operands in bounds."""
    sc = prover or constraints_of(prog)
    decide = _Decider(sc)
    problems = []
    seen: set[int] = set()
    for i, k in enumerate(prog.kernels):
        for text in _kernel_shape_problems(k, sc):
            problems.append(f"{_kname(prog.kernels, i)}: {text}")
        for op in k.ops:
            if id(op) in seen:
                continue
            seen.add(id(op))
            for ob in index_obligations(op):
                verdict = decide(ob)
                if verdict is not None:
                    why = (" (neither proven nor checked at run time)"
                           if verdict == "unproven" else "")
                    problems.append(f"{_kname(prog.kernels, i)}: stablehlo.{op.name} at "
                                    f"{op.loc}: {ob.what}: {ob.shown()} is {verdict}{why}")
    return problems


def _kernel_shape_problems(k: Kernel, sc: ShapeConstraints) -> list[str]:
    """A loop kernel writes every output at the index of its loop over outputs[0]."""
    if k.kind != "loop" or len(k.outputs) < 2:
        return []
    ref = k.outputs[0]
    out = []
    for v in k.outputs[1:]:
        if v.rank != ref.rank or any(sc.prove_eq(a, b) is not True
                                     for a, b in zip(v.shape, ref.shape)):
            out.append(f"writes {describe_value(v)} over the loop of {describe_value(ref)}, "
                       f"whose shape is not provably the same")
    return out


class _Decider:
    """Decides obligations under the constraints; memoised. Returns None when it holds, else
    'disproven' or 'unproven'."""

    def __init__(self, sc: ShapeConstraints):
        self.sc = sc
        self.memo: dict = {}
        self.prove: dict[str, Callable] = {
            "==": self._eq, "<=": lambda a, b: self._ge(b, a), ">=": self._ge,
            "<": lambda a, b: self._ge(b, a + 1), ">": lambda a, b: self._ge(a, b + 1)}

    def _ge(self, a, b) -> bool | None:
        found = self.sc.prove_ge(a, b)
        if found is None and division_proves_nonneg(self.sc, a - b):
            return True
        return found

    def _eq(self, a, b) -> bool | None:
        found = self.sc.prove_eq(a, b)
        if found is None and self._ge(a, b) is True and self._ge(b, a) is True:
            return True
        return found

    def __call__(self, ob: Obligation) -> str | None:
        key = ob.key()
        if key not in self.memo:
            self.memo[key] = self._decide(ob)
        return self.memo[key]

    def _decide(self, ob: Obligation) -> str | None:
        verdicts = [self._one(alt, ob.count) for alt in ob.alternatives]
        if None in verdicts:
            return None
        return "unproven" if "unproven" in verdicts else "disproven"

    def _one(self, alt, count) -> str | None:
        sc = self.sc
        if count is not None and sc.prove_eq(count, 0) is True:
            return None         # the op touches nothing
        if all(self._holds(fact, count) for fact in alt):
            return None
        nonempty = count is None or sc.prove_ge(count, 1) is True
        if nonempty and any(self.prove[cmp](lhs, rhs) is False for lhs, cmp, rhs in alt):
            return "disproven"
        return "unproven"

    def _holds(self, fact, count) -> bool:
        lhs, cmp, rhs = fact
        if self.prove[cmp](lhs, rhs) is True:
            return True
        if count is None or cmp not in ("<=", ">="):
            return False
        slack = lhs - rhs if cmp == "<=" else rhs - lhs
        # the launcher's "needed unless empty" check (shape_prop.bound_unless_empty)
        return self.sc.prove_le(symbolic.dmin(count, slack), 0) is True


def division_proves_nonneg(sc: ShapeConstraints, d: Dim) -> bool:
    """d >= 0, proven by writing each variable v that d divides by a constant m (in floordiv(v,
    m) or mod(v, m) atoms) as m*q + r with 0 <= r < m. Interval bounds lose the correlation
    between v and floordiv(v, m) (they cannot show `floordiv(v, 4) <= v`); in q and r it is
    explicit (`q <= 4*q + r`). Sound: every v >= 0 has exactly one such q, r."""
    d = sc.canonical(d)
    if isinstance(d, int):
        return d >= 0
    divisors: dict[str, int] = {}
    for mono, _ in d.terms:
        for atom, _ in mono.factors:
            if atom.op in ("floordiv", "mod") and isinstance(atom.args[1], int) \
                    and atom.args[1] > 1:
                names = symbolic.variables(atom.args[0])
                if len(names) == 1:
                    name = next(iter(names))
                    divisors[name] = math.lcm(divisors.get(name, 1), atom.args[1])
    if not divisors:
        return False
    mapping, var_bounds = {}, {}
    for name in symbolic.variables(d):
        var_bounds[name] = sc.bounds(symbolic.var(name))
    for name, m in divisors.items():
        lo, hi = var_bounds[name]
        if lo < 0:
            continue        # a signed value: floor semantics differ, leave it alone
        q, r = f"{name}__q{m}", f"{name}__r{m}"
        mapping[name] = m * symbolic.var(q) + symbolic.var(r)
        var_bounds[q] = (lo // m, hi if hi == math.inf else hi // m)
        var_bounds[r] = (0, 0) if sc.divisible(symbolic.var(name), m) is True else (0, m - 1)
    if not mapping:
        return False
    rewritten = symbolic.substitute(d, mapping)
    return symbolic.bounds(rewritten, var_bounds)[0] >= 0
