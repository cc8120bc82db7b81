"""Loop nests for kernels: the renderer that writes values at C index expressions, the loops
over an index space, the parallel row loop of row-wise kernels, and the combining functions of
reductions. Every kernel emitter (kernels.py, stitch.py, reductions.py, sort.py, scatter.py,
bitcast.py, rng.py) builds on these."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.dtypes import is_complex, is_float, numpy_dtype
from jdisc.dynamic_passes.ir.ops import EXPENSIVE, SAME_INDEX
from jdisc.dynamic_passes.ir.program import Op, Value
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cdtype import HALF_FLOATS, ctype, literal
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.scalar_ops import arith, cast, render_scalar

# elements; below this a kernel runs on the calling thread (waking a sleeping worker of the pool
# costs tens of microseconds, more than a small kernel takes)
PARALLEL_MIN_WORK = 1 << 18
Index = tuple[str, ...]


@dataclasses.dataclass
class KernelContext:
    """What a kernel emitter gets: the writer, the kernel, the C names of the buffers it reads
    (by value id) and writes (in order), C for a symbolic dim, the dim pairs this version of
    the kernel may assume equal, a sort's comparator, and whether the kernel keeps its branches
    (JD_KEEP_BRANCHES, codegen.needs_branches: GCC does not if-convert its loops)."""
    w: CWriter
    kernel: Kernel
    inputs: dict[int, str]
    outputs: list[str]
    dim: Callable[[Dim], str]
    assume: frozenset = frozenset()
    less: str | None = None
    branches: bool = False

    @property
    def operands(self) -> list[str]:
        """The root op's operands' buffers, in order (library calls read them so)."""
        return [self.inputs[v.id] for v in self.kernel.root.operands]

    def unpack(self) -> tuple:
        return self.w, self.kernel, self.inputs, self.outputs, self.dim, self.assume


class Renderer:
    """Renders values at C index expressions into a loop body, with CSE per scope."""

    def __init__(self, w: CWriter, inputs: dict[int, str], dim: Callable[[Dim], str],
                 assume: frozenset = frozenset()):
        self.w = w
        self.assume = assume          # (operand dim, result dim) pairs this version assumes equal
        self.inputs = inputs          # value id -> C pointer name
        self.dim = dim                # symbolic dim -> C expression
        self.scopes: list[dict] = [{}]
        self.count = 0
        # stitch kernels: reduce results as row scalars, values computed once per row, and
        # values kept in a per-row buffer (read at column index `col`)
        self.accs: dict[int, str] = {}
        self.row_values: set[int] = set()
        self.row_idx: Index = ()
        self.row_dims: tuple = ()     # stitch kernels: the dims that `row` is the flat index of
        self.cached: dict[int, str] = {}
        self.col = "0"
        # stitch kernels across rows: inputs copied column by column (read at `col` when
        # loaded at the element's own index, `canon`)
        self.staged: dict[int, str] = {}
        self.canon: Index | None = None
        # the C type of boolean temporaries: stitch loops across rows hold them as 4-byte 0s
        # and 1s (stitch_loops.py), so that every lane of their vectors is 4 bytes wide
        self.bool_ctype = "uint8_t"
        self.recip: dict[int, str] = {}   # id(divide op) -> row-scope reciprocal of its divisor
        # per-dim index names -> (the flat index they were split from, the dims split over):
        # a load at those indices of a value with those trailing dims reads at the flat index
        self.flat: dict[tuple[str, ...], tuple[str, tuple]] = {}

    # scopes follow C blocks: a temp defined in an inner loop is not visible after it
    def push(self):
        self.scopes.append({})

    def pop(self):
        self.scopes.pop()

    def _lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def value_ctype(self, v: Value) -> str:
        """The C type of a temporary that holds `v`."""
        return self.bool_ctype if v.dtype == "i1" else ctype(v.dtype)

    def temp(self, key, c_type: str, expr: str) -> str:
        found = self._lookup(key)
        if found is not None:
            return found
        name = f"t{self.count}"
        self.count += 1
        self.w(f"const {c_type} {name} = {expr};")
        self.scopes[-1][key] = name
        return name

    def linear(self, idx: Index, shape: Sequence[Dim]) -> str:
        if not idx:
            return "0"
        k = len(self.row_dims)
        if 1 < k <= len(idx) and tuple(idx[:k]) == self.row_idx and all(
                symbolic.prove_eq(a, b) is True for a, b in zip(shape[:k], self.row_dims)):
            # at the row's own indices over the row dims: the flat row index, not a
            # multiply-add chain over indices that cost a division each to split from it
            if k == len(idx):
                return "row"
            return self.linear(("row",) + tuple(idx[k:]), (prod(shape[:k]),) + tuple(shape[k:]))
        for k in range(len(idx) - 1):      # trailing indices split from one flat index
            split = self.flat.get(tuple(idx[k:]))
            if split is not None and split[1] == tuple(shape[k:]):
                if k == 0:
                    return split[0]
                lead = self.linear(tuple(idx[:k]), shape[:k])
                return self.temp(("lin", idx, tuple(shape)), "int64_t",
                                 f"({lead}) * {self.dim(prod(shape[k:]))} + {split[0]}")
        expr = idx[0]
        for i, d in zip(idx[1:], shape[1:]):
            expr = f"({expr}) * {self.dim(d)} + {i}"
        if len(idx) == 1:
            return expr
        return self.temp(("lin", idx, tuple(shape)), "int64_t", expr)

    # -- values at an index -----------------------------------------------------------------
    def load(self, v: Value, idx: Index) -> str:
        if v.id in self.accs:
            return self.accs[v.id]
        if v.id in self.cached:
            return f"{self.cached[v.id]}[{self.col}]"
        if v.id in self.staged and idx == self.canon:
            return f"{self.staged[v.id]}[{self.col}]"
        if v.id in self.row_values:
            found = self._lookup((v.id, "row"))
            if found is not None:
                return found
            canon = self.row_idx + ("0",) * (v.rank - len(self.row_idx))
            name = self._render(v, canon)
            self.scopes[-1][(v.id, "row")] = name
            return name
        return self._render(v, idx)

    def _render(self, v: Value, idx: Index) -> str:
        """v at idx, rendered once per scope: a value that several consumers read at the same
        index (a DAG with shared subvalues) is looked up before its operands are visited, so
        rendering is linear in the kernel's size, not in the number of paths through it."""
        key = (v.id, idx)
        found = self._lookup(key)
        if found is None:
            found = self._render_new(v, idx)
            self.scopes[-1].setdefault(key, found)
        return found

    def _render_new(self, v: Value, idx: Index) -> str:
        if v.id in self.inputs:
            return self.temp((v.id, idx), self.value_ctype(v),
                             f"{self.inputs[v.id]}[{self.linear(idx, v.shape)}]")
        op = v.producer
        handler = getattr(self, "at_" + op.name, None)
        if handler is not None:
            return handler(op, v, idx)
        if op.name == "divide" and id(op) in self.recip:   # x / (per-row value): one divide per row
            x = self.load(op.operands[0], idx if op.operands[0].rank else ())
            return self.temp((v.id, idx), self.value_ctype(v), f"({x} * {self.recip[id(op)]})")
        if op.name == "divide" and v.dtype in ("f32", "f64"):
            inv = _exact_reciprocal(op.operands[1])
            if inv is not None:   # dividing by a power of two: multiplying is exact
                x = self.load(op.operands[0], idx if op.operands[0].rank else ())
                return self.temp((v.id, idx), self.value_ctype(v),
                                 f"({x} * {literal(inv, v.dtype)})")
        args = [self.load(x, idx if x.rank else ()) for x in op.operands]
        expr = render_scalar(op, args, [x.dtype for x in op.operands], v.dtype)
        return self.temp((v.id, idx), self.value_ctype(v), expr)

    def at_constant(self, op: Op, v: Value, idx: Index) -> str:
        return literal(op.attrs["value"].reshape(-1)[0], v.dtype)

    def at_iota(self, op: Op, v: Value, idx: Index) -> str:
        return cast(idx[op.attrs["iota_dimension"]], "i64", v.dtype)

    def at_dim_constant(self, op: Op, v: Value, idx: Index) -> str:
        vals = [cast(f"({self.dim(d)})", "i64", v.dtype) for d in op.attrs["values"]]
        if len(vals) == 1:
            return vals[0]
        return f"((const {ctype(v.dtype)}[]){{{', '.join(vals)}}})[{self.linear(idx, v.shape)}]"

    def at_broadcast_in_dim(self, op: Op, v: Value, idx: Index) -> str:
        return self.load(op.operands[0], self.broadcast_operand_index(op, v, idx))

    def broadcast_operand_index(self, op: Op, v: Value, idx: Index) -> Index:
        """The index of a broadcast_in_dim's operand that its result's `idx` reads."""
        x = op.operands[0]
        sub = []
        for j, d in enumerate(op.attrs["broadcast_dimensions"]):
            xd, od = x.shape[j], v.shape[d]
            if xd == 1 and od != 1:
                sub.append("0")
            elif symbolic.prove_eq(xd, od) or (xd, od) in self.assume:
                sub.append(idx[d])
            else:   # decided at run time: a size-1 operand dim is broadcast
                sub.append(f"({self.dim(xd)} == 1 ? 0 : {idx[d]})")
        return tuple(sub)

    def at_transpose(self, op: Op, v: Value, idx: Index) -> str:
        return self.load(op.operands[0], self.transpose_operand_index(op, v, idx))

    def transpose_operand_index(self, op: Op, v: Value, idx: Index) -> Index:
        """The index of a transpose's operand that its result's `idx` reads."""
        perm = op.attrs["permutation"]
        sub = [""] * len(perm)
        for k, p in enumerate(perm):
            sub[p] = idx[k]
        return tuple(sub)

    def at_slice(self, op: Op, v: Value, idx: Index) -> str:
        sub = []
        for i, s, st in zip(idx, op.attrs["start_indices"], op.attrs["strides"]):
            s_c, st_c = self.dim(s), self.dim(st)
            term = i if st == 1 else f"{i} * {st_c}"
            sub.append(term if s == 0 else f"({s_c} + {term})")
        return self.load(op.operands[0], tuple(sub))

    def at_reshape(self, op: Op, v: Value, idx: Index) -> str:
        """Dims are matched in groups of equal size; within a group the index is linearised
        over the result dims and split over the operand dims (no division for a group whose
        operand side is one dim: [B, S, 768] -> [B, S, 12, 64] costs one multiply-add)."""
        return self.load(op.operands[0], self.reshape_operand_index(op, v, idx))

    def reshape_operand_index(self, op: Op, v: Value, idx: Index) -> Index:
        """The index of a reshape's operand that its result's `idx` reads (at_reshape)."""
        x = op.operands[0]
        sub: list[str] = []
        for out_dims, in_dims in reshape_groups(v.shape, x.shape):
            lin = self.linear(tuple(idx[i] for i in out_dims), [v.shape[i] for i in out_dims])
            stride: Dim = 1
            parts = []
            first = next((j for j in in_dims if not _is_one(x.shape[j])), None)
            for j in reversed(in_dims):
                d = x.shape[j]
                q = lin if stride == 1 else f"({lin}) / {self.dim(stride)}"
                parts.append("0" if _is_one(d) else q if j == first else
                             f"(({q}) % {self.dim(d)})")
                stride = stride * d
            sub.extend(reversed(parts))
        return tuple(sub)


    # -- index-moving ops that may read nothing: rendered inside an `if` ----------------------
    def _guarded(self, v: Value, idx: Index, cond: str, fallback: str, read) -> str:
        """`cond ? read() : fallback`, where read() may only run (and load) when cond holds."""
        found = self._lookup((v.id, idx))
        if found is not None:
            return found
        name = f"t{self.count}"
        self.count += 1
        self.w(f"{ctype(v.dtype)} {name} = {fallback};")
        self.w.open(f"if ({cond})")
        self.push()
        self.w(f"{name} = {read()};")
        self.pop()
        self.w.close()
        self.scopes[-1][(v.id, idx)] = name
        return name

    def at_map(self, op: Op, v: Value, idx: Index) -> str:
        vals = [self.load(x, idx) for x in op.operands]
        (res,) = render_body(self.w, self, op.regions[0], vals)
        return res

    def at_reverse(self, op: Op, v: Value, idx: Index) -> str:
        dims = set(op.attrs["dimensions"])
        sub = tuple(f"({self.dim(d)} - 1 - {i})" if k in dims else i
                    for k, (i, d) in enumerate(zip(idx, v.shape)))
        return self.load(op.operands[0], sub)

    def at_pad(self, op: Op, v: Value, idx: Index) -> str:
        x, pad = op.operands
        conds, sub = [], []
        for k, (i, n, lo, it) in enumerate(zip(idx, x.shape, op.attrs["edge_padding_low"],
                                              op.attrs["interior_padding"])):
            step = it + 1 if isinstance(it, int) else self.dim(it + 1)
            cond, at = dilated_index(f"({i} - {self.dim(lo)})", step, self.dim(n))
            conds.append(cond)
            sub.append(at)
        cond = " && ".join(f"({c})" for c in conds) or "1"
        return self._guarded(v, idx, cond, self.load(pad, ()),
                             lambda: self.load(x, tuple(sub)))

    def _starts(self, op: Op, starts, sizes, shape) -> list[str]:
        """Start indices read from their scalar operands, clamped like StableHLO does."""
        out = []
        for s_val, size, n in zip(starts, sizes, shape):
            s = self.load(s_val, ())
            hi = self.dim(n - size)
            out.append(self.temp(("start", s_val.id, str(size)), "int64_t",
                                 f"jd_max(0, jd_min((int64_t)({s}), {hi}))"))
        return out

    def at_dynamic_slice(self, op: Op, v: Value, idx: Index) -> str:
        x = op.operands[0]
        starts = self._starts(op, op.operands[1:], op.attrs["slice_sizes"], x.shape)
        return self.load(x, tuple(f"({s} + {i})" for s, i in zip(starts, idx)))

    def at_dynamic_update_slice(self, op: Op, v: Value, idx: Index) -> str:
        x, u = op.operands[:2]
        starts = self._starts(op, op.operands[2:], u.shape, x.shape)
        rel = [f"({i} - {s})" for i, s in zip(idx, starts)]
        cond = " && ".join(f"({r} >= 0 && {r} < {self.dim(n)})" for r, n in zip(rel, u.shape))
        return self._guarded(v, idx, cond or "1", self.load(x, idx),
                             lambda: self.load(u, tuple(rel)))

    def at_gather(self, op: Op, v: Value, idx: Index) -> str:
        x, indices = op.operands[:2]
        dn = op.attrs["dimension_numbers"]
        sizes = op.attrs["slice_sizes"]
        ivd = dn["index_vector_dim"]
        batch_out = [i for i in range(v.rank) if i not in dn["offset_dims"]]
        batch_idx = [idx[i] for i in batch_out]
        def start(dim_k: int, where: tuple, s: str) -> str:   # clamped like XLA's gather
            return self.temp(("gstart", indices.id, where, dim_k), "int64_t",
                             f"jd_max(0, jd_min((int64_t)({s}), "
                             f"{self.dim(x.shape[dim_k] - sizes[dim_k])}))")
        full = operand_index(
            self, x.rank, indices, ivd, batch_idx, idx, dn["start_index_map"],
            zip(dn["operand_batching_dims"], dn["start_indices_batching_dims"]),
            set(dn["collapsed_slice_dims"]) | set(dn["operand_batching_dims"]),
            dn["offset_dims"], start)
        return self.load(x, tuple(full))


