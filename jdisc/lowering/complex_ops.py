"""complex64 and complex128 in C: the types, their helpers, and the C of every elementwise op
with a complex operand or result (`scalar_ops.render_scalar` hands those here).

Values are C99 `_Complex` (numpy's and XLA's layout: real part, then imaginary part), typedef'd
`jd_c64` / `jd_c128`. <complex.h>'s `I` and `complex` macros are undefined so that no generated
name can ever meet them. Addition, subtraction, negation and `==` are C's own. Multiplication is
the plain four-product formula, as XLA:CPU's (C99 Annex G's recovery of infinities from NaN
products would also keep GCC from vectorising it); division is C's own, whose Annex G recovery
of infinities and zeros is what XLA:CPU gives. Transcendental functions are libm's C99 complex
functions except where their results differ from XLA:CPU's (measured by tests/test_complex.py
on a grid of finite and special values): pow, abs, tan, tanh, log1p, expm1 and sign are
written out, log1p and expm1 also to stay accurate near 0.
"""

from __future__ import annotations

from jdisc.dynamic_passes.ir.dtypes import COMPLEX_PARTS, is_complex
from jdisc.dynamic_passes.ir.program import Op
from jdisc.errors import UnsupportedOpError

C_COMPLEX_TYPES = {"c64": "jd_c64", "c128": "jd_c128"}


def _functions(t: str) -> str:
    """The helpers of one complex dtype (`t` is c64 or c128)."""
    ct = C_COMPLEX_TYPES[t]
    r = "float" if t == "c64" else "double"
    s = "f" if t == "c64" else ""
    mk = f"JD_{t.upper()}"
    re, im = f"creal{s}", f"cimag{s}"
    return f"""\
static inline {ct} jd_cmul_{t}({ct} a, {ct} b) {{
  const {r} ar = {re}(a), ai = {im}(a), br = {re}(b), bi = {im}(b);
  return {mk}(ar * br - ai * bi, ar * bi + ai * br);
}}
static inline {ct} jd_cblend_{t}(int c, {ct} a, {ct} b) {{
  return {mk}(jd_blend_f{'32' if t == 'c64' else '64'}(c, {re}(a), {re}(b)),
              jd_blend_f{'32' if t == 'c64' else '64'}(c, {im}(a), {im}(b)));
}}
static inline {r} jd_cabs_{t}({ct} a) {{
  const {r} x = {re}(a), y = {im}(a);
  return (x != x || y != y) ? NAN : hypot{s}(x, y);
}}
static inline {ct} jd_crsqrt_{t}({ct} a) {{ return 1 / csqrt{s}(a); }}
static inline {ct} jd_cpow_{t}({ct} a, {ct} b) {{
  if (b == 0 || a == 1) return {mk}(1, 0);
  const {r} c = {re}(b), d = {im}(b), arg = atan2{s}({im}(a), {re}(a));
  const {r} lnr = log{s}(hypot{s}({re}(a), {im}(a))), q = c * arg + d * lnr;
  const {r} m = exp{s}(c * lnr - d * arg);
  return {mk}(m * cos{s}(q), m * sin{s}(q));
}}
static inline {ct} jd_clog1p_{t}({ct} a) {{
  const {r} x = {re}(a), y = {im}(a);
  if (!(fabs{s}(x) < ({r})1e-4 && fabs{s}(y) < ({r})1e-4)) return clog{s}({mk}(x + 1, y));
  return {mk}(({r})0.5 * log1p{s}(x * (x + 2) + y * y), atan2{s}(y, x + 1));
}}
static inline {ct} jd_cexpm1_{t}({ct} a) {{
  const {r} x = {re}(a), y = {im}(a);
  if (y == 0) return {mk}(expm1{s}(x), y);          /* XLA: NaN + 0i -> NaN + 0i */
  if (!isfinite(y)) return {mk}(NAN, NAN);           /* XLA: cos(inf) poisons both parts */
  if (!(fabs{s}(x) < 1 && fabs{s}(y) < 1)) return cexp{s}(a) - 1;
  const {r} h = sin{s}(y / 2);
  return {mk}(expm1{s}(x) * cos{s}(y) - 2 * h * h, exp{s}(x) * sin{s}(y));
}}
/* tanh(+-0 + inf i), tanh(+-0 + NaN i) and tan(+-inf + 0i), tan(NaN + 0i) are NaN + NaN i in
 * XLA (C99 keeps the zero) */
static inline {ct} jd_ctanh_{t}({ct} a) {{
  if ({re}(a) == 0 && !isfinite({im}(a))) return {mk}(NAN, NAN);
  return ctanh{s}(a);
}}
static inline {ct} jd_ctan_{t}({ct} a) {{
  if (!isfinite({re}(a)) && {im}(a) == 0) return {mk}(NAN, NAN);
  return ctan{s}(a);
}}
/* maximum and minimum order complex numbers by real part, then imaginary part (StableHLO) */
static inline {ct} jd_cmax_{t}({ct} a, {ct} b) {{
  return ({re}(a) > {re}(b) || ({re}(a) == {re}(b) && {im}(a) >= {im}(b))) ? a : b;
}}
static inline {ct} jd_cmin_{t}({ct} a, {ct} b) {{
  return ({re}(a) < {re}(b) || ({re}(a) == {re}(b) && {im}(a) <= {im}(b))) ? a : b;
}}
/* atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2)), and the principal cube root */
static inline {ct} jd_catan2_{t}({ct} y, {ct} x) {{
  const {ct} iy = {mk}(-{im}(y), {re}(y));
  const {ct} l = clog{s}((x + iy) / csqrt{s}(jd_cmul_{t}(x, x) + jd_cmul_{t}(y, y)));
  return {mk}({im}(l), -{re}(l));
}}
static inline {ct} jd_ccbrt_{t}({ct} a) {{
  if (a == 0) return a;
  return cexp{s}(clog{s}(a) / 3);
}}
static inline {ct} jd_csign_{t}({ct} a) {{
  const {r} m = jd_cabs_{t}(a);
  if (m != m) return {mk}(NAN, NAN);
  return m == 0 ? {mk}(0, 0) : {mk}({re}(a) / m, {im}(a) / m);
}}
static inline {ct} jd_clogistic_{t}({ct} a) {{
  return 1 / ({mk}(1, 0) + cexp{s}(-a));
}}"""


