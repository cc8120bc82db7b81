"""Dims, value facts and the program representation of the whole-program fuzzer.

A program is a DAG of nodes (`Node`: an op of the `OPS` table, operand value ids, parameters;
loop and branch bodies are programs of their own) over inputs whose shapes mix the symbolic dims
`a`, `b` and small static sizes.

Every value carries an interval and a bound on its f32 rounding error (`Facts`), propagated op by
op (first order, unit roundoff U = 2**-24 per rounding, 16 U for a transcendental, sums of n
terms n*U per term); the generator only applies an op where it is well conditioned
(log/sqrt/divide away from 0, exp of bounded inputs, compares and float->int only on values both
sides compute exactly), so a program's outputs carry a small, sound tolerance:
|jdisc - jax| <= 2 * bound (each side is within the bound of the exact value); integers, bools
and exactly computed floats must match bit for bit.

The classes that travel between processes, pickled in the worker's requests and replies (`Input`,
`Node`, `Program`, `Failure`), live here: one module, imported as `fuzzing.facts` by the parent
and by every worker, so that a pickle names them the same way on both sides.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

NAMES = ("a", "b")
SYM = dict(zip(NAMES, jax.export.symbolic_shape(", ".join(NAMES))))
SIZES = (0, 1, 2, 3, 5, 7, 13)
U = 2.0 ** -24                  # f32 unit roundoff
TRANS = 16 * U                  # a transcendental (jdisc's within 2 ulp, XLA's a few): 8 ulp
MAX_MAG = 1e4                   # values stay in [-MAX_MAG, MAX_MAG] ...
MAX_REL_ERR = 3e-4              # ... with a rounding bound <= MAX_REL_ERR * max(1, |value|)
MAX_ELEMS = 4096                # per value, at every tested size
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
F32, I32, BOOL = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)


class Invalid(Exception):
    """A node or program that is not well defined (shape, domain, size) at the tested sizes."""


# -- dims and facts ------------------------------------------------------------------------------

def at(d, env: dict) -> int:
    """A dim (int or jax symbolic expression) at concrete sizes."""
    return d if isinstance(d, int) else int(d._evaluate(env))


def same(d1, d2) -> bool:
    try:
        return bool(d1 == d2)
    except Exception:            # jax: inconclusive
        return False


@dataclasses.dataclass(frozen=True)
class Facts:
    """Every element lies in [lo, hi]; |computed - exact| <= err (0: computed exactly)."""
    lo: float
    hi: float
    err: float = 0.0

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))


BOOL_FACTS = Facts(0, 1)


def ifacts(lo, hi) -> Facts:
    """Integer facts; a range past int32 wraps (both sides wrap alike): anything then."""
    lo, hi = min(lo, hi), max(lo, hi)
    return Facts(INT_MIN, INT_MAX) if lo < INT_MIN or hi > INT_MAX else Facts(int(lo), int(hi))


def ffacts(lo, hi, err) -> Facts:
    return Facts(float(min(lo, hi)), float(max(lo, hi)), float(err))


def hull(*fs: Facts) -> Facts:
    return Facts(min(f.lo for f in fs), max(f.hi for f in fs), max(f.err for f in fs))


def products(f: Facts, g: Facts) -> list[float]:
    return [f.lo * g.lo, f.lo * g.hi, f.hi * g.lo, f.hi * g.hi]


# -- program representation ----------------------------------------------------------------------

@dataclasses.dataclass
class Input:
    """A function argument: `template` mixes dim names and sizes (None inside a body, where the
    type comes from the enclosing op); `dist` says how test data is drawn."""
    dtype: np.dtype
    template: tuple | None = None
    dist: tuple = ("uniform", -2.0, 2.0)


@dataclasses.dataclass
class Node:
    op: str
    args: tuple[int, ...]
    p: dict
    subs: tuple["Program", ...] = ()


@dataclasses.dataclass
class Program:
    inputs: list[Input]
    nodes: list[Node]
    outputs: list[int]

    @property
    def n_in(self) -> int:
        return len(self.inputs)

    def node(self, vid: int) -> Node:
        return self.nodes[vid - self.n_in]

    def size(self) -> int:
        return sum(1 + sum(s.size() for s in n.subs) for n in self.nodes)


DIM_TAGS = ("ref", "mul", "fdiv", "sub")


def dim_refs(e) -> list[int]:
    """Value ids whose shapes a parameter reads. Dim expressions are tagged tuples:
    ('ref', vid, axis), ('mul'|'fdiv'|'sub', e1, e2); other tuples and lists are searched."""
    if isinstance(e, tuple) and e and e[0] == "ref":
        return [e[1]]
    if isinstance(e, (tuple, list)):
        return [v for x in e for v in dim_refs(x)]
    return []


def deps(node: Node) -> list[int]:
    """Operands, then values whose shapes the parameters read."""
    return list(node.args) + [v for x in node.p.values() for v in dim_refs(x)]


def dim_value(e, shape_of: Callable):
    if isinstance(e, int):
        return e
    if e[0] == "ref":
        return shape_of(e[1])[e[2]]
    x, y = dim_value(e[1], shape_of), dim_value(e[2], shape_of)
    return x * y if e[0] == "mul" else x // y if e[0] == "fdiv" else x - y


def map_refs(e, f: Callable):
    """e with every referenced value id v replaced by f(v)."""
    if isinstance(e, tuple) and e and e[0] == "ref":
        return ("ref", f(e[1]), e[2])
    if isinstance(e, tuple):
        return tuple(map_refs(x, f) for x in e)
    if isinstance(e, list):
        return [map_refs(x, f) for x in e]
    return e


def renumber(node: Node, f: Callable) -> Node:
    p = {k: map_refs(v, f) for k, v in node.p.items()}
    return Node(node.op, tuple(f(a) for a in node.args), p, node.subs)


@dataclasses.dataclass
class Typing:
    types: list          # vid -> jax.ShapeDtypeStruct (symbolic dims)
    facts: list          # vid -> Facts
    subs: dict           # vid of a node with bodies -> [Typing of each body]


# -- what a check finds ---------------------------------------------------------------------------

@dataclasses.dataclass
class Failure:
    kind: str                    # "mismatch", an exception type name, or "compiles"
    message: str
    env: dict | None = None
    output: int | None = None    # which output (of the program) mismatched
