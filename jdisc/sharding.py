"""A jdisc call inside JAX's SPMD partitioner, and eager calls on sharded arrays.

The program's sharding rule (`Program.parallel`, dynamic_passes/passes/parallel_axes.py) says which
input axes are parallel: sized by a dimension variable in which every op is equivariant. A
shard along them is just another value of that variable, so one compiled program serves every
shard, every mesh and every process.

* Under `jax.jit` with shardings, the custom call is a `custom_partitioning` op: a Shardy
  `sharding_rule` (parallel axes share a factor; every other axis needs replication) and the
  GSPMD callbacks. `partition` keeps a parallel dim sharded where it arrives sharded (on the
  first operand that shards it), evenly (a dim that does not divide evenly is gathered), asks
  every other axis to be replicated (the partitioner reshards), checks that the program
  accepts the local shapes (else everything is gathered), and lowers to the same FFI call on
  the local shards, followed by one all-reduce for outputs that hold partial reductions.
* An eager call on sharded `jax.Array`s runs the program once per addressable shard and
  assembles the results with the matching sharding, where every sharded axis is parallel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import jax
import numpy as np
from jax.experimental.custom_partitioning import SdyShardingRule, custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec as P

from jdisc.errors import ArgumentError, ShapeError

if TYPE_CHECKING:
    from jdisc.compiled import Compiled

Plan = dict[str, tuple[str, ...]]     # parallel dim -> the mesh axes that shard it


def partitioned(entry: "Compiled", call: Callable[..., list]) -> Callable[..., tuple]:
    """`call` (the FFI call on the kept operands, at any concrete shapes) as a
    custom_partitioning op following the program's sharding rule."""
    par = entry.program.parallel

    def impl(*xs):
        return tuple(call(*xs))

    op = custom_partitioning(impl)

    def plan_of(mesh, arg_shapes) -> Plan:
        return _plan(entry, mesh, [tuple(s.shape) for s in arg_shapes],
                     [_spec(s.sharding, len(s.shape)) for s in arg_shapes])

    def shardings(mesh, plan: Plan, axes, arg_shapes) -> tuple:
        if mesh is None or mesh.empty:     # shardings of no mesh: run the call replicated
            devices = arg_shapes[0].sharding._device_assignment
            from jax._src.sharding_impls import GSPMDSharding
            return tuple(GSPMDSharding.get_replicated(devices) for _ in axes)
        return tuple(NamedSharding(mesh, P(*(plan.get(d) for d in a))) for a in axes)

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, plan_of(mesh, arg_shapes), par.outputs, arg_shapes)

    def partition(mesh, arg_shapes, result_shape):
        plan = plan_of(mesh, arg_shapes)

        def lower(*xs):
            return tuple(_combine(list(impl(*xs)), par.combine, plan, mesh))
        return (mesh, lower, shardings(mesh, plan, par.outputs, arg_shapes),
                shardings(mesh, plan, par.inputs, arg_shapes))

    def rule(mesh, operand_types, result_types):
        return sharding_rule(par.inputs, par.outputs)

    op.def_partition(partition=partition, infer_sharding_from_operands=infer,
                     sharding_rule=rule)
    return op


def sharding_rule(inputs, outputs) -> SdyShardingRule:
    """Shardy's rule: an axis of a parallel dim is the factor of that dim; every other axis is
    a factor of its own that must be replicated."""
    names: dict[str, str] = {}
    replicated: list[str] = []

    def mapping(axes) -> tuple[str, ...]:
        out = []
        for d in axes:
            if d is None:
                replicated.append(f"r{len(replicated)}")
                out.append(replicated[-1])
            else:
                out.append(names.setdefault(d, f"p{len(names)}"))
        return tuple(out)
    ins = tuple(mapping(a) for a in inputs)
    outs = tuple(mapping(a) for a in outputs)
    return SdyShardingRule(ins, outs, need_replication_factors=tuple(replicated))


def _spec(sharding, rank: int) -> tuple:
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return (None,) * rank
    spec = tuple(spec) + (None,) * (rank - len(spec))
    return tuple(None if s is None else (s,) if isinstance(s, str) else tuple(s) for s in spec)


