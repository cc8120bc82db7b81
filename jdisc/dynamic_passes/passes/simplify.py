"""Algebraic folds.

* `fold_add_zero`: `x + 0` is x (a zero constant, or a broadcast of one, of either sign). IEEE
  arithmetic says -0.0 + 0.0 is +0.0, and under flush-to-zero (jd_fp.h) a subnormal x + 0.0 is
  0; XLA folds the add away, so jax.jit returns x itself: -0.0, and the subnormal. This fold
  changes bits, so that jdisc's results are jax.jit's to the bit.
* `fold_select_into_scatter`: `select(m, scatter(x, i, u), x)` is a scatter that applies an
  update only where m holds at the element it targets (where m is false the select keeps x,
  which is what no update leaves). jax's batching of `while_loop` writes every carried value
  back through such a select when the loop's predicate is batched (a vmapped search's walk up
  a tree): the fold makes an iteration one pass over its updates instead of two over the
  whole carried value. The masked scatter has the mask as a fourth operand and
  `mask_when` (the mask value that lets an update through: `select(m, x, scatter)` is the
  same with updates where m is false). Bit for bit the same results.
"""

from __future__ import annotations

import numpy as np

from jdisc.dynamic_passes.ir.program import Block, Op, Program, Value, walk


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


def fold_select_into_scatter(prog: Program) -> Program:
    """Pass: `select(m, scatter(x, i, u), x)` (or with the two swapped) -> a masked scatter,
    where the scatter has one operand and no other user."""
    uses: dict[int, int] = {}
    for op in walk(prog.body):
        for v in op.operands:
            uses[v.id] = uses.get(v.id, 0) + 1
    _results_used(prog.body, uses)
    _fold_selects(prog.body, uses)
    return prog


def _results_used(block: Block, uses: dict[int, int]) -> None:
    for v in block.results:
        uses[v.id] = uses.get(v.id, 0) + 1
    for op in block.ops:
        for region in op.regions:
            _results_used(region, uses)


def _fold_selects(block: Block, uses: dict[int, int]) -> None:
    for at, op in enumerate(block.ops):
        for region in op.regions:
            _fold_selects(region, uses)
        if op.name != "select" or len(op.results) != 1:
            continue
        m, a, b = op.operands
        r = op.results[0]
        for when, s, x in ((True, a, b), (False, b, a)):
            sc = s.producer
            if (sc is None or sc.name != "scatter" or len(sc.operands) != 3
                    or sc.operands[0] is not x or uses.get(s.id, 0) != 1
                    or s.dtype != r.dtype or m.rank not in (0, r.rank)):
                continue
            attrs = dict(sc.attrs, mask_when=when)
            block.ops[at] = Op("scatter", sc.operands + [m], [r], attrs, sc.loc,
                               regions=sc.regions)
            uses[m.id] = uses.get(m.id, 0) + 1      # the old scatter is left to dead code
            break
