"""stablehlo.fft (FFT, IFFT, RFFT, IRFFT over 1 to 3 trailing axes) as a kernel that runs the
transforms of c_runtime/jd_fft.h: per batch element, the block of the transformed axes is
loaded as complex doubles, transformed along each axis, and stored in the result's type.

RFFT runs a real transform along each row of the last axis (jd_rfft_forward: two real
values packed into one complex one, so half the work) and then complex transforms along the
leading axes of the half block. IRFFT runs the inverse complex transforms along the leading
axes of its half block first and then a complex-to-real transform along each row, which drops
the imaginary parts of the self-conjugate entries (XLA's result for an inconsistent input).
IFFT and IRFFT divide by the product of the lengths, as StableHLO says.

Why not a library: no FFT library with a C interface installs from pip under a licence that
suits an Apache-2.0 project on every platform jdisc supports (FFTW is GPL, oneMKL is
proprietary and x86-64 only, pocketfft and KissFFT ship no wheel with a C library, jaxlib's
DUCC symbols are not exported); jax.export fixes every FFT length at trace time, so each
kernel's lengths are constants here.
"""

from __future__ import annotations

import re

from jdisc.dynamic_passes.ir import Op
from jdisc.dynamic_passes.symbolic import prod
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.loops import KernelContext

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
PARALLEL_MIN_VALUES = 4096   # complex values per call below which the pool is not worth waking


def fft_type(op: Op) -> str:
    """FFT, IFFT, RFFT or IRFFT, from the op's attribute (an enum printed as text)."""
    words = re.findall(r"[A-Z]+", str(op.attrs.get("fft_type", "")))
    kind = next((w for w in reversed(words) if w in FFT_TYPES), None)
    if kind is None:
        raise UnsupportedOpError(f"stablehlo.fft at {op.loc}: fft_type "
                                 f"{op.attrs.get('fft_type')!r}")
    return kind


def fft_lengths(op: Op) -> tuple[int, ...]:
    lengths = tuple(int(n) for n in op.attrs.get("fft_length", ()))
    if not 1 <= len(lengths) <= 3:
        raise UnsupportedOpError(f"stablehlo.fft at {op.loc}: {len(lengths)} transformed "
                                 f"axes (StableHLO allows 1 to 3)")
    return lengths


def _parts(dt: str) -> tuple[str, str]:
    s = "f" if dt == "c64" else ""
    return f"creal{s}", f"cimag{s}"


def _sizes(kind: str, lengths) -> tuple[int, ...]:
    """rank, total (values per block), last (the last axis's length), half (its stored half),
    lead (entries of the leading axes), block (complex values a block holds: the half block of
    a real transform) and n_complex (axes transformed as complex values: all, or the leading
    ones of a real transform, whose last axis has a real plan)."""
    rank, total, last = len(lengths), prod(lengths), lengths[-1]
    real = kind in ("RFFT", "IRFFT")
    half, lead = last // 2 + 1, total // last
    n_complex = rank - 1 if real else rank
    return rank, total, last, half, lead, lead * half if real else total, n_complex