def operand_index(r: Renderer, rank: int, indices: Value, ivd: int, batch_idx: list[str],
                  idx: Index, index_map, batching, window_skipped: set, window_dims,
                  start) -> list[str]:
    """The operand index a gather reads (or a scatter writes) for one element: start indices
    read from `indices` at the element's batch position (its index vector along `ivd`), batching
    dims taken from the batch position, and the element's window offsets added."""
    full = ["0"] * rank
    for k, dim_k in enumerate(index_map):
        where = list(batch_idx)
        if ivd < indices.rank:
            where.insert(ivd, str(k))
        full[dim_k] = start(dim_k, tuple(where), r.load(indices, tuple(where)))
    index_dims = [d for d in range(indices.rank) if d != ivd]
    for operand_dim, indices_dim in batching:
        full[operand_dim] = batch_idx[index_dims.index(indices_dim)]
    window_operand_dims = [d for d in range(rank) if d not in window_skipped]
    for j, d in enumerate(window_operand_dims):
        o = idx[window_dims[j]]
        full[d] = o if full[d] == "0" else f"({full[d]} + {o})"
    return full


def _is_one(d: Dim) -> bool:
    return isinstance(d, int) and d == 1


def reshape_groups(out_shape, in_shape) -> list[tuple[list[int], list[int]]]:
    """Split two shapes into consecutive groups of provably equal element counts; size-1 dims
    join the group after them (or a last group of their own). When no finer split is
    provable, one group holds everything."""
    groups, i, j = [], 0, 0
    n_out, n_in = len(out_shape), len(in_shape)
    while i < n_out or j < n_in:
        oi, ij = [], []
        while i < n_out and _is_one(out_shape[i]):
            oi.append(i)
            i += 1
        while j < n_in and _is_one(in_shape[j]):
            ij.append(j)
            j += 1
        if i == n_out and j == n_in:    # size-1 dims at the end
            groups.append((oi, ij))
            break
        if i == n_out or j == n_in:     # cannot match: one group over everything
            return [(list(range(n_out)), list(range(n_in)))]
        po: Dim = out_shape[i]
        pi: Dim = in_shape[j]
        oi.append(i)
        ij.append(j)
        i, j = i + 1, j + 1
        while symbolic.prove_eq(po, pi) is not True:
            grow_out = i < n_out and (j >= n_in or symbolic.prove_le(po, pi) is True)
            if grow_out:
                oi.append(i)
                po = po * out_shape[i]
                i += 1
            elif j < n_in:
                ij.append(j)
                pi = pi * in_shape[j]
                j += 1
            else:   # cannot match: fall back to one group over everything
                return [(list(range(n_out)), list(range(n_in)))]
        groups.append((oi, ij))
    return groups


