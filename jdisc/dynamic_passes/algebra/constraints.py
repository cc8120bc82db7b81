"""Shape constraints: what the compiler may assume about dimension variables.

The host launcher verifies every `Check` in `prog.checks` before any kernel runs, so when kernels
run all of them hold. `ShapeConstraints` collects them as facts and answers three-valued queries
under those facts: True or False only when proven, None when unknown.

Facts kept (every one canonical: substituted variables never appear in the others):
* substitutions `v -> e` from equalities that can be solved for a variable. `8*B*S == 8*X`
  divides out 8 and gives `X -> B*S`; `a == b` keeps the variable bound first (the inputs' order,
  then the name) and replaces the other. Equalities that cannot be solved (`(x - 1)*(x - o) == 0`,
  a broadcast's "1 or equal") are kept verbatim and only matched exactly;
* intervals of single variables (`seq >= 16`, `seq - 16 >= 0`); other `e >= 0` facts verbatim;
* divisibility: `mod(v, k) == 0`, `k*floordiv(v, k) == v`, or `add_divisible`.

Variables are sizes (>= 0), as in `symbolic`, except those declared `signed`: the launcher's
derived values `_hN`, which may be negative. A derived value's definition becomes an equality
when it can be expressed soundly as a Dim (`select` on a decidable predicate, `sign`, ...).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.host_values import HostValue, Pred
from jdisc.dynamic_passes.algebra.relaxed import nonneg_relaxed
from jdisc.dynamic_passes.algebra.symbolic import Dim, Expr

_INF = math.inf
_HOST_ARITH = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
               "negate": operator.neg}
_HOST_SIZE_OPS = {"maximum": symbolic.dmax, "minimum": symbolic.dmin,
                  "divide": symbolic.floordiv, "remainder": symbolic.mod}


def _as_dim(x) -> Dim:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise TypeError(f"a dimension must be an int or an Expr, got {x!r}")
    return operator.index(x)


def _lone_factor(e: Dim):
    """(atom, coefficient) when e == coefficient*atom (power 1, no constant), else None."""
    if isinstance(e, Expr) and e.const == 0 and len(e.terms) == 1:
        mono, c = e.terms[0]
        if len(mono.factors) == 1 and mono.factors[0][1] == 1:
            return mono.factors[0][0], c
    return None


def _linear_var(e: Dim):
    """(name, c, k) when e == c*name + k, else None."""
    if isinstance(e, Expr) and len(e.terms) == 1:
        found = _lone_factor(e - e.const)
        if found is not None and found[0].op == "var":
            return found[0].args[0], found[1], e.const
    return None


def _normalize(e: Expr) -> tuple[int, Expr]:
    """(g, core) with e == g*core, g > 0 the gcd of every coefficient and the constant."""
    g = math.gcd(e.const, *(c for _, c in e.terms))
    return g, symbolic.floordiv(e, g)      # exact: g divides every coefficient


def _signed_core(e: Expr) -> Expr:
    """e divided by its content, its first coefficient made positive (the same `== 0` fact)."""
    core = _normalize(e)[1]
    return -core if core.terms[0][1] < 0 else core


class ShapeConstraints:
    """Facts about dimension variables and sound three-valued queries under them."""

    def __init__(self, order: Sequence[str] = (), signed: Iterable[str] = ()):
        self._order = {name: i for i, name in enumerate(order)}
        self._signed = frozenset(signed)
        self._subst: dict[str, Dim] = {}              # variable -> canonical Dim
        self._bounds: dict[str, tuple] = {}           # variable -> (lo, hi)
        self._ge: list[Expr] = []                     # e >= 0, beyond single variables
        self._div_atoms: dict[str, tuple] = {}        # atom text -> (Expr, k): k divides it
        self._div_exprs: dict[Expr, int] = {}         # normalised e -> k: k divides it
        self._eqs: list[Expr] = []                    # e == 0 that solve for no variable
        self._proven: dict[Dim, bool] = {}            # _nonneg's answers under these facts

    @staticmethod
    def from_program(prog) -> "ShapeConstraints":
        """Every `prog.checks` fact, every derived value's definition it can express, and
        every input dimension variable >= 0."""
        signed = [name for name, _ in prog.derived]
        sc = ShapeConstraints(prog.dim_vars, signed)
        for c in prog.checks:
            sc.add_check(c.lhs, c.cmp, c.rhs)
        pending = list(prog.derived)
        memo: dict = {}     # node id -> result under the facts so far (trees share subtrees)
        while pending:      # a definition may become expressible once others are known
            left = []
            for name, h in pending:
                d = _host_dim(sc, h, memo)
                if d is None:
                    left.append((name, h))
                else:
                    sc.add_equal(symbolic.var(name), d)
                    memo.clear()
            if len(left) == len(pending):
                break
            pending = left
        return sc

    # ---- facts ------------------------------------------------------------------------------

    def add_check(self, lhs, cmp: str, rhs) -> None:
        """The fact `lhs cmp rhs`; `!=` and non-dimension operands are ignored."""
        try:
            lhs, rhs = _as_dim(lhs), _as_dim(rhs)
        except TypeError:
            return
        if cmp == "==":
            self.add_equal(lhs, rhs)
        elif cmp in (">=", ">", "<=", "<"):         # lhs - rhs in [lo, hi]
            self.add_bound(lhs - rhs, {">=": 0, ">": 1}.get(cmp), {"<=": 0, "<": -1}.get(cmp))

    def add_equal(self, a: Dim, b: Dim) -> None:
        self._proven.clear()
        self._equate(self.canonical(_as_dim(a) - _as_dim(b)))
        self._proven.clear()

    def add_bound(self, d: Dim, lo=None, hi=None) -> None:
        """lo <= d <= hi (either may be None)."""
        self._proven.clear()
        d = self.canonical(d)
        if lo is not None and lo > -_INF:
            self._add_nonneg(d - lo)
        if hi is not None and hi < _INF:
            self._add_nonneg(hi - d)
        self._proven.clear()

    def add_divisible(self, d: Dim, k: int) -> None:
        """d % k == 0."""
        d, k = self.canonical(d), abs(k)
        if isinstance(d, int) or k <= 1:
            return
        g, core = _normalize(d)
        k //= math.gcd(k, g)                   # g*core % k == 0  =>  core % (k / gcd(k, g)) == 0
        if k <= 1:
            return
        lone = _lone_factor(core)
        if lone is not None:
            _, old = self._div_atoms.get(lone[0].text, (None, 1))
            self._div_atoms[lone[0].text] = (core, math.lcm(old, k))
        else:
            core = _signed_core(core)
            self._div_exprs[core] = math.lcm(self._div_exprs.get(core, 1), k)
        self._proven.clear()

    def _equate(self, e: Dim) -> None:
        """The fact e == 0, e canonical."""
        e = self.canonical(e)
        if isinstance(e, int) or e.const % math.gcd(*(c for _, c in e.terms)):
            return      # trivially true, or contradictory (the launcher rejects every input)
        e = _signed_core(e)
        solved = self._solve(e)
        if solved is not None:
            return self._bind(*solved)
        lone = _lone_factor(e)
        if lone is not None and lone[0].op == "mod" and isinstance(lone[0].args[1], int):
            return self.add_divisible(lone[0].args[0], lone[0].args[1])    # mod(x, k) == 0
        for mono, c in e.terms:                # m*(x - k*floordiv(x, k)) == 0
            atom = mono.factors[0][0] if len(mono.factors) == 1 else None
            if atom is not None and atom.op == "floordiv" and isinstance(atom.args[1], int) \
                    and mono.factors[0][1] == 1 and c % atom.args[1] == 0:
                x, k = atom.args
                if e - (-c // k) * (x - k * symbolic.floordiv(x, k)) == 0:
                    return self.add_divisible(x, k)
        if e not in self._eqs:
            self._eqs.append(e)

    def _solve(self, e: Expr):
        """(v, Dim) with e == 0 <=> v == Dim, for the variable bound last; None if none."""
        uses: dict[str, int] = {}              # occurrences of each variable, atoms included
        linear: dict[str, int] = {}            # variables that are a term of their own
        for mono, c in e.terms:
            for atom, _ in mono.factors:
                names = [atom.args[0]] if atom.op == "var" else symbolic.variables(
                    atom.args[0]) | symbolic.variables(atom.args[1])
                for name in names:
                    uses[name] = uses.get(name, 0) + 1
            if len(mono.factors) == 1 and mono.factors[0][1] == 1 \
                    and mono.factors[0][0].op == "var":
                linear[mono.factors[0][0].args[0]] = c
        candidates = []
        for name, c in linear.items():
            rest = e - c * symbolic.var(name)
            has_signed = bool(symbolic.variables(rest) & self._signed)
            # never put a maybe-negative variable where symbolic assumes sizes
            if abs(c) == 1 and uses[name] == 1 and not (has_signed and name not in self._signed):
                candidates.append((name, -rest * c))
            elif uses[name] == 1:               # c*v == -rest: at least c divides rest
                self.add_divisible(rest, c)
        return max(candidates, key=lambda nv: self._rank(nv[0]), default=None)

    def _bind(self, name: str, value: Dim) -> None:
        """Substitute name -> value everywhere, then replay the other facts through it."""
        self._subst[name] = value
        self._subst = {n: self._rewrite(v) for n, v in self._subst.items()}
        lo, hi = self._bounds.pop(name, self._default_bounds(name))
        div_atoms, div_exprs = self._div_atoms, self._div_exprs
        ge, eqs = self._ge, self._eqs
        self._div_atoms, self._div_exprs, self._ge, self._eqs = {}, {}, [], []
        for d, k in list(div_atoms.values()) + list(div_exprs.items()):
            self.add_divisible(d, k)
        self.add_bound(symbolic.var(name), lo, hi)
        for g in ge:
            self._add_nonneg(self.canonical(g))
        for e in eqs:
            self._equate(e)

    def _add_nonneg(self, e: Dim) -> None:
        """The fact e >= 0, e canonical."""
        if isinstance(e, int):
            return
        lin = _linear_var(e)
        if lin is not None:                    # c*v + k >= 0
            name, c, k = lin
            lo, hi = self._bounds.get(name, self._default_bounds(name))
            lo, hi = (max(lo, -(k // c)), hi) if c > 0 else (lo, min(hi, k // -c))
            self._bounds[name] = (lo, hi)
            if lo == hi:
                self._equate(symbolic.var(name) - lo)
            return
        g = math.gcd(*(c for _, c in e.terms))   # sum(c*m) >= -k  =>  sum(c/g*m) >= ceil(-k/g)
        e = symbolic.floordiv(e - e.const, g) + e.const // g
        if not self._nonneg(e):
            self._ge.append(e)

    # ---- queries ----------------------------------------------------------------------------

    def canonical(self, d: Dim) -> Dim:
        """d rewritten with the substitutions, and where k provably divides x:
        `mod(x, k)` -> 0 and `k*floordiv(x, k)` -> x."""
        return self._rewrite(_as_dim(d))

    def _rewrite(self, d: Dim) -> Dim:
        if isinstance(d, int):
            return d
        total: Dim = d.const
        for mono, coeff in d.terms:
            term: Dim = 1
            for atom, p in mono.factors:
                value = self._rewrite_atom(atom)
                exact = _lone_factor(value)
                if exact and exact[0].op == "floordiv" and isinstance(exact[0].args[1], int):
                    (x, k), c = exact[0].args, exact[1]
                    if coeff % k ** p == 0 and self._divides(x, k):
                        coeff, value = coeff // k ** p, c * x
                term = term * value ** p
            total = total + coeff * term
        return total

    def _rewrite_atom(self, atom) -> Dim:
        if atom.op == "var":
            return self._subst.get(atom.args[0], symbolic.var(atom.args[0]))
        x, y = (self._rewrite(a) for a in atom.args)
        if atom.op == "mod" and isinstance(y, int) and y and self._divides(x, y):
            return 0
        return symbolic.BUILDERS[atom.op](x, y)

    def prove_eq(self, a, b) -> bool | None:
        d = self.canonical(_as_dim(a) - _as_dim(b))
        if isinstance(d, int):
            return d == 0
        if _signed_core(d) in self._eqs:
            return True
        if self._nonneg(d - 1) or self._nonneg(-d - 1):
            return False
        g = math.gcd(*(c * self._modulus(m) for m, c in d.terms))
        if d.const % g:                         # the terms are multiples of g, the constant not
            return False
        return True if self._nonneg(d) and self._nonneg(-d) else None

    def prove_ge(self, a, b) -> bool | None:
        d = self.canonical(_as_dim(a) - _as_dim(b))
        return True if self._nonneg(d) else False if self._nonneg(-d - 1) else None

    def prove_gt(self, a, b) -> bool | None:
        return self.prove_ge(a, _as_dim(b) + 1)

    def prove_le(self, a, b) -> bool | None:
        return self.prove_ge(b, a)

    def prove_lt(self, a, b) -> bool | None:
        return self.prove_gt(b, a)

    def divisible(self, d: Dim, k: int) -> bool | None:
        """d % k == 0: True or False when proven, else None."""
        return self._divides(self.canonical(d), k)

    def _divides(self, d: Dim, k: int) -> bool | None:
        k = abs(k)
        if isinstance(d, int):
            return d == 0 if k == 0 else d % k == 0
        if k == 0:                              # 0 divides only 0
            return self.prove_eq(d, 0)
        g = math.gcd(*(c * self._modulus(m) for m, c in d.terms))
        if g % k == 0:                          # d == (a multiple of k) + const
            return d.const % k == 0
        if d.const % math.gcd(g, k):
            return False
        content, core = _normalize(d)
        known = self._div_exprs.get(_signed_core(core), 1) * content
        return True if known % k == 0 else None

    def _modulus(self, mono) -> int:
        """A number that provably divides the monomial."""
        m = 1
        for atom, p in mono.factors:
            m *= self._div_atoms.get(atom.text, (None, 1))[1] ** p
        return m

    def bounds(self, d) -> tuple:
        """(lo, hi) containing every value of d under the facts (ints or -inf/inf)."""
        d = self.canonical(d)
        lo, hi = symbolic.bounds(d, self._var_bounds())
        for g in self._ge:
            if isinstance(d - g, int):          # d == g + c >= c
                lo = max(lo, d - g)
            if isinstance(d + g, int):          # d == c - g <= c
                hi = min(hi, d + g)
        return lo, hi

    def _nonneg(self, d: Dim) -> bool:
        """d >= 0 is proven (d canonical). Remembered until a fact is added: fusion asks the
        same few questions about a program's dims a hundred times."""
        proven = self._proven.get(d)
        if proven is None:
            var_bounds = self._var_bounds()
            proven = self._proven[d] = symbolic.bounds(d, var_bounds)[0] >= 0 or any(
                symbolic.bounds(d - g, var_bounds)[0] >= 0 for g in self._ge) or any(
                symbolic.bounds(e, var_bounds)[0] >= 0 for g in self._ge
                for e in (_scaled_minus(d, g),) if e is not None) or \
                nonneg_relaxed(d, var_bounds, self._atom_lower())
        return proven

    def _atom_lower(self) -> dict:
        """Lower bounds of single atoms from the `>= 0` facts (`min(a, 3) - 1 >= 0`)."""
        out = {}
        for g in self._ge:
            if len(g.terms) == 1 and g.terms[0][1] == 1 and len(g.terms[0][0].factors) == 1 \
                    and g.terms[0][0].factors[0][1] == 1:
                atom = g.terms[0][0].factors[0][0]
                out[atom] = max(out.get(atom, -g.const), -g.const)
        return out

    def _default_bounds(self, name: str) -> tuple:
        return (-_INF, _INF) if name in self._signed else (0, _INF)

    def _var_bounds(self) -> dict[str, tuple]:
        out = {name: (-_INF, _INF) for name in self._signed}
        for name, (lo, hi) in self._bounds.items():
            k = self._div_atoms.get(name, (None, 1))[1]     # round to multiples of k
            out[name] = (lo if lo == -_INF else -(-lo // k) * k,
                         hi if hi == _INF else hi // k * k)
        return out

    def _rank(self, name: str) -> tuple:
        """Later-bound variables rank higher and are substituted first; signed ones last."""
        return (name in self._signed, self._order.get(name, len(self._order)), name)

    def describe(self) -> list[str]:
        """The facts, one human-readable line each, in a deterministic order."""
        lines = [f"{name} == {value}" for name, value in sorted(self._subst.items(),
                                                                key=lambda nv: self._rank(nv[0]))]
        names = set(self._order) | set(self._bounds)
        var_bounds = self._var_bounds()
        for name in sorted(names - set(self._subst), key=self._rank):
            lo, hi = var_bounds.get(name, self._default_bounds(name))
            if hi < _INF:
                lines.append(f"{name} <= {hi}" if lo == -_INF else f"{lo} <= {name} <= {hi}")
            elif lo > -_INF:
                lines.append(f"{name} >= {lo}")
        lines += sorted(f"{d} % {k} == 0" for d, k in self._div_atoms.values())
        lines += sorted(f"{d} % {k} == 0" for d, k in self._div_exprs.items())
        lines += sorted(f"{g} >= 0" for g in self._ge)
        lines += sorted(f"{e} == 0" for e in self._eqs)
        return lines


def _scaled_minus(d: Dim, g: Dim) -> Dim | None:
    """k*d - c*g, where the first monomial of g that d has with the same sign has the
    coefficient k in g and c in d (k, c > 0 after taking that sign out): with g >= 0 a fact,
    that being >= 0 proves d >= 0, as k*d >= k*d - c*g (the facts are stored divided by their
    content: `2*a*b - 2 >= 0` as `a*b - 1 >= 0`, which `d - g` alone does not reach from
    `2*a*b - 2`; `3*b - 3*a` from `b - a >= 0`, whose first monomial is negative, was not
    reached until the fuzzer found a tiled convolution's size unproven). None where there is
    no such monomial or k == c (d - g is tried already)."""
    if isinstance(d, int) or isinstance(g, int) or not g.terms:
        return None
    in_d = dict(d.terms)
    for mono, k in g.terms:
        c = in_d.get(mono, 0)
        if k * c > 0:
            k, c = abs(k), abs(c)
            return None if k == c else k * d - c * g
    return None


# ---- derived values ---------------------------------------------------------------------------

def _host_dim(sc: ShapeConstraints, x, memo: dict | None = None) -> Dim | None:
    """The Dim a host computation (a HostValue tree) equals under the facts, or None. `memo`
    (node id -> result) makes a tree whose subtrees are shared cost its distinct nodes only."""
    if memo is None:
        memo = {}
    if not isinstance(x, HostValue):
        return _host_leaf(sc, x, memo)
    key = ("dim", id(x))
    if key not in memo:
        memo[key] = _host_node(sc, x, memo)
    return memo[key]


def _host_leaf(sc: ShapeConstraints, x, memo: dict) -> Dim | None:
    if isinstance(x, (bool, Pred)):
        p = _decide(sc, x, memo)
        return None if p is None else int(p)
    if isinstance(x, (int, Expr)):
        return sc.canonical(x)
    return None


def _host_node(sc: ShapeConstraints, x: HostValue, memo: dict) -> Dim | None:
    if x.op == "select":
        p = _decide(sc, x.args[0], memo)
        if p is not None:
            return _host_dim(sc, x.args[1 if p else 2], memo)
        a, b = _host_dim(sc, x.args[1], memo), _host_dim(sc, x.args[2], memo)
        return a if a is not None and b is not None and sc.prove_eq(a, b) else None
    args = [_host_dim(sc, a, memo) for a in x.args]
    if any(a is None for a in args):
        return None
    a = args[0]
    if x.op in _HOST_ARITH:
        return _HOST_ARITH[x.op](*args)
    if x.op == "sign":
        return 1 if sc.prove_gt(a, 0) else 0 if sc.prove_eq(a, 0) else \
            -1 if sc.prove_lt(a, 0) else None
    if x.op == "abs":
        return a if sc.prove_ge(a, 0) else -a if sc.prove_le(a, 0) else None
    if x.op in _HOST_SIZE_OPS and not any(symbolic.variables(v) & sc._signed for v in args) \
            and (x.op in ("maximum", "minimum") or (sc.prove_ge(a, 0) and sc.prove_gt(args[1], 0))):
        return _HOST_SIZE_OPS[x.op](*args)     # floor semantics agree with C's for a >= 0, b > 0
    return None


def _decide(sc: ShapeConstraints, p, memo: dict | None = None) -> bool | None:
    """A host predicate (or an integer used as one: non-zero) decided under the facts."""
    if isinstance(p, bool):
        return p
    memo = {} if memo is None else memo
    key = ("pred", id(p))
    if key not in memo:
        memo[key] = _decide_node(sc, p if isinstance(p, Pred) else Pred("!=", p, 0), memo)
    return memo[key]


def _decide_node(sc: ShapeConstraints, p: Pred, memo: dict) -> bool | None:
    if p.cmp == "and":
        parts = [_decide(sc, q, memo) for q in p.lhs]
        return False if False in parts else True if all(parts) else None
    lhs, rhs = _host_dim(sc, p.lhs, memo), _host_dim(sc, p.rhs, memo)
    if lhs is None or rhs is None:
        return None
    if p.cmp == "!=":
        eq = sc.prove_eq(lhs, rhs)
        return None if eq is None else not eq
    return getattr(sc, symbolic.PROVERS[p.cmp])(lhs, rhs)
