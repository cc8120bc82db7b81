"""A compiled jdisc program for one signature, and its eager call: arguments checked and
bound, outputs allocated (through the C extension or ctypes), donated buffers reused, results
handed back as jax.Arrays on the inputs' device."""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import jax
import numpy as np

from jdisc import sharding
from jdisc.custom_calls import runtime
from jdisc.errors import ArgumentError, DtypeError, JdiscError, RuntimeCheckError, ShapeError
from jdisc.export.exporter import ExportedFunction
from jdisc.export.specs import dim_variables


class Compiled:
    """One compiled program for one static signature (dtypes, ranks, static dims)."""

    def __init__(self, exported: ExportedFunction, executable: runtime.Executable, in_tree: Any,
                 program: Any = None, fun: Callable | None = None):
        self.exported = exported
        self.fun = fun      # statics bound: what vmap and grad re-export (interop.py)
        self.program = program
        self.in_tree = in_tree
        self.executable = executable
        self.leaves = exported.leaves
        self.kept = exported.kept_inputs
        self._dropped_named = [i for i in range(len(self.leaves))
                               if i not in set(self.kept) and self.leaves[i].axes]
        self._all_kept = list(self.kept) == list(range(len(self.leaves)))
        self._donated = [i for i, leaf in enumerate(self.leaves) if leaf.donated]
        self._plain = self._all_kept and not self._donated    # the common eager call
        tree = exported.out_tree
        self._one_result = tree.num_nodes == 1 and tree.num_leaves == 1
        self.weak = frozenset(getattr(exported, "weak_outputs", ()))   # results typed weakly
        # made by interop.py when the program meets a JAX transformation, then kept
        self.traceable: Callable | None = None   # the flat call as JAX primitives
        self.vmapped: dict[tuple[bool, ...], Any] = {}   # batched leaves -> jdisc of vmap(f)
        self.vjp: Any = None                      # jdisc of (primals, cotangents) -> cotangents
        self.partitioned: Callable | None = None  # the FFI call as a custom_partitioning op
        self.eager_sharded: Callable | None = None   # jax.jit of it, for eager sharded calls

    def unflatten(self, outs: list) -> Any:
        """The flat results in the function's output structure, weakly typed where jax's are."""
        if self.weak:
            outs = [weakly_typed(x) if i in self.weak else x for i, x in enumerate(outs)]
        if self._one_result:     # one array, not in a container
            return outs[0]
        return jax.tree_util.tree_unflatten(self.exported.out_tree, outs)

    @property
    def c_source(self) -> str:
        return self.executable.cprog.source

    def call_fast(self, flat_args: Sequence[Any]) -> list[jax.Array] | None:
        """The common eager call, its results made in C, or None where that does not apply:
        a leaf that is not a jax.Array or numpy array of the program's dtype and rank (each is
        checked in C), committed inputs, donation, ... (call_flat's other paths)."""
        fast = self.executable.fast_call
        if fast is None or not self._plain or len(flat_args) != len(self.leaves):
            return None
        try:
            return fast(flat_args)
        except (ShapeError, RuntimeCheckError) as err:
            raise self._explain_shape_error(err, flat_args) from None

    def call_flat(self, flat_args: Sequence[Any]) -> list[jax.Array]:
        outs = self.call_fast(flat_args)
        if outs is not None:
            return outs
        try:
            return self._call_flat(flat_args)
        except _Sharded:        # sharded inputs: the program once per shard (sharding.py)
            return sharding.eager_call(self, list(flat_args))

    def _call_flat(self, flat_args: Sequence[Any]) -> list[jax.Array]:
        if len(flat_args) != len(self.leaves):
            raise ArgumentError(f"expected {len(self.leaves)} array leaves, got {len(flat_args)}")
        fast = self.executable.fast_call
        donation = self.executable.cprog.donation
        if fast is not None and self._plain:    # committed inputs, a jax.default_device
            device = _committed_device(flat_args, self.leaves)
            try:
                outs = fast.numpy(flat_args, None)
            except (ShapeError, RuntimeCheckError) as err:
                raise self._explain_shape_error(err, flat_args) from None
            if outs is not None:
                return [runtime.to_jax(o, device) for o in outs]
        if fast is not None and not self._dropped_named:
            device = _committed_device(flat_args, self.leaves)
            kept = list(flat_args) if self._all_kept else [flat_args[i] for i in self.kept]
            given = self._donated_buffers(flat_args) if donation else {}
            try:
                outs = fast.numpy(kept, tuple(given[j][1] if j in given else None
                                              for j in range(len(self.exported.out_names)))
                                  if given else None)
            except (ShapeError, RuntimeCheckError) as err:
                raise self._explain_shape_error(err, flat_args) from None
            if outs is not None:
                return self._wrap(outs, device, given, flat_args)
        if self._dropped_named:
            self._check_dropped([self._as_array(x, spec)
                                 for x, spec in zip(flat_args, self.leaves)])
        device = _committed_device(flat_args, self.leaves)
        shapes, pointers, alive = [], [], []
        donation = self.executable.cprog.donation
        for i in self.kept:
            x, spec = flat_args[i], self.leaves[i]
            ptr = _cpu_pointer(x, spec)
            if ptr is None:     # numpy, Python scalars, other dtypes, other devices
                arr = self._as_array(x, spec)
                alive.append(arr)
                shapes.append(arr.shape)
                pointers.append(arr.ctypes.data)
            else:
                shapes.append(x.shape)
                pointers.append(ptr)
        given = self._donated_buffers(flat_args) if donation else {}
        try:
            outs = self.executable.run_pointers(shapes, pointers, given)
        except (ShapeError, RuntimeCheckError) as err:
            raise self._explain_shape_error(err, flat_args) from None
        del alive
        return self._wrap(outs, device, given, flat_args)

    def _wrap(self, outs: list, device, given: dict, flat_args: Sequence[Any]) -> list[jax.Array]:
        """The outputs as jax.Arrays; donated inputs deleted as jax.jit deletes them."""
        if not given and not self._donated:
            return [runtime.to_jax(o, device) for o in outs]
        results = [runtime.to_jax(o, device, owned=j not in given) for j, o in enumerate(outs)]
        taken = set()
        for j, (x, view) in given.items():
            if outs[j] is view:      # written into the donated buffer: x is used up
                x.delete()
                taken.add(j)
        self._delete_donated(flat_args, outs, taken)
        return results

    def _delete_donated(self, flat_args: Sequence[Any], outs: list, taken: set) -> None:
        """Delete each donated jax.Array that jax.jit on CPU would have given to a result: jax
        pairs donated arguments with results of the same shape and dtype (in argument order),
        and XLA takes the rest for results of the same size in bytes. Whether jdisc reused
        the buffer (its memory plan allowed it and the array is over JDISC_DONATE_MIN_BYTES)
        or wrote a fresh result is a speed choice; code that uses a donated array after the
        call fails as it does with jax.jit. Left alive, as jax.jit leaves them: a donation
        with no such result, and an array whose memory another argument of the call shares
        (itself passed twice, a numpy view of it). Before jax 0.10 nothing is deleted: there
        deleting an array frees its memory under a numpy view someone may still hold."""
        if runtime.donate_min_bytes() is None:
            return
        donors = []
        for i in self._donated:
            x = flat_args[i]
            if type(x) is not _ArrayImpl or x.is_deleted():
                continue
            others = [o for k, o in enumerate(flat_args) if k != i]
            if any(o is x for o in others):
                continue
            if x.nbytes and any(isinstance(o, np.ndarray) for o in others) and \
                    any(_may_overlap(np.asarray(x), o) for o in others):
                continue
            donors.append(x)
        for same in (lambda o, x: o.shape == x.shape and o.dtype == x.dtype,
                     lambda o, x: o.nbytes == x.nbytes):
            left = []
            for x in donors:
                j = next((j for j, o in enumerate(outs) if j not in taken and same(o, x)), None)
                if j is None:
                    left.append(x)
                else:
                    taken.add(j)
                    x.delete()
            donors = left

    def _donated_buffers(self, flat_args: Sequence[Any]) -> dict:
        """Result position -> (donated jax.Array, a writable view of its buffer) for the
        donations the plan allows (cprog.donation) whose argument is a jax.Array on the CPU
        whose memory no other argument may share (the same array twice, a numpy view of it).
        Below 1 MiB (`JDISC_DONATE_MIN_BYTES`) a fresh output costs less than handing a reused
        buffer back to jax (DLPack, about 40 us), so such donations are left alone."""
        kept = [flat_args[i] for i in self.kept]
        given = {}
        min_bytes = runtime.donate_min_bytes()
        if min_bytes is None:
            return given
        for pos, j in self.executable.cprog.donation:
            x = kept[pos]
            if type(x) is not _ArrayImpl or x.nbytes < min_bytes or not x.nbytes:
                continue
            ptr = _cpu_pointer(x, self.leaves[self.kept[pos]])
            view = runtime.writable_view(x, ptr) if ptr is not None else None
            shared = view is None or any(other is x or _may_overlap(view, other)
                                         for k, other in enumerate(kept) if k != pos)
            if not shared:
                given[j] = (x, view)
        return given

    def _explain_shape_error(self, err: ShapeError | RuntimeCheckError,
                             flat_args: Sequence[Any]) -> JdiscError:
        """A failed check, said in the user's terms: for a violated constraint (`b >= 4`),
        which argument and axis each of its dimension variables was read from; for an op's
        check that fails at a dimension of size 0, that jax.export assumed it >= 1 (a
        ShapeError, also where the check is a loop body's or a branch's, made when it runs:
        a RuntimeCheckError otherwise)."""
        text = str(err)
        m = re.search(r"symbolic shape constraint (.*?)\. Expected", text)
        if not m or isinstance(err, RuntimeCheckError):
            return self._size_zero_note(err, flat_args)
        used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(1)))
        where = []
        for x, spec in zip(flat_args, self.leaves):
            for axis, dim in sorted(spec.axes.items()):
                names = [v for v in dim_variables(dim) if v in used]
                if names and all(f"'{n}'" not in w for n in names for w in where):
                    size = np.shape(x)[axis] if axis < np.ndim(x) else "?"
                    where.append(f"'{dim}' is argument '{spec.name}' axis {axis}, of size "
                                 f"{size}")
        return ShapeError(text.rstrip() + (" (" + "; ".join(where) + ")" if where else ""))

    def _size_zero_note(self, err: JdiscError, flat_args: Sequence[Any]) -> JdiscError:
        """jax.export traces with every symbolic dim >= 1, and the traced program may rely on
        it (`x[:, :1]` is a slice of min(1, n), which it simplifies to 1): an op's check that
        fails while a dimension named alone is 0 gets a note saying so, and how to write an
        axis that may be 0."""
        text = str(err)
        if "stablehlo." not in text or "jax.export assumes" in text:
            return err
        zero = []
        for x, spec in zip(flat_args, self.leaves):
            for axis, dim in sorted(spec.axes.items()):
                if dim_variables(dim) == [dim] and axis < np.ndim(x) and np.shape(x)[axis] == 0:
                    zero.append((spec.name, axis, dim))
        named = [z for z in zero if re.search(rf"\b{re.escape(z[2])} = 0\b", text)]
        if not (named or zero):
            return err
        name, axis, dim = (named or zero)[0]
        return ShapeError(
            f"{text.rstrip()} jax.export assumes every symbolic dimension is >= 1 when it traces "
            f"the function, and this program relies on it, but '{dim}' (argument '{name}' axis "
            f"{axis}) is 0 here. For an axis that may be 0, name it with an expression that "
            f"may be 0, such as {{{axis}: '{dim}1 - 1'}} in dynamic_axes (the axis is then "
            f"{dim}1 - 1 for a dimension {dim}1 >= 1), so that jax.export keeps the size "
            f"symbolic.")

    @staticmethod
    def _as_array(x: Any, spec) -> np.ndarray:
        if isinstance(x, jax.Array) and x.dtype == spec.dtype and x.ndim == len(spec.shape):
            return np.asarray(x)      # the common case: a CPU jax.Array, read in place
        if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
            if isinstance(x, complex) and spec.dtype.kind != "c":
                raise DtypeError(f"argument '{spec.name}' is the complex number {x} but the "
                                 f"function was compiled for {spec.dtype}")
            arr = np.asarray(x, dtype=spec.dtype)    # weakly typed Python scalar
        else:
            arr = np.asarray(x)
            dt = np.dtype(jax.dtypes.canonicalize_dtype(arr.dtype))
            if dt != spec.dtype:
                raise DtypeError(f"argument '{spec.name}' has dtype {dt} but the function was "
                                 f"compiled for {spec.dtype}")
            if arr.dtype != spec.dtype:
                arr = arr.astype(spec.dtype)
        if arr.ndim != len(spec.shape):
            raise ShapeError(f"argument '{spec.name}' has rank {arr.ndim} (shape {arr.shape}) "
                             f"but the function was compiled for rank {len(spec.shape)} "
                             f"(shape {_describe(spec)})")
        if not arr.flags.c_contiguous:
            arr = np.require(arr, requirements='C')
        return arr

    def _check_dropped(self, arrays: list[np.ndarray]) -> None:
        """Arguments jax dropped as unused still obey static dims and shared names."""
        seen: dict[str, tuple[str, int, int]] = {}
        for i, (arr, spec) in enumerate(zip(arrays, self.leaves)):
            for axis, size in enumerate(arr.shape):
                name = spec.axes.get(axis)
                if name is None:
                    if i in self._dropped_named and size != spec.shape[axis]:
                        raise ShapeError(f"argument '{spec.name}' axis {axis} is {size}; "
                                         f"expected {spec.shape[axis]} (a static dimension)")
                    continue
                if name in seen and seen[name][2] != size:
                    other, other_axis, other_size = seen[name]
                    raise ShapeError(
                        f"argument '{spec.name}' axis {axis} ('{name}') is {size} but argument "
                        f"'{other}' axis {other_axis} ('{name}') is {other_size}; axes that "
                        f"share a dimension name must be equal.")
                seen.setdefault(name, (spec.name, axis, size))


