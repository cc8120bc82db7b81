"""Symbolic dimensions: jdisc's small algebra of shape expressions.

A dimension is a ``Dim = int | Expr``. Whatever folds to a constant is a plain Python ``int``; an
``Expr`` is never constant. An ``Expr`` is kept in one normal form, built on construction::

    Expr = c1*m1 + c2*m2 + ... + c0     .terms = ((m1, c1), (m2, c2), ...)   .const = c0
    m    = a1^p1 * a2^p2 * ...          a Mono; .factors = ((a1, p1), (a2, p2), ...), p >= 1
    a    = var(name)                    an Atom; .op is "var", "floordiv", "mod", "max" or "min"
         | floordiv(x, y) | mod(x, y) | max(x, y) | min(x, y)          .args = (x, y): int | Expr

Coefficients are non-zero ints. Factors are sorted by atom text, terms by degree (descending)
then text; ``str`` prints exactly this form (``768*B*S``, ``B^2 - S + 3``) and
``dim_text.parse`` reads it.

Variables stand for dimension sizes: integers >= 0. Simplifications rely on that (so
``mod(mod(S, 8), 8) -> mod(S, 8)``) and on divisors being non-zero (so ``(B*S)//S -> B``), on
nothing else. Division and modulo follow Python's floor semantics everywhere.

Equality: ``==`` on Exprs means "same normal form", which makes Exprs good dict keys. True proves
the values equal; False proves nothing (``max(B, S) + min(B, S)`` equals ``B + S`` in another
form). Optimisations decide with ``prove_eq``, ``prove_ge``, ...: True or False only when proven,
else None. Ordering operators (``<`` ...) are deliberately not defined.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Union

from jdisc.dynamic_passes.algebra import intervals
from jdisc.dynamic_passes.algebra.intervals import Interval

Dim = Union[int, "Expr"]

_INF = math.inf
_NO_BOUNDS: Mapping[str, Interval] = MappingProxyType({})
_set = object.__setattr__  # how constructors fill the slots of these immutable classes


class _Frozen:
    """Immutable, with a hash computed once (each subclass defines __eq__ and __hash__)."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")


class Atom(_Frozen):
    """A variable, or floordiv/mod/max/min of two Dims. Identified by its printed ``text``."""

    __slots__ = ("op", "args", "text", "_hash")

    def __init__(self, op: str, args: tuple):
        text = args[0] if op == "var" else f"{op}({args[0]}, {args[1]})"
        for slot, value in zip(self.__slots__, (op, args, text, hash(text))):
            _set(self, slot, value)

    def __eq__(self, other):
        return self is other or (isinstance(other, Atom) and self.text == other.text)

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return Atom, (self.op, self.args)

    def __repr__(self):
        return self.text


class Mono(_Frozen):
    """A product of atoms, ``factors = ((atom, power), ...)`` sorted by atom text; () is 1."""

    __slots__ = ("factors", "key", "_hash")

    def __init__(self, factors: tuple):
        key = (-sum(p for _, p in factors), tuple((a.text, -p) for a, p in factors))
        for slot, value in zip(self.__slots__, (factors, key, hash(key))):
            _set(self, slot, value)

    def __eq__(self, other):
        return self is other or (isinstance(other, Mono) and self.key == other.key)

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return Mono, (self.factors,)


_ONE = Mono(())


class Expr(_Frozen):
    """A non-constant symbolic dimension in normal form (see the module docstring).

    Build Exprs with ``var``, ``dim_text.parse`` and ``+ - * // % **``; the constructor is internal.
    """

    __slots__ = ("terms", "const", "_hash", "_text")

    def __init__(self, terms: tuple, const: int):
        for slot, value in zip(self.__slots__, (terms, const, hash((terms, const)), None)):
            _set(self, slot, value)

    def __eq__(self, other):
        """Same normal form. Use prove_eq to decide anything."""
        if isinstance(other, Expr):
            return self is other or (self._hash == other._hash and self.const == other.const
                                     and self.terms == other.terms)
        return False if isinstance(other, int) else NotImplemented

    def __hash__(self):
        return self._hash

    def __str__(self):
        if self._text is None:
            text = join_terms(self, "*", lambda a, p: a.text if p == 1 else f"{a.text}^{p}")
            _set(self, "_text", text)
        return self._text

    __repr__ = __str__

    def __reduce__(self):      # rebuilt from its parts, hashed anew in the new process
        return Expr, (self.terms, self.const)

    def __add__(self, other): return _binary(add, self, other)
    def __radd__(self, other): return _binary(add, other, self)
    def __sub__(self, other): return _binary(sub, self, other)
    def __rsub__(self, other): return _binary(sub, other, self)
    def __mul__(self, other): return _binary(mul, self, other)
    def __rmul__(self, other): return _binary(mul, other, self)
    def __floordiv__(self, other): return _binary(floordiv, self, other)
    def __rfloordiv__(self, other): return _binary(floordiv, other, self)
    def __mod__(self, other): return _binary(mod, self, other)
    def __rmod__(self, other): return _binary(mod, other, self)
    def __neg__(self): return mul(self, -1)

    def __pow__(self, exponent):
        return power(self, exponent) if isinstance(exponent, int) else NotImplemented


