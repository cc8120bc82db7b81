"""W7: a small GPT-style decoder's generation loop with a growing KV cache.

    python benchmarks/decode.py [--prompt 16] [--new 128] [--repeats 2] [--json OUT.json]

jdisc with the cache growing by one each step, against jax.jit with a fixed maximum-length
cache and a mask (what users do today) and jax.jit recompiling per length: end to end from a
fresh function, then steady state. The model and the measurement are `jdisc/bench/decode.py`
(also `jdisc bench --workloads W7`).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import jax
import jax.numpy as jnp

from jdisc.bench.decode import print_decode, run_decode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    print("load average before:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.ones(3)))      # start-up costs
    with tempfile.TemporaryDirectory(prefix="jdisc-decode-") as tmp:
        count = iter(range(1 << 30))
        res = run_decode(a.prompt, a.new, a.repeats,
                         lambda: os.path.join(tmp, f"cache{next(count)}"))
    print_decode(res)
    print("load average after:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**res, "cpus": os.cpu_count()}, f, indent=1)


if __name__ == "__main__":
    main()
