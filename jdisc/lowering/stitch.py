"""C for row-parallel kernels: fused loops, and stitch kernels (reductions reused in-row).

Both iterate a flattened row index in parallel (on the pool, above a work threshold) and a column
loop inside it. A stitch kernel runs its columns in *phases*: phase p computes the reductions
whose input needs only reductions of earlier phases, stores values that later phases need in a
per-piece row buffer, and so on; values with one entry per row (a mean, a max, 1/sqrt(var))
are computed once per row between phases. The row's length, known at run time, picks one of
two ways.

Rows of 128 columns or more (256 in a kernel with row buffers and an output per element, a
softmax; 64 or more, for a length known when compiling) run one at a time. Reductions split
their column loop into lanes, independent accumulators, so that the loop vectorises and no lane
waits on the one before (a max with NaN and signed-zero rules is a chain of several
instructions per step): 64 lanes, then runs of 16 into the first 16 of them, then the last few
columns, one per lane (a row whose short rows run across: as one run of 16 that ends at the
row's end, the columns reduced already masked); the lanes fold into 16 by whole vectors and are
combined one by one, in a fixed order. Such a row's plain loops run blocks of 16 columns, the
last ending at the row's end too, so that no loop has a scalar remainder.

Shorter rows (a softmax over a few dozen keys, a norm over xyz) are too short to split: along
one row, vector instructions run a few whole vectors and then the rest one column at a time
(an exp of one value costs about as much as one of a whole vector), and each row pays for
combining its lanes. They run 16 rows at a time and every loop runs *across* the block's
rows, one vector lane per row: the inputs that the costly values' loops read are first copied
column by column for the block (a row's reads stay contiguous), row buffers are laid out
column by column, per-row values are kept one per lane, each phase's values and reductions
(one accumulator per row, its columns in order) are computed a column at a time for the 16
rows, and the output is written row by row. A length known when compiling runs so from 16 to
63 columns, and below 16 when the kernel keeps row buffers; otherwise a row runs alone, and
the C compiler unrolls its few columns and vectorises the loop over the rows (it unrolls 64
known columns across the rows badly: 1.6-5x slower). Which way a row runs, and so the order
in which its values are combined, depends on its length alone, never on the number of rows:
a row's result does not depend on its batch. A kernel's only row (a sum over a whole array)
runs in lanes, and a long row of integers, whose order does not change the result, is a
plain loop with one accumulator (the C compiler vectorises it).
"""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import prod
from jdisc.dynamic_passes.ir.dtypes import is_complex, is_float, numpy_dtype
from jdisc.dynamic_passes.ir.ops import EXPENSIVE, SAME_INDEX
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import CompileError
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.loops import (KernelContext, Renderer, close_rows, open_pieces,
                                  open_row_loop, open_row_tiles, parallel_min_work,
                                  tile_cols)
from jdisc.lowering.row_values import row_values
from jdisc.lowering.stitch_loops import (ACROSS, ACROSS_BUFFERED, LANES, LANES_SHORT, ROW_BLOCK,
                                         ROW_STAGE, StitchLoops, column_index, fixed_values,
                                         row_view, tiled)


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
    cols, min_work = dim(prod(cols_dims)), parallel_min_work(kernel)
    strides = transposed_strides(kernel)
    if not strides:
        open_pieces(w, rows_dims, cols, dim, min_work)
        _loop_rows(w, r, kernel, outputs, rows_dims, cols_dims, dim, tiled=False)
        return
    # reads across its rows: in tiles where a row's lines leave L1, each way its own
    # parallel loop (the plain loop beside the tiled one in one function ran 1.3-1.8x slower)
    w(f"const int64_t n_rows = {dim(prod(rows_dims))}, n_cols = {cols};")
    w("/* the column tile: the whole row where the lines its transposed reads touch stay in"
      " L1, else as many as their sets hold (loops.py TILE_ROWS) */")
    for line in tile_cols([dim(s) for s in strides]):
        w(line)
    w.open("if (tw >= n_cols)")
    open_pieces(w, rows_dims, cols, dim, min_work, declare=False)
    _loop_rows(w, r, kernel, outputs, rows_dims, cols_dims, dim, tiled=False)
    w.else_()
    open_pieces(w, rows_dims, cols, dim, min_work, [("int64_t", "tw")], declare=False)
    _loop_rows(w, r, kernel, outputs, rows_dims, cols_dims, dim, tiled=True)
    w.close()