# ---- coercion and polynomial arithmetic -------------------------------------------------------

def _coerce(x) -> Dim | None:
    if isinstance(x, Expr):
        return x
    try:
        return operator.index(x)  # ints, numpy ints; not floats
    except TypeError:
        return None


def as_dim(x) -> Dim:
    """x as a Dim (an int, a numpy int or an Expr); TypeError for anything else."""
    d = _coerce(x)
    if d is None:
        raise TypeError(f"a dimension must be an int or an Expr, got {x!r} ({type(x).__name__})")
    return d


def _binary(fn, a, b):
    a, b = _coerce(a), _coerce(b)
    return NotImplemented if a is None or b is None else fn(a, b)


def _items(x: Dim) -> tuple:
    """The (Mono, coefficient) pairs of x, the constant as (_ONE, const)."""
    return ((_ONE, x),) if isinstance(x, int) else x.terms + ((_ONE, x.const),)


def _build(poly: dict) -> Dim:
    """Normalise {Mono: coefficient} into an int or an Expr."""
    const = poly.pop(_ONE, 0)
    terms = [(m, c) for m, c in poly.items() if c]
    if not terms:
        return const
    terms.sort(key=lambda term: term[0].key)
    return Expr(tuple(terms), const)


def atom_expr(atom: Atom) -> Expr:
    """The Expr that is exactly `atom` (coefficient 1, power 1)."""
    return Expr(((Mono(((atom, 1),)), 1),), 0)


def single_atom(d: Dim) -> Atom | None:
    """The atom a when d is exactly a (coefficient 1, power 1, no constant), else None."""
    if isinstance(d, Expr) and d.const == 0 and len(d.terms) == 1 and d.terms[0][1] == 1:
        factors = d.terms[0][0].factors
        if len(factors) == 1 and factors[0][1] == 1:
            return factors[0][0]
    return None


def _mono_mul(m1: Mono, m2: Mono) -> Mono:
    if not m1.factors or not m2.factors:
        return m2 if not m1.factors else m1
    powers = dict(m1.factors)
    for atom, p in m2.factors:
        powers[atom] = powers.get(atom, 0) + p
    return Mono(tuple(sorted(powers.items(), key=lambda ap: ap[0].text)))


def _mono_div(m: Mono, d: Mono) -> Mono | None:
    """m / d when d divides m, else None."""
    if d is _ONE:
        return m
    powers = dict(m.factors)
    for atom, p in d.factors:
        if powers.get(atom, 0) < p:
            return None
        powers[atom] -= p
    factors = tuple((atom, powers[atom]) for atom, _ in m.factors if powers[atom])
    return Mono(factors) if factors else _ONE


def add(a: Dim, b: Dim) -> Dim:
    """a + b of two Dims (ints or Exprs, already coerced: see `as_dim`)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    poly = dict(_items(a))
    for m, c in _items(b):
        poly[m] = poly.get(m, 0) + c
    return _build(poly)


def sub(a: Dim, b: Dim) -> Dim:
    """a - b of two Dims."""
    return add(a, mul(b, -1))


def mul(a: Dim, b: Dim) -> Dim:
    """a * b of two Dims."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(a, int) or isinstance(b, int):  # scaling keeps the order of the terms
        k, e = (a, b) if isinstance(a, int) else (b, a)
        return Expr(tuple((m, c * k) for m, c in e.terms), e.const * k) if k else 0
    poly: dict = {}
    for ma, ca in _items(a):
        for mb, cb in _items(b):
            if ca and cb:
                m = _mono_mul(ma, mb)
                poly[m] = poly.get(m, 0) + ca * cb
    return _build(poly)