def dilated_index(p: str, step, n: str) -> tuple[str, str]:
    """Position p on an axis of n elements spread `step` apart (dilation, interior padding):
    the C condition that p hits an element, and that element's index."""
    if step == 1:
        return f"{p} >= 0 && {p} < {n}", p
    return f"{p} >= 0 && {p} % {step} == 0 && {p} / {step} < {n}", f"({p} / {step})"


def _exact_reciprocal(v: Value):
    """1/c when v is a splat float constant c that is a power of two (so x/c == x*(1/c))."""
    op = v.producer
    while op is not None and op.name == "broadcast_in_dim":
        op = op.operands[0].producer
    if op is None or op.name != "constant" or op.attrs["value"].size == 0:
        return None
    arr = op.attrs["value"].reshape(-1)
    c = float(arr[0])
    if not (arr == arr[0]).all() or c == 0 or not math.isfinite(c):
        return None
    mantissa, _ = math.frexp(abs(c))
    return 1.0 / c if mantissa == 0.5 else None


def loop_nest(w: CWriter, shape: Sequence[Dim], dim, prefix: str = "i", start: int = 0,
              keep_inner: bool = False):
    """Opens `for` loops over `shape`; returns the index names and a closer.

    `keep_inner`: an innermost loop of a constant extent under a loop of a dynamic one stays a
    loop (`#pragma GCC unroll 1`). GCC otherwise unrolls it whole, then vectorises the loop
    around it, each vector lane a strided load per unrolled step: a zoo model's concat of two
    [B, S, 8] halves (one gathered) took 0.6 s to compile, 35 ms with the loop kept, which
    GCC vectorises along the contiguous axis or turns into a memcpy."""
    names = []
    for k, d in enumerate(shape):
        name = f"{prefix}{start + k}"
        names.append(name)
        if keep_inner and k == len(shape) - 1 and isinstance(d, int) and \
                any(not isinstance(e, int) for e in shape[:k]):
            w("#pragma GCC unroll 1")
        w.open(f"for (int64_t {name} = 0; {name} < {dim(d)}; {name}++)")

    def close():
        for _ in shape:
            w.close()
    return tuple(names), close