def _loop_rows(w, r: Renderer, kernel: Kernel, outputs: list[str], rows_dims, cols_dims, dim,
               tiled: bool) -> None:
    """A piece's rows (one by one, or in tiles) and their column loops, closed."""
    r.push()
    r.row_idx = (open_row_tiles if tiled else open_row_loop)(w, rows_dims, dim)
    r.row_values = row_values(kernel, rows_dims, {v.id for v in kernel.outputs}, r.assume)
    for op in kernel.ops:
        for v in op.results:
            if v.id in r.row_values:
                r.load(v, ())
    w.open(f"for (int64_t c = {'cb' if tiled else '0'}; c < {'ce' if tiled else 'n_cols'}; c++)")
    r.push()
    idx = r.row_idx + column_index(w, r, "c", cols_dims, dim)
    for v, name in zip(kernel.outputs, outputs):   # several outputs: multi-output fusion
        w(f"{name}[row * n_cols + c] = {r.load(v, idx)};")
    r.pop()
    w.close()
    for _ in range(3 if tiled else 1):
        w.close()
    r.pop()


def transposed_strides(kernel: Kernel) -> list:
    """The byte strides (symbolic) at which a loop kernel's transposes read their operand
    along an output row, for each transpose that moves its operand's last dim away from the
    last place: the column loop then reads at that stride, and the kernel runs in tiles
    (loops.py TILE_ROWS)."""
    out = []
    for op in kernel.ops:
        if op.name != "transpose":
            continue
        x, last = op.operands[0], op.attrs["permutation"][-1]
        if last != x.rank - 1 and x.shape[-1] != 1:
            out.append(prod(x.shape[last + 1:]) * numpy_dtype(x.dtype).itemsize)
    return out


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
    """Whether a stitch kernel has the path for short rows, blocks of rows run across the rows
    (emit_stitch `across`): it may have more than a block's worth of rows, and they may be
    short: their length is not known when compiling, or known to be 16 to 63 columns, or
    fewer when the kernel keeps row buffers (a softmax's exp: along one row those loops run a
    few whole vectors and the rest a column at a time). Fewer known columns, and no row
    buffer: the C compiler unrolls the columns and vectorises the loop over the rows itself
    (a norm over xyz: 0.08 ns a value, against 0.6 across the rows). That path is what makes
    a stitch kernel slow to compile at -O3 (lowering/units.py STITCH_OPT)."""
    rows_dims, cols_dims = _rows_and_columns(kernel)
    n_rows, n_cols = prod(rows_dims), prod(cols_dims)
    if isinstance(n_rows, int) and n_rows < ROW_BLOCK:
        return False
    if not isinstance(n_cols, int):
        return True
    if n_cols >= LANES:     # known: GCC unrolls 64 known columns across the rows badly
        return False
    if n_cols >= LANES_SHORT:
        return True
    reduced = {v.id for op in kernel.ops if op.name == "reduce" for v in op.results}
    try:    # without the dim facts the launcher's checks give a version (emit_stitch has them)
        row_vals = row_values(kernel, rows_dims, reduced)
    except CompileError:
        row_vals = set()
    return bool(_row_buffered(kernel, _levels(kernel.ops), row_vals))


def _row_buffered(kernel: Kernel, level: dict[int, int], row_vals: set[int]) -> list[Value]:
    """The full-shape values that a later phase reads, or that a reduction reads, and that
    cost more than a load to recompute: kept in a row buffer. A costly reduction input is
    computed by a plain loop into the buffer, then reduced by a tight loop: both vectorise
    (one loop doing both does not). A row value is one scalar per row, never buffered."""
    inside = {res.id for op in kernel.ops for res in op.results}
    producer = {res.id: op for op in kernel.ops for res in op.results}
    costly: dict[int, bool] = {}     # per element: a per-row value's cost is paid per row
    for op in kernel.ops:
        for res in op.results:
            costly[res.id] = res.id not in row_vals and (op.name in EXPENSIVE or any(
                costly.get(x.id, False) and level.get(x.id, 0) == level.get(res.id, 0)
                for x in op.operands))
    later_reads: set[int] = set()
    for op in kernel.ops:
        if op.name == "reduce":
            if costly.get(op.operands[0].id) and op.operands[0].id in inside:
                later_reads.add(op.operands[0].id)
            continue
        for x in op.operands:
            if x.id in inside and level.get(x.id, 0) < level[op.results[0].id] and \
                    costly[x.id] and producer[x.id].name != "reduce":
                later_reads.add(x.id)
    later_reads -= row_vals
    return [op.results[0] for op in kernel.ops if op.results and op.results[0].id in later_reads]


