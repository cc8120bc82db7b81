"""The loops of a stitch kernel over a piece's rows (lowering/stitch.py decides which values
are buffered, which inputs are copied, and which ways its rows may run): across the rows of a
block of ROW_BLOCK, one vector lane per row, or one row at a time in lanes; each phase's
per-row values, row-buffer values, output and reductions."""

from __future__ import annotations

import re
from typing import Callable

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.dtypes import is_float, numpy_dtype
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import COMBINE, Renderer, close_rows, reducer_identity

# accumulators per reduction in a long row's loop, and the vector that they fold into; rows
# shorter than ACROSS run ROW_BLOCK at a time, across the rows (from 128 columns, a row alone
# was faster at 128, 150, 180 and 255 columns; below it, slower at 64, 100 and 127). Since
# blocks move between rows and lanes by tiles (jd_lanes.h), a kernel with row buffers (a costly
# value per element: a softmax's exp) and an output of 4-byte values per element runs rows
# across up to ACROSS_BUFFERED columns: a softmax at 128-255 columns took 23-44 % less time
# so on one thread; a logsumexp (one value per row) 5-14 % more, so it keeps ACROSS
# (benchmarks/row_reductions.py, CHANGELOG.md 2026-12-07)
LANES, LANES_SHORT, ROW_BLOCK = 64, 16, 16
ACROSS, ACROSS_BUFFERED = 2 * LANES, 4 * LANES
# accumulators a row for a float max or min across the rows: a softmax's max over 16 to 127
# columns took 12-20 % less time with 4 than with 1 (a standalone C harness, one thread),
# rows of 3 columns 5 % more (CHANGELOG.md, 2026-12-06)
SPLIT = 4


# reducers for which combining a value a second time changes nothing
_IDEMPOTENT = ("max", "min", "and", "or")


def tiled(v: Value) -> bool:
    """Whether a value of the full shape moves between rows and lanes by whole tiles
    (jd_lanes.h: 4-byte values)."""
    return numpy_dtype(v.dtype).itemsize == 4


# the ops through which each row of a value is a row of their operand (the last dim stays
# last, of the same size): so a row of a chain of them is a contiguous run of the first value
VIEWS = ("broadcast_in_dim", "transpose", "reshape")


def row_view(v: Value, full: tuple, inputs: dict[int, str]) -> Value | None:
    """What `v`, of the kernel's full shape, views through a chain of VIEWS whose last dim is
    the last of `full` at every step (a broadcast along the rows, a transpose of the rows, a
    reshape of them), stopping at the kernel's inputs, or None: each row of `v` is then a
    contiguous run of that value (a reshape keeps the order of elements, and the others move
    whole rows)."""
    if len(v.shape) != len(full) or not all(
            symbolic.prove_eq(a, b) is True for a, b in zip(v.shape, full)):
        return None
    x = v
    while x.id not in inputs and x.producer is not None and x.producer.name in VIEWS:
        op, y = x.producer, x.producer.operands[0]
        if y.rank < 1 or symbolic.prove_eq(y.shape[-1], full[-1]) is not True or \
                op.name == "broadcast_in_dim" and \
                op.attrs["broadcast_dimensions"][-1] != x.rank - 1 or \
                op.name == "transpose" and op.attrs["permutation"][-1] != x.rank - 1:
            break
        x = y
    return x if x is not v else None


def _chained(op: Op) -> bool:
    """A reduction whose combine is a chain of dependent instructions (a float max or min)."""
    return op.attrs["reducer"] in ("max", "min") and is_float(op.results[0].dtype)


def column_index(w: CWriter, r: Renderer, col: str, cols_dims, dim) -> tuple[str, ...]:
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