def power(a: Dim, exponent: int) -> Dim:
    """a ** exponent for an exponent >= 0."""
    if exponent < 0:
        raise ValueError(f"a dimension can only be raised to a power >= 0, got {exponent}")
    result: Dim = 1
    for _ in range(exponent):
        result = mul(result, a)
    return result


# ---- floordiv, mod, max, min ------------------------------------------------------------------

def floordiv(a, b) -> Dim:
    """floor(a / b), Python's ``//``."""
    return _divide("floordiv", as_dim(a), as_dim(b))


def mod(a, b) -> Dim:
    """a - b * floor(a / b), Python's ``%``."""
    return _divide("mod", as_dim(a), as_dim(b))


def _split(a: Dim, mono: Mono, coeff: int) -> tuple[Dim, Dim]:
    """(quotient, rest) with a == coeff*mono*quotient + rest, pulling out the exact multiples."""
    quotient, rest = {}, {}
    for m, c in _items(a):
        q = _mono_div(m, mono)
        if q is not None and c % coeff == 0:
            quotient[q] = c // coeff
        elif m is _ONE and mono is _ONE:  # the constant over a constant: keep 0 <= rest < coeff
            quotient[m], rest[m] = divmod(c, coeff)
        else:
            rest[m] = c
    return _build(quotient), _build(rest)


