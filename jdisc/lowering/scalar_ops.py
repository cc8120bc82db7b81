"""The C renderer's table: StableHLO elementwise op -> C expression over rendered operands.

A backend changes a few entries (intrinsics, fast math) rather than the kernel emitter. Integer
semantics follow XLA on CPU: signed overflow wraps (-fwrapv), x/0 == -1, x%0 == x,
INT_MIN/-1 == INT_MIN, float->int conversion truncates, saturates and maps NaN to 0 (also from
f16/bf16), shifts by an amount >= the bit width (or negative, read as unsigned) give 0, or the
sign for an arithmetic right shift.

f16/bf16 (see cdtype): every op widens its operands to f32, computes in f32 and rounds the
result back once, as XLA:CPU does (it upcasts each half op and rounds its result; measured bit
for bit on add, mul, div, exp, tanh, sqrt chains). Ops that only pick an operand (select,
maximum, minimum, clamp) and bitcast_convert work on the bit patterns. Conversions follow
XLA:CPU as measured: f64 and integers go to f16/bf16 through f32 (so twice rounded, as XLA);
NaN becomes a quiet NaN with its sign (bf16: payload dropped; f16 from f32: the payload's top
bits kept).
"""

from __future__ import annotations

import functools
import re
from typing import Callable

from jdisc.dynamic_passes.ir.dtypes import is_complex, is_float, is_unsigned
from jdisc.dynamic_passes.ir.ops import SAME_INDEX, SCALAR_REGION_OPS
from jdisc.dynamic_passes.ir.program import Op
from jdisc.errors import UnsupportedOpError
from jdisc.lowering import c_runtime
from jdisc.lowering.cdtype import HALF_FLOATS, INT_BITS, compute_dtype, ctype, narrow, widen
from jdisc.lowering.cmath import C_MATH, VECTOR_FUNCTIONS
from jdisc.lowering.complex_ops import COMPLEX_C, convert_complex, render_complex

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
        # zero, NaN, and a subnormal that DAZ reads as zero: x * 0 gives its signed zero (or
        # NaN), as XLA:CPU; x itself would keep the subnormal's bits
        return f"(({x}) > 0 ? ({t})1 : ({x}) < 0 ? ({t})-1 : ({x}) * ({t})0)"
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
    if src == out:
        return x
    if is_complex(src) or is_complex(out):
        return convert_complex(x, src, out, cast)
    if src in HALF_FLOATS:                  # f16/bf16 -> f32 is exact; go on from f32
        x, src = widen(x, src), "f32"
        if out == "f32":
            return x
    if out == "i1":
        return f"(({x}) != 0)"
    if out in HALF_FLOATS:                  # through f32, as XLA:CPU does (even from f64)
        if src == "f64":
            return f"jd_f64_to_{out}({x})"
        return narrow(x if src == "f32" else f"((float)({x}))", out)
    if is_float(src) and not is_float(out):
        return f"jd_{src}_to_{out}({x})"
    return f"(({ctype(out)})({x}))"


_BIT_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, **INT_BITS}


def _bitcast_convert(a, dts, out, op):
    """Same-width reinterpretation. f16/bf16 are already bit patterns (uint16_t). Between
    widths the op is a kernel of its own (lowering/bitcast.py), never a scalar."""
    src, x = dts[0], a[0]
    if src not in _BIT_WIDTH or out not in _BIT_WIDTH or _BIT_WIDTH[src] != _BIT_WIDTH[out]:
        raise UnsupportedOpError(
            f"stablehlo.bitcast_convert from {src} to {out} at {op.loc}: not an elementwise "
            f"reinterpretation (the bit widths differ)")
    if src in ("f32", "f64"):
        x = f"jd_{src}_bits({x})"
    if out in ("f32", "f64"):
        return f"jd_{out}_from_bits((uint{_BIT_WIDTH[out]}_t)({x}))"
    return f"(({ctype(out)})({x}))"


