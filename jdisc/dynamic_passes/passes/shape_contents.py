"""Symbolic contents of small integer tensors (shape computations): `Value.sym`, one Dim (or
a Pred, a bool, a HostValue) per element, evaluated op by op during shape propagation
(shape_prop.py's propagator inherits SymbolicContents: `sym_<op>` per StableHLO op)."""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.host_values import HostValue, Pred, is_symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.program import Op, Value

MAX_SYM_ELEMENTS = 16   # integer tensors up to this size have their contents tracked

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


class SymbolicContents:
    """The `sym_<op>` rules; `decide(pred, op)` comes from the propagator."""

    def sym_constant(self, op):
        v = op.attrs["value"]
        if v.dtype.kind in "iu" and v.size <= MAX_SYM_ELEMENTS:
            return tuple(int(x) for x in v.ravel())
        return None

    def sym_shape_of(self, op):
        return op.operands[0].shape

    def sym_shape_broadcast(self, op):
        """The broadcast of shape vectors (their broadcastability is checked by
        cstr_broadcastable): per right-aligned axis, the size that is not 1."""
        shapes = [v.sym for v in op.operands]
        rank = max(len(s) for s in shapes)
        out = []
        for axis in range(rank):
            dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
            size = dims[0]
            for d in dims[1:]:
                size = _broadcast_size(size, d)
            out.append(size)
        return tuple(out)

    def sym_get_dimension_size(self, op):
        return (op.operands[0].shape[op.attrs["dimension"]],)

    def sym_reshape(self, op):
        return op.operands[0].sym

    def sym_convert(self, op):
        if op.results[0].dtype == "i1" or op.operands[0].dtype == "i1" and \
                op.operands[0].sym is None:
            return None
        return tuple(int(d) if isinstance(d, bool) else
                     HostValue("select", (d, 1, 0)) if isinstance(d, Pred) else d
                     for d in op.operands[0].sym)
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
        syms = [v.sym for v in op.operands]
        n = max(len(s) for s in syms)
        syms = [s * n if len(s) == 1 else s for s in syms]
        return tuple(self._int_op(op.name, args) for args in zip(*syms))

    def _int_op(self, name: str, args: tuple):
        """Symbolic result of an integer op on dims; a HostValue where that is not sound."""
        if not all(is_symbolic(a) for a in args):
            return HostValue(name, tuple(args))
        if name in ("divide", "remainder"):
            a, b = args
            # StableHLO truncates; floor semantics agree only for a >= 0 and b > 0
            if not (symbolic.prove_ge(a, 0) and symbolic.prove_gt(b, 0)):
                return HostValue(name, tuple(args))
        return _INT_FNS[name](*args)

    def sym_clamp(self, op):
        """min(max(x, lo), hi), elementwise (a scalar lo or hi applies to every element):
        how jax clamps the start of a dynamic slice into its operand."""
        syms = [v.sym for v in op.operands]
        n = max(len(s) for s in syms)
        lo, x, hi = (s * n if len(s) == 1 else s for s in syms)
        return tuple(self._int_op("minimum", (self._int_op("maximum", (xi, li)), hi_))
                     for li, xi, hi_ in zip(lo, x, hi))

    sym_add = sym_subtract = sym_multiply = sym_divide = sym_remainder = _sym_elementwise
    sym_maximum = sym_minimum = sym_negate = _sym_elementwise

    def sym_abs(self, op):
        return tuple(d if is_symbolic(d) and symbolic.prove_ge(d, 0) else HostValue("abs", (d,))
                     for d in op.operands[0].sym)

    def sym_select(self, op):
        pred, a, b = op.operands
        if pred.sym is None or len(pred.sym) != 1 or len(a.sym) != len(b.sym):
            return None
        p = pred.sym[0]
        if isinstance(p, bool):
            return a.sym if p else b.sym
        return tuple(floor_select(p, x, y) or HostValue("select", (p, x, y))
                     for x, y in zip(a.sym, b.sym))

    def sym_sign(self, op):
        out = []
        for d in op.operands[0].sym:
            if self.decide(Pred(">=", d, 1), op):
                out.append(1)
            elif self.decide(Pred("<=", d, -1), op):
                out.append(-1)
            elif self.decide(Pred("==", d, 0), op):
                out.append(0)
            else:
                out.append(HostValue("sign", (d,)))
        return tuple(out)


