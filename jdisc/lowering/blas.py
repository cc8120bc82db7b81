"""dot_general as BLAS calls (f32, f64, c64, c128: ?gemm, through the runtime's jd_dot, which
the launcher calls itself); a plain loop nest for other dtypes.

The operand layouts were made GEMM-shaped by `canonicalize_dot_layouts`; transposes are the
GEMM's layout flags. Sizes are int64 in the launcher and checked to fit BLAS's 32-bit `blasint`
there (see `size_limits`).
"""

from __future__ import annotations


from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.dtypes import is_complex
from jdisc.dynamic_passes.ir.program import Op
from jdisc.dynamic_passes.passes.dots import GemmLayout, gemm_layout
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cdtype import HALF_FLOATS, compute_dtype, ctype, narrow, widen
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext
from jdisc.lowering.scalar_ops import cast

# what jd_gemm calls, and its `kind` argument (jd_gemm.h)
BLAS_GEMM = {"f32": "scipy_cblas_sgemm", "f64": "scipy_cblas_dgemm",
             "c64": "scipy_cblas_cgemm", "c128": "scipy_cblas_zgemm"}
GEMM_KIND = {"f32": "JD_GEMM_F32", "f64": "JD_GEMM_F64", "c64": "JD_GEMM_C64",
             "c128": "JD_GEMM_C128"}


def layout(op: Op) -> GemmLayout:
    lay = gemm_layout(op)
    if lay is None:
        raise UnsupportedOpError(f"dot_general at {op.loc} was not canonicalised")
    return lay


def size_limits(kernel: Kernel) -> list[Dim]:
    """Sizes that must fit BLAS's 32-bit integers (checked by the launcher)."""
    op = kernel.root
    if op.name == "triangular_solve":
        b = op.operands[1]
        return [b.shape[-2], b.shape[-1]]
    if op.results[0].dtype not in BLAS_GEMM and not half_gemm(op):
        return []
    lay = layout(op)
    m, n, k, nb = prod(lay.m), prod(lay.n), prod(lay.k), prod(lay.batch)
    limits = [m, n, k]
    if lay.batch:   # batched calls also pass per-matrix strides and the count as blasint
        limits += [m * k, k * n, m * n, nb]
    return limits


def runs_in_runtime(kernel: Kernel) -> bool:
    """Whether the dot kernel is one GEMM of a BLAS element type (every operand of the
    result's): the launcher then calls the runtime's `jd_dot` (c_runtime/jd_gemm.h) and no
    unit is compiled for it. Such a unit was one call behind jdisc's headers: about 6 ms of
    the C compiler's time in a bundle, 15-25 ms alone (W1 and W7 have five each)."""
    op = kernel.root
    out = op.results[0]
    return out.dtype in BLAS_GEMM and all(v.dtype == out.dtype for v in op.operands)


def half_gemm(op: Op) -> bool:
    """Whether a dot is a GEMM of f16 or bf16 operands (both the same) whose result is of
    their type or f32: computed as an f32 GEMM of the widened operands (emit_dot)."""
    a, b, out = op.operands[0].dtype, op.operands[1].dtype, op.results[0].dtype
    return op.name == "dot_general" and a in HALF_FLOATS and b == a and out in (a, "f32")


def runtime_call(kernel: Kernel, dim, a: str, b: str, c: str, bias: str = "NULL") -> str:
    """The launcher's call of `jd_dot` for a kernel that runs_in_runtime, `dim` rendering the
    launcher's dims, `a`, `b`, `c` its buffers, `bias` its epilogue's (Kernel.epilogue)."""
    lay = layout(kernel.root)
    sizes = ", ".join(dim(prod(d)) for d in (lay.batch, lay.m, lay.n, lay.k))
    relu = int(kernel.epilogue is not None and kernel.epilogue.relu)
    return (f"jd_dot({GEMM_KIND[kernel.root.results[0].dtype]}, {int(bool(lay.trans_a))}, "
            f"{int(bool(lay.trans_b))}, {sizes}, {a}, {b}, {c}, {bias}, {relu})")


