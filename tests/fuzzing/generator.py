"""The generator: random programs over the dims a, b, valid at every tested size
(`Generator`, `random_program`, `random_batch`), and the tested sizes of a batch (`draw_envs`)."""

from __future__ import annotations

import math

import jax
import numpy as np

from .control_ops import CONTROL
from .elementwise import COMPARES, table_for
from .facts import (BOOL, F32, I32, INT_MIN, MAX_ELEMS, SYM, Input, Invalid, Node, Program,
                    Typing, deps, dim_value, ifacts, renumber, same)
from .generator_shapes import ShapeGens
from .infer import input_facts, input_type, traced, type_node
from .ops import POOLS, SCATTERS, Ctx


def draw_envs(rng: np.random.Generator, zero: bool, first: bool = False) -> list[dict]:
    """The four tested sizes of a batch: the first (where jdisc compiles) two distinct sizes,
    then 1, 13 and primes; with `zero`, each dim 0 once (else a == b once). Without `first`
    (the sizes of the first op table's batches), `a` is 37 instead of 13 in a third of the
    batches without a 0: rows of 32 columns and more take the kernels' long-row versions."""
    c = lambda xs: int(rng.choice(xs))          # noqa: E731
    envs = [{"a": c([5, 7]), "b": c([2, 3, 13])}, {"a": 1, "b": 1}]
    if zero:
        return envs + [{"a": 0, "b": c([13, 5])}, {"a": c([13, 3]), "b": 0}]
    big = 13 if first else c([13, 13, 37])
    return envs + [{"a": big, "b": c([5, 7])}, [{"a": 3, "b": 3}, {"a": 2, "b": 13}][c([0, 1])]]


class Generator(ShapeGens):
    """Random programs over the dims a, b, valid at every env of `envs`."""

    def __init__(self, rng: np.random.Generator, envs: list[dict], depth: int = 0,
                 weights: dict | None = None):
        self.rng, self.envs, self.depth = rng, envs, depth
        self.weights = GEN_WEIGHTS if weights is None else weights

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
        while True:             # at most MAX_ELEMS values at every size (a may be 37)
            rank = self.choice([0, 1, 1, 2, 2, 2, 3, 3])
            tmpl = tuple(self.choice(["a", "a", "b", "b", 1, 2, 3, 4]) for _ in range(rank))
            if all(math.prod(e[d] if isinstance(d, str) else d for d in tmpl) <= MAX_ELEMS
                   for e in self.envs):
                break
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
        gens = list(self.weights)
        w = np.array([self.weights[g] for g in gens], float)
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

    # ---- control flow
    def body(self, params: list, params_facts: list, n_ops: int, target, clip=None,
             stacked=False) -> tuple[Program, list]:
        """A body program of params (+ captured outer values) whose output has the type
        `target` (clipped to `clip`, a loop carry's range), and with `stacked` a second output
        (a scan's per-step value); returns it with the outer ids of the captures."""
        caps = [self.maybe(lambda v: self.kind(v) == "f") for _ in range(self.r(3))]
        caps = [c for c in dict.fromkeys(caps) if c is not None]
        g = Generator(self.rng, self.envs, self.depth + 1, self.weights)
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


# The op table's draw weights. FIRST_WEIGHTS is the table up to 2026-12-07: a batch seed
# recorded before then (CHANGELOG.md, the regression tests) names a program of that table
# (`random_batch(..., weights=FIRST_WEIGHTS)`, `program_fuzz.py --ops first`); the ops added
# since then are drawn only with GEN_WEIGHTS, the default.
FIRST_WEIGHTS = {
    "unary": 12, "cst": 6, "binary": 18, "cmp": 4, "where": 5, "clip": 1, "dimop": 2,
    "expand": 4, "bcast": 3, "bid": 2, "squeeze": 1, "reshape": 5, "transpose": 3, "slice": 5,
    "index": 2, "flip": 1, "dslice": 1, "take": 1, "concat": 3, "stack": 1, "pad": 2,
    "iota": 1, "mask": 2, "reduce": 9, "argred": 1, "cum": 1, "softmax": 1.5, "sort": 1,
    "layernorm": 1, "dot": 4, "fori": 1, "while": 1, "cond": 1.5, "outer": 2,
    "attn_mask": 1, "center": 1, "cvt": 1.5, "scan": 1, "scatter": 1, "pool": 1,
}
GEN_WEIGHTS = {**FIRST_WEIGHTS, "dus": 1.5, "roll": 1, "tile": 1, "conv": 1, "tala": 1,
               "topk": 1, "segsum": 1, "dense": 2}


OPS_RANGES = ((5, 12), (5, 12), (5, 12), (5, 12), (12, 25), (12, 25), (12, 25), (25, 60))


def random_program(seed: int, envs: list[dict] | None = None, n_ops: int | None = None,
                   weights: dict | None = None) -> tuple[Program, list[dict]]:
    rng = np.random.default_rng(seed)
    envs = envs or draw_envs(rng, zero=rng.random() < 0.4, first=weights is FIRST_WEIGHTS)
    while True:
        prog = Generator(rng, envs, weights=weights).program(n_ops or int(rng.integers(5, 61)))
        if prog.nodes:
            return prog, envs


def random_batch(seed: int, n_programs: int, ranges=OPS_RANGES, weights: dict | None = None
                 ) -> tuple[list[Program], list]:
    """n programs that share one set of tested sizes (they run as one jdisc function);
    program i has between ranges[i % len(ranges)] op choices (macros add a few nodes)."""
    rng = np.random.default_rng(seed)
    envs = draw_envs(rng, zero=rng.random() < 0.4, first=weights is FIRST_WEIGHTS)
    progs = []
    while len(progs) < n_programs:
        lo, hi = ranges[len(progs) % len(ranges)]
        prog = Generator(rng, envs, weights=weights).program(int(rng.integers(lo, hi + 1)))
        if prog.nodes:
            progs.append(prog)
    return progs, envs


def batch_seeds(seed: int, n: int) -> list[int]:
    """The input-data seed of each program of a batch."""
    return [seed * 1000 + i for i in range(n)]
