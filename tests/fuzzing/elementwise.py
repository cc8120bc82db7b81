"""The elementwise ops of the fuzzer's op table: per unary and binary op and operand kind
(float, int, bool), its source template, jax function and facts rule; compares; and round trips
through narrow types (`cvt`). The `Op` entries that use them are built in `fuzzing.ops`."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .facts import (BOOL_FACTS, INT_MAX, INT_MIN, TRANS, U, Facts, Invalid, ffacts, ifacts,
                    products)


def _tanh(i):
    return ffacts(math.tanh(i.lo), math.tanh(i.hi), i.err + TRANS)


def _exp(i):
    if i.hi > 4:
        raise Invalid("exp of a large value")
    return ffacts(math.exp(i.lo), math.exp(i.hi), math.exp(i.hi) * (i.err + TRANS))


def _log(i):
    if i.lo < 0.1:
        raise Invalid("log near 0")
    lo, hi = math.log(i.lo), math.log(i.hi)
    return ffacts(lo, hi, i.err / i.lo + TRANS * max(1, abs(lo), abs(hi)))


def _log1p(i):
    if i.lo < -0.5:
        raise Invalid("log1p near -1")
    lo, hi = math.log1p(i.lo), math.log1p(i.hi)
    return ffacts(lo, hi, i.err / (1 + i.lo) + TRANS * max(1, abs(lo), abs(hi)))


def _sqrt(i):
    if i.lo < 0.05:
        raise Invalid("sqrt near 0")
    return ffacts(math.sqrt(i.lo), math.sqrt(i.hi),
                  i.err / (2 * math.sqrt(i.lo)) + 2 * U * math.sqrt(i.hi))


def _rsqrt(i):
    if i.lo < 0.1:
        raise Invalid("rsqrt near 0")
    return ffacts(1 / math.sqrt(i.hi), 1 / math.sqrt(i.lo),
                  0.5 * i.err * i.lo ** -1.5 + TRANS / math.sqrt(i.lo))


def _recip(i):
    m = min(abs(i.lo), abs(i.hi))
    if i.lo * i.hi <= 0 or m < 0.25:
        raise Invalid("1/x near 0")
    return ffacts(1 / i.lo, 1 / i.hi, 1.1 * i.err / m ** 2 + 2 * U / m)


def _exact_only(fn):
    def rule(i):
        if i.err:
            raise Invalid("discontinuous op of an inexact value")
        return fn(i)
    return rule


def _abs(i):
    lo = 0.0 if i.lo <= 0 <= i.hi else min(abs(i.lo), abs(i.hi))
    return Facts(lo, i.mag, i.err)


def _square(i):
    lo = 0.0 if i.lo <= 0 <= i.hi else min(i.lo * i.lo, i.hi * i.hi)
    return ffacts(lo, i.mag ** 2, 2 * i.mag * i.err + i.err ** 2 + 2 * U * i.mag ** 2)


def _sigmoid(x):
    return 0.5 * (1 + math.tanh(x / 2))


def _sincos(i):
    if i.mag > 100:
        raise Invalid("sin/cos of a large argument")
    return Facts(-1.0, 1.0, i.err + TRANS)


# name: (source template, jax function, facts rule)
FLOAT_UNARY = {
    "neg": ("-{0}", lambda x: -x, lambda i: Facts(-i.hi, -i.lo, i.err)),
    "abs": ("jnp.abs({0})", jnp.abs, _abs),
    "square": ("jnp.square({0})", jnp.square, _square),
    "tanh": ("jnp.tanh({0})", jnp.tanh, _tanh),
    "sin": ("jnp.sin({0})", jnp.sin, _sincos),
    "cos": ("jnp.cos({0})", jnp.cos, _sincos),
    "sigmoid": ("jax.nn.sigmoid({0})", jax.nn.sigmoid,
                lambda i: ffacts(_sigmoid(i.lo), _sigmoid(i.hi), i.err / 4 + TRANS)),
    "exp": ("jnp.exp({0})", jnp.exp, _exp),
    "log": ("jnp.log({0})", jnp.log, _log),
    "log1p": ("jnp.log1p({0})", jnp.log1p, _log1p),
    "sqrt": ("jnp.sqrt({0})", jnp.sqrt, _sqrt),
    "rsqrt": ("lax.rsqrt({0})", lax.rsqrt, _rsqrt),
    "recip": ("1.0 / {0}", lambda x: 1.0 / x, _recip),
    "floor": ("jnp.floor({0})", jnp.floor,
              _exact_only(lambda i: Facts(math.floor(i.lo), math.floor(i.hi)))),
    "round": ("jnp.round({0})", jnp.round,
              _exact_only(lambda i: Facts(round(i.lo) - 1, round(i.hi) + 1))),
    "sign": ("jnp.sign({0})", jnp.sign, _exact_only(lambda i: Facts(-1.0, 1.0))),
    "to_int": ("{0}.astype(jnp.int32)", lambda x: x.astype(jnp.int32),
               _exact_only(lambda i: ifacts(int(i.lo), int(i.hi)))),
}


def _int_abs(i):
    return ifacts(0, max(abs(i.lo), abs(i.hi))) if i.lo > INT_MIN else ifacts(INT_MIN, INT_MAX)


def _clz_facts(i):
    # XLA's constant folder gets clz of a negative number wrong (clz(-2) = -32 where the
    # compiled kernel, numpy and jdisc give 0: test_bug_classes), and a program over static
    # shapes is folded: the reference is only trusted on non-negative operands
    if i.lo < 0:
        raise Invalid("clz of a possibly negative value (XLA's constant folder is wrong there)")
    return ifacts(0, 32)


INT_UNARY = {
    "neg": ("-{0}", lambda x: -x, lambda i: ifacts(-i.hi, -i.lo)),
    "abs": ("jnp.abs({0})", jnp.abs, _int_abs),
    "sign": ("jnp.sign({0})", jnp.sign, lambda i: ifacts(-1, 1)),
    "invert": ("~{0}", lambda x: ~x, lambda i: ifacts(~int(i.hi), ~int(i.lo))),
    "popcnt": ("lax.population_count({0})", lax.population_count, lambda i: ifacts(0, 32)),
    "clz": ("lax.clz({0})", lax.clz, lambda i: _clz_facts(i)),
    "clip": ("jnp.clip({0}, -5, 50)", lambda x: jnp.clip(x, -5, 50),
             lambda i: ifacts(min(max(i.lo, -5), 50), max(min(i.hi, 50), -5))),
    "to_float": ("{0}.astype(jnp.float32)", lambda x: x.astype(jnp.float32),
                 lambda i: ffacts(i.lo, i.hi, 0 if i.mag <= 2 ** 24 else U * i.mag)),
}

BOOL_UNARY = {
    "not": ("~{0}", lambda x: ~x, lambda i: BOOL_FACTS),
    "to_float": ("{0}.astype(jnp.float32)", lambda x: x.astype(jnp.float32),
                 lambda i: Facts(0.0, 1.0)),
    "to_int": ("{0}.astype(jnp.int32)", lambda x: x.astype(jnp.int32),
               lambda i: ifacts(0, 1)),
}


def fadd(f, g, sign=1):
    lo = f.lo + (g.lo if sign > 0 else -g.hi)
    hi = f.hi + (g.hi if sign > 0 else -g.lo)
    return ffacts(lo, hi, f.err + g.err + 2 * U * max(abs(lo), abs(hi)))


def _fmul(f, g):
    ps = products(f, g)
    m = max(map(abs, ps))
    return ffacts(min(ps), max(ps), f.err * g.mag + g.err * f.mag + f.err * g.err + 2 * U * m)


def _fdiv(f, g):
    return _fmul(f, _recip(g)) if g.err == 0 else _fdiv_inexact(f, g)


def _fdiv_inexact(f, g):
    r = _recip(Facts(g.lo, g.hi))                 # 1/g's range; its error below, first order
    m = min(abs(g.lo), abs(g.hi))
    out = _fmul(f, r)
    return Facts(out.lo, out.hi, out.err + 1.1 * f.mag * g.err / m ** 2)


FLOAT_BINARY = {
    "add": ("{0} + {1}", lambda x, y: x + y, fadd),
    "sub": ("{0} - {1}", lambda x, y: x - y, lambda f, g: fadd(f, g, -1)),
    "mul": ("{0} * {1}", lambda x, y: x * y, _fmul),
    "div": ("{0} / {1}", lambda x, y: x / y, _fdiv),
    "max": ("jnp.maximum({0}, {1})", jnp.maximum,
            lambda f, g: Facts(max(f.lo, g.lo), max(f.hi, g.hi), max(f.err, g.err))),
    "min": ("jnp.minimum({0}, {1})", jnp.minimum,
            lambda f, g: Facts(min(f.lo, g.lo), min(f.hi, g.hi), max(f.err, g.err))),
}


def _imag(f, g):
    m = max(abs(f.lo), abs(f.hi), 1)
    return ifacts(-m - 1, m + 1)


INT_BINARY = {
    "add": ("{0} + {1}", lambda x, y: x + y, lambda f, g: ifacts(f.lo + g.lo, f.hi + g.hi)),
    "sub": ("{0} - {1}", lambda x, y: x - y, lambda f, g: ifacts(f.lo - g.hi, f.hi - g.lo)),
    "mul": ("{0} * {1}", lambda x, y: x * y, lambda f, g: ifacts(min(products(f, g)),
                                                                max(products(f, g)))),
    "max": ("jnp.maximum({0}, {1})", jnp.maximum,
            lambda f, g: ifacts(max(f.lo, g.lo), max(f.hi, g.hi))),
    "min": ("jnp.minimum({0}, {1})", jnp.minimum,
            lambda f, g: ifacts(min(f.lo, g.lo), min(f.hi, g.hi))),
    "and": ("{0} & {1}", lambda x, y: x & y, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    "or": ("{0} | {1}", lambda x, y: x | y, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    "xor": ("{0} ^ {1}", lambda x, y: x ^ y, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    # XLA defines x/0, x%0, INT_MIN/-1 and shifts by any amount; jdisc must match
    "div": ("lax.div({0}, {1})", lax.div, _imag),
    "rem": ("lax.rem({0}, {1})", lax.rem, _imag),
    "floordiv": ("{0} // {1}", lambda x, y: x // y, _imag),
    "shl": ("lax.shift_left({0}, {1})", lax.shift_left, lambda f, g: ifacts(INT_MIN, INT_MAX)),
    "shr": ("lax.shift_right_arithmetic({0}, {1})", lax.shift_right_arithmetic,
            lambda f, g: ifacts(min(f.lo, -1), max(f.hi, 0))),
    "shrl": ("lax.shift_right_logical({0}, {1})", lax.shift_right_logical,
             lambda f, g: ifacts(INT_MIN, INT_MAX)),
}

BOOL_BINARY = {
    "and": ("{0} & {1}", lambda x, y: x & y, lambda f, g: BOOL_FACTS),
    "or": ("{0} | {1}", lambda x, y: x | y, lambda f, g: BOOL_FACTS),
    "xor": ("{0} ^ {1}", lambda x, y: x ^ y, lambda f, g: BOOL_FACTS),
    "eq": ("{0} == {1}", lambda x, y: x == y, lambda f, g: BOOL_FACTS),
}

COMPARES = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
CMP = {"<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
        ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y}


def table_for(kind: str, dtype) -> dict:
    k = np.dtype(dtype).kind
    if kind == "unary":
        return FLOAT_UNARY if k == "f" else INT_UNARY if k == "i" else BOOL_UNARY
    return FLOAT_BINARY if k == "f" else INT_BINARY if k == "i" else BOOL_BINARY


# narrow types a value makes a round trip through: (jnp dtype, range, relative rounding)
NARROW = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-2 ** 15, 2 ** 15 - 1),
          "uint16": (0, 2 ** 16 - 1), "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def cvt_run(node, xs, ctx):
    x = xs[0]
    if node.p["to"] == "bits":
        return lax.bitcast_convert_type(x, jnp.int32)
    return x.astype(getattr(jnp, node.p["to"])).astype(x.dtype)


def cvt_src(node, n, ctx):
    if node.p["to"] == "bits":
        return f"lax.bitcast_convert_type({n[0]}, jnp.int32)"
    back = ctx.types[node.args[0]].dtype.name
    return f"{n[0]}.astype(jnp.{node.p['to']}).astype(jnp.{back})"


def cvt_facts(node, fs, ctx):
    """Integers wrap into the narrow type's range; floats round (both sides round to nearest
    even, so an exact value stays exact, an inexact one may round the other way)."""
    f, to = fs[0], node.p["to"]
    if to == "bits":
        if f.err:
            raise Invalid("the bits of an inexact value")
        return ifacts(INT_MIN, INT_MAX)
    if isinstance(NARROW[to], tuple):
        lo, hi = NARROW[to]
        return ifacts(max(f.lo, lo), min(f.hi, hi)) if lo <= f.lo and f.hi <= hi else \
            ifacts(lo, hi)
    rel = NARROW[to]
    return ffacts(f.lo * (1 + rel) if f.lo < 0 else f.lo * (1 - rel),
                  f.hi * (1 + rel) if f.hi > 0 else f.hi * (1 - rel),
                  f.err * (1 + rel) + (rel * f.mag if f.err else 0))
