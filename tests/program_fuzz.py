"""Whole-program fuzzing for jdisc: random JAX programs over symbolic dims, run by jdisc and by
jax.jit, shrunk to a few-line standalone repro when they disagree.

A program is a DAG of nodes (`Node`: an op of the `OPS` table, operand value ids, parameters;
loop and branch bodies are programs of their own) over inputs whose shapes mix the symbolic dims
`a`, `b` and small static sizes. Pieces, top to bottom:

* facts: every value carries an interval and a bound on its f32 rounding error (`Facts`),
  propagated op by op (first order, unit roundoff U = 2**-24 per rounding, 16 U for a
  transcendental, sums of n terms n*U per term); the generator only applies an op where it is
  well conditioned (log/sqrt/divide away from 0, exp of bounded inputs, compares and
  float->int only on values both sides compute exactly), so a program's outputs carry a small,
  sound tolerance: |jdisc - jax| <= 2 * bound (each side is within the bound of the exact value);
  integers, bools and exactly computed floats must match bit for bit;
* the op table (`OPS`): per op, how the interpreter runs it, how the printer prints it and how
  its facts follow from its operands'; shapes are what jax's own trace gives (one trace per
  program, `infer`), so they are jax's symbolic dims (with its `min`/`max`/`floordiv` terms);
* `infer` (shapes, facts, validity at every tested size), `Generator`, `source` (a standalone
  script), `make_fn` (the interpreter), `check` (jdisc vs jax.jit, one compile for a batch);
* `Worker` (checks in a subprocess, so that a crash fails a check, not the caller),
  `check_programs` (finds the culprit of an error by bisection), `shrink`, `run_batches`;
* a command line for long runs: `python tests/program_fuzz.py --n 2000 --findings FILE`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import math
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

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


# -- ops ------------------------------------------------------------------------------------------
# Each op: run(node, xs, ctx) -> jax value(s); src(node, names, ctx) -> expression (or, for ops
# with bodies, (lines, expression)); facts(node, fs, ctx) -> Facts (raise Invalid where the op
# is not well conditioned); needs(node, ctx) -> dims that must be >= 1 at every tested size.

def _tanh(i):
    return ffacts(math.tanh(i.lo), math.tanh(i.hi), i.err + TRANS)


def _exp(i):
    if i.hi > 4:
        raise Invalid("exp of a large value")
    return ffacts(math.exp(i.lo), math.exp(i.hi), math.exp(i.hi) * (i.err + TRANS))


def _log(i):
    if i.lo < 0.1:
        raise Invalid("log near 0")
    lo, hi = math.log(i.lo), math.log(i.hi)
    return ffacts(lo, hi, i.err / i.lo + TRANS * max(1, abs(lo), abs(hi)))


def _log1p(i):
    if i.lo < -0.5:
        raise Invalid("log1p near -1")
    lo, hi = math.log1p(i.lo), math.log1p(i.hi)
    return ffacts(lo, hi, i.err / (1 + i.lo) + TRANS * max(1, abs(lo), abs(hi)))


def _sqrt(i):
    if i.lo < 0.05:
        raise Invalid("sqrt near 0")
    return ffacts(math.sqrt(i.lo), math.sqrt(i.hi),
                  i.err / (2 * math.sqrt(i.lo)) + 2 * U * math.sqrt(i.hi))


def _rsqrt(i):
    if i.lo < 0.1:
        raise Invalid("rsqrt near 0")
    return ffacts(1 / math.sqrt(i.hi), 1 / math.sqrt(i.lo),
                  0.5 * i.err * i.lo ** -1.5 + TRANS / math.sqrt(i.lo))


def _recip(i):
    m = min(abs(i.lo), abs(i.hi))
    if i.lo * i.hi <= 0 or m < 0.25:
        raise Invalid("1/x near 0")
    return ffacts(1 / i.lo, 1 / i.hi, 1.1 * i.err / m ** 2 + 2 * U / m)


def _exact_only(fn):
    def rule(i):
        if i.err:
            raise Invalid("discontinuous op of an inexact value")
        return fn(i)
    return rule


def _abs(i):
    lo = 0.0 if i.lo <= 0 <= i.hi else min(abs(i.lo), abs(i.hi))
    return Facts(lo, i.mag, i.err)


def _square(i):
    lo = 0.0 if i.lo <= 0 <= i.hi else min(i.lo * i.lo, i.hi * i.hi)
    return ffacts(lo, i.mag ** 2, 2 * i.mag * i.err + i.err ** 2 + 2 * U * i.mag ** 2)


def _sigmoid(x):
    return 0.5 * (1 + math.tanh(x / 2))


def _sincos(i):
    if i.mag > 100:
        raise Invalid("sin/cos of a large argument")
    return Facts(-1.0, 1.0, i.err + TRANS)


# name: (source template, jax function, facts rule)
FLOAT_UNARY = {
    "neg": ("-{0}", lambda x: -x, lambda i: Facts(-i.hi, -i.lo, i.err)),
    "abs": ("jnp.abs({0})", jnp.abs, _abs),
    "square": ("jnp.square({0})", jnp.square, _square),
    "tanh": ("jnp.tanh({0})", jnp.tanh, _tanh),
    "sin": ("jnp.sin({0})", jnp.sin, _sincos),
    "cos": ("jnp.cos({0})", jnp.cos, _sincos),
    "sigmoid": ("jax.nn.sigmoid({0})", jax.nn.sigmoid,
                lambda i: ffacts(_sigmoid(i.lo), _sigmoid(i.hi), i.err / 4 + TRANS)),
    "exp": ("jnp.exp({0})", jnp.exp, _exp),
    "log": ("jnp.log({0})", jnp.log, _log),
    "log1p": ("jnp.log1p({0})", jnp.log1p, _log1p),
    "sqrt": ("jnp.sqrt({0})", jnp.sqrt, _sqrt),
    "rsqrt": ("lax.rsqrt({0})", lax.rsqrt, _rsqrt),
    "recip": ("1.0 / {0}", lambda x: 1.0 / x, _recip),
    "floor": ("jnp.floor({0})", jnp.floor,
              _exact_only(lambda i: Facts(math.floor(i.lo), math.floor(i.hi)))),
    "round": ("jnp.round({0})", jnp.round,
              _exact_only(lambda i: Facts(round(i.lo) - 1, round(i.hi) + 1))),
    "sign": ("jnp.sign({0})", jnp.sign, _exact_only(lambda i: Facts(-1.0, 1.0))),
    "to_int": ("{0}.astype(jnp.int32)", lambda x: x.astype(jnp.int32),
               _exact_only(lambda i: ifacts(int(i.lo), int(i.hi)))),
}


def _int_abs(i):
    return ifacts(0, max(abs(i.lo), abs(i.hi))) if i.lo > INT_MIN else ifacts(INT_MIN, INT_MAX)


INT_UNARY = {
    "neg": ("-{0}", lambda x: -x, lambda i: ifacts(-i.hi, -i.lo)),
    "abs": ("jnp.abs({0})", jnp.abs, _int_abs),
    "sign": ("jnp.sign({0})", jnp.sign, lambda i: ifacts(-1, 1)),
    "invert": ("~{0}", lambda x: ~x, lambda i: ifacts(~int(i.hi), ~int(i.lo))),
    "popcnt": ("lax.population_count({0})", lax.population_count, lambda i: ifacts(0, 32)),
    "clz": ("lax.clz({0})", lax.clz, lambda i: ifacts(0, 32)),
    "clip": ("jnp.clip({0}, -5, 50)", lambda x: jnp.clip(x, -5, 50),
             lambda i: ifacts(min(max(i.lo, -5), 50), max(min(i.hi, 50), -5))),
    "to_float": ("{0}.astype(jnp.float32)", lambda x: x.astype(jnp.float32),
                 lambda i: ffacts(i.lo, i.hi, 0 if i.mag <= 2 ** 24 else U * i.mag)),
}

BOOL_UNARY = {
    "not": ("~{0}", lambda x: ~x, lambda i: BOOL_FACTS),
    "to_float": ("{0}.astype(jnp.float32)", lambda x: x.astype(jnp.float32),
                 lambda i: Facts(0.0, 1.0)),
    "to_int": ("{0}.astype(jnp.int32)", lambda x: x.astype(jnp.int32),
               lambda i: ifacts(0, 1)),
}


def _fadd(f, g, sign=1):
    lo = f.lo + (g.lo if sign > 0 else -g.hi)
    hi = f.hi + (g.hi if sign > 0 else -g.lo)
    return ffacts(lo, hi, f.err + g.err + 2 * U * max(abs(lo), abs(hi)))


def _fmul(f, g):
    ps = products(f, g)
    m = max(map(abs, ps))
    return ffacts(min(ps), max(ps), f.err * g.mag + g.err * f.mag + f.err * g.err + 2 * U * m)


def _fdiv(f, g):
    return _fmul(f, _recip(g)) if g.err == 0 else _fdiv_inexact(f, g)


def _fdiv_inexact(f, g):
    r = _recip(Facts(g.lo, g.hi))                 # 1/g's range; its error below, first order
    m = min(abs(g.lo), abs(g.hi))
    out = _fmul(f, r)
    return Facts(out.lo, out.hi, out.err + 1.1 * f.mag * g.err / m ** 2)


FLOAT_BINARY = {
    "add": ("{0} + {1}", lambda x, y: x + y, _fadd),
    "sub": ("{0} - {1}", lambda x, y: x - y, lambda f, g: _fadd(f, g, -1)),
    "mul": ("{0} * {1}", lambda x, y: x * y, _fmul),
    "div": ("{0} / {1}", lambda x, y: x / y, _fdiv),
    "max": ("jnp.maximum({0}, {1})", jnp.maximum,
            lambda f, g: Facts(max(f.lo, g.lo), max(f.hi, g.hi), max(f.err, g.err))),
    "min": ("jnp.minimum({0}, {1})", jnp.minimum,
            lambda f, g: Facts(min(f.lo, g.lo), min(f.hi, g.hi), max(f.err, g.err))),
}


def _imag(f, g):
    m = max(abs(f.lo), abs(f.hi), 1)
    return ifacts(-m - 1, m + 1)


INT_BINARY = {
    "add": ("{0} + {1}", lambda x, y: x + y, lambda f, g: ifacts(f.lo + g.lo, f.hi + g.hi)),
    "sub": ("{0} - {1}", lambda x, y: x - y, lambda f, g: ifacts(f.lo - g.hi, f.hi - g.lo)),
    "mul": ("{0} * {1}", lambda x, y: x * y, lambda f, g: ifacts(min(products(f, g)),
                                                                max(products(f, g)))),
    "max": ("jnp.maximum({0}, {1})", jnp.maximum,
            lambda f, g: ifacts(max(f.lo, g.lo), max(f.hi, g.hi))),
    "min": ("jnp.minimum({0}, {1})", jnp.minimum,
            lambda f, g: ifacts(min(f.lo, g.lo), min(f.hi, g.hi))),
    "and": ("{0} & {1}", lambda x, y: x & y, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    "or": ("{0} | {1}", lambda x, y: x | y, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    "xor": ("{0} ^ {1}", lambda x, y: x ^ y, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    # XLA defines x/0, x%0, INT_MIN/-1 and shifts by any amount; jdisc must match
    "div": ("lax.div({0}, {1})", lax.div, _imag),
    "rem": ("lax.rem({0}, {1})", lax.rem, _imag),
    "floordiv": ("{0} // {1}", lambda x, y: x // y, _imag),
    "shl": ("lax.shift_left({0}, {1})", lax.shift_left, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    "shr": ("lax.shift_right_arithmetic({0}, {1})", lax.shift_right_arithmetic,
            lambda f, g: ifacts(min(f.lo, -1), max(f.hi, 0))),
    "shrl": ("lax.shift_right_logical({0}, {1})", lax.shift_right_logical,
             lambda f, g: ifacts(INT_MIN, INT_MAX)),
}

BOOL_BINARY = {
    "and": ("{0} & {1}", lambda x, y: x & y, lambda f, g: BOOL_FACTS),
    "or": ("{0} | {1}", lambda x, y: x | y, lambda f, g: BOOL_FACTS),
    "xor": ("{0} ^ {1}", lambda x, y: x ^ y, lambda f, g: BOOL_FACTS),
    "eq": ("{0} == {1}", lambda x, y: x == y, lambda f, g: BOOL_FACTS),
}

COMPARES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_CMP = {"<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
        ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y}


def table_for(kind: str, dtype) -> dict:
    k = np.dtype(dtype).kind
    if kind == "unary":
        return FLOAT_UNARY if k == "f" else INT_UNARY if k == "i" else BOOL_UNARY
    return FLOAT_BINARY if k == "f" else INT_BINARY if k == "i" else BOOL_BINARY


@dataclasses.dataclass
class Ctx:
    """What op rules see: the program's types and facts so far, the tested sizes, and (in the
    interpreter) the body runner."""
    envs: list[dict]
    types: list = dataclasses.field(default_factory=list)
    facts: list = dataclasses.field(default_factory=list)
    shape_of: Callable | None = None
    run_sub: Callable | None = None
    dsrc: Callable | None = None
    sub_types: dict = dataclasses.field(default_factory=dict)   # node vid -> [Typing] of bodies
    vid: int = -1                       # the node being typed / printed

    def maxn(self, dims) -> int:
        return max([math.prod(at(d, e) for d in dims) for e in self.envs] or [0])

    def minn(self, dims) -> int:
        return min([math.prod(at(d, e) for d in dims) for e in self.envs] or [0])


@dataclasses.dataclass
class Op:
    run: Callable
    src: Callable
    facts: Callable
    needs: Callable = lambda node, ctx: []


def _ptuple(xs) -> str:
    xs = list(xs)
    return "(" + ", ".join(map(str, xs)) + ("," if len(xs) == 1 else "") + ")"


def _cst(c, dtype) -> str:
    kind = np.dtype(dtype).kind
    return repr(float(c)) if kind == "f" else str(bool(c)) if kind == "b" else str(int(c))


def _typed(x, *cs):
    """Python constants of x's kind (the printer writes 2.0 for a float operand's 2)."""
    kind = np.dtype(x.dtype).kind
    return [float(c) if kind == "f" else bool(c) if kind == "b" else int(c) for c in cs]


def _arg_type(ctx, node, i=0):
    return ctx.types[node.args[i]]


def _index_src(rank, axis, item) -> str:
    if axis == rank and rank > 0:
        return "[..., " + item + "]"
    return "[" + ", ".join([":"] * axis + [item]) + "]"


def _slice_src(start, stop, step, dsrc) -> str:
    s = "" if not start else str(start)
    if stop is None:
        e = ""
    elif stop[0] == "neg":
        e = str(-stop[1])
    elif stop[0] == "abs":
        e = str(stop[1])
    else:
        e = dsrc(("sub", stop[1], stop[2])) if stop[2] else dsrc(stop[1])
    out = s + ":" + e
    return out + (":" + str(step) if step != 1 else "")


def _slice_py(start, stop, step, shape_of):
    if stop is None:
        e = None
    elif stop[0] == "neg":
        e = -stop[1]
    elif stop[0] == "abs":
        e = stop[1]
    else:
        e = dim_value(stop[1], shape_of) - stop[2]
    return slice(start or None, e, step)


def _slices(node, rank, f, full):
    items = [full] * rank
    for axis, start, stop, step in node.p["spec"]:
        items[axis] = f(start, stop, step)
    return items


def _reduce_facts(node, fs, ctx):
    f, (t,) = fs[0], [_arg_type(ctx, node)]
    axes = node.p["axes"] if node.p["axes"] is not None else tuple(range(len(t.shape)))
    dims = [t.shape[a] for a in axes]
    nmax, nmin = ctx.maxn(dims), ctx.minn(dims)
    kind, name = t.dtype.kind, node.p["f"]
    if kind == "b":
        return BOOL_FACTS
    if name in ("max", "min"):
        return f
    if name == "mean":
        return ffacts(f.lo, f.hi, f.err + (nmax + 2) * U * f.mag)
    lo = nmax * f.lo if f.lo < 0 else nmin * f.lo
    hi = nmax * f.hi if f.hi > 0 else nmin * f.hi
    if kind == "i":
        return ifacts(lo, hi)
    return ffacts(lo, hi, nmax * f.err + (nmax + 1) * U * nmax * f.mag)


def _reduce_needs(node, ctx):
    if node.p["f"] in ("max", "min"):               # jnp refuses empty max/min reductions
        return [_nonempty(node, ctx)]
    if node.p["f"] == "mean":
        return [_nonempty_or_empty_result(node, ctx)]
    return []


def _nonempty(node, ctx):
    t = _arg_type(ctx, node)
    axes = node.p["axes"] if node.p["axes"] is not None else tuple(range(len(t.shape)))
    return lambda env: all(at(t.shape[a], env) >= 1 for a in axes)


def _nonempty_or_empty_result(node, ctx):
    """A reduction over an empty axis gives +-inf or nan, which the facts cannot follow: the
    reduced count must be >= 1 wherever the result has elements (a Python callable check)."""
    t = _arg_type(ctx, node)
    axes = node.p.get("axes")
    axes = (node.p["axis"],) if axes is None and "axis" in node.p else axes
    axes = tuple(range(len(t.shape))) if axes is None else axes
    red = [t.shape[a] for a in axes]
    rest = [d for i, d in enumerate(t.shape) if i not in axes]
    return lambda env: math.prod(at(d, env) for d in red) >= 1 or \
        math.prod(at(d, env) for d in rest) == 0


def _reduce_run(node, xs, ctx):
    fn = {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean, "any": jnp.any,
          "all": jnp.all}[node.p["f"]]
    return fn(xs[0], axis=node.p["axes"], keepdims=node.p["keep"])


def _reduce_src(node, n, ctx):
    axes = node.p["axes"]
    ax = "None" if axes is None else str(axes[0]) if len(axes) == 1 else _ptuple(axes)
    keep = ", keepdims=True" if node.p["keep"] else ""
    return f"jnp.{node.p['f']}({n[0]}, axis={ax}{keep})"


def _dot_facts(node, fs, ctx):
    f, g = fs
    spec = node.p["spec"]
    ins, out = spec.split("->")
    lx, ly = ins.split(",")
    tx = ctx.types[node.args[0]]
    k = [tx.shape[lx.index(c)] for c in lx if c in ly and c not in out]
    kmax = max(ctx.maxn(k), 1)
    m = kmax * f.mag * g.mag
    return ffacts(-m, m, kmax * (f.err * g.mag + g.err * f.mag + f.err * g.err)
                  + (kmax + 1) * U * m)


def _dot_src(node, n, ctx):
    if node.p.get("matmul"):
        return f"{n[0]} @ {n[1]}"
    return f"jnp.einsum('{node.p['spec']}', {n[0]}, {n[1]})"


def _cum_facts(node, fs, ctx):
    f, t = fs[0], _arg_type(ctx, node)
    if node.p["f"] != "cumsum":
        return f
    n = ctx.maxn([t.shape[node.p["axis"]]])
    if t.dtype.kind == "i":
        return ifacts(min(f.lo, n * f.lo), max(f.hi, n * f.hi))
    return ffacts(min(f.lo, n * f.lo), max(f.hi, n * f.hi), n * f.err + (n + 1) * U * n * f.mag)


def _softmax_facts(node, fs, ctx):
    """exp(x - max) / sum: x - max (within the input's range r) is rounded by U r, so each exp
    is within U r + TRANS relative; the sum adds n U, the division U; an input error e moves a
    softmax value by at most 2 e."""
    f, t = fs[0], _arg_type(ctx, node)
    n = ctx.maxn([t.shape[node.p["axis"]]])
    return Facts(0.0, 1.0, 2 * f.err + 2 * (U * (f.hi - f.lo) + TRANS) + (n + 2) * U)


def _lse_facts(node, fs, ctx):
    f, t = fs[0], _arg_type(ctx, node)
    n = max(ctx.maxn([t.shape[node.p["axis"]]]), 1)
    m = f.mag + math.log(n)
    return ffacts(f.lo, f.hi + math.log(n), f.err + 2 * U * (f.hi - f.lo) + (n + 2) * U
                  + TRANS * (1 + math.log(n)) + 2 * U * m)


def _dimop_facts(node, fs, ctx):
    f, op = fs[0], node.p["f"]
    d = dim_value(node.p["dim"], lambda v: ctx.types[v].shape)
    dmin, dmax = ctx.minn([d]), ctx.maxn([d])
    if op == "*":
        ps = [f.lo * dmin, f.lo * dmax, f.hi * dmin, f.hi * dmax]
        if ctx.types[node.args[0]].dtype.kind == "i":
            return ifacts(min(ps), max(ps))
        return ffacts(min(ps), max(ps), dmax * f.err + 2 * U * max(map(abs, ps)))
    if op == "/":                                  # d >= 1 (needs)
        return ffacts(min(f.lo, f.lo / dmax), max(f.hi, f.hi / dmax), f.err + 2 * U * f.mag)
    lo, hi = (f.lo + dmin, f.hi + dmax) if op == "+" else (f.lo - dmax, f.hi - dmin)
    if ctx.types[node.args[0]].dtype.kind == "i":
        return ifacts(lo, hi)
    return ffacts(lo, hi, f.err + 2 * U * max(abs(lo), abs(hi)))


def _dimop_needs(node, ctx):
    if node.p["f"] != "/":
        return []
    d = dim_value(node.p["dim"], lambda v: ctx.types[v].shape)
    return [lambda env: at(d, env) >= 1]


def _dimop_run(node, xs, ctx):
    d = dim_value(node.p["dim"], ctx.shape_of)
    x = xs[0]
    return {"*": lambda: x * d, "/": lambda: x / d, "+": lambda: x + d,
            "-": lambda: x - d}[node.p["f"]]()


def _cst_run(node, xs, ctx):
    x, (c,) = xs[0], _typed(xs[0], node.p["c"])
    return {"+": lambda: x + c, "*": lambda: x * c, "r-": lambda: c - x}[node.p["f"]]()


def _cst_src(node, n, ctx):
    c = _cst(node.p["c"], ctx.types[node.args[0]].dtype)
    return {"+": f"{n[0]} + {c}", "*": f"{n[0]} * {c}", "r-": f"{c} - {n[0]}"}[node.p["f"]]


def _cst_facts(node, fs, ctx):
    f, c = fs[0], node.p["c"]
    if ctx.types[node.args[0]].dtype.kind == "i":
        return {"+": lambda: ifacts(f.lo + c, f.hi + c),
                "*": lambda: ifacts(f.lo * c, f.hi * c),
                "r-": lambda: ifacts(c - f.hi, c - f.lo)}[node.p["f"]]()
    if node.p["f"] == "*":
        exact = c != 0 and math.frexp(abs(c))[0] == 0.5       # a power of 2: exact
        rounding = 0 if exact else 2 * U * abs(c) * f.mag
        return ffacts(f.lo * c, f.hi * c, abs(c) * f.err + rounding)
    return _fadd(f, Facts(c, c)) if node.p["f"] == "+" else _fadd(Facts(c, c), f, -1)


def _cmp_src(node, n, ctx):
    rhs = n[1] if len(n) > 1 else _cst(node.p["c"], ctx.types[node.args[0]].dtype)
    return f"{n[0]} {node.p['f']} {rhs}"


def _cmp_run(node, xs, ctx):
    return _CMP[node.p["f"]](xs[0], xs[1] if len(xs) > 1 else _typed(xs[0], node.p["c"])[0])


def _cmp_facts(node, fs, ctx):
    if any(f.err for f in fs):
        raise Invalid("compare of inexact values")
    return BOOL_FACTS


def _where_run(node, xs, ctx):
    return jnp.where(xs[0], xs[1], xs[2] if len(xs) > 2 else _typed(xs[1], node.p["c"])[0])


def _where_src(node, n, ctx):
    other = n[2] if len(n) > 2 else _cst(node.p["c"], ctx.types[node.args[1]].dtype)
    return f"jnp.where({n[0]}, {n[1]}, {other})"


def _where_facts(node, fs, ctx):
    if len(fs) > 2:
        return hull(fs[1], fs[2])
    c = node.p["c"]
    return hull(fs[1], Facts(c, c))


def _pad_facts(node, fs, ctx):
    c = node.p["c"]
    return hull(fs[0], Facts(c, c))


def _lpad_needs(node, ctx):
    t = _arg_type(ctx, node)
    # interior padding of an empty dim: jax.export's size formula assumes the dim is >= 1
    return [lambda env, d=t.shape[i]: at(d, env) >= 1
            for i, (_, _, interior) in enumerate(node.p["cfg"]) if interior]


def _take_needs(node, ctx):
    d = _arg_type(ctx, node).shape[node.p["axis"]]
    return [lambda env: at(d, env) >= 1]


def _index_needs(node, ctx):
    d = _arg_type(ctx, node).shape[node.p["axis"]]
    i = node.p["i"]
    return [lambda env: at(d, env) >= (i + 1 if i >= 0 else -i)]


def _dslice_run(node, xs, ctx):
    start = xs[1] if len(xs) > 1 else node.p["start"]
    return lax.dynamic_slice_in_dim(xs[0], start, dim_value(node.p["size"], ctx.shape_of),
                                    axis=node.p["axis"])


def _dslice_src(node, n, ctx):
    start = n[1] if len(n) > 1 else str(node.p["start"])
    return (f"lax.dynamic_slice_in_dim({n[0]}, {start}, {ctx.dsrc(node.p['size'])}, "
            f"axis={node.p['axis']})")


def _dslice_facts(node, fs, ctx):
    return fs[0]


def _passthrough(node, fs, ctx):
    return fs[0]


def _hull_all(node, fs, ctx):
    return hull(*fs)


def _iota_facts(node, fs, ctx):
    shape = [dim_value(d, lambda v: ctx.types[v].shape) for d in node.p["shape"]]
    d = shape[node.p["dim"]]
    return ifacts(0, max(ctx.maxn([d]) - 1, 0))


def _shape(node, ctx) -> tuple:
    """The node's `shape` parameter, evaluated on the shapes it reads."""
    return tuple(dim_value(d, ctx.shape_of) for d in node.p["shape"])


def _shape_src(ctx, node) -> str:
    return _ptuple(ctx.dsrc(d) for d in node.p["shape"])


def _iota_src(node, n, ctx) -> str:
    if len(node.p["shape"]) == 1:
        return f"jnp.arange({ctx.dsrc(node.p['shape'][0])})"
    return f"lax.broadcasted_iota(jnp.int32, {_shape_src(ctx, node)}, {node.p['dim']})"


def _operand_cst(node, ctx, c) -> str:
    return _cst(c, ctx.types[node.args[0]].dtype)


def _clip_run(node, xs, ctx):
    return jnp.clip(xs[0], *_typed(xs[0], node.p["lo"], node.p["hi"]))


def _clip_src(node, n, ctx) -> str:
    lo, hi = (_operand_cst(node, ctx, node.p[k]) for k in ("lo", "hi"))
    return f"jnp.clip({n[0]}, {lo}, {hi})"


def _clip_facts(node, fs, ctx):
    f, lo, hi = fs[0], node.p["lo"], node.p["hi"]
    return Facts(max(min(f.lo, hi), lo), min(max(f.hi, lo), hi), f.err)


def _slice_run(node, xs, ctx):
    items = _slices(node, len(xs[0].shape),
                    lambda s, e, st: _slice_py(s, e, st, ctx.shape_of), slice(None))
    return xs[0][tuple(items)]


def _slice_op_src(node, n, ctx) -> str:
    items = _slices(node, len(_arg_type(ctx, node).shape),
                    lambda s, e, st: _slice_src(s, e, st, ctx.dsrc), ":")
    return n[0] + "[" + ", ".join(items) + "]"


def _pad_run(node, xs, ctx):
    return jnp.pad(xs[0], node.p["widths"], constant_values=_typed(xs[0], node.p["c"])[0])


def _pad_src(node, n, ctx) -> str:
    widths = _ptuple(_ptuple(w) for w in node.p["widths"])
    return f"jnp.pad({n[0]}, {widths}, constant_values={_operand_cst(node, ctx, node.p['c'])})"


def _lpad_run(node, xs, ctx):
    c = jnp.asarray(_typed(xs[0], node.p["c"])[0], xs[0].dtype)
    return lax.pad(xs[0], c, node.p["cfg"])


def _lpad_src(node, n, ctx) -> str:
    c = f"jnp.{ctx.types[node.args[0]].dtype.name}({_operand_cst(node, ctx, node.p['c'])})"
    return f"lax.pad({n[0]}, {c}, {_ptuple(_ptuple(w) for w in node.p['cfg'])})"


def _argred_facts(node, fs, ctx):
    if fs[0].err:
        raise Invalid("argmax of inexact values")
    d = _arg_type(ctx, node).shape[node.p["axis"]]
    return ifacts(0, max(ctx.maxn([d]) - 1, 0))


def _sort_facts(node, fs, ctx):
    if fs[0].err:
        raise Invalid("sort of inexact values")      # the order, hence positions, could differ
    return fs[0]


def _argsort_facts(node, fs, ctx):
    _sort_facts(node, fs, ctx)
    d = _arg_type(ctx, node).shape[node.p["axis"]]
    return ifacts(0, max(ctx.maxn([d]) - 1, 0))


# -- control flow: bodies are programs, run by ctx.run_sub and printed by ctx.dsrc's printer ----

# narrow types a value makes a round trip through: (jnp dtype, range, relative rounding)
NARROW = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-2 ** 15, 2 ** 15 - 1),
          "uint16": (0, 2 ** 16 - 1), "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _cvt_run(node, xs, ctx):
    x = xs[0]
    if node.p["to"] == "bits":
        return lax.bitcast_convert_type(x, jnp.int32)
    return x.astype(getattr(jnp, node.p["to"])).astype(x.dtype)


