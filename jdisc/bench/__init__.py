"""Dynamic-shape stream benchmark: jdisc (one compile for all shapes) against jax.jit (XLA,
one compile per shape) on the built-in workloads W1..W4 (and W5, W6, W7 on request).

    jdisc bench [--workloads W1,W2,W3,W4] [--shapes 30] [--repeats 7] [--quick]
                [--json OUT.json] [--plot OUT.png] [--seed N]
    (or python benchmarks/stream.py with the same options)

For each workload and each of `--shapes` distinct (B, S) shapes (B in 1..8, S in 16..512, drawn
by a seeded generator in turn from four classes: small, odd, prime and large sizes; the default
seed comes from jdisc's version, so every release measures shapes nobody tuned for; W3 uses
N = B*S) it measures XLA's compile time (`lower().compile()`), and the steady-state time of
jdisc and of XLA's executable, interleaved call by call in this process (medians of
`--repeats`, after WARM_CALLS calls of each). After those calls it times a baseline:
for W2 (memory-bound) a `np.copyto` between two preallocated float32 buffers of (input + output
bytes) / 2 each, so memcpy, jdisc and XLA all move the same bytes (GB/s = input + output bytes /
time); for W1 and W3 (GEMM-bound) the bare sgemm calls one forward pass makes, through the
OpenBLAS jdisc links (scipy_openblas32, ctypes) with OpenBLAS's own threads (as many as jdisc
may use), each on its own preallocated random operands (GFLOP/s = the workload's flops / time for all three). It
also reports jdisc's kernels by kind and times a stream that visits every shape twice in a
shuffled order, each side starting cold (jdisc as users get it: its first call bridged by
jax.jit while it compiles, jdisc.bridge). Progress goes to stderr, tables to stdout; `--plot`
draws latency against shape (needs matplotlib: `pip install 'jdisc[plot]'`). Every compile goes
to a fresh cache directory under a temporary directory (so it is cold), never to the user's
cache. W7 is a decoder's generation loop with a growing KV cache, against a padded jax.jit
loop and jax.jit per length (bench/decode.py): its own table, end to end and steady.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import datetime
import functools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jaxlib
import numpy as np

import jdisc
from jdisc.bench import workloads
from jdisc.bench.decode import print_decode, run_decode
from jdisc.bench.plot import check_matplotlib, plot_latency
from jdisc.bench.workloads import BenchError, Workload, shape_label
from jdisc.custom_calls import runtime

GEMM_WORKLOADS = ("W1", "W3")    # baseline: bare sgemm calls
MEMORY_WORKLOADS = ("W2",)          # baseline: memcpy of the workload's input + output bytes
QUICK = {"shapes": 4, "repeats": 3, "max_tokens": 1024}
DECODE = "W7"    # the decode loop (bench/decode.py): a loop of steps, not a stream of shapes
DECODE_STEPS = {"full": (16, 128, 2), "quick": (16, 32, 1)}   # prompt, new tokens, repeats


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


_TMP: list[tempfile.TemporaryDirectory] = []    # made on first use, removed at exit


# A user's earlier program, run in a cache directory before a "new program" is timed in it: an
# elementwise chain, a float32 matmul and a float32 convolution, which leave the runtime unit,
# the compiler probes' verdict, the skinny GEMM unit and the conv unit (lowering/units.py) in
# the cache, as every program after a user's first with a matmul and a convolution finds them
# (benchmarks/compile_time.py, first_call.py). The convolution since 2026-12-07, when
# convolutions moved from a unit each to the conv unit: before, no unit of it was reused.
EARLIER_PROGRAM = r"""
import numpy as np, jdisc
jdisc.jit(lambda x, w: (x * 2 + 1) @ w, dynamic_axes=({0: "n"}, None),
          bridge=False)(np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))
import jax
jdisc.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC")),
          dynamic_axes=({0: "n"}, None), bridge=False)(np.ones((1, 5, 5, 2), np.float32),
                                                       np.ones((3, 3, 2, 4), np.float32))
