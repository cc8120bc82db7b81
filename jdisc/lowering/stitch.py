"""C for row-parallel kernels: fused loops, and stitch kernels (reductions reused in-row).

Both iterate a flattened row index in parallel (on the pool, above a work threshold) and a column
loop inside it. A stitch kernel runs its columns in *phases*: phase p computes the reductions
whose input needs only reductions of earlier phases, stores values that later phases need in a
per-piece row buffer, and so on; values with one entry per row (a mean, a max, 1/sqrt(var))
are computed once per row between phases. Reductions split their column loop into lanes,
independent accumulators, so that the loop vectorises and no lane waits on the one before (a
max with NaN and signed-zero rules is a chain of several instructions per step), then combine
the lanes in a fixed order. The row's length, known at run time, picks one of two ways. Rows
of 64 columns or more take 64 lanes, then runs of 16 into the first 16 of them, then one column
per lane; the lanes fold into 16 by whole vectors and are combined one by one. Shorter rows (a
softmax over a few dozen keys, a norm over xyz) are too short to split: they run 16 rows at a
time, each phase's reductions column by column with one accumulator per row, so that the
vector instructions work across the rows (one row's chain of dependent steps was the cost);
the phase's plain loop stays row by row. Either way the order in which a row's values are
combined depends only on its length. A row of a length known when compiling runs alone, in
as many lanes as it fills (the C compiler unrolls the rest), and so does a kernel's only row
(a sum over a whole array). A long row of integers, whose order does not change the result, is
a plain loop with one accumulator (the C compiler vectorises it).
"""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.algebra.symbolic import prod
from jdisc.dynamic_passes.ir.dtypes import is_complex, is_float
from jdisc.dynamic_passes.ir.ops import EXPENSIVE
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import (COMBINE, KernelContext, Renderer, close_rows,
                                  open_rows, parallel_min_work, reducer_identity)
from jdisc.lowering.row_values import row_values

# accumulators per reduction in a long row's loop, and the vector that they fold into; rows
# shorter than LANES run ROW_BLOCK at a time, with an accumulator per row
LANES, LANES_SHORT, ROW_BLOCK = 64, 16, 16


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
    r.row_idx = open_rows(w, r, rows_dims, dim(prod(cols_dims)), dim, parallel_min_work(kernel))
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


def _rows_and_columns(kernel: Kernel) -> tuple[tuple, tuple]:
    """(row dims, column dims) of a stitch kernel: its reductions run over the columns."""
    full = next(op for op in kernel.ops if op.name == "reduce").operands[0].shape
    return tuple(full[:kernel.row_rank]), tuple(full[kernel.row_rank:])


def runs_rows_across(kernel: Kernel) -> bool:
    """Whether a stitch kernel has the path for short rows, blocks of rows reduced across
    the rows (emit_stitch `blocked`): its rows' length is not known when compiling, and it has
    more than one row. That path is what makes a stitch kernel slow to compile at -O3
    (lowering/units.py STITCH_OPT)."""
    rows_dims, cols_dims = _rows_and_columns(kernel)
    n_rows = prod(rows_dims)
    return not isinstance(prod(cols_dims), int) and not (isinstance(n_rows, int) and n_rows == 1)


