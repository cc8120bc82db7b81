"""`jdisc.compile_stablehlo`: compile a StableHLO module (text, bytecode or portable artifact).

Each `?` dim of input i, axis j is its own dimension variable `d{i}_{j}` unless the program ties
them (its shape assertions and equalities become launcher checks). A module that does not parse
raises ArgumentError; unsupported ops and element types UnsupportedOpError; a failure inside
jdisc CompileError (with the original exception chained).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jdisc import driver
from jdisc.custom_calls import runtime
from jdisc.dynamic_passes.ir import numpy_dtype
from jdisc.errors import ArgumentError, DtypeError, ShapeError


class StablehloFunction:
    """A compiled StableHLO module: call it on numpy or JAX arrays; returns a list of arrays
    (jax.Arrays; 64-bit results are numpy arrays unless jax's x64 mode is on)."""

    def __init__(self, module: str | bytes, name: str = "main"):
        c = driver.compile(module, name)
        self.program, self.cprog, self.executable = c.program, c.cprog, c.executable

    def __call__(self, *args: Any) -> list[jax.Array]:
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


def compile_stablehlo(module: str | bytes, name: str = "main") -> StablehloFunction:
    return StablehloFunction(module, name)
