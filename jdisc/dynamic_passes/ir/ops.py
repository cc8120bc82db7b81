"""The op registry: everything jdisc knows about one StableHLO op, in one entry.

Every op jdisc compiles has an `OpInfo` in `OPS`; the sets the passes consult (which ops are
supported, elementwise, fusible into a loop nest, kernels of their own, ...) are derived from
it below, never kept by hand. Adding an elementwise op means one line here, its C in
`lowering/scalar_ops.py` (checked at import there) and a differential test; CONTRIBUTING.md
walks through it.

Categories:

* `elementwise` -- one result element from the operands' elements at the same index; with
  `same_shape` (the default) every operand has the result's shape, else (select, clamp) scalar
  operands broadcast;
* `movement`    -- data movement and layout, index arithmetic in a loop nest (broadcast, slice,
  transpose, pad, gather, ...) or a kernel of its own (concatenate);
* `creation`    -- values made from nothing (constant, iota, dim_constant);
* `reduction`   -- reductions and contractions (reduce, dot_general, convolution, sort, ...);
* `control`     -- while/if/case, compiled into the host launcher;
* `random`      -- counter-based random bits;
* `shape`       -- shape computations, resolved at compile time (shape propagation, dynamic-op
  resolution) and never lowered themselves.
"""

from __future__ import annotations

import dataclasses

# attributes whose entries may be symbolic dims (the kernel's C then needs their variables)
_SLICE_DIMS = ("start_indices", "limit_indices", "strides")
_PAD_DIMS = ("edge_padding_low", "edge_padding_high", "interior_padding")


@dataclasses.dataclass(frozen=True)
class OpInfo:
    name: str                   # StableHLO's name without the dialect (`dot_general`)
    category: str               # see the module docstring
    same_shape: bool = False    # elementwise with operands of the result's shape
    in_loop: bool = False       # a loop nest evaluates it at any index (loop fusion)
    free: bool = False          # recomputed in every consumer: costs an index, no memory
    expensive: bool = False     # worth computing once: never recomputed per broadcast element
    kernel: str | None = None   # the kind of the kernel it is, when never fused into another
    reads_memory: bool = False  # its kernel reads its operands from buffers
    dim_attrs: tuple[str, ...] = ()     # attributes that may hold symbolic dims
    # its regions: "scalar" (a scalar computation rendered inline), "reducer" (recognised as
    # add/max/... or kept as a scalar body), "program" (whole sub-programs run by the host)
    regions: str | None = None
    operands: int | None = None     # how many operands, where fixed (the verifier checks it)
    # element types: "same" (operands and results all of one type), "to_i1" (operands of one
    # type, an i1 result), "select" (an i1 predicate, then the result's type), None (any)
    dtypes: str | None = None
    # how it partitions along a parallel dim: the name of its rule in parallel_axes.py (None:
    # unknown, so a dim that reaches it is not parallel)
    partition: str | None = None
    # flops it counts in cost.py: "result" (one per result element), "input" (one per element
    # of its inputs, the first half of its operands), "dot" or "conv" (two per multiply-add)
    flops: str | None = None
    # its scalar C has no branch on values: "always", "float" (only on floating-point types,
    # its integer form tests values), "convert" (convert's rule: not from a float to an
    # integer, nor to or from a complex), None (it may branch; codegen keeps GCC from
    # if-converting)
    branch_free: str | None = None
    # a shape op that resolve_dynamic_ops rewrites to a static one: (that op's name, the
    # operands it keeps, as a slice end: 1 keeps the first, -5 drops the five shape operands)
    static_form: tuple[str, int] | None = None


def _elementwise(names: str, operands: int | None, dtypes: str | None = "same",
                 **kw) -> list[OpInfo]:
    return [OpInfo(n, "elementwise", same_shape=True, in_loop=True, operands=operands,
                   dtypes=dtypes, partition="elementwise", flops="result", **kw)
            for n in names.split()]


