"""Host computations: shape arithmetic jdisc evaluates on the host at run time.

`Pred` is a symbolic predicate (the contents of an i1 shape value), `HostValue` an integer that
jdisc's symbolic algebra cannot express soundly (truncating division of a value that may be
negative, `sign`, a `select` on an undecided predicate). A HostValue enters shapes as a fresh
dimension variable `_hN` (`bind_host_value`, ir/program.py) that the launcher computes before
its checks (lowering/launcher.py, once per shared subtree).
"""

from __future__ import annotations

import dataclasses

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim


@dataclasses.dataclass(frozen=True)
class Pred:
    """A symbolic predicate `lhs cmp rhs` (the contents of an i1 value from `compare`), or a
    conjunction (`cmp == "and"`, `lhs` a tuple of Preds). Decided ones become plain bools."""
    cmp: str
    lhs: Dim | tuple
    rhs: Dim | tuple

    def decide(self, var_bounds=None) -> bool | None:
        if isinstance(self.lhs, bool) and isinstance(self.rhs, bool) and self.cmp in ("==", "!="):
            return (self.lhs == self.rhs) == (self.cmp == "==")   # two decided predicates
        if self.cmp == "and" or not (is_symbolic(self.lhs) and is_symbolic(self.rhs)):
            return None
        kw = {} if var_bounds is None else {"var_bounds": var_bounds}
        if self.cmp == "!=":
            eq = symbolic.prove_eq(self.lhs, self.rhs, **kw)
            return None if eq is None else not eq
        return getattr(symbolic, symbolic.PROVERS[self.cmp])(self.lhs, self.rhs, **kw)

    def conjuncts(self) -> tuple["Pred", ...]:
        return tuple(p for q in self.lhs for p in q.conjuncts()) if self.cmp == "and" else (self,)

    def __repr__(self) -> str:
        return _host_text(self, _REPR_DEPTH)


@dataclasses.dataclass(frozen=True)
class HostValue:
    """An integer the host launcher computes at run time: a shape computation whose value jdisc
    cannot express soundly in its symbolic algebra (e.g. truncating division of a value that may
    be negative, or `sign`). `op` is the StableHLO op name; `args` are Dims, Preds, bools or
    HostValues. It enters shapes through a fresh dimension variable (see `bind_host_value`)."""
    op: str
    args: tuple

    def __repr__(self) -> str:
        return _host_text(self, _REPR_DEPTH)


# Host computations share subtrees (jax computes each strided layer's padding from the last
# one's size), so written out in full they grow exponentially: dumps show them this deep.
_REPR_DEPTH = 4


def _host_text(x, depth: int) -> str:
    """`op(arg, ...)` / `(lhs cmp rhs)`, with parts below `depth` levels shown as `...`."""
    if not isinstance(x, (Pred, HostValue)):
        return str(x)
    if depth == 0:
        return "..."
    if isinstance(x, HostValue):
        return f"{x.op}({', '.join(_host_text(a, depth - 1) for a in x.args)})"
    if x.cmp == "and":
        return "(" + " and ".join(_host_text(p, depth - 1) for p in x.lhs) + ")"
    return f"({_host_text(x.lhs, depth - 1)} {x.cmp} {_host_text(x.rhs, depth - 1)})"


def is_symbolic(x) -> bool:
    """x is a dimension: an int (not a bool) or an Expr."""
    return isinstance(x, (int, symbolic.Expr)) and not isinstance(x, bool)
