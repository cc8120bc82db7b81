"""Compile generated C into a shared library through an on-disk cache, and load it.

Two cache levels, as in Triton: a dict in memory (same source in one process -> same handle) and a
directory on disk, `<cache_dir>/<key[:2]>/<key>/` holding `kernel.c` (kept for users to read),
`lib.so` (compiled to a temp file beside it, then `os.replace`d), `lib.so.sha256` (written
after it; a hit needs it to match) and, for a program with large constants, `data.bin` (its data
section, lowering/data.py: mapped read-only at load; rewritten when its bytes do not hash to the
digest in the key). The key is a sha256 over the source, the compiler command and
flags, the compiler's `--version`, the machine and CPU (we pass -march=native), and jdisc's
version plus its `lowering`/`custom_calls` sources. A per-entry `fcntl.flock` on `lock` makes
concurrent builds compile once; a corrupted entry is deleted and rebuilt, never loaded.

Environment: `JDISC_CACHE_DIR` (else `$XDG_CACHE_HOME/jdisc`, else `~/.cache/jdisc`), `JDISC_CC`
(default `cc`), `JDISC_SANITIZE=1` (ASan/UBSan build; loading it into Python needs
`LD_PRELOAD=$(cc -print-file-name=libasan.so)`).
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import hashlib
import mmap
import os
import platform
import shlex
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jdisc.custom_calls.probe import workaround_flags
from jdisc.errors import CompileError
from jdisc.version import __version__

_OUTPUT_TAIL_CHARS = 4000

_BASE_CFLAGS = [
    "-std=c99", "-O3", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-march=native",
    "-fopenmp-simd",   # `#pragma omp simd` only: parallel loops run on jdisc's pool (jd_pool.h)
    # floating-point operations may be evaluated speculatively (jdisc exposes no FP exception
    # flags): lets GCC if-convert and vectorise branchy math such as tanh, exp and NaN-aware max
    "-fno-trapping-math",
    "-Wall", "-Werror=return-type", "-Wno-unused-function", "-Wno-unused-variable",
    "-Wno-unused-but-set-variable",
]
_SANITIZE_CFLAGS = [
    "-O1", "-g", "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
]


@dataclass(frozen=True)
class Library:
    """A compiled and loaded shared library from the cache."""

    path: str  # the .so
    key: str  # hex sha256 cache key
    cache_hit: bool  # True when the .so was already on disk (or in memory) and valid
    c_path: str  # the C source kept beside it in the cache
    handle: ctypes.CDLL
    data: object = None  # the mapped data section the library points into (kept alive here)


# ---------------------------------------------------------------------------------------------
# Configuration


def cache_dir() -> str:
    """The cache root, read from the environment at each call and created on demand."""
    root = os.environ.get("JDISC_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "jdisc")
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    return root


def compiler_command() -> list[str]:
    """The C compiler to run: `JDISC_CC` (split like a shell would), default `cc`."""
    return shlex.split(os.environ.get("JDISC_CC", "cc"))


def _flag_parts(sanitize: bool) -> tuple[list[str], list[str]]:
    """(compile flags, link flags); link flags go after the source file on the command line."""
    import scipy_openblas32

    cflags = list(_BASE_CFLAGS)
    if sanitize:
        i = cflags.index("-O3")
        cflags[i:i + 1] = _SANITIZE_CFLAGS
    compiler = compiler_command()
    cflags += workaround_flags(compiler, cflags, _compiler_identity(compiler), _host_cpu(),
                               cache_dir())
    cflags += ["-I", scipy_openblas32.get_include_dir(), "-I", _xla_ffi_include_dir()]
    libdir = scipy_openblas32.get_lib_dir()
    ldflags = [
        "-L", libdir, f"-l{scipy_openblas32.get_library()}", f"-Wl,-rpath,{libdir}", "-lm",
    ]
    return cflags, ldflags


def _xla_ffi_include_dir() -> str:
    """jaxlib's headers: the XLA FFI C API each program's custom-call handler is written to."""
    import jax.ffi
    return jax.ffi.include_dir()


def compile_flags(*, sanitize: bool = False) -> list[str]:
    """Every flag passed to the compiler besides the input and output paths."""
    cflags, ldflags = _flag_parts(sanitize)
    return cflags + ldflags


# ---------------------------------------------------------------------------------------------
# Cache key ingredients, each computed once per process


_memo_lock = threading.Lock()
_compiler_ids: dict[tuple[str, ...], str] = {}
_host_fingerprint: str | None = None
_jdisc_fingerprint: str | None = None


def _missing_compiler(cmd: list[str], err: OSError) -> CompileError:
    return CompileError(
        f"could not run the C compiler {shlex.join(cmd)!r}: {err}. "
        "Install a C compiler (gcc or clang) or point JDISC_CC at one, "
        "e.g. JDISC_CC='clang' or JDISC_CC='/usr/bin/gcc-12'."
    )


def _compiler_identity(cmd: list[str]) -> str:
    """First line of `<cmd> --version`, memoised per command."""
    with _memo_lock:
        ident = _compiler_ids.get(tuple(cmd))
    if ident is not None:
        return ident
    try:
        proc = subprocess.run(
            [*cmd, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
            errors="replace", timeout=120,
        )
    except OSError as e:
        raise _missing_compiler(cmd, e) from e
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    ident = f"{lines[0] if lines else ''} (rc={proc.returncode})"
    with _memo_lock:
        _compiler_ids[tuple(cmd)] = ident
    return ident


def _host_cpu() -> str:
    """platform.machine() plus the CPU model and feature flags (the code is -march=native)."""
    global _host_fingerprint
    if _host_fingerprint is None:
        wanted = {"model name": None, "flags": None, "Features": None, "CPU part": None}
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    name, _, value = line.partition(":")
                    name = name.strip()
                    if name in wanted and wanted[name] is None:
                        wanted[name] = value.strip()
        except OSError:
            pass
        parts = [platform.machine(), platform.processor()]
        parts += [f"{k}={v}" for k, v in sorted(wanted.items()) if v is not None]
        _host_fingerprint = "\n".join(parts)
    return _host_fingerprint


def _jdisc_sources() -> str:
    """jdisc's version and a hash of the code that writes and compiles C."""
    global _jdisc_fingerprint
    if _jdisc_fingerprint is None:
        pkg = Path(__file__).resolve().parent.parent  # jdisc/
        h = hashlib.sha256()
        for sub in ("lowering", "custom_calls"):
            for path in sorted((pkg / sub).rglob("*.py")):
                h.update(path.relative_to(pkg).as_posix().encode() + b"\0")
                h.update(path.read_bytes() + b"\0")
        _jdisc_fingerprint = f"{__version__}:{h.hexdigest()}"
    return _jdisc_fingerprint


