"""The C renderer's table: StableHLO elementwise op -> C expression over rendered operands.

A backend changes a few entries (intrinsics, fast math) rather than the kernel emitter. Integer
semantics follow XLA on CPU: signed overflow wraps (-fwrapv), x/0 == -1, x%0 == x,
INT_MIN/-1 == INT_MIN, float->int conversion saturates and maps NaN to 0.
"""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.ir import Op, is_float, is_unsigned
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cdtype import INT_BITS, ctype
from jdisc.lowering.cmath import C_MATH, VECTOR_FUNCTIONS

Render = Callable[[list[str], list[str], str, Op], str]


def _fn(name: str) -> Render:
    """A libm function: `tanhf` for f32, `tanh` for f64."""
    def render(a, dts, out, op):
        if not is_float(dts[0]):
            raise UnsupportedOpError(f"stablehlo.{op.name} on {dts[0]} at {op.loc}")
        return f"{name}{'f' if dts[0] == 'f32' else ''}({', '.join(a)})"
    return render


def _bin(sym: str) -> Render:
    return lambda a, dts, out, op: f"({a[0]} {sym} {a[1]})"


def _int_or_float(int_fn: str, float_expr: Render) -> Render:
    def render(a, dts, out, op):
        if is_float(dts[0]):
            return float_expr(a, dts, out, op)
        return f"{int_fn}_{dts[0]}({a[0]}, {a[1]})"
    return render


def _minmax(which: str) -> Render:
    def render(a, dts, out, op):
        if is_float(dts[0]):
            return f"jd_f{which}_{dts[0]}({a[0]}, {a[1]})"
        cmp = ">" if which == "max" else "<"
        return f"(({a[0]}) {cmp} ({a[1]}) ? ({a[0]}) : ({a[1]}))"
    return render


def _logic(int_sym: str) -> Render:
    return lambda a, dts, out, op: f"({a[0]} {int_sym} {a[1]})"


def _not(a, dts, out, op):
    return f"(!{a[0]})" if dts[0] == "i1" else f"(({ctype(out)})~{a[0]})"


def _abs(a, dts, out, op):
    if is_float(dts[0]):
        return f"fabs{'f' if dts[0] == 'f32' else ''}({a[0]})"
    if is_unsigned(dts[0]):
        return a[0]
    return f"(({a[0]}) < 0 ? ({ctype(out)})-({a[0]}) : ({a[0]}))"


def _sign(a, dts, out, op):
    x = a[0]
    if is_float(dts[0]):
        t = ctype(dts[0])
        return f"(({x}) > 0 ? ({t})1 : ({x}) < 0 ? ({t})-1 : ({x}))"
    if is_unsigned(dts[0]):
        return f"(({ctype(out)})(({x}) != 0))"
    return f"(({ctype(out)})((({x}) > 0) - (({x}) < 0)))"


def _compare(a, dts, out, op):
    sym = {"EQ": "==", "NE": "!=", "GE": ">=", "GT": ">", "LE": "<=", "LT": "<"}[
        op.attrs["comparison_direction"]]
    if op.attrs.get("compare_type") == "TOTALORDER" and dts[0] in ("f32", "f64"):
        # IEEE total order: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN
        return f"(jd_total_{dts[0]}({a[0]}) {sym} jd_total_{dts[0]}({a[1]}))"
    if op.attrs.get("compare_type") == "TOTALORDER" and is_float(dts[0]):
        raise UnsupportedOpError(f"compare with TOTALORDER on {dts[0]} at {op.loc}")
    return f"({a[0]} {sym} {a[1]})"


def _convert(a, dts, out, op):
    src = dts[0]
    x = a[0]
    if out == "i1":
        return f"(({x}) != 0)"
    if is_float(src) and not is_float(out):
        return f"jd_{src}_to_{out}({x})"
    return f"(({ctype(out)})({x}))"


def _power(a, dts, out, op):
    if is_float(dts[0]):
        return _fn("pow")(a, dts, out, op)
    return f"jd_ipow_{dts[0]}({a[0]}, {a[1]})"


def _logistic(a, dts, out, op):
    one = "1.0f" if dts[0] == "f32" else "1.0"
    e = "expf" if dts[0] == "f32" else "exp"
    return f"({one} / ({one} + {e}(-({a[0]}))))"


def _rsqrt(a, dts, out, op):
    one = "1.0f" if dts[0] == "f32" else "1.0"
    return f"({one} / {_fn('sqrt')(a, dts, out, op)})"


def _is_finite(a, dts, out, op):
    return f"((uint8_t)isfinite({a[0]}))"


def _select(a, dts, out, op):
    return f"(({a[0]}) ? ({a[1]}) : ({a[2]}))"


def _clamp(a, dts, out, op):
    lo, x, hi = a
    mx, mn = _minmax("max"), _minmax("min")
    return mn([mx([x, lo], dts[1:2] * 2, out, op), hi], dts[1:2] * 2, out, op)


def _float_mod(a, dts, out, op):
    return _fn("fmod")(a, dts, out, op)