def emit_stitch(ctx: KernelContext) -> None:
    """Reductions over the trailing dims, their producers and their consumers, per row."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    reduces = [op for op in kernel.ops if op.name == "reduce"]
    rows_dims, cols_dims = _rows_and_columns(kernel)
    n_rows = prod(rows_dims)
    level = _levels(kernel.ops)

    r = Renderer(w, inputs, dim, assume)
    reduced = {v.id for op in reduces for v in op.results}   # accumulators, not row values
    r.row_values = row_values(kernel, rows_dims, reduced, r.assume)
    cached = _row_buffered(kernel, level, r.row_values)
    cols = dim(prod(cols_dims))
    w("int jd_failed = 0;")
    w(f"const int64_t n_rows = {dim(n_rows)}, n_cols = {cols};")
    w.parallel("n_rows", f"n_rows > 1 && n_rows * n_cols >= {parallel_min_work(kernel)}",
               [("int64_t", "n_rows", dim(n_rows)), ("int64_t", "n_cols", cols)],
               failed="jd_failed")
    w.open()
    # Reductions of integers (booleans too) give the same result in any order: a row that runs
    # alone (a long one) is one accumulator in a plain column loop, which GCC vectorises itself
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
    # across the rows, an output of 4-byte values is computed column by column, as row
    # buffers are, and the inputs it reads are staged as theirs are (stitch_loops.py tiled)
    out = kernel.outputs[0]
    out_tiled = blocked and tiled(out) and kernel.root.name != "reduce" and \
        out.id not in r.row_values
    staged = _staged_inputs(kernel, inputs, rows_dims + cols_dims, len(cols_dims),
                            cached + ([out] if out_tiled else []),
                            r.row_values | reduced, level) if blocked else []
    loops = StitchLoops(w, r, kernel, level, rows_dims, cols_dims, dim, reduces, cached,
                        1 if integral else LANES if not const or known >= LANES else
                        LANES_SHORT if known >= LANES_SHORT else 1, staged, inputs,
                        out_tiled)
    # Short rows (fewer than ACROSS columns; ACROSS_BUFFERED in a kernel with row buffers and an
    # output of 4-byte values per element, a softmax) run ROW_BLOCK at a time with every loop across
    # the block's rows: the inputs that row buffers' loops read are first copied column by
    # column into scratch (`stage`), row buffers are kept column by column (zeroed first: a
    # loop over a short block's rows leaves the lanes past them unwritten, and a loop over
    # every lane reads them), and the vectors hold one value of each of the block's rows.
    # Otherwise rows run one at a time. Which way a row runs depends on its length alone,
    # never on how many rows there are, so that a row's result does not depend on the batch
    # it came in. A row of a length known when compiling to be LANES or more runs alone, in
    # as many lanes as it fills (the C compiler unrolls what it knows); so does the one row of
    # a kernel that has one (a sum of a whole array): there are no rows to run across, and the
    # across-rows loop compiled in 4 times the time (W6's log density: 215 against 53 ms for
    # each of two such kernels).
    if blocked:
        across = LANES_SHORT if _permuted_rows(kernel, inputs, rows_dims + cols_dims,
                                               cached + [out], staged) else \
            ACROSS_BUFFERED if cached and out_tiled else ACROSS
        w(f"const int across = n_cols < {across};")
    w("/* this piece's scratch: row buffers (a block's rows, column by column, when across;"
      " one row otherwise) and the block's inputs, column by column (across only) */")
    rows_of = f" * (size_t)(across ? {ROW_BLOCK} : 1)" if blocked else ""
    scratch = [(v, loops.buffers[v.id], f"(size_t)n_cols{rows_of}") for v in cached] + \
        [(v, loops.stage[v.id], f"(size_t)(across ? n_cols * {ROW_BLOCK} : 0)")
         for v in staged] + \
        ([(None, ROW_STAGE, f"(size_t)(across ? n_cols * {ROW_BLOCK} : 0)")]
         if loops.row_staged() else []) + \
        ([(out, loops.out_lanes, f"(size_t)(across ? n_cols * {ROW_BLOCK} : 0)")]
         if out_tiled else [])
    for v, name, n in scratch:
        t = "int32_t" if v is None else \
            loops.stage_ctype(v) if v.id in loops.stage and name == loops.stage[v.id] else \
            ctype(v.dtype)
        w(f"{t} *{name} = ({t} *)calloc({n} + 1, sizeof({t}));")
    if scratch:
        with w.block(f"if ({' || '.join('!' + name for _, name, _ in scratch)})"):
            w("jd_failed = 1;")
    w(f"const int64_t row_end = {'jd_failed ? jd_lo : ' if scratch else ''}jd_hi;")
    if blocked and const:    # a short length known when compiling: always across
        loops.emit_rows(outputs[0], across=True)
    elif blocked:
        w.open("if (across)")
        loops.emit_rows(outputs[0], across=True)
        w.else_()
        loops.emit_rows(outputs[0], across=False, wide=True)
        w.close()
    else:
        loops.emit_rows(outputs[0], across=False)
    for _, name, _ in scratch:
        w(f"free({name});")
    close_rows(w)
    w("return jd_failed;")


def _permuted_rows(kernel: Kernel, inputs: dict[int, str], full: tuple,
                   start: list[Value], staged: list[Value]) -> bool:
    """Whether the loops that compute `start` (row buffers, the output) read a kernel input of
    the full shape through a transpose that permutes its rows and keeps its columns last: one
    row of it is contiguous, but the rows of a block are not, so across the rows each read is
    a gather per lane, and GCC 12 left such loops scalar (the transpose of an einsum's output
    [B, S, heads, S] in a masked softmax: 6x slower than running each row alone, nnx's Llama
    at S = 59, benchmarks/zoo_speed.py). Such a kernel runs rows of 16 columns or more alone.
    A read through a staged value (`_staged_inputs`: a transpose that views an input's rows is
    one) is not a gather: the copy reads each lane's row contiguously."""
    stack, seen = [(v, False) for v in start], {(v.id, p) for v in staged for p in (False, True)}
    while stack:
        v, permuted = stack.pop()
        if (v.id, permuted) in seen:
            continue
        seen.add((v.id, permuted))
        if v.id in inputs:
            if permuted and len(v.shape) == len(full):
                return True
            continue
        op = v.producer
        if op is None:
            continue
        if op.name == "transpose" and op.attrs["permutation"][-1] == v.rank - 1:
            stack.append((op.operands[0], True))
        elif op.name in SAME_INDEX:
            stack.extend((x, permuted) for x in op.operands if x.rank == v.rank)
    return False