def _cvt_src(node, n, ctx):
    if node.p["to"] == "bits":
        return f"lax.bitcast_convert_type({n[0]}, jnp.int32)"
    back = ctx.types[node.args[0]].dtype.name
    return f"{n[0]}.astype(jnp.{node.p['to']}).astype(jnp.{back})"


def _cvt_facts(node, fs, ctx):
    """Integers wrap into the narrow type's range; floats round (both sides round to nearest
    even, so an exact value stays exact, an inexact one may round the other way)."""
    f, to = fs[0], node.p["to"]
    if to == "bits":
        if f.err:
            raise Invalid("the bits of an inexact value")
        return ifacts(INT_MIN, INT_MAX)
    if isinstance(NARROW[to], tuple):
        lo, hi = NARROW[to]
        return ifacts(max(f.lo, lo), min(f.hi, hi)) if lo <= f.lo and f.hi <= hi else \
            ifacts(lo, hi)
    rel = NARROW[to]
    return ffacts(f.lo * (1 + rel) if f.lo < 0 else f.lo * (1 - rel),
                  f.hi * (1 + rel) if f.hi > 0 else f.hi * (1 - rel),
                  f.err * (1 + rel) + (rel * f.mag if f.err else 0))


def _trip_max(node, ctx) -> int:
    lim = node.p["n"]
    if isinstance(lim, int):
        return lim
    if lim == "arg":
        return int(max(ctx.facts[node.args[1]].hi, 0))
    d = dim_value(lim, lambda v: ctx.types[v].shape)
    return ctx.maxn([d])


