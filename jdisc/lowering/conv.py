"""stablehlo.convolution in NHWC / HWIO / NHWC: a direct scheme, or im2col + GEMM.

Direct (f32/f64 with a static kernel shape and 1 to 3 spatial dims, the usual CNN case): the
launcher calls the conv unit's jd_conv_f32 / jd_conv_f64 (c_runtime/jd_conv.h: blocks of
positions x features in registers, rows on the pool) with the convolution's sizes and
attributes, and no unit is compiled for the kernel; the conv unit compiles once for every
program, as the runtime unit does. Each convolution had been a kernel unit of its own,
specialised to its sizes: 70-90 ms of the C compiler's time apiece.

im2col + GEMM (other dtypes, kernel shapes with symbolic dims, no spatial dims or more than
3): for each image and feature group, chunks of output positions are unrolled into a matrix of
input windows (rows: output positions, columns: kernel positions x input features), which a
GEMM multiplies with the group's kernel matrix straight into the output.

Both schemes sum each output's products in the same order (kernel positions outermost first,
then input features). Padding, strides, input (lhs) and kernel (rhs) dilation and window
reversal are index arithmetic; positions outside the input read 0.
"""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.program import Op
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.blas import BLAS_GEMM
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext, dilated_index

CHUNK = 2048  # im2col: output positions unrolled at a time (bounds the im2col buffer)
DIRECT = {"f32": "jd_conv_f32", "f64": "jd_conv_f64"}   # the conv unit's entries (jd_conv.h)
MAX_DIMS = 3          # spatial dims the direct scheme takes (JD_CONV_MAX_DIMS, jd_shared.h)


def runs_in_runtime(kernel: Kernel) -> bool:
    """Whether the convolution takes the direct scheme (f32 or f64 throughout, a static kernel
    shape, 1 to MAX_DIMS spatial dims): the launcher then calls the conv unit's jd_conv_<t>
    (c_runtime/jd_conv.h) and no unit is compiled for the kernel."""
    op = kernel.root
    x, k = op.operands
    out = op.results[0]
    return (1 <= x.rank - 2 <= MAX_DIMS and x.dtype == k.dtype == out.dtype
            and out.dtype in DIRECT and all(isinstance(d, int) for d in k.shape))


def runtime_call(kernel: Kernel, dim: Callable[[Dim], str], x: str, k: str, out: str) -> str:
    """The launcher's call of the conv unit for a kernel that runs_in_runtime, `dim` rendering
    the launcher's dims, `x`, `k`, `out` its buffers: a jd_conv_args literal (jd_shared.h)."""
    op = kernel.root
    xv, kv = op.operands
    a = op.attrs
    ns = xv.rank - 2
    groups = a.get("feature_group_count", 1)

    def per_dim(values) -> str:
        return "{" + ", ".join(values) + "}"
    reversal = a.get("window_reversal") or (False,) * ns
    fields = [("ns", str(ns)), ("batch", dim(xv.shape[0])), ("cin", str(kv.shape[ns] * groups)),
              ("cout", str(kv.shape[-1])), ("groups", str(groups)),
              ("isz", per_dim(dim(d) for d in xv.shape[1:-1])),
              ("osz", per_dim(dim(d) for d in op.results[0].shape[1:-1])),
              ("ksz", per_dim(str(d) for d in kv.shape[:ns])),
              ("stride", per_dim(str(s) for s in a["window_strides"])),
              ("rdil", per_dim(str(s) for s in a["rhs_dilation"])),
              ("ldil", per_dim(str(s) for s in a["lhs_dilation"])),
              ("lo", per_dim(dim(a["padding"][2 * i]) for i in range(ns))),
              ("rev", per_dim(str(int(bool(r))) for r in reversal)),
              ("x", x), ("k", k), ("out", out)]
    args = ", ".join(f".{name} = {value}" for name, value in fields)
    return f"{DIRECT[op.results[0].dtype]}(&(jd_conv_args){{{args}}})"


def emit_conv(ctx: KernelContext) -> None:
    """A convolution kernel that does not run_in_runtime: im2col + GEMM."""
    op = ctx.kernel.root
    x, out = op.operands[0], op.results[0]
    if out.dtype in ("f16", "bf16") or x.dtype in ("f16", "bf16"):
        raise UnsupportedOpError(f"stablehlo.convolution on {out.dtype} at {op.loc}")
    _emit_im2col(ctx.w, op, ctx.operands, ctx.outputs[0], ctx.dim)


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
