"""Proving `d >= 0` where interval bounds alone cannot (symbolic.bounds loses the correlation
between a term and the floor or min that contains it): sound relaxations, each linear in the
size of d. Used by ShapeConstraints (constraints.py) after its interval checks fail."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from jdisc.dynamic_passes.algebra.symbolic import (Atom, Dim, Expr, Interval, add, as_dim,
                                                   atom_expr, bounds, mul, power, substitute, var,
                                                   variables)

_INF = math.inf
_NO_BOUNDS: Mapping[str, Interval] = MappingProxyType({})


def nonneg_relaxed(d, var_bounds: Mapping[str, Interval] = _NO_BOUNDS,
                   atom_lower: Mapping[Atom, int] = MappingProxyType({})) -> bool:
    """d >= 0, proven after three sound relaxations that interval bounds cannot make alone.
    1. Every term c*floordiv(e, m) (constant m > 0) becomes its lower bound, c*(e - m + 1)/m
       for c > 0 or c*e/m for c < 0 (the whole of d scaled by the common m, so that it stays an
       integer polynomial): a buffer rounded up to m bytes, m*floordiv(n + m - 1, m), holds n.
    2. Every atom with a known lower bound lo != 0 (atom_lower, e.g. `min(a, 3) >= 1`) is
       written lo + t with t >= 0: `a*min(a, 3) - a` reads `a*t`.
    3. So is every variable with a finite lower bound lo != 0: `a^2 - a` for a >= 1 reads
       `t^2 + t`.
    4. A term c*R*min(x, y) with c < 0 and R >= 0 is at least c*R*x (and c*R*y); c*R*max(x, y)
       with c > 0 is at least c*R*x: `4a^2 - 4a*min(a, 2)` (a*(a - min(a, 2)) expanded) reads
       `4a^2 - 4a^2`. Each such atom is replaced by one of its two operands, every atom by its
       first and then every atom by its second (two more tries, each linear).
    Linear in the size of d."""
    d = as_dim(d)
    if isinstance(d, int):
        return d >= 0
    # floors with positive coefficients first: a term a negative one cancels (the bytes n
    # against m*floordiv(n + m - 1, m)) must not be relaxed on its own first
    once = _relax_floors(d, positive=True)
    for relaxed in (once, _relax_floors(once, positive=False)):
        if _shifted_nonneg(relaxed, var_bounds, atom_lower):
            return True
        for pick in (0, 1):
            lowered = _relax_extrema(relaxed, pick, var_bounds)
            if lowered is not None and _shifted_nonneg(lowered, var_bounds, atom_lower):
                return True
    return False


def _relax_extrema(d: Dim, pick: int, var_bounds: Mapping[str, Interval]) -> Dim | None:
    """d with each term c*R*min(x, y) (c < 0) or c*R*max(x, y) (c > 0), R >= 0 by interval
    bounds and the atom to the first power, lowered to c*R*(x, y)[pick]; None if no term
    changes."""
    if isinstance(d, int):
        return None
    total: Dim = d.const
    changed = False
    for mono, coeff in d.terms:
        term: Dim = coeff
        rest: Dim = 1
        target = None
        for atom, p in mono.factors:
            if target is None and p == 1 and (atom.op == "min" and coeff < 0 or
                                              atom.op == "max" and coeff > 0):
                target = atom
                continue
            rest = mul(rest, power(atom_expr(atom), p))
        if target is not None and bounds(rest, var_bounds)[0] >= 0:
            term = mul(mul(coeff, rest), as_dim(target.args[pick]))
            changed = True
        else:
            term = mul(coeff, _mono_value(mono))
        total = add(total, term)
    return total if changed else None


def _mono_value(mono) -> Dim:
    value: Dim = 1
    for atom, p in mono.factors:
        value = mul(value, power(atom_expr(atom), p))
    return value


def _relax_floors(d: Dim, positive: bool) -> Dim:
    """d scaled by the lcm m of the divisors, each term c*floordiv(e, m) of the given sign
    replaced by its lower bound (see nonneg_relaxed)."""
    if isinstance(d, int):
        return d
    floors = [(coeff, mono.factors[0][0]) for mono, coeff in d.terms
              if len(mono.factors) == 1 and mono.factors[0][1] == 1
              and mono.factors[0][0].op == "floordiv" and (coeff > 0) == positive
              and isinstance(mono.factors[0][0].args[1], int) and mono.factors[0][0].args[1] > 0]
    scale = math.lcm(*(atom.args[1] for _, atom in floors)) if floors else 1
    relaxed: Dim = scale * d
    for coeff, atom in floors:
        e, m = atom.args
        lower = e - (m - 1) if coeff > 0 else e            # m*floordiv(e, m) >= lower
        relaxed = relaxed - (scale * coeff) * atom_expr(atom) + (scale // m) * coeff * lower
    return relaxed


def _shifted_nonneg(relaxed: Dim, var_bounds: Mapping[str, Interval],
                    atom_lower: Mapping[Atom, int]) -> bool:
    if isinstance(relaxed, int):
        return relaxed >= 0
    shifted_bounds = dict(var_bounds)
    atoms = {atom: lo for atom, lo in atom_lower.items() if lo not in (0, -_INF)}
    if atoms and not isinstance(relaxed, int):
        relaxed = _shift_atoms(relaxed, atoms, shifted_bounds)
    shift = {}
    for name in variables(relaxed):
        lo, hi = var_bounds.get(name, (0, _INF))
        if lo not in (0, -_INF):
            fresh = f"{name}__from{'m' if lo < 0 else ''}{abs(lo)}"
            shift[name] = lo + var(fresh)
            shifted_bounds[fresh] = (0, hi - lo)
    if shift:
        try:
            relaxed = substitute(relaxed, shift)
        except ZeroDivisionError:   # a divisor that is 0 wherever the bounds hold: no proof
            return False
    return bounds(relaxed, shifted_bounds)[0] >= 0


def _shift_atoms(d: Expr, lower: Mapping[Atom, int], var_bounds: dict) -> Dim:
    """d with each top-level atom of `lower` written lo + t, t >= 0 a fresh variable (added
    to var_bounds)."""
    fresh: dict[Atom, Dim] = {}
    total: Dim = d.const
    for mono, coeff in d.terms:
        term: Dim = coeff
        for atom, p in mono.factors:
            if atom in lower:
                if atom not in fresh:
                    name = f"atom__{len(fresh)}"
                    var_bounds[name] = (0, _INF)
                    fresh[atom] = lower[atom] + var(name)
                value = fresh[atom]
            else:
                value = atom_expr(atom)
            term = mul(term, power(value, p))
        total = add(total, term)
    return total