def _loop_facts(node, fs, ctx):
    """The carry's range: the initial value's, widened until the body maps it into itself
    (the generator ends bodies in a clip to the initial range, a fixed point at once); the
    error bound is then followed for the most iterations any tested size makes."""
    body_typing = ctx.sub_types[ctx.vid][0]
    init = fs[0]
    n = _trip_max(node, ctx)
    caps = list(fs[2:] if node.op == "while" and node.p["n"] == "arg" else fs[1:])
    counter = ifacts(0, max(n - 1, 0))
    lo, hi = init.lo, init.hi
    for _ in range(3):
        out = infer_facts(node.subs[0], body_typing, [counter, Facts(lo, hi, init.err)] + caps,
                          ctx.envs)
        if lo <= out.lo and out.hi <= hi:
            break
        lo, hi = min(lo, out.lo), max(hi, out.hi)
    else:
        raise Invalid("the body leaves the carry's range")
    err = init.err
    for _ in range(n):
        out = infer_facts(node.subs[0], body_typing, [counter, Facts(lo, hi, err)] + caps,
                          ctx.envs)
        err = max(err, out.err)
        if err > MAX_REL_ERR * max(1.0, abs(lo), abs(hi)):
            raise Invalid("loop error grows")
    return Facts(lo, hi, err)


def _loop_run(node, xs, ctx):
    body = node.subs[0]
    caps = list(xs[2:] if node.op == "while" and node.p["n"] == "arg" else xs[1:])
    fn = lambda i, c: ctx.run_sub(body, [i, c] + caps)[0]     # noqa: E731
    lim = node.p["n"]
    lim = xs[1] if lim == "arg" else lim if isinstance(lim, int) else dim_value(lim, ctx.shape_of)
    if node.op == "fori":
        return lax.fori_loop(0, lim, fn, xs[0])
    return lax.while_loop(lambda s: s[0] < lim, lambda s: (s[0] + 1, fn(*s)), (0, xs[0]))[1]


def _loop_src(node, n, ctx):
    lines, fname = ctx.print_sub(node.subs[0], f"body{ctx.vid}", ["i", "c"],
                                 n[2:] if node.op == "while" and node.p["n"] == "arg" else n[1:])
    lim = node.p["n"]
    lim = n[1] if lim == "arg" else str(lim) if isinstance(lim, int) else ctx.dsrc(lim)
    if node.op == "fori":
        return lines, f"lax.fori_loop(0, {lim}, {fname}, {n[0]})"
    return lines, (f"lax.while_loop(lambda s: s[0] < {lim}, lambda s: (s[0] + 1, {fname}(*s)), "
                   f"(0, {n[0]}))[1]")


def _scan_facts(node, fs, ctx):
    """As a loop's (the carry's range widened to a fixed point, the error followed for the
    longest scan), and the stacked outputs' facts from the last step."""
    body, typing = node.subs[0], ctx.sub_types[ctx.vid][0]
    init, xs, caps = fs[0], fs[1], list(fs[2:])
    n = ctx.maxn([ctx.types[node.args[1]].shape[0]])
    lo, hi = init.lo, init.hi
    for _ in range(3):
        out = output_facts(body, typing, [Facts(lo, hi, init.err), xs] + caps, ctx.envs)[0]
        if lo <= out.lo and out.hi <= hi:
            break
        lo, hi = min(lo, out.lo), max(hi, out.hi)
    else:
        raise Invalid("the body leaves the carry's range")
    err = init.err
    outs = output_facts(body, typing, [Facts(lo, hi, err), xs] + caps, ctx.envs)
    for _ in range(n):
        outs = output_facts(body, typing, [Facts(lo, hi, err), xs] + caps, ctx.envs)
        err = max(err, outs[0].err)
        if err > MAX_REL_ERR * max(1.0, abs(lo), abs(hi)):
            raise Invalid("scan error grows")
    return Facts(lo, hi, err) if node.p["out"] == "carry" else outs[1]


def _scan_run(node, xs, ctx):
    body, caps = node.subs[0], list(xs[2:])
    carry, ys = lax.scan(lambda c, x: tuple(ctx.run_sub(body, [c, x] + caps)), xs[0], xs[1])
    return carry if node.p["out"] == "carry" else ys


def _scan_src(node, n, ctx):
    lines, fname = ctx.print_sub(node.subs[0], f"step{ctx.vid}", ["c", "x"], n[2:])
    return lines, f"lax.scan({fname}, {n[0]}, {n[1]})[{0 if node.p['out'] == 'carry' else 1}]"


SCATTERS = ("add", "set", "max", "min")


def _scatter_run(node, xs, ctx):
    (c,) = _typed(xs[0], node.p["c"])
    return getattr(xs[0].at[xs[1]], node.p["f"])(c, mode="drop")


def _scatter_src(node, n, ctx):
    return f"{n[0]}.at[{n[1]}].{node.p['f']}({_operand_cst(node, ctx, node.p['c'])}, mode='drop')"


def _scatter_facts(node, fs, ctx):
    """Out-of-bounds indices are dropped; an index repeated k times adds k times (in an order
    that may differ: k roundings)."""
    f, c, name = fs[0], node.p["c"], node.p["f"]
    if name != "add":
        g = hull(f, Facts(c, c))
        return g if name == "set" else Facts(max(f.lo, c), max(f.hi, c), f.err) \
            if name == "max" else Facts(min(f.lo, c), min(f.hi, c), f.err)
    k = ctx.maxn(ctx.types[node.args[1]].shape)
    lo, hi = f.lo + min(0, k * c), f.hi + max(0, k * c)
    if ctx.types[node.args[0]].dtype.kind == "i":
        return ifacts(lo, hi)
    return ffacts(lo, hi, f.err + 2 * (k + 1) * U * max(abs(lo), abs(hi)))


POOLS = {"max": "max", "min": "min", "sum": "add"}


def _pool_init(dtype, f):
    if np.dtype(dtype).kind == "f":
        return {"max": -np.inf, "min": np.inf, "sum": 0.0}[f]
    return {"max": INT_MIN, "min": INT_MAX, "sum": 0}[f]


def _pool_run(node, xs, ctx):
    x, f = xs[0], node.p["f"]
    init = jnp.asarray(_pool_init(x.dtype, f), x.dtype)
    return lax.reduce_window(x, init, getattr(lax, POOLS[f]), node.p["window"], node.p["strides"],
                             node.p["padding"])


def _pool_src(node, n, ctx):
    dtype = ctx.types[node.args[0]].dtype
    init = _pool_init(dtype, node.p["f"])
    init = ("-jnp.inf" if init < 0 else "jnp.inf") if np.isinf(init) else repr(init)
    return (f"lax.reduce_window({n[0]}, jnp.{dtype.name}({init}), lax.{POOLS[node.p['f']]}, "
            f"{_ptuple(node.p['window'])}, {_ptuple(node.p['strides'])}, '{node.p['padding']}')")


def _pool_facts(node, fs, ctx):
    f = fs[0]
    if node.p["f"] != "sum":
        return f
    n = math.prod(node.p["window"])
    lo, hi = min(0, n * f.lo), max(0, n * f.hi)
    if ctx.types[node.args[0]].dtype.kind == "i":
        return ifacts(lo, hi)
    return ffacts(lo, hi, n * f.err + (n + 1) * U * n * f.mag)


def _cond_facts(node, fs, ctx):
    ops = fs[1:] if node.p["pred"] == "arg" else fs
    outs = [infer_facts(sub, t, ops, ctx.envs)
            for sub, t in zip(node.subs, ctx.sub_types[ctx.vid])]
    return hull(*outs)


def _pred(node, xs, ctx):
    if node.p["pred"] == "arg":
        return xs[0]
    _, d, k = node.p["pred"]
    return jnp.asarray(dim_value(d, ctx.shape_of)) > k


def _cond_run(node, xs, ctx):
    ops = list(xs[1:] if node.p["pred"] == "arg" else xs)
    k = node.p["n_ops"]
    caps = ops[k:]                                   # read by the branches as closures
    branches = [lambda *o, s=s: ctx.run_sub(s, list(o) + caps)[0] for s in node.subs]
    return lax.cond(_pred(node, xs, ctx), branches[0], branches[1], *ops[:k])


def _cond_src(node, n, ctx):
    ops = n[1:] if node.p["pred"] == "arg" else n
    params = [f"p{i}" for i in range(node.p["n_ops"])]
    caps = ops[node.p["n_ops"]:]
    lt, ft = ctx.print_sub(node.subs[0], f"yes{ctx.vid}", params, caps)
    lf, ff = ctx.print_sub(node.subs[1], f"no{ctx.vid}", params, caps)
    pred = n[0] if node.p["pred"] == "arg" else \
        f"jnp.asarray({ctx.dsrc(node.p['pred'][1])}) > {node.p['pred'][2]}"
    return lt + lf, f"lax.cond({pred}, {ft}, {ff}, {', '.join(ops[:node.p['n_ops']])})"


def _table_op(kind):
    """An op of FLOAT_/INT_/BOOL_UNARY or _BINARY, by its operands' dtype."""
    def entry(node, dtype):
        return table_for(kind, dtype)[node.p["f"]]
    return Op(run=lambda node, xs, ctx: entry(node, xs[0].dtype)[1](*xs),
              src=lambda node, n, ctx: entry(node, _arg_type(ctx, node).dtype)[0].format(*n),
              facts=lambda node, fs, ctx: entry(node, _arg_type(ctx, node).dtype)[2](*fs))


OPS: dict[str, Op] = {
    "unary": _table_op("unary"),
    "binary": _table_op("binary"),
    "cst": Op(_cst_run, _cst_src, _cst_facts),
    "cmp": Op(_cmp_run, _cmp_src, _cmp_facts),
    "where": Op(_where_run, _where_src, _where_facts),
    "clip": Op(_clip_run, _clip_src, _clip_facts),
    "expand": Op(lambda node, xs, ctx: jnp.expand_dims(xs[0], node.p["axis"]),
                 lambda node, n, ctx: n[0] + _index_src(len(_arg_type(ctx, node).shape),
                                                        node.p["axis"], "None"),
                 _passthrough),
    "bcast": Op(lambda node, xs, ctx: jnp.broadcast_to(xs[0], _shape(node, ctx)),
                lambda node, n, ctx: f"jnp.broadcast_to({n[0]}, {_shape_src(ctx, node)})",
                _passthrough),
    "bid": Op(lambda node, xs, ctx: lax.broadcast_in_dim(xs[0], _shape(node, ctx), node.p["dims"]),
              lambda node, n, ctx: (f"lax.broadcast_in_dim({n[0]}, {_shape_src(ctx, node)}, "
                                    f"{_ptuple(node.p['dims'])})"),
              _passthrough),
    "squeeze": Op(lambda node, xs, ctx: jnp.squeeze(xs[0], node.p["axis"]),
                  lambda node, n, ctx: f"jnp.squeeze({n[0]}, {node.p['axis']})", _passthrough),
    "reshape": Op(lambda node, xs, ctx: xs[0].reshape(_shape(node, ctx)),
                  lambda node, n, ctx: f"{n[0]}.reshape{_shape_src(ctx, node)}", _passthrough),
    "transpose": Op(lambda node, xs, ctx: jnp.transpose(xs[0], node.p["perm"]),
                    lambda node, n, ctx: (f"{n[0]}.T" if node.p["perm"] == (1, 0) else
                                          f"jnp.transpose({n[0]}, {_ptuple(node.p['perm'])})"),
                    _passthrough),
    "slice": Op(_slice_run, _slice_op_src, _passthrough),
    "index": Op(lambda node, xs, ctx: xs[0][(slice(None),) * node.p["axis"] + (node.p["i"],)],
                lambda node, n, ctx: n[0] + "[" + ", ".join([":"] * node.p["axis"]
                                                            + [str(node.p["i"])]) + "]",
                _passthrough, _index_needs),
    "flip": Op(lambda node, xs, ctx: jnp.flip(xs[0], node.p["axis"]),
               lambda node, n, ctx: f"jnp.flip({n[0]}, {node.p['axis']})", _passthrough),
    "dslice": Op(_dslice_run, _dslice_src, _dslice_facts),
    "take": Op(lambda node, xs, ctx: jnp.take(xs[0], xs[1], axis=node.p["axis"], mode="clip"),
               lambda node, n, ctx: (f"jnp.take({n[0]}, {n[1]}, axis={node.p['axis']}, "
                                     "mode='clip')"),
               _passthrough, _take_needs),
    "concat": Op(lambda node, xs, ctx: jnp.concatenate(xs, node.p["axis"]),
                 lambda node, n, ctx: f"jnp.concatenate([{', '.join(n)}], {node.p['axis']})",
                 _hull_all),
    "stack": Op(lambda node, xs, ctx: jnp.stack(xs, node.p["axis"]),
                lambda node, n, ctx: f"jnp.stack([{', '.join(n)}], {node.p['axis']})", _hull_all),
    "pad": Op(_pad_run, _pad_src, _pad_facts),
    "lpad": Op(_lpad_run, _lpad_src, _pad_facts, _lpad_needs),
    "iota": Op(lambda node, xs, ctx: lax.broadcasted_iota(jnp.int32, _shape(node, ctx),
                                                          node.p["dim"]),
               _iota_src, _iota_facts),
    "reduce": Op(_reduce_run, _reduce_src, _reduce_facts, _reduce_needs),
    "argred": Op(lambda node, xs, ctx: getattr(jnp, node.p["f"])(xs[0], axis=node.p["axis"],
                                                                 keepdims=node.p["keep"]),
                 lambda node, n, ctx: (f"jnp.{node.p['f']}({n[0]}, axis={node.p['axis']}"
                                       + (", keepdims=True)" if node.p["keep"] else ")")),
                 _argred_facts, lambda node, ctx: [_take_needs(node, ctx)[0]]),
    "cum": Op(lambda node, xs, ctx: getattr(lax, node.p["f"])(xs[0], axis=node.p["axis"],
                                                              reverse=node.p["rev"]),
              lambda node, n, ctx: (f"lax.{node.p['f']}({n[0]}, axis={node.p['axis']}"
                                    + (", reverse=True)" if node.p["rev"] else ")")),
              _cum_facts),
    "softmax": Op(lambda node, xs, ctx: jax.nn.softmax(xs[0], axis=node.p["axis"]),
                  lambda node, n, ctx: f"jax.nn.softmax({n[0]}, axis={node.p['axis']})",
                  _softmax_facts, lambda node, ctx: [_nonempty_or_empty_result(node, ctx)]),
    "lse": Op(lambda node, xs, ctx: jax.nn.logsumexp(xs[0], axis=node.p["axis"],
                                                     keepdims=node.p["keep"]),
              lambda node, n, ctx: (f"jax.nn.logsumexp({n[0]}, axis={node.p['axis']}"
                                    + (", keepdims=True)" if node.p["keep"] else ")")),
              _lse_facts, lambda node, ctx: [_nonempty_or_empty_result(node, ctx)]),
    "sort": Op(lambda node, xs, ctx: jnp.sort(xs[0], axis=node.p["axis"]),
               lambda node, n, ctx: f"jnp.sort({n[0]}, axis={node.p['axis']})", _sort_facts),
    "argsort": Op(lambda node, xs, ctx: jnp.argsort(xs[0], axis=node.p["axis"]).astype(
                      jnp.int32),
                  lambda node, n, ctx: (f"jnp.argsort({n[0]}, axis={node.p['axis']})"
                                        ".astype(jnp.int32)"),
                  _argsort_facts),
    "dot": Op(lambda node, xs, ctx: (xs[0] @ xs[1] if node.p.get("matmul")
                                     else jnp.einsum(node.p["spec"], *xs)),
              _dot_src, _dot_facts),
    "dimop": Op(_dimop_run,
                lambda node, n, ctx: f"{n[0]} {node.p['f']} {ctx.dsrc(node.p['dim'])}",
                _dimop_facts, _dimop_needs),
    "cvt": Op(_cvt_run, _cvt_src, _cvt_facts),
    "scatter": Op(_scatter_run, _scatter_src, _scatter_facts),
    "pool": Op(_pool_run, _pool_src, _pool_facts),
    "scan": Op(_scan_run, _scan_src, _scan_facts),
    "fori": Op(_loop_run, _loop_src, _loop_facts),
    "while": Op(_loop_run, _loop_src, _loop_facts),
    "cond": Op(_cond_run, _cond_src, _cond_facts),
}
CONTROL = ("fori", "while", "cond", "scan")


