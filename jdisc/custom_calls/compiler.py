"""Compile generated C into a shared library through an on-disk cache, and load it.

A program's C is several translation units (lowering/units.py): they compile in parallel
(`JDISC_CC_JOBS` at once, default the CPUs this process may use), each through the unit cache
`<cache_dir>/units/<key[:2]>/<key>.o` (keyed like a library, by its text: a kernel shared by
several programs, and the runtime unit every program has, compile once), and link into the
program's library. Kernel units not in the cache yet compile in bundles (`_bundles`): several
short kernels to one compiler run, whose object is then filed under each kernel's key too.

Two cache levels for libraries, as in Triton: a dict in memory (same source in one process ->
same handle) and a directory on disk, `<cache_dir>/<key[:2]>/<key>/` holding `kernel.c` (kept for users to read),
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
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jdisc.custom_calls.probe import workaround_flags
from jdisc.lowering import units as units_c
from jdisc.lowering.units import runtime_unit, split
from jdisc.custom_calls import runs
from jdisc.custom_calls.runs import missing_compiler as _missing_compiler
from jdisc.custom_calls.runs import run_compiler as _run_compiler
from jdisc.errors import CompileError
from jdisc.version import __version__

_BASE_CFLAGS = [
    "-std=c99", "-O3", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-march=native",
    "-fopenmp-simd",   # `#pragma omp simd` only: parallel loops run on jdisc's pool (jd_pool.h)
    # floating-point operations may be evaluated speculatively (jdisc exposes no FP exception
    # flags): lets GCC if-convert and vectorise branchy math such as tanh, exp and NaN-aware max
    "-fno-trapping-math",
    # a * b + c may be one fused multiply-add (-std=c99 alone turns that off), as XLA:CPU's
    # LLVM fuses them: one rounding instead of two, and the transcendentals' polynomials,
    # LayerNorm's and GELU's arithmetic take half the instructions
    "-ffp-contract=fast",
    # a call to an undeclared function is an error, not an implicit int: the units declare
    # the C library themselves (lowering/c_runtime/jd_libc.h)
    "-Wall", "-Werror=return-type", "-Werror=implicit-function-declaration",
    "-Wno-unused-function", "-Wno-unused-variable", "-Wno-unused-but-set-variable",
    "-pipe",    # the assembly goes to the assembler through a pipe: 2-3 ms less per unit
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
    cc_seconds: float = 0.0  # the C compiler's wall time for this build (0 on a hit)


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
    # probed at each level kernels compile at: theirs are the loops the probes mimic
    probed = [cflags] if sanitize else \
        [_level_flags(cflags, level) for level in (units_c.KERNEL_OPT, units_c.STITCH_OPT)]
    cflags += workaround_flags(compiler, probed, _compiler_identity(compiler), _host_cpu(),
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


# A link's seconds in the estimate `reporting` hands on (gold: 16-18 ms on the benchmarks'
# programs, see _link)
LINK_S = 0.02

def _report(costs: list[int]) -> None:
    expect = runs.expecting()
    if expect is not None:
        cc_s = max(max(costs, default=0), sum(costs) / compile_jobs()) / 1e6
        expect(cc_s + LINK_S)


def _level_flags(cflags: list[str], opt: str) -> list[str]:
    """`cflags` with its -O flag replaced by the flags of the unit level `opt`
    (lowering/units.py LEVELS); unchanged for a level it does not know."""
    level = units_c.LEVELS.get(opt)
    if level is None:
        return list(cflags)
    out: list[str] = []
    for f in cflags:
        out += level if f.startswith("-O") else [f]
    return out


def _unit_flags(cflags: list[str], opt: str, sanitize: bool) -> list[str]:
    """A unit's compile flags: its -O level (not under the sanitizer's -O1), no -shared."""
    flags = [f for f in cflags if f != "-shared"]
    if not sanitize:
        flags = _level_flags(flags, opt)
    return flags + ["-c"]


def _unit_files(root: str, key: str) -> tuple[str, str, str, str]:
    """(object, its hash, its C, its lock) of the unit cache entry `key`."""
    folder = os.path.join(root, "units", key[:2])
    os.makedirs(folder, exist_ok=True)
    return tuple(os.path.join(folder, key + ext) for ext in (".o", ".o.sha256", ".c", ".lock"))


def _cached_object(root: str, key: str):
    """(path, lock) of the valid object of the unit cache entry `key`, held shared (as
    `_unit_object` holds it), or None when there is none or it is being built (the runtime
    unit on a cold cache: start_runtime_unit): a worker waits for that one, not the caller."""
    obj, sha, _, lock_path = _unit_files(root, key)
    lock_file = open(lock_path, "a+b")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_SH | fcntl.LOCK_NB)
        if _entry_valid(obj, sha):
            return obj, lock_file
    except BlockingIOError:
        pass
    except BaseException:
        lock_file.close()
        raise
    lock_file.close()
    return None


def _unit_object(root: str, compiler: list[str], flags: list[str], text: str):
    """(path, lock) of the object file of one unit, from the unit cache
    (`<root>/units/<key[:2]>/<key>.o`, with its C beside it and its hash after it), compiled
    once across processes; the lock, a shared hold on the unit, keeps `jdisc cache clear` from
    removing the object until the caller has linked it and closes the lock."""
    key = _cache_key(text, compiler, flags)
    obj, sha, c_path, lock_path = _unit_files(root, key)
    lock_file = open(lock_path, "a+b")
    try:
        # Shared to read a valid object: a compile holds its units shared until it has linked
        # them, so one that waited here for exclusive use while holding others could deadlock
        # with another compile of units in common. Exclusive only to build a missing one (its
        # holder waits for nothing else meanwhile).
        fcntl.flock(lock_file, fcntl.LOCK_SH)
        if _entry_valid(obj, sha):
            return obj, lock_file
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not _entry_valid(obj, sha):
            _write_atomic(c_path, text)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(obj), prefix=key + ".",
                                       suffix=".o.tmp")
            os.close(fd)
            try:
                _run_compiler([*compiler, *flags, c_path, "-o", tmp], compiler, c_path)
                digest = _file_sha256(tmp)
                os.replace(tmp, obj)
            finally:
                _unlink(tmp)
            _write_atomic(sha, digest + "\n")
        fcntl.flock(lock_file, fcntl.LOCK_SH)
        return obj, lock_file
    except BaseException:
        lock_file.close()
        raise


def _publish(root: str, key: str, text: str, obj: str) -> None:
    """Make the bundle object `obj` the unit cache's entry for the kernel unit `key` (`text`),
    as a hard link, so that another program with this kernel finds it. Skipped when another
    compile holds the entry (it is being built or used) or the file system has no hard links:
    the kernel then compiles again in the next program that has it."""
    kobj, ksha, c_path, lock_path = _unit_files(root, key)
    with open(lock_path, "a+b") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        if _entry_valid(kobj, ksha):
            return
        tmp = f"{kobj}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(obj + ".sha256", encoding="utf-8") as f:
                digest = f.read()
            _write_atomic(c_path, text)
            os.link(obj, tmp)
            os.replace(tmp, kobj)
            _write_atomic(ksha, digest)
        except OSError:
            pass
        finally:
            _unlink(tmp)


# A bundle's kernels' bodies add up to about this many characters (a kernel longer than it
# compiles alone): a C compiler's start and jdisc's headers cost 12-16 ms per unit, about
# what 2-3 KB of kernel code costs (a bundle of 22 small kernels compiled in a third of their
# time as units: benchmarks/compile_time.py)
BUNDLE_CHARS = 12_000


def _bundles(sizes: dict[int, int]) -> list[list[int]]:
    """The units (index -> body length) in groups, each compiled as one: first fit, longest
    first, up to BUNDLE_CHARS a group."""
    groups: list[list[int]] = []
    room: list[int] = []
    for i in sorted(sizes, key=lambda i: (-sizes[i], i)):
        for g, left in enumerate(room):
            if sizes[i] <= left:
                groups[g].append(i)
                room[g] -= sizes[i]
                break
        else:
            groups.append([i])
            room.append(BUNDLE_CHARS - sizes[i])
    return groups


def _build(root: str, compiler: list[str], flags: list[str], units: list[tuple[str, str]]):
    """(path, lock) of the object of one unit, or of a bundle of kernel units (each then
    published under its own key); `units` are (key, text) pairs."""
    if len(units) == 1:
        return _unit_object(root, compiler, flags, units[0][1])
    bundle = units_c.bundle([units_c.body(text) for _, text in units])
    held = _unit_object(root, compiler, flags, bundle)
    for key, text in units:
        _publish(root, key, text, held[0])
    return held


def _link_once(held: list) -> list[str]:
    """The objects to link, each file once (a bundle may serve several units)."""
    seen, out = set(), []
    for obj, _ in held:
        st = os.stat(obj)
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(obj)
    return out


def _compile(compiler: list[str], cflags: list[str], ldflags: list[str], c_path: str,
             so_path: str, sha_path: str, sanitize: bool, root: str) -> None:
    """Compile the program's units (lowering/units.py) through the unit cache: those not in
    it in parallel, the short kernels among them in bundles; link them into a temp file beside
    `so_path`, then move it into place and record its hash."""
    with open(c_path, encoding="utf-8") as f:
        units = split(f.read())
    held, jobs, small = [], [], {}  # small: flags -> short kernels' (key, text, body length)
    try:
        for name, opt, text in units:
            flags = _unit_flags(cflags, opt, sanitize)
            key = _cache_key(text, compiler, flags)
            hit = _cached_object(root, key)
            if hit is not None:
                held.append(hit)
            elif (body := units_c.body(text)) is not None and len(body) < BUNDLE_CHARS:
                small.setdefault(tuple(flags), []).append((key, text, len(body)))
            else:
                jobs.append((units_c.compile_cost(name, opt, text), flags, [(key, text)]))
        for flags, kernels in small.items():
            for members in _bundles({i: k[2] for i, k in enumerate(kernels)}):
                cost = units_c.bundle_cost([kernels[i][1] for i in members])
                jobs.append((cost, list(flags), [kernels[i][:2] for i in members]))
        _report([j[0] for j in jobs])
        error = None
        if jobs:
            with ThreadPoolExecutor(min(len(jobs), compile_jobs())) as pool:
                # the longest first: the compile ends when its slowest worker does
                by_cost = sorted(jobs, key=lambda j: -j[0])
                futures = [pool.submit(_build, root, compiler, *j[1:]) for j in by_cost]
                for f in futures:       # every future is waited for, and every lock kept
                    try:
                        held.append(f.result())
                    except BaseException as e:
                        error = e
        if error is not None:
            if isinstance(error, CompileError):
                raise CompileError(f"{error}\nthe program's C file: {c_path}") from None
            raise error
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(so_path), prefix="lib.so.",
                                   suffix=".tmp")
        os.close(fd)
        try:
            _link(compiler, [*_link_flags(cflags), *_link_once(held), "-o", tmp, *ldflags],
                  c_path)
            digest = _file_sha256(tmp)
            os.replace(tmp, so_path)
        finally:
            _unlink(tmp)
    finally:
        for h in held:
            h[1].close()
    _write_atomic(sha_path, digest + "\n")


_started: set = set()


def start_runtime_unit(sanitize: bool | None = None) -> None:
    """Compile the runtime unit, the same in every program, in a background thread (once per
    cache directory and process), so that a compile that begins with an empty cache finds it
    built by the time its own units are: it overlaps the export and the passes. What it costs
    is off the first call's path; a failure here is left to that compile to report."""
    if sanitize is None:
        sanitize = os.environ.get("JDISC_SANITIZE", "") not in ("", "0")
    root = cache_dir()
    with _memo_lock:
        if (root, sanitize) in _started:
            return
        _started.add((root, sanitize))

    def build_it():
        try:
            cflags, _ = _flag_parts(sanitize)
            name, opt, text = split(runtime_unit())[0]
            _unit_object(root, compiler_command(), _unit_flags(cflags, opt, sanitize),
                         text)[1].close()
        except Exception:       # noqa: BLE001 - the compile that needs it reports it
            pass
    threading.Thread(target=build_it, name="jdisc-runtime-unit", daemon=True).start()