_ENTRIES: list[OpInfo] = [
    *_elementwise("""
        ceil floor negate not round_nearest_afz round_nearest_even sign popcnt
        count_leading_zeros reduce_precision""", 1),
    *_elementwise("""
        add and maximum minimum multiply or subtract xor shift_left shift_right_arithmetic
        shift_right_logical""", 2),
    *_elementwise("is_finite", 1, "to_i1"),
    *_elementwise("compare", 2, "to_i1"),
    # abs: a complex operand has a real result
    *_elementwise("convert bitcast_convert real imag abs", 1, None),
    *_elementwise("complex", 2, None),
    *_elementwise("map", None, None, regions="scalar"),   # (its scalar region reads no axis)
    # transcendental or dividing: recomputing one per broadcast element would cost real time
    *_elementwise("""
        exponential exponential_minus_one log log_plus_one tanh logistic sine cosine tan cbrt
        sqrt rsqrt""", 1, expensive=True),
    *_elementwise("power atan2 divide remainder", 2, expensive=True),
    OpInfo("select", "elementwise", in_loop=True, operands=3, dtypes="select",
           partition="elementwise"),
    OpInfo("clamp", "elementwise", in_loop=True, operands=3, dtypes="same",
           partition="elementwise"),
    # data movement and creation
    OpInfo("broadcast_in_dim", "movement", in_loop=True, partition="movement"),
    OpInfo("reshape", "movement", in_loop=True, partition="reshape"),
    OpInfo("transpose", "movement", in_loop=True, partition="movement"),
    OpInfo("slice", "movement", in_loop=True, dim_attrs=_SLICE_DIMS, partition="slice"),
    OpInfo("reverse", "movement", in_loop=True, partition="reverse"),
    OpInfo("pad", "movement", in_loop=True, dim_attrs=_PAD_DIMS, partition="pad"),
    OpInfo("dynamic_slice", "movement", in_loop=True, dim_attrs=("slice_sizes",),
           partition="dynamic_slice"),
    OpInfo("dynamic_update_slice", "movement", in_loop=True, partition="dynamic_update_slice"),
    OpInfo("gather", "movement", in_loop=True, dim_attrs=("slice_sizes",), partition="gather"),
    OpInfo("concatenate", "movement", kernel="concat", partition="concatenate"),
    OpInfo("dynamic_pad", "shape", static_form=("pad", 2)),     # padding set by propagate_shapes
    OpInfo("dynamic_gather", "shape", static_form=("gather", 2)),   # slice sizes likewise
    OpInfo("constant", "creation", partition="constant"),
    OpInfo("iota", "creation", free=True, partition="iota"),
    OpInfo("dim_constant", "creation", free=True, dim_attrs=("values",),
           partition="dim_constant"),
    # reductions, contractions and library calls
    OpInfo("reduce", "reduction", regions="reducer", partition="reduce", flops="input"),
    OpInfo("dot_general", "reduction", kernel="dot", reads_memory=True,
           partition="dot_general", flops="dot"),
    OpInfo("sort", "reduction", kernel="sort", reads_memory=True, regions="scalar",
           partition="sort"),
    OpInfo("triangular_solve", "reduction", kernel="solve", reads_memory=True),
    OpInfo("lapack", "reduction", kernel="lapack", reads_memory=True),   # linalg.py
    OpInfo("fft", "reduction", kernel="fft", reads_memory=True, operands=1, partition="fft"),
    OpInfo("reduce_window", "reduction", kernel="window", regions="reducer",
           partition="reduce_window", flops="input"),
    OpInfo("convolution", "reduction", kernel="conv", reads_memory=True,
           partition="convolution", flops="conv"),
    OpInfo("scatter", "reduction", kernel="scatter", reads_memory=True, regions="scalar",
           partition="scatter"),
    OpInfo("select_and_scatter", "reduction", kernel="selscatter", reads_memory=True,
           regions="scalar"),
    OpInfo("dynamic_conv", "shape"),
    # control flow, compiled into the host launcher (control_flow.py)
    OpInfo("while", "control", kernel="while", reads_memory=True, regions="program",
           partition="control"),
    OpInfo("if", "control", kernel="if", reads_memory=True, regions="program",
           partition="control"),
    OpInfo("case", "control", kernel="case", reads_memory=True, regions="program",
           partition="control"),
    # random bits (counter-based: Philox, ThreeFry)
    OpInfo("rng_bit_generator", "random", kernel="rng"),
    OpInfo("dynamic_rng_bit_generator", "shape", static_form=("rng_bit_generator", 1)),
    # shape computations, resolved by propagate_shapes / resolve_dynamic_ops
    *(OpInfo(n, "shape") for n in """
        get_dimension_size shape_assertion shape_of shape_broadcast cstr_broadcastable
        const_witness assuming_all""".split()),
    OpInfo("dynamic_broadcast_in_dim", "shape", static_form=("broadcast_in_dim", 1)),
    OpInfo("dynamic_reshape", "shape", static_form=("reshape", 1)),
    OpInfo("dynamic_iota", "shape", static_form=("iota", 0)),
    OpInfo("real_dynamic_slice", "shape", static_form=("slice", 1)),   # bounds set likewise
    # its n inputs and n init values, then five shape operands (attrs set by propagate_shapes)
    OpInfo("dynamic_reduce_window", "shape", static_form=("reduce_window", -5)),
]

OPS: dict[str, OpInfo] = {info.name: info for info in _ENTRIES}
assert len(OPS) == len(_ENTRIES), "an op is registered twice"


def _set(names: str, **facts) -> None:
    for name in names.split():
        OPS[name] = dataclasses.replace(OPS[name], **facts)


# scalar C without a branch on values (lowering/scalar_ops.py; slice and reverse only move the
# index, lowering/loops.py); divide and power test values only in their integer forms, convert
# only from a float to an integer (saturating) and to or from a complex number
_set("""add subtract multiply negate exponential exponential_minus_one log log_plus_one tanh
        logistic sqrt rsqrt cbrt sine cosine tan atan2 maximum minimum abs compare constant
        broadcast_in_dim reshape transpose reduce floor ceil round_nearest_even is_finite
        dim_constant select and or xor not iota slice reverse""", branch_free="always")
_set("divide power", branch_free="float")
_set("convert", branch_free="convert")


def _names(pred) -> frozenset[str]:
    return frozenset(name for name, info in OPS.items() if pred(info))


SUPPORTED_OPS = frozenset(OPS)
# the generic elementwise shape rule: every operand has the result's shape
ELEMENTWISE = _names(lambda i: i.same_shape)
# one result element from the operands' elements at its own index (select, clamp too)
SAME_INDEX = _names(lambda i: i.category == "elementwise")
LOOP_OPS = _names(lambda i: i.in_loop)
FREE_OPS = _names(lambda i: i.free)
EXPENSIVE = _names(lambda i: i.expensive)
MEMORY_OPERANDS = _names(lambda i: i.reads_memory)
CONTROL_OPS = _names(lambda i: i.regions == "program")
SCALAR_REGION_OPS = _names(lambda i: i.regions == "scalar")
ROOT_KINDS: dict[str, str] = {name: i.kernel for name, i in OPS.items() if i.kernel}
DIM_ATTRS = tuple(sorted({a for i in OPS.values() for a in i.dim_attrs}))
