"""A jdisc function inside JAX programs: under a trace (jax.jit, lax.scan, vmap, grad,
shard_map, ...) it is an XLA FFI custom call of its compiled launcher.

* The call: `jax.ffi.ffi_call` of the program's registered handler (custom_calls/ffi.py), with
  result shapes from the launcher's own `jd_prepare` at the traced (concrete) shapes, which also
  runs every shape check at trace time. The same library serves every shape.
* Shardings: the call is a `custom_partitioning` op that follows the program's sharding rule
  (sharding.py): each device runs the same program on its local shard.
* `jax.vmap`: a `custom_vmap` rule calls a second jdisc function, `jax.vmap` of the original
  with the batch as one more symbolic dimension (`vmap_batch`), so every batch size shares one
  compile.
* `jax.grad` / `jax.vjp`: a `custom_vjp` whose backward pass is a jdisc function too: the VJP
  of the original exported with symbolic shapes (cotangent axes named after the outputs' own
  symbolic dims), compiled once for every shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import numpy as np

from jdisc import sharding
from jdisc.custom_calls import ffi
from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.errors import DtypeError, JdiscError, ShapeError

if TYPE_CHECKING:
    from jdisc.api import JdiscFunction
    from jdisc.compiled import Compiled

VMAP_DIM = "vmap_batch"


def is_traced(flat: list, _tracer=jax.core.Tracer) -> bool:
    for x in flat:      # (a loop, not any(generator): this runs on every eager call)
        if isinstance(x, _tracer):
            return True
    return False


def traced_call(jf: "JdiscFunction", entry: "Compiled", flat: list) -> list:
    """The outputs (flat) of `entry` on traced leaves, as JAX primitives."""
    fn = entry.traceable
    if fn is None:
        fn = entry.traceable = _traceable(jf, entry)
    return weakened(list(fn(*flat)), getattr(entry, "weak", ()))


def weakened(outs: list, weak) -> list:
    """Traced results typed weakly where jax.jit types them so (`x * 2.5` of an int x). The
    FFI call's result types say so; jax 0.8's custom_vjp and custom_vmap drop the flag (0.10
    keeps it), and a convert to the same dtype, weakly typed, restores it (no op in HLO)."""
    if not weak:
        return outs
    from jax._src.lax import lax as lax_internal
    return [lax_internal._convert_element_type(x, weak_type=True)
            if i in weak and not getattr(getattr(x, "aval", None), "weak_type", True) else x
            for i, x in enumerate(outs)]


def _traceable(jf: "JdiscFunction", entry: "Compiled"):
    """The program as a JAX-traceable function: custom_vjp of custom_vmap of the FFI call.
    Its closures keep the program (`entry`) but not `jf` itself, only what building the vmap
    and VJP functions takes from it (`_Origin`): `jax.jit(jf)` caches the jaxpr it traces
    under a weak reference to `jf`, and that jaxpr holds these closures, so a closure holding
    `jf` kept every jdisc function ever called inside `jax.jit` alive for good, with its
    program, what its Python function closes over and what jax compiled for it (found by the
    whole-program fuzzer, whose workers ran out of memory mappings)."""
    origin = _Origin(type(jf), jf.__name__, jf.constraints)

    def primal(*flat):
        return tuple(ffi_call(entry, flat))

    batched = jax.custom_batching.custom_vmap(primal)

    @batched.def_vmap
    def _rule(axis_size, in_batched, *flat):
        vf = _vmapped(origin, entry, tuple(bool(b) for b in in_batched))
        outs = vf(*flat)
        return tuple(outs), (True,) * len(outs)

    differentiable = jax.custom_vjp(batched)

    def fwd(*flat):
        return batched(*flat), flat

    def bwd(flat, cts):
        grads = _vjp_function(origin, entry)(*flat, *cts)
        it = iter(grads)
        return tuple(next(it) if _is_float(spec.dtype) else None for spec in entry.leaves)

    differentiable.defvjp(fwd, bwd)
    return differentiable


def ffi_call(entry: "Compiled", flat) -> list:
    """`jax.ffi.ffi_call` of the compiled launcher on the kept leaves."""
    kept = [flat[i] for i in entry.kept]
    shapes = []
    for x, i in zip(kept, entry.kept):
        spec = entry.leaves[i]
        dt = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
        if dt != spec.dtype:
            raise DtypeError(f"argument '{spec.name}' has dtype {dt} but the function was "
                             f"compiled for {spec.dtype}")
        if len(x.shape) != len(spec.shape):
            raise ShapeError(f"argument '{spec.name}' has rank {len(x.shape)} but the function "
                             f"was compiled for rank {len(spec.shape)}")
        try:
            shapes.append(tuple(int(d) for d in x.shape))
        except (TypeError, jax.errors.ConcretizationTypeError):
            raise JdiscError(f"argument '{spec.name}' has the symbolic shape {x.shape}: a jdisc "
                             f"function inside a shape-polymorphic jax.export is not "
                             f"supported") from None
    if entry._dropped_named:
        entry._check_dropped([_Shaped(x.shape) for x in flat])
    if not _out_types(entry, shapes):     # the launcher's checks, at trace time
        return []
    call = entry.partitioned
    if call is None:      # under jax.jit with shardings: partitioned by the program's rule
        call = entry.partitioned = (lambda *xs: _ffi(entry, xs)) if jax.device_count() == 1 \
            else sharding.partitioned(entry, lambda *xs: _ffi(entry, xs))
    return list(call(*kept))


def _out_types(entry: "Compiled", shapes) -> list:
    executable = entry.executable
    _, out_shapes = executable.prepare(shapes)
    out_types = []
    weak = getattr(entry.exported, "weak_outputs", ())
    for j, (s, spec) in enumerate(zip(out_shapes, executable.cprog.outputs)):
        dt = numpy_dtype(spec.dtype)
        if dt.itemsize == 8 and dt.kind in "iuf" and not jax.config.jax_enable_x64:
            raise DtypeError(f"result '{spec.name}' is {dt}: inside a JAX trace that needs "
                             f"jax_enable_x64 (jax would narrow it)")
        out_types.append(jax.ShapeDtypeStruct(s, dt, weak_type=j in weak))
    return out_types


def _ffi(entry: "Compiled", kept) -> list:
    """The FFI call on the kept operands at their (global, or one shard's) shapes."""
    out_types = _out_types(entry, [tuple(int(d) for d in x.shape) for x in kept])
    return list(jax.ffi.ffi_call(ffi.target_name(entry.executable), out_types)(*kept))


class _Shaped:
    def __init__(self, shape):
        self.shape = tuple(shape)


def _is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.inexact)