"""


def fresh_cache_dir(tag: str) -> str:
    """Point jdisc at a new, empty cache directory so that its next compile is cold."""
    if not _TMP:
        _TMP.append(tempfile.TemporaryDirectory(prefix="jdisc-bench-"))
    path = tempfile.mkdtemp(prefix=f"{tag}-", dir=_TMP[0].name)
    os.environ["JDISC_CACHE_DIR"] = path
    return path


_PRIMES = [p for p in range(17, 513) if all(p % q for q in range(2, int(p ** 0.5) + 1))]


def _draw_shape(rng: np.random.Generator, kind: int) -> tuple[int, int]:
    """One (B, S) of a class: 0 small, 1 odd, 2 prime, 3 large."""
    if kind == 0:
        return int(rng.integers(1, 4)), int(rng.integers(16, 41))
    if kind == 1:
        return int(rng.integers(1, 9)), int(rng.integers(8, 256)) * 2 + 1
    if kind == 2:
        return int(rng.integers(1, 9)), int(rng.choice(_PRIMES))
    return int(rng.integers(5, 9)), int(rng.integers(384, 513))


def draw_shapes(n: int, seed: int, max_tokens: int | None) -> list[tuple[int, int]]:
    """`n` distinct (B, S) pairs, B in 1..8 and S in 16..512, drawn in turn from the small, odd,
    prime and large classes (the large ones where `max_tokens`, a bound on B*S, admits them);
    sorted by B*S so the table reads from small to large."""
    rng = np.random.default_rng(seed)
    shapes: list[tuple[int, int]] = []
    tries = 0
    while len(shapes) < n:
        kind = tries % 4
        tries += 1
        b, s = _draw_shape(rng, kind)
        if (b, s) not in shapes and (max_tokens is None or b * s <= max_tokens):
            shapes.append((b, s))
        elif tries > 1000 * n:
            raise BenchError(f"cannot draw {n} distinct shapes with B*S <= {max_tokens}")
    return sorted(shapes, key=lambda bs: (bs[0] * bs[1], bs))


def release_seed() -> int:
    """The default shape seed: a function of jdisc's version, new in every release."""
    import hashlib
    return int(hashlib.sha256(jdisc.__version__.encode()).hexdigest()[:8], 16) % 100000


def machine_info() -> dict:
    """What the numbers were measured on."""
    model, isa = "unknown", None
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")),
                     model)
        # the widest vectors the kernels may use (-march=native): machines of one name differ
        flags = set(next((ln.split(":", 1)[1].split() for ln in lines
                          if ln.startswith(("flags", "Features"))), []))
        isa = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"),
                                            ("avx", "AVX"), ("sse2", "SSE2"), ("asimd", "NEON"))
                    if flag in flags), None)
    except OSError:
        pass
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith("OPENBLAS") or k in ("OMP_NUM_THREADS", "XLA_FLAGS")}
    return {"cpu": model, "isa": isa, "cores": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "jdisc": jdisc.__version__,
            "env": env, "date": datetime.datetime.now().isoformat(timespec="seconds")}


def machine_line(m: dict) -> str:
    """The first line of a benchmark's output: what `machine_info` found."""
    isa = f" ({m['isa']})" if m.get("isa") else ""
    return (f"machine: {m['cpu']}{isa}, {m['cores']} cores; python {m['python']}, jax {m['jax']}, "
            f"jaxlib {m['jaxlib']}, jdisc {m['jdisc']}; {m['date']}"
            + "".join(f"; {k}={v}" for k, v in m["env"].items()))


def print_result_files(paths: list[str], print_table) -> None:
    """The tables of small benchmark scripts' result files (`--table`): each file's machine,
    load before and after, and its rows through the script's own `print_table`."""
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        load = [[round(v, 2) for v in d[k]] for k in ("load_before", "load_after")]
        print(f"{path}: {d['machine']}; load {load[0]} -> {load[1]}; medians of {d['repeats']}")
        print_table(d["rows"])


