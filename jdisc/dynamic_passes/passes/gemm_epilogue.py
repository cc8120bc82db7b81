"""GEMM epilogues: a bias and a ReLU after a GEMM run inside the GEMM's own kernel.

A dense layer is `act(x @ w + b)`. Fusion (fusion.py) gives the GEMM a dot kernel of its own
and the bias and activation a loop kernel after it, which reads the whole product back and
writes it again, and is a kernel unit that every program compiles (20-25 ms of the C compiler
for an MLP's two). Like cuBLASLt's epilogues, jdisc's GEMM has a fixed menu of them instead:
the runtime's `jd_dot` (c_runtime/jd_gemm.h) adds a bias along the rows and takes max(x, 0) on
each piece of the product as soon as the piece's GEMM is done, while it is in cache, in the
pool's job that computed it. This pass moves such a loop kernel into the dot kernel before it
(`Kernel.epilogue`), where:

* the dot is one GEMM that the runtime runs (f32 or f64, every operand of the result's
  dtype), its product read by this loop kernel only (and no program result);
* the rhs has one free dim, so the product's last axis is the GEMM's columns (its rows are
  every other axis, contiguous);
* the loop kernel computes, from the product P and at most one other input b, one of
  `P + B`, `max(P + B, 0)`, `max(P, 0)` (either operand order), where B broadcasts a rank-1 b
  of the product's last dim along the last axis (through reshapes that only add or drop dims
  of 1, as flax's Dense does) and 0 is a splat +0.0 of the dtype.

Anything else stays as it is. The epilogue does the same operations on the same values in the
same order as the loop kernel did (an add of the dtype, then the maximum's semantics), so the
results are the same bits. The merged kernel takes the loop kernel's place in the order (its
other input may be computed between the two) and its output; the product then has no buffer.
Linear in the number of ops.
"""

from __future__ import annotations

import numpy as np

from jdisc.dynamic_passes.ir.program import Op, Program, Value
from jdisc.dynamic_passes.passes.dots import gemm_layout
from jdisc.dynamic_passes.passes.fusion import Epilogue, Kernel, is_splat

DTYPES = ("f32", "f64")


def fuse_gemm_epilogues(prog: Program) -> Program:
    """Pass: a bias and/or ReLU loop kernel after a dot kernel becomes that kernel's epilogue."""
    kernels = prog.kernels
    readers: dict[int, int] = {}
    for k in kernels:
        for v in k.inputs:
            readers[v.id] = readers.get(v.id, 0) + 1
    results = {v.id for v in prog.body.results}
    writer = {v.id: i for i, k in enumerate(kernels) for v in k.outputs}
    merged: dict[int, int] = {}     # loop kernel index -> index of the dot kernel taking it
    for j, loop in enumerate(kernels):
        if loop.kind != "loop" or len(loop.outputs) != 1 or loop.equal_dims:
            continue
        for p in loop.inputs:
            i = writer.get(p.id)
            if i is None or readers.get(p.id) != 1 or p.id in results:
                continue
            dot = kernels[i]
            if dot.kind != "dot" or dot.epilogue is not None or not _one_gemm(dot, p):
                continue
            found = _match(loop, p)
            if found is not None:
                bias, relu = found
                merged[j] = i
                dot.epilogue = Epilogue(dot.root, bias, relu)
                dot.ops = dot.ops + loop.ops
                dot.inputs = dot.inputs + ([bias] if bias is not None else [])
                dot.outputs = list(loop.outputs)
            break
    if merged:
        gone = set(merged.values())
        prog.kernels = [kernels[merged[j]] if j in merged else k
                        for j, k in enumerate(kernels) if j not in gone]
    return prog


def _one_gemm(dot: Kernel, product: Value) -> bool:
    """The dot kernel is one GEMM of f32 or f64 whose product is `product`, and the product's
    last axis is the rhs's one free dim (its columns)."""
    op = dot.root
    if op.name != "dot_general" or op.results[0] is not product or len(dot.outputs) != 1:
        return False
    if product.dtype not in DTYPES or any(v.dtype != product.dtype for v in op.operands):
        return False
    lay = gemm_layout(op)
    return lay is not None and len(lay.n) == 1 and product.rank >= 1


def _match(loop: Kernel, product: Value) -> tuple[Value | None, bool] | None:
    """(bias input or None, relu) if the loop kernel computes `product` + bias, its ReLU, or
    the product's ReLU, as the module docstring says; else None."""
    last = product.rank - 1
    # value id -> what it is: ("p",) the product, ("b", axis) the bias along `axis`,
    # ("zero",) a splat +0.0, ("sum",) product + bias, ("relu", had_bias)
    kinds: dict[int, tuple] = {product.id: ("p",)}
    bias: Value | None = None
    for x in loop.inputs:
        if x is not product:
            if bias is not None or x.rank != 1 or x.dtype != product.dtype:
                return None
            bias = x
            kinds[x.id] = ("b", 0)
    for op in loop.ops:
        kind = _classify(op, kinds, product)
        if kind is None:
            return None
        kinds[op.results[0].id] = kind
    out = loop.outputs[0]
    if loop.ops[-1].results[0] is not out or out.dtype != product.dtype or \
            tuple(out.shape) != tuple(product.shape):
        return None
    final = kinds.get(out.id)
    if bias is not None:
        if bias.shape[0] != product.shape[last]:
            return None
        if final == ("sum",):
            return bias, False
        if final == ("relu", True):
            return bias, True
        return None
    return (None, True) if final == ("relu", False) else None


def _reshaped_bias(x: Value, axis: int, r: Value) -> tuple | None:
    """The bias along `axis` of x reshaped to r, where every other dim is a 1 on both sides
    (flax's Dense reshapes its bias [n] to [1, n]): ("b", its axis in r), else None."""
    if any(d != 1 for i, d in enumerate(x.shape) if i != axis):
        return None
    rest = [i for i, d in enumerate(r.shape) if d != 1]
    if not rest:          # n is 1: every element is the bias's only one
        return ("b", r.rank - 1)
    if len(rest) == 1 and r.shape[rest[0]] == x.shape[axis]:
        return ("b", rest[0])
    return None


def _classify(op: Op, kinds: dict[int, tuple], product: Value) -> tuple | None:
    if len(op.results) != 1:
        return None
    r = op.results[0]
    args = [kinds.get(v.id) for v in op.operands]
    if op.name == "constant":
        value = np.asarray(op.attrs["value"])
        if value.size >= 1 and is_splat(value) and r.dtype == product.dtype:
            first = value.reshape(-1)[:1]
            if first[0] == 0 and not np.signbit(first[0]):
                return ("zero",)
        return None
    if op.name == "broadcast_in_dim" and len(args) == 1:
        a = args[0]
        if a == ("zero",):
            return a
        if a is not None and a[0] == "b":
            return ("b", op.attrs["broadcast_dimensions"][a[1]])
        return None
    if op.name == "reshape" and len(args) == 1 and args[0] is not None and args[0][0] == "b":
        return _reshaped_bias(op.operands[0], args[0][1], r)
    if r.dtype != product.dtype or tuple(r.shape) != tuple(product.shape):
        return None
    if op.name == "add" and set(args) == {("p",), ("b", product.rank - 1)}:
        return ("sum",)
    if op.name == "maximum" and ("zero",) in args:
        other = args[1] if args[0] == ("zero",) else args[0]
        if other == ("sum",):
            return ("relu", True)
        if other == ("p",):
            return ("relu", False)
    return None
