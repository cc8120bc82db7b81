"""FFTs and LAPACK calls: jdisc.jit against jax.jit at the exact shape, in one process.

    python benchmarks/spectral_linalg.py [--repeats 15] [--rounds 3] [--json OUT.json]
                                         [--only SUBSTR]
    python benchmarks/spectral_linalg.py --table A.json [B.json ...]    # the docs' table

Each case is compiled once by jdisc (a dynamic batch) and once per shape by jax.jit (warmed up
before timing); the calls of the two are interleaved, and each row reports the median over
`--rounds` rounds of the median of `--repeats` calls, and the ratio jdisc / jax.jit (below 1:
jdisc is faster). The machine and the load average before and after are printed: run it on a
quiet machine, with more rounds where a background load comes and goes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jdisc

# name -> (function, dynamic axes, shapes (one per row), complex input)
CASES = {
    "fft n=64 (tiny call)": (jnp.fft.fft, ({0: "b"},), [(1, 64)], True),
    "fft n=1024": (jnp.fft.fft, ({0: "b"},), [(8, 1024), (64, 1024)], True),
    "fft n=1000 (2^3 5^3)": (jnp.fft.fft, ({0: "b"},), [(64, 1000)], True),
    "fft n=1009 (prime)": (jnp.fft.fft, ({0: "b"},), [(8, 1009), (64, 1009)], True),
    "rfft n=4096": (jnp.fft.rfft, ({0: "b"},), [(16, 4096)], False),
    "irfft n=4096": (lambda x: jnp.fft.irfft(x, n=4096), ({0: "b"},), [(16, 2049)], True),
    "fft2 64x64": (jnp.fft.fft2, ({0: "b"},), [(16, 64, 64)], True),
    "solve 64": (lambda a: jnp.linalg.solve(a + 64 * jnp.eye(64), a), ({0: "b"},),
                 [(16, 64, 64)], False),
    "cholesky 256": (lambda a: jnp.linalg.cholesky(a @ a.mT + 256 * jnp.eye(256)),
                     ({0: "b"},), [(4, 256, 256)], False),
    "eigh 128": (lambda a: jnp.linalg.eigh(a + a.mT), ({0: "b"},), [(4, 128, 128)], False),
    "svd 128": (lambda a: jnp.linalg.svd(a, compute_uv=False), ({0: "b"},), [(4, 128, 128)],
                False),
}


def _arg(shape, complex_, rng):
    x = rng.standard_normal(shape)
    if complex_:
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(np.complex64 if complex_ else np.float32)


def _median_call(fn, arg, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    p.add_argument("--table", nargs="+", metavar="RESULT.json",
                   help="print the ratios (and jdisc's ms) per case from result files, a "
                        "column each")
    opts = p.parse_args()
    if opts.table:
        print_table(opts.table)
        return
    started, load_before = time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0]
    rng = np.random.default_rng(0)
    print(f"machine: {os.cpu_count()} CPUs, load before {os.getloadavg()[0]:.2f}")
    rows = []
    for name, (fn, axes, shapes, complex_) in CASES.items():
        if opts.only not in name:
            continue
        jf, xf = jdisc.jit(fn, dynamic_axes=axes, bridge=False), jax.jit(fn)   # its own calls
        for shape in shapes:
            x = _arg(shape, complex_, rng)
            jax.block_until_ready(jf(x))
            jax.block_until_ready(xf(x))
            j, x_ = [], []
            for _ in range(opts.rounds):     # interleaved rounds
                j.append(_median_call(jf, x, opts.repeats))
                x_.append(_median_call(xf, x, opts.repeats))
            tj, tx = statistics.median(j), statistics.median(x_)
            rows.append({"case": name, "shape": list(shape), "jdisc_ms": 1e3 * tj,
                         "xla_ms": 1e3 * tx, "ratio": tj / tx})
            print(f"{name:22s} {str(shape):16s} jdisc {1e3 * tj:9.3f} ms   "
                  f"xla {1e3 * tx:9.3f} ms   ratio {tj / tx:5.2f}")
        assert jf.stats()["compiles"] == 1
    load_after = os.getloadavg()[0]
    print(f"load after {load_after:.2f}")
    if opts.json:
        meta = {"started": started, "load_before": load_before, "load_after": load_after,
                "cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                "jax": jax.__version__, "jdisc": jdisc.__version__,
                "env": {k: v for k, v in os.environ.items() if k.startswith("JDISC_")},
                "command": "python benchmarks/spectral_linalg.py --repeats "
                           f"{opts.repeats} --rounds {opts.rounds}"}
        with open(opts.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


def print_table(paths: list[str]) -> None:
    """One row per case and shape, one column per result file (the ratio, and jdisc's own
    milliseconds in brackets: XLA's times vary more between runs than jdisc's), then each
    file's time and load."""
    runs = [json.load(open(p)) for p in paths]
    print("| case | shape | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |")
    print("|---|---|" + "---|" * len(runs))
    keyed = [{(r["case"], tuple(r["shape"])): r for r in run["rows"]} for run in runs]
    for (case, shape) in keyed[0]:
        cells = [f"{k[(case, shape)]['ratio']:.2f} ({k[(case, shape)]['jdisc_ms']:.3f} ms)"
                 if (case, shape) in k else "n/a" for k in keyed]
        print(f"| {case} | {shape} | " + " | ".join(cells) + " |")
    for label, pick in (("FFTs", lambda c: "fft" in c), ("LAPACK", lambda c: "fft" not in c)):
        cells = []
        for k in keyed:
            got = [r["ratio"] for (c, _), r in k.items() if pick(c)]
            cells.append(f"{statistics.geometric_mean(got):.2f}" if got else "n/a")
        if any(c != "n/a" for c in cells):
            print(f"| geomean, {label} | | " + " | ".join(cells) + " |")
    for i, run in enumerate(runs):
        m = run["meta"]
        print(f"\nrun {i + 1}: {m['started']}, load {m['load_before']:.2f} before / "
              f"{m['load_after']:.2f} after, {m['cpus']} CPUs, jax {m['jax']}, "
              f"`{' '.join(f'{k}={v}' for k, v in m.get('env', {}).items())}"
              f"{' ' if m.get('env') else ''}{m['command']}`")


if __name__ == "__main__":
    main()