def _flat_fun(entry: "Compiled"):
    """The original function (statics bound) on flat leaves, returning flat outputs."""
    fun, in_tree = entry.fun, entry.in_tree

    def flat_fun(*leaves):
        args = jax.tree_util.tree_unflatten(in_tree, leaves)
        return jax.tree_util.tree_leaves(fun(*args))
    return flat_fun


def _leaf_axes(entry: "Compiled") -> list[dict[int, str]]:
    return [dict(spec.axes) for spec in entry.leaves]


class _Origin(NamedTuple):
    """What the vmap and VJP functions of a program take from its jdisc function."""
    cls: type
    name: str
    constraints: tuple


def _vmapped(origin: _Origin, entry: "Compiled", in_batched: tuple[bool, ...]):
    """jdisc.jit of jax.vmap(original): the batch is the symbolic dim `vmap_batch`."""
    vf = entry.vmapped.get(in_batched)
    if vf is None:
        axes = []
        for batched, a in zip(in_batched, _leaf_axes(entry)):
            if VMAP_DIM in a.values():
                raise JdiscError(f"jdisc reserves the dimension name '{VMAP_DIM}' for vmap")
            axes.append({0: VMAP_DIM, **{k + 1: n for k, n in a.items()}} if batched else a)
        in_axes = [0 if b else None for b in in_batched]
        fn = jax.vmap(_flat_fun(entry), in_axes=in_axes)
        fn.__name__ = f"vmap_{origin.name}"
        vf = entry.vmapped[in_batched] = _FlatJdisc(origin.cls(
            fn, tuple(axes), origin.constraints, (), (), None))
    return vf


def _vjp_function(origin: _Origin, entry: "Compiled"):
    """jdisc.jit of (primal leaves, output cotangents) -> cotangents of the float leaves."""
    vf = entry.vjp
    if vf is None:
        flat_fun = _flat_fun(entry)
        is_float = [_is_float(spec.dtype) for spec in entry.leaves]
        n = len(entry.leaves)

        def vjp_fun(*args):
            primals, cts = args[:n], args[n:]
            diff = [p for p, f in zip(primals, is_float) if f]

            def of_floats(*xs):
                it = iter(xs)
                return flat_fun(*[next(it) if f else p for p, f in zip(primals, is_float)])
            _, pullback = jax.vjp(of_floats, *diff)
            return list(pullback(list(cts)))
        vjp_fun.__name__ = f"vjp_{origin.name}"
        axes = _leaf_axes(entry) + [_output_axes(spec) for spec in entry.program.outputs]
        vf = entry.vjp = _FlatJdisc(origin.cls(
            vjp_fun, tuple(axes), origin.constraints, (), (), None))
    return vf


def _output_axes(spec) -> dict[int, str]:
    """Axis names for a cotangent: the output's symbolic dims, when each is one variable."""
    axes = {}
    for i, d in enumerate(spec.shape):
        if isinstance(d, int):
            continue
        names = symbolic.variables(d)
        if len(names) != 1 or str(d) not in names:
            raise JdiscError(f"jax.grad through jdisc: output '{spec.name}' axis {i} has the "
                             f"size {d}, not a plain dimension variable; its cotangent cannot "
                             f"be given a symbolic shape")
        axes[i] = str(d)
    return axes


class _FlatJdisc:
    """Calls a JdiscFunction of flat leaves with flat leaves; returns the flat outputs."""

    def __init__(self, jf: "JdiscFunction"):
        self.jf = jf

    def __call__(self, *leaves) -> list:
        return jax.tree_util.tree_leaves(self.jf(*leaves))
