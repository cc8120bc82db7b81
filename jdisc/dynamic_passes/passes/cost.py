"""Cost and memory of a planned program, as symbolic expressions in its dimension variables.

`cost_analysis`: flops (an elementwise op: one per result element; a reduction: one per input
element; dot_general and convolution: two per multiply-add) and bytes accessed (each kernel
reads its input buffers and writes its outputs once). A loop's body counts once, as in XLA's
cost analysis: the trip count is a run-time value. `memory_analysis`: the arena the memory plan
reserves for intermediates (the peak, since slots are reused), and the argument and output
bytes.
"""

from __future__ import annotations

import math

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.dynamic_passes.ir.ops import OPS
from jdisc.dynamic_passes.ir.program import Op, Program, walk
from jdisc.dynamic_passes.passes.memory_plan import raw_bytes


def op_flops(op: Op) -> Dim:
    kind = OPS[op.name].flops if op.name in OPS else None
    if kind == "result":
        return op.results[0].num_elements() if op.results else 0
    if kind == "input":
        return sum((v.num_elements() for v in op.operands[:len(op.operands) // 2]), 0)
    if kind == "dot":
        lhs = op.operands[0]
        k = math.prod(lhs.shape[i] for i in op.attrs["dot_dimension_numbers"]["lhs_contract"])
        return 2 * op.results[0].num_elements() * k
    if kind == "conv":      # NHWC x HWIO after the layout pass: spatial * Cin/group
        return 2 * op.results[0].num_elements() * math.prod(op.operands[1].shape[:-1])
    return 0


def cost_analysis(prog: Program) -> dict[str, Dim]:
    flops: Dim = 0
    for op in walk(prog.body):
        flops = flops + op_flops(op)
    moved: Dim = 0
    for k in prog.kernels:
        if k.kind == "alias":
            continue
        for v in list(k.inputs) + list(k.outputs):
            moved = moved + raw_bytes(v)
    return {"flops": flops, "bytes accessed": moved}


def memory_analysis(prog: Program) -> dict[str, Dim]:
    def total(values) -> Dim:
        n: Dim = 0
        for v in values:
            n = n + v.num_elements() * numpy_dtype(v.dtype).itemsize
        return n
    return {"temp_size_in_bytes": prog.memory.arena_bytes if prog.memory else 0,
            "argument_size_in_bytes": total(prog.body.params),
            "output_size_in_bytes": total(prog.body.results)}


def evaluate(exprs: dict[str, Dim], dims: dict[str, int]) -> dict[str, int | Dim]:
    """The expressions at these dimension values (those whose variables are all given)."""
    out = {}
    for key, d in exprs.items():
        free = symbolic.variables(d) - set(dims)
        out[key] = symbolic.evaluate(d, dims) if not free else d
    return out
