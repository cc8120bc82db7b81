"""The pass that reports every op (and every program input) jdisc does not compile, with its
source location, in one error. Which ops it compiles is the op registry (ir/ops.py); which
element types, `dtype_problem` (ir/dtypes.py)."""

from __future__ import annotations

from jdisc.dynamic_passes.ir.dtypes import dtype_problem
from jdisc.dynamic_passes.ir.ops import SUPPORTED_OPS
from jdisc.dynamic_passes.ir.program import Op, Program, walk
from jdisc.errors import UnsupportedOpError

_SHAPE_READERS = frozenset({"get_dimension_size", "shape_of"})


def _type_problems(values) -> list[str]:
    """One entry per distinct unsupported element type among the values."""
    out: dict[str, str] = {}
    for v in values:
        why = dtype_problem(v.dtype)
        if why is not None:
            out.setdefault(v.dtype, f"element type {v.dtype}: {why}")
    return list(out.values())


# rng_bit_generator: the u64 state sizes XLA accepts for each algorithm (DEFAULT is Philox on
# CPU); the bits may be any integer or float type but i1
RNG_STATE_SIZES = {"DEFAULT": (2, 3), "PHILOX": (2, 3), "THREE_FRY": (2,)}


def _rng_problem(op: Op) -> str | None:
    state, bits = op.operands[0], op.results[1]
    algorithm = op.attrs.get("rng_algorithm")
    sizes = RNG_STATE_SIZES.get(algorithm)
    if sizes is None:
        return f"rng algorithm {algorithm}"
    if state.dtype != "u64" or state.rank != 1 or state.shape[0] not in sizes:
        return (f"a {algorithm} state must be u64[{' or '.join(map(str, sizes))}] (as XLA "
                f"requires), not {state.type_str()}")
    if bits.dtype == "i1":
        return "random bits of type i1"
    return None


def check_supported(prog: Program) -> Program:
    """Pass: raise UnsupportedOpError naming every unsupported op (and op or input with an
    unsupported element type) and its location."""
    bad = [f"  argument '{spec.name}': {why}"
           for spec, p in zip(prog.inputs, prog.body.params) for why in _type_problems([p])]
    for op in walk(prog.body):
        reasons = []
        reason = op.attrs.get("unsupported")
        if reason is None and op.name in ("rng_bit_generator", "dynamic_rng_bit_generator"):
            reason = _rng_problem(op)
        if reason is None and op.name not in SUPPORTED_OPS:
            reason = "not supported yet"
        if reason is not None:
            reasons.append(reason)
        region_params = [p for region in op.regions for p in region.params]
        read = [] if op.name in _SHAPE_READERS else op.operands   # they read only the shape
        reasons += _type_problems(read + op.results + region_params)
        if reasons:
            target = op.attrs.get("call_target_name")
            what = (f"stablehlo.custom_call @{target}" if target else
                    op.name if "." in op.name else f"stablehlo.{op.name}")
            bad.append(f"  {what} at {op.loc}: {'; '.join(reasons)}")
    if bad:
        raise UnsupportedOpError(
            f"jdisc cannot compile {len(bad)} op(s) in '{prog.name}':\n" + "\n".join(bad))
    return prog