def _cache_key(source: str, compiler: list[str], flags: list[str]) -> str:
    h = hashlib.sha256()
    for part in (
        source, "\0".join(compiler + flags), _compiler_identity(compiler),
        platform.machine(), _host_cpu(), _jdisc_sources(),
    ):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0\1\0")
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Build


_memory: dict[tuple[str, str], Library] = {}  # (cache dir, key) -> loaded library
_key_locks: dict[tuple[str, str], threading.Lock] = {}


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_atomic(path: str, data: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _write_bytes_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _entry_valid(so_path: str, sha_path: str) -> bool:
    """Both files exist and the .so's bytes hash to the recorded digest."""
    try:
        with open(sha_path, encoding="utf-8") as f:
            recorded = f.read().strip()
        return bool(recorded) and _file_sha256(so_path) == recorded
    except OSError:
        return False


def _compile(compiler: list[str], cflags: list[str], ldflags: list[str], c_path: str,
             so_path: str, sha_path: str) -> None:
    """Compile into a temp file beside `so_path`, then move it into place and record its hash."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(so_path), prefix="lib.so.", suffix=".tmp")
    os.close(fd)
    cmd = [*compiler, *cflags, c_path, "-o", tmp, *ldflags]
    try:
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, errors="replace",
            )
        except OSError as e:
            raise _missing_compiler(compiler, e) from e
        if proc.returncode != 0 or os.path.getsize(tmp) == 0:
            out = proc.stdout.strip()
            if len(out) > _OUTPUT_TAIL_CHARS:
                out = "[... earlier output trimmed ...]\n" + out[-_OUTPUT_TAIL_CHARS:]
            raise CompileError(
                f"C compiler failed (exit code {proc.returncode}) on generated code.\n"
                f"command: {shlex.join(cmd)}\n"
                f"C source: {c_path}\n"
                f"compiler output:\n{out or '(none)'}"
            )
        digest = _file_sha256(tmp)
        os.replace(tmp, so_path)
    finally:
        _unlink(tmp)
    _write_atomic(sha_path, digest + "\n")


def _load(path: str, sanitize: bool) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    except OSError as e:
        hint = (
            " Libraries built with JDISC_SANITIZE need the sanitizer runtime preloaded: "
            "LD_PRELOAD=$(cc -print-file-name=libasan.so) python ..." if sanitize else ""
        )
        raise CompileError(f"could not load compiled library {path}: {e}.{hint}") from e


def bind_data(handle: ctypes.CDLL, data, where: str):
    """Point the library's large constants into `data` (bytes, or a read-only mmap); returns
    the object that owns the memory, which must stay alive as long as the library."""
    size = len(data)
    if not size:
        return None
    if isinstance(data, bytes):
        keep = (ctypes.c_char * size).from_buffer_copy(data)
        base = ctypes.addressof(keep)
    else:                                   # a read-only mapping: addressed without a copy
        keep = np.frombuffer(data, dtype=np.uint8)
        base = keep.ctypes.data
    fn = handle.jd_bind_data
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int64], ctypes.c_int
    if fn(ctypes.c_void_p(base), size) != 0:
        raise CompileError(f"{where}: its data section ({size} bytes) does not match the "
                           f"library")
    return keep


def _map_data(path: str):
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def build(source: str, *, sanitize: bool | None = None, data: bytes = b"",
          data_sha256: str = "") -> Library:
    """Compile `source` (C99) into a shared library, through the caches, and load it; `data`
    is its data section (large constants; `data_sha256` its digest, computed once by the
    code generator), kept in the entry as `data.bin` and mapped at load.

    `sanitize=None` reads `JDISC_SANITIZE`. Raises CompileError when the compiler is missing or
    fails; the message carries the command, the compiler's output and the kept C file's path.
    """
    if sanitize is None:
        sanitize = os.environ.get("JDISC_SANITIZE", "") not in ("", "0")
    if data and not data_sha256:
        data_sha256 = hashlib.sha256(data).hexdigest()
    compiler = compiler_command()
    cflags, ldflags = _flag_parts(sanitize)
    key = _cache_key(source + data_sha256, compiler, cflags + ldflags)
    root = cache_dir()
    mem_key = (root, key)

    with _memo_lock:
        lib = _memory.get(mem_key)
        key_lock = _key_locks.setdefault(mem_key, threading.Lock())
    if lib is not None:
        return lib

    with key_lock:
        with _memo_lock:
            lib = _memory.get(mem_key)
        if lib is not None:  # another thread built it while we waited
            return lib

        entry = os.path.join(root, key[:2], key)
        os.makedirs(entry, exist_ok=True)
        c_path = os.path.join(entry, "kernel.c")
        so_path = os.path.join(entry, "lib.so")
        sha_path = so_path + ".sha256"
        data_path = os.path.join(entry, "data.bin")
        with open(os.path.join(entry, "lock"), "a+b") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                hit = _entry_valid(so_path, sha_path)
                if not hit:
                    for stale in (so_path, sha_path):  # corrupted or half-written: never load
                        _unlink(stale)
                if not hit or not os.path.exists(c_path):
                    _write_atomic(c_path, source)
                if data and not (os.path.exists(data_path)
                                 and _file_sha256(data_path) == data_sha256):
                    _write_bytes_atomic(data_path, data)
                if not hit:
                    _compile(compiler, cflags, ldflags, c_path, so_path, sha_path)
                handle = _load(so_path, sanitize)
                mapped = _map_data(data_path) if data else None
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
        if mapped is not None:
            mapped = bind_data(handle, mapped, so_path)

        lib = Library(path=so_path, key=key, cache_hit=hit, c_path=c_path, handle=handle,
                      data=mapped)
        with _memo_lock:
            # Later builds of the same source in this process reuse this handle, as a hit.
            _memory[mem_key] = dataclasses.replace(lib, cache_hit=True)
        return lib
