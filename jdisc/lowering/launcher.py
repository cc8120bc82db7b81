"""The generated C host launcher ("runtime flow"): two entry points per program.

    int jd_prepare(const int64_t *in_dims, int64_t *dims, int64_t *out_dims, char *err, int64_t n)
        Binds the dimension variables from the inputs' dims (flattened in argument order), checks
        static dims, shared names and every constraint, checks every symbolic size is valid, and
        writes the dimension variables (`dims`) and the outputs' dims. Returns 0, or 1 with a
        message in `err`.

    int jd_run(const int64_t *dims, void *const *ins, void *const *outs, char *err, int64_t n)
        Allocates intermediates, calls the kernels and library routines in order, writes the
        outputs (caller-allocated, sized from jd_prepare's out_dims) and frees what it allocated.

Nothing is interpreted per op at run time: this is straight-line C over the kernel list.
"""

from __future__ import annotations

import re
from typing import Callable

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.host_values import HostValue, Pred
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.program import Check, Program, Value
from jdisc.errors import ShapeError, UnsupportedOpError
from jdisc.lowering import c_runtime
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter, c_string
from jdisc.lowering.names import c_comment

ARENA = c_runtime.source("jd_arena.h")

_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def _format_call(message: str, args: tuple, dim: Callable[[Dim], str]) -> str:
    """A `fmt, args...` pair for jd_error: `{k}` in `message` becomes args[k]'s value."""
    pieces, values, pos = [], [], 0
    for m in _PLACEHOLDER.finditer(message):
        k = int(m.group(1))
        if k >= len(args):
            continue
        pieces.append(c_string(message[pos:m.start()]))
        pieces.append('"%lld"')
        values.append(f"(long long)({dim(args[k])})")
        pos = m.end()
    pieces.append(c_string(message[pos:]))
    return " ".join(pieces) + "".join(", " + v for v in values)


def _values_suffix(dims: list[Dim], dim: Callable[[Dim], str]) -> tuple[str, list[str]]:
    """C string literals ` (a = %lld, b = %lld)` naming the variables of `dims`, and the
    values for them (names enter the literal escaped, never raw)."""
    names = sorted(set().union(*(symbolic.variables(d) for d in dims))) if dims else []
    if not names:
        return "", []
    pieces = [c_string(f"{', ' if i else ' ('}{n} = ") + ' "%lld"' for i, n in enumerate(names)]
    return " ".join(pieces) + ' ")"', [f"(long long){dim(symbolic.var(n))}" for n in names]


def emit_prepare(w: CWriter, prog: Program, dim: Callable[[Dim], str],
                 extra_checks: list[Check], guards: list[tuple[str, str]] = ()) -> None:
    with w.block("int jd_prepare(const int64_t *restrict in_dims, int64_t *restrict dims, "
                 "int64_t *restrict out_dims, char *err, int64_t errlen)"):
        bound: dict[str, tuple[str, int]] = {}
        expressions: list[tuple[int, str, Dim]] = []    # input dims like 8*k, b + 1
        pos = 0
        for spec in prog.inputs:
            for axis, d in enumerate(spec.shape):
                where = f"argument '{spec.name}' axis {axis}"
                if isinstance(d, int):
                    with w.block(f"if (in_dims[{pos}] != {d})"):
                        w(f"return jd_error(err, errlen, {c_string(where + ' is ')} \"%lld\" "
                          f"{c_string(f'; expected {d} (a static dimension of the compiled function).')}, "
                          f"(long long)in_dims[{pos}]);")
                elif str(d) in symbolic.variables(d):
                    name = str(d)
                    if name not in bound:
                        w(f"const int64_t {dim(d)} = in_dims[{pos}];   /* "
                          f"{c_comment(where)}: '{c_comment(name)}' */")
                        bound[name] = (spec.name, axis)
                    else:
                        first_arg, first_axis = bound[name]
                        with w.block(f"if (in_dims[{pos}] != {dim(d)})"):
                            msg = (f"{where} ('{name}') is ", f" but argument '{first_arg}' axis "
                                   f"{first_axis} ('{name}') is ",
                                   "; axes that share a dimension name must be equal.")
                            w(f"return jd_error(err, errlen, {c_string(msg[0])} \"%lld\" "
                              f"{c_string(msg[1])} \"%lld\" {c_string(msg[2])}, "
                              f"(long long)in_dims[{pos}], (long long){dim(d)});")
                else:
                    expressions.append((pos, where, d))
                pos += 1
        _solve_input_expressions(w, expressions, bound, dim)
        emit_host_values(w, prog.derived, dim)
        for cond, message in guards:   # before any int64 size arithmetic can wrap
            with w.block(f"if ({cond})"):
                w(f"return jd_error(err, errlen, {c_string(message)});")
        emit_checks(w, list(prog.checks) + extra_checks, dim)
        for k, name in enumerate(prog.dim_vars):
            w(f"dims[{k}] = {dim(symbolic.var(name))};")
        pos = 0
        for spec in prog.outputs:
            for d in spec.shape:
                w(f"out_dims[{pos}] = {dim(d)};")
                pos += 1
        w("return 0;")


