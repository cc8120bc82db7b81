"""The op table's rules (`Ctx`, `Op`) and the entries of the ops without bodies, `DATA_OPS`
(`fuzzing.control_ops` adds loops, scans and conds to make `OPS`).

Per op: how the interpreter runs it, how the printer prints it and how its facts follow from its
operands'; shapes are what jax's own trace gives (one trace per program, `infer`), so they are
jax's symbolic dims (with its `min`/`max`/`floordiv` terms).

Each op: run(node, xs, ctx) -> jax value(s); src(node, names, ctx) -> expression (or, for ops
with bodies, (lines, expression)); facts(node, fs, ctx) -> Facts (raise Invalid where the op is
not well conditioned); needs(node, ctx) -> dims that must be >= 1 at every tested size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .elementwise import CMP, cvt_facts, cvt_run, cvt_src, fadd, table_for
from .facts import (BOOL_FACTS, INT_MAX, INT_MIN, TRANS, U, Facts, Invalid, at, dim_value,
                    ffacts, hull, ifacts)
from .update_ops import UPDATE_OPS


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


def ptuple(xs) -> str:
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
    ax = "None" if axes is None else str(axes[0]) if len(axes) == 1 else ptuple(axes)
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
    return fadd(f, Facts(c, c)) if node.p["f"] == "+" else fadd(Facts(c, c), f, -1)


def _cmp_src(node, n, ctx):
    rhs = n[1] if len(n) > 1 else _cst(node.p["c"], ctx.types[node.args[0]].dtype)
    return f"{n[0]} {node.p['f']} {rhs}"


def _cmp_run(node, xs, ctx):
    return CMP[node.p["f"]](xs[0], xs[1] if len(xs) > 1 else _typed(xs[0], node.p["c"])[0])


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
    return ptuple(ctx.dsrc(d) for d in node.p["shape"])


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
    widths = ptuple(ptuple(w) for w in node.p["widths"])
    return f"jnp.pad({n[0]}, {widths}, constant_values={_operand_cst(node, ctx, node.p['c'])})"


def _lpad_run(node, xs, ctx):
    c = jnp.asarray(_typed(xs[0], node.p["c"])[0], xs[0].dtype)
    return lax.pad(xs[0], c, node.p["cfg"])


def _lpad_src(node, n, ctx) -> str:
    c = f"jnp.{ctx.types[node.args[0]].dtype.name}({_operand_cst(node, ctx, node.p['c'])})"
    return f"lax.pad({n[0]}, {c}, {ptuple(ptuple(w) for w in node.p['cfg'])})"


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
            f"{ptuple(node.p['window'])}, {ptuple(node.p['strides'])}, '{node.p['padding']}')")


def _pool_facts(node, fs, ctx):
    f = fs[0]
    if node.p["f"] != "sum":
        return f
    n = math.prod(node.p["window"])
    lo, hi = min(0, n * f.lo), max(0, n * f.hi)
    if ctx.types[node.args[0]].dtype.kind == "i":
        return ifacts(lo, hi)
    return ffacts(lo, hi, n * f.err + (n + 1) * U * n * f.mag)


def _table_op(kind):
    """An op of FLOAT_/INT_/BOOL_UNARY or _BINARY, by its operands' dtype."""
    def entry(node, dtype):
        return table_for(kind, dtype)[node.p["f"]]
    return Op(run=lambda node, xs, ctx: entry(node, xs[0].dtype)[1](*xs),
              src=lambda node, n, ctx: entry(node, _arg_type(ctx, node).dtype)[0].format(*n),
              facts=lambda node, fs, ctx: entry(node, _arg_type(ctx, node).dtype)[2](*fs))


DATA_OPS: dict[str, Op] = {
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
                                    f"{ptuple(node.p['dims'])})"),
              _passthrough),
    "squeeze": Op(lambda node, xs, ctx: jnp.squeeze(xs[0], node.p["axis"]),
                  lambda node, n, ctx: f"jnp.squeeze({n[0]}, {node.p['axis']})", _passthrough),
    "reshape": Op(lambda node, xs, ctx: xs[0].reshape(_shape(node, ctx)),
                  lambda node, n, ctx: f"{n[0]}.reshape{_shape_src(ctx, node)}", _passthrough),
    "transpose": Op(lambda node, xs, ctx: jnp.transpose(xs[0], node.p["perm"]),
                    lambda node, n, ctx: (f"{n[0]}.T" if node.p["perm"] == (1, 0) else
                                          f"jnp.transpose({n[0]}, {ptuple(node.p['perm'])})"),
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
    # a dense layer's activation (gen_dense only: not in the unary table, whose draws name
    # the programs of recorded seeds); 1-Lipschitz, so the error carries over
    "relu": Op(lambda node, xs, ctx: jax.nn.relu(xs[0]),
               lambda node, n, ctx: f"jax.nn.relu({n[0]})",
               lambda node, fs, ctx: Facts(max(fs[0].lo, 0.0), max(fs[0].hi, 0.0), fs[0].err)),
    "dimop": Op(_dimop_run,
                lambda node, n, ctx: f"{n[0]} {node.p['f']} {ctx.dsrc(node.p['dim'])}",
                _dimop_facts, _dimop_needs),
    "cvt": Op(cvt_run, cvt_src, cvt_facts),
    "scatter": Op(_scatter_run, _scatter_src, _scatter_facts),
    "pool": Op(_pool_run, _pool_src, _pool_facts),
    **{name: Op(*entry) for name, entry in UPDATE_OPS.items()},
}
