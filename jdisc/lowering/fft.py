"""stablehlo.fft (FFT, IFFT, RFFT, IRFFT over 1 to 3 trailing axes) as a kernel that runs the
transforms of c_runtime/jd_fft.h: per batch element, the block of the transformed axes is
loaded as complex doubles, transformed along each axis, and stored in the result's type.

RFFT transforms the real block as complex values and keeps the first n/2 + 1 entries of the
last axis. IRFFT first rebuilds the whole block from its Hermitian half, X[k] = conj(X[-k])
(indices mod each length), then runs the inverse transform and keeps the real part: the
same result as an inverse complex transform over the leading axes and a complex-to-real one
over the last (the imaginary parts of the self-conjugate entries are dropped either way).
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


def emit_fft(ctx: KernelContext) -> None:
    w, op, dim = ctx.w, ctx.kernel.root, ctx.dim
    kind, lengths = fft_type(op), fft_lengths(op)
    x, out = op.operands[0], op.results[0]
    (src,), dst = ctx.operands, ctx.outputs[0]
    rank, total, last = len(lengths), prod(lengths), lengths[-1]
    half = last // 2 + 1
    lead = total // last                   # entries of the leading transformed axes
    packed = lead * half                   # an RFFT result's / IRFFT operand's block
    w(f"const int64_t nb = {dim(prod(x.shape[:-rank]))};")
    w(f"const int64_t len[{rank}] = {{{', '.join(map(str, lengths))}}};")
    if total == 0:
        w("(void)len; (void)nb;")
        w("return 0;")
        return
    w("if (nb == 0) return 0;")
    w(f"jd_fft_plan plans[{rank}];")
    w("int failed = 0;")
    w(f"for (int a = 0; a < {rank}; a++) failed |= jd_fft_plan_init(&plans[a], len[a]);")
    w(f"double *block = (double *)malloc(sizeof(double) * {2 * total});")
    w(f"double *line = (double *)malloc(sizeof(double) * {2 * max(lengths)});")
    with w.block("if (failed || !block || !line)"):
        w(f"for (int a = 0; a < {rank}; a++) jd_fft_plan_free(&plans[a]);")
        w("free(block); free(line);")
        w("return 1;   /* the launcher reports it as out of memory */")
    scale = "1.0" if kind in ("FFT", "RFFT") else f"(1.0 / {total}.0)"
    with w.block("for (int64_t b = 0; b < nb; b++)"):
        if kind == "RFFT":
            with w.block(f"for (int64_t i = 0; i < {total}; i++)"):
                w(f"block[2 * i] = (double){src}[b * {total} + i]; block[2 * i + 1] = 0;")
        elif kind == "IRFFT":
            _load_hermitian(w, src, lengths, x.dtype, packed)
        else:
            re_, im_ = _parts(x.dtype)
            with w.block(f"for (int64_t i = 0; i < {total}; i++)"):
                w(f"block[2 * i] = {re_}({src}[b * {total} + i]); "
                  f"block[2 * i + 1] = {im_}({src}[b * {total} + i]);")
        w(f"jd_fft_block(plans, len, {rank}, block, line, {int(kind in ('IFFT', 'IRFFT'))});")
        mk = f"JD_{out.dtype.upper()}" if out.dtype in ("c64", "c128") else None
        if kind == "IRFFT":
            with w.block(f"for (int64_t i = 0; i < {total}; i++)"):
                w(f"{dst}[b * {total} + i] = ({ctype(out.dtype)})(block[2 * i] * {scale});")
        elif kind == "RFFT":
            with w.block(f"for (int64_t q = 0; q < {lead}; q++)"):
                with w.block(f"for (int64_t k = 0; k < {half}; k++)"):
                    w(f"const double *v = block + 2 * (q * {last} + k);")
                    w(f"{dst}[b * {packed} + q * {half} + k] = {mk}(v[0], v[1]);")
        else:
            with w.block(f"for (int64_t i = 0; i < {total}; i++)"):
                w(f"{dst}[b * {total} + i] = {mk}(block[2 * i] * {scale}, "
                  f"block[2 * i + 1] * {scale});")
    w(f"for (int a = 0; a < {rank}; a++) jd_fft_plan_free(&plans[a]);")
    w("free(block); free(line);")
    w("return 0;")


def _load_hermitian(w, src: str, lengths, dt: str, packed: int) -> None:
    """The whole complex block from its stored half along the last axis: entry (i, k) for
    k > L/2 is conj of entry (-i, L - k), the leading indices negated mod their lengths."""
    re_, im_ = _parts(dt)
    last, half = lengths[-1], lengths[-1] // 2 + 1
    lead_lengths = lengths[:-1]
    idx = [f"i{a}" for a in range(len(lead_lengths))]
    for a, n in enumerate(lead_lengths):
        w.open(f"for (int64_t i{a} = 0; i{a} < {n}; i{a}++)")
    q = "0"
    neg = "0"
    for a, n in enumerate(lead_lengths):
        q = f"({q}) * {n} + {idx[a]}"
        neg = f"({neg}) * {n} + ({n} - {idx[a]}) % {n}"
    w(f"const int64_t q = {q}, qneg = {neg};")
    with w.block(f"for (int64_t k = 0; k < {last}; k++)"):
        w(f"double *v = block + 2 * (q * {last} + k);")
        with w.block(f"if (k < {half})"):
            w(f"v[0] = {re_}({src}[b * {packed} + q * {half} + k]); "
              f"v[1] = {im_}({src}[b * {packed} + q * {half} + k]);")
        with w.block("else"):
            w(f"v[0] = {re_}({src}[b * {packed} + qneg * {half} + ({last} - k)]); "
              f"v[1] = -{im_}({src}[b * {packed} + qneg * {half} + ({last} - k)]);")
    for _ in lead_lengths:
        w.close()