# -- inference: shapes (jax.eval_shape of each op), facts, validity at the tested sizes ---------

@dataclasses.dataclass
class Typing:
    types: list          # vid -> jax.ShapeDtypeStruct (symbolic dims)
    facts: list          # vid -> Facts
    subs: dict           # vid of a node with bodies -> [Typing of each body]


def input_type(inp: Input):
    return jax.ShapeDtypeStruct(tuple(SYM[d] if isinstance(d, str) else d
                                      for d in inp.template), inp.dtype)


def input_facts(inp: Input) -> Facts:
    kind, lo, hi = inp.dist
    if inp.dtype == BOOL:
        return BOOL_FACTS
    if inp.dtype.kind == "i":
        return ifacts(lo, hi)
    return Facts(float(lo), float(hi)) if kind != "halves" else Facts(lo / 2, hi / 2)


def body_input_types(node: Node, types: list) -> list[list]:
    """The parameter types of each body of a control-flow node (captured values follow)."""
    ts = [types[a] for a in node.args]
    if node.op == "scan":
        return [[ts[0], jax.ShapeDtypeStruct(ts[1].shape[1:], ts[1].dtype)] + ts[2:]]
    if node.op in ("fori", "while"):
        caps = ts[2:] if node.op == "while" and node.p["n"] == "arg" else ts[1:]
        return [[jax.ShapeDtypeStruct((), I32), ts[0]] + caps]
    ops = ts[1:] if node.p["pred"] == "arg" else ts
    return [ops, ops]


def body_input_facts(node: Node, facts: list, ctx) -> list[list]:
    fs = [facts[a] for a in node.args]
    if node.op == "scan":
        return [fs]
    if node.op in ("fori", "while"):
        n = _trip_max(node, ctx)
        caps = fs[2:] if node.op == "while" and node.p["n"] == "arg" else fs[1:]
        return [[ifacts(0, max(n - 1, 0)), fs[0]] + caps]
    ops = fs[1:] if node.p["pred"] == "arg" else fs
    return [ops, ops]


def check_valid(t, needs, envs) -> None:
    for env in envs:
        sizes = [at(d, env) for d in t.shape]
        if min(sizes, default=0) < 0:
            raise Invalid(f"negative size {t.shape} at {env}")
        if math.prod(sizes) > MAX_ELEMS:
            raise Invalid("too large")
        for need in needs:
            if not need(env):
                raise Invalid(f"not defined at {env}")


def type_node(node: Node, typing: Typing, envs: list[dict], vid: int, vals: list):
    """(type, facts, body typings, traced value) of a node, or Invalid. Runs inside a jax trace
    (vals: the traced values so far), so that jax itself says what the op's shape is."""
    for d in deps(node):
        if not 0 <= d < vid:
            raise Invalid("bad operand")
    ctx = Ctx(envs, typing.types, typing.facts, shape_of=lambda v: vals[v].shape, vid=vid,
              run_sub=run_program)
    subs = []
    if node.subs:
        for sub, in_types, in_facts in zip(node.subs, body_input_types(node, typing.types),
                                           body_input_facts(node, typing.facts, ctx)):
            if len(in_types) != sub.n_in or len(sub.outputs) != (2 if node.op == "scan" else 1):
                raise Invalid("body arity")
            subs.append(infer(sub, envs, in_types, in_facts))
        ctx.sub_types[vid] = subs
    op = OPS[node.op]
    try:
        out = op.run(node, [vals[a] for a in node.args], ctx)
    except Invalid:
        raise
    except Exception as err:
        raise Invalid(f"jax refuses: {type(err).__name__}: {str(err)[:200]}") from None
    if not isinstance(out, jax.core.Tracer):
        raise Invalid("not one array")
    t = jax.ShapeDtypeStruct(out.shape, out.dtype)
    ctx.types = typing.types + [t]
    check_valid(t, op.needs(node, ctx), envs)
    try:
        f = op.facts(node, [typing.facts[a] for a in node.args], ctx)
    except (OverflowError, ZeroDivisionError, ValueError):
        raise Invalid("facts out of range") from None
    if t.dtype.kind == "f":
        if not (f.mag <= MAX_MAG and f.err <= MAX_REL_ERR * max(1.0, f.mag)):
            raise Invalid("ill conditioned")
    return t, f, subs, out


def traced(fn: Callable, in_types: list):
    """Run fn(*tracers) inside jax.eval_shape; errors jax raises there become Invalid."""
    try:
        jax.eval_shape(lambda *xs: fn(list(xs)), *in_types)
    except Invalid:
        raise
    except Exception as err:
        raise Invalid(f"jax refuses: {type(err).__name__}: {str(err)[:200]}") from None


def infer(prog: Program, envs: list[dict], in_types=None, in_facts=None) -> Typing:
    """Types, facts and bodies' typings of every value; Invalid if any op is not well defined
    at every size in envs. in_types/in_facts: a body's parameters (else from the templates)."""
    if in_types is None:
        for inp in prog.inputs:
            check_valid(input_type(inp), [], envs)
        in_types = [input_type(i) for i in prog.inputs]
        in_facts = [input_facts(i) for i in prog.inputs]
    typing = Typing(list(in_types), list(in_facts), {})

    def run(vals):
        for k, node in enumerate(prog.nodes):
            vid = prog.n_in + k
            t, f, subs, out = type_node(node, typing, envs, vid, vals)
            typing.types.append(t)
            typing.facts.append(f)
            vals.append(out)
            if subs:
                typing.subs[vid] = subs
    traced(run, in_types)
    if not prog.outputs or not all(0 <= o < len(typing.types) for o in prog.outputs):
        raise Invalid("bad outputs")
    return typing


def infer_facts(prog: Program, typing: Typing, in_facts: list, envs) -> Facts:
    """The facts of a body's (first) output for these parameter facts (shapes known)."""
    return output_facts(prog, typing, in_facts, envs)[0]


def output_facts(prog: Program, typing: Typing, in_facts: list, envs) -> list[Facts]:
    facts = list(in_facts)
    ctx = Ctx(envs, typing.types, facts, sub_types=typing.subs)
    for k, node in enumerate(prog.nodes):
        ctx.vid = prog.n_in + k
        facts.append(OPS[node.op].facts(node, [facts[a] for a in node.args], ctx))
    return [facts[o] for o in prog.outputs]


# -- interpreter ----------------------------------------------------------------------------------

def run_program(prog: Program, in_vals: list) -> list:
    vals = list(in_vals)
    ctx = Ctx([], shape_of=lambda v: vals[v].shape, run_sub=run_program)
    for node in prog.nodes:
        vals.append(OPS[node.op].run(node, [vals[a] for a in node.args], ctx))
    return [vals[o] for o in prog.outputs]


def make_fn(prog: Program) -> Callable:
    """The JAX function of a program: positional inputs -> tuple of outputs."""
    def fn(*xs):
        return tuple(run_program(prog, list(xs)))
    return fn


def dynamic_axes(prog: Program) -> tuple:
    return tuple({i: d for i, d in enumerate(inp.template) if isinstance(d, str)} or None
                 for inp in prog.inputs)


# -- printer ------------------------------------------------------------------------------------

class _Printer:
    def __init__(self, envs):
        self.envs = envs

    def program(self, prog, typing, names, prefix, indent):
        names = list(names) + [f"{prefix}v{prog.n_in + k}" for k in range(len(prog.nodes))]
        lines = []

        def dsrc(e):
            if isinstance(e, int):
                return str(e)
            if e[0] == "ref":
                d = typing.types[e[1]].shape[e[2]]
                for var, s in SYM.items():
                    if same(d, s):
                        return var
                return f"{names[e[1]]}.shape[{e[2]}]"
            x, y = dsrc(e[1]), dsrc(e[2])
            x = f"({x})" if " - " in x or " // " in x else x
            y = f"({y})" if " " in y and (e[0] != "mul" or " - " in y or " // " in y) else y
            return f"{x} {dict(mul='*', fdiv='//', sub='-')[e[0]]} {y}"

        ctx = Ctx(self.envs, typing.types, typing.facts, dsrc=dsrc)
        for k, node in enumerate(prog.nodes):
            vid = prog.n_in + k
            ctx.vid = vid

            def print_sub(sub, fname, params, caps, vid=vid, k=k):
                sub_t = typing.subs[vid][[i for i, s in enumerate(node.subs) if s is sub][0]]
                body = self.program(sub, sub_t, list(params) + list(caps), f"{fname}_",
                                    indent + "    ")
                head = f"{indent}def {fname}({', '.join(params)}):"
                return [head] + body, fname
            ctx.print_sub = print_sub
            out = OPS[node.op].src(node, [names[a] for a in node.args], ctx)
            if isinstance(out, tuple):
                lines += out[0]
                out = out[1]
            lines.append(f"{indent}{names[vid]} = {out}")
        outs = ", ".join(names[o] for o in prog.outputs)
        lines.append(f"{indent}return {outs}" + ("," if len(prog.outputs) == 1 and not prefix
                                                 else ""))
        return lines


def input_code(prog: Program, env: dict, seed: int, names=None) -> list[str]:
    """Lines that make the test inputs at env (the checker executes these very lines)."""
    names = names or [f"x{i}" for i in range(prog.n_in)]
    lines = [f"rng = np.random.default_rng({seed})"]
    for name, inp in zip(names, prog.inputs):
        shape = _ptuple(env[d] if isinstance(d, str) else d for d in inp.template)
        kind, lo, hi = inp.dist
        if inp.dtype == BOOL:
            expr = f"rng.random({shape}) < 0.5"
        elif inp.dtype.kind == "i":
            expr = f"rng.integers({lo}, {hi}, {shape}, endpoint=True).astype(np.int32)"
        elif kind == "halves":
            expr = f"(rng.integers({lo}, {hi}, {shape}, endpoint=True) / 2).astype(np.float32)"
        else:
            expr = f"rng.uniform({lo}, {hi}, {shape}).astype(np.float32)"
        lines.append(f"{name} = {expr}")
    return lines


def make_inputs(prog: Program, env: dict, seed: int) -> list[np.ndarray]:
    ns = {"np": np}
    exec("\n".join(input_code(prog, env, seed)), ns)
    return [ns[f"x{i}"] for i in range(prog.n_in)]


def function_source(prog: Program, envs=None, typing=None, name="f") -> list[str]:
    envs = envs or [dict.fromkeys(NAMES, 2)]
    typing = typing or infer(prog, envs)
    names = [f"x{i}" for i in range(prog.n_in)]
    body = _Printer(envs).program(prog, typing, names, "", "    ")
    text = "\n".join(body)
    dims = []
    for var in NAMES:
        if re.search(rf"\b{var}\b", text):
            i, ax = next((i, inp.template.index(var)) for i, inp in enumerate(prog.inputs)
                         if var in inp.template)
            dims.append((var, f"x{i}.shape[{ax}]"))
    head = [f"def {name}({', '.join(names)}):"]
    if dims:
        head.append(f"    {', '.join(v for v, _ in dims)} = {', '.join(s for _, s in dims)}")
    return head + body


def source(prog: Program, env: dict | None = None, seed: int = 0, tols=None) -> str:
    """A standalone script: the function, inputs at env, jdisc against jax.jit."""
    env = env or dict.fromkeys(NAMES, 2)
    envs = [env]
    lines = ["import jax, jax.numpy as jnp, numpy as np", "from jax import lax", "import jdisc",
             ""] + function_source(prog, envs) + [""] + input_code(prog, env, seed)
    args = ", ".join(f"x{i}" for i in range(prog.n_in))
    lines += [f"jf = jdisc.jit(f, dynamic_axes={dynamic_axes(prog)!r})",
              f"for got, want in zip(jf({args}), jax.jit(f)({args})):",
              "    got, want = np.asarray(got), np.asarray(want)",
              "    print(got.shape, want.shape, np.max(np.abs(got.astype(float) - "
              "want.astype(float)), initial=0))"]
    if tols is not None:
        lines.append(f"# tolerances (max |diff| allowed): {tols}")
    return "\n".join(lines) + "\n"


# -- the differential check --------------------------------------------------------------------

def tolerance(facts: Facts, dtype) -> float:
    """Both sides are within facts.err of the exact value; 1.25: slack for the second-order
    terms the first-order bound leaves out."""
    return 0.0 if np.dtype(dtype).kind != "f" else 2.5 * facts.err


def compare(got, want, tol: float) -> str | None:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    if got.size == 0:
        return None
    if got.dtype.kind != "f":
        bad = got != want
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {got.size} differ; at {i}: {got[i]} != {want[i]}"
        return None
    same_ = (got == want) | (np.isnan(got) & np.isnan(want))
    diff = np.where(same_, 0.0, np.abs(got.astype(np.float64) - want.astype(np.float64)))
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > max(tol, 1e-30)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {got.size} differ by up to {diff.max():.3g} "
                f"(tolerance {tol:.3g}); at {i}: {got[i]} != {want[i]}")
    return None


