"""Eager calls whose arguments are a pytree: a dict of parameters and an input, jdisc against
jax.jit.

    python benchmarks/pytree_calls.py [--leaves 1,4,15,52] [--calls 2000] [--repeats 7]

Each call is `f(params, x)` with `params` a dict of `leaves` small jax.Arrays (a model's
weights, which the program reads) and `x` a jax.Array of 5 values: the work is a few
additions, so the time is the call's own cost (flattening the arguments, finding the
program, reading each leaf's dtype, shape and address, making the results). jdisc is
compiled once (its first call waits for it: `bridge=False`), `jax.jit` once; each cell is
the median over `--repeats` blocks of `--calls` calls of the microseconds per call, the two
sides in alternate blocks. The script prints a Markdown table with the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp

import jdisc
from jdisc.bench import machine_info, machine_line


def _f(params, x):
    return x + sum(jnp.sum(w) for w in params.values())


def per_call_us(fn, args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--leaves", default="1,4,15,52", help="parameter leaves, comma-separated")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    opts = p.parse_args(argv)
    load_before = os.getloadavg()
    x = jax.device_put(jnp.ones((5,), jnp.float32))
    print(f"{machine_line(machine_info())}\n")
    print("| parameter leaves | jdisc us | jax.jit us | ratio |")
    print("| --- | --- | --- | --- |")
    for k in (int(v) for v in opts.leaves.split(",")):
        params = {f"w{i}": jnp.full((4, 4), float(i), jnp.float32) for i in range(k)}
        jd = jdisc.jit(_f, dynamic_axes=(None, {0: "n"}), bridge=False)
        xla = jax.jit(_f)
        args = (params, x)
        for fn in (jd, xla, jd, xla):       # compile, then warm the eager path
            jax.block_until_ready(fn(*args))
        tj, tx = [], []
        for _ in range(opts.repeats):
            tj.append(per_call_us(jd, args, opts.calls))
            tx.append(per_call_us(xla, args, opts.calls))
        mj, mx = statistics.median(tj), statistics.median(tx)
        print(f"| {k} | {mj:.1f} | {mx:.1f} | {mj / mx:.2f} |")
    print(f"\nload {[round(v, 2) for v in load_before]} -> "
          f"{[round(v, 2) for v in os.getloadavg()]}; medians of {opts.repeats} blocks of "
          f"{opts.calls} calls; `python benchmarks/pytree_calls.py --leaves {opts.leaves}`")


if __name__ == "__main__":
    main()
