"""Whether concrete argument sizes meet a function's dimension expressions and constraints,
before its program exists.

The compiled launcher checks every call's sizes against the symbolic shapes (an axis named
`8*k` must be a multiple of 8, a constraint `n >= 4` must hold) and raises a ShapeError. The
bridge (bridge.py) runs a call with `jax.jit` while jdisc compiles, so it must not accept a
call that the program will refuse: it bridges only calls whose sizes `sizes_meet` says meet
them, and leaves every other call to the program (which then says what is wrong).

The expressions are jax.export's (`+`, `-`, `*`, `//`, `%`, `floordiv`, `mod`, `max`, `min`,
`non_negative`, integers and names), read with Python's own parser and evaluated by walking
the tree; nothing is executed. Anything else, and a variable that cannot be solved for here,
answers False: the call is then not bridged, which costs time, never a wrong acceptance.
"""

from __future__ import annotations

import ast
from typing import Callable, Sequence

from jdisc.export.specs import LeafSpec, dim_variables, jax_constraint


class _Unknown(Exception):
    """An expression this module does not evaluate."""


_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_CALLS: dict[str, Callable[..., int]] = {
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max, "min": min,
    "non_negative": lambda a: max(a, 0)}
_COMPARE: dict[type, Callable[[int, int], bool]] = {
    ast.GtE: lambda a, b: a >= b, ast.LtE: lambda a, b: a <= b, ast.Eq: lambda a, b: a == b}


def _value(node: ast.AST, env: dict[str, int]) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _value(node.left, env), _value(node.right, env)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
            raise _Unknown
        return _BINARY[type(node.op)](a, b)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in _CALLS and not node.keywords:
        args = [_value(a, env) for a in node.args]
        if node.func.id in ("floordiv", "mod") and (len(args) != 2 or args[1] == 0):
            raise _Unknown
        try:
            return _CALLS[node.func.id](*args)
        except TypeError:       # a wrong number of arguments
            raise _Unknown from None
    raise _Unknown


def _parse(text: str) -> ast.AST:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        raise _Unknown from None


def _solve(dim: str, size: int, env: dict[str, int]) -> None:
    """Bind the one unknown variable of `dim` so that it equals `size`, where `dim` is linear
    in it (`8*k`, `b + 1`, `2*k - 1`): its value is read off the expression at 0 and 1."""
    unknown, = (v for v in dict.fromkeys(dim_variables(dim)) if v not in env)
    tree = _parse(dim)
    at0 = _value(tree, {**env, unknown: 0})
    slope = _value(tree, {**env, unknown: 1}) - at0
    if slope == 0 or (size - at0) % slope:
        raise _Unknown
    env[unknown] = (size - at0) // slope


def sizes_meet(leaves: Sequence[LeafSpec], constraints: Sequence[str] = ()) -> bool:
    """True when the leaves' concrete sizes are known to meet every dynamic axis's expression
    and every constraint, with each dimension variable at least 0 (as the launcher checks)."""
    axes = [(leaf.axes[a], leaf.shape[a]) for leaf in leaves for a in sorted(leaf.axes)]
    env: dict[str, int] = {}
    try:
        for dim, size in axes:
            if dim.isidentifier():
                if env.setdefault(dim, size) != size:
                    return False
        left = [(d, s) for d, s in axes if not d.isidentifier()]
        while left:
            rest = [(d, s) for d, s in left if len(set(dim_variables(d)) - set(env)) > 1]
            for d, s in left:
                if (d, s) not in rest and set(dim_variables(d)) - set(env):
                    _solve(d, s, env)
            if len(rest) == len(left):
                return False
            left = rest
        if any(v < 0 for v in env.values()):
            return False
        if any(_value(_parse(d), env) != s for d, s in axes):
            return False
        for text in constraints:
            tree = _parse(jax_constraint(text))
            if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and
                    type(tree.ops[0]) in _COMPARE):
                return False
            a, b = _value(tree.left, env), _value(tree.comparators[0], env)
            if not _COMPARE[type(tree.ops[0])](a, b):
                return False
    except (_Unknown, RecursionError, ValueError):
        return False
    return True