def timed(fn, args) -> tuple[float, object]:
    """Wall seconds of `fn(*args)` including `block_until_ready` on its outputs."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0, out


def median_ms(fn, args, repeats: int) -> float:
    """Median milliseconds of `repeats` calls of `fn(*args)` (timed)."""
    return 1e3 * statistics.median(timed(fn, args)[0] for _ in range(repeats))


def time_cells(jf, xf, args, repeats: int) -> str:
    """A Markdown table's last cells: jdisc's and jax.jit's median ms and their ratio."""
    tj, tx = median_ms(jf, args, repeats), median_ms(xf, args, repeats)
    return f"{tj:.3f} | {tx:.3f} | {tj / tx:.2f} |"


def max_abs_diff(a, b) -> float:
    """Largest absolute difference between two output pytrees."""
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


# ------------------------------------------------------------------------------- baselines

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112      # CBLAS enum values


def load_blas() -> ctypes.CDLL:
    """The OpenBLAS jdisc's kernels link (`scipy_openblas32`, 32-bit blasint), checked once
    against numpy so that a wrong binding fails loudly."""
    import scipy_openblas32
    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(),
                                   scipy_openblas32.get_library(fullname=True)))
    e, i, f, p = ctypes.c_int, ctypes.c_int32, ctypes.c_float, ctypes.c_void_p
    lib.scipy_cblas_sgemm.argtypes = [e, e, e, i, i, i, f, p, i, p, i, f, p, i]
    lib.scipy_cblas_sgemm_batch_strided.argtypes = [e, e, e, i, i, i, f, p, i, i, p, i, i, f, p,
                                                    i, i, i]
    lib.scipy_cblas_sgemm.restype = lib.scipy_cblas_sgemm_batch_strided.restype = None
    calls, ops = sgemm_calls(lib, [(1, 5, 7, 4, False), (3, 5, 7, 4, True)])
    for call, (a, b, c), tb in zip(calls, ops, (False, True)):
        call()
        if not np.allclose(c, a @ (b.transpose(0, 2, 1) if tb else b), atol=1e-4):
            raise RuntimeError("sgemm through ctypes disagrees with numpy")
    return lib


def gemm_list(name: str, b: int, s: int) -> list[tuple[int, int, int, int, bool]]:
    """(batch, M, N, K, B transposed) of each GEMM one forward pass of W1 or W3 makes."""
    if name == "W3":
        return [(1, b * s, 2048, 512, False), (1, b * s, 512, 2048, False)]
    proj = (1, b * s, 768, 768, False)                        # Q, K, V; later O
    return [proj] * 3 + [(b * 12, s, s, 64, True),            # scores Q K^T per (b, head)
                         (b * 12, s, 64, s, False), proj,     # context P V, then O
                         (1, b * s, 3072, 768, False), (1, b * s, 768, 3072, False)]


def sgemm_calls(lib, gemms) -> tuple[list, list]:
    """No-argument calls of sgemm (sgemm_batch_strided when batched, as jdisc does) for each
    (nb, M, N, K, B transposed), on fresh random row-major operands A[nb,M,K], B[nb,K,N] or
    [nb,N,K], C[nb,M,N]; and those operands (keep them alive while calling)."""
    rng, calls, ops = np.random.default_rng(0), [], []
    for nb, m, n, k, tb in gemms:
        a = rng.standard_normal((nb, m, k), dtype=np.float32)
        b = rng.standard_normal((nb, n, k) if tb else (nb, k, n), dtype=np.float32)
        c = np.zeros((nb, m, n), np.float32)
        ldb, pa, pb, pc = k if tb else n, a.ctypes.data, b.ctypes.data, c.ctypes.data
        head = (ROW_MAJOR, NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, 1.0)
        calls.append(functools.partial(lib.scipy_cblas_sgemm, *head, pa, k, pb, ldb, 0.0, pc, n)
                     if nb == 1 else functools.partial(
                         lib.scipy_cblas_sgemm_batch_strided, *head, pa, k, m * k, pb, ldb,
                         k * n, 0.0, pc, n, m * n, nb))
        ops.append((a, b, c))
    return calls, ops


