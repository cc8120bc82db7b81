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

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.ops import OPS
from jdisc.dynamic_passes.ir.program import Block, Op, Program, Value
from jdisc.dynamic_passes.passes.parallel_state import (COMBINE, EXACT, Analysis, dims_in,
                                                        is_float, proves_eq)
from jdisc.dynamic_passes.passes.sharding_rule import ParallelAxes

def find_parallel_axes(prog: Program) -> Program:
    """Pass: `prog.parallel`, the parallel axes of the inputs and where they go."""
    a = Analysis(prog, _RULES, _HANDLED_ATTRS)
    a.block(prog.body)
    combine = []
    for v in prog.body.results:
        comb = []
        for d, (kind, scale) in sorted(a.state.get(v.id, {}).items()):
            if kind == "number":
                a.refuse({d}, v.producer, "it is read as a number")
            elif scale and v.dtype[0] not in "fbc":
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



# --------------------------------------------------------------------------- rules per op

def _elementwise(a: Analysis, op: Op) -> None:
    """Axes line up with the result's (scalar operands broadcast). Partial and scaled values
    pass where the op commutes with combining the shards."""
    r = op.results[0]
    for d in a.marked(op):
        st = _elementwise_state(op, [a.of(v, d) for v in op.operands])
        if st is None or (st[0] != "exact" and d in a.axes(r)) or (
                st[1] and not is_float(r) and op.name != "convert"):
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


def _movement(a: Analysis, op: Op) -> None:
    """broadcast_in_dim and transpose: every axis of the operand keeps its size in the
    result."""
    a.carry(op, linear=True)


def _reshape(a: Analysis, op: Op) -> None:
    """An axis of the dim stays an axis of its own with the same elements before it."""
    x, r = op.operands[0], op.result
    xa, ra = a.axes(x), a.axes(r)
    for d in set(xa) | set(ra):
        i, j = xa.get(d), ra.get(d)
        if i is None or j is None or symbolic.prove_eq(
                symbolic.prod(x.shape[:i]), symbolic.prod(r.shape[:j])) is not True:
            a.refuse({d}, op, "the reshape merges or splits its axis")
    a.carry(op, linear=True)


def _whole_axes(a: Analysis, op: Op, keeps) -> None:
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
                dims_in(x, mentioned)
    a.refuse(mentioned, op, "it is read as a number")
    a.carry(op, linear=op.name in ("slice", "reverse", "dynamic_slice"))


def _slice(a: Analysis, op: Op) -> None:
    at, x = op.attrs, op.operands[0]
    _whole_axes(a, op, lambda i: proves_eq(at["start_indices"][i], 0) and proves_eq(at["strides"][i], 1)
                and proves_eq(at["limit_indices"][i], x.shape[i]))


def _pad(a: Analysis, op: Op) -> None:
    at = op.attrs
    _whole_axes(a, op, lambda i: all(proves_eq(at[k][i], 0) for k in (
        "edge_padding_low", "edge_padding_high", "interior_padding")))


def _reverse(a: Analysis, op: Op) -> None:
    _whole_axes(a, op, lambda i: i not in op.attrs["dimensions"])


def _dynamic_slice(a: Analysis, op: Op) -> None:
    x = op.operands[0]       # a slice as large as the axis starts at 0 (starts are clamped)
    _whole_axes(a, op, lambda i: proves_eq(op.attrs["slice_sizes"][i], x.shape[i]))


def _dynamic_update_slice(a: Analysis, op: Op) -> None:
    x, u = op.operands[:2]
    _whole_axes(a, op, lambda i: proves_eq(u.shape[i], x.shape[i]))
    for d, i in a.axes(u).items():
        if a.axes(x).get(d) != i:
            a.refuse({d}, op, "it does not keep the whole axis")


def _reduce_window(a: Analysis, op: Op) -> None:
    at = op.attrs
    pad = at.get("padding", ())

    def keeps(i):
        return (at["window_dimensions"][i] == 1 and at["window_strides"][i] == 1
                and (not pad or pad[2 * i] == pad[2 * i + 1] == 0)
                and at.get("base_dilations", (1,) * (i + 1))[i] == 1
                and at.get("window_dilations", (1,) * (i + 1))[i] == 1)
    _whole_axes(a, op, keeps)