def _unpack_eigenvectors(t: str) -> str:
    """jd_unpack_eigenvectors_<t>: LAPACK's real geev eigenvectors (row-major n x n, a complex
    conjugate pair j, j+1 stored as the real and imaginary columns) as complex columns."""
    ct, rt, mk = C_COMPLEX_TYPES[t], "float" if t == "c64" else "double", f"JD_{t.upper()}"
    return f"""\
static inline void jd_unpack_eigenvectors_{t}({ct} *out, const {rt} *v, const {rt} *wi,
                                               int64_t n) {{
  for (int64_t j = 0; j < n; j++) {{
    if (wi[j] != 0 && j + 1 < n) {{
      for (int64_t r = 0; r < n; r++) {{
        out[r * n + j] = {mk}(v[r * n + j], v[r * n + j + 1]);
        out[r * n + j + 1] = {mk}(v[r * n + j], -v[r * n + j + 1]);
      }}
      j++;
    }} else {{
      for (int64_t r = 0; r < n; r++) out[r * n + j] = {mk}(v[r * n + j], 0);
    }}
  }}
}}"""


COMPLEX_C = "\n".join([
    "#include <complex.h>\n#undef I\n#undef complex",
    "typedef float _Complex jd_c64;",
    "typedef double _Complex jd_c128;",
    "/* a complex value from its parts; a constant expression (static initialisers use it) */",
    "#define JD_C64(re, im) __builtin_complex((float)(re), (float)(im))",
    "#define JD_C128(re, im) __builtin_complex((double)(re), (double)(im))",
    _functions("c64"), _functions("c128"), _unpack_eigenvectors("c64"),
    _unpack_eigenvectors("c128")])