def _int_helper(name: str) -> Render:
    """`jd_<name>_<dtype>(operands...)`, one of the integer helpers in `c_prelude`."""
    def render(a, dts, out, op):
        if dts[0] not in INT_BITS:
            raise UnsupportedOpError(f"stablehlo.{op.name} on {dts[0]} at {op.loc}")
        return f"jd_{name}_{dts[0]}({', '.join(a)})"
    return render


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
    """A blend of the operands' bits under a mask, not `c ? x : y`: both operands are
    evaluated and nothing branches, so no load is conditional (GCC 12's masked-load bug,
    custom_calls/probe.py) and the kernel keeps loop if-conversion (a ReLU's backward
    `where(x > 0, g, 0)` vectorised: 5.9 -> 0.3 ms on 1.4M elements). Both operands are
    in bounds whenever the select's result is (they have its shape), and evaluating an
    operand has no side effect (integer division by 0 is defined: scalar ops' XLA rules)."""
    bits = _BLEND_WIDTH[out]
    if out in ("f32", "f64"):
        return f"jd_blend_{out}({a[0]}, {a[1]}, {a[2]})"
    blended = f"jd_blend_u{bits}({a[0]}, (uint{bits}_t)({a[1]}), (uint{bits}_t)({a[2]}))"
    return blended if ctype(out) == f"uint{bits}_t" else f"(({ctype(out)}){blended})"


_BLEND_WIDTH = {"f32": 32, "f64": 64, "f16": 16, "bf16": 16, "i1": 8, **INT_BITS}
# a select without a branch. Bytes (bools, int8) as b ^ ((a ^ b) & m): GCC 12 vectorises a
# loop that mixes these with 64-bit indices in that form and not in the (a & m) | (b & ~m) one
# (an attention mask's select of bools ran scalar: benchmarks/zoo_speed.py, nnx's Llama)
_BLEND_C = "\n".join(
    ["static inline uint8_t jd_blend_u8(int c, uint8_t a, uint8_t b) "
     "{ return (uint8_t)(b ^ ((a ^ b) & (uint8_t)-(uint8_t)(c != 0))); }"]
    + [f"static inline uint{b}_t jd_blend_u{b}(int c, uint{b}_t a, uint{b}_t b) "
       f"{{ const uint{b}_t m = (uint{b}_t)-(uint{b}_t)(c != 0); "
       f"return (uint{b}_t)((a & m) | (b & (uint{b}_t)~m)); }}" for b in (16, 32, 64)]
    + [f"static inline {ct} jd_blend_{t}(int c, {ct} a, {ct} b) "
       f"{{ return jd_{t}_from_bits(jd_blend_u{b}(c, jd_{t}_bits(a), jd_{t}_bits(b))); }}"
       for t, ct, b in (("f32", "float", 32), ("f64", "double", 64))])


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
    "shift_left": _int_helper("shl"), "shift_right_logical": _int_helper("shrl"),
    "shift_right_arithmetic": _int_helper("shra"), "popcnt": _int_helper("popcnt"),
    "count_leading_zeros": _int_helper("clz"), "bitcast_convert": _bitcast_convert,
    # real/imag of a real-typed value (complex ones: complex_ops.py, as is `complex`)
    "real": lambda a, dts, out, op: a[0],
    "imag": lambda a, dts, out, op: f"(({ctype(out)})0)",
    "complex": lambda a, dts, out, op: render_complex(op, a, dts, out),
    "reduce_precision": lambda a, dts, out, op: (
        f"jd_reduce_precision_{dts[0]}({a[0]}, {op.attrs['exponent_bits']}, "
        f"{op.attrs['mantissa_bits']})"),
}

# the registry's elementwise ops all have their C here (map's is its region, rendered inline)
_MISSING = SAME_INDEX - SCALAR_REGION_OPS - SCALAR_OPS.keys()
assert not _MISSING, f"elementwise ops without C in SCALAR_OPS: {sorted(_MISSING)}"

