"""The `lapack` op (dynamic_passes/importer/linalg.py) as calls of LAPACKE, the C interface of the LAPACK
in scipy-openblas32: one call per matrix of the batch, through the row-major interface (it
transposes to and from LAPACK's column-major layout, and queries and allocates the
workspace at run time). Inputs are copied into the outputs that LAPACK overwrites in place;
every output is written for every shape (unreferenced ones are zeroed), and each matrix's
`info` is LAPACK's, which jax's own StableHLO turns into NaN results where it must.

LAPACKE's NaN check of its inputs is switched off: jax calls LAPACK without it, so NaN inputs
give LAPACK's results (and jax's NaN selection), not an error code. The one exception is
jax's own: geev refuses non-finite input with info = -4 before calling LAPACK.
"""

from __future__ import annotations

from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.importer.linalg import flag
from jdisc.dynamic_passes.ir.dtypes import is_complex
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.loops import KernelContext

LETTER = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}
# the complex routine of a real one's name
_COMPLEX_NAME = {"orgqr": "ungqr", "syevd": "heevd", "sytrd": "hetrd"}


def size_limits(kernel: Kernel) -> list[Dim]:
    """Sizes that must fit LAPACK's 32-bit integers (checked by the launcher)."""
    op = kernel.root
    return [d for v in op.operands for d in v.shape[-2:]]


def _matrix_dtype(op) -> str:
    return op.operands[3 if op.attrs["routine"] == "gtsv" else 0].dtype


def emit_lapack(ctx: KernelContext) -> None:
    w, op, dim = ctx.w, ctx.kernel.root, ctx.dim
    routine = op.attrs["routine"]
    dt = _matrix_dtype(op)
    if dt not in LETTER:
        raise UnsupportedOpError(f"LAPACK {routine} on {dt} at {op.loc}")
    name = _COMPLEX_NAME.get(routine, routine) if is_complex(dt) else routine
    fn = f"scipy_LAPACKE_{LETTER[dt]}{name}"
    ins, outs = ctx.operands, ctx.outputs
    x = op.operands[3 if routine == "gtsv" else 0]
    w(f"const int64_t nb = {dim(prod(x.shape[:-2]))}, m = {dim(x.shape[-2])}, "
      f"n = {dim(x.shape[-1])};")
    w("#define JD_LD(v) ((v) > 1 ? (lapack_int)(v) : 1)")
    w("scipy_LAPACKE_set_nancheck(0);")
    # zero every output first: LAPACK leaves some unreferenced (u and vt without vectors,
    # vl / vr not asked for), and a failed call may leave any of them half written
    for o, r in zip(outs, op.results):
        size = f"sizeof({ctype(r.dtype)}) * (size_t)({dim(r.num_elements())})"
        w(f"if ({size}) memset({o}, 0, {size});")
    emit = _ROUTINES[routine]
    with w.block("for (int64_t b = 0; b < nb; b++)"):
        emit(w, fn, op, ins, outs, dim, dt)
    w("#undef JD_LD")
    w("return 0;")


def _copy_in(w, out: str, src: str, count: str, dt: str) -> None:
    w(f"jd_copy({out} + b * ({count}), {src} + b * ({count}), sizeof({ctype(dt)}) * "
      f"(size_t)({count}));")


def _potrf(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "n * n", dt)
    w(f"{outs[1]}[b] = {fn}(LAPACK_ROW_MAJOR, '{flag(op, 'uplo', 'L')}', (lapack_int)n, "
      f"{outs[0]} + b * n * n, JD_LD(n));")


def _getrf_geqrf(w, fn, op, ins, outs, dim, dt):
    """LU (pivots, then info) and QR (the Householder scalars; jax reads no info): both take
    an m x n matrix and give one vector of min(m, n)."""
    _copy_in(w, outs[0], ins[0], "m * n", dt)
    w("const int64_t k = m < n ? m : n;")
    info = f"{outs[2]}[b] = " if op.attrs["routine"] == "getrf" else ""
    w(f"{info}{fn}(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, {outs[0]} + b * m * n, "
      f"JD_LD(n), {outs[1]} + b * k);")


def _orgqr(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "m * n", dt)
    w(f"const int64_t k = {dim(op.operands[1].shape[-1])};")
    w(f"{fn}(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, (lapack_int)k, "
      f"{outs[0]} + b * m * n, JD_LD(n), {ins[1]} + b * k);")


def _syevd(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "n * n", dt)
    w(f"{outs[2]}[b] = {fn}(LAPACK_ROW_MAJOR, '{flag(op, 'mode', 'V')}', "
      f"'{flag(op, 'uplo', 'L')}', (lapack_int)n, {outs[0]} + b * n * n, JD_LD(n), "
      f"{outs[1]} + b * n);")


def _gesdd(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "m * n", dt)
    u, vt = op.results[2], op.results[3]
    w(f"const int64_t k = m < n ? m : n, um = {dim(u.shape[-2])}, un = {dim(u.shape[-1])}, "
      f"vm = {dim(vt.shape[-2])}, vn = {dim(vt.shape[-1])};")
    w(f"{outs[4]}[b] = {fn}(LAPACK_ROW_MAJOR, '{flag(op, 'mode', 'A')}', (lapack_int)m, "
      f"(lapack_int)n, {outs[0]} + b * m * n, JD_LD(n), {outs[1]} + b * k, "
      f"{outs[2]} + b * um * un, JD_LD(un), {outs[3]} + b * vm * vn, JD_LD(vn));")


