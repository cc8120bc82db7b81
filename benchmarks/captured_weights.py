"""Captured weights: `jdisc.jit(lambda x: jnp.tanh(x @ W))` with W closed over (a constant of
the exported program), against jax.jit on the same function, each in a fresh process.

    python benchmarks/captured_weights.py [--mb 4,16] [--repeats 3] [--json OUT.json]

Per weight size (W is [K, K] float32 with K*K*4 bytes ~ the given MiB) and repeat:
* cold: a new process with an empty jdisc cache times the first call (trace, export, compile,
  run) of jax.jit and then of jdisc.jit at x[3, K];
* warm: another new process, same cache, times jdisc's first call (a cache hit);
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
t_start = time.perf_counter()
import jax, jax.numpy as jnp, numpy as np
import jdisc
k, which = int(sys.argv[1]), sys.argv[2]
w = np.random.default_rng(0).standard_normal((k, k)).astype(np.float32)
x = np.ones((3, k), np.float32)
out = {}
if which == "cold":
    t0 = time.perf_counter()
    np.asarray(jax.jit(lambda x: jnp.tanh(x @ w))(x))
    out["xla_first_s"] = time.perf_counter() - t0
t0 = time.perf_counter()
np.asarray(jdisc.jit(lambda x: jnp.tanh(x @ w), dynamic_axes=({0: "b"},))(x))
out["jdisc_first_s"] = time.perf_counter() - t0
print(json.dumps(out))
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
    cold, warm, entry = [], [], 0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="jdisc-cw-") as cache:
            cold.append(_child(k, "cold", cache))
            warm.append(_child(k, "warm", cache)["jdisc_first_s"])
            entry = _entry_bytes(cache)
    med = lambda key: statistics.median(c[key] for c in cold)
    return {"K": k, "weight_bytes": k * k * 4, "xla_first_s": med("xla_first_s"),
            "jdisc_cold_s": med("jdisc_first_s"), "jdisc_warm_s": statistics.median(warm),
            "cache_entry_bytes": entry, "all_cold": cold, "all_warm": warm}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", default="4,16", help="weight sizes in MiB, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", metavar="OUT.json")
    opts = p.parse_args(argv)
    import jax
    import jdisc
    print(f"load average before: {os.getloadavg()}; jdisc {jdisc.__version__}, "
          f"jax {jax.__version__}, {os.cpu_count()} CPUs")
    rows = [measure(float(m), opts.repeats) for m in opts.mb.split(",")]
    print(f"{'W MiB':>6} {'xla first s':>12} {'jdisc cold s':>13} {'ratio':>6} "
          f"{'jdisc warm s':>13} {'entry/W':>8}")
    for r in rows:
        print(f"{r['weight_bytes'] / 2**20:6.1f} {r['xla_first_s']:12.3f} {r['jdisc_cold_s']:13.3f}"
              f" {r['jdisc_cold_s'] / r['xla_first_s']:6.2f} {r['jdisc_warm_s']:13.3f}"
              f" {r['cache_entry_bytes'] / r['weight_bytes']:8.3f}")
    print(f"load average after: {os.getloadavg()}; medians of {opts.repeats}, each in a new "
          f"process")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
