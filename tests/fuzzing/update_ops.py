"""Op entries for patterns users write that the first op table lacked: a KV cache's
`dynamic_update_slice`, `jnp.roll`, `jnp.tile` / `jnp.repeat`, a 1-D convolution,
`jnp.take_along_axis`, `lax.top_k` and `jax.ops.segment_sum`
(`DATA_OPS` of `fuzzing.ops` takes them in; the generator's `gen_` methods are in
`fuzzing.generator_shapes`).

Each is the same (run, src, facts) triple as the other ops; shapes come from jax's own trace,
so a symbolic size jax writes (`min(a, 1)` for `u[:1]`, `max(floordiv(a - 5, 2) + 1, 0)` for a
strided convolution) is what jdisc gets too.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

import jax

from .facts import U, Facts, Invalid, at, ffacts, hull, ifacts


def _cut(axis: int, k) -> tuple:
    """The index of the first k entries along axis (all of them when k is None)."""
    return (slice(None),) * axis + (slice(None, k),)


def _cut_src(axis: int, k) -> str:
    return "" if k is None else "[" + ", ".join([":"] * axis + [f":{k}"]) + "]"


def _dus_run(node, xs, ctx):
    start = xs[2] if len(xs) > 2 else node.p["start"]
    update = xs[1][_cut(node.p["axis"], node.p["k"])]
    return lax.dynamic_update_slice_in_dim(xs[0], update, start, axis=node.p["axis"])


def _dus_src(node, n, ctx):
    start = n[2] if len(n) > 2 else str(node.p["start"])
    return (f"lax.dynamic_update_slice_in_dim({n[0]}, {n[1]}{_cut_src(node.p['axis'], node.p['k'])}"
            f", {start}, axis={node.p['axis']})")


def _roll_run(node, xs, ctx):
    shift = xs[1] if len(xs) > 1 else node.p["shift"]
    return jnp.roll(xs[0], shift, axis=node.p["axis"])


def _roll_src(node, n, ctx):
    shift = n[1] if len(n) > 1 else str(node.p["shift"])
    return f"jnp.roll({n[0]}, {shift}, axis={node.p['axis']})"


def _weights_src(o: int, c: int, k: int) -> str:
    """The convolution's fixed weights [o, c, k]: -0.5, 0 and 0.5 in turn (exact in f32)."""
    return (f"(jnp.arange({o * c * k}, dtype=jnp.float32).reshape({o}, {c}, {k}) % 3 - 1.0)"
            " * 0.5")


def _conv_run(node, xs, ctx):
    p = node.p
    c = xs[0].shape[1] // p.get("groups", 1)
    w = (jnp.arange(p["o"] * c * p["k"], dtype=jnp.float32).reshape(p["o"], c, p["k"]) % 3
         - 1.0) * 0.5
    return lax.conv_general_dilated(xs[0], w, (p["stride"],), p["padding"],
                                    rhs_dilation=(p["dil"],),
                                    feature_group_count=p.get("groups", 1))


def _conv_src(node, n, ctx):
    p = node.p
    c = ctx.types[node.args[0]].shape[1] // p.get("groups", 1)
    return (f"lax.conv_general_dilated({n[0]}, {_weights_src(p['o'], c, p['k'])}, "
            f"({p['stride']},), '{p['padding']}', rhs_dilation=({p['dil']},), "
            f"feature_group_count={p.get('groups', 1)})")


def _conv_facts(node, fs, ctx):
    """A sum of c*k products (c a group's channels) with weights of at most 0.5 (exact): c*k
    roundings."""
    f = fs[0]
    terms = ctx.types[node.args[0]].shape[1] // node.p.get("groups", 1) * node.p["k"]
    m = 0.5 * terms * f.mag
    return ffacts(-m, m, 0.5 * terms * f.err + (terms + 1) * U * m)


def _same_values(node, fs, ctx):
    return fs[0]


def _tala_run(node, xs, ctx):
    if node.p["mode"] == "clip":
        return jnp.take_along_axis(xs[0], xs[1], axis=node.p["axis"], mode="clip")
    return jnp.take_along_axis(xs[0], xs[1], axis=node.p["axis"], mode="fill", fill_value=0)


def _tala_src(node, n, ctx):
    mode = "'clip'" if node.p["mode"] == "clip" else "'fill', fill_value=0"
    return f"jnp.take_along_axis({n[0]}, {n[1]}, axis={node.p['axis']}, mode={mode})"


def _tala_facts(node, fs, ctx):
    return fs[0] if node.p["mode"] == "clip" else hull(fs[0], Facts(0, 0))


def _tala_needs(node, ctx):
    """mode='clip' gathers from an empty axis only where the result is empty too."""
    if node.p["mode"] != "clip":
        return []
    d = ctx.types[node.args[0]].shape[node.p["axis"]]
    idx = ctx.types[node.args[1]].shape
    return [lambda env: at(d, env) >= 1 or math.prod(at(x, env) for x in idx) == 0]


def _topk_facts(node, fs, ctx):
    """Values, or indices (ties: the lower index first, in jax's contract; inexact values
    could order differently, so they are not taken)."""
    if node.p["out"] == 0:
        return fs[0]
    if fs[0].err:
        raise Invalid("top_k indices of inexact values")
    return ifacts(0, ctx.types[node.args[0]].shape[-1] - 1)


def _segsum_run(node, xs, ctx):
    n = node.p["n"] if isinstance(node.p["n"], int) else xs[0].shape[0]
    return jax.ops.segment_sum(xs[0], xs[1], num_segments=n)


def _segsum_src(node, n, ctx):
    segs = node.p["n"] if isinstance(node.p["n"], int) else f"{n[0]}.shape[0]"
    return f"jax.ops.segment_sum({n[0]}, {n[1]}, num_segments={segs})"


def _segsum_facts(node, fs, ctx):
    """Ids out of range are dropped; all rows may land in one segment (their count's worth of
    roundings), or none (0)."""
    f, rows = fs[0], ctx.maxn([ctx.types[node.args[0]].shape[0]])
    lo, hi = min(0, rows * f.lo), max(0, rows * f.hi)
    if ctx.types[node.args[0]].dtype.kind == "i":
        return ifacts(lo, hi)
    return ffacts(lo, hi, rows * f.err + (rows + 1) * U * max(abs(lo), abs(hi)))


UPDATE_OPS = {
    "dus": (_dus_run, _dus_src, lambda node, fs, ctx: hull(fs[0], fs[1])),
    "roll": (_roll_run, _roll_src, _same_values),
    "tile": (lambda node, xs, ctx: jnp.tile(xs[0], node.p["reps"]),
             lambda node, n, ctx: f"jnp.tile({n[0]}, {tuple(node.p['reps'])})", _same_values),
    "repeat": (lambda node, xs, ctx: jnp.repeat(xs[0], node.p["k"], axis=node.p["axis"]),
               lambda node, n, ctx: f"jnp.repeat({n[0]}, {node.p['k']}, axis={node.p['axis']})",
               _same_values),
    "conv": (_conv_run, _conv_src, _conv_facts),
    "tala": (_tala_run, _tala_src, _tala_facts, _tala_needs),
    "topk": (lambda node, xs, ctx: lax.top_k(xs[0], node.p["k"])[node.p["out"]],
             lambda node, n, ctx: f"lax.top_k({n[0]}, {node.p['k']})[{node.p['out']}]",
             _topk_facts),
    "segsum": (_segsum_run, _segsum_src, _segsum_facts),
}

