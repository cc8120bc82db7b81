"""Op entries for patterns users write that the first op table lacked: a KV cache's
`dynamic_update_slice`, `jnp.roll`, `jnp.tile` / `jnp.repeat`, and a 1-D convolution
(`DATA_OPS` of `fuzzing.ops` takes them in; the generator's `gen_` methods are in
`fuzzing.generator_shapes`).

Each is the same (run, src, facts) triple as the other ops; shapes come from jax's own trace,
so a symbolic size jax writes (`min(a, 1)` for `u[:1]`, `max(floordiv(a - 5, 2) + 1, 0)` for a
strided convolution) is what jdisc gets too.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .facts import U, ffacts, hull


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
    c = xs[0].shape[1]
    w = (jnp.arange(p["o"] * c * p["k"], dtype=jnp.float32).reshape(p["o"], c, p["k"]) % 3
         - 1.0) * 0.5
    return lax.conv_general_dilated(xs[0], w, (p["stride"],), p["padding"],
                                    rhs_dilation=(p["dil"],))


def _conv_src(node, n, ctx):
    p = node.p
    c = ctx.types[node.args[0]].shape[1]
    return (f"lax.conv_general_dilated({n[0]}, {_weights_src(p['o'], c, p['k'])}, "
            f"({p['stride']},), '{p['padding']}', rhs_dilation=({p['dil']},))")


def _conv_facts(node, fs, ctx):
    """A sum of c*k products with weights of at most 0.5 (exact): c*k roundings."""
    f = fs[0]
    terms = ctx.types[node.args[0]].shape[1] * node.p["k"]
    m = 0.5 * terms * f.mag
    return ffacts(-m, m, 0.5 * terms * f.err + (terms + 1) * U * m)


def _same_values(node, fs, ctx):
    return fs[0]


UPDATE_OPS = {
    "dus": (_dus_run, _dus_src, lambda node, fs, ctx: hull(fs[0], fs[1])),
    "roll": (_roll_run, _roll_src, _same_values),
    "tile": (lambda node, xs, ctx: jnp.tile(xs[0], node.p["reps"]),
             lambda node, n, ctx: f"jnp.tile({n[0]}, {tuple(node.p['reps'])})", _same_values),
    "repeat": (lambda node, xs, ctx: jnp.repeat(xs[0], node.p["k"], axis=node.p["axis"]),
               lambda node, n, ctx: f"jnp.repeat({n[0]}, {node.p['k']}, axis={node.p['axis']})",
               _same_values),
    "conv": (_conv_run, _conv_src, _conv_facts),
}

