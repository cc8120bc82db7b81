"""C for reduce and reduce_window kernels, with their producers fused into the input.

Two schedules. When the input's innermost dim is kept (a reduction over other dims, e.g. a
global average over H, W of NHWC, or a pooling window of size 1 on the channels), the kernel
runs over *rows* of the output: for each row it sets the row to the init values, then for each
reduced position (or window position) combines a whole contiguous row of input into it. That
inner loop is independent across its elements, so it vectorises, and rows run in parallel.
Each output element still combines its values in the same order as the scalar schedule, so
both give the same bits. Otherwise, each output element is a scalar loop over its values.

A cumulative window (`jnp.cumsum`, `cummax`, `cumprod`: the window spans its whole axis, padded
by size - 1 below) is a running scan along that axis instead, O(n) rather than O(n^2). It
combines the same values in the same order as the window loop (init, then x0, x1, ...), so it
gives the same bits for any reducer.
"""

from __future__ import annotations


from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import (COMBINE, KernelContext, Renderer, close_rows, dilated_index,
                                  loop_nest, open_rows, parallel_loop_nest, render_body)


def emit_reduce(ctx: KernelContext) -> None:
    """The body of a reduce kernel (inside the function braces)."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    r = Renderer(w, inputs, dim, assume)
    op = kernel.root
    x = op.operands[0]
    if x.rank >= 1 and x.rank - 1 not in op.attrs["dimensions"]:
        _reduce_rows(w, r, op, outputs, dim)
    else:
        _reduce_scalar(w, r, op, outputs, dim)


def emit_window(ctx: KernelContext) -> None:
    """The body of a reduce_window kernel (inside the function braces)."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    r = Renderer(w, inputs, dim, assume)
    op = kernel.root
    a, last = op.attrs, op.operands[0].rank - 1
    axis = scan_axis(op)
    if axis is not None:
        _window_scan(w, r, op, outputs, dim, axis)
    elif last >= 1 and a["window_dimensions"][last] == 1 and a["window_strides"][last] == 1 \
            and a["base_dilations"][last] == 1 and a["padding"][2 * last] == 0 \
            and a["padding"][2 * last + 1] == 0:
        _window_rows(w, r, op, outputs, dim)
    else:
        _window_scalar(w, r, op, outputs, dim)


# ------------------------------------------------------------------------- scalar schedule

def _reduce_scalar(w: CWriter, r: Renderer, op: Op, outputs: list[str], dim) -> None:
    """For each output element, a loop over the reduced dims."""
    n = len(op.results)
    xs, inits = op.operands[:n], op.operands[n:]
    x = xs[0]
    dims = op.attrs["dimensions"]
    kept = [i for i in range(x.rank) if i not in dims]
    out = op.results[0]
    oidx, close_outer = parallel_loop_nest(w, out.shape, dim)
    r.push()
    accs = _init_accs(w, r, inits, op.results)
    ridx, close_inner = loop_nest(w, [x.shape[i] for i in dims], dim, prefix="r")
    r.push()
    full = [""] * x.rank
    for k, i in enumerate(kept):
        full[i] = oidx[k]
    for k, i in enumerate(dims):
        full[i] = ridx[k]
    _combine(w, r, op, accs, [r.load(v, tuple(full)) for v in xs])
    r.pop()
    close_inner()
    _write_accs(w, r, accs, outputs, oidx, out)
    close_outer()


def _window_scalar(w: CWriter, r: Renderer, op: Op, outputs: list[str], dim) -> None:
    """For each output element, the window's in-bounds elements (padding and base-dilation
    holes read as the init value, i.e. are skipped)."""
    n = len(op.results)
    xs, inits = op.operands[:n], op.operands[n:]
    out = op.results[0]
    oidx, close_outer = parallel_loop_nest(w, out.shape, dim)
    r.push()
    accs = _init_accs(w, r, inits, op.results)
    widx, close_inner = loop_nest(w, op.attrs["window_dimensions"], dim, prefix="r")
    conds, sub = _window_index(op, oidx, widx, dim)
    with w.block(f"if ({' && '.join(f'({c})' for c in conds) or '1'})"):
        r.push()
        _combine(w, r, op, accs, [r.load(v, tuple(sub)) for v in xs])
        r.pop()
    close_inner()
    _write_accs(w, r, accs, outputs, oidx, out)
    close_outer()