# f16/bf16 ops that only choose among their operands' bits (no widening, no rounding), and
# convert, which handles halves itself
_ON_HALF_BITS = frozenset({"select", "maximum", "minimum", "clamp", "bitcast_convert", "convert"})


# reduce_precision: round the mantissa to `m` bits (nearest even), then send exponents outside
# an `e`-bit range to infinity or (signed) zero; NaN stays NaN.
_REDUCE_PRECISION = "\n".join(
    f"""static inline {ct} jd_reduce_precision_{t}({ct} x, int e, int m) {{
  {ut} u; memcpy(&u, &x, sizeof u);
  const {ut} sign = ({ut})1 << {bits - 1}, expmask = (({ut})1 << {ebits}) - 1;
  if ((u & ~sign) > (expmask << {mbits})) return x;
  if (m < {mbits}) {{
    const int shift = {mbits} - m;
    const {ut} last = (u >> shift) & 1;
    u = (u + ((({ut})1 << (shift - 1)) - 1) + last) & ~((({ut})1 << shift) - 1);
  }}
  if (e < {ebits}) {{
    const int64_t exp = (int64_t)((u >> {mbits}) & expmask), bias = {(1 << (ebits - 1)) - 1};
    const int64_t reduced = (1LL << (e - 1)) - 1;
    if (exp > bias + reduced) u = (u & sign) | (expmask << {mbits});
    else if (exp <= bias - reduced) u = u & sign;
  }}
  memcpy(&x, &u, sizeof u); return x;
}}""" for t, ct, ut, bits, ebits, mbits in (("f32", "float", "uint32_t", 32, 8, 23),
                                            ("f64", "double", "uint64_t", 64, 11, 52)))


def render_scalar(op: Op, args: list[str], in_dtypes: list[str], out_dtype: str) -> str:
    if op.name != "convert" and (is_complex(out_dtype) or any(map(is_complex, in_dtypes))):
        return render_complex(op, args, in_dtypes, out_dtype)
    if op.name not in _ON_HALF_BITS and (
            out_dtype in HALF_FLOATS or any(d in HALF_FLOATS for d in in_dtypes)):
        expr = render_scalar(op, [widen(a, d) for a, d in zip(args, in_dtypes)],
                             [compute_dtype(d) for d in in_dtypes], compute_dtype(out_dtype))
        return narrow(expr, out_dtype)
    if out_dtype == "f32" and op.name in VECTOR_FUNCTIONS and in_dtypes[0] == "f32":
        return f"{VECTOR_FUNCTIONS[op.name]}({args[0]})"   # vectorisable, within 2 ulp
    try:
        fn = SCALAR_OPS[op.name]
    except KeyError:
        raise UnsupportedOpError(f"stablehlo.{op.name} at {op.loc} has no C rendering") from None
    return fn(args, in_dtypes, out_dtype, op)


def cast(expr: str, src: str, dst: str) -> str:
    """A C value of dtype `src` converted to `dst` with stablehlo.convert's semantics."""
    return _convert([expr], [src], dst, None)


def arith(sym: str, a: str, b: str, dtype: str) -> str:
    """`a sym b` over stored values of `dtype` (reductions combine with it): f16/bf16 computed
    in f32 and rounded back, so an accumulator of a half type rounds after every step, as
    XLA:CPU's does."""
    if dtype in HALF_FLOATS:
        return narrow(f"{widen(a, dtype)} {sym} {widen(b, dtype)}", dtype)
    if is_complex(dtype) and sym == "*":
        return f"jd_cmul_{dtype}({a}, {b})"
    return f"{a} {sym} {b}"


# f16 and bf16 <-> f32, bit exact: round to nearest even, overflow to inf, f16 subnormals
# exact both ways. Branch-free (ternaries only) so loops over them vectorise.
HALF_C = c_runtime.source("jd_half.h")


