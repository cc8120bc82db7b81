"""`dynamic_axes` -> per-leaf axis names -> `jax.export` symbolic shapes.

A `dynamic_axes` entry per positional argument is `None` (all dims static), `{axis: dim}` for an
array (negative axes allowed), a jax.export-style shape string for the whole array (`"b, s, 768"`,
`"b, ..."`), or a pytree prefix of such entries for a pytree argument. A dict keyed by parameter
name is accepted too. A dim is a name (`"batch"`) or a jax.export dimension expression over names
(`"8*k"`, `"2*b"`, `"b + 1"`); axes sharing a name share one dimension variable.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from jax import export as jax_export

from jdisc.errors import ArgumentError, DtypeError, ShapeError

AxisNames = dict[int, str]


class _Group(list):
    """The axis entries one dynamic_axes leaf expands to (one per array leaf below it)."""


def _is_axes(x: Any) -> bool:
    return x is None or isinstance(x, str) or (
        isinstance(x, Mapping) and all(isinstance(k, int) for k in x))


def positional_names(fun: Callable, n: int) -> list[str]:
    """Names for the first n positional parameters of `fun` (args[i] where unknown)."""
    try:
        params = [p for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:n]]
    has_varargs = False
    try:
        has_varargs = any(p.kind == p.VAR_POSITIONAL
                          for p in inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        pass
    return names + [f"args[{i}]" if not has_varargs else f"args[{i}]"
                    for i in range(len(names), n)]


def normalize_dynamic_axes(dynamic_axes: Any, names: Sequence[str]) -> list[Any]:
    """One entry per (dynamic) positional argument, whose names are `names`."""
    n_args = len(names)
    if dynamic_axes is None:
        return [None] * n_args
    if isinstance(dynamic_axes, Mapping) and (
            not dynamic_axes or not all(isinstance(k, int) for k in dynamic_axes)):
        unknown = set(dynamic_axes) - set(names)
        if unknown:
            raise ArgumentError(f"dynamic_axes names unknown parameter(s) {sorted(unknown)}; "
                                f"the positional (non-static) parameters are {list(names)}")
        return [dynamic_axes.get(name) for name in names]
    if isinstance(dynamic_axes, Mapping):
        raise ArgumentError("dynamic_axes must have one entry per positional argument "
                            "(e.g. (None, {0: 'batch'})), or be a dict keyed by parameter name")
    entries = list(dynamic_axes)
    if len(entries) != n_args:
        raise ArgumentError(f"dynamic_axes has {len(entries)} entries but the function was "
                            f"called with {n_args} positional argument(s)")
    return entries


@dataclasses.dataclass(frozen=True)
class LeafSpec:
    name: str                       # e.g. "params['wq']"
    dtype: np.dtype
    shape: tuple[int, ...]          # concrete shape at trace time
    axes: AxisNames                 # normalised (non-negative) axis -> dimension name
    donated: bool = False           # the caller gives its buffer away (donate_argnums)


def leaf_specs(args: Sequence[Any], entries: Sequence[Any], arg_names: Sequence[str],
               donated: Sequence[int] = ()) -> tuple[list[LeafSpec], Any]:
    """Flatten the dynamic args with their axis names; returns (leaves, treedef). The leaves
    of the args at positions `donated` are marked donated."""
    leaves: list[LeafSpec] = []
    for position, (arg, entry, arg_name) in enumerate(zip(args, entries, arg_names)):
        try:
            per_leaf = jax.tree_util.tree_map(
                lambda e, sub: _Group([e] * len(jax.tree_util.tree_leaves(sub))), entry, arg,
                is_leaf=_is_axes)
        except ValueError as err:
            raise ArgumentError(f"dynamic_axes entry for argument '{arg_name}' does not match "
                                f"its pytree structure: {err}") from None
        groups = jax.tree_util.tree_leaves(per_leaf, is_leaf=lambda x: isinstance(x, _Group))
        axes_list = [e for group in groups for e in group]
        if isinstance(arg, (list, tuple)) and _is_axes(entry) and entry and \
                all(np.ndim(x) == 0 for x in jax.tree_util.tree_leaves(arg)):
            raise ArgumentError(f"argument '{arg_name}' is a Python {type(arg).__name__}, but "
                                f"its dynamic_axes entry {entry!r} describes an array: pass "
                                f"an array (jnp.asarray({arg_name}))")
        paths_leaves = jax.tree_util.tree_flatten_with_path(arg)[0]
        for (path, leaf), axes in zip(paths_leaves, axes_list):
            name = arg_name + jax.tree_util.keystr(path)
            arr_dtype, shape, symbolic_axes = _leaf_type(leaf, name)
            named = _normalize_axes(axes, shape, name)
            for axis, dim in symbolic_axes.items():
                if named.get(axis, dim) != dim:
                    raise ArgumentError(f"argument '{name}' axis {axis} has the symbolic size "
                                        f"{dim} but dynamic_axes names it {named[axis]!r}")
                named[axis] = dim
            leaves.append(LeafSpec(name, arr_dtype, shape, named, position in donated))
    treedef = jax.tree_util.tree_structure(tuple(args))
    return leaves, treedef


def _leaf_type(leaf: Any, name: str) -> tuple[np.dtype, tuple[int, ...], AxisNames]:
    """(dtype, shape, symbolic axes): a jax.ShapeDtypeStruct's jax.export symbolic dims (AOT
    lowering) become dynamic axes named by their expressions; their size in `shape` is a
    placeholder (1) that no static check reads."""
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended):
            raise DtypeError(f"argument '{name}' has the extended dtype {leaf.dtype} (a typed "
                             f"PRNG key from jax.random.key); jdisc takes arrays of numbers: "
                             f"pass jax.random.key_data({name.split('[')[0]}) and rebuild the "
                             f"key inside the function with jax.random.wrap_key_data")
        dt = jax.dtypes.canonicalize_dtype(leaf.dtype)
        shape, sym = [], {}
        for axis, d in enumerate(leaf.shape):
            if isinstance(d, (int, np.integer)):
                shape.append(int(d))
            else:
                shape.append(1)
                sym[axis] = " ".join(str(d).split())
        return np.dtype(dt), tuple(shape), sym
    if isinstance(leaf, (bool, int, float, np.generic)):
        arr = np.asarray(leaf)
        return np.dtype(jax.dtypes.canonicalize_dtype(arr.dtype)), (), {}
    raise ArgumentError(f"argument '{name}' is a {type(leaf).__name__}, not an array; "
                        f"mark it static with static_argnums/static_argnames")


_FUNCTIONS = frozenset({"mod", "floordiv", "max", "min", "non_negative"})
_IDENT = re.compile(r"[^\W\d]\w*")          # Python identifiers, Unicode ones too
_DIM_EXPR = re.compile(r"^[\w+\-*(),\s]+$")


def dim_variables(dim: str) -> list[str]:
    """The dimension variables of a dim entry (`"8*k"` -> ["k"])."""
    return [n for n in _IDENT.findall(dim) if n not in _FUNCTIONS]


def _normalize_axes(axes: Any, shape: tuple[int, ...], name: str) -> AxisNames:
    if axes is None:
        return {}
    if isinstance(axes, str):
        axes = _shape_string_axes(axes, shape, name)
    out: AxisNames = {}
    for axis, dim_name in axes.items():
        a = axis + len(shape) if axis < 0 else axis
        if not 0 <= a < len(shape):
            raise ShapeError(f"dynamic_axes for argument '{name}' names axis {axis}, but the "
                             f"argument has rank {len(shape)}")
        text = " ".join(dim_name.split()) if isinstance(dim_name, str) else None
        if not text or not _DIM_EXPR.match(text) or not dim_variables(text) or \
                text.isidentifier() and text in _FUNCTIONS:
            raise ArgumentError(f"dynamic_axes for argument '{name}' axis {axis}: a dimension "
                                f"is a name or a jax.export dimension expression over names "
                                f"('batch', '8*k', 'b + 1'), got {dim_name!r}")
        depth = 0
        for ch in text:
            depth += (ch == "(") - (ch == ")")
            if ch == "," and depth == 0:
                raise ArgumentError(f"dynamic_axes for argument '{name}' axis {axis}: {text!r} "
                                    f"names several dimensions; give the whole argument's "
                                    f"shape as a string instead (dynamic_axes=('{text}',))")
        out[a] = text
    return out


def _shape_string_axes(spec: str, shape: tuple[int, ...], name: str) -> dict[int, str]:
    """`"b, s, 768"` / `"b, ..."` (jax.export's polymorphic-shape syntax) -> {axis: dim}; an
    integer must equal the argument's size there, `_` and the axes `...` covers stay static."""
    items, depth, cur = [], 0, ""
    for ch in spec.strip().removeprefix("(").removesuffix(")"):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip() or items:
        items.append(cur.strip())
    if "..." in items[:-1]:
        raise ArgumentError(f"dynamic_axes for argument '{name}': '...' may only end a shape "
                            f"string, got {spec!r}")
    ellipsis = bool(items) and items[-1] == "..."
    dims = items[:-1] if ellipsis else items
    if len(dims) > len(shape) or not ellipsis and len(dims) != len(shape):
        raise ShapeError(f"dynamic_axes for argument '{name}': the shape {spec!r} has "
                         f"{len(dims)} dimension(s){' and more' if ellipsis else ''}, but the "
                         f"argument has shape {shape}")
    out = {}
    for axis, d in enumerate(dims):
        if d == "_":
            continue
        if d.isdigit():
            if int(d) != shape[axis]:
                raise ShapeError(f"argument '{name}' axis {axis} is {shape[axis]}, but its "
                                 f"shape {spec!r} says {d}")
            continue
        out[axis] = d
    return out


def check_shared_names(leaves: Sequence[LeafSpec]) -> None:
    """Axes sharing a name must have equal sizes in the example arguments too."""
    first: dict[str, tuple[LeafSpec, int]] = {}
    for leaf in leaves:
        for axis, name in leaf.axes.items():
            if name not in first:
                first[name] = (leaf, axis)
                continue
            other, other_axis = first[name]
            if other.shape[other_axis] != leaf.shape[axis]:
                raise ShapeError(
                    f"argument '{leaf.name}' axis {axis} ('{name}') is {leaf.shape[axis]} but "
                    f"argument '{other.name}' axis {other_axis} ('{name}') is "
                    f"{other.shape[other_axis]}; axes that share a dimension name must be equal.")


_MOD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|\d+)\s*%\s*(\d+)")