SCALAR_OPS: dict[str, Render] = {
    "add": _bin("+"), "subtract": _bin("-"), "multiply": _bin("*"),
    "divide": _int_or_float("jd_div", _bin("/")),
    "remainder": _int_or_float("jd_rem", _float_mod),
    "maximum": _minmax("max"), "minimum": _minmax("min"),
    "negate": lambda a, dts, out, op: f"(({ctype(out)})-({a[0]}))",
    "abs": _abs, "sign": _sign,
    "exponential": _fn("exp"), "exponential_minus_one": _fn("expm1"), "log": _fn("log"),
    "log_plus_one": _fn("log1p"), "tanh": _fn("tanh"), "sqrt": _fn("sqrt"), "cbrt": _fn("cbrt"),
    "sine": _fn("sin"), "cosine": _fn("cos"), "tan": _fn("tan"), "atan2": _fn("atan2"),
    "floor": _fn("floor"), "ceil": _fn("ceil"), "round_nearest_even": _fn("nearbyint"),
    "round_nearest_afz": _fn("round"),
    "logistic": _logistic, "rsqrt": _rsqrt, "power": _power, "is_finite": _is_finite,
    "and": _logic("&"), "or": _logic("|"), "xor": _logic("^"), "not": _not,
    "compare": _compare, "convert": _convert, "select": _select, "clamp": _clamp,
}


def render_scalar(op: Op, args: list[str], in_dtypes: list[str], out_dtype: str) -> str:
    if out_dtype == "f32" and op.name in VECTOR_FUNCTIONS and in_dtypes[0] == "f32":
        return f"{VECTOR_FUNCTIONS[op.name]}({args[0]})"   # vectorisable, within 2 ulp
    try:
        fn = SCALAR_OPS[op.name]
    except KeyError:
        raise UnsupportedOpError(f"stablehlo.{op.name} at {op.loc} has no C rendering") from None
    return fn(args, in_dtypes, out_dtype, op)


def c_prelude() -> str:
    """Helpers the rendered expressions call, defined once per generated file."""
    lines = [
        "static inline int32_t jd_total_f32(float x) { int32_t b; memcpy(&b, &x, 4); "
        "return b < 0 ? b ^ 0x7fffffff : b; }",
        "static inline int64_t jd_total_f64(double x) { int64_t b; memcpy(&b, &x, 8); "
        "return b < 0 ? b ^ 0x7fffffffffffffffLL : b; }",
    ]
    for t, ct in (("f32", "float"), ("f64", "double")):
        lines.append(f"static inline {ct} jd_fmax_{t}({ct} a, {ct} b) "
                     f"{{ return (a != a || a > b) ? a : (b != b ? b : (a == b && !signbit(a)) ? a : b); }}")
        lines.append(f"static inline {ct} jd_fmin_{t}({ct} a, {ct} b) "
                     f"{{ return (a != a || a < b) ? a : (b != b ? b : (a == b && signbit(a)) ? a : b); }}")
    for t, bits in INT_BITS.items():
        ct = ctype(t)
        if t.startswith("u"):
            lines.append(f"static inline {ct} jd_div_{t}({ct} a, {ct} b) "
                         f"{{ return b == 0 ? ({ct})~({ct})0 : ({ct})(a / b); }}")
            lines.append(f"static inline {ct} jd_rem_{t}({ct} a, {ct} b) "
                         f"{{ return b == 0 ? a : ({ct})(a % b); }}")
        else:
            mn = f"(({ct})(-{2 ** (bits - 1) - 1}LL - 1))"
            lines.append(f"static inline {ct} jd_div_{t}({ct} a, {ct} b) "
                         f"{{ return b == 0 ? ({ct})-1 : (a == {mn} && b == -1) ? a : ({ct})(a / b); }}")
            lines.append(f"static inline {ct} jd_rem_{t}({ct} a, {ct} b) "
                         f"{{ return b == 0 ? a : (b == -1) ? ({ct})0 : ({ct})(a % b); }}")
        lines.append(f"static inline {ct} jd_ipow_{t}({ct} b, {ct} e) {{ "
                     + ("if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0); "
                        if not t.startswith("u") else "")
                     + f"{ct} r = 1; while (e) {{ if (e & 1) r = ({ct})(r * b); "
                       f"b = ({ct})(b * b); e >>= 1; }} return r; }}")
        for src, fct in (("f32", "float"), ("f64", "double")):
            lo = 0 if t.startswith("u") else -(2 ** (bits - 1))
            hi = 2 ** bits - 1 if t.startswith("u") else 2 ** (bits - 1) - 1
            lo_c = "0" if lo == 0 else f"-{-lo - 1}LL - 1"
            lines.append(
                f"static inline {ct} jd_{src}_to_{t}({fct} x) {{ "
                f"if (x != x) return 0; "
                f"if (x <= ({fct}){lo}.0) return ({ct})({lo_c}); "
                f"if (x >= ({fct}){hi}.0) return ({ct}){hi}ULL; "
                f"return ({ct})x; }}")
    return C_MATH + "\n" + "\n".join(lines) + "\n"
