"""C for row-parallel kernels: fused loops, and stitch kernels (reductions reused in-row).

Both iterate a flattened row index in parallel (on the pool, above a work threshold) and a column
loop inside it. A stitch kernel runs its columns in *phases*: phase p computes the reductions
whose input needs only reductions of earlier phases, stores values that later phases need in a
per-piece row buffer, and so on; values with one entry per row (a mean, a max, 1/sqrt(var))
are computed once per row between phases. Reductions split their column loop into lanes,
independent accumulators, so that the loop vectorises and no lane waits on the one before (a
max with NaN and signed-zero rules is a chain of several instructions per step), then combine
the lanes in a fixed order. How many lanes pays depends on the row's length, known at run time:
each reduction phase has a version per size class, picked by the row length. Rows of 64
columns or more take 64 lanes, folded into 16 by whole vectors before the lanes are combined
one by one; rows of 16 to 63 (a softmax over a few dozen keys) take 16; shorter rows (a norm
over xyz) take one accumulator, with nothing to set up or combine. Each version has one lane
loop and a scalar tail. A row's sum is therefore in an order fixed by its length.
"""

from __future__ import annotations


from jdisc.dynamic_passes.algebra.symbolic import prod
from jdisc.dynamic_passes.ir.ops import EXPENSIVE
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import (COMBINE, PARALLEL_MIN_WORK, KernelContext, Renderer, close_rows,
                                  open_rows, reducer_identity)
from jdisc.lowering.row_values import row_values

# accumulators per reduction in a row loop: a long row's, and the vector that they fold into
LANES, LANES_SHORT = 64, 16


def _column_index(w: CWriter, r: Renderer, col: str, cols_dims, dim) -> tuple[str, ...]:
    """Per-dimension column indices from the flat column index `col` (a load over all of them,
    in order, reads at `col` itself: Renderer.linear)."""
    if len(cols_dims) == 1:
        return (col,)
    names, rest = [], col
    for k in range(len(cols_dims) - 1, -1, -1):
        name = f"c{k}_{col}"
        w(f"const int64_t {name} = {rest}{'' if k == 0 else f' % {dim(cols_dims[k])}'};")
        rest = f"({rest} / {dim(cols_dims[k])})"
        names.append(name)
    names.reverse()
    r.flat[tuple(names)] = (col, tuple(cols_dims))
    return tuple(names)


