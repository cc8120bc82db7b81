"""Control-flow benchmark: jdisc (one compile for all shapes, loops run by its host launcher)
against jax.jit (XLA, one compile per shape) on an LSTM over lax.scan, and the cost of one
iteration of a while loop.

    python benchmarks/control_flow.py [--shapes 10] [--repeats 7] [--quick] [--json OUT.json]
                                      [--seed 0] [--skip-lstm] [--skip-loop]

LSTM (tests/control_models.py: D=32, H=64, xs[T, B, 32], dynamic T and B): for each of
`--shapes` distinct (T, B) shapes (T in 1..256, B in 1..8, drawn from a fixed seed, sorted by
T*B) it measures XLA's compile time (`lower().compile()`) and the steady-state time of jdisc
and of XLA's executable, interleaved call by call (medians of `--repeats`), and their ratio;
then a stream that visits every shape twice in a shuffled order, each side starting cold (jdisc
with an empty cache: its one compile counts; jax.jit with cleared caches: every new shape
compiles).

Loop overhead: `while k < n: k, s = k + 1, s + 1.0` on scalars, n an int32 argument (data, so
both sides compile once), for n = 1, 10, ..., 100000; per n the median of `--repeats`
interleaved calls, and the per-iteration cost as the least-squares slope of time against n
(ns per iteration) with its intercept (the per-call cost).

Shares its helpers (machine description, timing, cold caches, warm-up) with stream.py. If jdisc
cannot compile a model (UnsupportedOpError), its columns say so and XLA's are still measured.
Progress goes to stderr, tables to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import stream   # benchmarks/stream.py: jdisc.bench's helpers (cold caches under a temp dir)

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))
import control_models  # noqa: E402  (tests/control_models.py: the LSTM and its parameters)

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jdisc

log, timed, max_abs_diff, geomean = stream.log, stream.timed, stream.max_abs_diff, stream.geomean

QUICK = {"shapes": 4, "repeats": 3, "max_t": 64, "max_n": 10_000}
LOOP_TRIPS = (1, 10, 100, 1_000, 10_000, 100_000)


def draw_shapes(n: int, seed: int, max_t: int) -> list[tuple[int, int]]:
    """`n` distinct (T, B) pairs, T in 1..max_t and B in 1..8, sorted by T*B."""
    rng = np.random.default_rng(seed)
    shapes: list[tuple[int, int]] = []
    while len(shapes) < n:
        tb = (int(rng.integers(1, max_t + 1)), int(rng.integers(1, 9)))
        if tb not in shapes:
            shapes.append(tb)
    return sorted(shapes, key=lambda tb: (tb[0] * tb[1], tb))


def try_jdisc(fn, dynamic_axes, args) -> tuple[object, float | None, str | None]:
    """(jdisc function, seconds of its first call including the compile, or None and the
    reason it cannot compile)."""
    # no bridge: the first call is jdisc's compile and run, and the later ones its program
    # (with the bridge, jax.jit would serve them while the compile runs in the background)
    jf = jdisc.jit(fn, dynamic_axes=dynamic_axes, bridge=False)
    try:
        seconds, _ = timed(jf, args)
    except jdisc.UnsupportedOpError as err:
        reason = " ".join(line.strip() for line in str(err).splitlines())
        log(f"  {reason}")
        return None, None, reason
    return jf, seconds, None


def median_ms(times: list[float]) -> float | None:
    return 1e3 * statistics.median(times) if times else None


# ------------------------------------------------------------------------------- LSTM

def bench_lstm(shapes: list[tuple[int, int]], repeats: int, seed: int) -> dict:
    fn, axes = control_models.lstm, control_models.DYNAMIC_AXES["lstm"]
    params = control_models.lstm_params()
    rng = np.random.default_rng(seed)
    args = [jax.device_put((params, rng.standard_normal((t, b, 32)).astype(np.float32)))
            for t, b in shapes]
    stream.fresh_cache_dir("lstm")
    log(f"[lstm] jdisc compile (first call at T={shapes[0][0]} B={shapes[0][1]})")
    jf, jdisc_compile_s, unsupported = try_jdisc(fn, axes, args[0])
    rows = []
    for (t, b), a in zip(shapes, args):
        log(f"[lstm] T={t} B={b}: xla compile, then {repeats} interleaved repeats")
        t0 = time.perf_counter()
        xc = jax.jit(fn).lower(*a).compile()
        xla_compile_s = time.perf_counter() - t0
        _, out_x = timed(xc, a)                      # warm-up calls
        err = None
        if jf is not None:
            _, out_j = timed(jf, a)
            err = max_abs_diff(out_j, out_x)
            if not err <= 1e-3:
                log(f"[lstm] WARNING: T={t} B={b}: jdisc and XLA outputs differ by {err:.3g}")
        tj, tx = [], []
        for _ in range(repeats):                     # jdisc, XLA, in turn
            if jf is not None:
                tj.append(timed(jf, a)[0])
            tx.append(timed(xc, a)[0])
        jms, xms = median_ms(tj), median_ms(tx)
        rows.append({"T": t, "B": b, "jdisc_ms": jms, "xla_ms": xms,
                     "ratio": jms / xms if jms is not None else None,
                     "xla_compile_s": xla_compile_s, "max_abs_diff": err,
                     "jdisc_ms_all": [1e3 * s for s in tj], "xla_ms_all": [1e3 * s for s in tx]})
    order = [int(i) for i in np.random.default_rng(seed).permutation(2 * len(shapes))
             % len(shapes)]
    log(f"[lstm] stream of {len(order)} calls (each shape twice), jdisc then XLA, cold")
    return {"description": "LSTM D=32 H=64 over lax.scan, xs[T,B,32], outputs hs[T,B,64], (h, c)",
            "jdisc_unsupported": unsupported, "jdisc_compile_s": jdisc_compile_s,
            "jdisc_compiles": jf.stats()["compiles"] if jf is not None else 0, "rows": rows,
            "geomean_ratio": geomean(r["ratio"] for r in rows) if jf is not None else None,
            "stream": run_stream(fn, axes, args, order, jdisc_ok=jf is not None)}


def run_stream(fn, axes, args: list, order: list[int], jdisc_ok: bool) -> dict:
    """A cold stream over `order`: a fresh jdisc wrapper on an empty cache (its single compile
    counts), then a fresh jax.jit with cleared in-memory caches (every new shape compiles)."""
    jdisc_s = compiles = None
    if jdisc_ok:
        jax.clear_caches()
        stream.fresh_cache_dir("lstm-stream")
        jf = jdisc.jit(fn, dynamic_axes=axes)
        t0 = time.perf_counter()
        for i in order:
            jax.block_until_ready(jf(*args[i]))
        jdisc_s, compiles = time.perf_counter() - t0, jf.stats()["compiles"]
    jax.clear_caches()
    jx = jax.jit(fn)
    t0 = time.perf_counter()
    for i in order:
        jax.block_until_ready(jx(*args[i]))
    xla_s = time.perf_counter() - t0
    return {"calls": len(order), "jdisc_s": jdisc_s, "xla_s": xla_s,
            "ratio": jdisc_s / xla_s if jdisc_s is not None else None,
            "jdisc_compiles": compiles}


# ------------------------------------------------------------------------------- loop overhead

def scalar_loop(s, n):
    """n iterations of a scalar add: what a loop costs beyond its body."""
    k, s = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + 1.0),
                          (jnp.int32(0), s))
    return s, k


def fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ys against xs."""
    slope, intercept = np.polyfit(np.asarray(xs, np.float64), np.asarray(ys, np.float64), 1)
    return float(slope), float(intercept)