# compiler command -> the linker flag its links take in this process: "-fuse-ld=gold" once a
# link with it worked, "" once one failed where the default linker's worked
_linkers: dict[tuple[str, ...], str] = {}


def _link(compiler: list[str], args: list[str], c_path: str) -> None:
    """Link a program's objects (`args`: flags, objects, output) with GNU gold where the
    compiler finds it, else with its default linker. gold links a program's library in about
    half of ld.bfd's time (16-18 ms against 30-38 ms on the benchmarks' programs, a tenth of a
    small program's compile: CHANGELOG.md). A failed gold link is tried again with the default
    linker, whose error (if it fails too) is the one raised; gold is then not tried again in
    this process unless the default linker's link failed as well."""
    key = tuple(compiler)
    with _memo_lock:
        choice = _linkers.get(key, "-fuse-ld=gold")
    if choice:
        try:
            _run_compiler([*compiler, choice, *args], compiler, c_path)
            with _memo_lock:
                _linkers[key] = choice
            return
        except CompileError:
            pass
    _run_compiler([*compiler, *args], compiler, c_path)
    with _memo_lock:
        _linkers[key] = ""


def _link_flags(cflags: list[str]) -> list[str]:
    """The compile flags that matter when linking (-shared, -fPIC, -march, sanitizers)."""
    out, skip = [], False
    for f in cflags:
        if skip:
            skip = False
        elif f == "-I":
            skip = True
        elif not f.startswith(("-O", "-I", "-W", "-std")):
            out.append(f)
    return out


def compile_jobs() -> int:
    """How many units compile at once: `JDISC_CC_JOBS`, else the CPUs this process may use."""
    env = os.environ.get("JDISC_CC_JOBS", "")
    if env.strip().isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
                t0 = time.perf_counter()
                if not hit:
                    _compile(compiler, cflags, ldflags, c_path, so_path, sha_path, sanitize,
                             root)
                cc_seconds = time.perf_counter() - t0 if not hit else 0.0
                handle = _load(so_path, sanitize)
                mapped = _map_data(data_path) if data else None
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
        if mapped is not None:
            mapped = bind_data(handle, mapped, so_path)

        lib = Library(path=so_path, key=key, cache_hit=hit, c_path=c_path, handle=handle,
                      data=mapped, cc_seconds=cc_seconds)
        with _memo_lock:
            # Later builds of the same source in this process reuse this handle, as a hit.
            _memory[mem_key] = dataclasses.replace(lib, cache_hit=True, cc_seconds=0.0)
        return lib