def scan_axis(op: Op) -> int | None:
    """The axis of a cumulative window: one operand, unit strides and dilations, one axis
    whose window is the axis's size with padding (size - 1, 0), and windows of 1 without
    padding elsewhere. None for any other window."""
    a, x = op.attrs, op.operands[0]
    if len(op.operands) != 2:
        return None
    found = None
    for d in range(x.rank):
        size, lo, hi = a["window_dimensions"][d], a["padding"][2 * d], a["padding"][2 * d + 1]
        if a["window_strides"][d] != 1 or a["base_dilations"][d] != 1 or \
                a["window_dilations"][d] != 1:
            return None
        if size == 1 and lo == 0 and hi == 0:
            continue
        if found is not None or symbolic.prove_eq(size, x.shape[d]) is not True or \
                symbolic.prove_eq(lo, x.shape[d] - 1) is not True or \
                symbolic.prove_eq(hi, 0) is not True:
            return None
        found = d
    return found


def _window_scan(w: CWriter, r: Renderer, op: Op, outputs: list[str], dim, axis: int) -> None:
    """A running scan along `axis` for every position of the other axes (in parallel when
    the output is large): the output at i is init combined with x[0], ..., x[i] in order."""
    out = op.results[0]
    others = [d for d in range(out.rank) if d != axis]
    oidx, close_outer = parallel_loop_nest(w, [out.shape[d] for d in others], dim)
    r.push()
    accs = _init_accs(w, r, op.operands[1:], op.results)
    w.open(f"for (int64_t s = 0; s < {dim(out.shape[axis])}; s++)")
    r.push()
    idx = list(oidx)
    idx.insert(axis, "s")
    _combine(w, r, op, accs, [r.load(op.operands[0], tuple(idx))])
    _write_accs(w, r, accs, outputs, tuple(idx), out)     # (pops the element's scope)
    w.close()
    r.pop()
    close_outer()


def _window_index(op: Op, oidx, widx, dim) -> tuple[list[str], list[str]]:
    """The input index window position `widx` of output element `oidx` reads, and the C
    conditions that it is inside the input (not padding, not a base-dilation hole)."""
    a, x = op.attrs, op.operands[0]
    conds, sub = [], []
    for d in range(x.rank):
        p = (f"({oidx[d]} * {dim(a['window_strides'][d])} + {widx[d]} * "
             f"{dim(a['window_dilations'][d])} - {dim(a['padding'][2 * d])})")
        bd = a["base_dilations"][d]
        plain = (bd == 1 and a["padding"][2 * d] == 0 and a["padding"][2 * d + 1] == 0
                 and a["window_dilations"][d] == 1)
        if plain:   # o*s + k <= (out-1)*s + w-1 <= n-1: always inside, no test
            sub.append(p)
        else:
            cond, at = dilated_index(p, bd, dim(x.shape[d]))
            conds.append(cond)
            sub.append(at)
    return conds, sub


def _init_accs(w: CWriter, r: Renderer, inits, results) -> list[str]:
    accs = [f"acc{k}" for k in range(len(results))]
    for acc, init, res in zip(accs, inits, results):
        w(f"{ctype(res.dtype)} {acc} = {r.load(init, ())};")
    return accs


def _combine(w: CWriter, r: Renderer, op: Op, accs: list[str], vals: list[str]) -> None:
    """acc = reducer(acc, value): a named reducer, or the op's scalar body region. A body's
    results are all computed before any accumulator is assigned."""
    if op.attrs["reducer"] == "body":
        exprs = render_body(w, r, op.regions[0], accs + vals)
        if len(accs) > 1:
            named = []
            for e, res in zip(exprs, op.results):
                named.append(f"t{r.count}")
                r.count += 1
                w(f"const {ctype(res.dtype)} {named[-1]} = {e};")
            exprs = named
        for acc, expr in zip(accs, exprs):
            w(f"{acc} = {expr};")
    else:
        w(f"{accs[0]} = {COMBINE[op.attrs['reducer']](accs[0], vals[0], op.results[0].dtype)};")


