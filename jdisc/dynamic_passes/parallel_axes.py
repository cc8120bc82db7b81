"""Which input axes are parallel: computing on a slice of them gives the slice of the results.

A dimension variable `V` that sizes input axes is *parallel* when every op of the program is
equivariant in it: each axis of size `V` is carried through (elementwise ops, broadcasts,
transposes, reshapes that keep it a factor of its own, the batch or free dims of a dot, the
batch dim of a convolution, gathers indexed along it or taking it whole, reductions and sorts
over other axes, whole-axis slices, loop bodies that are themselves equivariant), and nothing
else reads `V` (a dim used as data, an iota along it, a slice bound, a mixed size such as
`2*V` or `V*S`). Then a shard of the inputs along `V` is just another value of `V`, and the
one compiled program serves it: its results are the matching shards (an output with no axis
of size `V` is the same on every shard). sharding.py hands this rule to
`custom_partitioning`.

Two kinds of values go beyond that, for the reductions a training step makes:

* *partial* values: a reduction over `V` (`add` with a zero init, `max`, `min`; a dot that
  contracts `V`; a scatter-add into zeros of updates along `V`, as segment_sum) computes, per
  shard, the reduction of that shard. It may flow through ops that commute with combining the
  shards (sums through `add`, scaling and dots with values that do not depend on `V`,
  reshapes; maxima through `max`, ...) to an output, which is then combined across the shards
  by one all-reduce (psum / pmax / pmin).
* *scaled* values: `V` read as a number in a product, `c*V` (jnp.mean's divisor), is `1/n` of
  its global value on each of `n` equal shards. Values made from it by products and
  quotients are off by a known power of `n` (the scale), which the outputs undo.

Every other use of these, and every op this file does not know, makes `V` not parallel:
when unsure, not parallel. The analysis is one walk over the program, regions included.
"""

from __future__ import annotations

import numpy as np

from jdisc.dynamic_passes import symbolic
from jdisc.dynamic_passes.ir import Block, Op, Program, Value
from jdisc.dynamic_passes.ops import OPS
from jdisc.dynamic_passes.sharding_rule import ParallelAxes

EXACT = ("exact", 0)     # a value's state in a dim: (how shards combine, power of n it is off by)
COMBINE = ("add", "max", "min")     # reductions whose per-shard results combine


def find_parallel_axes(prog: Program) -> Program:
    """Pass: `prog.parallel`, the parallel axes of the inputs and where they go."""
    a = _Analysis(prog)
    a.block(prog.body)
    combine = []
    for v in prog.body.results:
        comb = []
        for d, (kind, scale) in sorted(a.state.get(v.id, {}).items()):
            if scale and v.dtype[0] not in "fbc":
                a.refuse({d}, v.producer, "an integer result would need rescaling")
            comb.append((d, kind, scale))
        combine.append(comb)
    live = a.live()
    prog.parallel = ParallelAxes(
        inputs=tuple(a.axis_dims(p, live) for p in prog.body.params),
        outputs=tuple(a.axis_dims(v, live) for v in prog.body.results),
        combine=tuple(tuple(c for c in comb if c[0] in live) for comb in combine),
        refused=tuple(sorted(a.why.items())))
    return prog


def _plain_var(d) -> str | None:
    if isinstance(d, int):
        return None
    names = symbolic.variables(d)
    if len(names) == 1:
        name = next(iter(names))
        if d == symbolic.var(name):
            return name
    return None