COMBINE = {
    "add": lambda a, b, t: arith("+", a, b, t),
    "mul": lambda a, b, t: arith("*", a, b, t),
    "max": lambda a, b, t: (f"jd_fmax_{t}({a}, {b})" if is_float(t) else
                            f"jd_cmax_{t}({a}, {b})" if is_complex(t) else
                            f"({b} > {a} ? {b} : {a})"),
    "min": lambda a, b, t: (f"jd_fmin_{t}({a}, {b})" if is_float(t) else
                            f"jd_cmin_{t}({a}, {b})" if is_complex(t) else
                            f"({b} < {a} ? {b} : {a})"),
    "and": lambda a, b, t: f"{a} & {b}",
    "or": lambda a, b, t: f"{a} | {b}",
    "xor": lambda a, b, t: f"{a} ^ {b}",
}


def reducer_identity(reducer: str, dtype: str) -> str:
    """The C literal e with reducer(e, x) == x for every x: what extra accumulators (lanes)
    start from, so that the reduction's init value is applied once per result, as XLA does."""
    if is_complex(dtype):
        value = {"add": complex(-0.0, -0.0), "mul": complex(1.0, 0.0),
                 "max": complex(-math.inf, -math.inf), "min": complex(math.inf, math.inf)}[reducer]
    elif is_float(dtype):
        value = {"add": -0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}[reducer]
    elif dtype == "i1":
        value = {"add": 0, "or": 0, "xor": 0, "max": 0, "and": 1, "mul": 1, "min": 1}[reducer]
    else:
        info = np.iinfo(numpy_dtype(dtype))
        value = {"add": 0, "or": 0, "xor": 0, "mul": 1, "max": info.min, "min": info.max,
                 "and": -1 if info.min < 0 else info.max}[reducer]
    return literal(value, dtype)


