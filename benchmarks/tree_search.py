"""Tree search: jdisc against jax.jit on a batched search over trees (tests/control_models.py
`tree_search`: B trees of N nodes, 8 actions, N - 1 simulations, each a walk down by PUCT, an
expansion by scatter and a back-up by scatter-add, all in vmapped while loops).

    python benchmarks/tree_search.py [--repeats 9] [--rounds 3] [--json OUT.json]
    python benchmarks/tree_search.py --table A.json [B.json ...]   # the docs' table

One jdisc compile (dynamic B and N) and one jax.jit compile per shape; per shape the median of
`--rounds` rounds of the median of `--repeats` calls of each side, the sides alternating by
round, and the ratio jdisc / jax.jit. The load average before and after is printed and saved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import control_models  # noqa: E402  (tests/control_models.py: the search and its inputs)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jdisc  # noqa: E402
from jdisc.bench import timed  # noqa: E402

SHAPES = [(1, 17), (4, 33), (8, 65), (3, 200), (16, 129), (7, 301)]   # (B, N)


def _median_call(fn, args, repeats: int) -> float:
    return statistics.median(timed(fn, args)[0] for _ in range(repeats))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", nargs="+", metavar="RESULT.json",
                   help="print the ratios (and jdisc's ms) per shape from result files, a "
                        "column each")
    p.add_argument("--json", metavar="OUT.json", help="write every number here")
    p.add_argument("--repeats", type=int, default=9, help="calls per median")
    p.add_argument("--rounds", type=int, default=3, help="medians per side and shape")
    opts = p.parse_args()
    if opts.table:
        print_table(opts.table)
        return
    started, load_before = time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load before {load_before:.2f}")
    fn, axes = control_models.tree_search, control_models.DYNAMIC_AXES["tree_search"]
    jf, xf = jdisc.jit(fn, dynamic_axes=axes, bridge=False), jax.jit(fn)
    rng = np.random.default_rng(0)
    rows = []
    for b, n in SHAPES:
        args = control_models.tree_search_inputs(b, n, rng)
        for got, want in zip(jf(*args), xf(*args)):     # the same trees, or no timing
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
        j, x = [], []
        for _ in range(opts.rounds):
            j.append(_median_call(jf, args, opts.repeats))
            x.append(_median_call(xf, args, opts.repeats))
        tj, tx = statistics.median(j), statistics.median(x)
        rows.append({"B": b, "N": n, "jdisc_ms": 1e3 * tj, "xla_ms": 1e3 * tx, "ratio": tj / tx})
        print(f"B={b:3d} N={n:4d}   jdisc {1e3 * tj:8.3f} ms   xla {1e3 * tx:8.3f} ms   "
              f"ratio {tj / tx:5.2f}")
    assert jf.stats()["compiles"] == 1
    load_after = os.getloadavg()[0]
    print(f"geomean ratio {statistics.geometric_mean(r['ratio'] for r in rows):.2f}; "
          f"load after {load_after:.2f}")
    if opts.json:
        meta = {"started": started, "load_before": load_before, "load_after": load_after,
                "cpus": os.cpu_count(), "jax": jax.__version__, "jdisc": jdisc.__version__,
                "command": f"python benchmarks/tree_search.py --repeats {opts.repeats} "
                           f"--rounds {opts.rounds}"}
        with open(opts.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


def print_table(paths: list[str]) -> None:
    """One row per shape, one column per result file (jdisc / jax.jit, and jdisc's own
    milliseconds), the geomean, then each file's time, load and command."""
    runs = [json.load(open(p)) for p in paths]
    print("| B, N | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |")
    print("|---|" + "---|" * len(runs))
    for j, row in enumerate(runs[0]["rows"]):
        cells = [f"{r['rows'][j]['ratio']:.2f} ({r['rows'][j]['jdisc_ms']:.3f} ms)" for r in runs]
        print(f"| {row['B']}, {row['N']} | " + " | ".join(cells) + " |")
    print("| geomean | " + " | ".join(
        f"{statistics.geometric_mean(x['ratio'] for x in r['rows']):.2f}" for r in runs) + " |")
    for i, run in enumerate(runs):
        m = run["meta"]
        print(f"\nrun {i + 1}: {m['started']}, load {m['load_before']:.2f} before / "
              f"{m['load_after']:.2f} after, {m['cpus']} CPUs, jax {m['jax']}, "
              f"`{m['command']}`")


if __name__ == "__main__":
    main()