class StitchLoops:
    """One stitch kernel's loops over a piece's rows, for one way of running them (across the
    rows of a block, or one row at a time); emit_stitch may write both."""

    def __init__(self, w: CWriter, r: Renderer, kernel: Kernel, level: dict[int, int],
                 rows_dims, cols_dims, dim, reduces: list[Op], cached: list[Value], lanes: int,
                 staged: list[Value], inputs: dict[int, str], out_tiled: bool):
        self.w, self.r, self.kernel, self.level = w, r, kernel, level
        self.rows_dims, self.cols_dims, self.dim = rows_dims, cols_dims, dim
        self.reduces, self.cached, self.lanes = reduces, cached, lanes
        self.buffers = {v.id: f"rowbuf{i}" for i, v in enumerate(cached)}
        self.staged = staged        # inputs copied column by column (across only)
        self.stage = {v.id: f"stage{i}" for i, v in enumerate(staged)}
        self.inputs = inputs        # the kernel's inputs' C names
        # across the rows, an output of 4-byte values is computed column by column into this
        # scratch, then moved into its rows by whole tiles (jd_lanes.h)
        self.out_lanes = "outlanes" if out_tiled else None

    def emit_rows(self, output: str, across: bool, wide: bool = False) -> None:
        """The loops over a piece's rows: across the rows of blocks, or one row at a time;
        `wide`: a row that runs alone has ACROSS columns or more (the kernel's short rows run
        across), so its loops may end in one whole vector that overlaps the one before it."""
        w, r, kernel, level = self.w, self.r, self.kernel, self.level
        # a column computed twice (the overlap) must read what it read the first time: no
        # output over an input (memory_plan.py gives stitch kernels none)
        assert not (wide and (across or kernel.writes_over))
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
        r.bool_ctype = "int32_t" if across else "uint8_t"
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
        fixed = fixed_values(kernel) if across else set()
        for p in range(max(n_phases, final + 1)):
            rows = _Rows(w, r, kernel, level, p, self.rows_dims, self.dim, arrays,
                         not across, row_buffers)
            if across:
                _keep_row_values(rows, kept, fixed)
            _hoist_reciprocals(rows)
            phase_reduces = [op for op in self.reduces if level.get(op.operands[0].id, 0) == p]
            phase_cached = [v for v in self.cached if level[v.id] == p]
            writes_out = not out_is_row and final == p
            if phase_reduces or phase_cached or writes_out:
                _emit_phase(rows, phase_reduces, acc_names, phase_cached, self.buffers,
                            (out, output) if writes_out else None, self.cols_dims,
                            self.lanes, across, wide, self.out_lanes if across else None)
        if out_is_row:
            rows.open(real=True)
            w(f"{output}[row] = {r.load(out, ())};")
            rows.close()
        r.staged = {}
        r.bool_ctype = "uint8_t"
        r.pop()
        close_rows(w)

    def _stage(self, rows: "_Rows") -> None:
        """The block's staged inputs, copied into scratch laid out column by column
        (`stage<k>[c * ROW_BLOCK + l]`): 4-byte values by whole 16 x 16 tiles
        (jd_to_lanes32: a staged input has the kernel's full shape, so row `row` is
        `n_cols` values from `row * n_cols`; a staged broadcast's row is the run of its
        input at the row's indices), others row by row (contiguous reads; a broadcast of a
        computed value is computed there)."""
        w, r = self.w, self.r
        by_tiles = self.staged_by_tiles()
        for v in by_tiles:
            w.open()
            w(f"const void *jd_rows[{ROW_BLOCK}];")
            if v.id in self.inputs:
                w(f"for (int64_t l = 0; l < {ROW_BLOCK}; l++) jd_rows[l] = "
                  f"{self.inputs[v.id]} + (rb + (l < nb ? l : nb - 1)) * n_cols;")
            else:       # a view of an input's rows (row_view)
                rows.open(hoist=False)
                x, sub = v, r.row_idx + ("0",)
                while x.id not in self.inputs:
                    op = x.producer
                    sub = (r.broadcast_operand_index if op.name == "broadcast_in_dim" else
                           r.transpose_operand_index if op.name == "transpose" else
                           r.reshape_operand_index)(op, x, sub)
                    x = op.operands[0]
                w(f"jd_rows[l] = {self.inputs[x.id]} + {r.linear(sub, x.shape)};")
                rows.close()
            w(f"jd_to_lanes32({self.stage[v.id]}, jd_rows, n_cols);")
            w.close()
        rest = [v for v in self.staged if v not in by_tiles]
        # a computed value of 4 bytes (a boolean staged as int32 too): each lane's row into
        # the block's rows (`rowstage`, a contiguous loop the C compiler vectorises), then into
        # the lanes by tiles; computed straight into the lanes, each vector was a gather
        for v in [v for v in rest if self.stage_bytes(v) == 4]:
            rows.open(hoist=False)
            w.open("for (int64_t c = 0; c < n_cols; c++)")
            r.push()
            idx = r.row_idx + column_index(w, r, "c", self.cols_dims, self.dim)
            w(f"(({self.stage_ctype(v)} *){ROW_STAGE})[l * n_cols + c] = {r.load(v, idx)};")
            r.pop()
            w.close()
            rows.close()
            w.open()
            w(f"const void *jd_rows[{ROW_BLOCK}];")
            w(f"for (int64_t l = 0; l < {ROW_BLOCK}; l++) jd_rows[l] = {ROW_STAGE} + l * n_cols;")
            w(f"jd_to_lanes32({self.stage[v.id]}, jd_rows, n_cols);")
            w.close()
        rest = [v for v in rest if self.stage_bytes(v) != 4]
        if rest:
            rows.open(hoist=False)
            w.open("for (int64_t c = 0; c < n_cols; c++)")
            r.push()
            idx = r.row_idx + column_index(w, r, "c", self.cols_dims, self.dim)
            for v in rest:
                w(f"{self.stage[v.id]}[c * {ROW_BLOCK} + l] = {r.load(v, idx)};")
            r.pop()
            w.close()
            rows.close()
        r.staged = dict(self.stage)

    @staticmethod
    def stage_ctype(v: Value) -> str:
        """The C type of `v`'s staged copy: a boolean's is a 4-byte 0 or 1, so that the loops
        that read it hold one type of lanes (with bytes, GCC 12 vectorised a masked softmax's
        loops in 4-lane halves of AVX2's 8: 1.7x the time, benchmarks/zoo_speed.py's linen
        Encoder)."""
        return "int32_t" if v.dtype == "i1" else ctype(v.dtype)

    def stage_bytes(self, v: Value) -> int:
        return 4 if v.dtype == "i1" else numpy_dtype(v.dtype).itemsize

    def row_staged(self) -> bool:
        """Whether some staged value is computed into the block's rows first (`rowstage`)."""
        return any(v not in self.staged_by_tiles() and self.stage_bytes(v) == 4
                   for v in self.staged)

    def staged_by_tiles(self) -> list[Value]:
        return [v for v in self.staged if tiled(v) and self._of_input(v)]

    def _of_input(self, v: Value) -> bool:
        """Whether the staged `v` is a kernel input or a view of one's rows (not of a value
        the kernel computes: row_view)."""
        x = v if v.id in self.inputs else row_view(v, v.shape, self.inputs)
        return x is not None and x.id in self.inputs