def _half_prelude() -> list[str]:
    """max/min on stored f16/bf16 values: the chosen operand's bits, no rounding."""
    lines = []
    for t in HALF_FLOATS:
        for which, cmp, neg in (("max", ">", "!"), ("min", "<", "")):
            lines.append(
                f"static inline jd_{t} jd_f{which}_{t}(jd_{t} a, jd_{t} b) {{ "
                f"const float x = jd_{t}_to_f32(a), y = jd_{t}_to_f32(b); "
                f"return (x != x || x {cmp} y) ? a : (y != y ? b : "
                f"(x == y && {neg}signbit(x)) ? a : b); }}")
    return lines


def _int_bit_prelude(t: str, bits: int) -> list[str]:
    """Shifts (XLA: an amount >= bits, negative ones read as unsigned, gives 0, or the sign
    for an arithmetic shift), popcount and count-leading-zeros for one integer dtype."""
    ct, ut, st = ctype(t), f"uint{bits}_t", f"int{bits}_t"
    wide = "uint64_t" if bits == 64 else "uint32_t"   # no promotion to signed int
    sfx, wbits = ("ll", 64) if bits == 64 else ("", 32)
    amount = f"(({ut})b)"
    return [
        f"static inline {ct} jd_shl_{t}({ct} a, {ct} b) {{ return {amount} >= {bits} ? 0 : "
        f"({ct})({ut})(({wide})({ut})a << {amount}); }}",
        f"static inline {ct} jd_shrl_{t}({ct} a, {ct} b) {{ return {amount} >= {bits} ? 0 : "
        f"({ct})({ut})(({wide})({ut})a >> {amount}); }}",
        f"static inline {ct} jd_shra_{t}({ct} a, {ct} b) {{ "
        f"return ({ct})(({st})a >> ({amount} >= {bits} ? {bits - 1} : {amount})); }}",
        f"static inline {ct} jd_popcnt_{t}({ct} a) {{ "
        f"return ({ct})__builtin_popcount{sfx}(({wide})({ut})a); }}",
        f"static inline {ct} jd_clz_{t}({ct} a) {{ return ({ut})a == 0 ? ({ct}){bits} : "
        f"({ct})(__builtin_clz{sfx}(({wide})({ut})a) - {wbits - bits}); }}",
    ]


def c_prelude(uses: str) -> str:
    """The helpers the rendered expressions call, defined once per generated file: those whose
    names `uses` (the rest of the program's C) mentions, and those they call in turn."""
    chunks = _helper_chunks()
    return "".join(chunks[i] + "\n" for i in needed_helpers(_helper_index(), uses))


# what a chunk defines: its functions, its types and its macros
_DEFINES = re.compile(r"^(?:static inline [\w\s*]*?\b|typedef [\w\s*]+?\b)(jd_\w+)[(;]"
                      r"|^#define (JD_\w+)\(", re.M)
_MENTIONS = re.compile(r"\b(?:jd|JD)_\w+")


@functools.cache
def _helper_index() -> tuple[dict[str, int], list[set[str]]]:
    """Of the helper chunks: which chunk defines each name, and the names each mentions
    (scanned once per process: every kernel unit's head asks for its helpers)."""
    return _index_chunks(_helper_chunks())


def _index_chunks(chunks: list[str]) -> tuple[dict[str, int], list[set[str]]]:
    """(name -> the index of the chunk that defines it, each chunk's mentioned names)."""
    defined_by = {name: i for i, chunk in enumerate(chunks)
                  for names in _DEFINES.findall(chunk) for name in names if name}
    return defined_by, [set(_MENTIONS.findall(chunk)) for chunk in chunks]


