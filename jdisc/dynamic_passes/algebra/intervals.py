"""Integer interval arithmetic for symbolic.bounds: [lo, hi] with lo/hi an int or -inf/inf.

An infinite end only means "unbounded", so 0 * inf is 0. Division and modulo follow Python's
floor semantics; a divisor is a non-zero integer, so its interval splits into [lo, -1] and
[1, hi] and the results of the two halves are joined.
"""

from __future__ import annotations

import math
from typing import Union

Bound = Union[int, float]  # an int, or -math.inf / math.inf
Interval = tuple[Bound, Bound]

_INF = math.inf


def mul(a: Interval, b: Interval) -> Interval:
    def times(x: Bound, y: Bound) -> Bound:
        return 0 if x == 0 or y == 0 else x * y

    if a[0] >= 0 and b[0] >= 0:
        return times(a[0], b[0]), times(a[1], b[1])
    products = [times(x, y) for x in a for y in b]
    return min(products), max(products)


def pow(iv: Interval, p: int) -> Interval:  # noqa: A001 (the interval counterpart of x ** p)
    lo, hi = iv
    if p == 1:
        return iv
    if p % 2 or lo >= 0:
        return lo ** p, hi ** p
    if hi <= 0:
        return hi ** p, lo ** p
    return 0, max(lo ** p, hi ** p)


def floordiv(x: Interval, y: Interval) -> Interval:
    parts = []
    if y[1] >= 1:
        parts.append(_floordiv_positive(x, max(y[0], 1), y[1]))
    if y[0] <= -1:  # floor(x / y) == floor(-x / -y)
        parts.append(_floordiv_positive((-x[1], -x[0]), max(-y[1], 1), -y[0]))
    return _join(parts)


def mod(x: Interval, y: Interval) -> Interval:
    if y[0] == y[1] != 0 and -_INF < x[0] and x[1] < _INF and x[0] // y[0] == x[1] // y[0]:
        k = x[0] // y[0]  # x stays in one block of the constant divisor
        return x[0] - y[0] * k, x[1] - y[0] * k
    # The sign of the divisor, smaller than it in size, and no larger in size than x.
    parts = []
    if y[1] >= 1:
        parts.append((0, min(y[1] - 1, x[1]) if x[0] >= 0 else y[1] - 1))
    if y[0] <= -1:
        parts.append((max(y[0] + 1, x[0]) if x[1] <= 0 else y[0] + 1, 0))
    return _join(parts)


def _join(parts: list[Interval]) -> Interval:
    if not parts:  # the divisor is always 0: no value exists
        return -_INF, _INF
    return min(p[0] for p in parts), max(p[1] for p in parts)


def _floordiv_positive(x: Interval, yl: Bound, yh: Bound) -> Interval:
    """floor(x / y) for x in [xl, xh] and 1 <= yl <= y <= yh (floor is monotone in each)."""
    def floor_div(a: Bound, b: Bound) -> Bound:  # a finite a over an unbounded b tends to 0
        if a in (_INF, -_INF):
            return a
        return (0 if a >= 0 else -1) if b == _INF else a // b

    xl, xh = x
    lo = floor_div(xl, yh) if xl >= 0 else floor_div(xl, yl)
    hi = floor_div(xh, yl) if xh >= 0 else floor_div(xh, yh)
    return lo, hi
