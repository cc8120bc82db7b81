"""The generator's ops that change shapes: broadcasts and layout, the macros built of
them, reductions and contractions (a mixin of `fuzzing.generator.Generator`)."""

from __future__ import annotations

from .facts import NAMES, SYM, Invalid, same


def _is_one(d) -> bool:
    return isinstance(d, int) and d == 1


class ShapeGens:
    """The gen_ methods of `Generator` for ops that change shapes; they use its helpers
    (pick, add, ref, dims, ...)."""

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

    def gen_dus(self):
        """A KV cache's update: lax.dynamic_update_slice_in_dim(x, u[:k], start, axis), u of
        x's shape (k None: all of it), the start a constant or an int scalar of the program."""
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        s = self.shape(v)
        u = self.pick(lambda w: self.types[w].dtype == self.types[v].dtype
                      and len(self.shape(w)) == len(s)
                      and all(same(x, y) for x, y in zip(s, self.shape(w))))
        p = {"axis": self.r(len(s)), "k": self.choice([None, 1, 1, 2])}
        if self.ctx.minn([s[p["axis"]]]) < 1:      # u[:k] of an axis that may be 0 is a
            p["k"] = None                           # gather jax.export sizes for >= 1 only
        start = self.maybe(lambda w: self.kind(w) == "i" and self.shape(w) == ())
        if start is not None and self.r() < 0.7:
            self.add("dus", [v, u, start], p)
        else:
            self.add("dus", [v, u], {**p, "start": self.choice([0, 1, 3, -1])})

    def gen_roll(self):
        v = self.pick(lambda v: len(self.shape(v)) >= 1)
        axis = self.r(len(self.shape(v)))
        shift = self.maybe(lambda w: self.kind(w) == "i" and self.shape(w) == ())
        if shift is not None and self.r() < 0.5:
            self.add("roll", [v, shift], {"axis": axis})
        else:
            self.add("roll", [v], {"axis": axis, "shift": self.choice([1, -1, 2, 5])})

    def gen_tile(self):
        v = self.pick(lambda v: 1 <= len(self.shape(v)) <= 3)
        if self.r() < 0.5:
            reps = [self.choice([1, 1, 2, 3]) for _ in self.shape(v)]
            self.add("tile", [v], {"reps": reps})
        else:
            self.add("repeat", [v], {"k": self.choice([2, 3]),
                                     "axis": self.r(len(self.shape(v)))})

    def gen_conv(self):
        """A 1-D convolution, NCW, of fixed weights over c static channels, in 1 or (c even) 2
        feature groups; o output features per group, from one to past the conv unit's blocks
        of 16 and 32 (jd_conv.h)."""
        v = self.pick(lambda v: self.kind(v) == "f" and len(self.shape(v)) == 3
                      and isinstance(self.shape(v)[1], int) and 1 <= self.shape(v)[1] <= 4)
        groups = 2 if self.shape(v)[1] % 2 == 0 and self.r() < 0.3 else 1
        self.add("conv", [v], {"o": groups * self.choice([1, 2, 3, 3, 16, 17, 33]),
                               "k": self.choice([1, 2, 3]), "groups": groups,
                               "stride": self.choice([1, 1, 2]), "dil": self.choice([1, 1, 2]),
                               "padding": self.choice(["SAME", "VALID"])})

    def gen_tala(self):
        """jnp.take_along_axis(x, idx, axis): idx an int value of x's shape but along axis, or
        the argsort of a value of x's shape (sorting one array by another's order)."""
        x = self.pick(lambda v: len(self.shape(v)) >= 1)
        s, axis = self.shape(x), self.r(len(self.shape(x)))

        def fits(w, kinds):
            t = self.shape(w)
            return (self.kind(w) in kinds and len(t) == len(s)
                    and all(same(p, q) for i, (p, q) in enumerate(zip(s, t)) if i != axis))
        idx = self.maybe(lambda w: fits(w, "i"))
        if idx is None or self.r() < 0.4:
            key = self.pick(lambda w: fits(w, "fi") and same(self.shape(w)[axis], s[axis])
                            and self.facts[w].err == 0)
            idx = self.add("argsort", [key], {"axis": axis})
        self.add("tala", [x, idx], {"axis": axis, "mode": self.choice(["clip", "fill"])})

    def gen_topk(self):
        x = self.pick(lambda v: self.kind(v) in "fi" and len(self.shape(v)) >= 1
                      and isinstance(self.shape(v)[-1], int) and self.shape(v)[-1] >= 1)
        k = 1 + self.r(min(3, self.shape(x)[-1]))
        self.add("topk", [x], {"k": k, "out": self.r(2)})

    def gen_segsum(self):
        x = self.pick(lambda v: self.kind(v) in "fi" and len(self.shape(v)) >= 1)
        ids = self.pick(lambda w: self.kind(w) == "i" and len(self.shape(w)) == 1
                        and same(self.shape(w)[0], self.shape(x)[0]))
        self.add("segsum", [x, ids], {"n": self.choice([1, 3, 5, "rows"])})

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
    def gen_dense(self):
        """A dense layer, x @ w + b, then a ReLU two times in three: what a GEMM takes as its
        epilogue (gemm_epilogue.py) when nothing else reads the product or joins the loop
        kernel. w: a 2-D value whose rows are x's last axis; b: w summed over its rows (as
        [1, n] sometimes)."""
        w = self.pick(lambda v: self.kind(v) == "f" and len(self.shape(v)) == 2)
        rows = self.shape(w)[0]
        x = self.pick(lambda v: self.kind(v) == "f" and 1 <= len(self.shape(v)) <= 3
                      and same(self.shape(v)[-1], rows))
        lx = "ijk"[:len(self.shape(x))]
        p = self.add("dot", [x, w], {"spec": f"{lx},{lx[-1]}z->{lx[:-1]}z",
                                     "matmul": len(lx) == 2})
        b = self.add("reduce", [w], {"f": "sum", "axes": (0,), "keep": False})
        if len(lx) >= 2 and self.r() < 0.3:      # as flax's Dense: the bias as [1, n]
            b = self.add("reshape", [b], {"shape": [1, self.ref(self.shape(w)[1])]})
        s = self.add("binary", [p, b] if self.r() < 0.7 else [b, p], {"f": "add"})
        if self.r() < 0.67:
            self.add("relu", [s], {})

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