def fixed_values(kernel: Kernel) -> set[int]:
    """The kernel's constants, and what is computed from constants alone (not per row)."""
    fixed: set[int] = set()
    for op in kernel.ops:
        if op.name == "constant" or op.operands and op.name != "reduce" and all(
                x.id in fixed for x in op.operands):
            fixed.update(v.id for v in op.results)
    return fixed


def _keep_row_values(rows: "_Rows", kept: set[int], fixed: set[int]) -> None:
    """Across rows: the row values that phase p can compute (other than the `fixed` ones),
    once per row of the block into an array (`rv<k>_b[l]`), which the loops across the rows
    then read as vectors."""
    r, w = rows.r, rows.w
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
ROW_STAGE = "rowstage"     # the block's rows of a staged value computed before its lanes
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
                output: tuple[Value, str] | None, cols_dims, lanes: int, across: bool,
                wide: bool, out_lanes: str | None = None) -> None:
    """One phase over the block's columns: the row-buffer values, the output, then the
    reductions (reading row buffers where kept). One row at a time: a plain loop along the
    row for the first two, and the reductions in `lanes` lanes. Across the rows (`across`):
    column by column with a vector across the block's rows for the row buffers (laid out
    column by column) and the reductions (one accumulator per row), and the output row by
    row, so that it is written along the rows (one of 4-byte values, `out_lanes`: column by
    column into scratch, as the row buffers, then into its rows by 16 x 16 tiles).

    A row of ACROSS columns or more (`wide`) has no scalar remainder: its plain loop runs
    blocks of LANES_SHORT columns, the last one ending at the row's end (over columns the
    block before it computed already: the same values again), and its reductions' last 1 to
    LANES_SHORT - 1 columns are one such block, the columns already reduced masked with the
    reducer's identity (a sum's, a product's; a max's or min's need none). A softmax over rows
    of 150 columns took 14-16 % less time on one thread, rows of 339-766 columns 5-11 % (an
    exp of one value costs about what a vector's does: benchmarks/row_reductions.py)."""
    w, r, dim = rows.w, rows.r, rows.dim
    at = f"c * {ROW_BLOCK} + l" if across else "c"     # where row buffers are read
    if cached and across:
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        cidx = column_index(w, r, "c", cols_dims, dim)
        rows.open(hoist=False, auto=True)
        r.col, r.canon = at, r.row_idx + cidx
        for v in cached:
            w(f"{buffers[v.id]}[{at}] = {r.load(v, r.canon)};")
        rows.close()
        r.pop()
        w.close()
    if output is not None and out_lanes is not None:
        # across the rows: the output column by column, as the row buffers, into scratch,
        # then into its rows by whole tiles
        v, name = output
        w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        cidx = column_index(w, r, "c", cols_dims, dim)
        rows.open(hoist=False, auto=True)
        r.col, r.canon = at, r.row_idx + cidx
        w(f"{out_lanes}[{at}] = {r.load(v, r.canon)};")
        rows.close()
        r.pop()
        w.close()
        w.open()
        w(f"void *jd_rows[{ROW_BLOCK}];")
        w(f"for (int64_t l = 0; l < {ROW_BLOCK}; l++) jd_rows[l] = "
          f"{name} + (rb + (l < nb ? l : nb - 1)) * n_cols;")
        w(f"jd_from_lanes32(jd_rows, {out_lanes}, n_cols, nb);")
        w.close()
        output = None
    if (cached and not across) or output is not None:
        rows.open(hoist=not across, real=True)
        if wide:
            w.open(f"for (int64_t cs = 0; cs < n_cols; cs += {LANES_SHORT})")
            w(f"const int64_t cb = cs + {LANES_SHORT} <= n_cols ? cs : n_cols - {LANES_SHORT};")
            w.open(f"for (int64_t q = 0; q < {LANES_SHORT}; q++)")
            w("const int64_t c = cb + q;")
        else:
            w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        r.col, r.canon = at, None     # along the rows: inputs are read where they are
        idx = r.row_idx + column_index(w, r, "c", cols_dims, dim)
        if not across:
            for v in cached:
                w(f"{buffers[v.id]}_r[c] = {r.load(v, idx)};")
        if output is not None:
            v, name = output
            w(f"{name}[row * n_cols + c] = {r.load(v, idx)};")
        r.pop()
        close_rows(w)
        if wide:
            w.close()
        rows.close()
    for v in cached:
        r.cached[v.id] = buffers[v.id] + ("" if across else "_r")
    if not reduces:
        return

    def body(col: str, slot: Callable[[str], str], cidx: tuple | None = None,
             masked: str | None = None) -> None:
        r.push()
        r.col = at if across else col       # where row buffers are read
        idx = r.row_idx + (cidx if cidx is not None else
                           column_index(w, r, col, cols_dims, dim))
        r.canon = idx if across else None
        for op in reduces:
            acc, dt = slot(acc_names[op.results[0].id]), op.results[0].dtype
            val = r.load(op.operands[0], idx)
            if masked is not None and op.attrs["reducer"] not in _IDEMPOTENT:
                # a column reduced already: the identity instead (a max, min, and or or of it
                # again changes nothing, and GCC 12 does not vectorise that select in them)
                val = f"({masked} ? {reducer_identity(op.attrs['reducer'], dt)} : {val})"
            w(f"{acc} = {COMBINE[op.attrs['reducer']](acc, val, dt)};")
        r.pop()

    for op in reduces:
        w(f"{ctype(op.results[0].dtype)} {acc_names[op.results[0].id]}_b[{rows.size}];")
    if across:
        # column by column, one accumulator per row of the block: each row's values in order.
        # A float max or min (a NaN test and a signed-zero fix: a chain of several dependent
        # instructions a column) keeps SPLIT accumulators a row, for SPLIT columns at a time;
        # the last group repeats the last column, which changes no max or min
        split = SPLIT if all(_chained(op) for op in reduces) else 1
        for op in reduces:
            acc, dt = acc_names[op.results[0].id], op.results[0].dtype
            ident = reducer_identity(op.attrs['reducer'], dt)
            if split > 1:
                w(f"{ctype(dt)} {acc}_x[{split}][{ROW_BLOCK}];")
                w(f"for (int u = 0; u < {split}; u++) for (int l = 0; l < {ROW_BLOCK}; l++) "
                  f"{acc}_x[u][l] = {ident};")
            else:
                w(f"for (int l = 0; l < {ROW_BLOCK}; l++) {acc}_b[l] = {ident};")
        if split > 1:
            w.open(f"for (int64_t cs = 0; cs < n_cols; cs += {split})")
            w(f'_Pragma("GCC unroll {split}")')
            w.open(f"for (int u = 0; u < {split}; u++)")
            w("const int64_t c = cs + u < n_cols ? cs + u : n_cols - 1;")
        else:
            w.open("for (int64_t c = 0; c < n_cols; c++)")
        r.push()
        cidx = column_index(w, r, "c", cols_dims, dim)
        rows.open(hoist=False, auto=True)
        body("c", lambda acc: f"{acc}_x[u][l]" if split > 1 else f"{acc}_b[l]", cidx)
        rows.close()
        r.pop()
        close_rows(w)
        if split > 1:
            w.close()
            for op in reduces:
                acc, dt = acc_names[op.results[0].id], op.results[0].dtype
                combine = COMBINE[op.attrs["reducer"]]
                folded = [f"{acc}_x[{u}][l]" for u in range(split)]
                while len(folded) > 1:
                    folded = [combine(a, b, dt) for a, b in zip(folded[::2], folded[1::2])]
                w(f"for (int l = 0; l < {ROW_BLOCK}; l++) {acc}_b[l] = {folded[0]};")
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
        if wide and lanes > 1:     # the last columns: a block ending at the row's end
            w.open("if (c < n_cols)")
            w.open(f"for (int64_t q = 0; q < {LANES_SHORT}; q++)")
            w(f"const int64_t cc = n_cols - {LANES_SHORT} + q;")
            body("cc", lambda acc: f"{acc}_l[q]", masked="cc < c")
            w.close()
        else:
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
