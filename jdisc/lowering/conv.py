"""stablehlo.convolution in NHWC / HWIO / NHWC: a direct scheme, or im2col + GEMM.

Direct (f32/f64 with a static kernel shape, the usual CNN case): output rows (an image and
all its output positions but the innermost) run in parallel. Along a row, a block of `P`
positions times `F` output features accumulates in registers: for each kernel tap and input
feature, `P` input values times one row of `F` weights (the `F` loop is `omp simd`; the
multiply-adds are fused where the target has a fast fma); the few positions left past a row's
last whole block run one at a time, all features at once. Taps outside the input (padding,
dilation holes) are skipped for the outer spatial dims and read zeros for the innermost one;
a block whose innermost taps are all inside reads them as one contiguous run of input.

im2col + GEMM (other dtypes, kernel shapes with symbolic dims, no spatial dims): for each image
and feature group, chunks of output positions are unrolled into a matrix of input windows (rows:
output positions, columns: kernel positions x input features), which a GEMM multiplies with the
group's kernel matrix straight into the output.

Both schemes sum each output's products in the same order (kernel positions outermost first,
then input features). Padding, strides, input (lhs) and kernel (rhs) dilation and window
reversal are index arithmetic; positions outside the input read 0.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.program import Op
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.blas import BLAS_GEMM
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext, dilated_index

CHUNK = 2048  # im2col: output positions unrolled at a time (bounds the im2col buffer)
# direct: accumulators per block, in vector registers of 64 bytes (16 f32): 12 of the 32 an
# AVX-512 core has (6 positions x 32 features), leaving room for weights and broadcast inputs.
# Blocks of 4..8 positions x 16..64 features measured within noise of each other on W4.
BLOCK_VECTORS = 12
MAX_POSITIONS = 8
# a row's positions past its last whole block: up to TAIL_MAX run one at a time (a block of one
# position took a fifth to a quarter of a whole block's time in W4's second convolution), 4 or
# 5 in one more block (1.05-1.25x faster than one at a time there: benchmarks/kernel_times.py)
TAIL_MAX = 3
# multiply-adds below which a convolution runs on one thread (waking threads costs more)
PARALLEL_MIN_MACS = 1 << 22


def direct_blocks(op: Op) -> tuple[int, int] | None:
    """(positions P, features F) per block of the direct scheme, or None where it does not
    apply (then im2col + GEMM)."""
    x, k = op.operands
    out = op.results[0]
    if x.rank < 3 or not x.dtype == k.dtype == out.dtype or out.dtype not in ("f32", "f64"):
        return None
    if not all(isinstance(d, int) for d in k.shape):
        return None
    lanes = 16 if out.dtype == "f32" else 8
    cout_g = k.shape[-1] // op.attrs.get("feature_group_count", 1)
    features = max(1, min(cout_g, 2 * lanes))
    vectors = -(-features // lanes)
    return max(1, min(MAX_POSITIONS, BLOCK_VECTORS // vectors)), features


def emit_conv(ctx: KernelContext) -> None:
    w, kernel, inputs, output, dim = ctx.w, ctx.kernel, ctx.operands, ctx.outputs[0], ctx.dim
    op = kernel.root
    x, out = op.operands[0], op.results[0]
    if out.dtype in ("f16", "bf16") or x.dtype in ("f16", "bf16"):
        raise UnsupportedOpError(f"stablehlo.convolution on {out.dtype} at {op.loc}")
    blocks = direct_blocks(op)
    if blocks is not None:
        _emit_direct(w, op, inputs, output, dim, *blocks)
    else:
        _emit_im2col(w, op, inputs, output, dim)


# --------------------------------------------------------------------------------- direct

@dataclasses.dataclass(frozen=True)
class _Direct:
    """The static facts of a direct convolution, for rendering its C."""
    op: Op
    t: str                      # C element type
    npos: int                   # positions per block (along the innermost spatial dim)
    nfeat: int                  # output features per block
    ksz: tuple[int, ...]        # kernel spatial sizes
    cin: int
    cin_g: int
    cout: int
    cout_g: int
    groups: int
    dim: Callable[[Dim], str]   # C for a symbolic dimension (padding may be one)

    @property
    def last(self) -> int:
        return len(self.ksz) - 1

    def attr(self, name: str, i: int):
        a = self.op.attrs
        if name == "lo":
            return a["padding"][2 * i]
        if name == "reversed":
            return bool((a.get("window_reversal") or (False,) * len(self.ksz))[i])
        return a[name][i]

    def position(self, i: int, o: str, tap: str) -> str:
        """The input position (in lhs-dilated coordinates) output `o` reads at kernel tap
        `tap` of spatial dim i."""
        kpos = f"({self.ksz[i] - 1} - {tap})" if self.attr("reversed", i) else tap
        return _affine(o, self.attr("window_strides", i), kpos,
                       self.attr("rhs_dilation", i), self.attr("lo", i), self.dim)

    def contiguous(self) -> bool:
        """The innermost taps of a position are consecutive input elements."""
        i = self.last
        return (self.attr("lhs_dilation", i) == 1 and self.attr("rhs_dilation", i) == 1
                and not self.attr("reversed", i))


def _affine(o: str, stride: int, tap: str, dilation: int, lo: Dim,
            dim: Callable[[Dim], str]) -> str:
    """C for o * stride + tap * dilation - lo, without the factors of 1 and terms of 0. The low
    padding `lo` may be symbolic (SAME padding of a dynamic dim), of either sign."""
    expr = f"{o} * {stride}" if stride != 1 else o
    if tap != "0":
        expr += f" + {tap} * {dilation}" if dilation != 1 else f" + {tap}"
    if not isinstance(lo, int):
        expr += f" - {dim(lo)}"
    elif lo:
        expr += f" - {lo}" if lo > 0 else f" + {-lo}"
    return f"({expr})"


def _plus(expr: str, term: str, factor: int) -> str:
    """expr + term * factor, leaving out a zero term."""
    return expr if term == "0" else f"{expr} + {term} * {factor}"


def _emit_direct(w: CWriter, op: Op, inputs: list[str], output: str, dim, npos: int,
                 nfeat: int) -> None:
    x, k = op.operands
    out = op.results[0]
    ns = x.rank - 2
    groups = op.attrs.get("feature_group_count", 1)
    cin_g, cout = k.shape[ns], k.shape[-1]
    d = _Direct(op, ctype(out.dtype), npos, nfeat, tuple(k.shape[:ns]), cin_g * groups, cin_g,
                cout, cout // groups, groups, dim)
    last = d.last
    w(f"/* direct convolution: blocks of {npos} positions x {nfeat} features */")
    w(f"const int64_t batch = {dim(x.shape[0])};")
    for i in range(ns):
        w(f"const int64_t isz{i} = {dim(x.shape[1 + i])}, osz{i} = {dim(out.shape[1 + i])};")
    sizes = " * ".join(["batch"] + [f"osz{i}" for i in range(ns)])
    w(f"if ({sizes} == 0) return 0;")
    if cin_g == 0 or 0 in d.ksz or cout == 0:
        w(f"for (int64_t e = 0; e < {sizes} * {cout}; e++) {output}[e] = 0;")
        w("return 0;")
        return
    outer = " * ".join(["batch"] + [f"osz{i}" for i in range(last)])
    w(f"/* in parallel: rows of output positions ({outer} of them) */")
    w.parallel(outer, f"{outer} > 1 && {sizes} * {cout * cin_g * prod(d.ksz)} >= "
               f"{PARALLEL_MIN_MACS}",
               [("int64_t", "batch", dim(x.shape[0]))]
               + [("int64_t", f"isz{i}", dim(x.shape[1 + i])) for i in range(ns)]
               + [("int64_t", f"osz{i}", dim(out.shape[1 + i])) for i in range(ns)])
    w.open("for (int64_t row = jd_lo; row < jd_hi; row++)")
    w(f"static const {d.t} zeros[{cin_g}];   /* read for taps outside the input */")
    rest = "row"
    for i in reversed(range(last)):
        w(f"const int64_t o{i} = {rest} % osz{i};")
        rest = f"{rest} / osz{i}"
    w(f"const int64_t b = {rest};")
    w(f"{d.t} *restrict orow = {output} + row * osz{last} * {cout};")
    group = "0"
    if groups > 1:
        w.open(f"for (int64_t g = 0; g < {groups}; g++)")
        group = "g"
    if npos > 1:
        w(f"/* whole blocks; up to {TAIL_MAX} positions left over run one at a time, more in")
        w("   one more block (past the last position it computes, but does not store) */")
        w(f"const int64_t left = osz{last} % {npos};")
        w(f"const int64_t tail = left && left <= {TAIL_MAX} ? osz{last} - left : osz{last};")
    else:
        w(f"const int64_t tail = osz{last};")
    with w.block(f"for (int64_t ob = 0; ob < tail; ob += {npos})"):
        if d.contiguous():
            first = d.position(last, "ob", "0")
            end = d.position(last, f"(ob + {npos - 1})", str(d.ksz[last] - 1))
            w("/* all the block's innermost taps inside the input: read as one run */")
            w(f"const int inner = {first} >= 0 && {end} < isz{last};")
        _emit_feature_blocks(w, d, inputs, nfeat, group, npos)
    if npos > 1:
        with w.block(f"for (int64_t ob = tail; ob < osz{last}; ob++)"):
            w("const int64_t f0 = 0;   /* one position: every feature at once */")
            _emit_block(w, d, inputs, d.cout_g, group, 1)
    if groups > 1:
        w.close()
    w.close()
    w("return 0;")


def _emit_feature_blocks(w: CWriter, d: _Direct, inputs: list[str], nfeat: int, group: str,
                         npos: int) -> None:
    """Blocks of `npos` positions from ob by `nfeat` features, the last one narrower."""
    full = d.cout_g - d.cout_g % nfeat
    if full:
        with w.block(f"for (int64_t f0 = 0; f0 < {full}; f0 += {nfeat})"):
            _emit_block(w, d, inputs, nfeat, group, npos)
    if d.cout_g % nfeat:
        w("/* the last, narrower block of features */")
        with w.block(f"for (int64_t f0 = {full}; f0 < {d.cout_g}; f0 += {nfeat})"):
            _emit_block(w, d, inputs, d.cout_g % nfeat, group, npos)


def _simd(w: CWriter, nfeat: int, body: str) -> None:
    w.omp("simd")
    w(f"for (int j = 0; j < {nfeat}; j++)")
    w(f"  {body}")


def _emit_block(w: CWriter, d: _Direct, inputs: list[str], nfeat: int, group: str,
                npos: int) -> None:
    """One block: acc[p][j] for positions ob + p and features f0 + j of group `group`,
    summed over kernel taps (outermost dim first) and input features. A block of one
    position (a row's last few) reads its taps through pointers alone, without the path for
    a run of input (`inner`)."""
    xin, kin = inputs
    last = d.last
    fma = f"jd_fma_{d.op.results[0].dtype}"
    w(f"{d.t} acc[{npos}][{nfeat}];")
    with w.block(f"for (int p = 0; p < {npos}; p++)"):
        _simd(w, nfeat, "acc[p][j] = 0;")
    xrow, tap = "b", ""
    for i in range(last):   # outer kernel taps: skipped when outside the input
        w.open(f"for (int64_t w{i} = 0; w{i} < {d.ksz[i]}; w{i}++)")
        w(f"const int64_t y{i} = {d.position(i, f'o{i}', f'w{i}')};")
        cond, at = dilated_index(f"y{i}", d.attr("lhs_dilation", i), f"isz{i}")
        w(f"if (!({cond})) continue;")
        xrow = f"({xrow} * isz{i} + {at})"
        tap = f"({tap} * {d.ksz[i]} + w{i})" if tap else f"w{i}"
    w(f"const {d.t} *xrow = {_plus(f'{xin} + {xrow} * isz{last} * {d.cin}', group, d.cin_g)};")
    base = _plus(f"{kin} + {tap} * {d.ksz[last] * d.cin_g * d.cout}" if tap else kin,
                 group, d.cout_g)
    w(f"const {d.t} *wtap = {base} + f0;")
    cout, step = d.cout, d.attr("window_strides", last) * d.cin
    if d.contiguous() and npos > 1:
        w.open("if (inner)")
        w(f"const {d.t} *xb = xrow + {d.position(last, 'ob', '0')} * {d.cin};")
        if d.groups == 1:   # taps x features are consecutive in input and in weights
            with w.block(f"for (int64_t q = 0; q < {d.ksz[last] * d.cin}; q++)"):
                with w.block(f"for (int p = 0; p < {npos}; p++)"):
                    w(f"const {d.t} xv = xb[p * {step} + q];")
                    _simd(w, nfeat, f"acc[p][j] = {fma}(xv, wtap[q * {cout} + j], acc[p][j]);")
        else:
            with w.block(f"for (int64_t w{last} = 0; w{last} < {d.ksz[last]}; w{last}++)"):
                with w.block(f"for (int64_t c = 0; c < {d.cin_g}; c++)"):
                    with w.block(f"for (int p = 0; p < {npos}; p++)"):
                        w(f"const {d.t} xv = xb[p * {step} + w{last} * {d.cin} + c];")
                        _simd(w, nfeat, f"acc[p][j] = {fma}(xv, wtap[(w{last} * {d.cin_g} + c) "
                                        f"* {cout} + j], acc[p][j]);")
        w.else_()
    else:
        w.open()
    with w.block(f"for (int64_t w{last} = 0; w{last} < {d.ksz[last]}; w{last}++)"):
        w(f"const {d.t} *xp[{npos}];   /* each position's input features at this tap */")
        with w.block(f"for (int p = 0; p < {npos}; p++)"):
            w(f"const int64_t y{last} = {d.position(last, '(ob + p)', f'w{last}')};")
            cond, at = dilated_index(f"y{last}", d.attr("lhs_dilation", last), f"isz{last}")
            w(f"xp[p] = ob + p < osz{last} && {cond} ? xrow + {at} * {d.cin} : zeros;")
        with w.block(f"for (int64_t c = 0; c < {d.cin_g}; c++)"):
            with w.block(f"for (int p = 0; p < {npos}; p++)"):
                w(f"const {d.t} xv = xp[p][c];")
                _simd(w, nfeat, f"acc[p][j] = {fma}(xv, wtap[(w{last} * {d.cin_g} + c) * {cout} "
                                f"+ j], acc[p][j]);")
    w.close()
    for _ in range(last):
        w.close()
    with w.block(f"for (int p = 0; p < {npos} && ob + p < osz{last}; p++)"):
        _simd(w, nfeat, f"orow[{_plus(f'(ob + p) * {cout}', group, d.cout_g)} + f0 + j] = "
                        f"acc[p][j];")


# --------------------------------------------------------------------------------- im2col

def _emit_im2col(w: CWriter, op: Op, inputs: list[str], output: str, dim) -> None:
    x, k = op.operands
    out = op.results[0]
    a = op.attrs
    ns = x.rank - 2
    groups = a.get("feature_group_count", 1)
    reversal = a.get("window_reversal") or (False,) * ns
    t, tx = ctype(out.dtype), ctype(x.dtype)
    xin, kin = inputs
    w(f"const int64_t batch = {dim(x.shape[0])}, cin = {dim(x.shape[-1])}, "
      f"cout = {dim(k.shape[-1])};")
    w(f"const int64_t cin_g = cin / {groups}, cout_g = cout / {groups};")
    w(f"const int64_t npos = {dim(prod(out.shape[1:-1]))}, "
      f"kk = {dim(prod(k.shape[:-2]))} * cin_g;")
    for i in range(ns):
        w(f"const int64_t isz{i} = {dim(x.shape[1 + i])}, ksz{i} = {dim(k.shape[i])}, "
          f"osz{i} = {dim(out.shape[1 + i])};")
    w("if (batch == 0 || npos == 0 || cout == 0) return 0;")
    with w.block("if (kk == 0)"):
        w(f"for (int64_t i = 0; i < batch * npos * cout; i++) {output}[i] = 0;")
        w("return 0;")
    w(f"{tx} *col = ({tx} *)malloc(sizeof({tx}) * (size_t)({CHUNK} * kk) + 1);")
    w("if (!col) return 1;")
    with w.block("for (int64_t b = 0; b < batch; b++)"):
        with w.block(f"for (int64_t g = 0; g < {groups}; g++)"):
            with w.block(f"for (int64_t p0 = 0; p0 < npos; p0 += {CHUNK})"):
                w(f"const int64_t rows = npos - p0 < {CHUNK} ? npos - p0 : {CHUNK};")
                with w.block("for (int64_t r = 0; r < rows; r++)"):
                    w("int64_t rest = p0 + r;")
                    for i in range(ns - 1, -1, -1):
                        w(f"const int64_t o{i} = rest % osz{i}; rest /= osz{i};")
                    w(f"{tx} *crow = col + r * kk;")
                    w("int64_t q = 0;")
                    for i in range(ns):   # kernel positions, outermost first (HWIO order)
                        w.open(f"for (int64_t w{i} = 0; w{i} < ksz{i}; w{i}++)")
                    conds, idx = [], []
                    for i in range(ns):
                        kpos = f"(ksz{i} - 1 - w{i})" if reversal[i] else f"w{i}"
                        pos = (f"(o{i} * {a['window_strides'][i]} + {kpos} * "
                               f"{a['rhs_dilation'][i]} - {dim(a['padding'][2 * i])})")
                        cond, at = dilated_index(pos, a["lhs_dilation"][i], f"isz{i}")
                        conds.append(cond)
                        idx.append(at)
                    w(f"const int inside = {' && '.join(f'({c})' for c in conds) or '1'};")
                    lin = "b"
                    for i in range(ns):
                        lin = f"({lin}) * isz{i} + (inside ? {idx[i]} : 0)"
                    w(f"const {tx} *src = {xin} + (({lin}) * cin + g * cin_g);")
                    w("for (int64_t c = 0; c < cin_g; c++) crow[q++] = inside ? src[c] : 0;")
                    for _ in range(ns):
                        w.close()
                dst = f"{output} + (b * npos + p0) * cout + g * cout_g"
                if out.dtype in BLAS_GEMM and x.dtype == k.dtype == out.dtype:
                    w(f"{BLAS_GEMM[out.dtype]}(CblasRowMajor, CblasNoTrans, CblasNoTrans, "
                      f"(blasint)rows, (blasint)cout_g, (blasint)kk, 1, col, (blasint)kk, "
                      f"{kin} + g * cout_g, (blasint)cout, 0, {dst}, (blasint)cout);")
                else:
                    with w.block("for (int64_t r = 0; r < rows; r++)"):
                        with w.block("for (int64_t j = 0; j < cout_g; j++)"):
                            w(f"{t} acc = 0;")
                            w(f"for (int64_t q = 0; q < kk; q++) acc += ({t})col[r * kk + q] * "
                              f"({t}){kin}[q * cout + g * cout_g + j];")
                            w(f"({dst})[r * cout + j] = acc;")
    w("free(col);")
    w("return 0;")