try:
    from jax._src.array import ArrayImpl as _ArrayImpl   # jax is pinned to one minor version
except ImportError:     # pragma: no cover - then every input takes the general path
    _ArrayImpl = None


def weakly_typed(x: Any) -> Any:
    """x as a weakly typed jax.Array (its buffers shared, nothing copied), as jax.jit gives a
    result that only Python scalars made a float (`x * 2.5` of an int x): it then takes a
    bfloat16 operand's type instead of promoting it. Tracers are typed by the FFI call's
    result types already; anything jax's internals do not take as expected stays as it is."""
    if type(x) is not _ArrayImpl or x.weak_type:
        return x
    try:
        return _ArrayImpl(x.aval.update(weak_type=True), x.sharding, x._arrays,
                          committed=x._committed)
    except Exception:
        return x


def _committed_device(flat_args: Sequence[Any], leaves) -> Any:
    """The device the results go to, as jax.jit places them: the one device of the committed
    jax.Array inputs (None: all uncommitted, results on the default device). Committed inputs
    on different devices are errors; an array sharded over several raises _Sharded (the call
    then runs per shard, and never gathers a sharded array behind the user's back)."""
    device = first = None
    for x, spec in zip(flat_args, leaves):
        if type(x) is not _ArrayImpl or not getattr(x, "_committed", False):
            continue        # uncommitted: one array on the default device (jax never shards it)
        devices = x.sharding._device_assignment
        if len(devices) > 1:
            raise _Sharded
        if device is None:
            device, first = devices[0], spec.name
        elif devices[0] != device:
            raise ArgumentError(
                f"argument '{first}' is committed to {device} but argument '{spec.name}' to "
                f"{devices[0]}: as with jax.jit, the committed inputs of one call must be on "
                f"one device (move them with jax.device_put)")
    return device


