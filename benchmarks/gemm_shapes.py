"""Single GEMMs, `x @ w` with x [m, k] and w [k, n], jdisc against jax.jit, float32.

    python benchmarks/gemm_shapes.py [--shapes 93x768x3072,218x3072x768] [--calls 30]
                                     [--rounds 3]

jdisc is compiled with m dynamic (once per k and n, static dims of w); jax.jit once per shape. The two alternate call by call
in one process (arrays already on the device), `--calls` calls a round; each cell is the best
round's median in ms, with GFLOP/s. XLA runs its GEMMs in its own kernels (YNNPACK), jdisc
through OpenBLAS's sgemm cut into pieces on its pool (lowering/c_runtime/jd_gemm.h), or its
own loops for a few rows. Run it with OPENBLAS_CORETYPE unset where the machine sets it
(benchmarks/README.md); compare two versions of jdisc in separate processes
(`PYTHONPATH=<worktree> python <worktree>/benchmarks/gemm_shapes.py`), not in one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import numpy as np

import jdisc

DEFAULT = "93x768x768,93x768x3072,93x3072x768,218x768x768,218x768x3072,218x3072x768"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=DEFAULT, help="m x k x n, comma-separated")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}")
    print("| m x k x n | jdisc ms | jax.jit ms | ratio | jdisc GFLOP/s | jax.jit GFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for shape in a.shapes.split(","):
        m, k, n = map(int, shape.split("x"))
        x = jax.device_put(rng.standard_normal((m, k), np.float32))
        w = jax.device_put(rng.standard_normal((k, n), np.float32))
        xla = jax.jit(lambda x, w: x @ w)
        # m dynamic; k and n are static dims of w, so one program per (k, n)
        mine = jdisc.jit(lambda x, w: x @ w, dynamic_axes=({0: "m"}, None), bridge=False)
        best = {"jdisc": float("inf"), "xla": float("inf")}
        for fn in (mine, xla):
            for _ in range(5):
                jax.block_until_ready(fn(x, w))
        for _ in range(a.rounds):
            times = {"jdisc": [], "xla": []}
            for _ in range(a.calls):
                for side, fn in (("jdisc", mine), ("xla", xla)):
                    t0 = time.perf_counter()
                    jax.block_until_ready(fn(x, w))
                    times[side].append(time.perf_counter() - t0)
            for side in best:
                best[side] = min(best[side], 1e3 * statistics.median(times[side]))
        flop = 2 * m * k * n / 1e6
        print(f"| {shape} | {best['jdisc']:.3f} | {best['xla']:.3f} | "
              f"{best['jdisc'] / best['xla']:.2f} | {flop / best['jdisc']:.0f} | "
              f"{flop / best['xla']:.0f} |")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
