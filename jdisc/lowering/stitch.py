"""C for row-parallel kernels: fused loops, and stitch kernels (reductions reused in-row).

Both iterate a flattened row index in parallel (on the pool, above a work threshold) and a column
loop inside it. A stitch kernel runs its columns in *phases*: phase p computes the reductions
whose input needs only reductions of earlier phases, stores values that later phases need in a
per-piece row buffer, and so on; values with one entry per row (a mean, a max, 1/sqrt(var))
are computed once per row between phases. The row's length, known at run time, picks one of
two ways.

Rows of 128 columns or more (64 or more, for a length known when compiling) run one at a
time. Reductions split their column loop into lanes, independent accumulators, so that the
loop vectorises and no lane waits on the one before (a max with NaN and signed-zero rules is
a chain of several instructions per step): 64 lanes, then runs of 16 into the first 16 of
them, then one column per lane; the lanes fold into 16 by whole vectors and are combined one
by one, in a fixed order.

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
known columns across the rows badly: 1.5-3x slower). Which way a row runs, and so the order
in which its values are combined, depends on its length alone, never on the number of rows:
a row's result does not depend on its batch. A kernel's only row (a sum over a whole array)
runs in lanes, and a long row of integers, whose order does not change the result, is a
plain loop with one accumulator (the C compiler vectorises it).
"""

from __future__ import annotations

import re
from typing import Callable

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import prod
from jdisc.dynamic_passes.ir.dtypes import is_complex, is_float
from jdisc.dynamic_passes.ir.ops import EXPENSIVE, SAME_INDEX
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import CompileError
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import (COMBINE, KernelContext, Renderer, close_rows,
                                  open_rows, parallel_min_work, reducer_identity)
from jdisc.lowering.row_values import row_values

# accumulators per reduction in a long row's loop, and the vector that they fold into; rows
# shorter than ACROSS run ROW_BLOCK at a time, across the rows (from 128 columns, a row alone
# was faster at 128, 150, 180 and 255 columns; below it, slower at 64, 100 and 127)
LANES, LANES_SHORT, ROW_BLOCK = 64, 16, 16
ACROSS = 2 * LANES


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
    staged = _staged_inputs(kernel, inputs, rows_dims + cols_dims, cached,
                            r.row_values | reduced) if blocked else []
    loops = _Stitch(w, r, kernel, level, rows_dims, cols_dims, dim, reduces, cached,
                    1 if integral else LANES if not const or known >= LANES else
                    LANES_SHORT if known >= LANES_SHORT else 1, staged)
    # Short rows (fewer than ACROSS columns) run ROW_BLOCK at a time with every loop across
    # the block's rows: the inputs that row buffers' loops read are first copied column by
    # column into scratch (`stage`), row buffers are kept column by column (zeroed first:
    # lanes past a short block's rows may be read, never stored), and the vectors hold one
    # value of each of the block's rows. Otherwise rows run one at a time. Which way a row
    # runs depends on its length alone, never on how many rows there are, so that a row's
    # result does not depend on the batch it came in. A row of a length known when compiling
    # to be LANES or more runs alone, in as many lanes as it fills (the C compiler unrolls
    # what it knows); so does the one row of a kernel that has one (a sum of a whole array):
    # there are no rows to run across, and the across-rows loop compiled in 4 times the time
    # (W6's log density: 215 against 53 ms for each of two such kernels).
    if blocked:
        w(f"const int across = n_cols < {ACROSS};")
    w("/* this piece's scratch: row buffers (a block's rows, column by column, when across;"
      " one row otherwise) and the block's inputs, column by column (across only) */")
    rows_of = f" * (size_t)(across ? {ROW_BLOCK} : 1)" if blocked else ""
    scratch = [(v, loops.buffers[v.id], f"(size_t)n_cols{rows_of}") for v in cached] + \
        [(v, loops.stage[v.id], f"(size_t)(across ? n_cols * {ROW_BLOCK} : 0)")
         for v in staged]
    for v, name, n in scratch:
        t = ctype(v.dtype)
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
        loops.emit_rows(outputs[0], across=False)
        w.close()
    else:
        loops.emit_rows(outputs[0], across=False)
    for _, name, _ in scratch:
        w(f"free({name});")
    close_rows(w)
    w("return jd_failed;")


