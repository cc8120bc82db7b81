"""Small batches: the MLP (W3) and the BERT layer (W1) at a few rows, jdisc against jax.jit.

    python benchmarks/small_batches.py [--rows 1,2,3,4,5,8,11,16] [--repeats 50]

A GEMM of a few rows against a large weight is bound by reading the weight: BLAS's sgemm packs
(copies) it first, and jdisc runs such a GEMM in its own loops instead, which read it once per
8 rows (jdisc/lowering/c_runtime/jd_skinny.h). This times W3 at N rows and W1 at B = 1, S = N
(`jdisc bench`'s arguments), jdisc compiled once for every N, jax.jit once per N, interleaved
in one process, called with arrays already on the device. Medians of `--repeats` calls. Run
it with OPENBLAS_CORETYPE unset where the machine sets it (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

import jdisc
from jdisc.bench import time_cells
from jdisc.bench.workloads import workloads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1,2,3,4,5,8,11,16")
    p.add_argument("--repeats", type=int, default=50)
    a = p.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}, OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', '')!r}")
    print("| workload | rows | jdisc ms | jax.jit ms | ratio |\n| --- | --- | --- | --- | --- |")
    for name in ("W3", "W1"):
        wl = workloads()[name]
        jf = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes, bridge=False)
        for n in map(int, a.rows.split(",")):
            b, s = (n, 1) if name == "W3" else (1, n)
            args = jax.device_put(wl.make_args(b, s, np.random.default_rng(n)))
            xf = jax.jit(wl.fn)
            got, want = jf(*args), xf(*args)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-3, atol=2e-3)
            print(f"| {name} | {n} | {time_cells(jf, xf, args, a.repeats)}")
        assert jf.stats()["compiles"] == 1
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
