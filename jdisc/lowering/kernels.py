"""C for the generic loop and concatenate kernels, and what every kernel needs: its dimension
variables, its speculation guards, deep recursion for deep kernels.

A kernel is a loop nest over its output's symbolic shape. Inside it, any value is rendered *at
an index* (loops.Renderer): a buffer is read at that index, an op inlined into the kernel is
rendered from its operands at the index its semantics maps to (broadcasts, transposes, slices
and reshapes are index arithmetic). So fusing more ops into a kernel needs no new code here,
only a different plan. Every loop bound and every buffer extent comes from the symbolic shapes.
"""

from __future__ import annotations

import contextlib
import sys

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.ops import DIM_ATTRS, OPS
from jdisc.dynamic_passes.ir.program import Op
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext, Renderer, loop_nest



def kernel_dim_vars(kernel: Kernel) -> list[str]:
    """Dimension variables the kernel's C needs, sorted (deterministic signature)."""
    names: set[str] = set()
    for op in kernel.ops:
        for v in list(op.operands) + list(op.results):
            for d in v.shape:
                names |= symbolic.variables(d)
        for key in OPS[op.name].dim_attrs if op.name in OPS else DIM_ATTRS:
            for d in op.attrs.get(key) or ():
                names |= symbolic.variables(d)
    return sorted(names)


@contextlib.contextmanager
def deep_recursion(depth: int):
    """Room for rendering a kernel whose dataflow is `depth` ops deep: the renderer recurses
    from a value to its operands (a few Python frames per op; in CPython >= 3.11 these use no
    C stack). The previous limit is restored afterwards."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 8 * depth + 1000))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def speculation_guards(kernel: Kernel) -> list[tuple[Dim, Dim]]:
    """Broadcast dims that may or may not expand at run time: (operand dim, result dim).

    A kernel with guards gets two versions: one assuming every pair equal (plain indices, no
    per-element test), one general; the launcher picks per call."""
    pairs: list[tuple[Dim, Dim]] = []
    for op in kernel.ops:
        if op.name != "broadcast_in_dim":
            continue
        x, v = op.operands[0], op.results[0]
        for j, d in enumerate(op.attrs["broadcast_dimensions"]):
            xd, od = x.shape[j], v.shape[d]
            if xd != 1 and not symbolic.prove_eq(xd, od) and (xd, od) not in pairs \
                    and (xd, od) not in kernel.equal_dims:
                pairs.append((xd, od))
    return pairs


def emit_kernel(ctx: KernelContext) -> None:
    """The body of a loop / concat kernel (inside the function braces)."""
    w, kernel, inputs, outputs, dim, assume = ctx.unpack()
    r = Renderer(w, inputs, dim, assume)
    if kernel.kind == "loop":
        out = kernel.outputs[0]
        idx, close = loop_nest(w, out.shape, dim)
        val = r.load(out, idx)
        w(f"{outputs[0]}[{r.linear(idx, out.shape)}] = {val};")
        close()
    elif kernel.kind == "concat":
        _emit_concat(w, r, kernel.root, outputs[0], dim)
    else:
        raise UnsupportedOpError(f"kernel kind {kernel.kind}")


def _emit_concat(w: CWriter, r: Renderer, op: Op, output: str, dim) -> None:
    axis = op.attrs["dimension"]
    out = op.results[0]
    offset: Dim = 0
    for x in op.operands:
        w.open()
        r.push()
        idx, close = loop_nest(w, x.shape, dim, keep_inner=True)
        val = r.load(x, idx)
        oidx = list(idx)
        if offset != 0:
            oidx[axis] = f"({dim(offset)} + {idx[axis]})"
        w(f"{output}[{r.linear(tuple(oidx), out.shape)}] = {val};")
        close()
        r.pop()
        w.close()
        offset = offset + x.shape[axis]
