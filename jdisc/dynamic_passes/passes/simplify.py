"""Algebraic folds that XLA's simplifier makes and that change bits, so that jdisc's results
are jax.jit's to the bit.

* `fold_add_zero`: `x + 0` is x (a zero constant, or a broadcast of one, of either sign). IEEE
  arithmetic says -0.0 + 0.0 is +0.0, and under flush-to-zero (jd_fp.h) a subnormal x + 0.0 is
  0; XLA folds the add away, so jax.jit returns x itself: -0.0, and the subnormal.
"""

from __future__ import annotations

import numpy as np

from jdisc.dynamic_passes.ir.program import Block, Program, Value


def _is_zero(v: Value) -> bool:
    op = v.producer
    if op is not None and op.name == "broadcast_in_dim":
        op = op.operands[0].producer
    if op is None or op.name != "constant":
        return False
    arr = np.asarray(op.attrs["value"])
    return arr.size >= 1 and arr.size <= 1 << 16 and not np.any(arr)


def fold_add_zero(prog: Program) -> Program:
    """Pass: `x + 0` -> x, where x has the result's shape and type (as XLA folds it)."""
    _fold_block(prog.body, {})
    return prog


def _fold_block(block: Block, subst: dict[int, Value]) -> None:
    for op in block.ops:
        if subst:
            op.operands = [subst.get(v.id, v) for v in op.operands]
        for region in op.regions:
            _fold_block(region, subst)
        if op.name != "add" or len(op.results) != 1:
            continue
        r = op.results[0]
        for x, zero in (op.operands, op.operands[::-1]):
            if x.dtype == r.dtype and x.shape == r.shape and _is_zero(zero):
                subst[r.id] = x
                break
    if subst:
        block.results = [subst.get(v.id, v) for v in block.results]
