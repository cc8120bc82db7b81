"""Shrinking: greedy, to the first smaller program (fewer outputs, a value cut to a fresh
input, a node replaced by an operand, smaller bodies, simpler parameters and input shapes) or
smaller sizes that still fail the same way (`shrink`, `signature`)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from typing import Callable

from .facts import (BOOL, F32, I32, SIZES, SYM, Facts, Failure, Input, Invalid, Node, Program,
                    Typing, deps, renumber, same)
from .infer import infer


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
    if f.kind in ("mismatch", "traced", "crash"):
        return f.kind
    msg = f.message
    if "error:" in msg and "C compiler failed" in msg:     # the compiler's first complaint
        msg = "C compiler: " + msg.split("error:", 1)[1].split("\n", 1)[0]
    msg = re.sub(r"\bat \S+:\d+|\(jit\([^)]*\)[^)]*\)|jd_\w+|\d+", "#", msg)
    return f.kind + ": " + msg[:80]


def same_failure(a: Failure, b: Failure) -> bool:
    return signature(a) == signature(b)


def _valid(prog: Program, envs: list[dict]) -> bool:
    try:
        infer(prog, envs)
    except Invalid:
        return False
    return True


def shrink(prog: Program, envs: list[dict], still_fails: Callable, budget_s: float = 120,
           ) -> tuple[Program, list[dict], int]:
    """Greedy shrinking: take the first smaller candidate (programs first, then sizes) that is
    valid and still fails; repeat until none is, or the time budget is spent. Returns the
    program, its envs and the number of checks run. still_fails(prog, envs) -> bool."""
    deadline = time.monotonic() + budget_s
    tried: set = set()
    checks = 0
    if len(envs) > 1 and _valid(prog, envs[:1]):   # the failing size alone, if it suffices
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
            if not _valid(cand, cenvs):
                continue
            checks += 1
            if still_fails(cand, cenvs):
                prog, envs = cand, cenvs
                break
        else:
            break
    return prog, envs, checks