def emit_dot(ctx: KernelContext) -> None:
    """A dot kernel of other dtypes (integer, f16/bf16, or mixed): a straightforward loop
    nest, accumulating in the result's compute type (f32 for f16/bf16, rounded once at the end,
    as XLA:CPU does)."""
    w, kernel, inputs, output, dim = ctx.w, ctx.kernel, ctx.operands, ctx.outputs[0], ctx.dim
    # an epilogue runs in the runtime's jd_dot only: gemm_epilogue.py fuses f32 and f64 GEMMs
    assert kernel.epilogue is None, f"{kernel.name}: an epilogue on a loop-nest dot"
    op = kernel.root
    lay = layout(op)
    out = op.results[0]
    a, b = inputs
    w(f"const int64_t gemm_nb = {dim(prod(lay.batch))};")
    w(f"const int64_t gemm_m = {dim(prod(lay.m))}, gemm_n = {dim(prod(lay.n))}, "
      f"gemm_k = {dim(prod(lay.k))};")
    w("if (gemm_nb == 0 || gemm_m == 0 || gemm_n == 0) return 0;")
    _emit_outer_product(w, op, a, b, output)
    if half_gemm(op):
        _emit_half_gemm(w, op, lay, a, b, output)
        return
    acc_dt = compute_dtype(out.dtype)
    a_dt, b_dt = op.operands[0].dtype, op.operands[1].dtype
    ia = "(k * gemm_m + i)" if lay.trans_a else "(i * gemm_k + k)"
    ib = "(j * gemm_k + k)" if lay.trans_b else "(k * gemm_n + j)"
    with w.block("for (int64_t b = 0; b < gemm_nb; b++)"):
        w(f"const {ctype(op.operands[0].dtype)}* restrict pa = {a} + b * gemm_m * gemm_k;")
        w(f"const {ctype(op.operands[1].dtype)}* restrict pb = {b} + b * gemm_k * gemm_n;")
        with w.block("for (int64_t i = 0; i < gemm_m; i++)"):
            with w.block("for (int64_t j = 0; j < gemm_n; j++)"):
                w(f"{ctype(acc_dt)} acc = 0;")
                product = _mul(cast(f"pa[{ia}]", a_dt, acc_dt), cast(f"pb[{ib}]", b_dt, acc_dt),
                               acc_dt)
                w(f"for (int64_t k = 0; k < gemm_k; k++) acc += {product};")
                w(f"{output}[(b * gemm_m + i) * gemm_n + j] = {narrow('acc', out.dtype)};")


def _emit_half_gemm(w: CWriter, op: Op, lay: GemmLayout, a: str, b: str, output: str) -> None:
    """A dot of f16/bf16 operands: both widened to f32 (exact), one f32 GEMM of the runtime
    (jd_dot: OpenBLAS in pieces on the pool), its result rounded once to the result's type, as
    XLA:CPU computes it (f32 products and sums, one rounding). The loop nest it replaces kept
    one accumulator per result, which GCC does not vectorise: a bf16 MLP ran about 4x slower than
    jax.jit (benchmarks/zoo_speed.py, jmp's mixed precision)."""
    out = op.results[0].dtype
    half = op.operands[0].dtype
    w("const int64_t n_a = gemm_nb * gemm_m * gemm_k, n_b = gemm_nb * gemm_k * gemm_n, "
      "n_c = gemm_nb * gemm_m * gemm_n;")
    wide = ["fa", "fb"] + (["fc"] if out != "f32" else [])
    for name, n in zip(wide, ("n_a", "n_b", "n_c")):
        w(f"float *{name} = (float *)malloc((size_t){n} * sizeof(float) + 1);")
    with w.block(f"if ({' || '.join('!' + n for n in wide)})"):
        for name in wide:
            w(f"free({name});")
        w("return 1;")
    for name, src, n in (("fa", a, "n_a"), ("fb", b, "n_b")):
        w(f"for (int64_t i = 0; i < {n}; i++) {name}[i] = {widen(f'{src}[i]', half)};")
    c = "fc" if out != "f32" else output
    w(f"jd_dot(JD_GEMM_F32, {int(bool(lay.trans_a))}, {int(bool(lay.trans_b))}, gemm_nb, "
      f"gemm_m, gemm_n, gemm_k, fa, fb, {c}, NULL, 0);")
    if out != "f32":
        w(f"for (int64_t i = 0; i < n_c; i++) {output}[i] = {narrow('fc[i]', out)};")
    for name in wide:
        w(f"free({name});")


