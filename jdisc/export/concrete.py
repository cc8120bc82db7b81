"""Whether concrete argument sizes meet a function's dimension expressions and constraints,
before its program exists.

The compiled launcher checks every call's sizes against the symbolic shapes (an axis named
`8*k` must be a multiple of 8, a constraint `n >= 4` must hold) and raises a ShapeError. The
bridge (bridge.py) runs a call with `jax.jit` while jdisc compiles, so it must not accept a
call that the program will refuse: it bridges only calls whose sizes `sizes_meet` says meet
them, and leaves every other call to the program (which then says what is wrong). A function
that falls back to `jax.jit` (`fallback="xla"`) has no program to check its calls: it raises
what `refusal` finds (arguments' errors never fall back).

The expressions are jax.export's (`+`, `-`, `*`, `//`, `%`, `floordiv`, `mod`, `max`, `min`,
`non_negative`, integers and names), read with Python's own parser and evaluated by walking
the tree; nothing is executed. A variable is solved for from an axis whose expression is
affine in it by its form (`8*k`, `b + 1`); anything else cannot be told here: `sizes_meet`
answers False (the call is then not bridged, which costs time, never a wrong acceptance) and
`refusal` None (a fallback call runs: the refusals it reports are certain).
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


def _affine(node: ast.AST, var: str) -> bool:
    """Whether `node` is a * var + b with a and b free of `var` (by its form)."""
    def has(n: ast.AST) -> bool:
        return any(isinstance(m, ast.Name) and m.id == var for m in ast.walk(n))
    if not has(node) or isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.UnaryOp):
        return _affine(node.operand, var)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _affine(node.left, var) and _affine(node.right, var)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return (not has(node.left) and _affine(node.right, var)) or \
            (not has(node.right) and _affine(node.left, var))
    return False


class _Refused(Exception):
    """The sizes certainly break an expression or a constraint (the message says which)."""


def _solve(dim: str, size: int, env: dict[str, int], where: str) -> None:
    """Bind the one unknown variable of `dim` so that it equals `size`, where `dim` is affine
    in it by its form (`8*k`, `b + 1`, `2*k - 1`): its value is read off the expression at 0
    and 1, and no value at least 0 that does so is a refusal."""
    unknown, = (v for v in dict.fromkeys(dim_variables(dim)) if v not in env)
    tree = _parse(dim)
    if not _affine(tree, unknown):      # `n*n`, `max(k, 2)`: not solved here
        raise _Unknown
    at0 = _value(tree, {**env, unknown: 0})
    slope = _value(tree, {**env, unknown: 1}) - at0
    if slope == 0:
        raise _Unknown
    if (size - at0) % slope or (size - at0) // slope < 0:
        raise _Refused(f"{where} is {size}; expected {dim} for some {unknown} >= 0")
    env[unknown] = (size - at0) // slope


def _judge(leaves: Sequence[LeafSpec], constraints: Sequence[str]) -> tuple[bool | None, str]:
    """(True, "") when the leaves' concrete sizes meet every dynamic axis's expression and
    every constraint, with each dimension variable at least 0 (as the launcher checks);
    (False, why) when they certainly do not; (None, "") when this module cannot tell."""
    axes = [(f"argument '{leaf.name}' axis {a}", leaf.axes[a], leaf.shape[a])
            for leaf in leaves for a in sorted(leaf.axes)]
    env: dict[str, int] = {}
    named: dict[str, str] = {}      # a variable -> the first axis it names alone
    try:
        for where, dim, size in axes:
            if dim.isidentifier():
                if env.setdefault(dim, size) != size:
                    return False, (f"{where} ('{dim}') is {size} but {named[dim]} ('{dim}') is "
                                   f"{env[dim]}; axes that share a dimension name must be equal")
                named.setdefault(dim, where)
        left = [(w, d, s) for w, d, s in axes if not d.isidentifier()]
        while left:
            rest = [(w, d, s) for w, d, s in left if len(set(dim_variables(d)) - set(env)) > 1]
            for w, d, s in left:
                if (w, d, s) not in rest and set(dim_variables(d)) - set(env):
                    _solve(d, s, env, w)
                    named.setdefault(next(v for v in dim_variables(d) if v not in named), w)
            if len(rest) == len(left):
                return None, ""
            left = rest
        for where, dim, size in axes:
            if _value(_parse(dim), env) != size:
                values = ", ".join(f"{v} = {env[v]}" for v in dict.fromkeys(dim_variables(dim)))
                return False, f"{where} is {size}; expected {dim}, which is " \
                              f"{_value(_parse(dim), env)} with {values}"
        for text in constraints:
            tree = _parse(jax_constraint(text))
            if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and
                    type(tree.ops[0]) in _COMPARE):
                return None, ""
            a, b = _value(tree.left, env), _value(tree.comparators[0], env)
            if not _COMPARE[type(tree.ops[0])](a, b):
                values = "; ".join(f"{v} = {env[v]} ({named.get(v, '?')})" for v in
                                   dict.fromkeys(dim_variables(jax_constraint(text))))
                return False, f"the sizes break the constraint {text!r}: {values}"
    except _Refused as why:
        return False, str(why)
    except (_Unknown, RecursionError, ValueError, KeyError):
        return None, ""
    return True, ""


def sizes_meet(leaves: Sequence[LeafSpec], constraints: Sequence[str] = ()) -> bool:
    """True when the leaves' concrete sizes are known to meet every dynamic axis's expression
    and every constraint, with each dimension variable at least 0 (as the launcher checks)."""
    return _judge(leaves, constraints)[0] is True


def refusal(leaves: Sequence[LeafSpec], constraints: Sequence[str] = ()) -> str | None:
    """What the leaves' concrete sizes break, when they certainly break an axis's expression
    or a constraint (the program's check would refuse the call); None when they meet them or
    when this module cannot tell."""
    ok, why = _judge(leaves, constraints)
    return why if ok is False else None
