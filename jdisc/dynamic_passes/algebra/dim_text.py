"""Dimension expressions as text: `parse` reads the form `str` prints (``2*B + 4``,
``floordiv(B, 2)``, ``B^2 - S``); `to_c` writes a C99 expression, whose floor operations are
the helpers of lowering/c_runtime/jd_dims.h."""

from __future__ import annotations

import re
from collections.abc import Callable

from jdisc.dynamic_passes.algebra.symbolic import (BUILDERS, Atom, Dim, Expr, add, as_dim,
                                                   floordiv, join_terms, mod, mul, power,
                                                   single_atom, var)



def parse(text: str) -> Dim:
    """Read a dimension expression such as ``2*B + 4``, ``floordiv(B, 2)`` or ``B^2 - S``."""
    return _Parser(text).parse()


class _Parser:
    """Recursive descent over
        sum := product (('+' | '-') product)*      product := unary (('*' | '//' | '%') unary)*
        unary := ('-' | '+') unary | power         power := primary (('^' | '**') INT)?
        primary := INT | NAME | NAME '(' sum ',' sum ')' | '(' sum ')'
    """

    PRODUCT_OPS = {"*": mul, "//": floordiv, "%": mod}

    def __init__(self, text: str):
        self.text, self.i = text, 0
        self.tokens = re.findall(r"\d+|[^\W\d]\w*|//|\*\*|\S", text)

    def fail(self, what: str):
        raise ValueError(f"cannot parse dimension {self.text!r}: {what}")

    def peek(self) -> str:
        return self.tokens[self.i] if self.i < len(self.tokens) else ""

    def take(self, expected: str = "") -> str:
        token = self.peek()
        if not token or (expected and token != expected):
            self.fail(f"expected {expected!r}, found {token!r}" if expected else "unexpected end")
        self.i += 1
        return token

    def parse(self) -> Dim:
        value = self.sum()
        if self.peek():
            self.fail(f"unexpected {self.peek()!r}")
        return value

    def sum(self) -> Dim:
        value = self.product()
        while self.peek() in ("+", "-"):
            sign = 1 if self.take() == "+" else -1
            value = add(value, mul(self.product(), sign))
        return value

    def product(self) -> Dim:
        value = self.unary()
        while self.peek() in self.PRODUCT_OPS:
            value = self.PRODUCT_OPS[self.take()](value, self.unary())
        return value

    def unary(self) -> Dim:
        if self.peek() in ("-", "+"):
            sign = 1 if self.take() == "+" else -1
            return mul(self.unary(), sign)
        value = self.primary()
        if self.peek() in ("^", "**"):
            self.take()
            exponent = self.take()
            if not exponent.isdecimal():
                self.fail(f"the exponent {exponent!r} is not an integer")
            value = power(value, int(exponent))
        return value

    def primary(self) -> Dim:
        token = self.take()
        if token.isdecimal():
            return int(token)
        if token == "(":
            value = self.sum()
            self.take(")")
            return value
        if not token.isidentifier():
            self.fail(f"unexpected {token!r}")
        if token in BUILDERS and self.peek() == "(":
            self.take("(")
            x = self.sum()
            self.take(",")
            y = self.sum()
            self.take(")")
            return BUILDERS[token](x, y)
        return var(token)


def to_c(d, name: Callable[[str], str] = lambda v: v) -> str:
    """A C99 int64_t expression for d; variables render as name(v), floor ops as jd_* calls
    (lowering/c_runtime/jd_dims.h). Anything but a lone variable or call comes parenthesised."""
    d = as_dim(d)
    if isinstance(d, int):
        return f"((int64_t){_c_int(d)})"
    atom = single_atom(d)
    return _c_atom(atom, name) if atom is not None else f"({_c_sum(d, name)})"


def _c_int(c: int) -> str:
    if not -2 ** 63 <= c < 2 ** 63:
        raise ValueError(f"the constant {c} in a dimension expression does not fit in int64_t")
    return "(-9223372036854775807 - 1)" if c == -2 ** 63 else str(c)


def _c_sum(e: Expr, name: Callable[[str], str]) -> str:
    for c in [e.const] + [coeff for _, coeff in e.terms]:
        _c_int(abs(c))  # printed as a sign and a literal, each of which must fit
    return join_terms(e, " * ", lambda atom, p: " * ".join([_c_atom(atom, name)] * p))


def _c_atom(atom: Atom, name: Callable[[str], str]) -> str:
    if atom.op == "var":
        return name(atom.args[0])
    x, y = (_c_int(arg) if isinstance(arg, int) else _c_sum(arg, name) for arg in atom.args)
    return f"jd_{atom.op}({x}, {y})"