def _may_overlap(view: np.ndarray, other: Any) -> bool:
    """Whether an argument may read the memory of `view` (a donated buffer). Arguments that
    are neither arrays nor jax.Arrays are copied before the call."""
    if isinstance(other, np.ndarray):
        return bool(np.may_share_memory(view, other))
    if type(other) is _ArrayImpl:
        try:
            start, n = other.unsafe_buffer_pointer(), other.nbytes
        except Exception:   # not on one CPU device: the call copies it (or refuses it)
            return False
        return start < view.ctypes.data + view.nbytes and view.ctypes.data < start + n
    return False


class _Sharded(Exception):
    """An input is sharded over several devices: the call goes per shard (sharding.py)."""


def _cpu_pointer(x: Any, spec) -> int | None:
    """The data address of a single-device CPU jax.Array of the compiled dtype and rank (after
    waiting for it: jax dispatches asynchronously), else None."""
    if type(x) is not _ArrayImpl or x.dtype != spec.dtype or x.ndim != len(spec.shape):
        return None
    try:
        x.block_until_ready()
        return x.unsafe_buffer_pointer()
    except Exception:   # several devices, a deleted buffer, ...: the general path decides
        return None


def _describe(spec) -> str:
    return "(" + ", ".join(spec.axes.get(i, str(d)) for i, d in enumerate(spec.shape)) + ")"