def emit_loop(ctx: KernelContext) -> None:
    """An elementwise kernel: parallel over rows, a contiguous column loop inside. Rows are
    all but the last dim, or the leading `row_rank` dims when the kernel holds per-row values
    (computed once per row, not once per element)."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    r = Renderer(w, inputs, dim, assume)
    out = kernel.outputs[0]
    if out.rank == 0:
        for v, name in zip(kernel.outputs, outputs):
            w(f"{name}[0] = {r.load(v, ())};")
        return
    k = kernel.row_rank if 0 < kernel.row_rank < out.rank else out.rank - 1
    rows_dims, cols_dims = out.shape[:k], out.shape[k:]
    r.row_idx = open_rows(w, r, rows_dims, dim(prod(cols_dims)), dim)
    r.row_values = row_values(kernel, rows_dims, {v.id for v in kernel.outputs}, r.assume)
    for op in kernel.ops:
        for v in op.results:
            if v.id in r.row_values:
                r.load(v, ())
    w.open("for (int64_t c = 0; c < n_cols; c++)")
    r.push()
    idx = r.row_idx + _column_index(w, r, "c", cols_dims, dim)
    for v, name in zip(kernel.outputs, outputs):   # several outputs: multi-output fusion
        w(f"{name}[row * n_cols + c] = {r.load(v, idx)};")
    r.pop()
    close_rows(w)
    close_rows(w)


def _levels(ops: list[Op]) -> dict[int, int]:
    """Value id -> phase in which it can first be computed (reductions add one)."""
    level: dict[int, int] = {}
    for op in ops:
        base = max((level.get(x.id, 0) for x in op.operands), default=0)
        for res in op.results:
            level[res.id] = base + 1 if op.name == "reduce" else base
    return level


def emit_stitch(ctx: KernelContext) -> None:
    """Reductions over the trailing dims, their producers and their consumers, per row."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    k = kernel.row_rank
    reduces = [op for op in kernel.ops if op.name == "reduce"]
    full = reduces[0].operands[0].shape
    rows_dims, cols_dims = full[:k], full[k:]
    n_rows = prod(rows_dims)
    level = _levels(kernel.ops)
    root, out = kernel.root, kernel.outputs[0]
    inside = {res.id for op in kernel.ops for res in op.results}

    r = Renderer(w, inputs, dim, assume)
    reduced = {v.id for op in reduces for v in op.results}   # accumulators, not row values
    r.row_values = row_values(kernel, rows_dims, reduced, r.assume)
    # full-shape values that a later phase reads, and that cost more than a load to
    # recompute, are kept in a row buffer
    producer = {res.id: op for op in kernel.ops for res in op.results}
    costly: dict[int, bool] = {}
    for op in kernel.ops:
        for res in op.results:
            costly[res.id] = op.name in EXPENSIVE or any(
                costly.get(x.id, False) and level.get(x.id, 0) == level.get(res.id, 0)
                for x in op.operands)
    later_reads: set[int] = set()
    for op in kernel.ops:
        if op.name == "reduce":
            continue
        for x in op.operands:
            if x.id in inside and level.get(x.id, 0) < level[op.results[0].id] and \
                    costly[x.id] and producer[x.id].name != "reduce" and \
                    x.id not in r.row_values:
                later_reads.add(x.id)
    # a costly reduction input is computed by a plain loop into a row buffer, then reduced by
    # a tight lane loop: both vectorise (one loop doing both does not)
    later_reads |= {op.operands[0].id for op in reduces
                    if costly.get(op.operands[0].id) and op.operands[0].id in inside}
    later_reads -= r.row_values          # a row value is one scalar per row, never buffered
    cached = [op.results[0] for op in kernel.ops if op.results and op.results[0].id in later_reads]
    buffers = {v.id: f"rowbuf{i}" for i, v in enumerate(cached)}
    cols = dim(prod(cols_dims))
    w("int jd_failed = 0;")
    w(f"const int64_t n_rows = {dim(n_rows)}, n_cols = {cols};")
    w.parallel("n_rows", f"n_rows > 1 && n_rows * n_cols >= {PARALLEL_MIN_WORK}",
               [("int64_t", "n_rows", dim(n_rows)), ("int64_t", "n_cols", cols)],
               failed="jd_failed")
    w.open()
    w("/* this piece's scratch rows */")
    for v in cached:
        w(f"{ctype(v.dtype)} *{buffers[v.id]} = ({ctype(v.dtype)} *)malloc("
          f"sizeof({ctype(v.dtype)}) * (size_t)n_cols + 1);")
    if cached:
        with w.block(f"if ({' || '.join('!' + buffers[v.id] for v in cached)})"):
            w("jd_failed = 1;")
    w(f"const int64_t row_end = {'jd_failed ? jd_lo : ' if cached else ''}jd_hi;")
    w.open("for (int64_t row = jd_lo; row < row_end; row++)")
    names, rest = [], "row"
    for j in range(k - 1, -1, -1):
        d = dim(rows_dims[j])
        w(f"const int64_t i{j} = {rest}{'' if j == 0 else f' % {d}'};")
        rest = f"({rest} / {d})"
        names.append(f"i{j}")
    r.row_idx = tuple(reversed(names))
    r.push()
    n_phases = max(level.get(op.operands[0].id, 0) for op in reduces) + 1
    final = level.get(out.id, 0)
    out_is_row = root.name == "reduce" or out.id in r.row_values
    acc_names = {op.results[0].id: f"acc{j}" for j, op in enumerate(reduces)}
    for p in range(max(n_phases, final + 1)):
        _hoist_row_values(r, kernel, level, p)
        phase_reduces = [op for op in reduces if level.get(op.operands[0].id, 0) == p]
        phase_cached = [v for v in cached if level[v.id] == p]
        writes_out = not out_is_row and final == p
        if phase_reduces or phase_cached or writes_out:
            _emit_phase(w, r, phase_reduces, acc_names, phase_cached, buffers,
                        (out, outputs[0]) if writes_out else None, cols_dims, dim)
    if out_is_row:
        w(f"{outputs[0]}[row] = {r.load(out, ())};")
    r.pop()
    close_rows(w)
    for v in cached:
        w(f"free({buffers[v.id]});")
    close_rows(w)
    w("return jd_failed;")