def _nonfinite_check(w, src: str, dt: str) -> None:
    """jax's geev: info = -4, and no LAPACK call, when the matrix has a non-finite entry."""
    if is_complex(dt):
        s = "f" if dt == "c64" else ""
        test = f"isfinite(creal{s}(a[i])) && isfinite(cimag{s}(a[i]))"
    else:
        test = "isfinite(a[i])"
    w(f"const {ctype(dt)} *a = {src} + b * n * n;")
    w("int finite = 1;")
    w(f"for (int64_t i = 0; i < n * n; i++) finite &= {test};")


def _geev(w, fn, op, ins, outs, dim, dt):
    jl, jr = flag(op, "compute_left", "N"), flag(op, "compute_right", "V")
    t = ctype(dt)
    info = outs[-1]
    _nonfinite_check(w, ins[0], dt)
    with w.block("if (!finite)"):
        w(f"{info}[b] = -4;")
        w("continue;")
    copies = 1 if is_complex(dt) else 3       # the matrix; real: also both packed vector sets
    w(f"{t} *work = ({t} *)malloc(sizeof({t}) * (size_t)(n * n * {copies}) + 1);")
    w("if (!work) return 1;   /* the launcher reports it as out of memory */")
    w(f"memcpy(work, a, sizeof({t}) * (size_t)(n * n));")
    if is_complex(dt):
        w_, vl, vr = outs[0], outs[1], outs[2]
        w(f"{info}[b] = {fn}(LAPACK_ROW_MAJOR, '{jl}', '{jr}', (lapack_int)n, work, JD_LD(n), "
          f"{w_} + b * n, {vl} + b * n * n, JD_LD(n), {vr} + b * n * n, JD_LD(n));")
        w("free(work);")
        return
    # real: eigenvalues as (wr, wi); eigenvectors in LAPACK's packed real form, unpacked into
    # complex columns as jax does (a conjugate pair j, j+1: v_j +- i v_{j+1})
    wr, wi, vl, vr = outs[0], outs[1], outs[2], outs[3]
    w(f"{t} *pl = work + n * n, *pr = work + 2 * n * n;")
    w(f"{info}[b] = {fn}(LAPACK_ROW_MAJOR, '{jl}', '{jr}', (lapack_int)n, work, JD_LD(n), "
      f"{wr} + b * n, {wi} + b * n, pl, JD_LD(n), pr, JD_LD(n));")
    cdt = "c64" if dt == "f32" else "c128"
    for job, packed, out in ((jl, "pl", vl), (jr, "pr", vr)):
        if job != "V":
            continue
        with w.block(f"if ({info}[b] == 0)"):
            w(f"jd_unpack_eigenvectors_{cdt}({out} + b * n * n, {packed}, {wi} + b * n, n);")
    w("free(work);")


def _gees(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "n * n", dt)
    mode = flag(op, "mode", "V")
    w("lapack_int sdim = 0;")
    if is_complex(dt):
        t_, z, ev, sd, info = outs
        evs = f"{ev} + b * n"
    else:
        t_, z, wr, wi, sd, info = outs
        evs = f"{wr} + b * n, {wi} + b * n"
    w(f"{info}[b] = {fn}(LAPACK_ROW_MAJOR, '{mode}', 'N', NULL, (lapack_int)n, "
      f"{t_} + b * n * n, JD_LD(n), &sdim, {evs}, {z} + b * n * n, JD_LD(n));")
    w(f"{sd}[b] = sdim;")


def _gehrd(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "n * n", dt)
    low, high = op.attrs.get("low", 1), op.attrs.get("high")
    high_c = "(lapack_int)n" if high is None else f"(lapack_int){int(high)}"
    w("const int64_t k = n > 1 ? n - 1 : 0;")
    w(f"{outs[2]}[b] = {fn}(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int){int(low)}, {high_c}, "
      f"{outs[0]} + b * n * n, JD_LD(n), {outs[1]} + b * k);")


def _sytrd(w, fn, op, ins, outs, dim, dt):
    _copy_in(w, outs[0], ins[0], "n * n", dt)
    w("const int64_t k = n > 1 ? n - 1 : 0;")
    w(f"{outs[4]}[b] = {fn}(LAPACK_ROW_MAJOR, '{flag(op, 'uplo', 'L')}', (lapack_int)n, "
      f"{outs[0]} + b * n * n, JD_LD(n), {outs[1]} + b * n, {outs[2]} + b * k, "
      f"{outs[3]} + b * k);")


def _gtsv(w, fn, op, ins, outs, dim, dt):
    # operands dl, d, du (batch x n; dl[0] and du[n-1] unused) and b (batch x n x nrhs);
    # here m is n and n is nrhs
    for i in range(3):
        _copy_in(w, outs[i], ins[i], "m", op.operands[i].dtype)
    _copy_in(w, outs[3], ins[3], "m * n", dt)
    with w.block("if (m > 0)"):
        w(f"{outs[4]}[b] = {fn}(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, "
          f"{outs[0]} + b * m + 1, {outs[1]} + b * m, {outs[2]} + b * m, "
          f"{outs[3]} + b * m * n, JD_LD(n));")


_ROUTINES = {
    "potrf": _potrf, "getrf": _getrf_geqrf, "geqrf": _getrf_geqrf, "orgqr": _orgqr, "ungqr": _orgqr,
    "syevd": _syevd, "heevd": _syevd, "gesdd": _gesdd, "geev": _geev, "gees": _gees,
    "gehrd": _gehrd, "sytrd": _sytrd, "hetrd": _sytrd, "gtsv": _gtsv,
}
