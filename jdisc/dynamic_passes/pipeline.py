"""The compile pipeline over jdisc's IR, top to bottom.

`PASSES` is the whole middle end: each entry is a named function Program -> Program. With
`JDISC_DUMP_DIR` set, the IR after each pass is written there (`NN_<pass>.txt`). With
`JDISC_CHECK_PLAN=1`, the kernel and memory plans of every program (the top level and each
control-flow region) are checked against their invariants (plan_check.py) once they are made.

An exception that is not a JdiscError, raised in any stage, is a bug in jdisc: it is re-raised
as a CompileError naming the stage (and the op being worked on, when known), chaining the
original (`errors.compile_stage`).
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from jdisc.dynamic_passes.algebra.constraints import ShapeConstraints
from jdisc.dynamic_passes.ir.program import Program, Scope, Value, format_program
from jdisc.dynamic_passes.ir.verify import verify
from jdisc.dynamic_passes.passes.control_flow import (confirm_in_place, forward_loop_invariants,
                                                      outline_regions, scratch_layout)
from jdisc.dynamic_passes.passes.convolutions import canonicalize_convolutions
from jdisc.dynamic_passes.passes.dots import canonicalize_dot_layouts
from jdisc.dynamic_passes.passes.dynamic_ops import (eliminate_dead_code, materialize_dim_values,
                                                     resolve_dynamic_ops)
from jdisc.dynamic_passes.passes.fusion import plan_kernels
from jdisc.dynamic_passes.passes.layout import fold_layout_moves
from jdisc.dynamic_passes.passes.gemm_epilogue import fuse_gemm_epilogues
from jdisc.dynamic_passes.passes.memory_plan import plan_donation, plan_memory
from jdisc.dynamic_passes.passes.parallel_axes import find_parallel_axes
from jdisc.dynamic_passes.passes.plan_check import check_plan
from jdisc.dynamic_passes.passes.shape_prop import propagate_shapes
from jdisc.dynamic_passes.passes.simplify import fold_add_zero, fold_select_into_scatter
from jdisc.dynamic_passes.passes.supported import check_supported
from jdisc.errors import JdiscError, compile_stage, internal_error

Pass = Callable[[Program], Program]


def analyze_constraints(prog: Program) -> Program:
    """Pass: attach `prog.constraints`, the facts the launcher's checks guarantee
    (algebra/constraints.py)."""
    prog.constraints = ShapeConstraints.from_program(prog)
    return prog


def compile_regions(prog: Program) -> Program:
    """Pass: the regions of while/if/case (outlined Programs) go through REGION_PASSES, with
    the top level's constraints; each control op gets a scratch buffer for its regions."""
    scope = prog.scope or Scope(prog.dim_vars, prog.derived, list(prog.checks))
    for op in prog.body.ops:
        if not op.programs:
            continue
        for sub in op.programs:
            # inside a region, its own checks hold too
            sub.scope = Scope(scope.dim_vars, scope.derived, scope.checks + sub.checks)
            sub.constraints = (ShapeConstraints.from_program(sub.scope) if sub.checks
                               else prog.constraints)
            run_passes(sub, REGION_PASSES, dump_as=f"{prog.name}.{sub.name}")
            for k in sub.kernels:   # one C namespace for the whole program
                k.name = k.name.replace("jd_", f"jd_{sub.name}_", 1)
        if op.name == "while":
            confirm_in_place(op)      # its body planned: which carried buffers stay single
        _, _, total = scratch_layout(op)
        scratch = Value("u8", (total,))
        scratch.producer = op
        op.results.append(scratch)
        op.attrs["scratch"] = True
    return prog


PASSES: list[Pass] = [
    check_supported,          # every unsupported op, with its location, in one error
    forward_loop_invariants,  # while: values carried unchanged are read from the operand
    propagate_shapes,         # symbolic shapes for every value; shape computations evaluated
    resolve_dynamic_ops,      # dynamic_* ops -> static ops with symbolic shapes; assertions -> checks
    materialize_dim_values,   # dimension sizes used as data -> dim_constant
    fold_add_zero,            # x + 0 -> x, as XLA folds it (signed zeros, subnormals)
    fold_select_into_scatter, # select(m, scatter(x, ...), x) -> a scatter masked by m
    eliminate_dead_code,
    outline_regions,          # while/if/case regions -> Programs with explicit captures
    analyze_constraints,      # facts the launcher's checks guarantee: equalities, bounds, divisors
    canonicalize_dot_layouts, # dot_general operands in GEMM layouts (transposes where needed)
    canonicalize_convolutions,  # convolutions in NHWC / HWIO (transposes where needed)
    fold_layout_moves,        # transposes and size-1 reshapes that end in order -> a reshape
    compile_regions,          # the same passes inside every region (below)
    plan_kernels,             # fusion: kernels and materialised buffers
    fuse_gemm_epilogues,      # a bias and ReLU after a GEMM: done by the GEMM's pieces
    plan_memory,              # one arena per call; buffers reuse slots they provably fit
    plan_donation,            # results that may take a donated input's buffer
    find_parallel_axes,       # the sharding rule: parallel input axes -> output axes
]

# A region's shapes and checks were settled with the top level; the rest runs per region.
REGION_PASSES: list[Pass] = [canonicalize_dot_layouts, canonicalize_convolutions,
                             fold_layout_moves, compile_regions, plan_kernels, fuse_gemm_epilogues, plan_memory]


def dump_dir() -> str | None:
    return os.environ.get("JDISC_DUMP_DIR") or None


def dump(name: str, text: str | bytes, subdir: str) -> None:
    root = dump_dir()
    if root is None:
        return
    # the subdirectory is named after the user's function: one path component, never `..`
    safe = "".join(ch if ch.isalnum() or ch in "_-.<>" else "_" for ch in subdir).lstrip(".")
    path = os.path.join(root, safe or "_")
    os.makedirs(path, exist_ok=True)
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(os.path.join(path, name), mode) as f:
        f.write(text)


def check_plan_enabled() -> bool:
    return os.environ.get("JDISC_CHECK_PLAN", "") not in ("", "0")


def run_passes(prog: Program, passes: Sequence[Pass] = PASSES,
               dump_as: str | None = None) -> Program:
    where = dump_as or prog.dump_name or prog.name
    for i, p in enumerate(passes):
        stage = f"the pass '{p.__name__}' of '{where}'"
        with compile_stage(stage):
            prog = p(prog)
        if dump_dir() is not None or os.environ.get("JDISC_VERIFY"):
            with compile_stage(f"verifying the IR after {stage}"):
                try:
                    verify(prog)
                except JdiscError as err:   # the IR is malformed: a bug in that pass
                    raise internal_error(f"verifying the IR after {stage}", err) from err
        if dump_dir() is not None:
            dump(f"{i + 1:02d}_{p.__name__}.txt", format_program(prog), where)
    if prog.memory is not None and check_plan_enabled():
        with compile_stage(f"the plan checker on '{where}'"):
            check_plan(prog)
    return prog
