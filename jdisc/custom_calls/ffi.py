"""XLA FFI registration: each compiled program's `jd_ffi_handler` becomes a CPU custom-call
target, once per library (the same compiled library serves every shape, so XLA only compiles
the small program around the call)."""

from __future__ import annotations

import ctypes
import threading

from jdisc.custom_calls.runtime import Executable

_registered: dict[str, str] = {}      # library key -> target name
_lock = threading.Lock()


def target_name(executable: Executable) -> str:
    """The custom-call target serving this executable, registered on first use."""
    key = executable.library.key
    name = _registered.get(key)
    if name is not None:
        return name
    with _lock:
        name = _registered.get(key)
        if name is None:
            import jax
            name = f"jdisc_{key[:24]}"
            fn = executable.library.handle.jd_ffi_handler
            address = ctypes.cast(fn, ctypes.c_void_p).value
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(address), platform="cpu")
            _registered[key] = name
    return name