# the ops table's expensive ops that take tens of instructions an element (a polynomial):
# all but a division or a square root, which are one instruction
_TRANSCENDENTAL = EXPENSIVE - {"divide", "remainder", "sqrt", "rsqrt"}


def parallel_min_work(kernel: Kernel) -> int:
    """Elements from which a kernel's rows run on the pool: PARALLEL_MIN_WORK, a quarter of
    it for a kernel with a transcendental op (a softmax's exp costs several loads' time), and
    less again for one with many f16/bf16 ops (each computes in f32 and rounds: jmp's bf16
    GELU, a tanh and 11 rounded ops, took 4.4 ns an element on one thread, and ran alone
    below 65536 elements)."""
    half_ops = sum(1 for op in kernel.ops if op.name in SAME_INDEX and op.name != "convert"
                   and any(v.dtype in HALF_FLOATS for v in op.results))
    weight = (4 if any(op.name in _TRANSCENDENTAL for op in kernel.ops) else 1) + half_ops
    return PARALLEL_MIN_WORK // min(weight, 16)


# A loop kernel that reads an input across its rows (a transpose that moves the last dim)
# touches one input line per column along a row, and the next row reads the same lines: they
# must stay in L1 (32 KB, 8 ways of 64-byte lines on the machines measured). Where a row's
# lines do not fit, or meet in a few sets (lines 2 KB apart fall in 2 of the 64 sets, 16
# lines at most; a [97, 4096] matrix's transpose reads lines 16 KB apart, all in one set),
# the rows run in tiles of TILE_ROWS rows by as many columns as those sets hold, at most
# TILE_COLS. Plain rows took 6.4-6.7x the tiles' time for `x.T` at [97, 4096], 1.7-2.3x at
# [1000, 1000], 1.3-2x for [2, 1000, 33] with an op fused (benchmarks/transposes.py); where
# the lines fit, one tile is the whole row, its loop the plain one, in a parallel loop of its
# own (beside the tiled loop in one function, it ran 1.3-1.8x slower at 8 x 100 x 100). 64
# rows were the fastest of 8 to 128 in a standalone C harness (CHANGELOG.md, 2026-12-06).
# Lines spread over all the sets stay plain up to ROW_LINES a row, past L1's 512: the plain
# rows ran 1.45-1.5x faster than tiles at 513-600 lines and no slower at 450-625.
TILE_ROWS, TILE_COLS, ROW_LINES = 64, 32, 640


