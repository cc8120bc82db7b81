"""stablehlo.fft (FFT, IFFT, RFFT, IRFFT over 1 to 3 trailing axes) as a kernel that runs the
transforms of c_runtime/jd_fft.h: batch elements are taken VECTOR at a time, their blocks of
the transformed axes loaded side by side (entry k of element e at block[k * v + e], so every
pass's inner loop runs across the batch, contiguous), transformed along each axis, and stored
in the result's type. complex64 / float32 transforms compute in single precision and
complex128 / float64 in double, as XLA:CPU's do.

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

from jdisc.dynamic_passes.algebra.symbolic import prod
from jdisc.dynamic_passes.ir.program import Op
from jdisc.errors import UnsupportedOpError
from jdisc.lowering import c_runtime
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.loops import KernelContext

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
PARALLEL_MIN_VALUES = 4096   # complex values per call below which the pool is not worth waking
VECTOR = 8                  # batch elements transformed side by side, at most ...
VECTOR_VALUES = 65536      # ... and at most this many complex values between them


def single(dt: str) -> bool:
    """Whether a transform of this input type computes in single precision."""
    return dt in ("c64", "f32")


def precision(op: Op) -> str:
    """The C type a stablehlo.fft computes in."""
    return "float" if single(op.operands[0].dtype) else "double"


# what kernels call of the FFT unit, defined there and hidden inside the library
_EXPORTED = ("jd_fft_build", "jd_fft_drop", "jd_rfft_build", "jd_rfft_drop", "jd_fft_axes_work",
             "jd_rfft_work", "jd_fft_axes", "jd_rfft_forward", "jd_rfft_inverse")
_CACHED = ("JD_RT void *jd_dft_cached(void **slot, int64_t n, void *(*build)(int64_t), "
           "void (*drop)(void *));\n")


def _in_precision(text: str, real: str) -> str:
    text = text.replace("jd_real", real)
    return re.sub(r"\bjd_(r?)fft_", r"jd_\1fftf_", text) if real == "float" else text


def runtime_source(precisions) -> str:
    """The FFT unit's code: jd_fft.h, then jd_fft_real.h once per precision ("double",
    "float") the program uses, its entry points (_EXPORTED, jd_dft_cached) made hidden
    functions of the library instead of static ones."""
    exported = "|".join(_EXPORTED)
    parts = [c_runtime.source("jd_fft.h").replace("static void *jd_dft_cached(",
                                                  "JD_RT void *jd_dft_cached(")]
    for real in sorted(set(precisions)):
        text = re.sub(rf"^static (\w+ \*?)({exported})\(", r"JD_RT \1\2(",
                      c_runtime.source("jd_fft_real.h"), flags=re.M)
        parts.append(f"/* jd_fft_real.h in {real} */\n{_in_precision(text, real)}")
    return "\n".join(parts)


def declarations(precision: str) -> str:
    """What an FFT kernel of this precision calls of the FFT unit (jd_fft_api.h)."""
    return _CACHED + _in_precision(c_runtime.source("jd_fft_api.h"), precision)


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


def _vector(total: int) -> int:
    """Batch elements per chunk: as many as fit VECTOR_VALUES, at most VECTOR."""
    return max(1, min(VECTOR, VECTOR_VALUES // max(total, 1)))


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
    f = "f" if precision(op) == "float" else ""
    vec = _vector(total)
    w(f"const int64_t nb = {dim(prod(x.shape[:-rank]))};")
    w(f"const int64_t len[{rank}] = {{{', '.join(map(str, lengths))}}};")
    if total == 0:
        w("(void)len; (void)nb;")
        w("return 0;")
        return
    w("if (nb == 0) return 0;")
    # complex plans for the axes transformed as complex values (built on the first call)
    w(f"static void *slots[{rank}];")
    w(f"const jd_fft{f}_plan *plans[{rank}];")
    w(f"const jd_fft{f}_plan *const *pl = plans;")
    w("int failed = 0;")
    with w.block(f"for (int a = 0; a < {n_complex}; a++)"):
        w(f"plans[a] = (const jd_fft{f}_plan *)jd_dft_cached(&slots[a], len[a], "
          f"jd_fft{f}_build, jd_fft{f}_drop);")
        w("failed |= !plans[a];")
    shares = [(f"const jd_fft{f}_plan *const *", "pl"), ("int64_t", "need")]
    # complex scratch values per batch element of a chunk
    if real:
        w("static void *rslot;")
        w(f"const jd_rfft{f}_plan *rplan = (const jd_rfft{f}_plan *)jd_dft_cached(&rslot, "
          f"{last}, jd_rfft{f}_build, jd_rfft{f}_drop);")
        w("if (failed || !rplan) return 1;   /* the launcher reports it as out of memory */")
        w(f"int64_t need = jd_fft{f}_axes_work(plans, len, {n_complex}, {half});")
        w(f"if (need < jd_rfft{f}_work(rplan)) need = jd_rfft{f}_work(rplan);")
        shares.append((f"const jd_rfft{f}_plan *", "rplan"))
    else:
        w("if (failed) return 1;   /* the launcher reports it as out of memory */")
        w(f"const int64_t need = jd_fft{f}_axes_work(plans, len, {rank}, 1);")
    # batch elements in chunks of up to VEC side by side, the chunks in pieces on the pool
    # (each piece with its own block and scratch): VEC per chunk, or fewer so that every
    # thread has one; a piece never splits a chunk
    real_t = precision(op)
    w(f"enum {{ VEC = {vec} }};   /* batch elements transformed side by side, at most */")
    w(f"const int go = nb > 1 && nb * {total} >= {PARALLEL_MIN_VALUES};")
    w("const int64_t threads = go ? jd_parallel_threads() : 1;")
    w("const int64_t cv = nb >= VEC * threads ? VEC : (nb + threads - 1) / threads;")
    w("const int64_t chunks = (nb + cv - 1) / cv;")
    shares += [("int64_t", "nb"), ("int64_t", "cv")]
    w.parallel("chunks", "go && chunks > 1", shares, failed="failed")
    with w.block(""):
        w(f"const int64_t len[{rank}] = {{{', '.join(map(str, lengths))}}};")
        w(f"{real_t} *row = " + (f"({real_t} *)malloc(sizeof({real_t}) * {last} * cv)"
                                 if real else "NULL") + ";")
        w(f"{real_t} *block = ({real_t} *)malloc(sizeof({real_t}) * {2 * block} * cv);")
        w(f"{real_t} *work = ({real_t} *)malloc(sizeof({real_t}) * (size_t)(2 * need + 2) * "
          "cv);")
        w(f"if (!block || !work{' || !row' if real else ''}) failed = 1;")
        _emit_batch_loop(w, kind, lengths, src, dst, x.dtype, out.dtype, f, real_t)
        w("free(block); free(work); free(row);")
    w("return failed;   /* the launcher reports it as out of memory */")


def _emit_batch_loop(w, kind: str, lengths, src: str, dst: str, in_dt: str, out_dt: str,
                     f: str, real_t: str):
    """The transforms of the chunks jd_lo .. jd_hi of cv batch elements each (none when a
    buffer is missing): element b0 + e of a chunk of v is column e of the block and the rows."""
    rank, total, last, half, lead, block, n_complex = _sizes(kind, lengths)
    real = kind in ("RFFT", "IRFFT")
    inverse = int(kind in ("IFFT", "IRFFT"))
    scale = f"({real_t})1" if not inverse else f"({real_t})(1.0 / {total}.0)"
    mk = f"JD_{out_dt.upper()}" if out_dt in ("c64", "c128") else None
    re_, im_ = _parts(in_dt) if in_dt in ("c64", "c128") else ("", "")
    w("const int64_t b_end = jd_hi * cv < nb ? jd_hi * cv : nb;")
    with w.block("for (int64_t b0 = jd_lo * cv; b0 < (failed ? b0 : b_end); b0 += cv)"):
        w("const int64_t v = b_end - b0 < cv ? b_end - b0 : cv;")
        w(f"const {real_t} scale = {scale}; (void)scale;")
        if kind == "RFFT":               # real rows, then the leading axes of the half block
            with w.block(f"for (int64_t q = 0; q < {lead}; q++)"):
                with w.block("for (int64_t e = 0; e < v; e++)"):
                    with w.block(f"for (int64_t k = 0; k < {last}; k++)"):
                        w(f"row[k * v + e] = ({real_t}){src}[(b0 + e) * {total} + q * {last} "
                          "+ k];")
                w(f"jd_rfft{f}_forward(rplan, row, block + 2 * q * {half} * v, v, work);")
            w(f"jd_fft{f}_axes(pl, len, {rank - 1}, {half} * v, block, 0, work);")
        else:
            with w.block("for (int64_t e = 0; e < v; e++)"):
                with w.block(f"for (int64_t i = 0; i < {block}; i++)"):
                    w(f"block[2 * (i * v + e)] = ({real_t}){re_}({src}[(b0 + e) * {block} + i]); "
                      f"block[2 * (i * v + e) + 1] = ({real_t}){im_}({src}[(b0 + e) * {block} "
                      "+ i]);")
            w(f"jd_fft{f}_axes(pl, len, {n_complex}, {half if real else 1} * v, block, "
              f"{inverse}, work);")
        if kind == "IRFFT":              # the leading axes done: complex-to-real rows
            with w.block(f"for (int64_t q = 0; q < {lead}; q++)"):
                w(f"jd_rfft{f}_inverse(rplan, block + 2 * q * {half} * v, row, v, work);")
                with w.block("for (int64_t e = 0; e < v; e++)"):
                    with w.block(f"for (int64_t k = 0; k < {last}; k++)"):
                        w(f"{dst}[(b0 + e) * {total} + q * {last} + k] = "
                          f"({ctype(out_dt)})(row[k * v + e] * scale);")
        else:
            with w.block("for (int64_t e = 0; e < v; e++)"):
                with w.block(f"for (int64_t i = 0; i < {block}; i++)"):
                    w(f"{dst}[(b0 + e) * {block} + i] = {mk}(block[2 * (i * v + e)] * scale, "
                      "block[2 * (i * v + e) + 1] * scale);")
