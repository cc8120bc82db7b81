"""Control flow: bodies are programs, run by ctx.run_sub and printed by the printer's
ctx.print_sub; their facts follow from the bodies' (`output_facts`). Also the whole op table,
`OPS`: the data ops of `fuzzing.ops` and fori, while, scan and cond."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
from jax import lax

from .facts import MAX_REL_ERR, Facts, Invalid, Program, Typing, dim_value, hull, ifacts
from .ops import DATA_OPS, Ctx, Op


def trip_max(node, ctx) -> int:
    lim = node.p["n"]
    if isinstance(lim, int):
        return lim
    if lim == "arg":
        return int(max(ctx.facts[node.args[1]].hi, 0))
    d = dim_value(lim, lambda v: ctx.types[v].shape)
    return ctx.maxn([d])


def _bounds(body: Program) -> list[float]:
    """The bounds a carry may be widened to: the body's clip bounds (the generator ends a
    body in a clip to the carry's range), then 2^30 (exact in f32 and in int32)."""
    out = {float(b) for node in body.nodes if node.op == "clip"
           for b in (node.p["lo"], node.p["hi"])}
    return sorted(out, key=abs) + [2.0 ** 30]


def _carry_range(init: Facts, body_out: Callable, bounds: list[float]) -> tuple[float, float]:
    """A carry's range: the initial value's, joined with the body's output (body_out: carry
    facts -> the facts of the body's carry output) until the body maps it into itself, at
    most three times; failing that, the sides that still grow go to each of `bounds` in
    turn (as far from 0 as they are or farther), and the first range the body maps into
    itself is narrowed to the initial one joined with the body's output on it, kept if the
    body maps that into itself too. Every answer is checked to be mapped into itself, so
    every carry lies in it. Joining alone, `clip(c - c, -52, 52)` from a carry in [0, 1]
    doubles the range at each step, `clip(c + a, -13000, 13000)` adds `a`: such a program
    was valid at sizes where the initial value spans much and Invalid at one where it spans
    little, so a program valid at every tested size was invalid at one of them alone (the
    harness checks a failure at its size alone)."""
    lo, hi = init.lo, init.hi
    grows = (False, False)
    for _ in range(3):
        out = body_out(Facts(lo, hi, init.err))
        if lo <= out.lo and out.hi <= hi:
            return lo, hi
        grows = (out.lo < lo, out.hi > hi)
        lo, hi = min(lo, out.lo), max(hi, out.hi)
    for bound in bounds:
        w_lo = min(lo, -abs(bound)) if grows[0] else lo
        w_hi = max(hi, abs(bound)) if grows[1] else hi
        try:
            out = body_out(Facts(w_lo, w_hi, init.err))
            if not (w_lo <= out.lo and out.hi <= w_hi):
                continue
            n_lo, n_hi = min(init.lo, out.lo), max(init.hi, out.hi)
            out = body_out(Facts(n_lo, n_hi, init.err))
        except Invalid:
            continue
        if n_lo <= out.lo and out.hi <= n_hi:
            return n_lo, n_hi
    raise Invalid("the body leaves the carry's range")


def _loop_facts(node, fs, ctx):
    """The carry's range: the initial value's, widened until the body maps it into itself
    (the generator ends bodies in a clip to the initial range, a fixed point at once); the
    error bound is then followed for the most iterations any tested size makes."""
    body_typing = ctx.sub_types[ctx.vid][0]
    init = fs[0]
    n = trip_max(node, ctx)
    caps = list(fs[2:] if node.op == "while" and node.p["n"] == "arg" else fs[1:])
    counter = ifacts(0, max(n - 1, 0))
    lo, hi = _carry_range(init, lambda carry: infer_facts(node.subs[0], body_typing,
                                                          [counter, carry] + caps, ctx.envs),
                          _bounds(node.subs[0]))
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
    lo, hi = _carry_range(init, lambda carry: output_facts(body, typing, [carry, xs] + caps,
                                                           ctx.envs)[0], _bounds(body))
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


OPS: dict[str, Op] = {
    **DATA_OPS,
    "scan": Op(_scan_run, _scan_src, _scan_facts),
    "fori": Op(_loop_run, _loop_src, _loop_facts),
    "while": Op(_loop_run, _loop_src, _loop_facts),
    "cond": Op(_cond_run, _cond_src, _cond_facts),
}
CONTROL = ("fori", "while", "cond", "scan")


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