def _iota(a: Analysis, op: Op) -> None:
    for d, i in a.axes(op.result).items():
        if i == op.attrs["iota_dimension"]:
            a.refuse({d}, op, "an iota counts along it")


def _dim_constant(a: Analysis, op: Op) -> None:
    """`c*V` as a number (jnp.mean's divisor): each of n equal shards sees 1/n of it."""
    values = op.attrs.get("values", ())
    used: set[str] = set()
    dims_in(values, used)
    a.refuse(used - a.cands, op, "it is read as a number")    # derived dims
    for d in used & a.cands:
        linear = True        # every entry c*V, c free of V: each scales by 1/n
        for e in values:
            rest = symbolic.substitute(e, {d: 1})
            linear = linear and d not in symbolic.variables(rest) and \
                proves_eq(e, symbolic.var(d) * rest)
        if linear:
            a.set(op.result, d, ("exact", -1))
        else:          # a shape vector (B, 4): refused where it is used, unless an entry
            a.set(op.result, d, ("number", 0))      # free of the dim is picked from it


def _concatenate(a: Analysis, op: Op) -> None:
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


def _along(a: Analysis, op: Op, axis_of, why: str) -> None:
    """sort, fft: an op along some axes, batched over the others."""
    for v in list(op.operands) + list(op.results):
        for d, i in a.axes(v).items():
            if axis_of(v, i):
                a.refuse({d}, op, why)
    a.carry(op, linear=False)


def _sort(a: Analysis, op: Op) -> None:
    _along(a, op, lambda v, i: i == op.attrs["dimension"], "the sort is along it")


def _fft(a: Analysis, op: Op) -> None:
    n = len(op.attrs.get("fft_length", ()))
    _along(a, op, lambda v, i: i >= v.rank - n, "the FFT is along it")


def _zero_constant(v: Value) -> bool:
    p = v.producer
    while p is not None and p.name in ("broadcast_in_dim", "convert", "reshape"):
        p = p.operands[0].producer
    return p is not None and p.name == "constant" and not np.any(p.attrs.get("value", 1))


def _reduce(a: Analysis, op: Op) -> None:
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


def _dot_general(a: Analysis, op: Op) -> None:
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


def _convolution(a: Analysis, op: Op) -> None:
    x, k = op.operands
    dn = op.attrs["dimension_numbers"]
    for d, i in a.axes(x).items():
        if i != dn["in_batch"] or op.attrs.get("batch_group_count", 1) != 1:
            a.refuse({d}, op, "the convolution is not batched along it")
    a.refuse(a.axes(k), op, "the convolution's kernel has an axis of it")
    a.carry(op, linear=False)


def _gather(a: Analysis, op: Op) -> None:
    x, idx = op.operands[:2]
    dn = op.attrs["dimension_numbers"]
    ia = a.axes(idx)
    pairs = dict(zip(dn.get("operand_batching_dims", ()),
                     dn.get("start_indices_batching_dims", ())))
    sizes = op.attrs["slice_sizes"]
    xa = a.axes(x)
    for d, i in xa.items():
        whole = i not in dn["start_index_map"] and i not in dn["collapsed_slice_dims"] and \
            proves_eq(sizes[i], x.shape[i])      # a window of the whole axis (x[:, idx])
        if not whole and (i not in pairs or ia.get(d) != pairs[i]):
            a.refuse({d}, op, "the gather reads across it")
    mentioned: set[str] = set()
    for i, n in enumerate(sizes):
        if i not in xa.values():
            dims_in(n, mentioned)
    a.refuse(mentioned, op, "it is read as a number")
    for d, i in ia.items():
        if i == dn["index_vector_dim"]:
            a.refuse({d}, op, "the gather's index vectors run along it")
    picked = set()          # an entry of a shape vector, free of the dim: exact
    for d in a.marked(op):
        if a.of(x, d)[0] == "number":
            entry = _shape_entry(x, op.operands[1])
            if entry is None or d in symbolic.variables(entry):
                a.refuse({d}, op, "it is read as a number")
            picked.add(d)
    a.carry(op, linear=False, ignore=picked)