def _staged_inputs(kernel: Kernel, inputs: dict[int, str], full: tuple, cached: list[Value],
                   stop: set[int]) -> list[Value]:
    """The kernel inputs of the full [rows, columns] shape that the row buffers' loops read,
    across the rows, at the element's own index (through elementwise ops, which read their
    operands where they are read). Those loops compute what is costly (an exp); read across
    the rows, each vector of an input is a gather, and copying the block's part of the input
    column by column first (a contiguous read per row) is cheaper. Other loops read these
    copies too; inputs read only by reductions of cheap values are read in place (one pass:
    copying first costs more than the gathers it saves)."""
    buffered = {v.id for v in cached}
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
        elif v.producer is not None and v.producer.name in SAME_INDEX:
            stack.extend((x, False) for x in v.producer.operands if x.rank)
    return sorted(found, key=lambda v: v.id)


class _Stitch:
    """One stitch kernel's loops over a piece's rows, for one way of running them (across the
    rows of a block, or one row at a time); emit_stitch may write both."""

    def __init__(self, w: CWriter, r: Renderer, kernel: Kernel, level: dict[int, int],
                 rows_dims, cols_dims, dim, reduces: list[Op], cached: list[Value], lanes: int,
                 staged: list[Value]):
        self.w, self.r, self.kernel, self.level = w, r, kernel, level
        self.rows_dims, self.cols_dims, self.dim = rows_dims, cols_dims, dim
        self.reduces, self.cached, self.lanes = reduces, cached, lanes
        self.buffers = {v.id: f"rowbuf{i}" for i, v in enumerate(cached)}
        self.staged = staged        # inputs copied column by column (across only)
        self.stage = {v.id: f"stage{i}" for i, v in enumerate(staged)}

    def emit_rows(self, output: str, across: bool) -> None:
        w, r, kernel, level = self.w, self.r, self.kernel, self.level
        if across:
            w.open(f"for (int64_t rb = jd_lo; rb < row_end; rb += {ROW_BLOCK})")
            w(f"const int64_t nb = row_end - rb < {ROW_BLOCK} ? row_end - rb : {ROW_BLOCK};")
        else:    # one row at a time: a plain row loop (which the C compiler may vectorise)
            w.open("for (int64_t rb = jd_lo; rb < row_end; rb++)")
        arrays = kernel.row_rank > 1 and across
        if arrays:   # the rows' indices, split once per block (a division each)
            w(f"int64_t {', '.join(f'i{j}_b[{ROW_BLOCK}]' for j in range(kernel.row_rank))};")
            w.open(f"for (int64_t l = 0; l < {ROW_BLOCK}; l++)")
            w("const int64_t row = rb + (l < nb ? l : nb - 1);")
            for j, name in enumerate(_row_names(w, self.rows_dims, self.dim)):
                w(f"i{j}_b[l] = {name};")
            w.close()
        r.row_dims = tuple(self.rows_dims)
        r.push()
        r.accs, r.cached, r.recip, r.staged, r.canon = {}, {}, {}, {}, None
        out = kernel.outputs[0]
        row_buffers = [] if across else \
            [(ctype(v.dtype), self.buffers[v.id]) for v in self.cached]
        if across and self.staged:
            rows = _Rows(w, r, kernel, level, 0, self.rows_dims, self.dim, arrays, False, [])
            self._stage(rows)
        n_phases = max(level.get(op.operands[0].id, 0) for op in self.reduces) + 1
        final = level.get(out.id, 0)
        out_is_row = kernel.root.name == "reduce" or out.id in r.row_values
        acc_names = {op.results[0].id: f"acc{j}" for j, op in enumerate(self.reduces)}
        kept: set[int] = set()       # row values kept in arrays, one entry per row of a block
        for p in range(max(n_phases, final + 1)):
            rows = _Rows(w, r, kernel, level, p, self.rows_dims, self.dim, arrays,
                         not across, row_buffers)
            if across:
                _keep_row_values(rows, kept)
            _hoist_reciprocals(rows)
            phase_reduces = [op for op in self.reduces if level.get(op.operands[0].id, 0) == p]
            phase_cached = [v for v in self.cached if level[v.id] == p]
            writes_out = not out_is_row and final == p
            if phase_reduces or phase_cached or writes_out:
                _emit_phase(rows, phase_reduces, acc_names, phase_cached, self.buffers,
                            (out, output) if writes_out else None, self.cols_dims,
                            self.lanes, across)
        if out_is_row:
            rows.open(real=True)
            w(f"{output}[row] = {r.load(out, ())};")
            rows.close()
        r.staged = {}
        r.pop()
        close_rows(w)

    def _stage(self, rows: "_Rows") -> None:
        """The block's staged inputs, copied row by row (contiguous reads) into scratch laid
        out column by column (`stage<k>[c * ROW_BLOCK + l]`)."""
        w, r = self.w, self.r
        rows.open(hoist=False)
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        idx = r.row_idx + _column_index(w, r, "c", self.cols_dims, self.dim)
        for v in self.staged:
            w(f"{self.stage[v.id]}[c * {ROW_BLOCK} + l] = {r.load(v, idx)};")
        r.pop()
        w.close()
        rows.close()
        r.staged = dict(self.stage)


