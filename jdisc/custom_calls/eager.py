"""The eager call path in C: a small CPython extension (eager.c), built on first use.

`program(...)` returns a loaded program's `Program` (its calls give jax.Arrays made in C, or
numpy outputs, or None for the general path), or None when the extension cannot be built here
(no Python headers, no compiler) or `JDISC_EAGER_C=0`; the ctypes path in runtime.py then
serves every call. The module is built once per eager.c, Python and numpy version, into the
jdisc cache (`eager-<key>/`), with the same compiler as the kernels, in a background thread
(about 0.4 s): until it is loaded, calls take the ctypes path, so no call waits for it.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading

import numpy as np

from jdisc.custom_calls.compiler import cache_dir, compiler_command

_SOURCE = os.path.join(os.path.dirname(__file__), "eager.c")
_LOCK = threading.Lock()
_MODULE: list = []      # [module or None] once decided
_BUILDER: list = []     # [the background build's thread] once started


def enabled() -> bool:
    return os.environ.get("JDISC_EAGER_C", "1").strip() not in ("0", "")


def ready() -> bool:
    """Whether the module is decided (loaded, or known to be unavailable)."""
    return bool(_MODULE)


def module(wait: bool = False):
    """The extension module; None while it is being built (unless `wait`) or when it cannot
    be built here (decided once per process)."""
    if _MODULE:
        return _MODULE[0]
    with _LOCK:
        if not _MODULE and not _BUILDER:
            path = _path()
            if os.path.exists(path):        # built before: load it now (about a millisecond)
                _decide(lambda: path)
            else:
                _BUILDER.append(threading.Thread(target=_decide, args=(lambda: _build(path),),
                                                 name="jdisc eager-path build", daemon=True))
                _BUILDER[0].start()
    if wait and _BUILDER:
        _BUILDER[0].join()
    return _MODULE[0] if _MODULE else None


def _decide(get_path) -> None:
    try:
        mod = _load(get_path())
    except Exception:       # no headers or compiler: the ctypes path serves
        mod = None
    _MODULE.append(mod)


def _path() -> str:
    with open(_SOURCE, "rb") as f:
        source = f.read()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(b"\0".join([source, sys.version.encode(), np.__version__.encode(),
                                     " ".join(compiler_command()).encode()])).hexdigest()[:16]
    return os.path.join(cache_dir(), f"eager-{key}", "_jdisc_eager" + suffix)


def _build(path: str) -> str:
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="_jdisc_eager.", suffix=".tmp")
    os.close(fd)
    try:
        cmd = compiler_command() + [
            "-O2", "-fPIC", "-shared", "-std=c99", "-I", sysconfig.get_paths()["include"],
            "-I", np.get_include(), _SOURCE, "-o", tmp]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _load(path: str):
    spec = importlib.util.spec_from_file_location("_jdisc_eager", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def program(lib: ctypes.CDLL, n_dims: int, in_dtypes, in_ranks, out_dtypes, out_ranks,
            array_type, shape_error, run_error, maker=None):
    """The extension's `Program` for the program in `lib` (eager.c's header: `program(args)`
    gives jax.Arrays made in C by `maker`, `program.numpy(args, given)` numpy outputs), or
    None (see the module doc; while the module builds, `ready()` is False and a later call
    may succeed)."""
    mod = module() if enabled() and array_type is not None else None
    if mod is None:
        return None
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value   # noqa: E731
    plan = (address(lib.jd_prepare), address(lib.jd_run), n_dims, array_type,
            tuple(np.dtype(d) for d in in_dtypes), tuple(in_ranks),
            tuple(np.dtype(d) for d in out_dtypes), tuple(out_ranks), shape_error, run_error,
            maker)
    return mod.Program(plan)