def _solve_input_expressions(w: CWriter, pending: list[tuple[int, str, Dim]],
                             bound: dict, dim: Callable[[Dim], str]) -> None:
    """Input dims given as expressions (`dynamic_axes={0: "8*k"}`, `{0: "b", 1: "2*b"}`): one
    whose variables are all bound is checked against its size; one linear in a single unbound
    variable v (`c*v + rest`, c > 0) binds v = (size - rest) / c, after checking that the
    division is exact and v >= 0. Repeated until every expression is used."""
    while pending:
        left = []
        for pos, where, d in pending:
            unbound = sorted(v for v in symbolic.variables(d) if v not in bound)
            shown = c_string(f"{where} is ")
            if not unbound:
                with w.block(f"if (in_dims[{pos}] != ({dim(d)}))"):
                    fmt, vals = _values_suffix([d], dim)
                    w(f"return jd_error(err, errlen, {shown} \"%lld\" "
                      f"{c_string(f'; expected {d}')} {fmt} \".\", (long long)in_dims[{pos}]"
                      f"{''.join(', ' + v for v in vals)});")
                continue
            v = unbound[0]
            rest = symbolic.substitute(d, {v: 0})
            coeff = symbolic.as_int(symbolic.substitute(d - rest, {v: 1}))
            if len(unbound) > 1 or not coeff or coeff < 0 or d - rest != coeff * symbolic.var(v):
                left.append((pos, where, d))
                continue
            t = f"jd_solve{pos}"
            w(f"const int64_t {t} = in_dims[{pos}] - ({dim(rest)});   /* {c_comment(where)}: "
              f"'{c_comment(str(d))}' */")
            with w.block(f"if ({t} < 0 || {t} % {coeff} != 0)"):
                w(f"return jd_error(err, errlen, {shown} \"%lld\" "
                  f"{c_string(f'; expected {d} for some {v} >= 0.')}, (long long)in_dims[{pos}]);")
            w(f"const int64_t {dim(symbolic.var(v))} = {t} / {coeff};")
            bound[v] = (where, None)
        if len(left) == len(pending):
            pos, where, d = left[0]
            raise UnsupportedOpError(
                f"{where} has the size {d}: jdisc binds an input's dimension variables from "
                f"sizes that are a name or linear in one name not bound elsewhere (8*k, b + 1, "
                f"2*b where b names another axis)")
        pending = left


def emit_checks(w: CWriter, checks: list[Check], dim: Callable[[Dim], str],
                decided_false_is_error: bool = True) -> None:
    """`if (!cond) return jd_error(...)` per check not proven at compile time."""
    for c in checks:
        decided = c.holds_statically()
        if decided is True:
            continue
        if decided is False and decided_false_is_error:
            raise ShapeError(f"{c.message}: {c.shown or f'{c.lhs} {c.cmp} {c.rhs}'} can never "
                             f"hold")
        cond = f"({dim(c.lhs)}) {c.cmp} ({dim(c.rhs)})"
        with w.block(f"if (!({cond}))"):
            if c.args:
                w(f"return jd_error(err, errlen, {_format_call(c.message, c.args, dim)});")
            else:
                fmt, vals = _values_suffix([c.lhs, c.rhs], dim)
                text = f"{c.message}: {c.shown or f'{c.lhs} {c.cmp} {c.rhs}'} does not hold"
                w(f"return jd_error(err, errlen, {c_string(text)} {fmt} \".\""
                  f"{''.join(', ' + v for v in vals)});")


_HOST_INFIX = {"add": "+", "subtract": "-", "multiply": "*"}
_HOST_FN = {"divide": "jd_tdiv", "remainder": "jd_trem", "maximum": "jd_max",
            "minimum": "jd_min"}


def emit_host_values(w: CWriter, derived, dim: Callable[[Dim], str]) -> None:
    """`const int64_t <var> = ...;` for each derived dimension variable, in order.

    Their HostValue trees share subtrees: jax computes each layer's SAME padding from its own
    formula for the previous layer's size, so a CNN's trees grow with every strided layer and,
    written out as trees, the C would grow exponentially. A node reached more than once is
    computed once, into a local `jd_hv<k>`: the C is linear in the number of distinct nodes."""
    uses: dict[int, int] = {}

    def count(x) -> None:
        if _host_children(x) is None:
            return
        uses[id(x)] = uses.get(id(x), 0) + 1
        if uses[id(x)] == 1:
            for c in _host_children(x):
                count(c)

    for _, h in derived:
        count(h)
    names: dict[int, str] = {}
    for name, h in derived:
        text = render_host(h, dim, names, uses, w)
        var = dim(symbolic.var(name))
        w(f"const int64_t {var} = {text};")
        names.setdefault(id(h), var)


