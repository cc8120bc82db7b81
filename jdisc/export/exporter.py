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
    kept = tuple(sorted(exp.module_kept_var_idx))
    in_shapes = tuple(tuple(d if isinstance(d, int) else str(d) for d in exp.in_avals[i].shape)
                      for i in kept)
    out_paths = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exp.out_tree, range(len(exp.out_avals))))[0]
    out_names = tuple("result" + jax.tree_util.keystr(p) for p, _ in out_paths)
    return ExportedFunction(name, bytes(exp.mlir_module_serialized), tuple(leaves), kept,
                            in_shapes, exp.out_tree, out_names, tuple(constraints))
