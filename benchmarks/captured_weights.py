"""Captured weights: `jdisc.jit(lambda x: jnp.tanh(x @ W))` with W closed over (a constant of
the exported program), against jax.jit on the same function, each in a fresh process.

    python benchmarks/captured_weights.py [--mb 4,16] [--repeats 3] [--json OUT.json]
    python benchmarks/captured_weights.py --table RESULT.json [RESULT.json ...]

Per weight size (W is [K, K] float32 with K*K*4 bytes ~ the given MiB) and repeat, each
process timing one first call at x[3, K] (trace, export, compile, run):
* xla: jax.jit;
* cold: jdisc.jit as users get it, with an empty cache (the bridge: jax.jit serves the first
  call while jdisc compiles; the process exits once the compile is done);
* no bridge: jdisc.jit(bridge=False) with an empty cache (the first call waits for the compile);
* warm: jdisc.jit in a new process on the cache the cold one left (a cache hit, not bridged);
* the cache entry's size on disk against W's bytes.
Medians over the repeats; ratio = jdisc / jax.jit. Run on a quiet machine (the script prints
the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, os, sys, time
import jax, jax.numpy as jnp, numpy as np
import jdisc
k, which = int(sys.argv[1]), sys.argv[2]
w = np.random.default_rng(0).standard_normal((k, k)).astype(np.float32)
x = np.ones((3, k), np.float32)
f = (jax.jit(lambda x: jnp.tanh(x @ w)) if which == "xla" else
     jdisc.jit(lambda x: jnp.tanh(x @ w), dynamic_axes=({0: "b"},), bridge=which != "nobridge"))
t0 = time.perf_counter()
np.asarray(f(x))
print(json.dumps({"first_s": time.perf_counter() - t0}))
"""


def _entry_bytes(cache: str) -> int:
    total = 0
    for root, _, files in os.walk(cache):
        if "lib.so" in files:
            total = max(total, sum(os.path.getsize(os.path.join(root, f)) for f in files))
    return total


def _child(k: int, which: str, cache: str) -> dict:
    env = dict(os.environ, JDISC_CACHE_DIR=cache)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(k), which], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(mib: float, repeats: int) -> dict:
    k = int((mib * 2**20 / 4) ** 0.5)
    runs = {"xla": [], "cold": [], "nobridge": [], "warm": []}
    entry = 0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="jdisc-cw-") as cache:
            runs["xla"].append(_child(k, "xla", cache)["first_s"])
            runs["nobridge"].append(_child(k, "nobridge", cache)["first_s"])
        with tempfile.TemporaryDirectory(prefix="jdisc-cw-") as cache:
            runs["cold"].append(_child(k, "cold", cache)["first_s"])   # exits after the compile
            runs["warm"].append(_child(k, "warm", cache)["first_s"])
            entry = _entry_bytes(cache)
    med = {side: statistics.median(ts) for side, ts in runs.items()}
    return {"K": k, "weight_bytes": k * k * 4, "xla_first_s": med["xla"],
            "jdisc_cold_s": med["cold"], "jdisc_nobridge_s": med["nobridge"],
            "jdisc_warm_s": med["warm"], "cache_entry_bytes": entry, "all": runs}


def print_table(rows: list) -> None:
    print(f"{'W MiB':>6} {'xla first s':>12} {'jdisc cold s':>13} {'ratio':>6} "
          f"{'no bridge s':>12} {'ratio':>6} {'jdisc warm s':>13} {'entry/W':>8}")
    for r in rows:
        print(f"{r['weight_bytes'] / 2**20:6.1f} {r['xla_first_s']:12.3f} {r['jdisc_cold_s']:13.3f}"
              f" {r['jdisc_cold_s'] / r['xla_first_s']:6.2f} {r['jdisc_nobridge_s']:12.3f}"
              f" {r['jdisc_nobridge_s'] / r['xla_first_s']:6.2f} {r['jdisc_warm_s']:13.3f}"
              f" {r['cache_entry_bytes'] / r['weight_bytes']:8.3f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", default="4,16", help="weight sizes in MiB, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", metavar="OUT.json")
    p.add_argument("--table", nargs="+", metavar="RESULT.json",
                   help="print the tables of result files")
    opts = p.parse_args(argv)
    if opts.table:
        from jdisc.bench import print_result_files
        print_result_files(opts.table, print_table)
        return
    import jax
    import jdisc
    print(f"load average before: {os.getloadavg()}; jdisc {jdisc.__version__}, "
          f"jax {jax.__version__}, {os.cpu_count()} CPUs")
    load_before = os.getloadavg()
    rows = [measure(float(m), opts.repeats) for m in opts.mb.split(",")]
    print_table(rows)
    load_after = os.getloadavg()
    print(f"load average after: {load_after}; medians of {opts.repeats}, each in a new "
          f"process")
    if opts.json:
        with open(opts.json, "w") as f:
            from jdisc.bench import machine_info, machine_line
            json.dump({"machine": machine_line(machine_info()).removeprefix("machine: "),
                       "repeats": opts.repeats, "load_before": load_before,
                       "load_after": load_after, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