def tile_cols(stride_bytes: list[str]) -> list[str]:
    """C declaring `tw`, the column tile's width (the whole row where its lines stay in L1),
    given C for the byte strides at which the kernel reads its transposed inputs along a
    row."""
    out, fit = [], ""
    for i, b in enumerate(stride_bytes):
        # lines at a stride of s bytes fall in 64 / gcd(64, s / 64) of the 64 sets, 8 ways
        # each; when s is not a whole number of lines or an odd one, in all of them: there
        # the plain rows beat the tiles up to ROW_LINES lines, more than L1 holds
        out += [f"const int64_t jd_s{i} = {b}, jd_q{i} = jd_s{i} / 64 % 64;",
                f"const int64_t jd_fit{i} = jd_s{i} % 64 || jd_q{i} % 2 ? {ROW_LINES} : "
                f"8 * 64 / (jd_q{i} ? jd_q{i} & -jd_q{i} : 64);"]
        fit = f"jd_fit{i}" if not fit else f"({fit} < jd_fit{i} ? {fit} : jd_fit{i})"
    return out + [f"const int64_t jd_fit = {fit};",
                  f"const int64_t tw = n_cols <= jd_fit ? (n_cols > 0 ? n_cols : 1) : "
                  f"jd_fit < {TILE_COLS} ? jd_fit : {TILE_COLS};"]