def _write_accs(w: CWriter, r: Renderer, accs, outputs, oidx, out: Value) -> None:
    lin = r.linear(oidx, out.shape)
    for acc, name in zip(accs, outputs):
        w(f"{name}[{lin}] = {acc};")
    r.pop()


# ---------------------------------------------------------------------------- row schedule

def _open_output_rows(w: CWriter, r: Renderer, op: Op, outputs: list[str], work: Dim,
                      dim, inner: bool = False) -> tuple[tuple[str, ...], list[str]]:
    """A parallel loop over the output's rows (all dims but the last); each row of every
    output set to its init value. With `inner`, the parallel loop is over all dims but the
    last two, and a loop over the second-to-last dim runs inside it (short rows: no index
    division per row). Returns the row's indices and the rows' pointers."""
    n = len(op.results)
    out = op.results[0]
    split = out.rank - 2 if inner and out.rank >= 3 else out.rank - 1
    rows = open_rows(w, r, out.shape[:split], dim(work * prod(out.shape[split:-1])), dim)
    w(f"const int64_t n_lanes = {dim(out.shape[-1])};")
    at = "row"
    if split < out.rank - 1:
        name = f"i{split}"
        w.open(f"for (int64_t {name} = 0; {name} < {dim(out.shape[split])}; {name}++)")
        rows, at = rows + (name,), f"(row * {dim(out.shape[split])} + {name})"
    r.push()
    inits = [r.load(v, ()) for v in op.operands[n:]]
    names = []
    for k, (res, name) in enumerate(zip(op.results, outputs)):
        names.append(f"orow{k}")
        w(f"{ctype(res.dtype)} *restrict orow{k} = {name} + {at} * n_lanes;")
    w.omp("simd")
    with w.block("for (int64_t c = 0; c < n_lanes; c++)"):
        for row, init in zip(names, inits):
            w(f"{row}[c] = {init};")
    return rows, names


def _close_output_rows(w: CWriter, r: Renderer, op: Op, inner: bool = False) -> None:
    r.pop()
    if inner and op.results[0].rank >= 3:
        close_rows(w)
    close_rows(w)


def _combine_row(w: CWriter, r: Renderer, op: Op, rows: list[str], idx) -> None:
    """for every c: row[c] = reducer(row[c], input at idx), idx ending in c."""
    n = len(op.results)
    w.omp("simd")
    with w.block("for (int64_t c = 0; c < n_lanes; c++)"):
        r.push()
        _combine(w, r, op, [f"{row}[c]" for row in rows],
                 [r.load(v, tuple(idx)) for v in op.operands[:n]])
        r.pop()


def _reduce_rows(w: CWriter, r: Renderer, op: Op, outputs: list[str], dim) -> None:
    """The input's last dim is kept: loops over the reduced dims, each combining a row."""
    x = op.operands[0]
    dims = op.attrs["dimensions"]
    kept = [i for i in range(x.rank) if i not in dims]
    reduced = [x.shape[i] for i in dims]
    work: Dim = op.results[0].shape[-1]
    for d in reduced:
        work = work * d
    oidx, rows = _open_output_rows(w, r, op, outputs, work, dim)
    ridx, close = loop_nest(w, reduced, dim, prefix="r")
    full = [""] * x.rank
    for k, i in enumerate(kept):
        full[i] = (oidx + ("c",))[k]
    for k, i in enumerate(dims):
        full[i] = ridx[k]
    _combine_row(w, r, op, rows, full)
    close()
    _close_output_rows(w, r, op)


def _window_rows(w: CWriter, r: Renderer, op: Op, outputs: list[str], dim) -> None:
    """The window has size 1 on the last dim (pooling over NHWC): loops over the window's
    other positions, each combining a row when it is inside the input."""
    window = op.attrs["window_dimensions"]
    work: Dim = op.results[0].shape[-1]
    for d in window:
        work = work * d
    oidx, rows = _open_output_rows(w, r, op, outputs, work, dim, inner=True)
    widx, close = loop_nest(w, window[:-1], dim, prefix="r")
    conds, sub = _window_index(op, oidx + ("c",), widx + ("0",), dim)
    sub[-1] = "c"
    with w.block(f"if ({' && '.join(f'({c})' for c in conds) or '1'})"):
        _combine_row(w, r, op, rows, sub)
    close()
    _close_output_rows(w, r, op, inner=True)