def _keep_row_values(rows: "_Rows", kept: set[int]) -> None:
    """Across rows: the row values that phase p can compute, once per row of the block into an
    array (`rv<k>_b[l]`), which the loops across the rows then read as vectors."""
    r, w = rows.r, rows.w
    fixed: set[int] = set()     # constants, and what is computed from constants alone
    for op in rows.kernel.ops:
        if op.name == "constant" or op.operands and op.name != "reduce" and all(
                x.id in fixed for x in op.operands):
            fixed.update(v.id for v in op.results)
    new = [v for op in rows.kernel.ops for v in op.results
           if v.id in r.row_values and rows.level.get(v.id, 0) <= rows.p and v.id not in kept
           and v.id not in fixed]
    if not new:
        return
    names = {v.id: f"rv{len(kept) + k}_b" for k, v in enumerate(new)}
    for v in new:
        w(f"{ctype(v.dtype)} {names[v.id]}[{ROW_BLOCK}];")
    rows.open(hoist=False)
    for v in new:
        w(f"{names[v.id]}[l] = {r.load(v, ())};")
    rows.close()
    for v in new:
        r.scopes[-1][(v.id, "row")] = f"{names[v.id]}[l]"
        kept.add(v.id)


class _Rows:
    """Loops over the rows of a block (row `rb + l`; `single`: the block is row `rb`), each
    with a renderer scope of its own in which the per-row values that phase `p` can use are
    computed first. Across rows, a loop runs all ROW_BLOCK lanes, so that the C compiler
    vectorises it with no remainder: the lanes past a short block's last row repeat that row
    (every read stays in bounds, and nothing is computed that that row does not compute),
    and only the loops that write the output stop at the block's rows (`real`)."""

    def __init__(self, w: CWriter, r: Renderer, kernel: Kernel, level: dict[int, int], p: int,
                 rows_dims, dim, arrays: bool, single: bool, buffers: list[tuple[str, str]]):
        self.w, self.r, self.kernel, self.level, self.p = w, r, kernel, level, p
        self.rows_dims, self.dim, self.arrays, self.single = rows_dims, dim, arrays, single
        self.buffers = buffers      # (C type, name) of the row buffers
        self.size = 1 if single else ROW_BLOCK      # rows in a block, at most

    def open(self, hoist: bool = True, real: bool = False, auto: bool = False) -> None:
        """A loop over the block's rows, or its one row. Across rows: over the block's real
        rows (`real`); over every lane, a short block's last row repeated (the loops that
        compute per-row values and copy inputs); or (`auto`, the loops over every column) over
        every lane when the body does not use the row (it reads copies, row buffers and per-row
        arrays: whole vectors, no remainder) and over the real rows otherwise (it reads inputs
        across the rows; a repeated row would cost an index select in every read)."""
        w, r = self.w, self.r
        self._auto = None
        if self.single:     # blocks of one row: no loop
            w.open()
            w("const int64_t l = 0, row = rb;")
        elif real or auto:
            self._auto = (w.lines, len(w.lines)) if auto else None
            w.open(f"for (int64_t l = 0; l < {_AUTO if auto else 'nb'}; l++)")
            w("const int64_t row = rb + l;")
        else:
            w.open(f"for (int64_t l = 0; l < {ROW_BLOCK}; l++)")
            w("const int64_t row = rb + (l < nb ? l : nb - 1);")
        for t, name in self.buffers:     # this row's part of each row buffer
            w(f"{t} *restrict const {name}_r = {name} + l * n_cols;")
        if self.arrays:     # split once per block; otherwise where used (or dropped)
            names = tuple(f"i{j}" for j in range(len(self.rows_dims)))
            w(f"const int64_t {', '.join(f'{i} = {i}_b[l]' for i in names)};")
            r.row_idx = names
        else:
            r.row_idx = _row_names(w, self.rows_dims, self.dim)
        self._body = len(w.lines)
        r.push()
        if hoist:
            for op in self.kernel.ops:
                for v in op.results:
                    if v.id in r.row_values and self.level[v.id] <= self.p:
                        r.load(v, ())

    def close(self) -> None:
        self.r.pop()
        self.w.close()
        if self._auto is not None:      # the loop's header, now that its body is written
            lines, head = self._auto
            uses_row = any(_ROW_NAMES.search(line) for line in lines[self._body:])
            lines[head] = lines[head].replace(_AUTO, "nb" if uses_row else str(ROW_BLOCK))


