"""Which StableHLO ops jdisc compiles, and the pass that reports every one it does not."""

from __future__ import annotations

from jdisc.dynamic_passes.ir import Op, Program, walk
from jdisc.dynamic_passes.shape_prop import ELEMENTWISE
from jdisc.errors import UnsupportedOpError

SUPPORTED_OPS = frozenset({
    # elementwise arithmetic, math, logic
    "abs", "add", "and", "ceil", "compare", "convert", "cosine", "divide", "exponential",
    "exponential_minus_one", "floor", "is_finite", "log", "log_plus_one", "logistic", "maximum",
    "minimum", "multiply", "negate", "not", "or", "power", "remainder", "rsqrt", "sign",
    "sine", "sqrt", "subtract", "tan", "tanh", "xor", "atan2", "cbrt", "select", "clamp",
    "round_nearest_even", "round_nearest_afz", "reduce_precision", "map",
    "real", "imag",
    # integer bit operations
    "shift_left", "shift_right_logical", "shift_right_arithmetic", "popcnt",
    "count_leading_zeros", "bitcast_convert",
    # data movement and creation
    "constant", "dim_constant", "iota", "broadcast_in_dim", "reshape", "transpose",
    "concatenate", "slice", "reverse", "pad", "dynamic_pad", "dynamic_slice",
    "dynamic_update_slice", "gather", "dynamic_gather",
    # reductions and contractions
    "reduce", "dot_general", "sort", "triangular_solve", "reduce_window", "convolution",
    "scatter", "select_and_scatter", "dynamic_conv",
    # control flow, compiled into the host launcher (control_flow.py)
    "while", "if", "case",
    # random bits (counter-based: Philox, ThreeFry)
    "rng_bit_generator", "dynamic_rng_bit_generator",
    # shape computations, resolved at compile time by propagate_shapes / resolve_dynamic_ops
    "get_dimension_size", "dynamic_broadcast_in_dim", "dynamic_reshape", "dynamic_iota",
    "real_dynamic_slice", "shape_assertion", "shape_of", "dynamic_reduce_window",
})


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
    """Pass: raise UnsupportedOpError naming every unsupported op and its location."""
    bad = []
    for op in walk(prog.body):
        reason = op.attrs.get("unsupported")
        if reason is None and op.name in ("rng_bit_generator", "dynamic_rng_bit_generator"):
            reason = _rng_problem(op)
        if reason is None and op.name not in SUPPORTED_OPS:
            reason = "not supported yet"
        if reason is not None:
            target = op.attrs.get("call_target_name")
            what = (f"stablehlo.custom_call @{target}" if target else
                    op.name if "." in op.name else f"stablehlo.{op.name}")
            bad.append(f"  {what} at {op.loc}: {reason}")
    if bad:
        raise UnsupportedOpError(
            f"jdisc cannot compile {len(bad)} op(s) in '{prog.name}':\n" + "\n".join(bad))
    return prog


assert SUPPORTED_OPS - {"while", "if", "case", "sort", "triangular_solve", "reduce_window",
                        "convolution", "scatter", "select_and_scatter", "dynamic_conv",
                        "rng_bit_generator", "dynamic_rng_bit_generator",
                        "constant", "dim_constant", "iota", "broadcast_in_dim", "reshape",
                        "transpose", "concatenate", "slice", "reduce", "dot_general",
                        "select", "clamp", "get_dimension_size", "reverse", "pad",
                        "dynamic_pad", "dynamic_slice", "dynamic_update_slice", "gather",
                        "dynamic_gather",
                        "dynamic_broadcast_in_dim", "dynamic_reshape", "dynamic_iota",
                        "real_dynamic_slice", "shape_assertion", "shape_of",
                        "dynamic_reduce_window"} <= ELEMENTWISE