def _host_children(x):
    """The operands of a host-computation node, or None for a leaf (a Dim or a bool)."""
    if isinstance(x, Pred):
        return x.lhs if x.cmp == "and" else (x.lhs, x.rhs)
    return x.args if isinstance(x, HostValue) else None


def render_host(x, dim: Callable[[Dim], str], names: dict | None = None,
                uses: dict | None = None, w: CWriter | None = None) -> str:
    """C for a host-computed integer (a HostValue tree over dims and predicates). With
    `names` (node id -> C name), `uses` (node id -> references) and a writer `w`, nodes used
    more than once are written once into locals and referred to by name."""
    if isinstance(x, bool):
        return "1" if x else "0"
    if names is not None and id(x) in names:
        return names[id(x)]
    children = _host_children(x)
    if children is None:
        return f"({dim(x)})"
    a = [render_host(v, dim, names, uses, w) for v in children]
    if isinstance(x, Pred):
        text = f"({' && '.join(a)})" if x.cmp == "and" else f"({a[0]} {x.cmp} {a[1]})"
    elif x.op in _HOST_INFIX:
        text = f"({a[0]} {_HOST_INFIX[x.op]} {a[1]})"
    elif x.op in _HOST_FN:
        text = f"{_HOST_FN[x.op]}({a[0]}, {a[1]})"
    elif x.op == "negate":
        text = f"(-{a[0]})"
    elif x.op == "abs":
        text = f"({a[0]} < 0 ? -{a[0]} : {a[0]})"
    elif x.op == "sign":
        text = f"(({a[0]} > 0) - ({a[0]} < 0))"
    elif x.op == "select":
        text = f"({a[0]} ? {a[1]} : {a[2]})"
    else:
        raise UnsupportedOpError(f"host computation of stablehlo.{x.op}")
    if names is not None and uses is not None and w is not None and uses.get(id(x), 0) > 1:
        local = f"jd_hv{len(names)}"
        w(f"const int64_t {local} = {text};")
        names[id(x)] = local
        return local
    return text


def size_guards(values: list[tuple[Value, str]], name) -> list[str]:
    """C conditions that fail when a buffer's byte size could overflow int64 arithmetic."""
    from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
    out, seen = [], set()
    for v, where in values:
        n = v.num_elements()
        if isinstance(n, int) or n in seen:
            continue
        seen.add(n)
        bound = c_upper_bound(n, name)
        out.append((f"{bound} * {numpy_dtype(v.dtype).itemsize}.0 > 4.0e18",
                    f"{where}: a buffer of {n} elements of {v.dtype} is too large"))
    return out


def blas_checks(limits: list[tuple[Dim, str]]) -> list[Check]:
    out, seen = [], set()
    for d, where in limits:
        if isinstance(d, int) or d in seen:
            continue
        seen.add(d)
        out.append(Check(d, "<=", 2**31 - 1, f"{where}: the GEMM size {d} exceeds the 32-bit "
                                             f"BLAS limit"))
    return out


def buffer_bytes(v: Value, dim: Callable[[Dim], str]) -> str:
    from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
    return f"(size_t)({dim(v.num_elements())}) * {numpy_dtype(v.dtype).itemsize}"


def pointer(v: Value, mutable: bool = True) -> str:
    return f"{'' if mutable else 'const '}{ctype(v.dtype)} *"


def c_upper_bound(d, name: Callable[[str], str] = lambda v: v) -> str:
    """A C `double` expression bounding d from above, assuming every variable is >= 0.

    Used for overflow guards: evaluated in floating point it cannot overflow, where the int64
    evaluation of a large product could wrap. Negative terms are dropped (sound for an upper
    bound); floordiv/mod/max/min are bounded from their operands' upper bounds.
    """
    d = symbolic.as_int(d) if symbolic.is_const(d) else d
    if isinstance(d, int):
        return f"{float(max(d, 0))!r}"
    return _c_upper_sum(d, name)


def _c_upper_sum(e, name) -> str:
    if isinstance(e, int):
        return f"{float(max(e, 0))!r}"
    parts = [f"{float(e.const)!r}"] if e.const > 0 else []
    for mono, coeff in e.terms:
        if coeff > 0:
            factors = [_c_upper_atom(a, name) for a, p in mono.factors for _ in range(p)]
            parts.append(" * ".join([f"{float(coeff)!r}"] + factors))
    return "(" + (" + ".join(parts) or "0.0") + ")"


def _c_upper_atom(atom, name) -> str:
    if atom.op == "var":
        return f"(double){name(atom.args[0])}"
    x, y = (_c_upper_sum(arg, name) for arg in atom.args)
    if atom.op == "floordiv":     # divisors are >= 1 wherever a size is computed
        return x
    if atom.op == "mod":
        return f"fmin({x}, {y})"
    return f"f{atom.op}({x}, {y})"