def bench_loop(trips: list[int], repeats: int) -> dict:
    s0 = jax.device_put(np.float32(0.0))
    ns = [jax.device_put(np.int32(n)) for n in trips]
    stream.fresh_cache_dir("loop")
    log("[loop] jdisc compile")
    jf, jdisc_compile_s, unsupported = try_jdisc(scalar_loop, None, (s0, ns[0]))
    xf = jax.jit(scalar_loop)
    timed(xf, (s0, ns[0]))                           # XLA's one compile
    rows = []
    for n, n_arr in zip(trips, ns):
        log(f"[loop] n={n}: {repeats} interleaved repeats")
        _, out_x = timed(xf, (s0, n_arr))
        assert int(out_x[1]) == n and float(out_x[0]) == float(np.float32(n)), out_x
        if jf is not None:
            _, out_j = timed(jf, (s0, n_arr))
            if int(out_j[1]) != n or float(out_j[0]) != float(out_x[0]):
                log(f"[loop] WARNING: n={n}: jdisc returned {out_j}, XLA {out_x}")
        tj, tx = [], []
        for _ in range(repeats):
            if jf is not None:
                tj.append(timed(jf, (s0, n_arr))[0])
            tx.append(timed(xf, (s0, n_arr))[0])
        rows.append({"n": n, "jdisc_us": median_ms(tj) * 1e3 if tj else None,
                     "xla_us": median_ms(tx) * 1e3,
                     "jdisc_us_all": [1e6 * s for s in tj], "xla_us_all": [1e6 * s for s in tx]})
    res = {"description": "while k < n: k, s = k + 1, s + 1.0 (f32 scalar), n an int32 argument",
           "jdisc_unsupported": unsupported, "jdisc_compile_s": jdisc_compile_s, "rows": rows}
    for side in ("jdisc", "xla"):
        if rows[0][f"{side}_us"] is not None:
            slope, intercept = fit_line([r["n"] for r in rows], [r[f"{side}_us"] for r in rows])
            res[f"{side}_ns_per_iter"], res[f"{side}_call_us"] = 1e3 * slope, intercept
    return res