def open_rows(w: CWriter, r: Renderer, rows_dims, cols: str, dim,
              min_work: int = PARALLEL_MIN_WORK) -> tuple[str, ...]:
    """A parallel loop over the flattened row index (on the pool from `min_work` elements);
    binds i0..i{k-1} inside it."""
    open_pieces(w, rows_dims, cols, dim, min_work)
    return open_row_loop(w, rows_dims, dim)


def open_pieces(w: CWriter, rows_dims, cols: str, dim, min_work: int = PARALLEL_MIN_WORK,
                shares: tuple = (), declare: bool = True):
    """n_rows and n_cols (`declare`: else the caller declared them), and the parallel region
    over the rows (its pieces: jd_lo..jd_hi), whose pieces also read the locals `shares`."""
    if declare:
        w(f"const int64_t n_rows = {dim(prod(rows_dims))}, n_cols = {cols};")
    w.parallel("n_rows", f"n_rows > 1 && n_rows * n_cols >= {min_work}",
               [("int64_t", "n_rows", dim(prod(rows_dims))), ("int64_t", "n_cols", cols),
                *shares])


def open_row_loop(w: CWriter, rows_dims, dim) -> tuple[str, ...]:
    """The piece's rows one by one (close_rows closes it); binds i0..i{k-1}."""
    w.open("for (int64_t row = jd_lo; row < jd_hi; row++)")
    return _row_indices(w, rows_dims, dim, "row", "const int64_t {0} = {1};")


