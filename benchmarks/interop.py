"""jdisc inside JAX programs: call overhead and a training step.

    python benchmarks/interop.py [--quick] [--repeats 7] [--json OUT.json]

1. Per-call overhead on a tiny input (x[4] + 1), medians of `--repeats` blocks of calls:
   jdisc eager (a jax.Array in, a jax.Array out) against `jax.jit`'s cached dispatch; and jdisc
   inside an outer `jax.jit` (an XLA custom call) against the same program in plain JAX.
2. A training step of the MLP workload (W3, 512->2048->512, MSE loss, forward + backward) over
   10 batch sizes N: `jdisc.jit(jax.value_and_grad(loss))` compiles once for every N, `jax.jit`
   of the same step once per N. Steady-state medians per N and their ratio, and the end-to-end
   time of a stream visiting each N twice (compiles included), each side starting cold. Also
   the step as `jax.jit` around a jdisc forward (custom_vjp: the backward is a jdisc program
   too): XLA compiles the small surrounding program per N, jdisc its two programs once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream  # noqa: E402  (sets JDISC_CACHE_DIR before jdisc is imported)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jdisc  # noqa: E402
from jdisc.bench.workloads import mlp, mlp_params  # noqa: E402

log = stream.log


def per_call_us(fn, args, calls: int, repeats: int) -> float:
    """Median over `repeats` blocks of the mean microseconds per call (outputs waited for)."""
    jax.block_until_ready(fn(*args))
    blocks = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        blocks.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(blocks)


def bench_overhead(calls: int, repeats: int) -> dict:
    log("[overhead] x[4] + 1")
    x = jax.device_put(np.arange(4, dtype=np.float32))
    add = lambda v: v + 1
    jd = jdisc.jit(add, dynamic_axes=({0: "N"},))
    # the steady call: until the compile in the background is done, the bridge serves calls
    # with jax.jit (and, on two cores, beside the C compiler: 50-55 us a call here)
    jd.compiled_for(x)
    xla = jax.jit(add)
    outer_jd = jax.jit(lambda v: jd(v) * 2)
    outer_xla = jax.jit(lambda v: add(v) * 2)
    res = {"calls_per_block": calls}
    pairs = [("jdisc eager", jd, "jax.jit dispatch", xla),
             ("jit(jdisc inside)", outer_jd, "jit(plain jax)", outer_xla)]
    for name_a, a, name_b, b in pairs:
        ta, tb = [], []
        for _ in range(repeats):          # interleaved blocks
            ta.append(per_call_us(a, (x,), calls, 1))
            tb.append(per_call_us(b, (x,), calls, 1))
        res[name_a], res[name_b] = statistics.median(ta), statistics.median(tb)
    res["jdisc eager, numpy in"] = per_call_us(jd, (np.arange(4, dtype=np.float32),), calls,
                                               repeats)
    return res


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def bench_training(sizes: list[int], repeats: int) -> dict:
    params = mlp_params()
    rng = np.random.default_rng(0)
    data = {n: (rng.standard_normal((n, 512)).astype(np.float32),
                rng.standard_normal((n, 512)).astype(np.float32)) for n in sizes}
    step = jax.value_and_grad(loss)
    axes = (None, {0: "N"}, {0: "N"})
    stream.fresh_cache_dir("train")
    jd = jdisc.jit(step, dynamic_axes=axes)
    jd_fwd = jdisc.jit(mlp, dynamic_axes=(None, {0: "N"}))
    mixed = jax.jit(jax.value_and_grad(lambda p, x, y: jnp.mean((jd_fwd(p, x) - y) ** 2)))
    rows = []
    for n in sizes:
        x, y = data[n]
        log(f"[train] N={n}: xla compile, then {repeats} interleaved repeats")
        t0 = time.perf_counter()
        xla = jax.jit(step).lower(params, x, y).compile()
        compile_s = time.perf_counter() - t0
        jd.compiled_for(params, x, y)       # steady state: not calls the bridge serves
        err = stream.max_abs_diff(jd(params, x, y), xla(params, x, y))
        mixed(params, x, y)
        tj, tx, tm = [], [], []
        for _ in range(repeats):
            tj.append(stream.timed(jd, (params, x, y))[0])
            tx.append(stream.timed(xla, (params, x, y))[0])
            tm.append(stream.timed(mixed, (params, x, y))[0])
        rows.append({"N": n, "jdisc_ms": statistics.median(tj) * 1e3,
                     "xla_ms": statistics.median(tx) * 1e3,
                     "jit_around_jdisc_ms": statistics.median(tm) * 1e3,
                     "xla_compile_s": compile_s, "max_abs_diff": err})
    order = [n for n in sizes for _ in range(2)]
    np.random.default_rng(1).shuffle(order)
    log(f"[train] stream of {len(order)} steps, jdisc then XLA, cold")
    stream.fresh_cache_dir("train-stream")
    cold = jdisc.jit(step, dynamic_axes=axes)
    t0 = time.perf_counter()
    for n in order:
        jax.block_until_ready(cold(params, *data[n]))
    jd_stream = time.perf_counter() - t0
    jax.clear_caches()
    fresh = jax.jit(step)
    t0 = time.perf_counter()
    for n in order:
        jax.block_until_ready(fresh(params, *data[n]))
    xla_stream = time.perf_counter() - t0
    return {"rows": rows, "compiles": jd.stats()["compiles"], "stream_jdisc_s": jd_stream,
            "stream_xla_s": xla_stream, "stream_calls": len(order),
            "jit_around_jdisc_stats": jd_fwd.stats()}


def print_report(info: dict, over: dict, train: dict) -> None:
    print(f"machine: {info['cpu']}, {info['cores']} cores; python {info['python']}, jax "
          f"{info['jax']}, jaxlib {info['jaxlib']}, jdisc {info['jdisc']}; {info['date']}")
    print("\nper-call overhead, x[4] + 1 (median of blocks of "
          f"{over['calls_per_block']} calls, microseconds per call)")
    for a, b in (("jdisc eager", "jax.jit dispatch"), ("jit(jdisc inside)", "jit(plain jax)")):
        print(f"  {a:20s} {over[a]:8.1f}   {b:18s} {over[b]:8.1f}   ratio {over[a] / over[b]:.2f}")
    print(f"  {'jdisc eager, numpy in':20s} {over['jdisc eager, numpy in']:8.1f}")
    print("\ntraining step: value_and_grad of MSE(MLP 512->2048->512), x[N,512]")
    print(f"{'N':>6} {'jdisc ms':>10} {'xla ms':>10} {'ratio':>7} {'jit(jdisc) ms':>14} "
          f"{'xla compile s':>14} {'max|diff|':>10}")
    for r in train["rows"]:
        print(f"{r['N']:>6} {r['jdisc_ms']:>10.3f} {r['xla_ms']:>10.3f} "
              f"{r['jdisc_ms'] / r['xla_ms']:>7.2f} {r['jit_around_jdisc_ms']:>14.3f} "
              f"{r['xla_compile_s']:>14.3f} {r['max_abs_diff']:>10.2g}")
    ratios = [r["jdisc_ms"] / r["xla_ms"] for r in train["rows"]]
    print(f"  jdisc compiles: {train['compiles']} (jit around a jdisc forward: "
          f"{train['jit_around_jdisc_stats']})")
    print(f"  geomean time ratio (steady state): jdisc/xla {stream.geomean(ratios):.2f}")
    print(f"  stream of {train['stream_calls']} steps (each N twice, cold, compiles included): "
          f"jdisc s {train['stream_jdisc_s']:.3f}   xla s {train['stream_xla_s']:.3f}   "
          f"ratio {train['stream_jdisc_s'] / train['stream_xla_s']:.2f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 batch sizes, 3 repeats")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--json", metavar="OUT.json")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    sizes = [1, 24, 200, 700] if args.quick else [1, 8, 24, 77, 128, 200, 333, 512, 700, 1024]
    stream.warm_up()
    info = stream.machine_info()
    over = bench_overhead(200 if args.quick else 1000, repeats)
    train = bench_training(sizes, repeats)
    print_report(info, over, train)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "overhead": over, "training": train}, f, indent=1)


if __name__ == "__main__":
    main()