def data_start_sizes(op: Op, bind: Callable[[HostValue], Dim]) -> tuple | None:
    """Slice sizes of a `real_dynamic_slice` whose start is data and whose limit is that start
    plus sizes known symbolically, with unit strides (how jax and chlo index with a loop
    counter: `start + 1`, `clamp(...) + sizes`), else None. A size the launcher computes (a
    HostValue: `floordiv` of a value that may be negative) becomes a dim through `bind`."""
    x, start, limit, strides = op.operands
    if start.sym is not None or strides.sym is None or any(s != 1 for s in strides.sym):
        return None
    sizes = []
    for j in range(x.rank):
        (b0, o0), (b1, o1) = _affine(start, j), _affine(limit, j)
        if b0 is None or b0 != b1:
            return None
        sizes.append(_host_op("subtract", o1, o0))
    return tuple(bind(s) if isinstance(s, HostValue) else s for s in sizes)


def _host_op(name: str, a, b):
    """a + b or a - b: a Dim when both are, else the launcher's computation."""
    if is_symbolic(a) and is_symbolic(b):
        return a + b if name == "add" else a - b
    return HostValue(name, (a, b))


def _affine(v: Value, j: int, depth: int = 0):
    """Element j of an integer vector as (opaque base, symbolic offset): a known element is
    (None, value); `add` sums offsets when one side is known; `concatenate` and `reshape`
    forward to the element they hold; anything else is its own base."""
    if v.sym is not None and not isinstance(v.sym[j if len(v.sym) > 1 else 0], (bool, Pred)):
        return None, v.sym[j] if len(v.sym) > 1 else v.sym[0]
    p = v.producer
    if p is None or depth > 16:
        return (v.id, j), 0
    if p.name == "reshape" and p.operands[0].num_elements() == 1:
        return _affine(p.operands[0], 0, depth + 1)
    if p.name == "concatenate" and p.attrs.get("dimension") == 0 and v.rank == 1:
        at = 0
        for x in p.operands:
            if not isinstance(x.shape[0], int):
                break
            if j < at + x.shape[0]:
                return _affine(x, j - at, depth + 1)
            at += x.shape[0]
    if p.name == "add" and v.rank <= 1:
        a, b = (_affine(x, j if x.rank else 0, depth + 1) for x in p.operands)
        if a[0] is None or b[0] is None:
            return (a[0] if a[0] is not None else b[0]), _host_op("add", a[1], b[1])
    return (v.id, j), 0


def _broadcast_size(a, b):
    """The size two broadcastable sizes broadcast to: the other one where one is 1, else either
    (they are equal); min(max(a, b), a * b) says so in one expression (0 and 1 give 0)."""
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if symbolic.prove_eq(a, b) is True:
        return a
    return symbolic.dmin(symbolic.dmax(a, b), a * b)


def floor_select(p, x, y) -> Dim | None:
    """`a // b` or `a % b` when `select(p, x, y)` is how jnp.floor_divide or jnp.remainder
    lowered it (a truncating divide or remainder, then a select that corrects it where the
    signs differ), else None. jax computes the floordiv of symbolic dims this way (a strided
    pool's or convolution's output size, `(H - 1) // 2 + 1`); its dividend may be negative
    (H = 0), so its parts alone are host values, but the whole is floor division, which is
    what jdisc's `floordiv` and `mod` mean for any sign. The divisor's sign must be proven."""
    if not (isinstance(y, HostValue) and y.op in ("divide", "remainder") and
            isinstance(x, HostValue) and isinstance(p, Pred) and p.cmp == "and"):
        return None
    a, b = y.args
    if not (is_symbolic(a) and is_symbolic(b)):
        return None
    if symbolic.prove_gt(b, 0) is True:
        sign_b = 1
    elif symbolic.prove_lt(b, 0) is True:
        sign_b = -1
    else:
        return None
    rem = HostValue("remainder", (a, b))
    if y.op == "divide":    # select(sign(a) != sign(b) and rem(a, b) != 0, q - 1, q)
        want = {Pred("!=", HostValue("sign", (a,)), sign_b), Pred("!=", rem, 0)}
        result, fix = symbolic.floordiv(a, b), HostValue("subtract", (y, 1))
    else:                   # select((rem < 0) != (b < 0) and rem != 0, rem + b, rem)
        want = {Pred("!=", Pred("<", rem, 0), sign_b < 0), Pred("!=", rem, 0)}
        result, fix = symbolic.mod(a, b), HostValue("add", (y, b))
    return result if x == fix and len(p.lhs) == 2 and set(p.lhs) == want else None