def needed_helpers(index: tuple[dict[str, int], list[set[str]]], uses: str) -> list[int]:
    """The indices, in order, of the chunks (C definitions of `jd_*` helpers, indexed by
    `_index_chunks`) that `uses` needs, transitively. Linear in the size of `uses` and of the
    chunks kept."""
    defined_by, mentions = index
    keep: set[int] = set()
    todo = [defined_by[n] for n in set(_MENTIONS.findall(uses)) if n in defined_by]
    while todo:
        i = todo.pop()
        if i in keep:
            continue
        keep.add(i)
        todo += [defined_by[n] for n in mentions[i] if n in defined_by]
    return sorted(keep)


@functools.cache
def _helper_chunks() -> list[str]:
    """Every helper definition, one chunk each (a header or group that defines several
    together is one chunk), in an order where each comes after what it calls."""
    lines = [HALF_C, _BLEND_C, COMPLEX_C, _REDUCE_PRECISION] + _half_prelude() + [
        "static inline int32_t jd_total_f32(float x) { int32_t b; memcpy(&b, &x, 4); "
        "return b < 0 ? b ^ 0x7fffffff : b; }",
        "static inline int64_t jd_total_f64(double x) { int64_t b; memcpy(&b, &x, 8); "
        "return b < 0 ? b ^ 0x7fffffffffffffffLL : b; }",
    ]
    for t, ct in (("f32", "float"), ("f64", "double")):
        # NaN wins; max(-0, +0) is +0 and min(-0, +0) is -0, as in XLA. Written so that the
        # vectorised form is a few independent instructions (a reduction's lane chain is one
        # max): equal values, zeros of either sign among them, merge by the AND (max) or OR
        # (min) of their bits; a NaN comes out of a + b. No signbit(): GCC 12 cannot vectorise it.
        ut = "uint32_t" if t == "f32" else "uint64_t"
        for name, pick, merge in (("fmax", ">", "&"), ("fmin", "<", "|")):
            lines.append(
                f"static inline {ct} jd_{name}_{t}({ct} a, {ct} b) {{ {ct} m = a {pick} b ? a : b; "
                f"{ut} ua, ub, um; {ct} z; memcpy(&ua, &a, sizeof a); memcpy(&ub, &b, sizeof b); "
                f"um = ua {merge} ub; memcpy(&z, &um, sizeof z); m = a == b ? z : m; "
                f"return (a != a || b != b) ? a + b : m; }}")
            # the same in bit selects (jd_blend): for kernels that keep their branches
            # (JD_KEEP_BRANCHES), where GCC does not if-convert the form above and runs it
            # as scalar branches, 7x slower in a window kernel's lane loop (codegen.py)
            lines.append(
                f"static inline {ct} jd_{name}_sel_{t}({ct} a, {ct} b) {{ "
                f"{ut} ua = jd_{t}_bits(a), ub = jd_{t}_bits(b); "
                f"{ut} m = jd_blend_u{ut[4:6]}(a {pick} b, ua, ub); "
                f"m = jd_blend_u{ut[4:6]}(a == b, ua {merge} ub, m); "
                f"return jd_blend_{t}(a != a || b != b, a + b, jd_{t}_from_bits(m)); }}")
        # a*b + c, fused (one rounding) where the target has a fast fma (convolution kernels)
        fast = "FP_FAST_FMAF" if t == "f32" else "FP_FAST_FMA"
        lines.append(f"#ifdef {fast}\nstatic inline {ct} jd_fma_{t}({ct} a, {ct} b, {ct} c) "
                     f"{{ return fma{'f' if t == 'f32' else ''}(a, b, c); }}\n#else\n"
                     f"static inline {ct} jd_fma_{t}({ct} a, {ct} b, {ct} c) {{ return a * b + c; }}"
                     f"\n#endif")
    for t, bits in INT_BITS.items():
        ct = ctype(t)
        lines.extend(_int_bit_prelude(t, bits))
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
    return [C_MATH.rstrip("\n")] + lines
