"""`jdisc.compile_stablehlo`: compile a StableHLO module (text, bytecode or portable artifact), or
a `jax.export.Exported` (or the bytes of its `serialize()`).

For a module, each `?` dim of input i, axis j is its own dimension variable `d{i}_{j}` unless the
program ties them (its shape assertions and equalities become launcher checks); it is called on
its inputs in order and returns the list of its results (a tuple-typed input takes a Python
tuple, a tuple-typed result comes back as one). An Exported keeps jax.export's
dimension names and constraints, and is called as `Exported.call` is: the same arguments
(positional and keyword), results in its output structure (one array for one result). A
module that does not parse raises ArgumentError; unsupported ops and element types
UnsupportedOpError; a failure inside jdisc CompileError (with the original exception chained).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import export as jax_export

from jdisc import driver
from jdisc.custom_calls import runtime
from jdisc.dynamic_passes.importer import tuples
from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.errors import ArgumentError, DtypeError, ShapeError
from jdisc.export.exporter import from_jax_exported


class StablehloFunction:
    """A compiled StableHLO module or jax.export.Exported: call it on numpy or JAX arrays
    (jax.Arrays come back; 64-bit results are numpy arrays unless jax's x64 mode is on)."""

    def __init__(self, module: str | bytes | jax_export.Exported, name: str = "main"):
        exported = as_jax_exported(module)
        self.exported = exported
        source = from_jax_exported(exported, None if name == "main" else name) \
            if exported is not None else module
        c = driver.compile(source, name if exported is None else source.name)
        self.program, self.cprog, self.executable = c.program, c.cprog, c.executable
        self.tuple_trees = c.tuple_trees    # a module's tuple arguments and results

    def __call__(self, *args: Any, **kwargs: Any):
        if self.exported is not None:
            flat, tree = jax.tree_util.tree_flatten((args, kwargs))
            if tree != self.exported.in_tree:
                raise ArgumentError(f"expected arguments of structure {self.exported.in_tree}, "
                                    f"got {tree}")
            outs = self._run([flat[i] for i in sorted(self.exported.module_kept_var_idx)])
            return jax.tree_util.tree_unflatten(self.exported.out_tree, outs)
        if kwargs:
            raise ArgumentError(f"a StableHLO module takes its inputs by position; got keyword "
                                f"argument(s) {sorted(kwargs)}")
        if self.tuple_trees is not None:   # tuples in: Python tuples; tuples out: the same
            ins, outs = self.tuple_trees
            return tuples.unflatten_results(outs, self._run(tuples.flatten_args(ins, args)))
        return self._run(list(args))

    def _run(self, args: list) -> list:
        specs = self.cprog.inputs
        if len(args) != len(specs):
            raise ArgumentError(f"expected {len(specs)} argument(s), got {len(args)}")
        arrays = []
        for x, spec in zip(args, specs):
            arr = np.asarray(x)
            want = numpy_dtype(spec.dtype)
            if arr.dtype != want:
                raise DtypeError(f"argument '{spec.name}' has dtype {arr.dtype}; expected {want}")
            if arr.ndim != len(spec.shape):
                raise ShapeError(f"argument '{spec.name}' has rank {arr.ndim}; expected "
                                 f"{len(spec.shape)}")
            arrays.append(np.require(arr, requirements="C"))   # rank 0 stays rank 0
        # 64-bit results stay numpy arrays unless jax's x64 mode is on: jax would narrow them
        x64 = jax.config.jax_enable_x64
        return [o if (o.dtype.itemsize == 8 and not x64) else runtime.to_jax(o)
                for o in self.executable.run(arrays)]


_MLIR_BYTECODE = b"ML\xefR"


def as_jax_exported(module: Any) -> jax_export.Exported | None:
    """`module` as a jax.export.Exported: itself, or deserialized from the bytes of
    `Exported.serialize()`; None for a StableHLO module (text or MLIR bytecode)."""
    if isinstance(module, jax_export.Exported):
        return module
    if not isinstance(module, (bytes, bytearray)) or bytes(module[:4]) == _MLIR_BYTECODE:
        return None
    try:
        return jax_export.deserialize(bytearray(module))
    except ImportError as err:       # jax's serialization needs flatbuffers (a dependency)
        raise ArgumentError(f"these bytes are not MLIR bytecode, and reading them as a "
                            f"serialized jax.export.Exported needs flatbuffers: {err}") from None
    except Exception:   # not jax's serialization: parsed as a module, which says what is wrong
        return None


def compile_stablehlo(module: str | bytes | jax_export.Exported,
                      name: str = "main") -> StablehloFunction:
    return StablehloFunction(module, name)