def make_baseline(wl: Workload, b: int, s: int, nbytes: int, blas) -> tuple:
    """(kind, a no-argument function to time, its work): bare sgemm calls and their flops for a
    GEMM workload, a memcpy and the bytes it moves for a memory-bound one, else Nones."""
    if wl.name in GEMM_WORKLOADS:
        gemms = gemm_list(wl.name, b, s)
        flops = sum(2.0 * nb * m * n * k for nb, m, n, k, _ in gemms)
        assert math.isclose(flops, wl.flops(b, s)), (flops, wl.flops(b, s))
        calls, ops = sgemm_calls(blas, gemms)

        threads = runtime.num_threads()

        def run(calls=calls, ops=ops):
            blas.scipy_openblas_set_num_threads(threads)   # OpenBLAS's own threading; jdisc
            for call in calls:                              # sets 1 again on its next GEMM
                call()
        return "sgemm", run, flops
    if wl.name in MEMORY_WORKLOADS:
        src = np.random.default_rng(0).standard_normal(max(nbytes // 8, 1), dtype=np.float32)
        dst = np.zeros_like(src)
        return "memcpy", (lambda: np.copyto(dst, src)), 2 * src.nbytes
    return None, None, None


def nbytes_of(*trees) -> int:
    return sum(int(np.asarray(x).nbytes) for t in trees for x in jax.tree_util.tree_leaves(t))


def warm_up() -> dict:
    """Pay once-per-process costs (backend start, lazy imports, jdisc's first C compile, the
    eager path's extension, built in the background on first use) on a throwaway function, so
    no workload's compile or call time carries them; returns their seconds."""
    from jdisc.custom_calls import eager
    x = jax.device_put(np.ones((2, 4), np.float32))
    xla_s, _ = timed(jax.jit(lambda v: v * 2.0 + 1.0), (x,))
    fresh_cache_dir("warmup")
    t0 = time.perf_counter()
    jdisc_s, _ = timed(jdisc.jit(lambda v: v * 2.0 + 1.0, dynamic_axes=({0: "n"},),
                                 bridge=False), (x,))
    eager.module(wait=True)
    return {"xla_s": xla_s, "jdisc_s": jdisc_s, "eager_path_s": time.perf_counter() - t0}


def run_stream(wl: Workload, args: list, order: list[int]) -> dict:
    """Time a cold stream over `order` for a fresh jdisc wrapper (new cache dir, so its single
    compile counts) and a fresh jax.jit (in-memory jax caches cleared, so every new shape
    compiles)."""
    jax.clear_caches()
    fresh_cache_dir(f"{wl.name}-stream")
    jf = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes)     # as users get it: the bridge on
    jdisc_s, jdisc_first_s = _timed_stream(jf, args, order)
    jax.clear_caches()
    xla_s, xla_first_s = _timed_stream(jax.jit(wl.fn), args, order)
    return {"calls": len(order), "jdisc_s": jdisc_s, "xla_s": xla_s, "ratio": jdisc_s / xla_s,
            "jdisc_first_s": jdisc_first_s, "xla_first_s": xla_first_s,
            "jdisc_compiles": jf.stats()["compiles"]}


def _timed_stream(fn, args: list, order: list[int]) -> tuple[float, float]:
    """(seconds for the calls of `order`, seconds for the first of them)."""
    t0 = time.perf_counter()
    first = None
    for i in order:
        jax.block_until_ready(fn(*args[i]))
        first = time.perf_counter() - t0 if first is None else first
    return time.perf_counter() - t0, first


# Calls of each side at a shape before its timed repeats: right after a compile, W3's 3rd to
# 5th calls at N = 31 took 1.6-2.2x its later ones (its pool's threads starting, buffers first
# touched), and XLA's varied as much.
WARM_CALLS = 3


def bench_workload(wl: Workload, shapes: list[tuple[int, int]], repeats: int, seed: int,
                   blas) -> dict:
    """All measurements for one workload; see the module docstring."""
    args = [jax.device_put(wl.make_args(b, s, np.random.default_rng(seed))) for b, s in shapes]
    fresh_cache_dir(wl.name)
    jf = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes, bridge=False)   # the compile, timed
    log(f"[{wl.name}] jdisc compile (first call at B={shapes[0][0]} S={shapes[0][1]})")
    jdisc_compile_s, _ = timed(jf, args[0])
    rows = []
    for n, ((b, s), a) in enumerate(zip(shapes, args)):
        log(f"[{wl.name} {n + 1}/{len(shapes)}] B={b} S={s}: xla compile, then {repeats} "
            f"interleaved repeats")
        t0 = time.perf_counter()
        xc = jax.jit(wl.fn).lower(*a).compile()
        xla_compile_s = time.perf_counter() - t0
        for _ in range(WARM_CALLS):             # warm-up calls of each, in turn
            _, out_j = timed(jf, a)
            _, out_x = timed(xc, a)
        err = max_abs_diff(out_j, out_x)
        if not err <= 1e-3:
            log(f"[{wl.name}] WARNING: B={b} S={s}: jdisc and XLA outputs differ by {err:.3g}")
        io_bytes = nbytes_of(a, out_j)          # inputs (params too) read, outputs written
        base, base_fn, base_work = make_baseline(wl, b, s, io_bytes, blas)
        tj, tx, tb = [], [], []
        LOAD_SAMPLES.append(runnable_others())
        for _ in range(repeats):                # jdisc and XLA in turn
            tj.append(timed(jf, a)[0])
            tx.append(timed(xc, a)[0])
        # then the baseline, no longer in turn with them (until 2026-12-06): the sgemm baseline
        # runs on OpenBLAS's own threads, which spin on both cores for a while after each call;
        # called between them, it made W3 at N = 31 take 1.30-1.45 ms in jdisc instead of
        # 0.86-0.93, and 1.8-1.9 in XLA instead of 1.2-1.6
        if base_fn:
            base_fn()                           # warm-up: first touch of its buffers
            tb = [timed(base_fn, ())[0] for _ in range(repeats)]
        jms, xms = 1e3 * statistics.median(tj), 1e3 * statistics.median(tx)
        flops = wl.flops(b, s)
        row = {"B": b, "S": s, "jdisc_ms": jms, "xla_ms": xms, "ratio": jms / xms,
               "xla_compile_s": xla_compile_s, "max_abs_diff": err, "io_bytes": io_bytes,
               "jdisc_gflops": flops / jms / 1e6 if flops else None,
               "xla_gflops": flops / xms / 1e6 if flops else None,
               "jdisc_ms_all": [1e3 * t for t in tj], "xla_ms_all": [1e3 * t for t in tx]}
        if base:                                # memcpy_gbs or sgemm_gflops, and time ratios
            bms = 1e3 * statistics.median(tb)
            row.update({f"{base}_ms": bms, f"{base}_ms_all": [1e3 * t for t in tb],
                        f"{base}_{'gbs' if base == 'memcpy' else 'gflops'}": base_work / bms / 1e6,
                        f"jdisc_over_{base}": jms / bms, f"xla_over_{base}": xms / bms})
        if base == "memcpy":
            row.update(memcpy_bytes=base_work, jdisc_gbs=io_bytes / jms / 1e6,
                       xla_gbs=io_bytes / xms / 1e6)
        rows.append(row)
    compiles = jf.stats()["compiles"]
    kinds = dict(collections.Counter(       # jdisc's kernels by kind (loop, dot, ...), most first
        k.kind for k in jf.compiled_for(*args[0]).program.kernels).most_common())
    order = [int(i) for i in np.random.default_rng(seed).permutation(2 * len(shapes))
             % len(shapes)]
    log(f"[{wl.name}] stream of {len(order)} calls (each shape twice), jdisc then XLA, cold")
    return {"description": wl.description, "jdisc_compile_s": jdisc_compile_s,
            "jdisc_compile_seconds_stat": jf.stats()["compile_seconds"],
            "jdisc_compiles": compiles, "kernels": sum(kinds.values()), "kernel_kinds": kinds,
            "rows": rows, "geomean_ratio": geomean(r["ratio"] for r in rows),
            "stream": run_stream(wl, args, order)}


