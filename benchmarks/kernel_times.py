"""Time per call of each kernel of a workload, optionally against another checkout of jdisc.

    python benchmarks/kernel_times.py W3 1x733 1x3001 [--calls 20] [--json OUT.json]
    python benchmarks/kernel_times.py W3 1x733 --before /tmp/old-checkout --rounds 2
    python benchmarks/kernel_times.py --table A.json [B.json ...]

Each (side, round) is a fresh process that compiles the workload (`jdisc.bench` workloads,
shapes BxS) with `JDISC_PROFILE=1`, calls it for 0.3 s per shape to warm up, then `--calls` calls,
and reports each kernel's seconds per call over those calls (the launcher's own counters:
`jdisc.jit(...).profile`). With `--before PATH`, the checkout at PATH (`git worktree add PATH
REV`) runs in alternate processes with this one, `--rounds` times each: comparing two versions
in one process is biased (benchmarks/README.md). A kernel's own time is far steadier than the
whole call's when the change is in one kernel. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset
in the children, as for `jdisc bench`. The warm-up was three calls until 2026-12-06: on the
2-core VM the benchmarks ran on, a process's parallel kernels took twice their time for their
first 20-60 ms of work after the second core had idled (the pool used both threads), so a
round of short kernels could run at half speed throughout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_CHILD = r"""
import json, os, sys, time
os.environ["JDISC_PROFILE"] = "1"
import jax, numpy as np, jdisc
from jdisc.bench.workloads import workloads
wl = workloads()[sys.argv[1]]
calls = int(sys.argv[2])
f = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes, bridge=False)
out = {}
for shape in sys.argv[3:]:
    b, s = map(int, shape.split("x"))
    args = jax.device_put(wl.make_args(b, s, np.random.default_rng(0)))
    warm_until = time.perf_counter() + 0.3
    while time.perf_counter() < warm_until:
        jax.block_until_ready(f(*args))
    before = f.profile(*args)
    for _ in range(calls):
        jax.block_until_ready(f(*args))
    after = f.profile(*args)
    out[shape] = {k: (after[k] - before[k]) / calls for k in after}
print(json.dumps(out))
"""


def run_side(path: str, workload: str, shapes: list[str], calls: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["PYTHONPATH"] = os.path.abspath(path)
    proc = subprocess.run([sys.executable, "-c", _CHILD, workload, str(calls), *shapes],
                          env=env, cwd=os.path.expanduser("~"), capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"kernel_times: the child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_result(d: dict, name: str) -> None:
    """One result: per shape, each kernel's ms per call in each round, per side."""
    sides = list(d["sides"])
    machine = f"; {d['machine']}" if d.get("machine") else ""
    print(f"{name}: {d['workload']}, {d['calls']} calls, rounds {d['rounds']}, load "
          f"{d['load_before'][0]:.1f} -> {d['load_after'][0]:.1f}{machine}\n")
    print("| shape | kernel | " + " | ".join(f"{s} ms" for s in sides) + " |\n"
          "| --- | --- | " + " | ".join("---" for _ in sides) + " |")
    for shape in d["shapes"]:
        # every side's kernels (a change may merge or split them: "-" where a side has none
        # of that name), then their sum per round
        kernels = list(dict.fromkeys(k for s in sides for k in d["sides"][s][0][shape]))
        for kernel in kernels:
            cells = ["/".join(f"{r[shape][kernel] * 1e3:.3f}" if kernel in r[shape] else "-"
                              for r in d["sides"][s]) for s in sides]
            print(f"| {shape} | {kernel} | " + " | ".join(cells) + " |")
        if len(kernels) > 1:
            cells = ["/".join(f"{sum(r[shape].values()) * 1e3:.3f}" for r in d["sides"][s])
                     for s in sides]
            print(f"| {shape} | all kernels | " + " | ".join(cells) + " |")
    print()


def print_table(paths: list[str]) -> None:
    """print_result of each result file."""
    for path in paths:
        with open(path, encoding="utf-8") as f:
            print_result(json.load(f), os.path.basename(path))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", nargs="?")
    p.add_argument("shapes", nargs="*", help="BxS, e.g. 1x733")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--before", help="another jdisc checkout, run in alternate processes")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json")
    p.add_argument("--table", nargs="+", metavar="JSON")
    opts = p.parse_args()
    if opts.table:
        print_table(opts.table)
        return
    if not opts.workload or not opts.shapes:
        p.error("give a workload and at least one shape (or --table)")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # this checkout
    sides = {"before": opts.before, "after": here} if opts.before else {"this": here}
    load_before, started = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M")
    results: dict[str, list] = {s: [] for s in sides}
    for _ in range(opts.rounds):
        for side, path in sides.items():
            results[side].append(run_side(path, opts.workload, opts.shapes, opts.calls))
    from jdisc.bench import machine_info, machine_line
    d = {"workload": opts.workload, "shapes": opts.shapes, "calls": opts.calls,
         "rounds": opts.rounds, "before": opts.before, "started": started,
         "machine": machine_line(machine_info()), "load_before": load_before,
         "load_after": os.getloadavg(), "sides": results}
    print_result(d, opts.json or "kernel_times")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump(d, f, indent=1)


if __name__ == "__main__":
    main()