def emit_fft(ctx: KernelContext) -> None:
    w, op, dim = ctx.w, ctx.kernel.root, ctx.dim
    kind, lengths = fft_type(op), fft_lengths(op)
    x, out = op.operands[0], op.results[0]
    (src,), dst = ctx.operands, ctx.outputs[0]
    rank, total, last, half, lead, block, n_complex = _sizes(kind, lengths)
    real = kind in ("RFFT", "IRFFT")
    w(f"const int64_t nb = {dim(prod(x.shape[:-rank]))};")
    w(f"const int64_t len[{rank}] = {{{', '.join(map(str, lengths))}}};")
    if total == 0:
        w("(void)len; (void)nb;")
        w("return 0;")
        return
    w("if (nb == 0) return 0;")
    # complex plans for the axes transformed as complex values (built on the first call)
    w(f"static void *slots[{rank}];")
    w(f"const jd_fft_plan *plans[{rank}];")
    w("const jd_fft_plan *const *pl = plans;")
    w("int failed = 0;")
    with w.block(f"for (int a = 0; a < {n_complex}; a++)"):
        w("plans[a] = (const jd_fft_plan *)jd_fft_cached(&slots[a], len[a], jd_fft_build, "
          "jd_fft_drop);")
        w("failed |= !plans[a];")
    shares = [("const jd_fft_plan *const *", "pl"), ("int64_t", "need")]
    if real:
        w("static void *rslot;")
        w(f"const jd_rfft_plan *rplan = (const jd_rfft_plan *)jd_fft_cached(&rslot, {last}, "
          "jd_rfft_build, jd_rfft_drop);")
        w("if (failed || !rplan) return 1;   /* the launcher reports it as out of memory */")
        w(f"int64_t need = jd_fft_axes_work(plans, len, {n_complex}, {half});")
        w("if (need < jd_rfft_work(rplan)) need = jd_rfft_work(rplan);")
        shares.append(("const jd_rfft_plan *", "rplan"))
    else:
        w("if (failed) return 1;   /* the launcher reports it as out of memory */")
        w(f"const int64_t need = jd_fft_axes_work(plans, len, {rank}, 1);")
    # batch elements in pieces on the pool, each piece with its own block and scratch
    w.parallel("nb", f"nb > 1 && nb * {total} >= {PARALLEL_MIN_VALUES}", shares, failed="failed")
    with w.block(""):
        w(f"const int64_t len[{rank}] = {{{', '.join(map(str, lengths))}}};")
        w(f"double *row = {f'(double *)malloc(sizeof(double) * {last})' if real else 'NULL'};")
        w(f"double *block = (double *)malloc(sizeof(double) * {2 * block});")
        w("double *work = (double *)malloc(sizeof(double) * (size_t)(2 * need + 2));")
        w(f"if (!block || !work{' || !row' if real else ''}) failed = 1;")
        _emit_batch_loop(w, kind, lengths, src, dst, x.dtype, out.dtype)
        w("free(block); free(work); free(row);")
    w("return failed;   /* the launcher reports it as out of memory */")


def _emit_batch_loop(w, kind: str, lengths, src: str, dst: str, in_dt: str, out_dt: str):
    """The transforms of batch elements jd_lo .. jd_hi (none when a buffer is missing)."""
    rank, total, last, half, lead, block, n_complex = _sizes(kind, lengths)
    real = kind in ("RFFT", "IRFFT")
    inverse = int(kind in ("IFFT", "IRFFT"))
    scale = "1.0" if not inverse else f"(1.0 / {total}.0)"
    mk = f"JD_{out_dt.upper()}" if out_dt in ("c64", "c128") else None
    re_, im_ = _parts(in_dt) if in_dt in ("c64", "c128") else ("", "")
    with w.block("for (int64_t b = jd_lo; b < (failed ? jd_lo : jd_hi); b++)"):
        if kind == "RFFT":               # real rows, then the leading axes of the half block
            with w.block(f"for (int64_t q = 0; q < {lead}; q++)"):
                with w.block(f"for (int64_t k = 0; k < {last}; k++)"):
                    w(f"row[k] = (double){src}[b * {total} + q * {last} + k];")
                w(f"jd_rfft_forward(rplan, row, block + 2 * q * {half}, work);")
            w(f"jd_fft_axes(pl, len, {rank - 1}, {half}, block, 0, work);")
        else:
            with w.block(f"for (int64_t i = 0; i < {block}; i++)"):
                w(f"block[2 * i] = {re_}({src}[b * {block} + i]); "
                  f"block[2 * i + 1] = {im_}({src}[b * {block} + i]);")
            w(f"jd_fft_axes(pl, len, {n_complex}, {half if real else 1}, block, {inverse}, "
              "work);")
        if kind == "IRFFT":              # the leading axes done: complex-to-real rows
            with w.block(f"for (int64_t q = 0; q < {lead}; q++)"):
                w(f"jd_rfft_inverse(rplan, block + 2 * q * {half}, row, work);")
                with w.block(f"for (int64_t k = 0; k < {last}; k++)"):
                    w(f"{dst}[b * {total} + q * {last} + k] = "
                      f"({ctype(out_dt)})(row[k] * {scale});")
        else:
            with w.block(f"for (int64_t i = 0; i < {block}; i++)"):
                w(f"{dst}[b * {block} + i] = {mk}(block[2 * i] * {scale}, "
                  f"block[2 * i + 1] * {scale});")