def emit_stitch(ctx: KernelContext) -> None:
    """Reductions over the trailing dims, their producers and their consumers, per row."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    reduces = [op for op in kernel.ops if op.name == "reduce"]
    rows_dims, cols_dims = _rows_and_columns(kernel)
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
    w.parallel("n_rows", f"n_rows > 1 && n_rows * n_cols >= {parallel_min_work(kernel)}",
               [("int64_t", "n_rows", dim(n_rows)), ("int64_t", "n_cols", cols)],
               failed="jd_failed")
    w.open()
    # Rows run in blocks: ROW_BLOCK rows at a time when they are shorter than LANES (their
    # reductions then run across the block's rows), one at a time otherwise. A row of a length
    # known when compiling runs alone, in as many lanes as it fills (the C compiler unrolls
    # what it knows); so does the one row of a kernel that has one (a sum of a whole array):
    # there are no rows to run across, and the across-rows loop compiled in 4 times the time
    # (W6's log density: 215 against 53 ms for each of two such kernels).
    # Reductions of integers (booleans too) give the same result in any order: a row of 64
    # columns or more is one accumulator in a plain column loop, which GCC vectorises itself
    # (the lanes fix the order of floats' additions; for an `any` over rows, GCC took about
    # twice as long to compile them: `benchmarks/row_reductions.py --op any`). Short rows
    # still run across the block's rows. Not in a kernel that keeps its branches: without
    # if-conversion (a float-to-int convert) the plain loop stays scalar, 4-8x slower.
    integral = not ctx.branches and all(
        not is_float(op.results[0].dtype) and not is_complex(op.results[0].dtype)
        for op in reduces)
    known = prod(cols_dims)
    const = isinstance(known, int)
    blocked = runs_rows_across(kernel)
    lanes = 1 if integral else LANES if not const or known >= LANES else \
        LANES_SHORT if known >= LANES_SHORT else 1
    if blocked:
        w(f"const int64_t per_block = n_cols < {LANES} ? {ROW_BLOCK} : 1;")
    w("/* this piece's scratch rows (a block's) */")
    rows_of = " * (size_t)per_block" if blocked else ""
    for v in cached:
        w(f"{ctype(v.dtype)} *{buffers[v.id]} = ({ctype(v.dtype)} *)malloc("
          f"sizeof({ctype(v.dtype)}) * (size_t)n_cols{rows_of} + 1);")
    if cached:
        with w.block(f"if ({' || '.join('!' + buffers[v.id] for v in cached)})"):
            w("jd_failed = 1;")
    w(f"const int64_t row_end = {'jd_failed ? jd_lo : ' if cached else ''}jd_hi;")
    if blocked:
        w.open("for (int64_t rb = jd_lo; rb < row_end; rb += per_block)")
        w("const int64_t nb = row_end - rb < per_block ? row_end - rb : per_block;")
    else:    # one row at a time: a plain row loop (which the C compiler may vectorise)
        w.open("for (int64_t rb = jd_lo; rb < row_end; rb++)")
    arrays = kernel.row_rank > 1 and blocked
    if arrays:   # the rows' indices, split once per block (a division each)
        w(f"int64_t {', '.join(f'i{j}_b[{ROW_BLOCK}]' for j in range(kernel.row_rank))};")
        w.open("for (int64_t l = 0; l < nb; l++)")
        w("const int64_t row = rb + l;")
        for j, name in enumerate(_row_names(w, rows_dims, dim)):
            w(f"i{j}_b[l] = {name};")
        w.close()
    r.row_dims = tuple(rows_dims)
    r.push()
    n_phases = max(level.get(op.operands[0].id, 0) for op in reduces) + 1
    final = level.get(out.id, 0)
    out_is_row = root.name == "reduce" or out.id in r.row_values
    acc_names = {op.results[0].id: f"acc{j}" for j, op in enumerate(reduces)}
    row_buffers = [(ctype(v.dtype), buffers[v.id]) for v in cached]
    for p in range(max(n_phases, final + 1)):
        rows = _Rows(w, r, kernel, level, p, rows_dims, dim, arrays, not blocked,
                     row_buffers)
        _hoist_reciprocals(rows)
        phase_reduces = [op for op in reduces if level.get(op.operands[0].id, 0) == p]
        phase_cached = [v for v in cached if level[v.id] == p]
        writes_out = not out_is_row and final == p
        if phase_reduces or phase_cached or writes_out:
            _emit_phase(rows, phase_reduces, acc_names, phase_cached, buffers,
                        (out, outputs[0]) if writes_out else None, cols_dims,
                        lanes, across=blocked)
    if out_is_row:
        rows.open()
        w(f"{outputs[0]}[row] = {r.load(out, ())};")
        rows.close()
    r.pop()
    close_rows(w)
    for v in cached:
        w(f"free({buffers[v.id]});")
    close_rows(w)
    w("return jd_failed;")


class _Rows:
    """Loops over the rows of a block (row `rb + l`; `single`: the block is row `rb`), each
    with a renderer scope of its own in which the per-row values that phase `p` can use are
    computed first."""

    def __init__(self, w: CWriter, r: Renderer, kernel: Kernel, level: dict[int, int], p: int,
                 rows_dims, dim, arrays: bool, single: bool, buffers: list[tuple[str, str]]):
        self.w, self.r, self.kernel, self.level, self.p = w, r, kernel, level, p
        self.rows_dims, self.dim, self.arrays, self.single = rows_dims, dim, arrays, single
        self.buffers = buffers      # (C type, name) of the row buffers
        self.size = 1 if single else ROW_BLOCK      # rows in a block, at most

    def open(self, hoist: bool = True) -> None:
        w, r = self.w, self.r
        if self.single:     # blocks of one row: no loop
            w.open()
            w("const int64_t l = 0, row = rb;")
        else:
            w.open("for (int64_t l = 0; l < nb; l++)")
            w("const int64_t row = rb + l;")
        for t, name in self.buffers:     # this row's part of each row buffer
            w(f"{t} *restrict const {name}_r = {name} + l * n_cols;")
        if self.arrays:     # split once per block; otherwise where used (or dropped)
            names = tuple(f"i{j}" for j in range(len(self.rows_dims)))
            w(f"const int64_t {', '.join(f'{i} = {i}_b[l]' for i in names)};")
            r.row_idx = names
        else:
            r.row_idx = _row_names(w, self.rows_dims, self.dim)
        r.push()
        if hoist:
            for op in self.kernel.ops:
                for v in op.results:
                    if v.id in r.row_values and self.level[v.id] <= self.p:
                        r.load(v, ())

    def close(self) -> None:
        self.r.pop()
        self.w.close()


def _row_names(w: CWriter, rows_dims, dim) -> tuple[str, ...]:
    """The row's per-dimension indices i0..i{k-1} from the flat row index `row`."""
    names, rest = [], "row"
    for j in range(len(rows_dims) - 1, -1, -1):
        d = dim(rows_dims[j])
        w(f"const int64_t i{j} = {rest}{'' if j == 0 else f' % {d}'};")
        rest = f"({rest} / {d})"
        names.append(f"i{j}")
    return tuple(reversed(names))


