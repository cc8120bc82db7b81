"""Calling a compiled program: ctypes bindings to jd_prepare / jd_run, on host buffers.

This is the eager path: no XLA computation is built or compiled for any shape. Inputs are read
in place (numpy views of CPU `jax.Array`s); outputs are allocated here from the dims jd_prepare
computes and handed to JAX.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
from typing import Sequence

import numpy as np

from jdisc.custom_calls.compiler import Library, build
from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.errors import RuntimeCheckError, ShapeError
from jdisc.lowering.codegen import CProgram

_ERR_LEN = 2048
_P = ctypes.c_void_p


class Executable:
    """A loaded jdisc program: `run(arrays) -> arrays` for any shapes its signature admits."""

    def __init__(self, cprog: CProgram, library: Library):
        self.cprog = cprog
        self.library = library
        lib = library.handle
        self._prepare = lib.jd_prepare
        self._prepare.argtypes = [_P, _P, _P, ctypes.c_char_p, ctypes.c_int64]
        self._prepare.restype = ctypes.c_int
        self._run = lib.jd_run
        self._run.argtypes = [_P, _P, _P, ctypes.c_char_p, ctypes.c_int64]
        self._run.restype = ctypes.c_int
        self._out_ranks = [len(s.shape) for s in cprog.outputs]
        self._out_dtypes = [numpy_dtype(s.dtype) for s in cprog.outputs]
        self._n_dims = max(len(cprog.dim_vars), 1)
        self._local = threading.local()
        lib.jd_set_threads.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.jd_set_threads(num_threads(), int(threads_pinned()))
        split = os.environ.get("JDISC_SPLIT_PIECES", "").strip()     # tests only
        if hasattr(lib, "jd_set_split_pieces"):    # not in a package's library of 2026-12-06
            lib.jd_set_split_pieces(int(split) if split.isdigit() else 0)

    @property
    def fast_call(self):
        """The program's `Program` in the C extension (custom_calls/eager.py): `fast(args)`
        checks, binds, allocates, runs and gives the results as jax.Arrays in one C call,
        `fast.numpy(args, given)` gives numpy outputs; None where that extension is
        unavailable (or still being built: asked again on the next call)."""
        fast = self.__dict__.get("_fast", False)
        if fast is False:
            from jdisc.custom_calls import eager
            # read before trying: a build that ends during the try leaves it None, and reading
            # after it had kept that None for good (every later call on the ctypes path)
            decided = eager.ready() or not eager.enabled()
            fast = self._make_fast_call()
            if fast is not None or decided:
                self.__dict__["_fast"] = fast
        return fast

    def _make_fast_call(self):
        from jdisc.custom_calls import eager
        try:
            from jax._src.array import ArrayImpl
        except ImportError:     # pragma: no cover - then only numpy inputs take the C path
            ArrayImpl = None
        ins = self.cprog.inputs
        maker = array_maker()

        def program(maker):
            return eager.program(self.library.handle, self._n_dims,
                                 [numpy_dtype(s.dtype) for s in ins], [len(s.shape) for s in ins],
                                 self._out_dtypes, self._out_ranks, ArrayImpl, ShapeError,
                                 RuntimeCheckError, maker)
        fast = program(maker)
        if fast is not None and maker is not None and not _makes_arrays(fast, maker,
                                                                         self._out_dtypes,
                                                                         self._out_ranks):
            fast = program(None)    # results made in Python (to_jax)
        return fast

    def _scratch(self) -> "_Scratch":
        """Per-thread reusable argument buffers (calls from several threads never share)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _Scratch(self._n_dims, sum(self._out_ranks))
        return scratch

    def prepare(self, shapes: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """Dimension-variable values and output shapes for these input shapes (checks them)."""
        sc = self._scratch()
        flat = [d for s in shapes for d in s]
        in_dims = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        if self._prepare(in_dims, sc.dims_p, sc.out_dims_p, sc.err, _ERR_LEN):
            raise ShapeError(sc.err.value.decode(errors="replace"))
        flat = sc.out_dims.tolist()
        shapes_out, pos = [], 0
        for r in self._out_ranks:
            shapes_out.append(tuple(flat[pos:pos + r]))
            pos += r
        return sc.dims, shapes_out

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`arrays` must already be C-contiguous with the compiled dtypes and ranks."""
        return self.run_pointers([a.shape for a in arrays], [a.ctypes.data for a in arrays])

    def run_pointers(self, shapes: Sequence[Sequence[int]], pointers: Sequence[int],
                     given: dict | None = None) -> list[np.ndarray]:
        """Inputs given by shape and data address (the caller keeps them alive); returns the
        outputs as new numpy arrays, except that output j is written into `given[j][1]` (a
        donated input's buffer) when that array has the output's shape and dtype."""
        _, out_shapes = self.prepare(shapes)
        sc = self._scratch()
        outs = [empty_output(s, dt) for s, dt in zip(out_shapes, self._out_dtypes)]
        for j, (_, buf) in (given or {}).items():
            if buf.shape == out_shapes[j] and buf.dtype == self._out_dtypes[j] and buf.nbytes:
                outs[j] = buf
        ins_p = (_P * max(len(pointers), 1))(*pointers)
        outs_p = (_P * max(len(outs), 1))(*[_address(o) for o in outs])
        if self._run(sc.dims_p, ins_p, outs_p, sc.err, _ERR_LEN):
            raise RuntimeCheckError(sc.err.value.decode(errors="replace"))
        return outs


def _address(arr: np.ndarray) -> int:
    """Data address of a fresh (writable, contiguous) array; a quarter of `.ctypes.data`'s
    cost. Empty arrays are never dereferenced."""
    if not arr.nbytes:
        return arr.ctypes.data     # numpy's address for an empty array (never read)
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (ValueError, TypeError):     # a buffer format ctypes does not know (bfloat16)
        return arr.ctypes.data


class _Scratch:
    def __init__(self, n_dims: int, n_out_dims: int):
        self.dims = np.zeros(max(n_dims, 1), np.int64)
        self.out_dims = np.zeros(max(n_out_dims, 1), np.int64)
        self.dims_p, self.out_dims_p = self.dims.ctypes.data, self.out_dims.ctypes.data
        self.err = ctypes.create_string_buffer(_ERR_LEN)


ZERO_COPY_MIN_BYTES = 1 << 20


def donate_min_bytes() -> int | None:
    """The smallest donated buffer a result takes: JDISC_DONATE_MIN_BYTES, default 1 MiB
    (below it a fresh output is cheaper than handing the buffer back to jax through DLPack).
    None before jax 0.10: there, deleting the donated jax.Array frees its memory although a
    numpy view of it is alive (measured on 0.8.0: the result read freed memory), so no
    donated buffer is reused."""
    if not _KEEPS_VIEWED_BUFFERS:
        return None
    value = os.environ.get("JDISC_DONATE_MIN_BYTES", "").strip()
    return int(value) if value.isdigit() else ZERO_COPY_MIN_BYTES


def _jax_version() -> tuple:
    import jax
    return tuple(int(p) for p in jax.__version__.split(".")[:2] if p.isdigit())


_KEEPS_VIEWED_BUFFERS = _jax_version() >= (0, 10)


class _BufferView:
    """A writable numpy view of a donated jax.Array's buffer: `np.asarray(x)` is read-only,
    so this re-exports its address; holding `ref` keeps the buffer's memory alive after the
    jax.Array is deleted (jax keeps a buffer with an external reference until it is released)."""

    def __init__(self, ref: np.ndarray, address: int):
        self.ref = ref
        self.__array_interface__ = {"data": (address, False), "shape": ref.shape,
                                    "typestr": ref.dtype.str, "version": 3}


def writable_view(x, address: int) -> np.ndarray | None:
    """A writable array over the buffer of the CPU jax.Array x (at `address`), or None."""
    try:
        ref = np.asarray(x)
        if ref.ctypes.data != address or not ref.flags.c_contiguous:
            return None
        view = np.asarray(_BufferView(ref, address))
        return view if view.dtype == ref.dtype else None
    except Exception:
        return None


OUT_ALIGN, OUT_ALIGN_MIN = 64, 4096     # as eager.c's new_output


def empty_output(shape, dtype) -> np.ndarray:
    """A new C-contiguous array for an output; from OUT_ALIGN_MIN bytes on its data is aligned
    to OUT_ALIGN bytes, so that XLA takes it over without a copy (numpy's own large arrays
    start 16 bytes into a page, and XLA copies those)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < OUT_ALIGN_MIN:
        return np.empty(shape, dtype)
    raw = np.empty(nbytes + OUT_ALIGN, np.uint8)
    start = -raw.ctypes.data % OUT_ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def to_jax(arr: np.ndarray, device=None, owned: bool = True):
    """A jax.Array of a result buffer, uncommitted on the default device, or committed to
    `device` (where jax.jit would put it: the committed inputs' device). Large ones on the
    default device are handed over without a copy (DLPack); the rest go through the batched
    device put under `jax.device_put` (a fifth of its cost: jax.device_put's Python layers took
    ~30 us of a ~40 us eager call). The buffer is ours and fresh, so the array may alias it.
    `owned=False`: arr is a view of a donated buffer, handed over without a copy whatever
    its size."""
    put = _DEVICE_PUT[0] if _DEVICE_PUT else _device_put()
    if owned and put is not None and (device is not None or arr.nbytes < ZERO_COPY_MIN_BYTES):
        return put(arr, device)         # the common small result: nothing else to decide
    import jax
    if not owned:
        try:
            out = jax.dlpack.from_dlpack(arr)
            return out if device is None else jax.device_put(out, device)
        except Exception:   # not importable without a copy: the copy below
            pass
    if device is None and arr.nbytes >= ZERO_COPY_MIN_BYTES:
        try:
            return jax.dlpack.from_dlpack(arr)
        except Exception:   # e.g. an alignment XLA does not accept: copy instead
            pass
    if put is not None:
        return put(arr, device)
    return jax.device_put(arr, device)   # (jnp.asarray would compile a conversion per shape)


_DEVICE_PUT: list = []
_MAKER: list = []


def _device_put():
    """What `jax.device_put(numpy_array)` does (an uncommitted array on the default device),
    through jax's internal batched put: ~5 us instead of ~50 us of Python dispatch, which on
    a small program is most of a call. None when jax's internals are not as expected."""
    if not _DEVICE_PUT:
        _DEVICE_PUT.append(None)
        _MAKER.append(None)
        try:
            from jax._src import config, core, xla_bridge
            from jax._src.interpreters import pxla
            from jax._src.lib import xla_client
            from jax._src.sharding_impls import SingleDeviceSharding
            shardings: dict = {}
            avals: dict = {}

            def put(arr: np.ndarray, committed_to=None):
                device = committed_to or pxla.get_default_device()
                sharding = shardings.get(device)
                if sharding is None:
                    sharding = shardings[device] = SingleDeviceSharding(device)
                key = (arr.shape, arr.dtype)
                aval = avals.get(key)
                if aval is None:
                    if len(avals) > 4096:
                        avals.clear()
                    aval = avals.setdefault(key, core.ShapedArray(arr.shape, arr.dtype))
                return xla_client.batched_device_put(aval, sharding, [arr], [device],
                                                     committed_to is not None)
            probe = np.arange(3, dtype=np.float32)
            if not np.array_equal(np.asarray(put(probe)), probe):
                return None
            _DEVICE_PUT[0] = put
            # the same put, made from C (eager.c's maker), to the default device as
            # pxla.get_default_device gives it while no jax.default_device is set
            state, device = config.default_device, xla_bridge.local_devices()[0]
            if state.value is not None or pxla.get_default_device() == device:
                _MAKER[0] = (state, SingleDeviceSharding(device), [device],
                             xla_client.batched_device_put, (False,), core.ShapedArray, to_jax,
                             ZERO_COPY_MIN_BYTES)
        except Exception:
            pass
    return _DEVICE_PUT[0]


def array_maker() -> tuple | None:
    """What eager.c needs to make results as `put` does (its header: the maker), or None
    when jax's internals are not as expected (then `to_jax` makes them)."""
    if not _DEVICE_PUT:
        _device_put()
    return _MAKER[0]


def _makes_arrays(fast, maker: tuple, dtypes, ranks) -> bool:
    """Whether `fast` (a Program with `maker`) makes, for each output, the jax.Array that
    `put` makes: an uncommitted single-device array of the dtype, shape and values."""
    try:
        from jax._src.array import ArrayImpl
        for j, (dtype, rank) in enumerate(zip(dtypes, ranks)):
            arr = np.ones((2,) + (1,) * (rank - 1) if rank else (), dtype)
            out = fast.wrap(j, arr)
            if (type(out) is not ArrayImpl or out._committed or out.sharding != maker[1] or
                    out.dtype != arr.dtype or out.shape != arr.shape or
                    np.asarray(out).tobytes() != arr.tobytes()):
                return False
        return True
    except Exception:
        return False


def threads_pinned() -> bool:
    """The user fixed the thread count (JDISC_NUM_THREADS or OMP_NUM_THREADS): no adapting."""
    return any(os.environ.get(v, "").split(",")[0].strip().isdigit()
               for v in ("JDISC_NUM_THREADS", "OMP_NUM_THREADS"))


def num_threads() -> int:
    """JDISC_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this process may use: its
    affinity mask, capped by its cgroup's CPU quota (a container given 2 CPUs of a 64-core host
    gets 2 threads, not 64 threads sharing 2 CPUs' time)."""
    for var in ("JDISC_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(n, math.ceil(quota))) if quota else n


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"):
    """CPUs' worth of time this process's cgroup may use (quota / period), or None when
    unlimited or unknown; cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us`)."""
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, path in (p for p in lines if len(p) == 3):
        if controllers == "":                                    # v2: one unified hierarchy
            files = [(os.path.join(root, path.lstrip("/"), "cpu.max"), None)]
        elif "cpu" in controllers.split(","):                    # v1
            base = os.path.join(root, controllers, path.lstrip("/"))
            if not os.path.isdir(base):
                base = os.path.join(root, "cpu", path.lstrip("/"))
            files = [(os.path.join(base, "cpu.cfs_quota_us"),
                      os.path.join(base, "cpu.cfs_period_us"))]
        else:
            continue
        for quota_file, period_file in files:
            try:
                with open(quota_file, encoding="utf-8") as f:
                    fields = f.read().split()
                if period_file is not None:
                    with open(period_file, encoding="utf-8") as f:
                        fields += f.read().split()
            except OSError:
                continue
            if len(fields) >= 2 and fields[0] not in ("max", "-1"):
                try:
                    quota, period = int(fields[0]), int(fields[1])
                except ValueError:
                    continue
                if quota > 0 and period > 0:
                    return quota / period
    return None


def load(cprog: CProgram, *, sanitize: bool | None = None) -> Executable:
    loader_environment()
    return Executable(cprog, build(cprog.source, sanitize=sanitize, data=cprog.data,
                                   data_sha256=cprog.data_sha256))


def loader_environment() -> None:
    """Settings OpenBLAS reads when it loads: call before loading a library."""
    # jdisc runs OpenBLAS on one thread, but other code in the process may give it more; its
    # workers then spin for ~2^28 cycles after each threaded GEMM, and a loop of small kernels
    # that follows shares its core with a spinning thread (measured before the pool: LSTM
    # T=200 B=8 at 8.1 ms instead of 1.9 ms on a busy 2-core machine). 2^4 cycles: idle
    # workers sleep at once. Read when OpenBLAS loads.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