def _hoist_row_values(r: Renderer, kernel: Kernel, level: dict[int, int], p: int) -> None:
    """Compute, at row scope, the per-row values that phase p can already use, and the
    reciprocals of per-row divisors (x / sum becomes x * (1 / sum): within 1 ulp)."""
    for op in kernel.ops:
        for v in op.results:
            if v.id in r.row_values and level[v.id] <= p:
                r.load(v, ())
    for op in kernel.ops:
        if op.name != "divide" or id(op) in r.recip or op.results[0].dtype not in ("f32", "f64"):
            continue
        src = op.operands[1]
        while src.producer is not None and src.producer.name in ("broadcast_in_dim", "reshape") \
                and src.id not in r.row_values and src.id not in r.accs:
            src = src.producer.operands[0]
        if (src.id in r.row_values or src.id in r.accs) and level.get(src.id, 0) <= p:
            t = ctype(op.results[0].dtype)
            name = f"inv{len(r.recip)}"
            r.w(f"const {t} {name} = ({t})1 / {r.load(src, ())};")
            r.recip[id(op)] = name


def _emit_phase(w: CWriter, r: Renderer, reduces: list[Op], acc_names: dict[int, str],
                cached: list[Value], buffers: dict[int, str],
                output: tuple[Value, str] | None, cols_dims, dim) -> None:
    """One phase over the row's columns: a plain loop storing row-buffer values and/or the
    output, then a lane-split loop for the reductions (reading row buffers where kept)."""
    if cached or output is not None:
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        r.col = "c"
        idx = r.row_idx + _column_index(w, r, "c", cols_dims, dim)
        for v in cached:
            w(f"{buffers[v.id]}[c] = {r.load(v, idx)};")
        if output is not None:
            v, name = output
            w(f"{name}[row * n_cols + c] = {r.load(v, idx)};")
        r.pop()
        close_rows(w)
    for v in cached:
        r.cached[v.id] = buffers[v.id]
    if not reduces:
        return

    def body(col: str, lane: str) -> None:
        r.push()
        r.col = col
        idx = r.row_idx + _column_index(w, r, col, cols_dims, dim)
        for op in reduces:
            slot = f"{acc_names[op.results[0].id]}_l[{lane}]"
            val = r.load(op.operands[0], idx)
            w(f"{slot} = {COMBINE[op.attrs['reducer']](slot, val, op.results[0].dtype)};")
        r.pop()

    for op in reduces:
        w(f"{ctype(op.results[0].dtype)} {acc_names[op.results[0].id]};")
    # a version per size class of the row, picked by its length (a constant length leaves
    # one): LANES accumulators for long rows, LANES_SHORT for rows of LANES_SHORT to LANES - 1
    # columns, one for shorter rows (a norm over xyz), with nothing to set up or combine. Each
    # runs one lane loop and a scalar tail; the long rows' lanes are folded into LANES_SHORT by
    # whole vectors before the lanes are combined in order.
    for lanes in (LANES, LANES_SHORT, 1):
        w.open("else" if lanes == 1 else
               f"{'if' if lanes == LANES else 'else if'} (n_cols >= {lanes})")
        r.push()
        for op in reduces:
            acc = acc_names[op.results[0].id]
            w(f"{ctype(op.results[0].dtype)} {acc}_l[{lanes}];")
            ident = reducer_identity(op.attrs["reducer"], op.results[0].dtype)
            w(f"for (int l = 0; l < {lanes}; l++) {acc}_l[l] = {ident};")
        w("int64_t c = 0;")
        if lanes > 1:
            w.open(f"for (; c + {lanes} <= n_cols; c += {lanes})")
            w.open(f"for (int64_t l = 0; l < {lanes}; l++)")
            w("const int64_t cc = c + l;")
            body("cc", "l")
            close_rows(w)
            close_rows(w)
        w.open("for (; c < n_cols; c++)")
        body("c", "0")
        close_rows(w)
        for op in reduces:
            acc, dt = acc_names[op.results[0].id], op.results[0].dtype
            combine = COMBINE[op.attrs["reducer"]]
            if lanes > LANES_SHORT:
                w(f"for (int k = {LANES_SHORT}; k < {lanes}; k += {LANES_SHORT}) "
                  f"for (int l = 0; l < {LANES_SHORT}; l++) "
                  f"{acc}_l[l] = {combine(acc + '_l[l]', acc + '_l[k + l]', dt)};")
            w(f"{acc} = {r.load(op.operands[1], ())};")   # the init value, once (as XLA does)
            w(f"for (int l = 0; l < {min(lanes, LANES_SHORT)}; l++) "
              f"{acc} = {combine(acc, acc + '_l[l]', dt)};")
        r.pop()
        close_rows(w)
    for op in reduces:
        r.accs[op.results[0].id] = acc_names[op.results[0].id]