def _staged_inputs(kernel: Kernel, inputs: dict[int, str], full: tuple, n_col_dims: int,
                   cached: list[Value], stop: set[int], level: dict[int, int]) -> list[Value]:
    """The kernel inputs of the full [rows, columns] shape that the row buffers' loops read,
    across the rows, at the element's own index (through elementwise ops, which read their
    operands where they are read). Those loops compute what is costly (an exp); read across
    the rows, each vector of an input is a gather, and copying the block's part of the input
    column by column first (a contiguous read per row) is cheaper. Other loops read these
    copies too; inputs read only by reductions of cheap values are read in place (one pass:
    copying first costs more than the gathers it saves). Also staged, where the row has one
    column dim, views of other values' rows (stitch_loops.py `row_view`: broadcasts,
    transposes and reshapes that keep the last dim): of a kernel input of 4-byte values (an
    attention's additive mask [B, S] over [B, heads, S, S], scores [B, S, heads, S] moved to
    [B, heads, S, S]), each lane's row of it is a run of the input, copied by tiles
    (stitch_loops.py `_stage`); of a value computed from the kernel's inputs before any
    reduction, not from constants alone (a boolean mask `m != 0` of [B, 1, S, S] over
    [B, heads, S, S], flax's), computed once per element into the copy, where each loop that
    reads it would compute it again, by gathers."""
    buffered, fixed = {v.id for v in cached}, fixed_values(kernel)
    stack = [(v, True) for v in cached]
    seen: set[int] = set()
    found: list[Value] = []
    while stack:
        v, root = stack.pop()
        if v.id in seen or v.id in stop or (not root and v.id in buffered):
            continue
        seen.add(v.id)
        if v.id in inputs:
            if len(v.shape) == len(full) and all(
                    symbolic.prove_eq(a, b) is True for a, b in zip(v.shape, full)):
                found.append(v)
            continue
        x = row_view(v, full, inputs) if n_col_dims == 1 else None
        if x is not None and (tiled(v) if x.id in inputs else
                              level.get(v.id, 0) == 0 and x.id not in fixed):
            found.append(v)
        elif v.producer is not None and v.producer.name in SAME_INDEX:
            stack.extend((x, False) for x in v.producer.operands if x.rank)
    return sorted(found, key=lambda v: v.id)
