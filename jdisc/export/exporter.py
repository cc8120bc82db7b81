"""Export a JAX function with symbolic dimensions: StableHLO plus its symbolic signature."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
from jax import export as jax_export

from jdisc.errors import JdiscError, ShapeError
from jdisc.export.specs import LeafSpec, symbolic_specs


@dataclasses.dataclass(frozen=True)
class ExportedFunction:
    name: str
    module: bytes                     # StableHLO portable artifact (serialized VHLO)
    leaves: tuple[LeafSpec, ...]      # every flat input, in order
    kept_inputs: tuple[int, ...]      # flat inputs @main still takes (jax drops unused ones)
    in_shapes: tuple[tuple[str | int, ...], ...]    # per kept input: dim names or sizes
    out_tree: Any
    out_names: tuple[str, ...]
    constraints: tuple[str, ...]
    weak_outputs: tuple[int, ...] = ()    # results jax types weakly (`x * 2.5` of an int x)


def export_function(fun: Callable, leaves: Sequence[LeafSpec], in_tree: Any,
                    constraints: Sequence[str] = (), name: str | None = None) -> ExportedFunction:
    """Trace `fun` (taking the dynamic args, unflattened with `in_tree`) at symbolic shapes."""
    specs = symbolic_specs(leaves, constraints)

    def flat_fun(*flat):
        return fun(*jax.tree_util.tree_unflatten(in_tree, flat))

    name = name or getattr(fun, "__name__", "fn")
    flat_fun.__name__ = name if name.isidentifier() else "fn"
    try:
        exp = jax_export.export(jax.jit(flat_fun), platforms=("cpu",))(*specs)
    except Exception as err:   # jax's shape-polymorphism errors name the dims involved
        kind = ShapeError if "shape" in type(err).__name__.lower() or \
            "Inconclusive" in type(err).__name__ else JdiscError
        raise kind(f"jax.export could not trace '{name}' with symbolic shapes "
                   f"{[str(s.shape) for s in specs]}: {type(err).__name__}: {err}") from err
    return _signature(exp, name, tuple(leaves), tuple(constraints))


def _signature(exp: jax_export.Exported, name: str, leaves: tuple[LeafSpec, ...],
               constraints: tuple[str, ...]) -> ExportedFunction:
    kept = tuple(sorted(exp.module_kept_var_idx))
    in_shapes = tuple(tuple(d if isinstance(d, int) else str(d) for d in exp.in_avals[i].shape)
                      for i in kept)
    out_paths = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exp.out_tree, range(len(exp.out_avals))))[0]
    out_names = tuple("result" + jax.tree_util.keystr(p) for p, _ in out_paths)
    weak = tuple(i for i, a in enumerate(exp.out_avals) if getattr(a, "weak_type", False))
    return ExportedFunction(name, bytes(exp.mlir_module_serialized), leaves, kept,
                            in_shapes, exp.out_tree, out_names, constraints, weak)


def from_jax_exported(exp: jax_export.Exported, name: str | None = None) -> ExportedFunction:
    """A `jax.export.Exported` made elsewhere (or deserialized from its bytes), with its own
    dimension names; its inputs are named as jax calls them (`args[0]`, `scale`, ...). Its
    constraints are shape assertions inside the module, checked at every call."""
    if "cpu" not in exp.platforms:
        raise JdiscError(f"this jax.export.Exported was lowered for {', '.join(exp.platforms)}; "
                         f"jdisc compiles it for the CPU: export it with platforms=('cpu',)")
    if exp.nr_devices != 1:
        raise JdiscError(f"this jax.export.Exported runs on {exp.nr_devices} devices; jdisc "
                         f"compiles single-device programs")
    if exp.ordered_effects:
        raise JdiscError(f"this jax.export.Exported has ordered effects {exp.ordered_effects}; "
                         f"jdisc compiles pure functions")
    paths = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exp.in_tree, range(len(exp.in_avals))))[0]
    leaves = []
    for (path, _), aval in zip(paths, exp.in_avals):
        # in_tree is ((args...), {kwargs...})
        head, rest = (path[1], path[2:]) if len(path) >= 2 else (None, ())
        if getattr(path[0], "idx", None) == 0 and head is not None:
            label = f"args[{head.idx}]" + jax.tree_util.keystr(rest)
        elif head is not None and hasattr(head, "key"):
            label = str(head.key) + jax.tree_util.keystr(rest)
        else:
            label = f"input{len(leaves)}"
        leaves.append(LeafSpec(label, aval.dtype, tuple(d if isinstance(d, int) else 1
                                                        for d in aval.shape),
                               {j: str(d) for j, d in enumerate(aval.shape)
                                if not isinstance(d, int)}))
    return _signature(exp, name or exp.fun_name or "main", tuple(leaves), ())
