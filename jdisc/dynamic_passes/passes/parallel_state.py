"""The state of the parallel-axes analysis (parallel_axes.py): which dims are still candidates,
why the others are not parallel, and per value and dim how its shards combine."""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.program import Block, Op, Program, Value

EXACT = ("exact", 0)     # a value's state in a dim: (how shards combine, power of n it is off by)
COMBINE = ("add", "max", "min")     # reductions whose per-shard results combine


def plain_var(d) -> str | None:
    if isinstance(d, int):
        return None
    names = symbolic.variables(d)
    if len(names) == 1:
        name = next(iter(names))
        if d == symbolic.var(name):
            return name
    return None


def dims_in(x, out: set[str]) -> None:
    """The dimension variables in an attribute (Dims nested in tuples, lists and dicts)."""
    if isinstance(x, symbolic.Expr):
        out.update(symbolic.variables(x))
    elif isinstance(x, (tuple, list)):
        for y in x:
            dims_in(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            dims_in(y, out)


def _host_dims(x, out: set[str], seen: set[int]) -> None:
    """The dimension variables a launcher-derived value reads (HostValues share subtrees)."""
    if id(x) in seen:
        return
    seen.add(id(x))
    if isinstance(x, (int, symbolic.Expr)):
        out.update(symbolic.variables(x))
    elif isinstance(x, (tuple, list)):
        for y in x:
            _host_dims(y, out, seen)
    else:
        for field in ("args", "lhs", "rhs"):
            if hasattr(x, field):
                _host_dims(getattr(x, field), out, seen)


def is_float(v: Value) -> bool:
    return v.dtype[0] in "fbc"      # f16 f32 f64 bf16 c64 c128


class Analysis:
    """The walk's state: candidate dims, why each refused one is not parallel, and per value
    the partial / rescaled / number states (`EXACT` where absent); `rules` maps an op name to
    its rule, `handled` an op name to the attributes its rule reads itself."""

    def __init__(self, prog: Program, rules: dict, handled: dict):
        self.rules, self.handled = rules, handled
        self.why: dict[str, str] = {}          # dimension variable -> why it is not parallel
        self.state: dict[int, dict[str, tuple[str, int]]] = {}   # value id -> dim -> state
        cands: set[str] = set()
        for spec in prog.inputs:
            for d in spec.shape:
                name = plain_var(d)
                if name is not None:
                    cands.add(name)
        self.cands = cands
        self.derived: dict[str, set[str]] = {}
        for spec in prog.inputs:
            for d in spec.shape:
                if plain_var(d) is None and not isinstance(d, int):
                    self.refuse(symbolic.variables(d), None, f"an input axis has the size {d}")
        # a dimension the launcher derives from a candidate (a constraint's quotient, ...):
        # a shape or number that reads it reads the candidate
        for name, host in prog.derived:
            used: set[str] = set()
            _host_dims(host, used, set())
            deps = set(used)
            for u in used:
                deps |= self.derived.get(u, set())
            self.derived[name] = deps

    # -- state ------------------------------------------------------------------------------
    def live(self) -> set[str]:
        return self.cands - set(self.why)

    def refuse(self, dims, op: Op | None, why: str) -> None:
        where = f" (stablehlo.{op.name} at {op.loc})" if op is not None else ""
        dims = set(dims)
        through = sorted(dims & set(self.derived))
        for name in through:
            dims |= self.derived[name]
        if through:
            why = f"{why} (through {', '.join(through)}, which the launcher derives)"
        for d in sorted(dims & self.cands):
            self.why.setdefault(d, why + where)

    def axes(self, v: Value) -> dict[str, int]:
        """Candidate dim -> the axis of v it sizes."""
        out = {}
        for i, d in enumerate(v.shape):
            name = plain_var(d)
            if name in self.cands:
                out[name] = i
        return out

    def axis_dims(self, v: Value, live: set[str]) -> tuple[str | None, ...]:
        return tuple(n if n in live else None for n in map(plain_var, v.shape))

    def of(self, v: Value, d: str) -> tuple[str, int]:
        return self.state.get(v.id, {}).get(d, EXACT)

    def depends(self, v: Value, d: str) -> bool:
        return d in self.state.get(v.id, {}) or d in self.axes(v)

    def set(self, v: Value, d: str, st: tuple[str, int]) -> None:
        if st != EXACT:
            self.state.setdefault(v.id, {})[d] = st

    def marked(self, op: Op) -> set[str]:
        """The dims in which some operand is partial or scaled."""
        out: set[str] = set()
        for v in op.operands:
            out.update(self.state.get(v.id, {}))
        return out

    def check_shape(self, v: Value, op: Op) -> None:
        seen = set()
        for d in v.shape:
            if isinstance(d, int):
                continue
            name = plain_var(d)
            if name in self.derived:
                self.refuse({name}, op, f"an axis has the size {d}")
            elif name is None:
                self.refuse(symbolic.variables(d), op, f"an axis has the size {d}")
            elif name in seen:
                self.refuse({name}, op, f"two axes of one value have the size {name}")
            seen.add(name)

    # -- the walk ---------------------------------------------------------------------------
    def block(self, block: Block) -> None:
        for op in block.ops:
            self.op(op)

    def op(self, op: Op) -> None:
        results = op.results[:-1] if op.attrs.get("scratch") else op.results
        for v in list(op.operands) + list(results):
            self.check_shape(v, op)
        rule = self.rules.get(op.name)
        if rule is None:
            dims = self.marked(op)
            for v in list(op.operands) + list(results):
                dims.update(self.axes(v))
            self.refuse(dims, op, "jdisc does not know how this op partitions")
            return
        used: set[str] = set()
        for key, value in op.attrs.items():
            if key not in self.handled.get(op.name, ()):
                dims_in(value, used)
        self.refuse(used, op, "it is read as a number")
        for d in self.marked(op):     # a shape vector that holds a dim: only a gather of an
            if any(self.of(v, d)[0] == "number" for v in op.operands) and not (   # entry
                    op.name == "gather" and self.of(op.operands[1], d) == EXACT):
                self.refuse({d}, op, "it is read as a number")
        rule(self, op)

    def carry(self, op: Op, linear: bool, data: int = 0, ignore=frozenset()) -> None:
        """Ops that move the elements of operand `data` (reshape, transpose, slice, ...): the
        result has its state where `linear` (then a partial value must not gain an axis of its
        dim); every other operand must not depend on a marked dim (but those in `ignore`)."""
        for d in self.marked(op) - set(ignore):
            st = self.of(op.operands[data], d)
            bad = (not linear and st != EXACT) or any(
                self.depends(v, d) for i, v in enumerate(op.operands) if i != data and
                self.of(v, d) != EXACT) or (st[0] != "exact" and d in self.axes(op.results[0]))
            if bad:
                self.refuse({d}, op, "a partial or rescaled value of it is used here")
            else:
                self.set(op.results[0], d, st)


def proves_eq(x, value) -> bool:
    return symbolic.prove_eq(x, value) is True