def _shape_entry(x: Value, idx: Value):
    """The entry a gather of one element reads from a shape vector `dim_constant(...)` at a
    constant index (clamped, as gathers clamp), or None."""
    values = x.producer.attrs.get("values", ()) if x.producer is not None and \
        x.producer.name == "dim_constant" and x.rank == 1 else ()
    i = _constant_scalar(idx)
    if not values or i is None:
        return None
    return values[min(max(i, 0), len(values) - 1)]


def _constant_scalar(v: Value, depth: int = 8):
    """The integer a one-element value always holds, where constants make it (or None)."""
    if symbolic.prod(v.shape) != 1 or depth == 0:
        return None
    if v.sym is not None and len(v.sym) == 1 and isinstance(v.sym[0], int):
        return v.sym[0]
    p = v.producer
    if p is None:
        return None
    if p.name == "constant":
        value = np.asarray(p.attrs.get("value"))
        return int(value.ravel()[0]) if value.size == 1 and value.dtype.kind in "biu" else None
    if p.name in ("broadcast_in_dim", "reshape", "convert"):
        return _constant_scalar(p.operands[0], depth - 1)
    if p.name == "select":
        pred = _constant_scalar(p.operands[0], depth - 1)
        return None if pred is None else _constant_scalar(p.operands[1 if pred else 2],
                                                          depth - 1)
    return None


def _adds(region: Block) -> bool:
    """A scatter's update computation is `old + new`."""
    return len(region.ops) == 1 and region.ops[0].name == "add" and \
        region.results == region.ops[0].results and \
        {v.id for v in region.ops[0].operands} == {p.id for p in region.params}


def _scatter(a: Analysis, op: Op) -> None:
    """A scatter batched along the dim (operand, indices and updates all along it: each element
    writes its own slice), or a scatter-add into zeros of updates indexed along the dim
    (segment_sum): each shard scatters its own updates, a partial sum."""
    dims = a.marked(op)
    for v in list(op.operands) + list(op.results):
        dims.update(a.axes(v))
    if len(op.operands) not in (3, 4) or len(op.regions) != 1:
        a.refuse(dims, op, "jdisc does not know how this op partitions")
        return
    x, idx, upd = op.operands[:3]
    mask = op.operands[3] if len(op.operands) == 4 else None    # read where x is (simplify.py)
    dn = op.attrs["scatter_dimension_numbers"]
    ivd, window = dn["index_vector_dim"], dn["update_window_dims"]
    idx_dims = [i for i in range(idx.rank) if i != ivd]
    upd_dims = [j for j in range(upd.rank) if j not in window]
    xa, ia, ua = a.axes(x), a.axes(idx), a.axes(upd)
    batching = dict(zip(dn.get("input_batching_dims", ()),
                        dn.get("scatter_indices_batching_dims", ())))
    for d in dims:
        i, j, k = xa.get(d), ia.get(d), ua.get(d)
        paired = j is not None and k is not None and j in idx_dims and k in upd_dims and \
            idx_dims.index(j) == upd_dims.index(k)
        kind, scale = a.of(upd, d)
        masked_along = mask is None or mask.rank == 0 and not a.depends(mask, d) or \
            a.axes(mask).get(d) == i and a.of(mask, d) == EXACT
        if paired and i is not None and batching.get(i) == j and a.of(idx, d) == EXACT and \
                kind == "exact" and a.of(x, d)[0] == "exact" and masked_along and \
                (scale == 0 or _adds(op.regions[0])):     # (a rescaled add is homogeneous)
            if a.of(x, d)[1] == scale or (_zero_constant(x) and _adds(op.regions[0])):
                a.set(op.result, d, (kind, scale))          # batched along the dim
                continue
        if paired and i is None and kind == "exact" and not a.depends(x, d) and mask is None and \
                a.of(idx, d) == EXACT and _adds(op.regions[0]) and _zero_constant(x):
            a.set(op.result, d, ("add", scale))
        else:
            a.refuse({d}, op, "the scatter writes across it")


def _control(a: Analysis, op: Op) -> None:
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