def _s(t: str) -> str:
    return "f" if t == "c64" else ""


def _libm(name: str):
    """A C99 complex libm function (`cexpf` for c64, `cexp` for c128)."""
    return lambda a, dts, out, op: f"c{name}{_s(dts[0])}({', '.join(a)})"


def _helper(name: str):
    return lambda a, dts, out, op: f"jd_c{name}_{dts[0]}({', '.join(a)})"


def _compare(a, dts, out, op):
    direction = op.attrs["comparison_direction"]
    if direction not in ("EQ", "NE"):
        raise UnsupportedOpError(f"stablehlo.compare {direction} on {dts[0]} at {op.loc}: "
                                 f"complex numbers are not ordered")
    return f"({a[0]} {'==' if direction == 'EQ' else '!='} {a[1]})"


def _select(a, dts, out, op):
    return f"jd_cblend_{out}({a[0]}, {a[1]}, {a[2]})"


def _real_part(a, dts, out, op):
    return f"creal{_s(dts[0])}({a[0]})"


def _imag_part(a, dts, out, op):
    return f"cimag{_s(dts[0])}({a[0]})"


def _make(a, dts, out, op):
    return f"JD_{out.upper()}({a[0]}, {a[1]})"


COMPLEX_OPS = {
    "add": lambda a, dts, out, op: f"({a[0]} + {a[1]})",
    "subtract": lambda a, dts, out, op: f"({a[0]} - {a[1]})",
    "negate": lambda a, dts, out, op: f"(-({a[0]}))",
    # division: C's own, with Annex G's recovery of infinities and zeros (XLA's results)
    "multiply": _helper("mul"), "divide": lambda a, dts, out, op: f"({a[0]} / {a[1]})",
    "abs": _helper("abs"),
    "sign": _helper("sign"), "rsqrt": _helper("rsqrt"), "log_plus_one": _helper("log1p"),
    "exponential_minus_one": _helper("expm1"), "logistic": _helper("logistic"),
    "exponential": _libm("exp"), "log": _libm("log"), "sqrt": _libm("sqrt"),
    "sine": _libm("sin"), "cosine": _libm("cos"), "tan": _helper("tan"), "tanh": _helper("tanh"),
    "power": _helper("pow"), "maximum": _helper("max"), "minimum": _helper("min"),
    "atan2": _helper("atan2"), "cbrt": _helper("cbrt"),
    "compare": _compare, "select": _select, "real": _real_part, "imag": _imag_part,
    "complex": _make,
}


def render_complex(op: Op, args: list[str], in_dtypes: list[str], out_dtype: str) -> str:
    """The C of an elementwise op whose operands or result are complex (not convert)."""
    fn = COMPLEX_OPS.get(op.name)
    if fn is None:
        raise UnsupportedOpError(f"stablehlo.{op.name} on complex numbers at {op.loc}")
    return fn(args, in_dtypes, out_dtype, op)


def convert_complex(x: str, src: str, out: str, real_convert) -> str:
    """stablehlo.convert with a complex source or result: complex -> complex casts both parts,
    complex -> real keeps the real part (then converts it as that real type), real -> complex
    has a zero imaginary part. `real_convert(expr, src, dst)` converts between real types."""
    if is_complex(src) and is_complex(out):
        return f"(({C_COMPLEX_TYPES[out]})({x}))"
    if is_complex(src):
        return real_convert(f"creal{_s(src)}({x})", COMPLEX_PARTS[src], out)
    part = COMPLEX_PARTS[out]
    return f"JD_{out.upper()}({real_convert(x, src, part)}, 0)"
