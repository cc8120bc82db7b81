"""Dynamic-shape stream benchmark: jdisc (one compile for all shapes) against jax.jit (XLA,
one compile per shape) on the built-in workloads W1, W2, W3.

    python benchmarks/stream.py [--workloads W1,W2,W3] [--shapes 10] [--repeats 7] [--quick]
                                [--json OUT.json] [--seed 0]

For each workload and each of `--shapes` distinct (B, S) shapes (B in 1..8, S in 16..512, drawn
from a fixed seed; W3 uses N = B*S) it measures XLA's compile time (`lower().compile()`), and the
steady-state time of jdisc and of XLA's executable, interleaved call by call in this process
(medians of `--repeats`). It also times a stream that visits every shape twice in a shuffled
order, each side starting cold. Progress goes to stderr, tables to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time

_TMP = tempfile.TemporaryDirectory(prefix="jdisc-bench-")
os.environ["JDISC_CACHE_DIR"] = os.path.join(_TMP.name, "cache-import")  # before importing jdisc

import jax  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402

import jdisc  # noqa: E402
from jdisc.workloads import Workload, workloads  # noqa: E402

GEMM_WORKLOADS = ("W1", "W3")
QUICK = {"shapes": 4, "repeats": 3, "max_tokens": 1024}


def log(msg: str) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def fresh_cache_dir(tag: str) -> str:
    """Point jdisc at a new, empty cache directory so that its next compile is cold."""
    path = tempfile.mkdtemp(prefix=f"{tag}-", dir=_TMP.name)
    os.environ["JDISC_CACHE_DIR"] = path
    return path


def draw_shapes(n: int, seed: int, max_tokens: int | None) -> list[tuple[int, int]]:
    """`n` distinct (B, S) pairs, B in 1..8 and S in 16..512, optionally with B*S <= max_tokens;
    sorted by B*S so the table reads from small to large."""
    rng = np.random.default_rng(seed)
    shapes: list[tuple[int, int]] = []
    while len(shapes) < n:
        b, s = int(rng.integers(1, 9)), int(rng.integers(16, 513))
        if (b, s) not in shapes and (max_tokens is None or b * s <= max_tokens):
            shapes.append((b, s))
    return sorted(shapes, key=lambda bs: (bs[0] * bs[1], bs))


def machine_info() -> dict:
    """What the numbers were measured on."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         model)
    except OSError:
        pass
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith("OPENBLAS") or k in ("OMP_NUM_THREADS", "XLA_FLAGS")}
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "jdisc": jdisc.__version__,
            "env": env, "date": datetime.datetime.now().isoformat(timespec="seconds")}


def timed(fn, args) -> tuple[float, object]:
    """Wall seconds of `fn(*args)` including `block_until_ready` on its outputs."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0, out


def max_abs_diff(a, b) -> float:
    """Largest absolute difference between two output pytrees."""
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def warm_up() -> dict:
    """Pay once-per-process costs (backend start, lazy imports, jdisc's first C compile) on a
    throwaway function, so no workload's compile time carries them; returns their seconds."""
    x = jax.device_put(np.ones((2, 4), np.float32))
    xla_s, _ = timed(jax.jit(lambda v: v * 2.0 + 1.0), (x,))
    fresh_cache_dir("warmup")
    jdisc_s, _ = timed(jdisc.jit(lambda v: v * 2.0 + 1.0, dynamic_axes=({0: "n"},)), (x,))
    return {"xla_s": xla_s, "jdisc_s": jdisc_s}


def run_stream(wl: Workload, args: list, order: list[int]) -> dict:
    """Time a cold stream over `order` for a fresh jdisc wrapper (new cache dir, so its single
    compile counts) and a fresh jax.jit (in-memory jax caches cleared, so every new shape
    compiles)."""
    jax.clear_caches()
    fresh_cache_dir(f"{wl.name}-stream")
    jf = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes)
    t0 = time.perf_counter()
    for i in order:
        jax.block_until_ready(jf(*args[i]))
    jdisc_s = time.perf_counter() - t0
    jax.clear_caches()
    jx = jax.jit(wl.fn)
    t0 = time.perf_counter()
    for i in order:
        jax.block_until_ready(jx(*args[i]))
    xla_s = time.perf_counter() - t0
    return {"calls": len(order), "jdisc_s": jdisc_s, "xla_s": xla_s, "ratio": jdisc_s / xla_s,
            "jdisc_compiles": jf.stats()["compiles"]}


