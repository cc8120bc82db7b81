"""Symbolic shape propagation: every value gets a shape of symbolic dimensions.

Shape computations (`get_dimension_size`, a shape vector built by `concatenate` of `reshape`d
scalars, integer arithmetic on them) are evaluated at compile time into `Value.sym`; the dynamic
ops that consume them (`dynamic_broadcast_in_dim`, `dynamic_reshape`, ...) read their result
shape from there. A static dim in the StableHLO type that the propagation cannot prove equal to
its own result becomes a run-time check.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from jdisc.dynamic_passes import symbolic
from jdisc.dynamic_passes.ir import Check, Op, Program, Value, walk
from jdisc.dynamic_passes.symbolic import Dim
from jdisc.errors import JdiscError, ShapeError

MAX_SYM_ELEMENTS = 16   # integer tensors up to this size have their contents tracked


@dataclasses.dataclass(frozen=True)
class Pred:
    """A symbolic predicate `lhs cmp rhs` (the contents of an i1 value from `compare`)."""
    cmp: str
    lhs: Dim
    rhs: Dim


_CMP = {"EQ": "==", "NE": "!=", "GE": ">=", "GT": ">", "LE": "<=", "LT": "<"}

# Symbolic meaning of integer ops on tracked contents (dims are never negative).
_INT_FNS: dict[str, Callable[..., Dim]] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: symbolic.floordiv(a, b),
    "remainder": lambda a, b: symbolic.mod(a, b),
    "maximum": symbolic.dmax,
    "minimum": symbolic.dmin,
    "negate": lambda a: -a,
}


class _Propagator:
    def __init__(self, prog: Program):
        self.prog = prog

    def fail(self, op: Op, msg: str) -> JdiscError:
        return ShapeError(f"{msg} (stablehlo.{op.name} at {op.loc})")

    # -- shapes -----------------------------------------------------------------------------
    def run(self) -> None:
        for op in self.prog.body.ops:
            self.visit(op)

    def visit(self, op: Op) -> None:
        handler = getattr(self, "shape_" + op.name, None)
        if handler is None:
            if op.name in ELEMENTWISE:
                shapes = [self.elementwise(op)]
            else:
                shapes = [self.from_type(op, r) for r in op.results]
        else:
            shapes = handler(op)
        for r, s in zip(op.results, shapes):
            r.shape = self.reconcile(op, r.shape, tuple(s))
        sym_fn = getattr(self, "sym_" + op.name, None)
        needs_operands = op.name not in ("get_dimension_size", "constant")
        if sym_fn is not None and len(op.results) == 1 and op.results[0].dtype != "i1" and (
                not needs_operands
                or all(v.sym is not None for v in op.operands if v.dtype != "i1")):
            try:
                sym = sym_fn(op)
            except (ZeroDivisionError, TypeError):
                sym = None
            if sym is not None:
                op.results[0].sym = tuple(sym)
        elif op.name == "compare":
            a, b = op.operands
            if a.sym is not None and b.sym is not None and len(a.sym) == 1 == len(b.sym):
                op.results[0].sym = (Pred(_CMP[op.attrs["comparison_direction"]],
                                          a.sym[0], b.sym[0]),)
        elif op.name == "and" and all(v.sym is not None for v in op.operands) \
                and op.results[0].dtype == "i1":
            op.results[0].sym = tuple(p for v in op.operands for p in v.sym)

    def reconcile(self, op: Op, typed: tuple, computed: tuple) -> tuple:
        if len(typed) != len(computed):
            raise self.fail(op, f"rank {len(computed)} computed, {len(typed)} in the type")
        out = []
        for t, c in zip(typed, computed):
            if t is None or t == c:
                out.append(c)
            elif symbolic.prove_eq(c, t) is False:
                raise self.fail(op, f"dimension {c} can never equal the static size {t}")
            else:   # symbolic vs static: trust the type and check at run time
                self.prog.checks.append(Check(c, "==", t, f"stablehlo.{op.name} at {op.loc} "
                                              f"expects dimension {c} to be {t}"))
                out.append(t)
        return tuple(out)

    def from_type(self, op: Op, r: Value) -> tuple:
        if any(d is None for d in r.shape):
            raise self.fail(op, f"cannot infer the dynamic result shape {r.type_str()}")
        return r.shape

    def require_sym(self, op: Op, v: Value, what: str) -> tuple[Dim, ...]:
        if v.sym is None:
            raise self.fail(op, f"the {what} operand is not a shape computation jdisc can "
                                f"evaluate symbolically")
        return v.sym

    def same_shape(self, op: Op, a: tuple, b: tuple, what: str) -> None:
        for i, (x, y) in enumerate(zip(a, b)):
            if symbolic.prove_eq(x, y) is not True:
                if symbolic.prove_eq(x, y) is False:
                    raise self.fail(op, f"{what}: axis {i} is {x} and {y}")
                self.prog.checks.append(Check(x, "==", y, f"{what} of stablehlo.{op.name} at "
                                              f"{op.loc}: axis {i} must match"))

    def elementwise(self, op: Op) -> tuple:
        shaped = [v for v in op.operands if v.rank > 0] or op.operands
        ref = shaped[0].shape
        for v in shaped[1:]:
            self.same_shape(op, ref, v.shape, "operand shapes")
        return ref

    # -- per-op shape rules ------------------------------------------------------------------
    def shape_get_dimension_size(self, op):
        return [()]

    def shape_dynamic_broadcast_in_dim(self, op):
        return [self.require_sym(op, op.operands[1], "output_dimensions")]

    def shape_broadcast_in_dim(self, op):
        r, x = op.results[0], op.operands[0]
        out = list(r.shape)
        for i, d in enumerate(op.attrs["broadcast_dimensions"]):
            if out[d] is None:
                out[d] = x.shape[i]
        return [self.from_type(op, Value(r.dtype, tuple(out)))]

    def shape_dynamic_reshape(self, op):
        return [self.require_sym(op, op.operands[1], "output_shape")]

    def shape_reshape(self, op):
        r, x = op.results[0], op.operands[0]
        unknown = [i for i, d in enumerate(r.shape) if d is None]
        if not unknown:
            return [r.shape]
        if len(unknown) > 1:
            raise self.fail(op, "reshape with more than one dynamic result dim")
        known: Dim = 1
        for d in r.shape:
            if d is not None:
                known = known * d
        out = list(r.shape)
        out[unknown[0]] = symbolic.floordiv(x.num_elements(), known)
        return [tuple(out)]

    def shape_dynamic_iota(self, op):
        return [self.require_sym(op, op.operands[0], "output_shape")]

    def shape_transpose(self, op):
        x = op.operands[0]
        return [tuple(x.shape[p] for p in op.attrs["permutation"])]

    def shape_dot_general(self, op):
        lhs, rhs = op.operands
        dn = op.attrs["dot_dimension_numbers"]
        for a, b in zip(dn["lhs_contract"], dn["rhs_contract"]):
            self.same_shape(op, (lhs.shape[a],), (rhs.shape[b],), "contracting dimensions")
        for a, b in zip(dn["lhs_batch"], dn["rhs_batch"]):
            self.same_shape(op, (lhs.shape[a],), (rhs.shape[b],), "batch dimensions")
        lhs_free = [i for i in range(lhs.rank) if i not in dn["lhs_batch"] + dn["lhs_contract"]]
        rhs_free = [i for i in range(rhs.rank) if i not in dn["rhs_batch"] + dn["rhs_contract"]]
        return [tuple(lhs.shape[i] for i in dn["lhs_batch"]) + tuple(lhs.shape[i] for i in lhs_free)
                + tuple(rhs.shape[i] for i in rhs_free)]

    def shape_reduce(self, op):
        n = len(op.results)
        dims = op.attrs["dimensions"]
        return [tuple(d for i, d in enumerate(x.shape) if i not in dims) for x in op.operands[:n]]

    def shape_concatenate(self, op):
        axis = op.attrs["dimension"]
        ref = list(op.operands[0].shape)
        total: Dim = 0
        for v in op.operands:
            total = total + v.shape[axis]
            self.same_shape(op, tuple(ref[:axis] + ref[axis + 1:]),
                            tuple(v.shape[:axis] + v.shape[axis + 1:]), "operand shapes")
        ref[axis] = total
        return [tuple(ref)]

    def shape_slice(self, op):
        x = op.operands[0]
        out = []
        for d, s, l, st in zip(x.shape, op.attrs["start_indices"], op.attrs["limit_indices"],
                               op.attrs["strides"]):
            out.append(symbolic.floordiv(l - s + st - 1, st))
        return [tuple(out)]

    def shape_real_dynamic_slice(self, op):
        x, start, limit, strides = op.operands
        s = self.require_sym(op, start, "start_indices")
        l = self.require_sym(op, limit, "limit_indices")
        st = self.require_sym(op, strides, "strides")
        return [tuple(symbolic.floordiv(b - a + c - 1, c) for a, b, c in zip(s, l, st))]

    def shape_select(self, op):
        return [self.elementwise(Op("select", op.operands[1:], [], loc=op.loc))]

    def shape_clamp(self, op):
        return [op.operands[1].shape]

    def shape_shape_assertion(self, op):
        return []

    # -- symbolic contents --------------------------------------------------------------------
    def sym_constant(self, op):
        v = op.attrs["value"]
        if v.dtype.kind in "iu" and v.size <= MAX_SYM_ELEMENTS:
            return tuple(int(x) for x in v.ravel())
        return None

    def sym_get_dimension_size(self, op):
        return (op.operands[0].shape[op.attrs["dimension"]],)

    def sym_reshape(self, op):
        return op.operands[0].sym

    sym_convert = sym_reshape
    sym_dynamic_reshape = sym_reshape

    def sym_concatenate(self, op):
        return tuple(d for v in op.operands for d in v.sym)

    def sym_broadcast_in_dim(self, op):
        x, r = op.operands[0], op.results[0]
        n = r.num_elements()
        if len(x.sym) == 1 and isinstance(n, int) and n <= MAX_SYM_ELEMENTS:
            return x.sym * n
        return None

    def sym_slice(self, op):
        x = op.operands[0]
        if x.rank != 1:
            return None
        (s,), (l,), (st,) = op.attrs["start_indices"], op.attrs["limit_indices"], op.attrs["strides"]
        return x.sym[s:l:st]

    def _sym_elementwise(self, op):
        fn = _INT_FNS[op.name]
        syms = [v.sym for v in op.operands]
        n = max(len(s) for s in syms)
        syms = [s * n if len(s) == 1 else s for s in syms]
        return tuple(fn(*args) for args in zip(*syms))

    sym_add = sym_subtract = sym_multiply = sym_divide = sym_remainder = _sym_elementwise
    sym_maximum = sym_minimum = sym_negate = _sym_elementwise

    def sym_select(self, op):
        pred, a, b = op.operands
        if pred.sym is None or len(pred.sym) != 1 or len(a.sym) != len(b.sym):
            return None
        p = pred.sym[0]
        fn = {"==": symbolic.prove_eq, ">=": symbolic.prove_ge, ">": symbolic.prove_gt,
              "<=": symbolic.prove_le, "<": symbolic.prove_lt}.get(p.cmp)
        decided = fn(p.lhs, p.rhs) if fn else None
        if decided is None:
            return None
        return a.sym if decided else b.sym


ELEMENTWISE = frozenset("""
    abs add and atan2 cbrt ceil compare convert cosine count_leading_zeros divide exponential
    exponential_minus_one floor is_finite log log_plus_one logistic maximum minimum multiply
    negate not or popcnt power remainder round_nearest_afz round_nearest_even rsqrt
    shift_left shift_right_arithmetic shift_right_logical sign sine sqrt subtract tan tanh xor
""".split())


def propagate_shapes(prog: Program) -> Program:
    """Pass: give every value a symbolic shape; track symbolic integer contents."""
    prop = _Propagator(prog)
    prop.run()
    prog.outputs = [dataclasses.replace(spec, shape=v.shape)
                    for spec, v in zip(prog.outputs, prog.body.results)]
    return prog
