"""Passes that remove run-time shape computation from the program.

After `propagate_shapes`, every shape operand of a dynamic op is known symbolically, so:
* `resolve_dynamic_ops` rewrites `dynamic_broadcast_in_dim`, `dynamic_reshape`, `dynamic_iota`,
  `real_dynamic_slice`, `dynamic_rng_bit_generator` into their static forms (whose shapes
  are symbolic) and turns jax.export's `shape_assertion` custom calls into launcher checks;
* `materialize_dim_values` replaces integer values whose contents are known symbolically and
  that data ops still read (e.g. `mean` dividing by a dynamic size) by `dim_constant` ops that
  the launcher evaluates;
* `eliminate_dead_code` drops what no result needs.
"""

from __future__ import annotations

import re

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.host_values import HostValue, Pred
from jdisc.dynamic_passes.ir.ops import CONTROL_OPS, OPS
from jdisc.dynamic_passes.ir.program import Block, Check, Op, Program, Value, bind_host_value, walk
from jdisc.errors import ShapeError

# jax.export asserts `var >= 1` for every dimension variable; jdisc supports size 0 too (every
# kernel loop and library call handles empty extents, and every size is checked non-negative).
_JAX_MIN_DIM = re.compile(r"Expected value >= 1 for dimension variable")


def resolve_dynamic_ops(prog: Program) -> Program:
    """Pass: dynamic ops -> static ops with symbolic shapes; shape assertions -> checks.

    The assertions' checks (the user's `constraints`, jax.export's checks of the arguments) go
    first, before those shape propagation added for single ops: the launcher reports the first
    check that fails, and a call that breaks `n >= 8` should hear about the constraint, not
    about the slice of 8 that relies on it."""
    op_checks, prog.checks = prog.checks, []
    for block in blocks(prog.body):
        _resolve_block(prog, block)
    prog.checks = prog.checks + op_checks
    return prog


def blocks(block: Block):
    """The block and the regions of its control-flow ops (not scalar bodies), innermost last."""
    yield block
    for op in block.ops:
        if op.name in CONTROL_OPS:
            for region in op.regions:
                yield from blocks(region)


def _resolve_block(prog: Program, block: Block) -> None:
    kept = []
    for op in block.ops:
        if op.name == "shape_assertion":
            _assertion_to_checks(prog, op)
            continue
        if op.name == "real_dynamic_slice" and op.attrs.get("data_start"):
            kept.extend(_split_start(op))
        if op.name == "dynamic_broadcast_in_dim":
            for k in ("known_expanding_dimensions", "known_nonexpanding_dimensions"):
                op.attrs.pop(k, None)
        static = OPS[op.name].static_form if op.name in OPS else None
        if static is not None:
            op.name, op.operands = static[0], op.operands[:static[1]]
        kept.append(op)
    block.ops = kept


def _split_start(op: Op) -> list[Op]:
    """`real_dynamic_slice(x, start, ...)` with a data start -> `dynamic_slice(x, start[0],
    start[1], ...)`; returns the ops extracting the scalars (op itself is rewritten)."""
    x, start = op.operands[:2]
    new_ops, scalars = [], []
    for j in range(x.rank):
        piece = Value(start.dtype, (1,))
        scalar = Value(start.dtype, ())
        new_ops.append(Op("slice", [start], [piece], {"start_indices": (j,),
                          "limit_indices": (j + 1,), "strides": (1,)}, op.loc))
        new_ops.append(Op("reshape", [piece], [scalar], {}, op.loc))
        scalars.append(scalar)
    op.name, op.operands = "dynamic_slice", [x] + scalars
    for k in ("start_indices", "limit_indices", "strides", "data_start"):
        op.attrs.pop(k, None)
    return new_ops


def _assertion_to_checks(prog: Program, op: Op) -> None:
    pred = op.operands[0].sym
    message = op.attrs.get("error_message", "shape assertion failed")
    if pred is not None and len(pred) == 1 and pred[0] is True:
        return      # proven at compile time
    if pred is not None and len(pred) == 1 and pred[0] is False:
        raise ShapeError(f"the shape assertion at {op.loc} can never hold: {message}")
    if pred is None or len(pred) != 1 or not isinstance(pred[0], Pred):
        raise ShapeError(f"jdisc cannot evaluate the shape assertion at {op.loc} symbolically: "
                         f"{message}")
    def as_dim(x):
        return bind_host_value(prog, x, False, op.loc) if isinstance(x, HostValue) else x

    args = tuple(as_dim(v.sym[0]) if v.sym is not None and len(v.sym) == 1 else None
                 for v in op.operands[1:])
    if any(a is None or isinstance(a, (bool, Pred)) for a in args):
        args = ()
    for p in pred[0].conjuncts():
        if (_JAX_MIN_DIM.search(message) and p.cmp == ">=" and p.rhs == 1
                and isinstance(p.lhs, symbolic.Expr) and len(symbolic.variables(p.lhs)) == 1
                and str(p.lhs) in symbolic.variables(p.lhs)):
            continue
        lhs, rhs = as_dim(p.lhs), as_dim(p.rhs)
        if isinstance(lhs, (bool, Pred)) or isinstance(rhs, (bool, Pred)):
            # a comparison of predicates: evaluate the whole predicate on the host
            lhs, rhs, p = as_dim(HostValue("select", (p, 1, 0))), 1, Pred("==", 0, 0)
        prog.checks.append(Check(lhs, p.cmp, rhs, _jax_message(message), args))


def _jax_message(message: str) -> str:
    """jax's assertion text up to its boilerplate about specifications."""
    head = message.split(" Using the following polymorphic shapes", 1)[0]
    return head.replace("Input shapes do not match the polymorphic shapes specification. ", "")


def materialize_dim_values(prog: Program) -> Program:
    """Pass: integer values with known symbolic contents become `dim_constant` ops."""
    for block in blocks(prog.body):
        _materialize_block(prog, block)
    return prog


def _materialize_block(prog: Program, block: Block) -> None:
    new_ops = []
    for op in block.ops:
        if (len(op.results) == 1 and op.results[0].sym is not None
                and op.results[0].dtype != "i1" and op.name != "constant"):
            r = op.results[0]
            values = tuple(bind_host_value(prog, d, False, op.loc) if isinstance(d, HostValue)
                           else d for d in r.sym)
            if any(isinstance(d, (bool, Pred)) for d in values):
                new_ops.append(op)
                continue
            r.sym = values
            new_ops.append(Op("dim_constant", [], [r], {"values": values}, op.loc))
        else:
            new_ops.append(op)
    block.ops = new_ops


def eliminate_dead_code(prog: Program) -> Program:
    """Pass: drop ops whose results nothing uses (ops have no side effects here)."""
    _dce(prog.body)
    return prog


def _dce(block: Block, live: set[int] | None = None) -> None:
    """Regions of control ops are cleaned too; what they read from outside stays live."""
    live = set() if live is None else live
    live.update(v.id for v in block.results)
    kept = []
    for op in reversed(block.ops):
        if any(r.id in live for r in op.results):
            kept.append(op)
            live.update(v.id for v in op.operands)
            if op.name in CONTROL_OPS:
                for region in op.regions:
                    _dce(region, live)
                    for inner in walk(region):
                        live.update(v.id for v in inner.operands)
    block.ops = kept[::-1]