def _plan(entry: "Compiled", mesh, shapes: list[tuple], specs: list[tuple]) -> Plan:
    """Which parallel dims stay sharded, over which mesh axes."""
    par = entry.program.parallel
    if mesh is None or getattr(mesh, "empty", True):
        return {}
    sizes = dict(mesh.shape)
    plan: Plan = {}
    used: set[str] = set()
    for axes, shape, spec in zip(par.inputs, shapes, specs):
        for d, n, s in zip(axes, shape, spec):
            if d is None or not s or d in plan:
                continue
            count = int(np.prod([sizes.get(m, 0) for m in s]))
            if used.isdisjoint(s) and count > 0 and n % count == 0:
                plan[d] = s
                used.update(s)
    if plan:
        local = [tuple(n // _count(plan.get(d), sizes) for n, d in zip(shape, axes))
                 for shape, axes in zip(shapes, par.inputs)]
        try:
            entry.executable.prepare(local)    # the checks hold for a shard too
        except ShapeError:
            return {}
    return plan


def _count(axes, sizes) -> int:
    return int(np.prod([sizes[m] for m in axes])) if axes else 1


def _combine(outs: list, combine, plan: Plan, mesh) -> list:
    """Partial reductions all-reduced across the shards of their dim; rescaled outputs
    scaled back."""
    sizes = dict(mesh.shape)
    for j, comb in enumerate(combine):
        for d, kind, scale in comb:
            axes = plan.get(d)
            if not axes:
                continue
            x = outs[j]
            if kind == "add":
                x = jax.lax.psum(x, axes)
            elif kind == "max":
                x = jax.lax.pmax(x, axes)
            elif kind == "min":
                x = jax.lax.pmin(x, axes)
            if scale:
                x = x * np.asarray(float(_count(axes, sizes)) ** -scale, x.dtype)
            outs[j] = x
    return outs


# --------------------------------------------------------------------------- eager calls

def is_sharded(x: Any) -> bool:
    sharding = getattr(x, "sharding", None)
    return sharding is not None and len(sharding.device_set) > 1


def eager_call(entry: "Compiled", flat: list) -> list:
    """The program on each addressable shard of sharded inputs, where every sharded axis is
    parallel; results assembled with the matching sharding."""
    par = entry.program.parallel
    sharded = [(i, x) for i, x in enumerate(flat) if is_sharded(x)]
    mesh = None
    for i, x in sharded:
        if not isinstance(x.sharding, NamedSharding):
            raise ArgumentError(_refusal(entry, i, x, "its sharding is not a NamedSharding"))
        if mesh is None:
            mesh = x.sharding.mesh
        elif x.sharding.mesh != mesh:
            raise ArgumentError(_refusal(entry, i, x, "it is on another mesh than argument "
                                         f"'{entry.leaves[sharded[0][0]].name}'"))
    kept_pos = {leaf: k for k, leaf in enumerate(entry.kept)}
    plan: Plan = {}
    for i, x in sharded:
        if i not in kept_pos:        # unused by the program
            continue
        spec = _spec(x.sharding, x.ndim)
        axes = par.inputs[kept_pos[i]]
        for axis, s in enumerate(spec):
            if not s:
                continue
            d = axes[axis]
            if d is None:
                raise ArgumentError(_refusal(entry, i, x, f"axis {axis} is sharded and is "
                                             f"not parallel{_why(entry, i, axis)}"))
            if plan.setdefault(d, s) != s:
                raise ArgumentError(_refusal(entry, i, x, f"axis {axis} ('{d}') is sharded "
                                             f"over {s}, another argument's over {plan[d]}"))
            if x.shape[axis] % _count(s, dict(mesh.shape)):
                raise ArgumentError(_refusal(entry, i, x, f"axis {axis} ('{d}', size "
                                             f"{x.shape[axis]}) does not split evenly"))
    needs_reduce = any(d in plan and kind != "exact" or (d in plan and scale)
                       for comb in par.combine for d, kind, scale in comb)
    if needs_reduce:     # partial results: the partitioned custom call, all-reduce included
        fn = entry.eager_sharded
        if fn is None:
            from jdisc import interop
            fn = entry.eager_sharded = jax.jit(lambda *xs: tuple(interop.ffi_call(entry, list(xs))))
        return list(fn(*flat))
    devices = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    per_device = []
    for dev in devices:
        local = [_shard_on(x, dev) for x in flat]
        per_device.append(entry.call_flat(local))
    outs = []
    for j, axes in enumerate(par.outputs):
        sharding = NamedSharding(mesh, P(*(plan.get(d) for d in axes)))
        first = per_device[0][j]
        shape = tuple(n * _count(plan.get(d), dict(mesh.shape)) for n, d in
                      zip(first.shape, axes))
        outs.append(jax.make_array_from_single_device_arrays(
            shape, sharding, [per_device[k][j] for k in range(len(devices))]))
    return outs


def _shard_on(x: Any, device) -> Any:
    if is_sharded(x):
        for shard in x.addressable_shards:
            if shard.device == device:
                return shard.data
        raise ArgumentError(f"an argument has no shard on {device}")
    return jax.device_put(x, device)


def _why(entry: "Compiled", i: int, axis: int) -> str:
    dim = entry.leaves[i].axes.get(axis)
    for d, why in entry.program.parallel.refused:
        if d == dim:
            return f": '{d}' is not parallel because {why}"
    return f": it is a static axis ({entry.leaves[i].shape[axis]})" if dim is None else ""


def _refusal(entry: "Compiled", i: int, x: Any, why: str) -> str:
    return (f"argument '{entry.leaves[i].name}' is sharded over {len(x.sharding.device_set)} "
            f"devices ({x.sharding}) and {why}. An eager jdisc call runs the program once "
            f"per shard only along parallel axes (see explain()); call it inside jax.jit "
            f"(the partitioner reshards what is not parallel), or pass a single-device array")
