"""The first call and a short stream, cold: jax.jit, jdisc.jit as users get it (the bridge:
the first call runs with jax.jit while jdisc compiles in a background thread), and
jdisc.jit(bridge=False) (the first call waits for jdisc's compile), each in a fresh process
with an empty jdisc cache (`--cache new`: where an earlier program was compiled, as for
every program after a user's first).

    python benchmarks/first_call.py [--workloads W1,W2,W3,W4] [--repeats 3] [--json OUT.json]
    python benchmarks/first_call.py --table RESULT.json [RESULT.json ...]

Per workload (jdisc/bench/workloads.py) and repeat, one process per side:
* first call: the time of the first call at (B, S) = (2, 37) (trace, compile, run);
* stream: three distinct shapes, each called twice in the order a b c a b c, end to end from
  the first call (each jax.jit shape compiles once; jdisc compiles once; with the bridge, a
  call made while jdisc compiles runs with jax.jit: at a new shape after a quick XLA compile,
  unless jdisc's program is ready first);
* loop: in another fresh process, 20 calls at (2, 37), end to end from the first (a loop over
  one shape: with the bridge, the calls made while jdisc compiles run jax.jit's executable).
The files also hold, per run, the seconds until jdisc's program was ready (`*_ready_s`: the
bridge's compile may outlast the calls; jax.jit's are its call seconds).
Medians over the repeats; ratio = side / jax.jit. Run on a quiet machine (the load average is
recorded before and after).
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
import json, sys, time
import jax, numpy as np
import jdisc
from jdisc.bench.workloads import workloads
name, side, mode = sys.argv[1], sys.argv[2], sys.argv[3]
wl = workloads()[name]
shapes = [(2, 37), (3, 61), (5, 23)]
args = [jax.device_put(wl.make_args(b, s, np.random.default_rng(0))) for b, s in shapes]
jax.block_until_ready(jax.jit(lambda x: x + 1)(np.ones(3, np.float32)))   # start-up costs
f = jax.jit(wl.fn) if side == "xla" else jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes,
                                                    bridge=side == "jdisc")
t0 = time.perf_counter()
jax.block_until_ready(f(*args[0]))
first = time.perf_counter() - t0
for i in ((1, 2, 0, 1, 2) if mode == "stream" else (0,) * 19):
    jax.block_until_ready(f(*args[i]))
rest = time.perf_counter() - t0
if side != "xla":
    f.compiled_for(*args[0])        # jdisc's program ready (the bridge's compile waited for)
ready = time.perf_counter() - t0
print(json.dumps({"first_s": first, mode + "_s": rest, mode + "_ready_s": ready,
                  "bridged": f.stats().get("bridged_calls", 0) if side != "xla" else 0}))
"""

SIDES = ("xla", "jdisc", "nobridge")


def _child(name: str, side: str, mode: str, new: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="jdisc-fc-") as cache:
        env = dict(os.environ, JDISC_CACHE_DIR=cache)
        if new and side != "xla":
            from jdisc.bench import EARLIER_PROGRAM
            subprocess.run([sys.executable, "-c", EARLIER_PROGRAM], env=env, check=True)
        proc = subprocess.run([sys.executable, "-c", _CHILD, name, side, mode], env=env,
                              capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run(name: str, side: str, new: bool) -> dict:
    """A stream run, then a loop run (its first call and bridged calls under loop_*)."""
    out = _child(name, side, "stream", new)
    loop = _child(name, side, "loop", new)
    out.update(loop_s=loop["loop_s"], loop_ready_s=loop["loop_ready_s"],
               loop_bridged=loop["bridged"])
    return out


def _ratios(x: dict, j: dict, n: dict, what: str, width: int) -> str:
    """`what`'s seconds for jax.jit, jdisc and jdisc without the bridge, with the ratios."""
    k = what + "_s"
    return (f"{x[k]:{width}.3f} {j[k]:7.3f} {j[k] / x[k]:6.2f} {n[k]:9.3f} "
            f"{n[k] / x[k]:6.2f}")


def print_table(rows: dict) -> None:
    print(f"{'':4} {'xla first s':>11} {'jdisc':>7} {'ratio':>6} {'no bridge':>9} {'ratio':>6} |"
          f" {'xla stream s':>12} {'jdisc':>7} {'ratio':>6} {'no bridge':>9} {'ratio':>6}")
    for name, r in rows.items():
        x, j, n = r["xla"], r["jdisc"], r["nobridge"]
        print(f"{name:4} {_ratios(x, j, n, 'first', 11)} | {_ratios(x, j, n, 'stream', 12)}")
    if all("stream_ready_s" in r["jdisc"] for r in rows.values()):    # since 2026-12-07
        print(f"\n{'':4} {'xla stream s':>12} {'jdisc ready s':>13} {'ratio':>6} "
              f"{'no bridge':>9} {'ratio':>6}")
        for name, r in rows.items():
            x, j, n = r["xla"], r["jdisc"], r["nobridge"]
            print(f"{name:4} {x['stream_s']:12.3f} {j['stream_ready_s']:13.3f} "
                  f"{j['stream_ready_s'] / x['stream_s']:6.2f} {n['stream_ready_s']:9.3f} "
                  f"{n['stream_ready_s'] / x['stream_s']:6.2f}")
    if all("loop_s" in r["xla"] for r in rows.values()):      # files from before: no loop
        print(f"\n{'':4} {'xla loop s':>10} {'jdisc':>7} {'ratio':>6} {'no bridge':>9} "
              f"{'ratio':>6} {'bridged':>7}")
        for name, r in rows.items():
            x, j, n = r["xla"], r["jdisc"], r["nobridge"]
            print(f"{name:4} {_ratios(x, j, n, 'loop', 10)} {j['loop_bridged']:7.0f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="W1,W2,W3,W4")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", metavar="OUT.json")
    p.add_argument("--cache", choices=("empty", "new"), default="empty",
                   help="jdisc's cache directory: empty (a user's first program) or where an "
                        "earlier program was compiled (every later new program)")
    p.add_argument("--table", nargs="+", metavar="RESULT.json",
                   help="print the tables of result files")
    opts = p.parse_args(argv)
    if opts.table:
        from jdisc.bench import print_result_files
        print_result_files(opts.table, print_table)
        return
    load_before = os.getloadavg()
    print(f"load average before: {load_before}; {os.cpu_count()} CPUs")
    rows = {}
    for name in opts.workloads.split(","):
        runs = {side: [_run(name, side, opts.cache == "new") for _ in range(opts.repeats)]
                for side in SIDES}
        rows[name] = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                      for side, rs in runs.items()}
        rows[name]["all"] = runs
    print_table(rows)
    load_after = os.getloadavg()
    print(f"load average after: {load_after}; medians of {opts.repeats}, one process "
          f"and a fresh jdisc cache ({opts.cache}) per run")
    if opts.json:
        from jdisc.bench import machine_info, machine_line
        machine = machine_line(machine_info()).removeprefix("machine: ")
        with open(opts.json, "w") as f:
            json.dump({"machine": machine, "repeats": opts.repeats, "cache": opts.cache,
                       "load_before": [round(v, 2) for v in load_before],
                       "load_after": [round(v, 2) for v in load_after], "rows": rows}, f,
                      indent=2)


if __name__ == "__main__":
    main()