@dataclasses.dataclass
class Failure:
    kind: str                    # "mismatch", an exception type name, or "compiles"
    message: str
    env: dict | None = None
    output: int | None = None    # which output (of the program) mismatched


REFERENCE_OPTIONS = {"xla_backend_optimization_level": 0}


def reference(fn, args):
    """jax.jit(fn)(*args), compiled with LLVM at -O0: the same HLO and the same arithmetic
    (no fast-math either way), in half the compile time, which dominates the fuzzer's."""
    return jax.jit(fn).lower(*args).compile(compiler_options=REFERENCE_OPTIONS)(*args)


def check(progs: list[Program], envs: list[dict], seeds=None) -> list[list[Failure]]:
    """Run the programs as the outputs of ONE jdisc function (one compile) and of jax.jit at
    every env (program i's inputs drawn with seeds[i]); per program, the failures found. A
    jdisc error is blamed on every program. Programs jax.export itself refuses (its lowering
    checks sizes that the generator's tracing does not) are dropped: they fail nothing."""
    seeds = list(range(len(progs))) if seeds is None else list(seeds)
    if not progs:
        return []
    fails = _check(progs, envs, seeds)
    if not any(f.kind == "ShapeError" and "jax.export could not trace" in f.message
               for fl in fails for f in fl):
        return fails
    ok = [i for i, p in enumerate(progs) if exportable(p)]
    if len(ok) == len(progs):
        return fails
    out: list[list[Failure]] = [[] for _ in progs]
    for i, fl in zip(ok, check([progs[i] for i in ok], envs, [seeds[i] for i in ok])):
        out[i] = fl
    return out


def _check(progs, envs, seeds) -> list[list[Failure]]:
    import jdisc
    typings = [infer(p, envs) for p in progs]
    offsets, fns, k = [], [], 0
    for p in progs:
        offsets.append(k)
        k += p.n_in
        fns.append(make_fn(p))

    def fn(*xs):
        out = []
        for p, off, f in zip(progs, offsets, fns):
            out += f(*xs[off:off + p.n_in])
        return tuple(out)

    axes = sum((dynamic_axes(p) for p in progs), ())
    jf = jdisc.jit(fn, dynamic_axes=axes)
    fails: list[list[Failure]] = [[] for _ in progs]
    for env in envs:
        args = sum((make_inputs(p, env, s) for p, s in zip(progs, seeds)), [])
        try:
            want = reference(fn, args)
        except Exception:                         # jax refuses this size: nothing to compare
            continue
        try:
            got = jf(*args)
        except Exception as err:
            if type(err).__name__ == "ShapeError" and 0 in env.values() and jf.stats()["compiles"]:
                # a clear refusal of a size-0 call that jax.jit runs: recorded, as in
                # fuzz_support (SizeZeroRefusal), not failed; the other sizes still count
                for fl in fails:
                    fl.append(Failure("size0", f"ShapeError: {err}"[:2000], env))
                continue
            for fl in fails:
                fl.append(Failure(type(err).__name__, f"{err}"[:2000], env))
            return fails
        j = 0
        for i, (p, t) in enumerate(zip(progs, typings)):
            for n, o in enumerate(p.outputs):
                msg = compare(got[j], want[j], tolerance(t.facts[o], t.types[o].dtype))
                kind = "mismatch"
                if msg and np.shape(got[j]) != np.shape(want[j]) and 0 in env.values() and \
                        np.shape(got[j]) == tuple(at(d, env) for d in t.types[o].shape):
                    # the exported program's own size at this env: jax.export simplified it
                    # assuming every dim >= 1 (x[:1] of a dim a has the static size 1)
                    kind, msg = "size0", f"jax.export's size {t.types[o].shape}: {msg}"
                if msg and not any(f.output == n for f in fails[i]):
                    fails[i].append(Failure(kind, f"output {n} at {env}: {msg}", env, n))
                j += 1
    if jf.stats()["compiles"] != 1:
        for fl in fails:
            fl.append(Failure("compiles", f"{jf.stats()}"))
    return fails


# -- generator ---------------------------------------------------------------------------------

def draw_envs(rng: np.random.Generator, zero: bool) -> list[dict]:
    """The four tested sizes of a batch: the first (where jdisc compiles) two distinct sizes,
    then 1, 13 and primes; with `zero`, each dim 0 once (else a == b once)."""
    c = lambda xs: int(rng.choice(xs))          # noqa: E731
    envs = [{"a": c([5, 7]), "b": c([2, 3, 13])}, {"a": 1, "b": 1}]
    if zero:
        return envs + [{"a": 0, "b": c([13, 5])}, {"a": c([13, 3]), "b": 0}]
    return envs + [{"a": 13, "b": c([5, 7])}, [{"a": 3, "b": 3}, {"a": 2, "b": 13}][c([0, 1])]]


def _is_one(d) -> bool:
    return isinstance(d, int) and d == 1