# ------------------------------------------------------------------------------- report

def fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def print_lstm(res: dict) -> None:
    print(f"\nLSTM: {res['description']}")
    if res["jdisc_unsupported"]:
        print(f"  jdisc: {res['jdisc_unsupported']} (XLA measured alone)")
    cols = ["T x B", "jdisc ms", "xla ms", "ratio", "xla compile s", "max|diff|"]
    widths = [max(len(c), 10) for c in cols]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in res["rows"]:
        cells = [f"{r['T']}x{r['B']}", fmt(r["jdisc_ms"], ".3f"), fmt(r["xla_ms"], ".3f"),
                 fmt(r["ratio"], ".2f"), f"{r['xla_compile_s']:.3f}", fmt(r["max_abs_diff"], ".2g")]
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    st = res["stream"]
    print(f"  jdisc compile s (one, cold cache, incl. C compiler): "
          f"{fmt(res['jdisc_compile_s'], '.3f')}   compiles: {res['jdisc_compiles']}")
    print(f"  xla compile s (lower+compile), sum over {len(res['rows'])} shapes: "
          f"{sum(r['xla_compile_s'] for r in res['rows']):.3f}")
    print(f"  geomean time ratio (steady state): jdisc/xla {fmt(res['geomean_ratio'], '.2f')}")
    print(f"  stream of {st['calls']} calls (each shape twice, cold, compiles included): "
          f"jdisc s {fmt(st['jdisc_s'], '.3f')}   xla s {st['xla_s']:.3f}   ratio "
          f"{fmt(st['ratio'], '.2f')}   (jdisc compiles {st['jdisc_compiles']})")


def print_loop(res: dict) -> None:
    print(f"\nloop overhead: {res['description']}")
    if res["jdisc_unsupported"]:
        print(f"  jdisc: {res['jdisc_unsupported']} (XLA measured alone)")
    cols = ["n", "jdisc us", "xla us"]
    print("  ".join(c.rjust(10) for c in cols))
    for r in res["rows"]:
        print("  ".join(c.rjust(10) for c in (str(r["n"]), fmt(r["jdisc_us"], ".1f"),
                                               fmt(r["xla_us"], ".1f"))))
    print(f"  per iteration (least-squares slope): jdisc "
          f"{fmt(res.get('jdisc_ns_per_iter'), '.2f')} ns   xla "
          f"{fmt(res.get('xla_ns_per_iter'), '.2f')} ns;   per call (intercept): jdisc "
          f"{fmt(res.get('jdisc_call_us'), '.1f')} us   xla "
          f"{fmt(res.get('xla_call_us'), '.1f')} us")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    stream.add_run_arguments(p, "LSTM (T, B)", f"{QUICK['shapes']} shapes, {QUICK['repeats']} "
                             f"repeats, T <= {QUICK['max_t']}, loop n <= {QUICK['max_n']}",
                             default_shapes=10)
    p.add_argument("--skip-lstm", action="store_true")
    p.add_argument("--skip-loop", action="store_true")
    opts = p.parse_args(argv)
    if opts.seed is None:
        opts.seed = 0
    n_shapes = opts.shapes or (QUICK["shapes"] if opts.quick else 10)
    repeats = opts.repeats or (QUICK["repeats"] if opts.quick else 7)
    shapes = draw_shapes(n_shapes, opts.seed, QUICK["max_t"] if opts.quick else 256)
    trips = [n for n in LOOP_TRIPS if not opts.quick or n <= QUICK["max_n"]]
    machine = stream.machine_info()
    t_start = time.perf_counter()
    log("warm-up: a throwaway function through jax.jit and jdisc.jit")
    warmup = stream.warm_up()
    results = {}
    if not opts.skip_lstm:
        results["lstm"] = bench_lstm(shapes, repeats, opts.seed)
    if not opts.skip_loop:
        results["loop"] = bench_loop(trips, repeats)
    m = machine
    print(stream.machine_line(m))
    print(f"LSTM shapes (T x B, seed {opts.seed}): {shapes}; loop n: {trips}; {repeats} "
          f"interleaved repeats, medians; ratio = jdisc / xla (lower is better for jdisc); XLA "
          f"compile = jax.jit(fn).lower(*args).compile(); once-per-process start-up costs paid "
          f"by a throwaway warm-up first")
    if "lstm" in results:
        print_lstm(results["lstm"])
    if "loop" in results:
        print_loop(results["loop"])
    wall = time.perf_counter() - t_start
    log(f"done in {wall:.1f} s")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"machine": machine, "seed": opts.seed, "lstm_shapes": shapes,
                       "loop_trips": trips, "repeats": repeats, "quick": opts.quick,
                       "wall_s": wall, "warmup": warmup, "results": results}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
