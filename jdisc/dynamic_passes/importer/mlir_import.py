"""StableHLO (text, bytecode or portable artifact) -> MLIR clean-up -> jdisc IR.

MLIR is read only through jaxlib's bindings; nothing here parses MLIR text by hand. The MLIR
pass pipeline turns composites into calls and CHLO into StableHLO, then canonicalises; calls are
inlined while importing (jaxlib's bindings do not register the func dialect's inliner interface,
so MLIR's `inline` pass leaves `func.call` alone).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
from jaxlib.mlir import ir, passmanager
from jaxlib.mlir.dialects import chlo, stablehlo

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.importer import legacy_ops, top_k, tuples
from jdisc.dynamic_passes.importer.linalg import import_lapack_call, lapack_routine
from jdisc.dynamic_passes.ir.dtypes import dtype_problem, numpy_dtype
from jdisc.dynamic_passes.ir.ops import CONTROL_OPS, SCALAR_REGION_OPS
from jdisc.dynamic_passes.ir.program import ArgSpec, Block, Op, Program, Value
from jdisc.errors import (ArgumentError, JdiscError, UnsupportedOpError, compile_stage,
                          internal_error, short_exception)

MLIR_PIPELINE = (
    "builtin.module("
    "func.func(stablehlo-legalize-composite-to-call),"
    "inline,"
    "func.func(chlo-legalize-to-stablehlo),"
    "canonicalize,cse,symbol-dce)"
)

_ELEMENT_TYPES = {"ui8": "u8", "ui16": "u16", "ui32": "u32", "ui64": "u64", "index": "i64",
                  "complex<f32>": "c64", "complex<f64>": "c128"}
_REDUCERS = {"stablehlo.add": "add", "stablehlo.maximum": "max", "stablehlo.minimum": "min",
             "stablehlo.multiply": "mul", "stablehlo.and": "and", "stablehlo.or": "or",
             "stablehlo.xor": "xor"}


def make_context() -> ir.Context:
    from jax._src.interpreters import mlir as jax_mlir
    ctx = jax_mlir.make_ir_context()
    stablehlo.register_stablehlo_passes()
    return ctx


def parse_module(module: str | bytes, ctx: ir.Context) -> ir.Module:
    """Text, MLIR bytecode or a StableHLO portable artifact (VHLO bytecode); ArgumentError when
    it does not parse."""
    if not isinstance(module, (str, bytes, bytearray)):
        raise ArgumentError(f"a StableHLO module must be text or bytes, not "
                            f"{type(module).__name__}")
    try:
        with ctx:
            if isinstance(module, (bytes, bytearray)):
                try:
                    return stablehlo.deserialize_portable_artifact(ctx, bytes(module))
                except Exception:   # plain MLIR bytecode of StableHLO
                    return ir.Module.parse(bytes(module))
            return ir.Module.parse(module)
    except Exception as err:    # jaxlib's MLIRError says where
        raise ArgumentError(f"not a valid StableHLO module: {short_exception(err, 600)}") from err


def run_mlir_pipeline(module: ir.Module) -> tuple | None:
    """The module cleaned up for the import; returns `@main`'s tuple trees (tuples.py) when
    it took or returned tuples, else None."""
    with compile_stage("the MLIR import (checking for known miscompiles)"):
        _refuse_known_miscompiles(module)
    with compile_stage("the MLIR import (tuple arguments and results of @main)"):
        trees = tuples.flatten_main_tuples(module)
    with compile_stage("the MLIR import (CHLO ops older exporters wrote as custom calls)"):
        _chlo_from_custom_calls(module)
    with compile_stage("the MLIR import (top-k custom calls as a sort)"):
        top_k.rewrite(module, list(_all_ops(module)))
    with compile_stage("the MLIR import (deprecated ops other producers write)"), module.context:
        legacy_ops.rewrite(module, list(_all_ops(module)))
    with compile_stage(f"jaxlib's MLIR pass pipeline ({MLIR_PIPELINE})"), module.context:
        passmanager.PassManager.parse(MLIR_PIPELINE).run(module.operation)
    return trees


def _all_ops(module: ir.Module):
    """Every operation of the module, nested regions included (an explicit stack: no
    recursion limit on deep nesting)."""
    stack = [op.operation for op in reversed(list(module.body.operations))]
    while stack:
        o = stack.pop()
        yield o
        for region in reversed(list(o.regions)):
            for block in reversed(list(region.blocks)):
                stack.extend(inner.operation for inner in reversed(list(block.operations)))


def _refuse_known_miscompiles(module: ir.Module) -> None:
    """Ops that jaxlib's own legalisation gets wrong: refused, never silently miscompiled.
    `chlo.scan {is_reverse = true}` is legalised as a forward scan (jaxlib 0.10.2)."""
    bad = [f"  chlo.scan with is_reverse at {format_location(o.location)}: jaxlib's "
           f"chlo-legalize-to-stablehlo ignores is_reverse"
           for o in _all_ops(module) if o.name == "chlo.scan" and "is_reverse" in o.attributes
           and str(o.attributes["is_reverse"]) == "true"]
    if bad:
        raise UnsupportedOpError(f"jdisc cannot compile {len(bad)} op(s):\n" + "\n".join(bad))


# jax 0.8's export writes these CHLO ops as `custom_call @mhlo.<name>` (one operand, one result)
_CHLO_UNARY_CALLS = {f"mhlo.{name}": cls for name, cls in (
    ("sinh", "SinhOp"), ("cosh", "CoshOp"), ("asin", "AsinOp"), ("acos", "AcosOp"),
    ("asinh", "AsinhOp"), ("acosh", "AcoshOp"), ("atan", "AtanOp"), ("atanh", "AtanhOp"),
    ("tan", "TanOp"), ("erf", "ErfOp"), ("erfc", "ErfcOp"), ("erf_inv", "ErfInvOp"),
    ("lgamma", "LgammaOp"), ("digamma", "DigammaOp"), ("bessel_i1e", "BesselI1eOp"))}


def _chlo_from_custom_calls(module: ir.Module) -> None:
    """jax 0.9's export writes `lax.top_k` as `custom_call @mhlo.topk {mhlo.attributes = {k}}`
    (jax 0.10 writes a `chlo.top_k` composite): it becomes `chlo.top_k` again, which the pass
    pipeline legalises to a sort like every other top_k. A smallest-k form is left alone (and
    refused as an unknown custom call)."""
    calls = [(o, ir.StringAttr(o.attributes["call_target_name"]).value)
             for o in _all_ops(module) if o.name == "stablehlo.custom_call"
             and "call_target_name" in o.attributes]
    for o, target in calls:        # jax < 0.9: unary CHLO ops (sinh, acos, ...) too
        op_class = _CHLO_UNARY_CALLS.get(target)
        if op_class is not None and len(o.operands) == 1 and len(o.results) == 1:
            with module.context, ir.InsertionPoint(o), o.location:
                new = getattr(chlo, op_class)(o.operands[0])
            o.results[0].replace_all_uses_with(new.result)
            o.erase()
    found = [o for o, target in calls if target == "mhlo.topk"]
    for o in found:
        attrs = ir.DictAttr(o.attributes["mhlo.attributes"]) if "mhlo.attributes" in \
            o.attributes else None
        if attrs is None or "k" not in attrs or len(o.operands) != 1 or len(o.results) != 2 or \
                ("largest" in attrs and str(attrs["largest"]) != "true"):
            continue
        with module.context, ir.InsertionPoint(o), o.location:
            new = chlo.TopKOp(o.operands[0], attrs["k"])
        for old, rep in zip(o.results, new.results):
            old.replace_all_uses_with(rep)
        o.erase()


# --------------------------------------------------------------------------- locations

_FILE_LINE = re.compile(r'"([^"]+)":(\d+):\d+')
_NAME = re.compile(r'loc\("([^"]*)"')


def format_location(loc: ir.Location) -> str:
    """`file.py:12 (jit(f)/tanh)` from an MLIR location; innermost user frame first."""
    text = str(loc)
    name = _NAME.match(text)
    where = _FILE_LINE.search(text)
    parts = []
    if where:
        parts.append(f"{where.group(1)}:{where.group(2)}")
    if name and name.group(1):
        parts.append(f"({name.group(1)})" if parts else name.group(1))
    return " ".join(parts) or "unknown location"


# --------------------------------------------------------------------------- types, attributes

def element_type_name(t: ir.Type) -> str:
    s = str(t)
    return _ELEMENT_TYPES.get(s, s)


def tensor_type(t: ir.Type) -> tuple[str, tuple[int | None, ...]]:
    """(element type name, shape with None for `?`). A type that is not a ranked tensor (a
    tuple, a token, an unranked tensor) is returned as its text with shape (): values of such
    types get that dtype, and check_supported reports them."""
    if not isinstance(t, ir.RankedTensorType):
        try:
            t = ir.RankedTensorType(t)
        except (ValueError, TypeError):
            return str(t), ()
    rt = t
    shape = tuple(None if ir.ShapedType(rt).is_dynamic_dim(i) else d
                  for i, d in enumerate(rt.shape))
    return element_type_name(rt.element_type), shape


def _scalar_attr_value(a: ir.Attribute) -> Any:
    for cls in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr):
        if isinstance(a, cls):
            return cls(a).value
    raise UnsupportedOpError(f"cannot read the scalar attribute {a}")


_DENSE_HEX = re.compile(r'dense<"0x([0-9A-Fa-f]*)">')
_DENSE_TOKEN = re.compile(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|[0-9.]+(?:[eE][-+]?[0-9]+)?)")


def _dense_from_text(a: ir.Attribute | str, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """A non-splat bf16 or complex dense attribute. jaxlib's bindings give neither a buffer nor
    elements of these, so this is the one place the importer reads an attribute's printed
    form: `dense<"0x...">` (the raw little-endian bytes) or a nested list whose entries are
    exactly printed decimals or hex bit patterns (NaN, inf) -- for complex numbers, the parts
    in order, `(re,im)`."""
    body = str(a).rsplit(" : ", 1)[0]
    np_dt = numpy_dtype(dtype)
    part = np.dtype(np.uint16) if dtype == "bf16" else np.dtype(f"<u{np_dt.itemsize // 2}")
    hexed = _DENSE_HEX.fullmatch(body)
    if hexed:
        bits = np.frombuffer(bytes.fromhex(hexed.group(1)), dtype=part.newbyteorder("<"))
    else:
        real = numpy_dtype("bf16") if dtype == "bf16" else np.dtype(f"f{np_dt.itemsize // 2}")
        bits = np.array([int(t, 16) if t.startswith("0x") else
                         int(np.array(float(t), real).view(part))
                         for t in _DENSE_TOKEN.findall(body.removeprefix("dense<"))], part)
    values = np.ascontiguousarray(bits, dtype=part).view(np_dt)
    if values.size == 1:   # a splat
        return np.full(tuple(shape), values[0], np_dt)
    if values.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"cannot read the {dtype} constant {body[:80]}")   # a bug: CompileError
    return values.reshape(shape)


def dense_value(a: ir.Attribute, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """A dense elements attribute as a numpy array of the IR dtype."""
    da = ir.DenseElementsAttr(a)
    np_dt = numpy_dtype(dtype)
    if da.is_splat:
        v = _scalar_attr_value(da.get_splat_value())
        return np.full(tuple(shape), v, dtype=np_dt)
    if dtype == "bf16":
        return _dense_from_text(a, dtype, shape)
    if dtype == "i1":   # the base class has no elements: read them as integers
        ints = ir.DenseIntElementsAttr(a)
        return np.array([bool(ints[i]) for i in range(len(ints))], np.bool_).reshape(shape)
    arr = np.array(da)
    if arr.dtype != np_dt:
        arr = arr.view(np_dt) if arr.dtype.itemsize == np_dt.itemsize else arr.astype(np_dt)
    return arr.reshape(shape)


def _constant_value(o, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """stablehlo.constant's value. jaxlib's bindings cannot even hand out a complex dense
    attribute (`attributes["value"]` raises), so those are read from the named attribute's
    printed form, `NamedAttribute(value=dense<...> : tensor<...>)`."""
    if dtype not in ("c64", "c128"):
        return dense_value(o.attributes["value"], dtype, shape)
    i = [o.attributes[i].name for i in range(len(o.attributes))].index("value")
    text = str(o.attributes[i]).removeprefix("NamedAttribute(value=").removesuffix(")")
    return _dense_from_text(text, dtype, shape)


def _attr_element_type(a: ir.Attribute) -> str | None:
    """The element type an attribute carries (dense elements, a typed scalar, a type), if any."""
    if isinstance(a, ir.TypeAttr):
        t = ir.TypeAttr(a).value
    elif isinstance(a, (ir.DenseElementsAttr, ir.IntegerAttr, ir.FloatAttr)):
        t = a.type
    else:
        return None
    if isinstance(t, ir.FunctionType):
        return None
    if isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
        return element_type_name(ir.ShapedType(t).element_type)
    return element_type_name(t)    # a scalar type, a tuple, a token


def convert_attr(name: str, a: ir.Attribute) -> Any:
    if isinstance(a, ir.DenseI64ArrayAttr):
        return tuple(ir.DenseI64ArrayAttr(a))
    if isinstance(a, ir.DenseBoolArrayAttr):
        return tuple(ir.DenseBoolArrayAttr(a))
    if isinstance(a, ir.BoolAttr) or isinstance(a, ir.IntegerAttr) or isinstance(a, ir.FloatAttr):
        return _scalar_attr_value(a)
    if isinstance(a, ir.StringAttr):
        return ir.StringAttr(a).value
    if isinstance(a, ir.FlatSymbolRefAttr):
        return ir.FlatSymbolRefAttr(a).value
    if name == "comparison_direction":
        return stablehlo.ComparisonDirectionAttr(a).value
    if name == "compare_type":
        return stablehlo.ComparisonTypeAttr(a).value
    if name == "rng_algorithm":
        return stablehlo.RngAlgorithmAttr(a).value      # DEFAULT, THREE_FRY or PHILOX
    if name == "dot_dimension_numbers":
        dn = stablehlo.DotDimensionNumbers(a)
        return {"lhs_batch": tuple(dn.lhs_batching_dimensions),
                "rhs_batch": tuple(dn.rhs_batching_dimensions),
                "lhs_contract": tuple(dn.lhs_contracting_dimensions),
                "rhs_contract": tuple(dn.rhs_contracting_dimensions)}
    if name == "scatter_dimension_numbers":
        dn = stablehlo.ScatterDimensionNumbers(a)
        return {"update_window_dims": tuple(dn.update_window_dims),
                "inserted_window_dims": tuple(dn.inserted_window_dims),
                "input_batching_dims": tuple(dn.input_batching_dims),
                "scatter_indices_batching_dims": tuple(dn.scatter_indices_batching_dims),
                "scatter_dims_to_operand_dims": tuple(dn.scattered_dims_to_operand_dims),
                "index_vector_dim": dn.index_vector_dim}
    if name == "dimension_numbers" and str(a).startswith("#stablehlo.conv"):
        dn = stablehlo.ConvDimensionNumbers(a)
        return {"in_batch": dn.input_batch_dimension, "in_feature": dn.input_feature_dimension,
                "in_spatial": tuple(dn.input_spatial_dimensions),
                "k_in": dn.kernel_input_feature_dimension,
                "k_out": dn.kernel_output_feature_dimension,
                "k_spatial": tuple(dn.kernel_spatial_dimensions),
                "out_batch": dn.output_batch_dimension,
                "out_feature": dn.output_feature_dimension,
                "out_spatial": tuple(dn.output_spatial_dimensions)}
    if name == "dimension_numbers" and str(a).startswith("#stablehlo.gather"):
        dn = stablehlo.GatherDimensionNumbers(a)
        return {"offset_dims": tuple(dn.offset_dims),
                "collapsed_slice_dims": tuple(dn.collapsed_slice_dims),
                "operand_batching_dims": tuple(dn.operand_batching_dims),
                "start_indices_batching_dims": tuple(dn.start_indices_batching_dims),
                "start_index_map": tuple(dn.start_index_map),
                "index_vector_dim": dn.index_vector_dim}
    if isinstance(a, ir.DenseIntElementsAttr):
        return tuple(int(x) for x in np.array(ir.DenseIntElementsAttr(a)).ravel())
    return str(a)   # kept verbatim; ops that need it fail clearly in check_supported


# --------------------------------------------------------------------------- import

_LAPACK_TRSM = ("lapack_strsm_ffi", "lapack_dtrsm_ffi", "lapack_ctrsm_ffi", "lapack_ztrsm_ffi")
# custom calls that are StableHLO ops with a run-time shape operand (jax's lowering of an op
# whose result shape is symbolic): imported as the op of that name
_DYNAMIC_OP_CALLS = {"stablehlo.dynamic_rng_bit_generator": "dynamic_rng_bit_generator"}
# the shape dialect ops chlo-legalize-to-stablehlo leaves around a broadcasting op with dynamic
# shapes (shape.assuming is inlined by the importer)
_SHAPE_DIALECT = {"shape.shape_of": "shape_of", "shape.broadcast": "shape_broadcast",
                  "shape.cstr_broadcastable": "cstr_broadcastable",
                  "shape.const_witness": "const_witness", "shape.assuming_all": "assuming_all"}
# ops whose regions are scalar computations jdisc renders inline, and whole sub-programs
_SCALAR_REGION_OPS = frozenset(f"stablehlo.{name}" for name in SCALAR_REGION_OPS)
_CONTROL_OPS = frozenset(f"stablehlo.{name}" for name in CONTROL_OPS)


_TRANSPOSE = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}   # LAPACK's trans_x


def _trsm_from_lapack(o, op: Op) -> None:
    """jax's CPU lowering of triangular_solve (a LAPACK custom call) as the StableHLO op.

    Its flags are LAPACK characters in the backend config; the operand layouts it declares are
    physical (column-major), the logical values are those of stablehlo.triangular_solve."""
    cfg = o.attributes["mhlo.backend_config"]
    flag = {k: chr(_scalar_attr_value(cfg[k])) for k in ("side", "uplo", "trans_x", "diag")}
    op.name = "triangular_solve"
    op.operands = op.operands[:2]
    op.attrs = {"left_side": flag["side"] == "L", "lower": flag["uplo"] == "L",
                "transpose_a": _TRANSPOSE[flag["trans_x"]],
                "unit_diagonal": flag["diag"] == "U"}

class _Importer:
    def __init__(self, module: ir.Module):
        self.call_sites: list[str] = []
        self.funcs = {}
        for op in module.body.operations:
            if op.operation.name == "func.func":
                name = ir.StringAttr(op.operation.attributes["sym_name"]).value
                self.funcs[name] = op.operation

    def location(self, o) -> str:
        """The op's source location; inside an inlined library function without one of its
        own (jnp.cumsum's body, say), the user's call site."""
        loc = format_location(o.location)
        site = self.call_sites[-1] if self.call_sites else "unknown location"
        if _FILE_LINE.search(str(o.location)) or site == "unknown location":
            return loc
        return f"{site} [{loc}]" if loc != "unknown location" else site

    def import_func(self, fn, args: list[Value], ops: list[Op]) -> list[Value]:
        """Append the ops of `fn`'s body to `ops` with its parameters bound to `args`."""
        blk = fn.regions[0].blocks[0]
        env: dict[ir.Value, Value] = dict(zip(blk.arguments, args))
        return self.import_block_ops(blk, env, ops)

    def import_block_ops(self, blk, env, ops: list[Op]) -> list[Value]:
        for mop in blk.operations:
            o = mop.operation
            try:
                done = self.import_op(o, env, ops)
            except JdiscError:
                raise
            except Exception as err:    # a bug in the importer: say which op it was reading
                where = Op(o.name, [], [], {}, self.location(o))
                raise internal_error("the MLIR import", err, op=where) from err
            if done is not None:
                return done
        raise ValueError("block without a terminator")   # a bug: CompileError

    def import_op(self, o, env, ops: list[Op]) -> list[Value] | None:
        """Import one MLIR op into `ops`; returns the block's results at its terminator."""
        name = o.name
        operands = [env[v] for v in o.operands]
        if name in ("func.return", "stablehlo.return", "shape.assuming_yield"):
            return operands
        if name == "shape.assuming":   # its witness is checked (cstr_*); the region runs inline
            outs = self.import_block_ops(o.regions[0].blocks[0], env, ops)
            for r, v in zip(o.results, outs):
                env[r] = v
            return None
        if name == "stablehlo.optimization_barrier":   # an identity for a compiler like jdisc
            for r, v in zip(o.results, operands):
                env[r] = v
            return None
        if name == "func.call":
            callee = ir.FlatSymbolRefAttr(o.attributes["callee"]).value
            self.call_sites.append(self.location(o))
            outs = self.import_func(self.funcs[callee], operands, ops)
            self.call_sites.pop()
            for r, v in zip(o.results, outs):
                env[r] = v
            return None
        results = []
        for r in o.results:
            dtype, shape = tensor_type(r.type)
            results.append(Value(dtype, shape))
        op = Op(name.removeprefix("stablehlo."), operands, results,
                self.attributes(o), self.location(o))
        if name == "stablehlo.custom_call":
            op.name = op.attrs.get("call_target_name", "custom_call")
            if op.name in _LAPACK_TRSM:
                _trsm_from_lapack(o, op)
            elif lapack_routine(op.name):
                import_lapack_call(o, op, _scalar_attr_value)
            elif op.name == "stablehlo.dynamic_reduce_window":
                self.dynamic_reduce_window(o, op)
            elif op.name in _DYNAMIC_OP_CALLS:
                op.name = _DYNAMIC_OP_CALLS[op.name]
                for key in ("api_version", "call_target_name", "has_side_effect",
                            "backend_config"):
                    op.attrs.pop(key, None)
            elif op.name != "shape_assertion":
                op.attrs["unsupported"] = f"custom_call target '{op.name}'"
        elif name in ("stablehlo.constant",):
            if dtype_problem(results[0].dtype) is None:   # unsupported ones are not readable
                op.attrs["value"] = _constant_value(o, results[0].dtype, results[0].shape)
        elif name in ("stablehlo.reduce", "stablehlo.reduce_window"):
            self.import_reducer(o, op)
            if op.attrs.get("reducer") == "body":   # any scalar body: keep it as a region
                op.regions = [self.import_region(o.regions[0], env)]
        elif name in _SCALAR_REGION_OPS:   # select/scatter/map/comparator computations
            op.regions = [self.import_region(region, env) for region in o.regions]
            if name == "stablehlo.scatter" and len(results) != 1:
                op.attrs["unsupported"] = "scatter of several operands"
        elif name in _CONTROL_OPS:   # whole sub-programs: see control_flow.py
            op.regions = [self.import_region(region, env) for region in o.regions]
        elif len(o.regions) and name != "stablehlo.reduce":
            op.attrs["unsupported"] = f"op '{name}' with regions"
        if name == "stablehlo.broadcast":   # sizes prepended: a broadcast_in_dim
            sizes = tuple(op.attrs.pop("broadcast_sizes", ()))
            lead = len(sizes)
            op.name = "broadcast_in_dim"
            op.attrs["broadcast_dimensions"] = tuple(range(lead, lead + operands[0].rank))
            # the new leading dims are `sizes`, also where the result type leaves them `?`
            r = results[0]
            r.shape = tuple(s if d is None else d for s, d in zip(sizes, r.shape[:lead])) \
                + tuple(r.shape[lead:])
        if name in _SHAPE_DIALECT:   # left by chlo legalisation: shape vectors, witnesses
            op.name = _SHAPE_DIALECT[name]
            for r in op.results:
                if r.dtype == "!shape.witness":   # a witness is a run-time check: an i1 here
                    r.dtype = "i1"
        elif not name.startswith("stablehlo."):
            op.attrs["unsupported"] = f"op '{name}'"
        for r, v in zip(o.results, results):
            env[r] = v
        ops.append(op)
        return None

    def import_region(self, region, env) -> Block:
        """A region as a Block; it sees the enclosing values (StableHLO regions may capture)."""
        blk = region.blocks[0]
        params = [Value(*tensor_type(a.type)) for a in blk.arguments]
        body_ops: list[Op] = []
        outs = self.import_block_ops(blk, {**env, **dict(zip(blk.arguments, params))}, body_ops)
        return Block(params, body_ops, outs)

    @staticmethod
    def attributes(o) -> dict[str, Any]:
        """The op's attributes as Python values (`value` is read by the importer itself). An
        attribute of an element type jdisc does not support, or one jaxlib's bindings cannot
        read (they refuse complex dense elements), marks the op unsupported instead.
        Attributes are read by name: `NamedAttribute.attr` on such an attribute aborts the
        process inside jaxlib, `attributes[name]` raises TypeError."""
        attrs: dict[str, Any] = {}
        problems = []
        for name in [o.attributes[i].name for i in range(len(o.attributes))]:
            if name == "value":
                continue
            try:
                a = o.attributes[name]
            except TypeError as err:
                problems.append(f"attribute '{name}' cannot be read ({short_exception(err)})")
                continue
            dtype = _attr_element_type(a)
            why = dtype_problem(dtype) if dtype is not None else None
            if why is not None:
                problems.append(f"attribute '{name}' of element type {dtype} ({why})")
                continue
            try:
                attrs[name] = convert_attr(name, a)
            except UnsupportedOpError as err:
                problems.append(f"attribute '{name}': {err}")
        if problems:
            attrs["unsupported"] = "; ".join(problems)
        return attrs

    def dynamic_reduce_window(self, o, op: Op) -> None:
        """jax's reduce_window with shape operands (window sizes, strides, dilations, padding
        as tensors); propagate_shapes evaluates them, resolve_dynamic_ops makes it static."""
        op.name = "dynamic_reduce_window"
        callee = self.funcs[ir.FlatSymbolRefAttr(o.attributes["called_computations"][0]).value]
        blk = callee.regions[0].blocks[0]
        self.import_reducer_block(blk, op, len(o.results))
        if op.attrs["reducer"] == "body":
            params = [Value(*tensor_type(a.type)) for a in blk.arguments]
            body_ops: list[Op] = []
            outs = self.import_block_ops(blk, dict(zip(blk.arguments, params)), body_ops)
            op.regions = [Block(params, body_ops, outs)]

    @staticmethod
    def import_reducer(o, op: Op) -> None:
        _Importer.import_reducer_block(o.regions[0].blocks[0], op, len(o.results))

    @staticmethod
    def import_reducer_block(body, op: Op, n: int) -> None:
        inner = [b.operation for b in body.operations]
        if n == 1 and len(inner) == 2 and inner[0].name in _REDUCERS:
            a, b = inner[0].operands
            args = list(body.arguments)
            if {a, b} == set(args) and inner[1].operands[0] == inner[0].results[0]:
                op.attrs["reducer"] = _REDUCERS[inner[0].name]
                return
        op.attrs["reducer"] = "body"


def import_module(module: ir.Module, name: str, input_names: Sequence[str] | None = None,
                  input_shapes: Sequence[Sequence[symbolic.Dim]] | None = None,
                  output_names: Sequence[str] | None = None) -> Program:
    """jdisc IR for the module's public `@main`.

    `input_shapes` gives each input's symbolic shape (from jax.export's avals); without it, every
    `?` dim of input i, axis j becomes a fresh dimension variable `d{i}_{j}`.
    """
    imp = _Importer(module)
    main = imp.funcs.get("main")
    if main is None:
        raise ArgumentError("the StableHLO module has no @main function")
    fn_type = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    params, inputs = [], []
    for i, t in enumerate(fn_type.inputs):
        dtype, static = tensor_type(t)
        if input_shapes is not None:
            shape = tuple(input_shapes[i])
            if len(shape) != len(static):
                raise ValueError(f"input {i}: rank {len(static)} in StableHLO, "
                                 f"{len(shape)} in the given shapes")
        else:
            shape = tuple(symbolic.var(f"d{i}_{j}") if d is None else d
                          for j, d in enumerate(static))
        arg_name = input_names[i] if input_names else f"args[{i}]"
        params.append(Value(dtype, shape))
        inputs.append(ArgSpec(arg_name, dtype, shape))
    ops: list[Op] = []
    results = imp.import_func(main, params, ops)
    outputs = [ArgSpec(output_names[i] if output_names else f"result[{i}]", v.dtype, v.shape)
               for i, v in enumerate(results)]
    return Program(name, Block(params, ops, results), inputs, outputs)


def import_stablehlo(module_text_or_bytes: str | bytes, name: str = "main", **kw) -> Program:
    ctx = make_context()
    module = parse_module(module_text_or_bytes, ctx)
    run_mlir_pipeline(module)
    with ctx:
        return import_module(module, name, **kw)


__all__ = ["import_stablehlo", "import_module", "format_location", "UnsupportedOpError"]
