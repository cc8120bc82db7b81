"""Transposes: jdisc's loop kernel for a transpose, by shape, against jax.jit.

    python benchmarks/transposes.py [--shapes tuned|untuned|threshold|random] [--seed 0]
                                    [--repeats 300] [--json OUT.json]
    python benchmarks/transposes.py --table A.json [B.json ...]

Three functions, each compiled once by jdisc for every shape (jax.jit once per shape): a
matrix's transpose `x.T`; an attention's keys [T, 4 * 32] to [4, 32, T] (the layout a
scores GEMM without transposed operands reads); and a batch of matrices transposed with an
op fused, `transpose(x, (0, 2, 1)) + 1`. Each moves its input's last dim away, so its loop
reads across its rows; where a row's input lines would leave L1 it runs in tiles
(jdisc/lowering/loops.py TILE_ROWS). Per shape: jdisc's kernel alone (its own counters,
JDISC_PROFILE=1: the medians of 7 rounds of `repeats // 7` calls), jdisc's whole call and
jax.jit's (medians of `repeats` calls, the two interleaved call by call), in microseconds.
Compare two versions in alternate processes (`PYTHONPATH=<worktree>`), not in one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jdisc


def _keys(k):
    return jnp.transpose(k.reshape(-1, 4, 32), (1, 2, 0))


FUNCTIONS = [
    ("x.T", lambda x: x.T, ({0: "n", 1: "m"},)),
    ("keys [T, 128] -> [4, 32, T]", _keys, ({0: "T"},)),
    ("transpose(x, (0, 2, 1)) + 1", lambda x: jnp.transpose(x, (0, 2, 1)) + 1.0,
     ({0: "b", 1: "n", 2: "m"},)),
]
# Shapes per function. `tuned`: those the tiles were chosen on; `untuned`: drawn afterwards
# to check them; `threshold`: drawn around where a row stops fitting (loops.py tile_cols);
# `random`: drawn by a seeded generator (`_random_shapes`), new seeds for new checks.
SHAPES = {
    "tuned": [[(300, 500), (500, 300), (1000, 1000), (97, 4096), (64, 64)],
              [(101, 128), (333, 128), (1000, 128)],
              [(8, 100, 100), (16, 64, 64), (2, 1000, 33), (3, 257, 511)]],
    "untuned": [[(777, 1234), (61, 2048), (2048, 61), (1500, 333), (200, 180)],
                [(77, 128), (555, 128), (2049, 128)],
                [(5, 300, 700), (2, 513, 129), (7, 90, 1024), (12, 37, 53)]],
    "threshold": [[(450, 37), (560, 51), (700, 45), (3000, 20), (10, 4096), (20, 2048),
                   (100, 512)],
                  [(70, 128), (90, 128), (100, 128), (120, 128), (200, 128)],
                  [(4, 450, 91), (2, 560, 67), (6, 700, 40), (3, 600, 16)]],
}


def _random_shapes(seed: int) -> list[list[tuple]]:
    """Sizes log-uniform in [2, 4096], at most 2^22 elements: 6 matrices, 4 key lengths, 5
    batches of 1-8 matrices."""
    rng = np.random.default_rng(seed)

    def size(hi=4096):
        return int(np.exp(rng.uniform(np.log(2), np.log(hi))))

    def shape(k):
        while True:
            s = tuple(size() for _ in range(k))
            if np.prod(s) <= 1 << 22:
                return s
    return [[shape(2) for _ in range(6)], [(size(), 128) for _ in range(4)],
            [(int(rng.integers(1, 9)),) + shape(2) for _ in range(5)]]


def _kernel_us(f, x, repeats: int) -> float:
    rounds = []
    for _ in range(7):
        before = f.profile(x)
        n = max(1, repeats // 7)
        for _ in range(n):
            jax.block_until_ready(f(x))
        after = f.profile(x)
        rounds.append(sum(after[k] - before[k] for k in after) / n * 1e6)
    return statistics.median(rounds)


def _call_us(fns, x, repeats: int) -> list[float]:
    times = [[] for _ in fns]
    for _ in range(repeats):
        for t, fn in zip(times, fns):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(x))
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) * 1e6 for t in times]


def run(repeats: int, shapes: str = "tuned", seed: int = 0) -> dict:
    os.environ["JDISC_PROFILE"] = "1"       # read when compiling: the kernels' own counters
    rows = []
    load_before = os.getloadavg()
    for (name, fn, axes), case_shapes in zip(
            FUNCTIONS, _random_shapes(seed) if shapes == "random" else SHAPES[shapes]):
        jf, xf = jdisc.jit(fn, dynamic_axes=axes, bridge=False), jax.jit(fn)
        for shape in case_shapes:
            x = jax.device_put(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
            np.testing.assert_array_equal(np.asarray(jf(x)), np.asarray(xf(x)))
            for _ in range(5):
                jax.block_until_ready(jf(x))
                jax.block_until_ready(xf(x))
            kernel = _kernel_us(jf, x, repeats)
            call, xla = _call_us((jf, xf), x, repeats)
            rows.append({"case": name, "shape": list(shape), "kernel_us": kernel,
                         "jdisc_us": call, "xla_us": xla})
        assert jf.stats()["compiles"] == 1
    return {"command": " ".join(["python", "benchmarks/transposes.py"] + sys.argv[1:]),
            "started": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
            "load_before": load_before, "load_after": os.getloadavg(), "rows": rows}


def print_table(paths: list[str]) -> None:
    """One column group per result file: jdisc's kernel, its call, jax.jit's, in us."""
    runs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            runs.append(json.load(f))
    head = " | ".join(f"{os.path.basename(p)}: kernel / call / jax.jit" for p in paths)
    print(f"| case | shape | {head} |\n|---|---|" + "---|" * len(paths))
    for i, row in enumerate(runs[0]["rows"]):
        cells = " | ".join(f"{r['rows'][i]['kernel_us']:.1f} / {r['rows'][i]['jdisc_us']:.1f} / "
                           f"{r['rows'][i]['xla_us']:.1f}" for r in runs)
        print(f"| {row['case']} | {'x'.join(map(str, row['shape']))} | {cells} |")
    print()
    for p, r in zip(paths, runs):
        print(f"{os.path.basename(p)}: {r['started']}, load {r['load_before'][0]:.2f} -> "
              f"{r['load_after'][0]:.2f}, {r['cpus']} CPUs, `{r['command']}`\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", choices=sorted(SHAPES) + ["random"], default="tuned")
    ap.add_argument("--seed", type=int, default=0, help="for --shapes random")
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", nargs="+", metavar="RESULT.json")
    a = ap.parse_args()
    if a.table:
        print_table(a.table)
        return
    res = run(a.repeats, a.shapes, a.seed)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
    for row in res["rows"]:
        print(f"{row['case']:32s} {'x'.join(map(str, row['shape'])):>12s}  kernel "
              f"{row['kernel_us']:8.1f} us  call {row['jdisc_us']:8.1f}  jax.jit "
              f"{row['xla_us']:8.1f}")


if __name__ == "__main__":
    main()