def _mul(x: str, y: str, dtype: str) -> str:
    """x * y in the compute type `dtype` (complex: XLA's four-product formula)."""
    return f"jd_cmul_{dtype}({x}, {y})" if is_complex(dtype) else f"{x} * {y}"


def _emit_outer_product(w: CWriter, op: Op, a: str, b: str, output: str) -> None:
    """A contraction of size 1 is a product per element, as XLA computes it (its simplifier
    turns such a dot into a multiply): `0 * -1` is -0 there, where a GEMM's accumulator,
    starting from +0, gives +0. With k = 1 both operands' layouts index by i and j alone."""
    out = op.results[0]
    acc_dt = compute_dtype(out.dtype)
    a_dt, b_dt = op.operands[0].dtype, op.operands[1].dtype
    with w.block("if (gemm_k == 1)"):
        with w.block("for (int64_t b = 0; b < gemm_nb; b++)"):
            with w.block("for (int64_t i = 0; i < gemm_m; i++)"):
                w(f"const {ctype(acc_dt)} ai = {cast(f'{a}[b * gemm_m + i]', a_dt, acc_dt)};")
                bj = cast(f"{b}[b * gemm_n + j]", b_dt, acc_dt)
                with w.block("for (int64_t j = 0; j < gemm_n; j++)"):
                    w(f"{output}[(b * gemm_m + i) * gemm_n + j] = "
                      f"{narrow(_mul('ai', bj, acc_dt), out.dtype)};")
        w("return 0;")


BLAS_TRSM = {"f32": "scipy_cblas_strsm", "f64": "scipy_cblas_dtrsm",
             "c64": "scipy_cblas_ctrsm", "c128": "scipy_cblas_ztrsm"}

# GEMMs run as single-threaded BLAS calls on the program's pool (c_runtime/jd_gemm.h): OpenBLAS's
# own threads end a GEMM when the slowest of them does, which on a busy machine is a scheduler
# tick late, and on a shared 2-core machine waking them cost 2-10x on GEMMs of a few million
# multiply-adds (the MLP training step at N = 1..77).


def emit_trsm(ctx: KernelContext) -> None:
    """triangular_solve: copy b into the result, then one in-place ?trsm per batch matrix."""
    w, kernel, inputs, output, dim = ctx.w, ctx.kernel, ctx.operands, ctx.outputs[0], ctx.dim
    op = kernel.root
    a_val, b_val = op.operands
    dt = op.results[0].dtype
    if dt not in BLAS_TRSM or a_val.dtype != dt:
        raise UnsupportedOpError(f"stablehlo.triangular_solve on {dt} at {op.loc}")
    a, b = inputs
    left, lower = op.attrs.get("left_side"), op.attrs.get("lower")
    how = str(op.attrs.get("transpose_a"))
    trans = ("CblasNoTrans" if "NO_TRANSPOSE" in how else
             "CblasConjTrans" if "ADJOINT" in how and is_complex(dt) else
             "CblasTrans")   # TRANSPOSE, and ADJOINT of a real matrix
    diag = "CblasUnit" if op.attrs.get("unit_diagonal") else "CblasNonUnit"
    w(f"const int64_t nb = {dim(prod(b_val.shape[:-2]))}, rows = {dim(b_val.shape[-2])}, "
      f"cols = {dim(b_val.shape[-1])}, m = {dim(a_val.shape[-1])};")
    w(f"jd_copy({output}, {b}, sizeof({ctype(dt)}) * (size_t)(nb * rows * cols));")
    w("if (nb == 0 || rows == 0 || cols == 0) return 0;")
    one = "1"
    if is_complex(dt):   # the complex ?trsm take alpha by address
        w(f"const {ctype(dt)} one = 1;")
        one = "&one"
    with w.block("for (int64_t i = 0; i < nb; i++)"):
        w(f"{BLAS_TRSM[dt]}(CblasRowMajor, {'CblasLeft' if left else 'CblasRight'}, "
          f"{'CblasLower' if lower else 'CblasUpper'}, {trans}, {diag}, (blasint)rows, "
          f"(blasint)cols, {one}, {a} + i * m * m, (blasint)m, {output} + i * rows * cols, "
          f"(blasint)cols);")