def bench_workload(wl: Workload, shapes: list[tuple[int, int]], repeats: int, seed: int) -> dict:
    """All measurements for one workload; see the module docstring."""
    args = [jax.device_put(wl.make_args(b, s, np.random.default_rng(seed))) for b, s in shapes]
    fresh_cache_dir(wl.name)
    jf = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes)
    log(f"[{wl.name}] jdisc compile (first call at B={shapes[0][0]} S={shapes[0][1]})")
    jdisc_compile_s, _ = timed(jf, args[0])
    rows = []
    for (b, s), a in zip(shapes, args):
        log(f"[{wl.name}] B={b} S={s}: xla compile, then {repeats} interleaved repeats")
        t0 = time.perf_counter()
        xc = jax.jit(wl.fn).lower(*a).compile()
        xla_compile_s = time.perf_counter() - t0
        _, out_j = timed(jf, a)                  # warm-up call of each
        _, out_x = timed(xc, a)
        err = max_abs_diff(out_j, out_x)
        if not err <= 1e-3:
            log(f"[{wl.name}] WARNING: B={b} S={s}: jdisc and XLA outputs differ by {err:.3g}")
        tj, tx = [], []
        for _ in range(repeats):
            tj.append(timed(jf, a)[0])
            tx.append(timed(xc, a)[0])
        jms, xms = 1e3 * statistics.median(tj), 1e3 * statistics.median(tx)
        flops = wl.flops(b, s)
        rows.append({"B": b, "S": s, "jdisc_ms": jms, "xla_ms": xms, "ratio": jms / xms,
                     "xla_compile_s": xla_compile_s, "max_abs_diff": err,
                     "jdisc_gflops": flops / jms / 1e6 if flops else None,
                     "xla_gflops": flops / xms / 1e6 if flops else None,
                     "jdisc_ms_all": [1e3 * t for t in tj], "xla_ms_all": [1e3 * t for t in tx]})
    compiles = jf.stats()["compiles"]
    order = [int(i) for i in np.random.default_rng(seed).permutation(2 * len(shapes))
             % len(shapes)]
    log(f"[{wl.name}] stream of {len(order)} calls (each shape twice), jdisc then XLA, cold")
    return {"description": wl.description, "jdisc_compile_s": jdisc_compile_s,
            "jdisc_compile_seconds_stat": jf.stats()["compile_seconds"],
            "jdisc_compiles": compiles, "rows": rows,
            "geomean_ratio": math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows)),
            "stream": run_stream(wl, args, order)}


def print_table(name: str, res: dict) -> None:
    """The per-workload table and summary lines, on stdout."""
    gemm = name in GEMM_WORKLOADS
    cols = ["shape", "jdisc ms", "xla ms", "ratio", "xla compile s"]
    cols += ["jdisc GFLOP/s", "xla GFLOP/s"] if gemm else []
    widths = [max(len(c), 10) for c in cols]
    print(f"\n{name}: {res['description']}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in res["rows"]:
        shape = f"N={r['B'] * r['S']}" if name == "W3" else f"{r['B']}x{r['S']}"
        cells = [shape, f"{r['jdisc_ms']:.3f}", f"{r['xla_ms']:.3f}", f"{r['ratio']:.2f}",
                 f"{r['xla_compile_s']:.3f}"]
        cells += [f"{r['jdisc_gflops']:.1f}", f"{r['xla_gflops']:.1f}"] if gemm else []
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    st = res["stream"]
    xla_compile_total = sum(r["xla_compile_s"] for r in res["rows"])
    print(f"  jdisc compile s (one, cold cache, incl. C compiler): {res['jdisc_compile_s']:.3f}"
          f"   compiles: {res['jdisc_compiles']}")
    print(f"  xla compile s (lower+compile), sum over {len(res['rows'])} shapes: "
          f"{xla_compile_total:.3f}")
    print(f"  geomean ratio jdisc/xla (steady state): {res['geomean_ratio']:.2f}")
    print(f"  stream of {st['calls']} calls (each shape twice, cold): jdisc s {st['jdisc_s']:.3f}"
          f"   xla s {st['xla_s']:.3f}   ratio {st['ratio']:.2f}"
          f"   (jdisc compiles {st['jdisc_compiles']})")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="W1,W2,W3", help="comma-separated, e.g. W1,W3")
    p.add_argument("--shapes", type=int, help="distinct (B, S) shapes (default 10; quick 4)")
    p.add_argument("--repeats", type=int, help="timed calls per shape (default 7; quick 3)")
    p.add_argument("--quick", action="store_true",
                   help=f"the README's main job: {QUICK['shapes']} shapes, {QUICK['repeats']} "
                        f"repeats, B*S <= {QUICK['max_tokens']}")
    p.add_argument("--json", metavar="OUT.json", help="write every number here")
    p.add_argument("--seed", type=int, default=0)
    opts = p.parse_args(argv)
    n_shapes = opts.shapes or (QUICK["shapes"] if opts.quick else 10)
    repeats = opts.repeats or (QUICK["repeats"] if opts.quick else 7)
    max_tokens = QUICK["max_tokens"] if opts.quick else None
    all_wl = workloads()
    names = [n.strip() for n in opts.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in all_wl]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {sorted(all_wl)}")
    shapes = draw_shapes(n_shapes, opts.seed, max_tokens)
    machine = machine_info()
    t_start = time.perf_counter()
    log("warm-up: a throwaway function through jax.jit and jdisc.jit")
    warmup = warm_up()
    results = {}
    for name in names:
        results[name] = bench_workload(all_wl[name], shapes, repeats, opts.seed)
    m = machine
    print(f"machine: {m['cpu']}, {m['cores']} cores; python {m['python']}, jax {m['jax']}, "
          f"jaxlib {m['jaxlib']}, jdisc {m['jdisc']}; {m['date']}"
          + "".join(f"; {k}={v}" for k, v in m["env"].items()))
    print(f"shapes (B x S, seed {opts.seed}): {shapes}; {repeats} interleaved repeats, medians; "
          f"ratio = jdisc / xla (lower is better for jdisc); XLA compile = "
          f"jax.jit(fn).lower(*args).compile(); once-per-process start-up costs paid by a "
          f"throwaway warm-up first")
    for name, res in results.items():
        print_table(name, res)
    wall = time.perf_counter() - t_start
    log(f"done in {wall:.1f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": machine, "seed": opts.seed, "shapes": shapes,
                       "repeats": repeats, "quick": opts.quick, "wall_s": wall, "warmup": warmup,
                       "workloads": results}, f, indent=2)


if __name__ == "__main__":
    main()