def open_row_tiles(w: CWriter, rows_dims, dim) -> tuple[str, ...]:
    """The piece's rows in tiles of TILE_ROWS rows by `tw` columns (tile_cols declares it);
    the column loop inside is `for (c = cb; c < ce; c++)`; the caller closes the three
    loops. Binds i0..i{k-1}."""
    w.open(f"for (int64_t rb = jd_lo; rb < jd_hi; rb += {TILE_ROWS})")
    w(f"const int64_t re = jd_hi - rb < {TILE_ROWS} ? jd_hi : rb + {TILE_ROWS};")
    # a tile's rows' indices, split once per row (a division each), not once per column tile
    many = len(rows_dims) > 1
    if many:
        w(f"int64_t {', '.join(f'jd_i{k}[{TILE_ROWS}]' for k in range(len(rows_dims)))};")
        with w.block("for (int64_t row = rb; row < re; row++)"):
            _row_indices(w, rows_dims, dim, "row", "jd_{0}[row - rb] = {1};")
    w.open("for (int64_t cb = 0; cb < n_cols; cb += tw)")
    w("const int64_t ce = n_cols - cb < tw ? n_cols : cb + tw;")
    w.open("for (int64_t row = rb; row < re; row++)")
    names = tuple(f"i{k}" for k in range(len(rows_dims)))
    for name in names:
        w(f"const int64_t {name} = {f'jd_{name}[row - rb]' if many else 'row'};")
    return names


def _row_indices(w: CWriter, rows_dims, dim, flat: str, line: str) -> tuple[str, ...]:
    """i0..i{k-1}, the indices of the flat row index `flat` over rows_dims, each written as
    `line` formatted with its name and its C expression."""
    names, rest = [], flat
    for k in range(len(rows_dims) - 1, -1, -1):
        names.append(f"i{k}")
        if k == 0:
            w(line.format("i0", rest))
        else:
            d = dim(rows_dims[k])
            w(line.format(f"i{k}", f"{rest} % {d}"))
            rest = f"({rest} / {d})"
    return tuple(reversed(names))


def close_rows(w: CWriter) -> None:
    w.close()


def parallel_loop_nest(w: CWriter, shape: Sequence[Dim], dim, prefix: str = "i",
                       shares: Sequence[tuple[str, ...]] = ()):
    """`loop_nest` whose outermost loop runs in pieces on the pool when the nest is large
    (`shares`: the locals its body reads, as for CWriter.parallel)."""
    if not shape:
        return loop_nest(w, shape, dim, prefix)
    first = dim(shape[0])
    w.parallel(first, f"{first} > 1 && {dim(prod(shape))} >= 4096", shares)
    w.open(f"for (int64_t {prefix}0 = jd_lo; {prefix}0 < jd_hi; {prefix}0++)")
    names, close_inner = loop_nest(w, shape[1:], dim, prefix, start=1)

    def close():
        close_inner()
        w.close()
    return (f"{prefix}0",) + names, close


def render_body(w: CWriter, r: Renderer, block, args: list[str]) -> list[str]:
    """A scalar region (a reduction's body) rendered on C expressions; returns its results."""
    env = {p.id: a for p, a in zip(block.params, args)}

    def arg(v: Value) -> str:
        if v.id in env:
            return env[v.id]
        if v.producer is not None and v.producer.name == "constant":   # captured from outside
            return literal(v.producer.attrs["value"].reshape(-1)[0], v.dtype)
        raise UnsupportedOpError(f"a region captures the non-constant value %{v.id}")

    for op in block.ops:
        res = op.results[0]
        if op.name == "constant":
            env[res.id] = literal(op.attrs["value"].reshape(-1)[0], res.dtype)
            continue
        if op.name in ("broadcast_in_dim", "reshape"):   # of a scalar, in a scalar region
            env[res.id] = arg(op.operands[0])
            continue
        expr = render_scalar(op, [arg(v) for v in op.operands],
                             [v.dtype for v in op.operands], res.dtype)
        name = f"t{r.count}"
        r.count += 1
        w(f"const {ctype(res.dtype)} {name} = {expr};")
        env[res.id] = name
    return [arg(v) for v in block.results]