def jax_constraint(text: str) -> str:
    """jax.export's constraint syntax for `a % 8 == 0`-style text: `mod(a, 8) == 0`."""
    return _MOD.sub(r"mod(\1, \2)", text)


def _check_solvable(leaves: Sequence[LeafSpec], dims: list[str]) -> None:
    """Each dimension variable must be readable from the input sizes: named alone by an axis,
    or the one unknown of an expression (`8*k`, `b + 1`) once the others are known. The
    launcher solves them in that order; an expression left with several unknowns is refused
    here, naming its argument and axis."""
    known = {d for d in dims if d.isidentifier()}
    left = [d for d in dims if d not in known]
    while left:
        rest = [d for d in left if len(set(dim_variables(d)) - known) > 1]
        for d in left:
            if d not in rest:
                known.update(dim_variables(d))
        if len(rest) == len(left):
            d = rest[0]
            leaf, axis = next((l, a) for l in leaves for a, e in l.axes.items() if e == d)
            unknown = sorted(set(dim_variables(d)) - known)
            raise ArgumentError(
                f"dynamic_axes for argument '{leaf.name}' axis {axis}: the size {d!r} has "
                f"the unknown dimension variables {unknown}, which no other axis names alone; "
                f"a size can be solved for one unknown (a name, '8*k', 'b + 1')")
        left = rest