def _dims_in(x, out: set[str]) -> None:
    """The dimension variables in an attribute (Dims nested in tuples, lists and dicts)."""
    if isinstance(x, symbolic.Expr):
        out.update(symbolic.variables(x))
    elif isinstance(x, (tuple, list)):
        for y in x:
            _dims_in(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _dims_in(y, out)


def _host_dims(x, out: set[str], seen: set[int]) -> None:
    """The dimension variables a launcher-derived value reads (HostValues share subtrees)."""
    if id(x) in seen:
        return
    seen.add(id(x))
    if isinstance(x, (int, symbolic.Expr)):
        out.update(symbolic.variables(x))
    elif isinstance(x, (tuple, list)):
        for y in x:
            _host_dims(y, out, seen)
    else:
        for field in ("args", "lhs", "rhs"):
            if hasattr(x, field):
                _host_dims(getattr(x, field), out, seen)


def _is_float(v: Value) -> bool:
    return v.dtype[0] in "fbc"      # f16 f32 f64 bf16 c64 c128


class _Analysis:
    def __init__(self, prog: Program):
        self.why: dict[str, str] = {}          # dimension variable -> why it is not parallel
        self.state: dict[int, dict[str, tuple[str, int]]] = {}   # value id -> dim -> state
        cands: set[str] = set()
        for spec in prog.inputs:
            for d in spec.shape:
                name = _plain_var(d)
                if name is not None:
                    cands.add(name)
        self.cands = cands
        self.derived: dict[str, set[str]] = {}
        for spec in prog.inputs:
            for d in spec.shape:
                if _plain_var(d) is None and not isinstance(d, int):
                    self.refuse(symbolic.variables(d), None, f"an input axis has the size {d}")
        # a dimension the launcher derives from a candidate (a constraint's quotient, ...):
        # a shape or number that reads it reads the candidate
        for name, host in prog.derived:
            used: set[str] = set()
            _host_dims(host, used, set())
            deps = set(used)
            for u in used:
                deps |= self.derived.get(u, set())
            self.derived[name] = deps

    # -- state ------------------------------------------------------------------------------
    def live(self) -> set[str]:
        return self.cands - set(self.why)

    def refuse(self, dims, op: Op | None, why: str) -> None:
        where = f" (stablehlo.{op.name} at {op.loc})" if op is not None else ""
        dims = set(dims)
        through = sorted(dims & set(self.derived))
        for name in through:
            dims |= self.derived[name]
        if through:
            why = f"{why} (through {', '.join(through)}, which the launcher derives)"
        for d in sorted(dims & self.cands):
            self.why.setdefault(d, why + where)

    def axes(self, v: Value) -> dict[str, int]:
        """Candidate dim -> the axis of v it sizes."""
        out = {}
        for i, d in enumerate(v.shape):
            name = _plain_var(d)
            if name in self.cands:
                out[name] = i
        return out

    def axis_dims(self, v: Value, live: set[str]) -> tuple[str | None, ...]:
        return tuple(n if n in live else None for n in map(_plain_var, v.shape))

    def of(self, v: Value, d: str) -> tuple[str, int]:
        return self.state.get(v.id, {}).get(d, EXACT)

    def depends(self, v: Value, d: str) -> bool:
        return d in self.state.get(v.id, {}) or d in self.axes(v)

    def set(self, v: Value, d: str, st: tuple[str, int]) -> None:
        if st != EXACT:
            self.state.setdefault(v.id, {})[d] = st

    def marked(self, op: Op) -> set[str]:
        """The dims in which some operand is partial or scaled."""
        out: set[str] = set()
        for v in op.operands:
            out.update(self.state.get(v.id, {}))
        return out

    def check_shape(self, v: Value, op: Op) -> None:
        seen = set()
        for d in v.shape:
            if isinstance(d, int):
                continue
            name = _plain_var(d)
            if name in self.derived:
                self.refuse({name}, op, f"an axis has the size {d}")
            elif name is None:
                self.refuse(symbolic.variables(d), op, f"an axis has the size {d}")
            elif name in seen:
                self.refuse({name}, op, f"two axes of one value have the size {name}")
            seen.add(name)

    # -- the walk ---------------------------------------------------------------------------
    def block(self, block: Block) -> None:
        for op in block.ops:
            self.op(op)

    def op(self, op: Op) -> None:
        results = op.results[:-1] if op.attrs.get("scratch") else op.results
        for v in list(op.operands) + list(results):
            self.check_shape(v, op)
        rule = _RULES.get(op.name)
        if rule is None:
            dims = self.marked(op)
            for v in list(op.operands) + list(results):
                dims.update(self.axes(v))
            self.refuse(dims, op, "jdisc does not know how this op partitions")
            return
        used: set[str] = set()
        for key, value in op.attrs.items():
            if key not in _HANDLED_ATTRS.get(op.name, ()):
                _dims_in(value, used)
        self.refuse(used, op, "it is read as a number")
        rule(self, op)

    def carry(self, op: Op, linear: bool, data: int = 0) -> None:
        """Ops that move the elements of operand `data` (reshape, transpose, slice, ...): the
        result has its state where `linear` (then a partial value must not gain an axis of its
        dim); every other operand must not depend on a marked dim."""
        for d in self.marked(op):
            st = self.of(op.operands[data], d)
            bad = (not linear and st != EXACT) or any(
                self.depends(v, d) for i, v in enumerate(op.operands) if i != data and
                self.of(v, d) != EXACT) or (st[0] != "exact" and d in self.axes(op.results[0]))
            if bad:
                self.refuse({d}, op, "a partial or rescaled value of it is used here")
            else:
                self.set(op.results[0], d, st)


# --------------------------------------------------------------------------- rules per op

def _elementwise(a: _Analysis, op: Op) -> None:
    """Axes line up with the result's (scalar operands broadcast). Partial and scaled values
    pass where the op commutes with combining the shards."""
    r = op.results[0]
    for d in a.marked(op):
        st = _elementwise_state(op, [a.of(v, d) for v in op.operands])
        if st is None or (st[0] != "exact" and d in a.axes(r)) or (
                st[1] and not _is_float(r) and op.name != "convert"):
            a.refuse({d}, op, "a partial or rescaled value of it is used here")
        else:
            a.set(r, d, st)


def _elementwise_state(op: Op, sts: list[tuple[str, int]]) -> tuple[str, int] | None:
    name = op.name
    kinds = [k for k, _ in sts]
    scales = [s for _, s in sts]
    partial = [k for k in kinds if k != "exact"]
    if name in ("add", "subtract"):     # sums of like partials, at one scale
        same = len(set(sts)) == 1
        return sts[0] if same and kinds[0] in ("exact", "add") else None
    if name == "negate":
        return sts[0] if kinds[0] in ("exact", "add") else None
    if name == "convert":
        src, dst = op.operands[0].dtype, op.results[0].dtype
        if kinds[0] == "add" and dst[0] not in "fbc":
            return None
        if kinds[0] in ("max", "min") and ("i1" in (src, dst) or dst[0] == "c"):
            return None
        if scales[0] and src[0] in "fbc" and dst[0] not in "fbc":
            return None           # truncation does not commute with the scale
        return sts[0]
    if name == "multiply":          # a product with at most one partial sum in it
        if partial and (partial != ["add"]):
            return None
        return ("add" if partial else "exact", sum(scales))
    if name == "divide":
        if kinds[1] != "exact" or kinds[0] not in ("exact", "add"):
            return None
        return (kinds[0], scales[0] - scales[1])
    if name in ("maximum", "minimum"):    # max of partial maxima and other values
        want = "max" if name == "maximum" else "min"
        if len(set(scales)) != 1 or any(k not in ("exact", want) for k in kinds):
            return None
        return (want if partial else "exact", scales[0])
    if name == "select":
        if sts[0] != EXACT or sts[1] != sts[2]:
            return None
        return sts[1]
    return None


def _movement(a: _Analysis, op: Op) -> None:
    """broadcast_in_dim and transpose: every axis of the operand keeps its size in the
    result."""
    a.carry(op, linear=True)


def _reshape(a: _Analysis, op: Op) -> None:
    """An axis of the dim stays an axis of its own with the same elements before it."""
    x, r = op.operands[0], op.result
    xa, ra = a.axes(x), a.axes(r)
    for d in set(xa) | set(ra):
        i, j = xa.get(d), ra.get(d)
        if i is None or j is None or symbolic.prove_eq(
                symbolic.prod(x.shape[:i]), symbolic.prod(r.shape[:j])) is not True:
            a.refuse({d}, op, "the reshape merges or splits its axis")
    a.carry(op, linear=True)


def _whole_axes(a: _Analysis, op: Op, keeps) -> None:
    """slice, pad, reverse, dynamic_slice, dynamic_update_slice, reduce_window: an axis of the
    dim must be left whole (`keeps(axis)`), and bounds on other axes must not read it."""
    xa = a.axes(op.operands[0])
    for d, i in xa.items():
        if not keeps(i):
            a.refuse({d}, op, "it does not keep the whole axis")
    for r in op.results:
        for d, i in a.axes(r).items():
            if xa.get(d) != i:
                a.refuse({d}, op, "a result axis of its size is not the operand's")
    mentioned: set[str] = set()
    for key in _HANDLED_ATTRS.get(op.name, ()):
        for i, x in enumerate(op.attrs.get(key, ())):
            if i not in xa.values():
                _dims_in(x, mentioned)
    a.refuse(mentioned, op, "it is read as a number")
    a.carry(op, linear=op.name in ("slice", "reverse", "dynamic_slice"))


def _is(x, value) -> bool:
    return symbolic.prove_eq(x, value) is True


def _slice(a: _Analysis, op: Op) -> None:
    at, x = op.attrs, op.operands[0]
    _whole_axes(a, op, lambda i: _is(at["start_indices"][i], 0) and _is(at["strides"][i], 1)
                and _is(at["limit_indices"][i], x.shape[i]))


def _pad(a: _Analysis, op: Op) -> None:
    at = op.attrs
    _whole_axes(a, op, lambda i: all(_is(at[k][i], 0) for k in (
        "edge_padding_low", "edge_padding_high", "interior_padding")))


def _reverse(a: _Analysis, op: Op) -> None:
    _whole_axes(a, op, lambda i: i not in op.attrs["dimensions"])


def _dynamic_slice(a: _Analysis, op: Op) -> None:
    x = op.operands[0]       # a slice as large as the axis starts at 0 (starts are clamped)
    _whole_axes(a, op, lambda i: _is(op.attrs["slice_sizes"][i], x.shape[i]))


def _dynamic_update_slice(a: _Analysis, op: Op) -> None:
    x, u = op.operands[:2]
    _whole_axes(a, op, lambda i: _is(u.shape[i], x.shape[i]))
    for d, i in a.axes(u).items():
        if a.axes(x).get(d) != i:
            a.refuse({d}, op, "it does not keep the whole axis")


def _reduce_window(a: _Analysis, op: Op) -> None:
    at = op.attrs
    pad = at.get("padding", ())

    def keeps(i):
        return (at["window_dimensions"][i] == 1 and at["window_strides"][i] == 1
                and (not pad or pad[2 * i] == pad[2 * i + 1] == 0)
                and at.get("base_dilations", (1,) * (i + 1))[i] == 1
                and at.get("window_dilations", (1,) * (i + 1))[i] == 1)
    _whole_axes(a, op, keeps)


def _iota(a: _Analysis, op: Op) -> None:
    for d, i in a.axes(op.result).items():
        if i == op.attrs["iota_dimension"]:
            a.refuse({d}, op, "an iota counts along it")


def _dim_constant(a: _Analysis, op: Op) -> None:
    """`c*V` as a number (jnp.mean's divisor): each of n equal shards sees 1/n of it."""
    values = op.attrs.get("values", ())
    used: set[str] = set()
    _dims_in(values, used)
    a.refuse(used - a.cands, op, "it is read as a number")    # derived dims
    for d in used & a.cands:
        linear = True        # every entry c*V, c free of V: each scales by 1/n
        for e in values:
            rest = symbolic.substitute(e, {d: 1})
            linear = linear and d not in symbolic.variables(rest) and \
                _is(e, symbolic.var(d) * rest)
        if linear:
            a.set(op.result, d, ("exact", -1))
        else:
            a.refuse({d}, op, "it is read as a number")


def _concatenate(a: _Analysis, op: Op) -> None:
    axis = op.attrs["dimension"]
    for v in op.operands:
        for d, i in a.axes(v).items():
            if i == axis:
                a.refuse({d}, op, "the concatenation is along it")
    for d in a.marked(op):
        sts = {a.of(v, d) for v in op.operands}
        if len(sts) == 1 and d not in a.axes(op.result):
            a.set(op.result, d, sts.pop())
        else:
            a.refuse({d}, op, "a partial or rescaled value of it is used here")


def _along(a: _Analysis, op: Op, axis_of, why: str) -> None:
    """sort, fft: an op along some axes, batched over the others."""
    for v in list(op.operands) + list(op.results):
        for d, i in a.axes(v).items():
            if axis_of(v, i):
                a.refuse({d}, op, why)
    a.carry(op, linear=False)


def _sort(a: _Analysis, op: Op) -> None:
    _along(a, op, lambda v, i: i == op.attrs["dimension"], "the sort is along it")


def _fft(a: _Analysis, op: Op) -> None:
    n = len(op.attrs.get("fft_length", ()))
    _along(a, op, lambda v, i: i >= v.rank - n, "the FFT is along it")


def _zero_constant(v: Value) -> bool:
    p = v.producer
    while p is not None and p.name in ("broadcast_in_dim", "convert", "reshape"):
        p = p.operands[0].producer
    return p is not None and p.name == "constant" and not np.any(p.attrs.get("value", 1))


def _reduce(a: _Analysis, op: Op) -> None:
    n = len(op.results)
    dims = op.attrs["dimensions"]
    reducer = op.attrs.get("reducer")
    x, r = op.operands[0], op.results[0]
    zero_init = _zero_constant(op.operands[1]) if n == 1 else False
    combinable = n == 1 and reducer in COMBINE and x.dtype != "i1" and (
        reducer != "add" or zero_init)
    for v in op.operands[:n]:
        for d, i in a.axes(v).items():
            if i not in dims:
                continue
            kind, scale = a.of(v, d)
            if combinable and kind == "exact" and (scale == 0 or reducer == "add"):
                a.set(r, d, (reducer, scale))
            else:
                a.refuse({d}, op, "it reduces over it")
    for d in a.marked(op):
        if a.axes(x).get(d, -1) in dims:
            continue                                    # (decided above)
        kind, scale = a.of(x, d)
        ok = combinable and a.of(op.operands[1], d) == EXACT and (
            kind == reducer or (kind == "exact" and (reducer == "add" or scale == 0)))
        if ok:
            a.set(r, d, (kind, scale))
        else:
            a.refuse({d}, op, "a partial or rescaled value of it is used here")


def _dot_general(a: _Analysis, op: Op) -> None:
    lhs, rhs = op.operands
    dn = op.attrs["dot_dimension_numbers"]
    la, ra = a.axes(lhs), a.axes(rhs)
    r = op.result
    for d in set(la) | set(ra) | a.marked(op):
        i, j = la.get(d), ra.get(d)
        (kl, sl), (kr, sr) = a.of(lhs, d), a.of(rhs, d)
        scale = sl + sr
        if i in dn["lhs_contract"] or j in dn["rhs_contract"]:
            if i is not None and j is not None and i in dn["lhs_contract"] and \
                    j in dn["rhs_contract"] and kl == kr == "exact" and \
                    dn["lhs_contract"].index(i) == dn["rhs_contract"].index(j):
                a.set(r, d, ("add", scale))
            else:
                a.refuse({d}, op, "the dot contracts it with another axis")
            continue
        if (i in dn["lhs_batch"] or j in dn["rhs_batch"]) and (
                i is None or j is None or i not in dn["lhs_batch"] or
                j not in dn["rhs_batch"] or
                dn["lhs_batch"].index(i) != dn["rhs_batch"].index(j)):
            a.refuse({d}, op, "the dot pairs it with another axis")
            continue
        kinds = [k for k in (kl, kr) if k != "exact"]
        if not kinds:
            a.set(r, d, ("exact", scale))
        elif kinds == ["add"] and i is None and j is None:
            a.set(r, d, ("add", scale))       # a partial sum times what has no axis of d
        else:
            a.refuse({d}, op, "a partial or rescaled value of it is used here")


def _convolution(a: _Analysis, op: Op) -> None:
    x, k = op.operands
    dn = op.attrs["dimension_numbers"]
    for d, i in a.axes(x).items():
        if i != dn["in_batch"] or op.attrs.get("batch_group_count", 1) != 1:
            a.refuse({d}, op, "the convolution is not batched along it")
    a.refuse(a.axes(k), op, "the convolution's kernel has an axis of it")
    a.carry(op, linear=False)


def _gather(a: _Analysis, op: Op) -> None:
    x, idx = op.operands[:2]
    dn = op.attrs["dimension_numbers"]
    ia = a.axes(idx)
    pairs = dict(zip(dn.get("operand_batching_dims", ()),
                     dn.get("start_indices_batching_dims", ())))
    sizes = op.attrs["slice_sizes"]
    xa = a.axes(x)
    for d, i in xa.items():
        whole = i not in dn["start_index_map"] and i not in dn["collapsed_slice_dims"] and \
            _is(sizes[i], x.shape[i])      # a window of the whole axis (x[:, idx])
        if not whole and (i not in pairs or ia.get(d) != pairs[i]):
            a.refuse({d}, op, "the gather reads across it")
    mentioned: set[str] = set()
    for i, n in enumerate(sizes):
        if i not in xa.values():
            _dims_in(n, mentioned)
    a.refuse(mentioned, op, "it is read as a number")
    for d, i in ia.items():
        if i == dn["index_vector_dim"]:
            a.refuse({d}, op, "the gather's index vectors run along it")
    a.carry(op, linear=False)


def _adds(region: Block) -> bool:
    """A scatter's update computation is `old + new`."""
    return len(region.ops) == 1 and region.ops[0].name == "add" and \
        region.results == region.ops[0].results and \
        {v.id for v in region.ops[0].operands} == {p.id for p in region.params}


def _scatter(a: _Analysis, op: Op) -> None:
    """A scatter-add of updates indexed along the dim into zeros (segment_sum): each shard
    scatters its own updates, a partial sum."""
    dims = a.marked(op)
    for v in list(op.operands) + list(op.results):
        dims.update(a.axes(v))
    if len(op.operands) != 3 or len(op.regions) != 1:
        a.refuse(dims, op, "jdisc does not know how this op partitions")
        return
    x, idx, upd = op.operands
    dn = op.attrs["scatter_dimension_numbers"]
    ivd, window = dn["index_vector_dim"], dn["update_window_dims"]
    idx_dims = [i for i in range(idx.rank) if i != ivd]
    upd_dims = [j for j in range(upd.rank) if j not in window]
    ia, ua = a.axes(idx), a.axes(upd)
    for d in dims:
        i, j = ia.get(d), ua.get(d)
        paired = i is not None and j is not None and i in idx_dims and j in upd_dims and \
            idx_dims.index(i) == upd_dims.index(j)
        kind, scale = a.of(upd, d)
        if paired and kind == "exact" and not a.depends(x, d) and a.of(idx, d) == EXACT and \
                _adds(op.regions[0]) and _zero_constant(x):
            a.set(op.result, d, ("add", scale))
        else:
            a.refuse({d}, op, "the scatter writes across it")


def _control(a: _Analysis, op: Op) -> None:
    """while / if / case: the regions are walked as part of the program (their parameters
    have the operands' shapes); the loop condition reads no axis of a parallel dim, and no
    partial or rescaled value crosses a region's boundary."""
    a.refuse(a.marked(op), op, "a partial or rescaled value of it enters a region")
    for region in op.regions:
        for p in region.params:
            a.check_shape(p, op)
        a.block(region)
        for v in region.results:
            a.refuse(a.state.get(v.id, {}), op, "a partial or rescaled value of it leaves a "
                                                "region")
    if op.name == "while":
        a.refuse(a.axes(op.regions[0].results[0]), op, "the loop condition depends on it")


# the rules by the name an op's registry entry gives (OpInfo.partition)
_BY_KIND = {
    "elementwise": _elementwise, "movement": _movement, "reshape": _reshape,
    "slice": _slice, "pad": _pad, "reverse": _reverse, "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice, "reduce_window": _reduce_window,
    "iota": _iota, "constant": lambda a, op: None, "dim_constant": _dim_constant,
    "concatenate": _concatenate, "sort": _sort, "fft": _fft, "reduce": _reduce,
    "dot_general": _dot_general, "convolution": _convolution, "gather": _gather,
    "scatter": _scatter, "control": _control,
}
_RULES = {name: _BY_KIND[info.partition] for name, info in OPS.items() if info.partition}

# attributes a rule reads itself (others that mention a dim make it not parallel)
_HANDLED_ATTRS = {
    "slice": ("start_indices", "limit_indices", "strides"),
    "pad": ("edge_padding_low", "edge_padding_high", "interior_padding"),
    "dynamic_slice": ("slice_sizes",),
    "dim_constant": ("values",),
    "gather": ("slice_sizes",),
}
