"""IR verifier, run after every pass in debug mode (JDISC_DUMP_DIR or JDISC_VERIFY set)."""

from __future__ import annotations

from jdisc.dynamic_passes.ir import Block, Program
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
    for v in block.results:
        if v.id not in defined:
            raise JdiscError(f"verify: result %{v.id} is never defined")
