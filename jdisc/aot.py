"""Ahead-of-time staging, as `jax.jit(f).lower(...).compile()`:

    jf.lower(*args)        -> Lowered:  .as_text()  the StableHLO jdisc compiles
    Lowered.compile()      -> Executable: .as_text()  the generated C,
                              .memory_analysis(**dims), .cost_analysis(**dims), __call__

`args` may be arrays or `jax.ShapeDtypeStruct`s whose dims are concrete or jax.export symbolic
dims (`jax.export.symbolic_shape("b, 8")`); symbolic dims become dynamic axes of their own.
Analyses are symbolic expressions in the program's dimension variables, evaluated where the
call gives every variable (`memory_analysis(b=16)`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.passes import cost


class Explanation(str):
    """Text that a REPL shows as text (not as a quoted string with \\n escapes)."""

    def __repr__(self) -> str:
        return str(self)


@dataclasses.dataclass(frozen=True)
class MemoryAnalysis:
    """Bytes, as jax's CompiledMemoryStats names them: ints where every dim is given, else
    symbolic expressions in the dimension variables."""
    temp_size_in_bytes: int | Dim          # the arena for intermediates: the peak
    argument_size_in_bytes: int | Dim
    output_size_in_bytes: int | Dim


class Lowered:
    def __init__(self, name: str, exported: Any, compile_fn: Callable[[], Any],
                 call_fn: Callable[[Any, tuple], Any]):
        self.name = name
        self.exported = exported
        self._compile_fn = compile_fn
        self._call_fn = call_fn

    def as_text(self) -> str:
        """The StableHLO module (MLIR text) that jdisc compiles."""
        from jdisc.dynamic_passes.importer.mlir_import import make_context, parse_module
        ctx = make_context()
        return str(parse_module(self.exported.module, ctx))

    def compile(self) -> "Executable":
        return Executable(self.name, self._compile_fn(), self._call_fn)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{l.name}: {_shape(l)}" for l in self.exported.leaves)
        return f"<jdisc Lowered '{self.name}' ({shapes})>"


class Executable:
    def __init__(self, name: str, entry: Any, call_fn: Callable[[Any, tuple], Any]):
        self.name = name
        self.entry = entry          # compiled.Compiled
        self._call_fn = call_fn

    def as_text(self) -> str:
        """The generated C (kernels and host launcher)."""
        return self.entry.c_source

    def memory_analysis(self, **dims: int) -> MemoryAnalysis:
        return MemoryAnalysis(**cost.evaluate(cost.memory_analysis(self.entry.program), dims))

    def cost_analysis(self, **dims: int) -> dict[str, int | Dim]:
        """{"flops", "bytes accessed"} (a loop body counts once, as in XLA)."""
        return cost.evaluate(cost.cost_analysis(self.entry.program), dims)

    def __call__(self, *args):
        return self._call_fn(self.entry, args)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{l.name}: {_shape(l)}" for l in self.entry.leaves)
        return (f"<jdisc Executable '{self.name}' ({shapes}); "
                f"{len(self.entry.program.kernels)} kernels>")


def _shape(leaf) -> str:
    dims = ", ".join(leaf.axes.get(i, str(d)) for i, d in enumerate(leaf.shape))
    return f"{jax.numpy.dtype(leaf.dtype).name}[{dims}]"