def _divide(op: str, a: Dim, b: Dim) -> Dim:
    if isinstance(b, int):
        if isinstance(a, int):
            return a // b if op == "floordiv" else a % b
        if b == 0:
            raise ZeroDivisionError(f"{op}({a}, 0)")
        if b < 0:  # floor(a / -c) == floor(-a / c);  a mod -c == -((-a) mod c)
            result = _divide(op, mul(a, -1), -b)
            return result if op == "floordiv" else mul(result, -1)
        quotient, rest = _split(a, _ONE, b)
        lo, hi = bounds(rest)
        if -_INF < lo and hi < _INF and lo // b == hi // b:  # rest stays in one block of b
            return add(quotient, lo // b) if op == "floordiv" else sub(rest, b * (lo // b))
        inner = single_atom(rest)
        if op == "floordiv" and inner is not None and inner.op == "floordiv" \
                and isinstance(inner.args[1], int):  # floor(floor(x / c1) / c2) == floor(x / (c1*c2))
            return add(quotient, floordiv(inner.args[0], inner.args[1] * b))
    else:
        if isinstance(a, int) and a == 0:
            return 0
        if len(b.terms) == 1 and b.const == 0:
            quotient, rest = _split(a, *b.terms[0])
        else:
            k = _exact_multiple(a, b)
            quotient, rest = (k, 0) if k is not None else (0, a)
        if isinstance(rest, int) and rest == 0:
            return quotient if op == "floordiv" else 0
        if prove_ge(rest, 0) is True and prove_gt(b, rest) is True:  # 0 <= rest < b
            return quotient if op == "floordiv" else rest
    atom = atom_expr(Atom(op, (rest, b)))
    return add(quotient, atom) if op == "floordiv" else atom


def _exact_multiple(a: Dim, b: Expr) -> int | None:
    """k when a == k*b in normal form, else None."""
    if isinstance(a, int):
        return None
    mono, coeff = b.terms[0]
    ca = dict(a.terms).get(mono, 0)
    if ca == 0 or ca % coeff:
        return None
    diff = sub(a, mul(b, ca // coeff))
    return ca // coeff if isinstance(diff, int) and diff == 0 else None


def dmax(a, b) -> Dim:
    """max(a, b); folds when one side is provably >= the other (variables >= 0)."""
    return _extremum("max", as_dim(a), as_dim(b))


def dmin(a, b) -> Dim:
    """min(a, b); folds when one side is provably <= the other (variables >= 0)."""
    return _extremum("min", as_dim(a), as_dim(b))


def _extremum(op: str, a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b) if op == "max" else min(a, b)
    lo, hi = bounds(sub(a, b))
    if lo >= 0:  # a >= b everywhere
        return a if op == "max" else b
    if hi <= 0:  # a <= b everywhere
        return b if op == "max" else a
    x, y = sorted((a, b), key=lambda d: (isinstance(d, int), str(d)))
    return atom_expr(Atom(op, (x, y)))


# an atom's op -> the function that builds it (normalised) from its two Dims
BUILDERS = {"floordiv": floordiv, "mod": mod, "max": dmax, "min": dmin}
_APPLY = {"floordiv": operator.floordiv, "mod": operator.mod, "max": max, "min": min}


# ---- queries ----------------------------------------------------------------------------------

def var(name: str) -> Expr:
    """The dimension variable ``name`` (an identifier)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a dimension variable needs an identifier for a name, got {name!r}")
    return atom_expr(Atom("var", (name,)))


def prod(dims) -> Dim:
    """The product of some dims (1 for none): an element count."""
    return _prod(tuple(dims))


@functools.lru_cache(maxsize=4096)    # the same shapes are counted again and again
def _prod(dims: tuple) -> Dim:
    out: Dim = 1
    for d in dims:
        out = mul(as_dim(out), as_dim(d))
    return out


# the name of the prover (here, or a ShapeConstraints method) of each comparison
PROVERS = {"==": "prove_eq", ">=": "prove_ge", ">": "prove_gt", "<=": "prove_le", "<": "prove_lt"}


def is_const(d) -> bool:
    return isinstance(as_dim(d), int)


def as_int(d) -> int | None:
    d = as_dim(d)
    return d if isinstance(d, int) else None


def evaluate(d, env: Mapping[str, int]) -> int:
    """The value of d with the variables bound by env; KeyError names a missing variable."""
    d = as_dim(d)
    if isinstance(d, int):
        return d
    total = d.const
    for mono, coeff in d.terms:
        for atom, p in mono.factors:
            if atom.op == "var":
                value = operator.index(env[atom.args[0]])
            else:
                value = _APPLY[atom.op](evaluate(atom.args[0], env), evaluate(atom.args[1], env))
            coeff *= value ** p
        total += coeff
    return total


def variables(d) -> frozenset[str]:
    d = as_dim(d)
    names: set[str] = set()
    for mono, _ in d.terms if isinstance(d, Expr) else ():
        for atom, _ in mono.factors:
            if atom.op == "var":
                names.add(atom.args[0])
            else:
                names.update(variables(atom.args[0]), variables(atom.args[1]))
    return frozenset(names)


def substitute(d, mapping: Mapping[str, Dim]) -> Dim:
    """d with the variables in mapping replaced by their Dims, renormalised."""
    d = as_dim(d)
    if isinstance(d, int):
        return d
    total: Dim = d.const
    for mono, coeff in d.terms:
        term: Dim = coeff
        for atom, p in mono.factors:
            if atom.op == "var":
                name = atom.args[0]
                value = as_dim(mapping[name]) if name in mapping else atom_expr(atom)
            else:
                x, y = (substitute(arg, mapping) for arg in atom.args)
                value = BUILDERS[atom.op](x, y)
            term = mul(term, power(value, p))
        total = add(total, term)
    return total


# ---- bounds and three-valued comparisons ------------------------------------------------------

def bounds(d, var_bounds: Mapping[str, Interval] = _NO_BOUNDS) -> Interval:
    """A sound interval (lo, hi) containing d; variables range over var_bounds, else [0, inf).
    Intervals lose the correlation between a term and an extremum that contains it (`a -
    min(a, 2)` is >= 0, its interval says >= -2), so a term c*R*min(x, y) that can only raise
    the bound (c < 0 for lo, c > 0 for hi, R >= 0) is also read as c*R*x and as c*R*y, each of
    which is on the right side of it (likewise for max), and the tightest bound is kept."""
    return _bounds(as_dim(d), var_bounds, {})


def _bounds(d: Dim, var_bounds: Mapping[str, Interval], memo: dict) -> Interval:
    if isinstance(d, int):
        return d, d
    lo, hi = _poly_bounds(d, var_bounds, memo)
    for want_lo in (True, False):
        for pick in (0, 1):
            picked = _pick_extrema(d, pick, want_lo, var_bounds, memo)
            if picked is None:
                break
            if want_lo:
                lo = max(lo, _poly_bounds(picked, var_bounds, memo)[0])
            else:
                hi = min(hi, _poly_bounds(picked, var_bounds, memo)[1])
    return lo, hi


def _poly_bounds(d: Dim, var_bounds: Mapping[str, Interval], memo: dict) -> Interval:
    """Interval arithmetic over d's terms."""
    if isinstance(d, int):
        return d, d
    lo = hi = d.const
    for mono, coeff in d.terms:
        m = _mono_bounds(mono.factors, var_bounds, memo)
        if coeff > 0:
            lo, hi = lo + coeff * m[0], hi + coeff * m[1]
        else:
            lo, hi = lo + coeff * m[1], hi + coeff * m[0]
    return lo, hi


def _mono_bounds(factors, var_bounds: Mapping[str, Interval], memo: dict) -> Interval:
    m = (1, 1)
    for atom, p in factors:
        if atom not in memo:    # shared atoms are bounded once per query
            memo[atom] = _atom_bounds(atom, var_bounds, memo)
        m = intervals.mul(m, intervals.pow(memo[atom], p))
    return m


def _pick_extrema(d: Expr, pick: int, want_lo: bool, var_bounds: Mapping[str, Interval],
                  memo: dict) -> Dim | None:
    """d with every term c*R*min(x, y) or c*R*max(x, y) that is >= c*R*(x, y)[pick] (for a
    lower bound; <= for an upper one) written so; None when d has no such term."""
    total: Dim = d.const
    changed = False
    for mono, coeff in d.terms:
        raises = (coeff < 0) == want_lo      # min(x, y) <= x: c*min >= c*x when c < 0
        for i, (atom, p) in enumerate(mono.factors):
            if p == 1 and (atom.op == "min" and raises or atom.op == "max" and not raises):
                rest = mono.factors[:i] + mono.factors[i + 1:]
                if _mono_bounds(rest, var_bounds, memo)[0] >= 0:
                    value = mul(mul(coeff, _build({Mono(rest): 1})), as_dim(atom.args[pick]))
                    total, changed = add(total, value), True
                    break
        else:
            total = add(total, _build({mono: coeff}))
    return total if changed else None


def _atom_bounds(atom: Atom, var_bounds: Mapping[str, Interval], memo: dict) -> Interval:
    if atom.op == "var":
        lo, hi = var_bounds.get(atom.args[0], (0, _INF))
        return lo, hi
    x, y = (_bounds(as_dim(arg), var_bounds, memo) for arg in atom.args)
    if atom.op == "max":
        return max(x[0], y[0]), max(x[1], y[1])
    if atom.op == "min":
        return min(x[0], y[0]), min(x[1], y[1])
    return intervals.floordiv(x, y) if atom.op == "floordiv" else intervals.mod(x, y)


def prove_eq(a, b, var_bounds: Mapping[str, Interval] = _NO_BOUNDS) -> bool | None:
    """True: a == b everywhere in bounds; False: a != b everywhere in bounds; None: unknown."""
    diff = sub(as_dim(a), as_dim(b))
    if isinstance(diff, int):
        return diff == 0
    lo, hi = bounds(diff, var_bounds)
    if lo > 0 or hi < 0:
        return False
    return True if lo == hi == 0 else None


def prove_ge(a, b, var_bounds: Mapping[str, Interval] = _NO_BOUNDS) -> bool | None:
    """True: a >= b everywhere in bounds; False: a < b everywhere in bounds; None: unknown."""
    lo, hi = bounds(sub(as_dim(a), as_dim(b)), var_bounds)
    return True if lo >= 0 else False if hi < 0 else None


def prove_gt(a, b, var_bounds: Mapping[str, Interval] = _NO_BOUNDS) -> bool | None:
    lo, hi = bounds(sub(as_dim(a), as_dim(b)), var_bounds)
    return True if lo > 0 else False if hi <= 0 else None


def prove_le(a, b, var_bounds: Mapping[str, Interval] = _NO_BOUNDS) -> bool | None:
    return prove_ge(b, a, var_bounds)


def prove_lt(a, b, var_bounds: Mapping[str, Interval] = _NO_BOUNDS) -> bool | None:
    return prove_gt(b, a, var_bounds)


# ---- text ----------------------------------------------------------------------------------------

def join_terms(e: Expr, times: str, factor: Callable[[Atom, int], str]) -> str:
    """``2*B + 4`` style text of e, with `times` between factors and `factor` rendering each."""
    pieces = []
    for mono, coeff in e.terms:
        body = times.join(factor(atom, p) for atom, p in mono.factors)
        pieces.append((coeff < 0, body if abs(coeff) == 1 else f"{abs(coeff)}{times}{body}"))
    if e.const:
        pieces.append((e.const < 0, str(abs(e.const))))
    text = ("-" if pieces[0][0] else "") + pieces[0][1]
    for negative, piece in pieces[1:]:
        text += (" - " if negative else " + ") + piece
    return text
