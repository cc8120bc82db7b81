"""Loading a library compiled on another machine (a package's `lib.so`), or rebuilding it here.

A package's library was compiled with `-march=native` for the CPU it was exported on and linked
against that host's libc, so it is loaded only when the target the package records matches this
host (machine, CPU model and feature flags, libc family and a version at least as new, sanitizer
build or not) and `dlopen` accepts it. Otherwise the packaged C is compiled here through the
ordinary cache (`compiler.build`), and the reason is reported.

The bytes given to `dlopen` are the bytes whose SHA-256 the caller verified: they are written to
an anonymous in-memory file (`memfd_create`) and loaded from `/proc/self/fd/N`, never from a
path another process could swap between the check and the load.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import threading

from jdisc.custom_calls import compiler, runtime
from jdisc.custom_calls.compiler import Library
from jdisc.errors import CompileError

_lock = threading.Lock()
_loaded: dict[tuple[str, str], Library] = {}   # (sha256 of the library, of its data) -> library
# glibc recognises an already-loaded object by its path name: were a memfd closed and its number
# reused by a later one, dlopen("/proc/self/fd/N") would hand back the old library. The
# descriptors of loaded libraries therefore stay open for the life of the process.
_open_fds: list[int] = []


def _sanitize_default() -> bool:
    return os.environ.get("JDISC_SANITIZE", "") not in ("", "0")


def host_target(sanitize: bool | None = None) -> dict:
    """What a library compiled here depends on (recorded in a package's manifest)."""
    return dict(_host_facts(sanitize),
                compiler=compiler._compiler_identity(compiler.compiler_command()))


def _host_facts(sanitize: bool | None = None) -> dict:
    cpu = compiler._host_cpu()
    model = next((line.partition("=")[2] for line in cpu.splitlines()
                  if line.startswith("model name=")), platform.processor() or "unknown")
    libc, libc_version = platform.libc_ver()
    return {
        "machine": platform.machine(),
        "cpu": model,
        "cpu_fingerprint": hashlib.sha256(cpu.encode()).hexdigest(),
        "libc": f"{libc} {libc_version}".strip(),
        "sanitize": _sanitize_default() if sanitize is None else sanitize,
    }


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def target_mismatch(recorded: dict) -> str | None:
    """Why a library built for `recorded` must not be loaded here, or None when it may be."""
    here = _host_facts()
    for key, what in (("machine", "machine"), ("cpu_fingerprint", "CPU (model or feature flags)"),
                      ("sanitize", "sanitizer build")):
        if recorded.get(key) != here[key]:
            shown = key if key != "cpu_fingerprint" else "cpu"
            return (f"it was built for another {what}: {recorded.get(shown)!r}, this host has "
                    f"{here[shown]!r}")
    libc, _, version = str(recorded.get("libc", "")).partition(" ")
    here_libc, _, here_version = here["libc"].partition(" ")
    if libc != here_libc or _version_tuple(version) > _version_tuple(here_version):
        return f"it was linked against {recorded.get('libc')!r}, this host has {here['libc']!r}"
    return None


def _dlopen_bytes(data: bytes, digest: str) -> ctypes.CDLL:
    runtime.loader_environment()
    _preload_blas()
    if not hasattr(os, "memfd_create"):
        raise OSError("this platform has no memfd_create to load a library from memory")
    fd = os.memfd_create(f"jdisc-{digest[:16]}.so", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        handle = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_LOCAL)
    except BaseException:
        os.close(fd)
        raise
    _open_fds.append(fd)
    return handle


def _preload_blas() -> None:
    """Load this environment's OpenBLAS first, so that a packaged library whose run path points
    into another machine's Python environment finds it by its soname."""
    try:
        import scipy_openblas32
        ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(),
                                 scipy_openblas32.get_library(fullname=True)))
    except (ImportError, OSError, AttributeError):
        pass   # then the library's own run path decides; a failure there means a rebuild


def load_library(so_bytes: bytes, cprog, target: dict) -> tuple[Library, str]:
    """The packaged library when this host can run it, else one compiled from the packaged C
    (`cprog.source`); either is bound to the package's data section (`cprog.data`).

    Returns (library, origin): origin is "package", or "rebuilt from the packaged C: <why>".
    `so_bytes` must already be verified against the package's manifest."""
    digest = hashlib.sha256(so_bytes).hexdigest()
    reason = target_mismatch(target)
    if reason is None:
        with _lock:     # one library instance per (code, data): its constants are globals
            lib = _loaded.get((digest, cprog.data_sha256))
            if lib is None:
                try:
                    handle = _dlopen_bytes(so_bytes, digest)
                except OSError as err:
                    reason = f"dlopen refused it: {err}"
                else:
                    data = compiler.bind_data(handle, cprog.data, "the packaged library")
                    lib = _loaded[digest, cprog.data_sha256] = Library(
                        path=f"memfd:jdisc-{digest[:16]}.so", key=digest, cache_hit=True,
                        c_path="", handle=handle, data=data)
        if lib is not None:
            return lib, "package"
    try:
        lib = compiler.build(cprog.source, data=cprog.data, data_sha256=cprog.data_sha256)
    except CompileError as err:
        raise CompileError(f"the package's library cannot be used on this host ({reason}), and "
                           f"rebuilding it from the packaged C failed: {err}") from err
    return lib, f"rebuilt from the packaged C: {reason}"
