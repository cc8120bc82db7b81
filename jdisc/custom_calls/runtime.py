"""Calling a compiled program: ctypes bindings to jd_prepare / jd_run, on host buffers.

This is the eager path: no XLA computation is built or compiled for any shape. Inputs are read
in place (numpy views of CPU `jax.Array`s); outputs are allocated here from the dims jd_prepare
computes and handed to JAX.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Sequence

import numpy as np

from jdisc.custom_calls.compiler import Library, build
from jdisc.dynamic_passes.ir import numpy_dtype
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
        lib.jd_set_num_threads.argtypes = [ctypes.c_int]
        lib.jd_set_num_threads(num_threads())

    def _scratch(self) -> "_Scratch":
        """Per-thread reusable argument buffers (calls from several threads never share)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _Scratch(self._n_dims, sum(self._out_ranks))
        return scratch

    def prepare(self, shapes: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """Dimension-variable values and output shapes for these input shapes (checks them)."""
        sc = self._scratch()
        in_dims = np.array([d for s in shapes for d in s] or [0], dtype=np.int64)
        if self._prepare(in_dims.ctypes.data, sc.dims_p, sc.out_dims_p, sc.err, _ERR_LEN):
            raise ShapeError(sc.err.value.decode(errors="replace"))
        flat = sc.out_dims.tolist()
        shapes_out, pos = [], 0
        for r in self._out_ranks:
            shapes_out.append(tuple(flat[pos:pos + r]))
            pos += r
        return sc.dims, shapes_out

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`arrays` must already be C-contiguous with the compiled dtypes and ranks."""
        _, out_shapes = self.prepare([a.shape for a in arrays])
        sc = self._scratch()
        outs = [np.empty(s, dt) for s, dt in zip(out_shapes, self._out_dtypes)]
        ins_p = (_P * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outs_p = (_P * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        if self._run(sc.dims_p, ins_p, outs_p, sc.err, _ERR_LEN):
            raise RuntimeCheckError(sc.err.value.decode(errors="replace"))
        return outs


class _Scratch:
    def __init__(self, n_dims: int, n_out_dims: int):
        self.dims = np.zeros(max(n_dims, 1), np.int64)
        self.out_dims = np.zeros(max(n_out_dims, 1), np.int64)
        self.dims_p, self.out_dims_p = self.dims.ctypes.data, self.out_dims.ctypes.data
        self.err = ctypes.create_string_buffer(_ERR_LEN)


_ZERO_COPY_MIN_BYTES = 1 << 20


def to_jax(arr: np.ndarray):
    """A jax.Array of a result buffer: large ones are handed over without a copy (DLPack);
    small ones through the batched device put under `jax.device_put` (a fifth of its cost:
    jax.device_put's Python layers took ~30 us of a ~40 us eager call). The buffer is ours and
    fresh, so the array may alias it."""
    import jax
    if arr.nbytes >= _ZERO_COPY_MIN_BYTES:
        try:
            return jax.dlpack.from_dlpack(arr)
        except Exception:   # e.g. an alignment XLA does not accept: copy instead
            pass
    put = _fast_put()
    if put is not None:
        try:
            return put(arr)
        except Exception:   # an internal API changed: the public path below still works
            _FAST_PUT[0] = None
    return jax.device_put(arr)   # (jnp.asarray would compile a conversion per shape)


_FAST_PUT: list = []


def _fast_put():
    """`arr -> jax.Array` on the default CPU device through jaxlib's batched_device_put (jax is
    pinned to one minor version; any failure falls back to jax.device_put for good)."""
    if not _FAST_PUT:
        try:
            import jax
            from jax._src import core
            from jax._src.lib import xla_client as xc
            dev = jax.devices()[0]
            sharding = jax.sharding.SingleDeviceSharding(dev)
            avals: dict = {}

            def put(arr):
                key = (arr.shape, arr.dtype)
                aval = avals.get(key)
                if aval is None:
                    if len(avals) > 4096:
                        avals.clear()
                    aval = avals.setdefault(key, core.ShapedArray(arr.shape, arr.dtype))
                return xc.batched_device_put(aval, sharding, [arr], [dev], False)
            _FAST_PUT.append(put if dev.platform == "cpu" else None)
        except Exception:
            _FAST_PUT.append(None)
    return _FAST_PUT[0]


def num_threads() -> int:
    """JDISC_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this process may use."""
    for var in ("JDISC_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load(cprog: CProgram, *, sanitize: bool | None = None) -> Executable:
    loader_environment()
    return Executable(cprog, build(cprog.source, sanitize=sanitize))


def loader_environment() -> None:
    """Settings libgomp and OpenBLAS read when they load: call before loading a library."""
    # Kernels share the cores with OpenBLAS's threads: OpenMP threads that spin while idle
    # would steal them. Read by libgomp when the first jdisc library loads it.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Likewise OpenBLAS's workers spin for ~2^28 cycles after each threaded GEMM; a loop of
    # small kernels that follows (an RNN after its input projection) then shares its core with
    # a spinning thread (measured: LSTM T=200 B=8 at 8.1 ms instead of 1.9 ms on a busy
    # 2-core machine). 2^4 cycles: idle workers sleep at once. Read when OpenBLAS loads.
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
