"""Inference: shapes (jax.eval_shape of each op), facts, validity at the tested sizes
(`infer`); and the interpreter (`run_program`, `make_fn`: a program as a JAX function)."""

from __future__ import annotations

import math
from typing import Callable

import jax

from .control_ops import OPS, trip_max
from .facts import (BOOL, BOOL_FACTS, I32, MAX_ELEMS, MAX_MAG, MAX_REL_ERR, SYM, Facts, Input,
                    Invalid, Node, Program, Typing, at, deps, ifacts)
from .ops import Ctx


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
        n = trip_max(node, ctx)
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