def _hoist_reciprocals(rows: _Rows) -> None:
    """The reciprocals of per-row divisors that phase p can compute, one per row of the block
    (x / sum becomes x * (1 / sum): within 1 ulp)."""
    r = rows.r
    for op in rows.kernel.ops:
        if op.name != "divide" or id(op) in r.recip or op.results[0].dtype not in ("f32", "f64"):
            continue
        src = op.operands[1]
        while src.producer is not None and src.producer.name in ("broadcast_in_dim", "reshape") \
                and src.id not in r.row_values and src.id not in r.accs:
            src = src.producer.operands[0]
        if (src.id in r.row_values or src.id in r.accs) and rows.level.get(src.id, 0) <= rows.p:
            t = ctype(op.results[0].dtype)
            name = f"inv{len(r.recip)}_b"
            r.w(f"{t} {name}[{rows.size}];")
            rows.open(hoist=False)
            r.w(f"{name}[l] = ({t})1 / {r.load(src, ())};")
            rows.close()
            r.recip[id(op)] = f"{name}[l]"


def _emit_phase(rows: _Rows, reduces: list[Op], acc_names: dict[int, str],
                cached: list[Value], buffers: dict[int, str],
                output: tuple[Value, str] | None, cols_dims, lanes: int, across: bool) -> None:
    """One phase over the block's columns: a plain loop, row by row, storing row-buffer values
    and/or the output, then the reductions (reading row buffers where kept): per row in
    `lanes` lanes, or, with `across` and rows shorter than LANES, column by column with one
    accumulator per row of the block (vectorised across the rows)."""
    w, r, dim = rows.w, rows.r, rows.dim
    if cached or output is not None:
        rows.open()
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        r.col = "c"
        idx = r.row_idx + _column_index(w, r, "c", cols_dims, dim)
        for v in cached:
            w(f"{buffers[v.id]}_r[c] = {r.load(v, idx)};")
        if output is not None:
            v, name = output
            w(f"{name}[row * n_cols + c] = {r.load(v, idx)};")
        r.pop()
        close_rows(w)
        rows.close()
    for v in cached:
        r.cached[v.id] = buffers[v.id] + "_r"
    if not reduces:
        return

    def body(col: str, slot: Callable[[str], str]) -> None:
        r.push()
        r.col = col       # where row buffers are read
        idx = r.row_idx + _column_index(w, r, col, cols_dims, dim)
        for op in reduces:
            acc = slot(acc_names[op.results[0].id])
            val = r.load(op.operands[0], idx)
            w(f"{acc} = {COMBINE[op.attrs['reducer']](acc, val, op.results[0].dtype)};")
        r.pop()

    for op in reduces:
        w(f"{ctype(op.results[0].dtype)} {acc_names[op.results[0].id]}_b[{rows.size}];")
    if across:
        # column by column, one accumulator per row of the block: each row's values in order
        w.open(f"if (n_cols < {LANES})")
        for op in reduces:
            acc, dt = acc_names[op.results[0].id], op.results[0].dtype
            w(f"for (int l = 0; l < {ROW_BLOCK}; l++) {acc}_b[l] = "
              f"{reducer_identity(op.attrs['reducer'], dt)};")
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        rows.open(hoist=False)
        body("c", lambda acc: f"{acc}_b[l]")
        rows.close()
        close_rows(w)
        for op in reduces:
            acc, dt = acc_names[op.results[0].id], op.results[0].dtype
            init = r.load(op.operands[1], ())   # the init value, once per row (as XLA does)
            w(f"for (int l = 0; l < {ROW_BLOCK}; l++) "
              f"{acc}_b[l] = {COMBINE[op.attrs['reducer']](init, acc + '_b[l]', dt)};")
        w.else_()
    # one row: `lanes` accumulators over runs of that many columns, then runs of LANES_SHORT
    # into the first LANES_SHORT of them, then the rest one per lane; the lanes fold into
    # LANES_SHORT by whole vectors and are combined in order (one lane: the columns in order)
    rows.open()
    for op in reduces:
        acc, dt = acc_names[op.results[0].id], op.results[0].dtype
        w(f"{ctype(dt)} {acc}_l[{lanes}];")
        w(f"for (int q = 0; q < {lanes}; q++) {acc}_l[q] = "
          f"{reducer_identity(op.attrs['reducer'], dt)};")
    w("int64_t c = 0;")
    for run in sorted({lanes, LANES_SHORT} - {1} if lanes > 1 else (), reverse=True):
        w.open(f"for (; c + {run} <= n_cols; c += {run})")
        w.open(f"for (int64_t q = 0; q < {run}; q++)")
        w("const int64_t cc = c + q;")
        body("cc", lambda acc: f"{acc}_l[q]")
        close_rows(w)
        close_rows(w)
    w.open("for (; c < n_cols; c++)")
    body("c", lambda acc: f"{acc}_l[{f'c & {LANES_SHORT - 1}' if lanes > 1 else '0'}]")
    close_rows(w)
    for op in reduces:
        acc, dt = acc_names[op.results[0].id], op.results[0].dtype
        combine = COMBINE[op.attrs["reducer"]]
        if lanes > LANES_SHORT:
            w(f"for (int k = {LANES_SHORT}; k < {lanes}; k += {LANES_SHORT}) "
              f"for (int q = 0; q < {LANES_SHORT}; q++) "
              f"{acc}_l[q] = {combine(acc + '_l[q]', acc + '_l[k + q]', dt)};")
        w(f"{ctype(dt)} {acc} = {r.load(op.operands[1], ())};")   # the init value, once
        w(f"for (int q = 0; q < {min(lanes, LANES_SHORT)}; q++) "
          f"{acc} = {combine(acc, acc + '_l[q]', dt)};")
        w(f"{acc}_b[l] = {acc};")
    rows.close()
    if across:
        w.close()
    for op in reduces:
        r.accs[op.results[0].id] = f"{acc_names[op.results[0].id]}_b[l]"
