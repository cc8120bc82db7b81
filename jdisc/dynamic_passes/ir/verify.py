"""IR verifier, run after every pass in debug mode (JDISC_DUMP_DIR or JDISC_VERIFY set; the test
suite sets JDISC_VERIFY). Structure: every value defined once, before its uses. Per op, from
the op registry (ops.py): its operand count, its element-type rule, and for elementwise ops
that operand and result shapes agree (no dim pair provably different). A failure is a bug in
the pass before it."""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.dtypes import bit_width
from jdisc.dynamic_passes.ir.ops import OPS
from jdisc.dynamic_passes.ir.program import Block, Op, Program
from jdisc.errors import JdiscError


def verify(prog: Program) -> None:
    _verify_block(prog.body)
    if len(prog.outputs) != len(prog.body.results):
        raise JdiscError(f"verify: {len(prog.outputs)} output specs, "
                         f"{len(prog.body.results)} results")


def _verify_block(block: Block) -> None:
    defined = {v.id for v in block.params}
    for op in block.ops:
        for v in op.operands:
            if v.id not in defined:
                raise JdiscError(f"verify: stablehlo.{op.name} at {op.loc} uses %{v.id} "
                                 f"before it is defined")
        for r in op.results:
            if r.id in defined:
                raise JdiscError(f"verify: %{r.id} defined twice")
            if r.producer is not op:
                raise JdiscError(f"verify: %{r.id} has the wrong producer")
            defined.add(r.id)
        problem = op_problem(op)
        if problem:
            raise JdiscError(f"verify: stablehlo.{op.name} at {op.loc}: {problem}")
    for v in block.results:
        if v.id not in defined:
            raise JdiscError(f"verify: result %{v.id} is never defined")


def op_problem(op: Op) -> str | None:
    """What is wrong with one op by its registry entry, or None (unknown ops are left to
    check_supported)."""
    info = OPS.get(op.name)
    if info is None or op.attrs.get("unsupported"):
        return None
    if info.operands is not None and len(op.operands) != info.operands:
        return f"{len(op.operands)} operands, expected {info.operands}"
    types = [v.dtype for v in op.operands]
    out = [r.dtype for r in op.results]
    if info.dtypes == "same" and len(set(types + out)) > 1:
        return f"operand and result element types differ: {types} -> {out}"
    if info.dtypes == "to_i1" and (len(set(types)) > 1 or out != ["i1"]):
        return f"expected operands of one element type and an i1 result: {types} -> {out}"
    if info.dtypes == "select" and (types[0] != "i1" or len(set(types[1:] + out)) > 1):
        return f"expected an i1 predicate and one element type otherwise: {types} -> {out}"
    if info.same_shape and op.results and not (
            op.name == "bitcast_convert" and bit_width(types[0]) != bit_width(out[0])):
        shape = op.results[0].shape
        for i, v in enumerate(op.operands):
            if _known(shape) and _known(v.shape) and (len(v.shape) != len(shape) or any(
                    symbolic.prove_eq(a, b) is False for a, b in zip(v.shape, shape))):
                return f"operand {i} has the shape {v.type_str()}, the result {shape}"
    return None


def _known(shape: tuple) -> bool:
    return all(d is not None for d in shape)