def symbolic_specs(leaves: Sequence[LeafSpec], constraints: Sequence[str] = ()
                   ) -> list[jax.ShapeDtypeStruct]:
    """jax.ShapeDtypeStructs with one shared symbolic scope for all dimension names."""
    dims = list(dict.fromkeys(d for leaf in leaves for d in leaf.axes.values()))
    names = list(dict.fromkeys(v for d in dims for v in dim_variables(d)))
    if not names:
        return [jax.ShapeDtypeStruct(l.shape, l.dtype) for l in leaves]
    for name in names:   # one at a time first, so that a refusal names its argument and axis
        try:
            jax_export.symbolic_shape(name)
        except Exception as err:
            leaf, axis = next((l, a) for l in leaves for a, d in l.axes.items()
                              if name in dim_variables(d))
            raise ArgumentError(
                f"dynamic_axes for argument '{leaf.name}' axis {axis}: jax.export does not "
                f"accept {name!r} as a dimension name ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}); jax parses dimension names "
                f"as expressions: use a Python identifier other than _, mod, max, min and "
                f"floordiv") from None
    try:
        syms = jax_export.symbolic_shape(", ".join(names),
                                         constraints=tuple(jax_constraint(c) for c in constraints))
    except Exception as err:
        raise ArgumentError(f"invalid dimension names or constraints {list(constraints)}: "
                            f"{err}") from None
    by_dim: dict[str, Any] = dict(zip(names, syms))
    scope = syms[0].scope
    for d in dims:
        if d not in by_dim:
            try:
                by_dim[d], = jax_export.symbolic_shape(d, scope=scope)
            except Exception as err:
                leaf, axis = next((l, a) for l in leaves for a, e in l.axes.items() if e == d)
                raise ArgumentError(
                    f"dynamic_axes for argument '{leaf.name}' axis {axis}: jax.export cannot "
                    f"read the dimension expression {d!r} ({type(err).__name__}: "
                    f"{str(err).splitlines()[0] if str(err) else ''})") from None
    _check_solvable(leaves, dims)        # after jax has read every expression
    return [jax.ShapeDtypeStruct(tuple(by_dim[l.axes[i]] if i in l.axes else d
                                       for i, d in enumerate(l.shape)), l.dtype)
            for l in leaves]