LOAD_SAMPLES: list[int] = []     # other runnable tasks, sampled before each shape's timing


def runnable_others() -> int:
    """Runnable tasks on the machine besides this process's running thread (the kernel's
    count in /proc/loadavg), or 0 where that is unknown."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, running - 1)


def verdict(results: dict, busy: int, samples: list[int], decode: dict | None = None) -> list[str]:
    """The closing lines: how many shapes jdisc was faster on, the compile counts, the decode
    loop's ratios, and a warning when other processes were running while it measured."""
    rows = [r for res in results.values() for r in res["rows"]]
    faster = sum(r["ratio"] < 1 for r in rows)
    compiles = sum(res["jdisc_compiles"] for res in results.values())
    streams = sum(res["stream"]["ratio"] < 1 for res in results.values())
    lines = [f"verdict: jdisc faster than XLA on {faster} of {len(rows)} shapes in steady state "
             f"(slower on {len(rows) - faster}); {compiles} jdisc compile(s) for "
             f"{len(results)} workload(s) against {len(rows)} XLA compiles; the cold stream "
             f"faster on {streams} of {len(results)} workload(s)"] if results else []
    if decode:
        jd, pad = decode["rows"]["jdisc"], decode["rows"]["padded"]
        lines.append(f"verdict: {DECODE} decode loop, jdisc / padded jax.jit: end to end "
                     f"{jd['end_to_end'] / pad['end_to_end']:.2f}, steady "
                     f"{jd['steady'] / pad['steady']:.2f}")
    others = statistics.median(samples) - busy if samples else 0
    if others >= 1:
        lines.append(f"warning: the machine was busy while this measured (a median of "
                     f"{others:g} other runnable process(es){' besides the --busy ones' if busy else ''}"
                     f"): the ratios include that load; rerun on a quiet machine to compare")
    return lines


