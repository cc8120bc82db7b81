"""Row reductions by row length: a softmax over rows of n columns, jdisc against jax.jit.

    python benchmarks/row_reductions.py [--lengths 3,8,20,40,63,100,200,1000] [--elements 200000]
    python benchmarks/row_reductions.py --op any     # jnp.any(x > 2) over each row: booleans
    python benchmarks/row_reductions.py --op layernorm   # or logsumexp
    python benchmarks/row_reductions.py --known      # the length known when compiling

A stitch kernel runs rows shorter than 128 columns 16 at a time, every loop across the rows,
and longer rows one at a time in lanes (lowering/stitch.py); this times one row reduction
(`--op`; a softmax: a max and a sum per row) over about `--elements` values at each row length,
jdisc compiled once for every length, jax.jit once per length, interleaved in one process.
Medians of `--repeats` calls; set JDISC_NUM_THREADS=1 to compare the kernels alone.
The first line gives jdisc's compile (its first call, which waits for it: `bridge=False`), with
the cache jdisc would use; set JDISC_CACHE_DIR to an empty directory for a cold one. With
`--known` only the row count is dynamic: jdisc compiles once per length too (a softmax over a
fixed number of classes, heads or coordinates, for any batch), and the first line is left out.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import jdisc
from jdisc.bench import time_cells


def _layer_norm(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
                                      + 1e-5)


# the row reduction timed: a softmax (a max, an exp kept in a row buffer, a sum), an `any`
# over booleans, a LayerNorm (two sums, no transcendental per value), a logsumexp
OPS = {"softmax": lambda x: jax.nn.softmax(x, axis=-1),
       "any": lambda x: jnp.any(x > 2.0, axis=-1),
       "layernorm": _layer_norm,
       "logsumexp": lambda x: jax.nn.logsumexp(x, axis=-1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="3,8,20,40,63,100,200,1000")
    p.add_argument("--elements", type=int, default=200000)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--op", choices=sorted(OPS), default="softmax")
    p.add_argument("--known", action="store_true", help="the row length known when compiling")
    a = p.parse_args()
    f = OPS[a.op]
    axes = ({0: "rows"},) if a.known else ({0: "rows", 1: "n"},)
    jf, xf = jdisc.jit(f, dynamic_axes=axes, bridge=False), jax.jit(f)
    compiles = 0
    line = f"{a.op}: load {os.getloadavg()[0]:.2f}, JDISC_NUM_THREADS=" \
        f"{os.environ.get('JDISC_NUM_THREADS', '')!r}"
    if a.known:
        print(f"{line}, the row length known when compiling (a compile per length)")
    else:
        t0 = time.perf_counter()
        jax.block_until_ready(jf(np.ones((2, 3), np.float32)))
        print(f"{line}, jdisc's compile {time.perf_counter() - t0:.2f} s")
    print("| n | jdisc ms | jax.jit ms | ratio |\n| --- | --- | --- | --- |")
    lengths = list(map(int, a.lengths.split(",")))
    for n in lengths:
        if a.known:     # a length of its own: a function of its own (static dims must match)
            compiles += jf.stats()["compiles"]
            jf = jdisc.jit(f, dynamic_axes=axes, bridge=False)
        x = np.random.default_rng(n).standard_normal((a.elements // n, n)).astype(np.float32)
        x = jax.device_put(x)
        jax.block_until_ready(jf(x))
        jax.block_until_ready(xf(x))
        print(f"| {n} | {time_cells(jf, xf, (x,), a.repeats)}")
    assert compiles + jf.stats()["compiles"] == (len(lengths) if a.known else 1)
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