class Generator:
    """Random programs over the dims a, b, valid at every env of `envs`."""

    def __init__(self, rng: np.random.Generator, envs: list[dict], depth: int = 0):
        self.rng, self.envs, self.depth = rng, envs, depth

    # ---- helpers
    def r(self, n=None):
        return self.rng.random() if n is None else int(self.rng.integers(n))

    def choice(self, xs):
        return xs[self.r(len(xs))]

    def maybe(self, pred=lambda v: True, exclude=()):
        try:
            return self.pick(pred, exclude)
        except Invalid:
            return None

    def pick(self, pred=lambda v: True, exclude=()):
        """A value id: recent values are likelier (deep chains), any value possible (sharing)."""
        cands = [v for v in range(len(self.types)) if v not in exclude and pred(v)]
        if not cands:
            raise Invalid("no operand")
        if self.r() < 0.55:
            return cands[-1 - min(self.r(3), len(cands) - 1)]
        return self.choice(cands)

    def shape(self, v):
        return self.types[v].shape

    def kind(self, v):
        return self.types[v].dtype.kind

    def ref(self, d):
        """A parameter dim expression for dim d: an int, or the earliest axis that has it."""
        if isinstance(d, int):
            return d
        for v, t in enumerate(self.types):
            for ax, x in enumerate(t.shape):
                if same(x, d):
                    return ("ref", v, ax)
        raise Invalid("dim not found")

    def dims(self):
        """Dims that occur in the program: vars first."""
        out = [d for d in SYM.values() if any(same(d, x) for t in self.types for x in t.shape)]
        for t in self.types:
            for x in t.shape:
                if not any(same(x, y) for y in out) and self.ctx.maxn([x]) <= 16:
                    out.append(x)
        return out

    def add(self, op, args, p, subs=()):
        node = Node(op, tuple(args), p, tuple(subs))
        t, f, sub_t, out = type_node(node, self.typing, self.envs, len(self.types), self.vals)
        self.prog.nodes.append(node)
        self.typing.types.append(t)
        self.typing.facts.append(f)
        self.vals.append(out)
        if sub_t:
            self.typing.subs[len(self.types) - 1] = sub_t
        return len(self.types) - 1

    @property
    def types(self):
        return self.typing.types

    @property
    def facts(self):
        return self.typing.facts

    @property
    def ctx(self):
        return Ctx(self.envs, self.types, self.facts)

    # ---- programs
    def program(self, n_ops: int, n_inputs: int | None = None) -> Program:
        self.prog = Program([], [], [])
        for _ in range(n_inputs or 1 + self.r(4)):
            self.prog.inputs.append(self.new_input())
        first = self.prog.inputs[0]
        if not any(isinstance(d, str) for i in self.prog.inputs for d in i.template):
            first.template = ("a",) + first.template[:2]
        self.typing = Typing([input_type(i) for i in self.prog.inputs],
                             [input_facts(i) for i in self.prog.inputs], {})

        def run(vals):
            self.vals = vals
            self.fill(n_ops)
        traced(run, self.typing.types)
        self.prog.outputs = self.choose_outputs()
        return self.prog

    def new_input(self) -> Input:
        rank = self.choice([0, 1, 1, 2, 2, 2, 3, 3])
        tmpl = tuple(self.choice(["a", "a", "b", "b", 1, 2, 3, 4]) for _ in range(rank))
        dtype = self.choice([F32] * 6 + [I32] * 2 + [BOOL])
        if dtype == F32:
            dist = self.choice([("uniform", -2.0, 2.0), ("uniform", -2.0, 2.0),
                                ("uniform", 0.5, 2.0), ("halves", -4, 4)])
        elif dtype == I32:
            dist = self.choice([("int", -8, 8), ("int", -1000, 1000), ("int", 0, 40)])
        else:
            dist = ("bool", 0, 1)
        return Input(dtype, tmpl, dist)

    def fill(self, n_ops: int):
        gens = list(GEN_WEIGHTS)
        w = np.array([GEN_WEIGHTS[g] for g in gens], float)
        if self.depth:
            w[[gens.index(g) for g in CONTROL]] = 0
        w /= w.sum()
        done = 0
        while done < n_ops:
            for _ in range(30):
                g = gens[int(self.rng.choice(len(gens), p=w))]
                n_before = len(self.prog.nodes)
                try:
                    getattr(self, "gen_" + g)()
                    break
                except Invalid:
                    self.rollback(n_before)
            done += 1

    def rollback(self, n_nodes):
        del self.prog.nodes[n_nodes:]
        n = self.prog.n_in + n_nodes
        del self.typing.types[n:]
        del self.typing.facts[n:]
        del self.vals[n:]
        for k in [k for k in self.typing.subs if k >= n]:
            del self.typing.subs[k]

    def choose_outputs(self) -> list[int]:
        used = {a for n in self.prog.nodes for a in deps(n)}
        last = len(self.types) - 1
        sinks = [v for v in range(self.prog.n_in, last) if v not in used]
        self.rng.shuffle(sinks)
        outs = [last] + sinks[:3]
        if self.r() < 0.2 and last > self.prog.n_in:      # an intermediate with consumers too
            outs.append(self.prog.n_in + self.r(last - self.prog.n_in))
        return outs

    # ---- elementwise
    def gen_unary(self):
        v = self.pick()
        table = table_for("unary", self.types[v].dtype)
        names = list(table)
        if self.kind(v) == "f" and self.facts[v].mag > 20:
            names = ["tanh", "sin", "sigmoid", "cos"]
        self.add("unary", [v], {"f": self.choice(names)})

    def gen_cst(self):
        v = self.pick(lambda v: self.kind(v) in "fi")
        f = self.choice(["+", "*", "*", "r-"])
        if self.kind(v) == "f":
            c = self.choice([0.5, 0.25, 2.0, -1.5, 3.0, 1.0, -0.75]) if f == "*" else \
                self.choice([1.0, -0.5, 2.5, 0.125])
        else:
            c = self.choice([3, -2, 7, 1])
        self.add("cst", [v], {"f": f, "c": c})

    def compatible(self, v, w):
        """numpy broadcasting of the two shapes is defined symbolically."""
        s, t = self.shape(v), self.shape(w)
        for x, y in zip(reversed(s), reversed(t)):
            if not (same(x, y) or (isinstance(x, int) and x == 1)
                    or (isinstance(y, int) and y == 1)):
                return False
        return True

    def partner(self, v, pred=lambda w: True):
        dt = self.types[v].dtype
        return self.maybe(lambda w: self.types[w].dtype == dt and self.compatible(v, w)
                         and pred(w))

    def gen_binary(self):
        v = self.pick()
        w = self.partner(v)
        names = list(table_for("binary", self.types[v].dtype))
        if self.kind(v) == "f":
            names += ["add", "mul", "sub"]
        f = self.choice(names)
        if f == "div" and self.kind(v) == "f":
            w = self.partner(v, lambda w: self.facts[w].lo * self.facts[w].hi > 0
                             and min(abs(self.facts[w].lo), abs(self.facts[w].hi)) >= 0.25)
            if w is None:
                raise Invalid("no divisor")
        elif f in ("div", "rem", "floordiv"):
            # x/0 and INT_MIN/-1 are defined by XLA, but XLA's constant folding traps on them
            # (SIGFPE in the compiler): a divisor that may be 0 or -1 must be an input
            w = self.partner(v, lambda w: w < self.prog.n_in and self.depth == 0 or not (
                self.facts[w].lo <= 0 <= self.facts[w].hi
                or (self.facts[w].lo <= -1 <= self.facts[w].hi and self.facts[v].lo <= INT_MIN)))
            if w is None:
                raise Invalid("no divisor")
        if self.r() < 0.5 and f not in ("div", "rem", "floordiv"):
            v, w = w, v
        self.add("binary", [v, w], {"f": f})

    def gen_cmp(self):
        v = self.pick(lambda v: self.kind(v) in "fi" and self.facts[v].err == 0)
        f = self.choice(list(COMPARES.values()))
        if self.r() < 0.4:
            c = self.choice([0.0, 0.5, -1.0, 1.5] if self.kind(v) == "f" else [0, 3, -1])
            self.add("cmp", [v], {"f": f, "c": c})
            return
        w = self.partner(v, lambda w: self.facts[w].err == 0)
        self.add("cmp", [v, w], {"f": f})

    def gen_where(self):
        c = self.pick(lambda v: self.kind(v) == "b")
        x = self.pick(lambda v: self.kind(v) != "b" and self.compatible(c, v))
        if self.r() < 0.4:
            cst = self.choice([-30.0, 0.0, 1.0]) if self.kind(x) == "f" else self.choice([0, -1])
            self.add("where", [c, x], {"c": cst})
            return
        y = self.partner(x, lambda w: self.compatible(c, w))
        self.add("where", [c, x, y], {})

    def gen_cvt(self):
        """A round trip through a narrow type (wrapping ints, rounding floats), or the bits of
        an exactly computed float."""
        v = self.pick(lambda v: self.kind(v) in "fi")
        if self.kind(v) == "i":
            to = self.choice(["int8", "uint8", "int16", "uint16"])
        else:
            to = self.choice(["bfloat16", "float16", "bits"])
        self.add("cvt", [v], {"to": to})

    def gen_clip(self):
        v = self.pick(lambda v: self.kind(v) in "fi")
        lo, hi = sorted([self.choice([-1, 0, 1, 2, -3]), self.choice([-1, 0, 1, 2, 5])])
        if self.kind(v) == "f":
            lo, hi = float(lo), float(hi) + 0.5
        self.add("clip", [v], {"lo": lo, "hi": hi})

    def gen_dimop(self):
        v = self.pick(lambda v: self.kind(v) in "fi")
        d = self.choice([x for x in self.dims() if not isinstance(x, int)] or [None])
        if d is None:
            raise Invalid("static")
        f = self.choice(["/", "*", "+", "-"] if self.kind(v) == "f" else ["*", "+", "-"])
        self.add("dimop", [v], {"f": f, "dim": self.ref(d)})

    # ---- broadcasts and layout
    def gen_expand(self):
        v = self.pick(lambda v: len(self.shape(v)) < 4)
        self.add("expand", [v], {"axis": self.r(len(self.shape(v)) + 1)})

    def gen_bcast(self):
        v = self.pick(lambda v: len(self.shape(v)) < 4)
        s = self.shape(v)
        new = [self.ref(self.choice(self.dims() + [2, 3])) for _ in range(self.r(2) + (not s))]
        shape = new + [self.ref(self.choice(self.dims())) if _is_one(x) and self.r() < 0.7
                       else self.ref(x) for x in s]
        self.add("bcast", [v], {"shape": shape})

    def gen_bid(self):
        v = self.pick(lambda v: len(self.shape(v)) < 4)
        s = self.shape(v)
        rank = min(len(s) + 1 + self.r(2), 4)
        dims = tuple(sorted(self.rng.choice(rank, len(s), replace=False).tolist()))
        shape = [self.ref(self.choice(self.dims() + [2])) for _ in range(rank)]
        for i, d in zip(dims, s):
            shape[i] = self.ref(self.choice(self.dims())) if _is_one(d) and self.r() < 0.6 \
                else self.ref(d)
        self.add("bid", [v], {"shape": shape, "dims": dims})

    def gen_squeeze(self):
        v = self.pick(lambda v: any(_is_one(x) for x in self.shape(v)))
        axes = [i for i, x in enumerate(self.shape(v)) if _is_one(x)]
        self.add("squeeze", [v], {"axis": self.choice(axes)})

    def gen_reshape(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        s = list(self.shape(v))
        refs = [self.ref(x) for x in s]
        how = self.r(4)
        if how == 0 and len(s) >= 2:                           # merge adjacent dims
            i = self.r(len(s) - 1)
            shape = refs[:i] + [("mul", refs[i], refs[i + 1])] + refs[i + 2:]
        elif how == 1:                                          # split a dim by a factor
            i = self.r(len(s))
            facs = [SYM[n] for n in NAMES] + [2, 3]
            f = self.choice(facs)
            if isinstance(s[i], int) != isinstance(f, int) or not same((s[i] // f) * f, s[i]):
                raise Invalid("no factor")
            parts = [self.ref(f), ("fdiv", refs[i], self.ref(f))]
            if self.r() < 0.5:
                parts.reverse()
            shape = refs[:i] + parts + refs[i + 1:]
        elif how == 2:                                          # flatten
            shape = [refs[0]]
            for x in refs[1:]:
                shape = [("mul", shape[0], x)]
        else:                                                   # insert or drop unit dims
            shape = [x for x in refs if not _is_one(x)]
            shape.insert(self.r(len(shape) + 1), 1)
        if len(shape) > 4:
            raise Invalid("rank")
        self.add("reshape", [v], {"shape": shape})

    def gen_transpose(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 2)
        perm = tuple(self.rng.permutation(len(self.shape(v))).tolist())
        self.add("transpose", [v], {"perm": perm})

    def gen_slice(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        s = self.shape(v)
        spec = []
        for axis in sorted(set(self.r(len(s)) for _ in range(1 + self.r(2)))):
            start = self.choice([0, 0, 1, 2])
            step = self.choice([1, 1, 2, 3])
            form = self.r(4)
            if form == 0:
                stop = None
            elif form == 1:
                stop = ("neg", self.choice([1, 2]))
            elif form == 2 and not isinstance(s[axis], int):
                stop = ("dim", ("ref", v, axis), self.choice([0, 1, 2]))
            else:
                stop = ("abs", self.choice([1, 2, 3, 5])) if isinstance(s[axis], int) or \
                    self.r() < 0.3 else None
            spec.append((axis, start, stop, step))
        self.add("slice", [v], {"spec": spec})

    def gen_index(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        self.add("index", [v], {"axis": self.r(len(self.shape(v))),
                                "i": self.choice([0, 1, -1, -2])})

    def gen_flip(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        self.add("flip", [v], {"axis": self.r(len(self.shape(v)))})

    def gen_dslice(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        axis = self.r(len(self.shape(v)))
        d = self.shape(v)[axis]
        if isinstance(d, int):
            size = self.r(d + 1)
        else:
            size = ("sub", ("ref", v, axis), self.choice([0, 1, 2]))
        start = self.maybe(lambda w: self.kind(w) == "i" and self.shape(w) == ())
        if start is not None and self.r() < 0.7:
            self.add("dslice", [v, start], {"axis": axis, "size": size})
        else:
            self.add("dslice", [v], {"axis": axis, "size": size, "start": self.choice([0, 1, 3])})

    def gen_take(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        idx = self.pick(lambda w: self.kind(w) == "i" and len(self.shape(w)) <= 2)
        self.add("take", [v, idx], {"axis": self.r(len(self.shape(v)))})

    def gen_concat(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        s = self.shape(v)
        axis = self.r(len(s))

        def fits(w):
            t = self.shape(w)
            return (self.types[w].dtype == self.types[v].dtype and len(t) == len(s)
                    and all(same(x, y) for i, (x, y) in enumerate(zip(s, t)) if i != axis))
        others = [self.pick(fits) for _ in range(1 + self.r(2))]
        self.add("concat", [v] + others, {"axis": axis})

    def gen_stack(self):
        v = self.pick(lambda v: len(self.shape(v)) < 4)
        w = self.pick(lambda w: self.types[w].dtype == self.types[v].dtype
                      and len(self.shape(w)) == len(self.shape(v))
                      and all(same(x, y) for x, y in zip(self.shape(v), self.shape(w))))
        self.add("stack", [v, w], {"axis": self.r(len(self.shape(v)) + 1)})

    def gen_pad(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        c = self.choice([0, 1, -2])
        c = bool(c) if self.kind(v) == "b" else float(c) if self.kind(v) == "f" else c
        rank = len(self.shape(v))
        if self.r() < 0.6 or self.kind(v) == "b":
            widths = [(self.choice([0, 0, 1, 2]), self.choice([0, 1, 3])) for _ in range(rank)]
            self.add("pad", [v], {"widths": widths, "c": c})
        else:
            cfg = [(self.choice([0, 1, -1]), self.choice([0, 2, -1]), self.choice([0, 0, 1]))
                   for _ in range(rank)]
            self.add("lpad", [v], {"cfg": cfg, "c": c})

    def gen_iota(self):
        dims = [x for x in self.dims()]
        rank = 1 + self.r(2)
        shape = [self.ref(self.choice(dims + [3])) for _ in range(rank)]
        self.add("iota", [], {"shape": shape, "dim": self.r(rank)})

    def gen_mask(self):
        """A causal-style mask: iota(d1)[:, None] >= iota(d2)[None, :] + k, maybe used."""
        dims = [x for x in self.dims() if not isinstance(x, int)] or [3]
        d1, d2 = self.choice(dims), self.choice(dims)
        i = self.add("iota", [], {"shape": [self.ref(d1)], "dim": 0})
        j = self.add("iota", [], {"shape": [self.ref(d2)], "dim": 0})
        i = self.add("expand", [i], {"axis": 1})
        j = self.add("expand", [j], {"axis": 0})
        if self.r() < 0.4:
            j = self.add("cst", [j], {"f": "+", "c": self.choice([1, -1])})
        m = self.add("cmp", [i, j], {"f": self.choice([">=", ">", "<="])})
        x = self.maybe(lambda v: self.kind(v) == "f" and self.compatible(m, v), exclude=(m,))
        if x is not None and self.r() < 0.8:
            self.add("where", [m, x], {"c": self.choice([-30.0, 0.0])})

    def gen_outer(self):
        """An outer combination of a value with itself: x[:, None] - x[None, :] and kin."""
        v = self.pick(lambda v: 1 <= len(self.shape(v)) <= 2 and self.kind(v) in "fi")
        rank = len(self.shape(v))
        i, j = self.rng.choice(rank + 1, 2, replace=False).tolist()
        e1 = self.add("expand", [v], {"axis": i})
        e2 = self.add("expand", [v], {"axis": j})
        d = self.add("binary", [e1, e2], {"f": self.choice(["sub", "add", "mul", "max"])})
        if self.r() < 0.5:
            d = self.add("unary", [d], {"f": "neg"})
        if self.r() < 0.5:
            self.add("expand", [d], {"axis": 0})

    def gen_attn_mask(self):
        """A padding mask [n, d] (as ints) and a causal mask [d, d] combined, as in attention:
        minimum(pad[:, None, :], causal)[:, None] > 0, then used to mask scores."""
        pad = self.pick(lambda v: len(self.shape(v)) == 2 and self.kind(v) in "bi")
        d = self.shape(pad)[1]
        if self.kind(pad) == "b":
            pad = self.add("unary", [pad], {"f": "to_int"})
        i = self.add("iota", [], {"shape": [self.ref(d), self.ref(d)], "dim": 0})
        j = self.add("iota", [], {"shape": [self.ref(d), self.ref(d)], "dim": 1})
        causal = self.add("unary", [self.add("cmp", [i, j], {"f": ">="})], {"f": "to_int"})
        both = self.add("binary", [self.add("expand", [pad], {"axis": 1}), causal], {"f": "min"})
        m = self.add("cmp", [self.add("expand", [both], {"axis": 1})], {"f": ">", "c": 0})
        x = self.maybe(lambda v: self.kind(v) == "f" and self.compatible(m, v), exclude=(m,))
        if x is not None:
            self.add("where", [m, x], {"c": -30.0})

    def gen_center(self):
        """sum(x - sum(x, k, keepdims) / d, k, keepdims) / d: a reduction's result read back
        by the elementwise ops it came from, then reduced again."""
        v = self.pick(lambda v: len(self.shape(v)) >= 1 and self.kind(v) == "f")
        axis = self.r(len(self.shape(v)))
        d = self.shape(v)[axis]
        if isinstance(d, int) or self.ctx.minn([d]) < 1:
            raise Invalid("static or empty")
        dim = self.ref(d)
        m = self.add("dimop", [self.add("reduce", [v], {"f": "sum", "axes": (axis,),
                                                         "keep": True})], {"f": "/", "dim": dim})
        c = self.add("binary", [v, m], {"f": "sub"})
        self.add("dimop", [self.add("reduce", [c], {"f": "sum", "axes": (axis,),
                                                     "keep": self.r() < 0.7})],
                 {"f": "/", "dim": dim})

    # ---- reductions
    def gen_reduce(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        rank, k = len(self.shape(v)), self.kind(v)
        axes = tuple(sorted(set(self.r(rank) for _ in range(1 + self.r(2)))))
        if self.r() < 0.15:
            axes = None
        fs = {"f": ["sum", "sum", "max", "min", "mean"], "i": ["sum", "max", "min"],
              "b": ["any", "all"]}[k]
        self.add("reduce", [v], {"f": self.choice(fs), "axes": axes, "keep": self.r() < 0.5})

    def gen_argred(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1 and self.kind(v) in "fi"
                      and self.facts[v].err == 0)
        self.add("argred", [v], {"f": self.choice(["argmax", "argmin"]),
                                 "axis": self.r(len(self.shape(v))), "keep": self.r() < 0.5})

    def gen_cum(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1 and self.kind(v) in "fi")
        self.add("cum", [v], {"f": self.choice(["cumsum", "cummax", "cummin"]),
                              "axis": self.r(len(self.shape(v))), "rev": self.r() < 0.3})

    def gen_softmax(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1 and self.kind(v) == "f")
        axis = self.r(len(self.shape(v)))
        if self.r() < 0.5:
            self.add("softmax", [v], {"axis": axis})
        else:
            self.add("lse", [v], {"axis": axis, "keep": self.r() < 0.5})

    def gen_sort(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1 and self.kind(v) in "fi"
                      and self.facts[v].err == 0)
        self.add(self.choice(["sort", "argsort"]), [v], {"axis": self.r(len(self.shape(v)))})

    def gen_layernorm(self):
        """(x - mean) * rsqrt(var + 1) over an axis, as separate nodes."""
        v = self.pick(lambda v: len(self.shape(v)) >= 1 and self.kind(v) == "f")
        axes = (self.r(len(self.shape(v))),)
        m = self.add("reduce", [v], {"f": "mean", "axes": axes, "keep": True})
        c = self.add("binary", [v, m], {"f": "sub"})
        sq = self.add("binary", [c, c], {"f": "mul"})
        var = self.add("reduce", [sq], {"f": "mean", "axes": axes, "keep": True})
        r = self.add("unary", [self.add("cst", [var], {"f": "+", "c": 1.0})], {"f": "rsqrt"})
        self.add("binary", [c, r], {"f": "mul"})

    # ---- contractions
    def gen_dot(self):
        x = self.pick(lambda v: self.kind(v) == "f" and len(self.shape(v)) >= 1)
        sx = self.shape(x)
        i = self.r(len(sx))
        y = self.pick(lambda w: self.kind(w) == "f" and any(same(d, sx[i]) for d in self.shape(w)))
        sy = self.shape(y)
        j = self.choice([k for k, d in enumerate(sy) if same(d, sx[i])])
        letters = iter("ijklmnopqrs")
        lx = [next(letters) for _ in sx]
        ly = [next(letters) for _ in sy]
        ly[j] = lx[i]
        batch = [(p, q) for p in range(len(sx)) for q in range(len(sy))
                 if p != i and q != j and same(sx[p], sy[q])]
        out_b = []
        if batch and self.r() < 0.5 and x != y:
            p, q = self.choice(batch)
            ly[q] = lx[p]
            out_b = [lx[p]]
        out = out_b + [c for c in lx if c not in ly] + [c for c in ly if c not in lx]
        if self.r() < 0.3:
            out = [out[k] for k in self.rng.permutation(len(out))]
        if len(out) > 4:
            raise Invalid("rank")
        spec = "".join(lx) + "," + "".join(ly) + "->" + "".join(out)
        matmul = len(sx) == len(sy) == 2 and i == 1 and j == 0 and spec == "ij,jk->ik"
        self.add("dot", [x, y], {"spec": spec, "matmul": matmul and self.r() < 0.7})

    # ---- control flow
    def body(self, params: list, params_facts: list, n_ops: int, target, clip=None,
             stacked=False) -> tuple[Program, list]:
        """A body program of params (+ captured outer values) whose output has the type
        `target` (clipped to `clip`, a loop carry's range), and with `stacked` a second output
        (a scan's per-step value); returns it with the outer ids of the captures."""
        caps = [self.maybe(lambda v: self.kind(v) == "f") for _ in range(self.r(3))]
        caps = [c for c in dict.fromkeys(caps) if c is not None]
        g = Generator(self.rng, self.envs, self.depth + 1)
        g.prog = Program([Input(t.dtype) for t in params] + [Input(self.types[c].dtype)
                                                            for c in caps], [], [])
        g.typing = Typing(list(params) + [self.types[c] for c in caps],
                          list(params_facts) + [self.facts[c] for c in caps], {})

        def run(vals):
            g.vals = vals
            g.fill(n_ops)
            g.prog.outputs = [g.finish(target, clip)]
            if stacked:
                g.prog.outputs.append(g.pick(lambda v: v != g.prog.outputs[0]
                                             and len(g.shape(v)) <= 2))
        traced(run, g.typing.types)
        return g, caps

    def finish(self, target, clip):
        outs = [v for v in range(self.prog.n_in, len(self.types))
                if self.types[v].dtype == target.dtype
                and len(self.types[v].shape) == len(target.shape)
                and all(same(x, y) for x, y in zip(self.types[v].shape, target.shape))]
        if outs:
            out = outs[-1]
        else:
            src = [v for v in range(self.prog.n_in) if self.types[v].dtype == target.dtype
                   and self.types[v].shape == target.shape][0]
            out = self.add("unary", [src], {"f": "not" if target.dtype == BOOL else "neg"})
        if clip is not None:
            out = self.add("clip", [out], {"lo": clip[0], "hi": clip[1]})
        return out

    def gen_fori(self, op="fori"):
        init = self.pick(lambda v: self.kind(v) in "fi" and len(self.shape(v)) <= 3)
        t, f = self.types[init], self.facts[init]
        choices = [0, 1, 3] + [self.ref(d) for d in self.dims() if not isinstance(d, int)
                               and self.ctx.maxn([d]) <= 13]
        lim = self.choice(choices)
        arg = []
        if op == "while" and self.r() < 0.3:
            s = self.maybe(lambda v: self.kind(v) == "i" and self.shape(v) == ()
                          and self.facts[v].hi <= 10)
            if s is not None:
                lim, arg = "arg", [s]
        trip = max(int(self.facts[arg[0]].hi), 0) if arg else \
            lim if isinstance(lim, int) else \
            self.ctx.maxn([dim_value(lim, lambda v: self.types[v].shape)])
        params = [jax.ShapeDtypeStruct((), I32), t]
        clip = (int(f.lo), int(f.hi)) if t.dtype.kind == "i" else (float(f.lo), float(f.hi))
        g, caps = self.body(params, [ifacts(0, max(trip - 1, 0)), f], 1 + self.r(5), t, clip)
        self.add(op, [init] + arg + caps, {"n": lim}, [g.prog])

    def gen_while(self):
        self.gen_fori("while")

    def gen_scan(self):
        """lax.scan over the leading axis of a value (a dynamic length, often), carrying
        another; the result is the final carry or the stacked per-step outputs."""
        init = self.pick(lambda v: self.kind(v) in "fi" and len(self.shape(v)) <= 2)
        xs = self.pick(lambda v: self.kind(v) in "fi" and 1 <= len(self.shape(v)) <= 3
                       and self.ctx.maxn([self.shape(v)[0]]) <= 13)
        t, f, tx = self.types[init], self.facts[init], self.types[xs]
        clip = (int(f.lo), int(f.hi)) if t.dtype.kind == "i" else (float(f.lo), float(f.hi))
        params = [t, jax.ShapeDtypeStruct(tx.shape[1:], tx.dtype)]
        g, caps = self.body(params, [f, self.facts[xs]], 1 + self.r(5), t, clip, stacked=True)
        self.add("scan", [init, xs] + caps, {"out": self.choice(["carry", "ys", "ys"])},
                 [g.prog])

    def gen_scatter(self):
        """x.at[idx].add/set/max/min(c, mode='drop') along axis 0, indices from the data."""
        x = self.pick(lambda v: self.kind(v) in "fi" and len(self.shape(v)) >= 1)
        idx = self.pick(lambda v: self.kind(v) == "i" and len(self.shape(v)) == 1)
        c = self.choice([1.0, 0.5, -2.0]) if self.kind(x) == "f" else self.choice([1, -3, 7])
        self.add("scatter", [x, idx], {"f": self.choice(SCATTERS), "c": c})

    def gen_pool(self):
        """lax.reduce_window (max/min/sum pooling) with small windows and strides."""
        x = self.pick(lambda v: self.kind(v) in "fi" and 1 <= len(self.shape(v)) <= 3)
        rank = len(self.shape(x))
        window = tuple(self.choice([1, 2, 3]) for _ in range(rank))
        strides = tuple(self.choice([1, 1, 2]) for _ in range(rank))
        self.add("pool", [x], {"f": self.choice(list(POOLS)), "window": window,
                               "strides": strides, "padding": self.choice(["VALID", "SAME"])})

    def gen_cond(self):
        ops = [self.pick()]
        if self.r() < 0.4:
            ops.append(self.pick())
        ts = [self.types[o] for o in ops]
        fs = [self.facts[o] for o in ops]
        pred = self.maybe(lambda v: self.kind(v) == "b" and self.shape(v) == ())
        dims = [d for d in self.dims() if not isinstance(d, int)]
        if pred is None or self.r() < 0.3:
            if not dims:
                raise Invalid("no predicate")
            p = {"pred": ("dim", self.ref(self.choice(dims)), self.choice([0, 1, 3, 6]))}
            args = []
        else:
            p, args = {"pred": "arg"}, [pred]
        b1, c1 = self.body(ts, fs, 1 + self.r(4), ts[0])
        b2, c2 = self.body(ts, fs, 1 + self.r(4), ts[0])
        # both branches see the same captures: the union, appended as parameters
        caps = list(dict.fromkeys(c1 + c2))
        subs = []
        for b, c in ((b1, c1), (b2, c2)):
            remap = {len(ts) + k: len(ts) + caps.index(x) for k, x in enumerate(c)}
            extra = len(caps) - len(c)
            prog = b.prog
            n_old = prog.n_in
            inputs = prog.inputs[:len(ts)] + [Input(self.types[x].dtype) for x in caps]
            f = lambda v, remap=remap, n_old=n_old, extra=extra: \
                remap.get(v, v) if v < n_old else v + extra    # noqa: E731
            nodes = [renumber(n, f) for n in prog.nodes]
            subs.append(Program(inputs, nodes, [f(o) for o in prog.outputs]))
        p["n_ops"] = len(ops)
        self.add("cond", args + ops + caps, p, subs)


GEN_WEIGHTS = {
    "unary": 12, "cst": 6, "binary": 18, "cmp": 4, "where": 5, "clip": 1, "dimop": 2,
    "expand": 4, "bcast": 3, "bid": 2, "squeeze": 1, "reshape": 5, "transpose": 3, "slice": 5,
    "index": 2, "flip": 1, "dslice": 1, "take": 1, "concat": 3, "stack": 1, "pad": 2,
    "iota": 1, "mask": 2, "reduce": 9, "argred": 1, "cum": 1, "softmax": 1.5, "sort": 1,
    "layernorm": 1, "dot": 4, "fori": 1, "while": 1, "cond": 1.5, "outer": 2,
    "attn_mask": 1, "center": 1, "cvt": 1.5, "scan": 1, "scatter": 1, "pool": 1,
}


OPS_RANGES = ((5, 12), (5, 12), (5, 12), (5, 12), (12, 25), (12, 25), (12, 25), (25, 60))


def random_program(seed: int, envs: list[dict] | None = None, n_ops: int | None = None
                   ) -> tuple[Program, list[dict]]:
    rng = np.random.default_rng(seed)
    envs = envs or draw_envs(rng, zero=rng.random() < 0.4)
    while True:
        prog = Generator(rng, envs).program(n_ops or int(rng.integers(5, 61)))
        if prog.nodes:
            return prog, envs


def random_batch(seed: int, n_programs: int, ranges=OPS_RANGES) -> tuple[list[Program], list]:
    """n programs that share one set of tested sizes (they run as one jdisc function);
    program i has between ranges[i % len(ranges)] op choices (macros add a few nodes)."""
    rng = np.random.default_rng(seed)
    envs = draw_envs(rng, zero=rng.random() < 0.4)
    progs = []
    while len(progs) < n_programs:
        lo, hi = ranges[len(progs) % len(ranges)]
        prog = Generator(rng, envs).program(int(rng.integers(lo, hi + 1)))
        if prog.nodes:
            progs.append(prog)
    return progs, envs


def exportable(prog: Program) -> bool:
    """jax.export takes it (jdisc's front end): lowering checks some symbolic sizes that
    tracing alone (the generator's eval_shape) does not."""
    try:
        jax.export.export(jax.jit(make_fn(prog)), platforms=("cpu",))(
            *[input_type(i) for i in prog.inputs])
        return True
    except Exception:
        return False


def batch_seeds(seed: int, n: int) -> list[int]:
    """The input-data seed of each program of a batch."""
    return [seed * 1000 + i for i in range(n)]


# -- a worker process: a crash in generated code (or in XLA) fails one check, not the caller ---

class Crash(Exception):
    """The worker process died (a signal) or hung while checking."""


class Worker:
    """Runs `check` in a subprocess (pickled requests and replies over pipes), restarted after
    a crash. Its stdout is the protocol; anything the process prints goes to stderr."""

    def __init__(self, timeout_s: float = 600):
        self.proc = None
        self.timeout_s = timeout_s

    def _start(self):
        here = os.path.dirname(os.path.abspath(__file__))
        code = (f"import sys; sys.path.insert(0, {here!r}); import program_fuzz; "
                "program_fuzz.serve()")
        env = dict(os.environ)
        env.setdefault("JDISC_CHECK_PLAN", "1")      # as in the tests: plans are checked
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)

    def check(self, progs, envs, seeds) -> list[list[Failure]]:
        return self._call(("check", progs, envs, list(seeds)))

    def batch(self, seed: int, n: int, ranges=OPS_RANGES):
        """(programs, envs, failures per program) of batch `seed`, generated and checked in
        the worker; failures None when the check raised or crashed (see check_programs)."""
        gen = self._call(("batch", seed, n, tuple(ranges)))
        try:
            return self._reply()
        except (Crash, RuntimeError):              # check_programs will find out more
            return gen[1], gen[2], None

    def _reply(self):
        try:
            reply = _receive(self.proc.stdout, self.timeout_s)
        except (OSError, EOFError, TimeoutError) as err:
            self.close()
            raise Crash(f"worker died ({err or type(err).__name__})") from None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _call(self, request):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            _send(self.proc.stdin, request)
        except OSError as err:
            self.close()
            raise Crash(f"worker died ({err})") from None
        return self._reply()

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            rc = self.proc.returncode
            self.proc = None
            return rc


def _send(f, obj):
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _receive(f, timeout_s=None):
    def read(n):
        out = b""
        while len(out) < n:
            if timeout_s is not None and not select.select([f], [], [], timeout_s)[0]:
                raise TimeoutError(f"no reply in {timeout_s} s")
            chunk = os.read(f.fileno(), n - len(out))
            if not chunk:
                raise EOFError("worker exited")
            out += chunk
        return out
    n, = struct.unpack("<Q", read(8))
    return pickle.loads(read(n))


def _serve_batch(seed, n, ranges):
    progs, envs = random_batch(seed, n, ranges)
    _send(_PROTO_OUT, ("generated", progs, envs))      # the caller knows them if this crashes
    fails = check(progs, envs, batch_seeds(seed, n))
    return progs, envs, None if _is_error(fails) else fails


_PROTO_OUT = None


def serve():
    """The worker's loop: read requests, reply with the result or the error raised."""
    global _PROTO_OUT
    _PROTO_OUT = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                                   # stray prints go to stderr
    proto_in = sys.stdin.buffer
    while True:
        try:
            request = _receive(proto_in)
        except EOFError:
            return
        try:
            if request[0] == "check":
                reply = check(*request[1:])
            else:
                reply = _serve_batch(*request[1:])
        except Exception as err:                    # noqa: BLE001 - sent back to the caller
            reply = RuntimeError(f"{request[0]} raised {type(err).__name__}: {err}")
        _send(_PROTO_OUT, reply)


# -- shrinking ---------------------------------------------------------------------------------

def dce(prog: Program, keep_inputs: bool = False) -> Program:
    """Drop the nodes (and, at the top level, the inputs) no output depends on."""
    live = set(prog.outputs)
    for vid in reversed(range(prog.n_in, prog.n_in + len(prog.nodes))):
        if vid in live:
            live.update(deps(prog.node(vid)))
    ins = list(range(prog.n_in)) if keep_inputs else [i for i in range(prog.n_in) if i in live]
    if not ins:
        ins = [0]
    kept = ins + [v for v in range(prog.n_in, prog.n_in + len(prog.nodes)) if v in live]
    new = {old: k for k, old in enumerate(kept)}
    return Program([prog.inputs[i] for i in ins],
                   [renumber(prog.node(v), new.__getitem__) for v in kept[len(ins):]],
                   [new[o] for o in prog.outputs])


def redirect(prog: Program, old: int, to: int | None = None, fresh: Input | None = None,
             keep_inputs=False) -> Program:
    """Every use of value `old` reads `to` (an earlier value) or a new input instead."""
    shift = 1 if fresh is not None else 0

    def f(v):
        if v == old:
            return prog.n_in if fresh is not None else f(to)
        return v if v < prog.n_in else v + shift
    inputs = prog.inputs + ([fresh] if fresh is not None else [])
    return dce(Program(inputs, [renumber(n, f) for n in prog.nodes],
                       [f(o) for o in prog.outputs]), keep_inputs)


def fresh_input(t, facts: Facts) -> Input | None:
    """An input standing for a value of type t (when its dims are names or sizes)."""
    tmpl = []
    for d in t.shape:
        if isinstance(d, int):
            tmpl.append(d)
            continue
        name = [n for n, s in SYM.items() if same(d, s)]
        if not name:
            return None
        tmpl.append(name[0])
    if t.dtype == BOOL:
        return Input(BOOL, tuple(tmpl), ("bool", 0, 1))
    lo, hi = max(facts.lo, -1000), min(facts.hi, 1000)
    if t.dtype.kind == "i":
        return Input(I32, tuple(tmpl), ("int", int(math.ceil(lo)), int(math.floor(hi))))
    return Input(F32, tuple(tmpl), ("uniform", float(lo), float(hi)))


def _with_node(prog: Program, vid: int, node: Node) -> Program:
    nodes = list(prog.nodes)
    nodes[vid - prog.n_in] = node
    return Program(prog.inputs, nodes, prog.outputs)


def program_candidates(prog: Program, typing: Typing, top: bool):
    """Smaller programs: fewer outputs, a value cut to a fresh input, a node replaced by one
    of its operands, smaller bodies, simpler parameters, simpler input shapes."""
    if len(prog.outputs) > 1:
        for o in prog.outputs:
            yield dce(Program(prog.inputs, prog.nodes, [o]), not top)
        if top:
            for k in range(len(prog.outputs)):
                yield dce(Program(prog.inputs, prog.nodes,
                                  prog.outputs[:k] + prog.outputs[k + 1:]))
    vids = list(range(prog.n_in + len(prog.nodes) - 1, prog.n_in - 1, -1))
    if top:                          # an intermediate value as the output, small cones first
        cones = {v: dce(Program(prog.inputs, prog.nodes, [v])) for v in vids}
        for v in sorted(vids, key=lambda v: cones[v].size()):
            if v not in prog.outputs:
                yield cones[v]
        for vid in vids:
            fresh = fresh_input(typing.types[vid], typing.facts[vid])
            if fresh is not None:
                yield redirect(prog, vid, fresh=fresh)
    for vid in vids:
        for a in dict.fromkeys(prog.node(vid).args):
            yield redirect(prog, vid, to=a, keep_inputs=not top)
    for vid in vids:
        node = prog.node(vid)
        for k, sub in enumerate(node.subs):
            for cand in program_candidates(sub, typing.subs[vid][k], top=False):
                subs = node.subs[:k] + (cand,) + node.subs[k + 1:]
                yield _with_node(prog, vid, Node(node.op, node.args, node.p, subs))
        for p in simpler_params(node):
            yield _with_node(prog, vid, Node(node.op, node.args, p, node.subs))
        if node.subs:
            fewer = without_unused_captures(node)
            if fewer is not None:
                yield dce(_with_node(prog, vid, fewer), not top)
    if top:
        yield from simpler_inputs(prog)


def _capture_offsets(node: Node) -> tuple[int, int]:
    """Where a control-flow node's captured values start: in its args, in its bodies' inputs."""
    if node.op == "scan":
        return 2, 2
    if node.op in ("fori", "while"):
        return 1 + (node.op == "while" and node.p["n"] == "arg"), 2
    return (node.p["pred"] == "arg") + node.p["n_ops"], node.p["n_ops"]


def without_unused_captures(node: Node) -> Node | None:
    """The node without the captured values none of its bodies reads, or None."""
    at_args, at_body = _capture_offsets(node)
    n_caps = len(node.args) - at_args
    used = set()
    for sub in node.subs:
        live = dce(sub, keep_inputs=True)
        used |= {a - at_body for n in live.nodes for a in deps(n) if at_body <= a < sub.n_in}
        used |= {o - at_body for o in live.outputs if at_body <= o < sub.n_in}
    drop = [k for k in range(n_caps) if k not in used]
    if not drop:
        return None
    keep = [k for k in range(n_caps) if k not in drop]
    subs = []
    for sub in node.subs:
        sub = dce(sub, keep_inputs=True)
        old_ids = list(range(at_body)) + [at_body + k for k in keep] + \
            list(range(sub.n_in, sub.n_in + len(sub.nodes)))
        new = {old: i for i, old in enumerate(old_ids)}
        subs.append(Program(sub.inputs[:at_body] + [sub.inputs[at_body + k] for k in keep],
                            [renumber(n, new.__getitem__) for n in sub.nodes],
                            [new[o] for o in sub.outputs]))
    args = node.args[:at_args] + tuple(node.args[at_args + k] for k in keep)
    return Node(node.op, args, node.p, tuple(subs))


def simpler_params(node: Node):
    p = node.p
    if node.op == "reduce" and p["axes"] is not None and len(p["axes"]) > 1:
        for a in p["axes"]:
            yield {**p, "axes": (a,)}
    if node.op in ("reduce", "argred", "lse") and p.get("keep"):
        yield {**p, "keep": False}
    if node.op == "slice" and len(p["spec"]) > 1:
        for item in p["spec"]:
            yield {**p, "spec": [item]}
    if node.op == "slice":
        for k, (axis, start, stop, step) in enumerate(p["spec"]):
            for simpler in ((axis, 0, stop, step), (axis, start, None, step),
                            (axis, start, stop, 1)):
                if simpler != p["spec"][k]:
                    yield {**p, "spec": p["spec"][:k] + [simpler] + p["spec"][k + 1:]}
    if node.op == "pad":
        yield {**p, "widths": [(0, 0)] * len(p["widths"])}
        yield {**p, "c": type(p["c"])(0)}
    if node.op == "fori" or node.op == "while":
        if p["n"] != "arg" and p["n"] != 1:
            yield {**p, "n": 1}
    if node.op == "cst" and p["c"] not in (0, 1):
        yield {**p, "c": type(p["c"])(1)}


def simpler_inputs(prog: Program):
    """Input shapes with b renamed a, a name replaced by a size, or a size made smaller."""
    names = sorted({d for i in prog.inputs for d in i.template if isinstance(d, str)})

    def retemplate(f):
        return Program([dataclasses.replace(i, template=tuple(f(k, j, d) for j, d in
                                                              enumerate(i.template)))
                        for k, i in enumerate(prog.inputs)], prog.nodes, prog.outputs)
    if len(names) == 2:
        yield retemplate(lambda k, j, d: names[0] if d == names[1] else d)
    for name in names:
        for size in (1, 2, 3):
            yield retemplate(lambda k, j, d: size if d == name else d)
    for k, inp in enumerate(prog.inputs):
        for j, d in enumerate(inp.template):
            if isinstance(d, int) and d > 1:
                for size in range(1, d):
                    yield retemplate(lambda kk, jj, dd: size if (kk, jj) == (k, j) else dd)
        if inp.dtype.kind == "f" and inp.dist != ("uniform", -2.0, 2.0):
            yield Program(prog.inputs[:k] + [dataclasses.replace(inp, dist=("uniform", -2.0, 2.0))]
                          + prog.inputs[k + 1:], prog.nodes, prog.outputs)


def env_candidates(envs: list[dict]):
    if len(envs) > 1:
        for env in envs:
            yield [env]
    env = envs[0]
    for name in sorted(env):
        for size in SIZES:
            if size < env[name]:
                yield [{**env, name: size}]


def signature(f: Failure) -> str:
    """What makes two failures the same bug: the kind, and for errors the message without its
    names, numbers and source locations."""
    if f.kind in ("mismatch", "crash"):
        return f.kind
    msg = f.message
    if "error:" in msg and "C compiler failed" in msg:     # the compiler's first complaint
        msg = "C compiler: " + msg.split("error:", 1)[1].split("\n", 1)[0]
    msg = re.sub(r"\bat \S+:\d+|\(jit\([^)]*\)[^)]*\)|jd_\w+|\d+", "#", msg)
    return f.kind + ": " + msg[:80]


def same_failure(a: Failure, b: Failure) -> bool:
    return signature(a) == signature(b)


def shrink(prog: Program, envs: list[dict], still_fails: Callable, budget_s: float = 120,
           ) -> tuple[Program, list[dict], int]:
    """Greedy shrinking: take the first smaller candidate (programs first, then sizes) that is
    valid and still fails; repeat until none is, or the time budget is spent. Returns the
    program, its envs and the number of checks run. still_fails(prog, envs) -> bool."""
    deadline = time.monotonic() + budget_s
    tried: set = set()
    checks = 0
    if len(envs) > 1:                           # the failing size alone, when it suffices
        checks += 1
        if still_fails(prog, envs[:1]):
            envs = envs[:1]
    while time.monotonic() < deadline:
        typing = infer(prog, envs)
        cands = itertools.chain(((c, envs) for c in program_candidates(prog, typing, True)),
                                ((prog, e) for e in env_candidates(envs)))
        for cand, cenvs in cands:
            if time.monotonic() > deadline:
                break
            key = repr((cand, cenvs))
            if key in tried:
                continue
            tried.add(key)
            if cand.size() > prog.size() or (cand.size() == prog.size() and cenvs == envs
                                              and cand == prog):
                continue
            try:
                infer(cand, cenvs)
            except Invalid:
                continue
            checks += 1
            if still_fails(cand, cenvs):
                prog, envs = cand, cenvs
                break
        else:
            break
    return prog, envs, checks


# -- batches: check, isolate, shrink, report -------------------------------------------------

@dataclasses.dataclass
class Finding:
    seed: int                  # the batch's seed
    index: int                 # the program's index in its batch
    failure: Failure
    program: Program
    envs: list
    shrunk: Program | None = None
    shrunk_envs: list | None = None
    repro: str = ""

    def report(self) -> str:
        prog = self.shrunk or self.program
        envs = self.shrunk_envs or ([self.failure.env] if self.failure.env else self.envs)
        head = (f"program {self.index} of batch seed {self.seed}: {self.failure.kind}: "
                f"{self.failure.message[:600]}")
        note = "" if self.shrunk else " (not shrunk)"
        repro = self.repro or source(prog, envs[0], self.input_seed)
        return f"{head}\n--- repro{note} ({prog.size()} ops):\n{repro}"

    @property
    def input_seed(self) -> int:
        return self.seed * 1000 + self.index


def _is_error(fails) -> bool:
    return any(f.kind not in ("mismatch", "compiles", "size0") for fl in fails for f in fl)


def _run_alone(worker, progs, seeds, idx, envs):
    try:
        return worker.check([progs[i] for i in idx], envs, [seeds[i] for i in idx])
    except Crash as err:
        return [[Failure("crash", str(err))] for _ in idx]


def _blame_refusals(run, i, fails):
    """A size-0 refusal stops the batch's call at that size, so it is recorded for every
    program: check each such program alone at that size."""
    refused = [f for f in fails if f.kind == "size0"]
    if not refused:
        return fails
    rest = [f for f in fails if f.kind != "size0"]
    return rest + run([i], [refused[0].env])[0]     # at that size, alone: refused or compared


def check_programs(worker: Worker, progs: list[Program], envs: list[dict], seeds: list[int]
                   ) -> list[list[Failure]]:
    """Failures per program, from one check of them all when nothing raises. A jdisc error or
    a crash stops a check, so its culprit is found by bisection (checks of halves at the size
    where it happened), and the rest checked again."""
    result: list[list[Failure]] = [[] for _ in progs]

    def run(idx, at_envs):
        try:
            return worker.check([progs[i] for i in idx], at_envs, [seeds[i] for i in idx])
        except Crash as err:
            return [[Failure("crash", str(err))] for _ in idx]

    todo = list(range(len(progs)))
    while todo:
        fails = run(todo, envs)
        if not _is_error(fails):
            for i, fl in zip(todo, fails):
                result[i] = _blame_refusals(run, i, fl)
            return result
        first = next(f for fl in fails for f in fl
                     if f.kind not in ("mismatch", "compiles", "size0"))
        at_envs = [first.env] if first.env else envs
        idx = todo
        while len(idx) > 1:
            half = idx[:len(idx) // 2]
            part = run(half, at_envs)
            if _is_error(part):
                idx, fails = half, part
            else:
                idx = idx[len(idx) // 2:]
                fails = None
        culprit = idx[0]
        fails = fails or run([culprit], at_envs)
        # a program that fails only with others is reported with what the batch raised
        result[culprit] = fails[0] if _is_error(fails) else [first]
        todo.remove(culprit)
    return result


def still_fails_like(worker: Worker, failure: Failure, input_seed: int) -> Callable:
    def pred(prog, envs):
        try:
            fails = worker.check([prog], envs, [input_seed])[0]
        except Crash:
            return failure.kind == "crash"
        return any(same_failure(f, failure) for f in fails)
    return pred


def run_batches(seeds, n_programs: int, ranges=OPS_RANGES, workers: int = 2,
                shrink_budget_s: float = 240, shrink_each_s: float = 90, log=None,
                want_shrink=lambda fd: True, shrink_refusals=False
                ) -> dict[int, list[Finding]]:
    """Findings per batch seed. Batches are generated and checked by `workers` worker
    processes in parallel; failing programs are then isolated and shrunk (at most
    shrink_each_s each, shrink_budget_s in all, those want_shrink accepts; the rest are
    reported unshrunk)."""
    pool = [Worker() for _ in range(max(1, workers))]
    free = list(pool)
    lock = threading.Lock()

    def one(seed):
        with lock:
            w = free.pop()
        try:
            progs, envs, fails = w.batch(seed, n_programs, ranges)
            seeds_ = batch_seeds(seed, n_programs)
            if fails is None:                    # an error or crash: find the culprits
                fails = check_programs(w, progs, envs, seeds_)
            else:
                fails = [_blame_refusals(lambda idx, e: _run_alone(w, progs, seeds_, idx, e),
                                         i, fl) for i, fl in enumerate(fails)]
            return seed, progs, envs, fails
        finally:
            with lock:
                free.append(w)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(len(pool)) as ex:
        for seed, progs, envs, fails in ex.map(one, seeds):
            results[seed] = [Finding(seed, i, sorted(fl, key=lambda f: f.kind == "size0")[0],
                                     progs[i], envs) for i, fl in enumerate(fails) if fl]
            if log:
                log(seed, results[seed])
    deadline = time.monotonic() + shrink_budget_s
    todo = [fd for seed in seeds for fd in results[seed] if want_shrink(fd)
            and (fd.failure.kind != "size0" or shrink_refusals)]

    def shrink_one(fd):
        left = deadline - time.monotonic()
        if left > 0:
            with lock:
                w = free.pop()
            try:
                shrink_finding(w, fd, min(left, shrink_each_s))
            finally:
                with lock:
                    free.append(w)
    with concurrent.futures.ThreadPoolExecutor(len(pool)) as ex:
        list(ex.map(shrink_one, todo))
    for w in pool:
        w.close()
    return results


def shrink_finding(worker: Worker, fd: Finding, budget_s: float) -> Finding:
    f = fd.failure
    first = [f.env] + [e for e in fd.envs if e != f.env] if f.env in fd.envs else fd.envs
    fd.shrunk, fd.shrunk_envs, _ = shrink(fd.program, first, still_fails_like(
        worker, f, fd.input_seed), budget_s)
    return fd


def main(argv=None):
    """Long runs: python tests/program_fuzz.py --n 2000 [--seed S] [--findings FILE]."""
    import argparse
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--n", type=int, default=200, help="programs")
    ap.add_argument("--batch", type=int, default=8, help="programs per jdisc compile")
    ap.add_argument("--seed", type=int, default=None, help="first batch seed (default random)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--shrink-s", type=float, default=90, help="per failing program")
    ap.add_argument("--findings", default=None, help="append each finding here (markdown)")
    ap.add_argument("--log", default=None, help="append one JSON line per batch here")
    args = ap.parse_args(argv)
    first = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "little")
    t0, done, failed = time.time(), 0, 0
    shrunk_per_signature: dict[str, int] = {}

    def want_shrink(fd):            # a long run shrinks a few of each kind of failure
        sig = signature(fd.failure)
        shrunk_per_signature[sig] = shrunk_per_signature.get(sig, 0) + 1
        return shrunk_per_signature[sig] <= (12 if fd.failure.kind == "mismatch" else 3)
    chunk = 4 * max(1, args.workers)
    for start in range(first, first + -(-args.n // args.batch), chunk):
        seeds = list(range(start, min(start + chunk, first + -(-args.n // args.batch))))

        def log(seed, fds):
            nonlocal done, failed
            done += args.batch
            failed += len(fds)
            print(f"[{time.time() - t0:.0f}s] batch {seed}: {done} programs, {failed} failing",
                  flush=True)
            if args.log:
                with open(args.log, "a") as fh:
                    fh.write(json.dumps({"seed": seed, "n": args.batch, "failing": [
                        (fd.index, fd.failure.kind, fd.failure.message[:300]) for fd in fds]})
                             + "\n")
        results = run_batches(seeds, args.batch, workers=args.workers, log=log,
                              shrink_budget_s=1e9, shrink_each_s=args.shrink_s,
                              want_shrink=want_shrink, shrink_refusals=True)
        for seed in seeds:
            for fd in results[seed]:
                text = (f"\n## batch seed {seed}, program {fd.index}: {signature(fd.failure)}"
                        f"\n\n```\n{fd.report()}```\n")
                print(text, flush=True)
                if args.findings:
                    with open(args.findings, "a") as fh:
                        fh.write(text)


if __name__ == "__main__":
    # run as the module `program_fuzz`, so that pickled programs name their classes the same
    # way here and in the worker
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import program_fuzz
    program_fuzz.main()
