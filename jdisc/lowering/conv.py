"""stablehlo.convolution as im2col + GEMM (BLAS for f32/f64), in NHWC / HWIO / NHWC.

For each image and feature group, chunks of output positions are unrolled into a matrix of
input windows (rows: output positions, columns: kernel positions x input features), which a
GEMM multiplies with the group's kernel matrix straight into the output. Padding, strides,
input (lhs) and kernel (rhs) dilation and window reversal are index arithmetic in the
unrolling; positions outside the input read 0.
"""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.fusion import Kernel
from jdisc.dynamic_passes.symbolic import Dim
from jdisc.lowering.blas import BLAS_GEMM
from jdisc.lowering.cdtype import ctype
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.kernels import dilated_index

CHUNK = 2048  # output positions unrolled at a time (bounds the im2col buffer)


def _prod(dims) -> Dim:
    n: Dim = 1
    for d in dims:
        n = n * d
    return n


def emit_conv(w: CWriter, kernel: Kernel, inputs: list[str], output: str,
              dim: Callable[[Dim], str]) -> None:
    op = kernel.root
    x, k = op.operands
    out = op.results[0]
    a = op.attrs
    ns = x.rank - 2
    if out.dtype in ("f16", "bf16") or x.dtype in ("f16", "bf16"):
        raise UnsupportedOpError(f"stablehlo.convolution on {out.dtype} at {op.loc}")
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