_AUTO = "@lanes@"
_ROW_NAMES = re.compile(r"\b(?:row|i\d+)\b")


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
    """One phase over the block's columns: the row-buffer values, the output, then the
    reductions (reading row buffers where kept). One row at a time: a plain loop along the
    row for the first two, and the reductions in `lanes` lanes. Across the rows (`across`):
    column by column with a vector across the block's rows for the row buffers (laid out
    column by column) and the reductions (one accumulator per row), and the output row by
    row, so that it is written along the rows."""
    w, r, dim = rows.w, rows.r, rows.dim
    at = f"c * {ROW_BLOCK} + l" if across else "c"     # where row buffers are read
    if cached and across:
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        cidx = _column_index(w, r, "c", cols_dims, dim)
        rows.open(hoist=False, auto=True)
        r.col, r.canon = at, r.row_idx + cidx
        for v in cached:
            w(f"{buffers[v.id]}[{at}] = {r.load(v, r.canon)};")
        rows.close()
        r.pop()
        w.close()
    if (cached and not across) or output is not None:
        rows.open(hoist=not across, real=True)
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        r.col, r.canon = at, None     # along the rows: inputs are read where they are
        idx = r.row_idx + _column_index(w, r, "c", cols_dims, dim)
        if not across:
            for v in cached:
                w(f"{buffers[v.id]}_r[c] = {r.load(v, idx)};")
        if output is not None:
            v, name = output
            w(f"{name}[row * n_cols + c] = {r.load(v, idx)};")
        r.pop()
        close_rows(w)
        rows.close()
    for v in cached:
        r.cached[v.id] = buffers[v.id] + ("" if across else "_r")
    if not reduces:
        return

    def body(col: str, slot: Callable[[str], str], cidx: tuple | None = None) -> None:
        r.push()
        r.col = at if across else col       # where row buffers are read
        idx = r.row_idx + (cidx if cidx is not None else
                           _column_index(w, r, col, cols_dims, dim))
        r.canon = idx if across else None
        for op in reduces:
            acc = slot(acc_names[op.results[0].id])
            val = r.load(op.operands[0], idx)
            w(f"{acc} = {COMBINE[op.attrs['reducer']](acc, val, op.results[0].dtype)};")
        r.pop()

    for op in reduces:
        w(f"{ctype(op.results[0].dtype)} {acc_names[op.results[0].id]}_b[{rows.size}];")
    if across:
        # column by column, one accumulator per row of the block: each row's values in order
        for op in reduces:
            acc, dt = acc_names[op.results[0].id], op.results[0].dtype
            w(f"for (int l = 0; l < {ROW_BLOCK}; l++) {acc}_b[l] = "
              f"{reducer_identity(op.attrs['reducer'], dt)};")
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        cidx = _column_index(w, r, "c", cols_dims, dim)
        rows.open(hoist=False, auto=True)
        body("c", lambda acc: f"{acc}_b[l]", cidx)
        rows.close()
        r.pop()
        close_rows(w)
        for op in reduces:
            acc, dt = acc_names[op.results[0].id], op.results[0].dtype
            init = r.load(op.operands[1], ())   # the init value, once per row (as XLA does)
            w(f"for (int l = 0; l < {ROW_BLOCK}; l++) "
              f"{acc}_b[l] = {COMBINE[op.attrs['reducer']](init, acc + '_b[l]', dt)};")
    else:
        # one row: `lanes` accumulators over runs of that many columns, then runs of
        # LANES_SHORT into the first LANES_SHORT of them, then the rest one per lane; the lanes
        # fold into LANES_SHORT by whole vectors and are combined in order (one lane: the
        # columns in order)
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
    for op in reduces:
        r.accs[op.results[0].id] = f"{acc_names[op.results[0].id]}_b[l]"