def geomean(xs) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def print_table(name: str, res: dict) -> None:
    """The per-workload table and summary lines, on stdout."""
    gemm, mem = "sgemm_ms" in res["rows"][0], "memcpy_ms" in res["rows"][0]
    cols = ["shape", "jdisc ms", "xla ms", "ratio", "xla compile s"]
    cols += ["jdisc GFLOP/s", "xla GFLOP/s", "sgemm GFLOP/s", "jdisc/sgemm"] if gemm else []
    cols += ["jdisc GB/s", "xla GB/s", "memcpy GB/s"] if mem else []
    widths = [max(len(c), 10) for c in cols]
    print(f"\n{name}: {res['description']}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in res["rows"]:
        cells = [shape_label(name, r["B"], r["S"]), f"{r['jdisc_ms']:.3f}", f"{r['xla_ms']:.3f}",
                 f"{r['ratio']:.2f}", f"{r['xla_compile_s']:.3f}"]
        cells += [f"{r[k]:.1f}" for k in ("jdisc_gflops", "xla_gflops", "sgemm_gflops")
                  ] + [f"{r['jdisc_over_sgemm']:.2f}"] if gemm else []
        cells += [f"{r[k]:.1f}" for k in ("jdisc_gbs", "xla_gbs", "memcpy_gbs")] if mem else []
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    st = res["stream"]
    xla_compile_total = sum(r["xla_compile_s"] for r in res["rows"])
    print(f"  jdisc compile s (one, cold cache, incl. C compiler): {res['jdisc_compile_s']:.3f}"
          f"   compiles: {res['jdisc_compiles']}")
    print(f"  xla compile s (lower+compile), sum over {len(res['rows'])} shapes: "
          f"{xla_compile_total:.3f}")
    kinds = ", ".join(f"{n} {k}" for k, n in res["kernel_kinds"].items())
    print(f"  jdisc kernels: {res['kernels']} ({kinds})")
    base = "sgemm" if gemm else "memcpy" if mem else None
    worst = max(res["rows"], key=lambda r: r["ratio"])
    print(f"  worst shape (steady state): {shape_label(name, worst['B'], worst['S'])} "
          f"ratio {worst['ratio']:.2f}")
    print(f"  geomean time ratio (steady state): jdisc/xla {res['geomean_ratio']:.2f}" + "".join(
        f"   {w}/{base} {geomean(r[f'{w}_over_{base}'] for r in res['rows']):.2f}"
        for w in ("jdisc", "xla") if base))
    print(f"  stream of {st['calls']} calls (each shape twice, cold): jdisc s {st['jdisc_s']:.3f}"
          f"   xla s {st['xla_s']:.3f}   ratio {st['ratio']:.2f}"
          f"   (jdisc compiles {st['jdisc_compiles']})")
    if "jdisc_first_s" in st:       # result files from before 2026-12-05 lack it
        print(f"  its first call (cold; jdisc's served by jax.jit while it compiles): jdisc s "
              f"{st['jdisc_first_s']:.3f}   xla s {st['xla_first_s']:.3f}   ratio "
              f"{st['jdisc_first_s'] / st['xla_first_s']:.2f}")


def add_run_arguments(p: argparse.ArgumentParser, shapes: str, quick: str,
                      default_shapes: int = 30) -> None:
    """--shapes, --repeats, --quick, --json, --seed (benchmarks/control_flow.py has them too)."""
    p.add_argument("--shapes", type=int,
                   help=f"distinct {shapes} shapes (default {default_shapes}; quick 4)")
    p.add_argument("--repeats", type=int, help="timed calls per measurement (default 7; quick 3)")
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", metavar="OUT.json", help="write every number here")
    p.add_argument("--seed", type=int, default=None,
                   help="the shapes' seed (default: from jdisc's version, new each release)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workloads", default="W1,W2,W3,W4",
                   help="comma-separated, e.g. W1,W3; W5, W6 and W7 (the decode loop) on request")
    add_run_arguments(p, "(B, S)", f"the README's main job: {QUICK['shapes']} shapes, "
                                   f"{QUICK['repeats']} repeats, B*S <= {QUICK['max_tokens']}")
    p.add_argument("--plot", metavar="OUT.png",
                   help="draw latency against shape for jdisc and XLA (needs matplotlib)")
    p.add_argument("--busy", type=int, default=0, metavar="N",
                   help="run N busy-loop processes while timing (a neighbour-loaded machine)")


BUSY_LIMIT_S = 3600      # a busy process ends itself after this, whatever happens to its parent


@contextlib.contextmanager
def busy_neighbours(n: int):
    """N CPU-bound processes (`while True: pass` in a fresh Python) for the duration of the
    block, as on a server whose other processes are busy; ended afterwards (and bounded to
    BUSY_LIMIT_S each, should this process die first)."""
    code = f"import time\nend = time.monotonic() + {BUSY_LIMIT_S}\nwhile time.monotonic() < end: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
             for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run(opts: argparse.Namespace) -> None:
    """The benchmark for parsed options; BenchError on bad ones (before anything runs)."""
    n_shapes = opts.shapes if opts.shapes is not None else QUICK["shapes"] if opts.quick else 30
    if opts.seed is None:
        opts.seed = release_seed()
    repeats = opts.repeats if opts.repeats is not None else QUICK["repeats"] if opts.quick else 7
    if n_shapes < 1 or repeats < 1:
        raise BenchError(f"--shapes and --repeats must be at least 1 (got {n_shapes}, {repeats})")
    if n_shapes > 100:
        raise BenchError(f"--shapes {n_shapes}: at most 100 distinct shapes")
    busy = getattr(opts, "busy", 0) or 0
    if not 0 <= busy <= 64:
        raise BenchError(f"--busy {busy}: between 0 and 64 busy processes")
    max_tokens = QUICK["max_tokens"] if opts.quick else None
    all_wl = workloads.workloads()
    names = [n.strip() for n in opts.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in all_wl and n != DECODE]
    if unknown or not names:
        raise BenchError(f"unknown workload(s) {unknown or opts.workloads!r}; choose from "
                         f"{sorted(all_wl) + [DECODE]}")
    decode, names = DECODE in names, [n for n in names if n != DECODE]
    if opts.plot and not names:
        raise BenchError(f"--plot draws the shape workloads' latency; {DECODE} has none")
    if opts.plot:
        check_matplotlib()
    shapes = draw_shapes(n_shapes, opts.seed, max_tokens)
    machine = machine_info()
    t_start = time.perf_counter()
    log("warm-up: a throwaway function through jax.jit and jdisc.jit")
    warmup = warm_up()
    blas = load_blas() if any(n in GEMM_WORKLOADS for n in names) else None
    results = {}
    LOAD_SAMPLES.clear()
    if busy:
        log(f"{busy} busy-loop process(es) run while timing")
    with busy_neighbours(busy):
        for k, name in enumerate(names):
            log(f"== workload {name} ({k + 1}/{len(names)}): {all_wl[name].description}, "
                f"{len(shapes)} shape(s)")
            results[name] = bench_workload(all_wl[name], shapes, repeats, opts.seed, blas)
        if decode:
            prompt, new, runs = DECODE_STEPS["quick" if opts.quick else "full"]
            log(f"== workload {DECODE}: a decoder's generation loop, {prompt} + {new} steps, "
                f"{runs} run(s) per side")
            LOAD_SAMPLES.append(runnable_others())
            decode = run_decode(prompt, new, runs, lambda: fresh_cache_dir(DECODE), log)
            LOAD_SAMPLES.append(runnable_others())
    m = machine
    print(machine_line(m) + (f"; {busy} busy-loop neighbour process(es) while timing"
                             if busy else ""))
    if names:
        print(f"shapes (B x S, seed {opts.seed}): {shapes}; {repeats} interleaved repeats, "
              f"medians; "
              f"ratio = jdisc / xla (lower is better for jdisc); XLA compile = "
              f"jax.jit(fn).lower(*args).compile(); once-per-process start-up costs paid by a "
              f"throwaway warm-up first")
        print("baselines, timed after the calls above at each shape: W2 memcpy = np.copyto between "
              "two preallocated float32 buffers of (in+out bytes)/2 each, GB/s = (in+out "
              "bytes) / time; W1/W3 sgemm = the forward pass's GEMMs as bare "
              "scipy_cblas_sgemm(_batch_strided) calls, GFLOP/s = workload flops / time; "
              "jdisc/sgemm = time ratio")
    for name, res in results.items():
        print_table(name, res)
    if decode:
        print()
        print_decode(decode)
    print()
    for line in verdict(results, busy, LOAD_SAMPLES, decode or None):
        print(line)
    wall = time.perf_counter() - t_start
    log(f"done in {wall:.1f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": machine, "busy": busy, "load_samples": LOAD_SAMPLES,
                       "seed": opts.seed, "shapes": shapes,
                       "repeats": repeats, "quick": opts.quick, "wall_s": wall, "warmup": warmup,
                       "workloads": results, **({DECODE: decode} if decode else {})},
                      f, indent=2)
    if opts.plot:
        plot_latency(results, opts.plot, title=f"{m['cpu']}, {m['cores']} cores; jdisc "
                                               f"{m['jdisc']}, jax {m['jax']}")
        log(f"wrote {opts.plot}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    opts = p.parse_args(argv)
    try:
        run(opts)
    except BenchError as err:
        p.error(str(err))


if __name__ == "__main__":
    main()
