"""stablehlo.convolution in NHWC / HWIO / NHWC: a direct scheme, or im2col + GEMM.

Direct (f32/f64 with a static kernel shape, the usual CNN case): output rows (an image and
all its output positions but the innermost) run in parallel. Along a row, a block of `P`
positions times `F` output features accumulates in registers: for each kernel tap and input
feature, `P` input values times one row of `F` weights (the `F` loop is `omp simd`; the
multiply-adds are fused where the target has a fast fma). Taps outside the input (padding,
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

from typing import Callable

from jdisc.dynamic_passes.fusion import Kernel
from jdisc.dynamic_passes.ir import Op
from jdisc.dynamic_passes.symbolic import Dim
from jdisc.lowering.blas import BLAS_GEMM
from jdisc.lowering.cdtype import ctype
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.kernels import dilated_index

CHUNK = 2048  # im2col: output positions unrolled at a time (bounds the im2col buffer)
# direct: accumulators per block, in vector registers of 64 bytes (16 f32): 16 of the 32 an
# AVX-512 core has, leaving room for the weights and the broadcast inputs
BLOCK_VECTORS = 16
MAX_POSITIONS = 8
# multiply-adds below which a convolution runs on one thread (waking threads costs more)
PARALLEL_MIN_MACS = 1 << 20


def _prod(dims) -> Dim:
    n: Dim = 1
    for d in dims:
        n = n * d
    return n


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


def emit_conv(w: CWriter, kernel: Kernel, inputs: list[str], output: str,
              dim: Callable[[Dim], str]) -> None:
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

def _emit_direct(w: CWriter, op: Op, inputs: list[str], output: str, dim, npos: int,
                 nfeat: int) -> None:
    x, k = op.operands
    out = op.results[0]
    a = op.attrs
    ns = x.rank - 2
    last = ns - 1
    groups = a.get("feature_group_count", 1)
    t = ctype(out.dtype)
    ksz, cin_g, cout = k.shape[:ns], k.shape[ns], k.shape[-1]
    cout_g = cout // groups
    cin = cin_g * groups
    xin, kin = inputs
    w(f"/* direct convolution: blocks of {npos} positions x {nfeat} features */")
    w(f"const int64_t batch = {dim(x.shape[0])};")
    for i in range(ns):
        w(f"const int64_t isz{i} = {dim(x.shape[1 + i])}, osz{i} = {dim(out.shape[1 + i])};")
    empty = " || ".join(["batch == 0"] + [f"osz{i} == 0" for i in range(ns)])
    w(f"if ({empty}) return 0;")
    if cin_g == 0 or 0 in ksz or cout == 0:
        w(f"for (int64_t e = 0; e < batch * {' * '.join(f'osz{i}' for i in range(ns))} * "
          f"{cout}; e++) {output}[e] = 0;")
        w("return 0;")
        return
    w(f"static const {t} zeros[{cin_g}];   /* read for taps outside the input */")
    macs = " * ".join(["batch"] + [f"osz{i}" for i in range(ns)]) \
        + f" * {cout * cin_g * _prod(ksz)}"
    outer = " * ".join(["batch"] + [f"osz{i}" for i in range(last)])
    w(f"#pragma omp parallel for collapse({ns}) schedule(dynamic, 1) num_threads(jd_num_threads) "
      f"if ({outer} > 1 && {macs} >= {PARALLEL_MIN_MACS})")
    w("for (int64_t b = 0; b < batch; b++) {")
    for i in range(last):
        w.level += 1
        w(f"for (int64_t o{i} = 0; o{i} < osz{i}; o{i}++) {{")
    w.level += 1
    row = "b"
    for i in range(last):
        row = f"({row} * osz{i} + o{i})"
    w(f"{t} *restrict orow = {output} + {row} * osz{last} * {cout};")
    group = "0"
    if groups > 1:
        w(f"for (int64_t g = 0; g < {groups}; g++) {{")
        w.level += 1
        group = "g"
    stride, lo = a["window_strides"][last], a["padding"][2 * last]
    contiguous = (a["lhs_dilation"][last] == 1 and a["rhs_dilation"][last] == 1
                  and not (a.get("window_reversal") or (False,) * ns)[last])
    with w.block(f"for (int64_t ob = 0; ob < osz{last}; ob += {npos})"):
        if contiguous:   # every innermost tap of the block inside the input
            w(f"const int inner = ob * {stride} - {lo} >= 0 && ob + {npos} <= osz{last} && "
              f"(ob + {npos - 1}) * {stride} + {ksz[last] - 1 - lo} < isz{last};")
        full = cout_g - cout_g % nfeat
        if full:
            with w.block(f"for (int64_t f0 = 0; f0 < {full}; f0 += {nfeat})"):
                _emit_block(w, op, xin, kin, t, npos, nfeat, cin, group, contiguous)
        if cout_g % nfeat:   # the last, narrower block of features
            with w.block(f"for (int64_t f0 = {full}; f0 < {cout_g}; f0 += {nfeat})"):
                _emit_block(w, op, xin, kin, t, npos, cout_g % nfeat, cin, group, contiguous)
    if groups > 1:
        w.level -= 1
        w("}")
    for _ in range(ns):
        w.level -= 1
        w("}")
    w("return 0;")


def _emit_block(w: CWriter, op: Op, xin: str, kin: str, t: str, npos: int, nfeat: int,
                cin: int, group: str, contiguous: bool) -> None:
    """One block: acc[p][j] for positions ob + p and features f0 + j of group `group`."""
    x, k = op.operands
    a = op.attrs
    ns = x.rank - 2
    last = ns - 1
    ksz, cin_g, cout = k.shape[:ns], k.shape[ns], k.shape[-1]
    cout_g = cout // a.get("feature_group_count", 1)
    reversal = a.get("window_reversal") or (False,) * ns
    fma = f"jd_fma_{op.results[0].dtype}"
    simd = f"#pragma omp simd\nfor (int j = 0; j < {nfeat}; j++)"

    def position(i: int, o: str, tap: str) -> tuple[str, str]:
        kpos = f"({ksz[i] - 1} - {tap})" if reversal[i] else tap
        pos = (f"({o} * {a['window_strides'][i]} + {kpos} * {a['rhs_dilation'][i]} - "
               f"{a['padding'][2 * i]})")
        return dilated_index(pos, a["lhs_dilation"][i], f"isz{i}")

    def accumulate(xv: str, wv: str) -> None:
        for line in simd.split("\n"):
            w(line)
        w(f"  acc[p][j] = {fma}({xv}, {wv}, acc[p][j]);")

    w(f"{t} acc[{npos}][{nfeat}];")
    with w.block(f"for (int p = 0; p < {npos}; p++)"):
        for line in simd.split("\n"):
            w(line)
        w("  acc[p][j] = 0;")
    for i in range(last):   # outer kernel taps: skipped when outside the input
        w(f"for (int64_t w{i} = 0; w{i} < {ksz[i]}; w{i}++) {{")
        w.level += 1
        cond, at = position(i, f"o{i}", f"w{i}")
        w(f"const int64_t x{i} = {at};")
        w(f"if (!({cond})) continue;")
    xrow, tap = "b", "0"
    for i in range(last):
        xrow, tap = f"({xrow} * isz{i} + x{i})", f"({tap} * {ksz[i]} + w{i})"
    w(f"const {t} *xrow = {xin} + {xrow} * isz{last} * {cin} + {group} * {cin_g};")
    w(f"const {t} *wtap = {kin} + {tap} * {ksz[last] * cin_g * cout} + {group} * {cout_g} + f0;")
    head = "if (inner) {" if contiguous else "{"
    if contiguous:   # the block's innermost taps read one run of input per position
        stride, lo = a["window_strides"][last], a["padding"][2 * last]
        w(head)
        w.level += 1
        w(f"const {t} *xb = xrow + (ob * {stride} - {lo}) * {cin};")
        if cin == cin_g:   # one group: taps x features are consecutive in input and weights
            with w.block(f"for (int64_t q = 0; q < {ksz[last] * cin}; q++)"):
                with w.block(f"for (int p = 0; p < {npos}; p++)"):
                    w(f"const {t} xv = xb[p * {stride * cin} + q];")
                    accumulate("xv", f"wtap[q * {cout} + j]")
        else:
            with w.block(f"for (int64_t w{last} = 0; w{last} < {ksz[last]}; w{last}++)"):
                with w.block(f"for (int64_t c = 0; c < {cin_g}; c++)"):
                    with w.block(f"for (int p = 0; p < {npos}; p++)"):
                        w(f"const {t} xv = xb[p * {stride * cin} + w{last} * {cin} + c];")
                        accumulate("xv", f"wtap[(w{last} * {cin_g} + c) * {cout} + j]")
        w.level -= 1
        head = "} else {"
    w(head)
    w.level += 1
    with w.block(f"for (int64_t w{last} = 0; w{last} < {ksz[last]}; w{last}++)"):
        w(f"const {t} *xp[{npos}];")
        with w.block(f"for (int p = 0; p < {npos}; p++)"):
            cond, at = position(last, "(ob + p)", f"w{last}")
            w(f"xp[p] = ob + p < osz{last} && {cond} ? xrow + {at} * {cin} : zeros;")
        with w.block(f"for (int64_t c = 0; c < {cin_g}; c++)"):
            with w.block(f"for (int p = 0; p < {npos}; p++)"):
                w(f"const {t} xv = xp[p][c];")
                accumulate("xv", f"wtap[(w{last} * {cin_g} + c) * {cout} + j]")
    w.level -= 1
    w("}")
    for _ in range(last):
        w.level -= 1
        w("}")
    with w.block(f"for (int p = 0; p < {npos} && ob + p < osz{last}; p++)"):
        for line in simd.split("\n"):
            w(line)
        w(f"  orow[(ob + p) * {cout} + {group} * {cout_g} + f0 + j] = acc[p][j];")


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
    w(f"const int64_t npos = {dim(_prod(out.shape[1:-1]))}, "
      f"kk = {dim(_prod(k.shape[:-2]))} * cin_g;")
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
                        w(f"for (int64_t w{i} = 0; w{i} < ksz{i}; w{i}++) {{")
                        w.level += 1
                    conds, idx = [], []
                    for i in range(ns):
                        kpos = f"(ksz{i} - 1 - w{i})" if reversal[i] else f"w{i}"
                        pos = (f"(o{i} * {a['window_strides'][i]} + {kpos} * "
                               f"{a['rhs_dilation'][i]} - {a['padding'][2 * i]})")
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
                        w.level -= 1
                        w("}")
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
