"""Where a cold compile's time goes: jdisc's stages against XLA's single-shape compile.

    python benchmarks/compile_time.py [--workloads W1,W2,W3,W4,W7] [--repeats 2] [--json OUT.json]
    python benchmarks/compile_time.py --table A.json [B.json ...]   # the README's table

Per workload and repeat, a fresh process, with an empty jdisc cache ("cold") and with a cache
directory where another program was compiled before ("new program": the runtime unit, the
compiler probe and, since 2026-12-05, the unit of float32 GEMMs of a few rows are on disk, as
for every program after a user's first with a matmul). jdisc: the first call of
`jdisc.jit(..., bridge=False)` at (B, S) = (2, 37) (W7: one step of `jdisc bench`'s decoder,
its KV cache 37 long), which waits for the compile (by default the first call runs with jax.jit
while jdisc compiles: benchmarks/first_call.py), split by `stats()["stage_seconds"]` (the cold
one's) into the driver's stages (export, mlir, import, passes, c, library; `cc` is the C
compiler's part of `library`) and the rest of the call. XLA: `jax.jit(fn).lower(*args)` (trace
and lower) and `.compile()` at the same shape. Also the CPU seconds of the C compiler's runs
within jdisc's first call (its child processes', from getrusage: steadier than wall time on a
busy machine; two cores share them). Medians over the repeats; `cold / XLA` = jdisc's
first call / XLA's lower + compile. XLA's own compile cache is not persistent here (jax's
default), so its side is always cold.

jdisc's first call also runs the program once, which XLA's lower + compile does not; since
2026-12-07 the files also hold XLA's first run of its compiled executable (`xla_first_run`),
jdisc's own compile seconds for the new program (`stats()["compile_seconds"]`, without the
run) and the ratio of the two first calls, XLA's lower + compile + run against jdisc's first
call (`new first call / XLA's`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, resource, sys, time
import jax, numpy as np
import jdisc
from jdisc.bench.workloads import workloads
name = sys.argv[1]
if name == "W7":        # one step of the decoder, its KV cache 37 long
    from jdisc.bench import decode
    fn, axes = decode.step, (None, None, {1: "T"}, {1: "T"})
    cache = np.zeros((decode.LAYERS, 37, decode.D), np.float32)
    args = jax.device_put((decode.params(), np.zeros(decode.D, np.float32), cache, cache))
else:
    wl = workloads()[name]
    fn, axes = wl.fn, wl.dynamic_axes
    args = jax.device_put(wl.make_args(2, 37, np.random.default_rng(0)))
jax.block_until_ready(jax.jit(lambda x: x + 1)(np.ones(3, np.float32)))   # start-up costs
t0 = time.perf_counter()
lowered = jax.jit(fn).lower(*args)
t1 = time.perf_counter()
compiled = lowered.compile()
t2 = time.perf_counter()
jax.block_until_ready(compiled(*args))     # XLA's first run, as jdisc's first call has one
t2r = time.perf_counter()
f = jdisc.jit(fn, dynamic_axes=axes, bridge=False)   # the compile, not jax.jit's
r3 = resource.getrusage(resource.RUSAGE_CHILDREN)
t3 = time.perf_counter()
jax.block_until_ready(f(*args))
t4 = time.perf_counter()
r4 = resource.getrusage(resource.RUSAGE_CHILDREN)
cc_cpu = (r4.ru_utime - r3.ru_utime) + (r4.ru_stime - r3.ru_stime)   # the C compiler's runs
st = f.stats()
assert st["compiles"] == 1 and st.get("stage_seconds"), st
print(json.dumps({"xla_lower": t1 - t0, "xla_compile": t2 - t1, "xla_first_run": t2r - t2,
                  "jdisc_first": t4 - t3, "jdisc_compile": st["compile_seconds"],
                  "stages": st.get("stage_seconds", {}), "compiles": st["compiles"],
                  "cc_cpu": cc_cpu}))
"""

STAGES = ("export", "mlir", "import", "passes", "c", "library", "cc")


def one(name: str, warm: bool) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, JDISC_CACHE_DIR=cache)
        if warm:
            from jdisc.bench import EARLIER_PROGRAM
            subprocess.run([sys.executable, "-c", EARLIER_PROGRAM], env=env, check=True)
        out = subprocess.run([sys.executable, "-c", _CHILD, name], env=env, check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="W1,W2,W3,W4,W7")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", nargs="+", metavar="RESULT.json",
                    help="print the first call per workload from result files (a / b / ...)")
    a = ap.parse_args()
    if a.table:
        print_table(a.table)
        return
    started, load_before = time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()
    print("load average before:", " ".join(f"{x:.2f}" for x in load_before))
    rows = []
    for name in a.workloads.split(","):
        runs = [one(name, False) for _ in range(a.repeats)]
        warm = [one(name, True) for _ in range(a.repeats)]

        def med(get):
            return statistics.median(get(r) for r in runs)
        row = {"workload": name, "xla_lower": med(lambda r: r["xla_lower"]),
               "xla_compile": med(lambda r: r["xla_compile"]),
               "jdisc_first": med(lambda r: r["jdisc_first"])}
        for s in STAGES:
            row[s] = med(lambda r: r["stages"].get(s, 0.0))
        row["new_program"] = statistics.median(r["jdisc_first"] for r in warm)
        row["xla_first_run"] = med(lambda r: r["xla_first_run"])
        row["new_compile"] = statistics.median(r["jdisc_compile"] for r in warm)
        # the first calls of both: XLA's lower, compile and first run against jdisc's first call
        row["new_first_ratio"] = row["new_program"] / (row["xla_lower"] + row["xla_compile"]
                                                       + row["xla_first_run"])
        row["cc_cpu"] = med(lambda r: r["cc_cpu"])
        row["new_cc_cpu"] = statistics.median(r["cc_cpu"] for r in warm)
        xla = row["xla_lower"] + row["xla_compile"]
        row["ratio"], row["new_ratio"] = row["jdisc_first"] / xla, row["new_program"] / xla
        rows.append(row)
    head = ["W", "XLA lower", "XLA compile", "jdisc cold", *STAGES, "cold / XLA",
            "jdisc new program", "new / XLA", "cc CPU cold", "cc CPU new"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for r in rows:
        cells = [r["workload"], *(f"{r[k]:.3f}" for k in ("xla_lower", "xla_compile",
                                                          "jdisc_first", *STAGES)),
                 f"{r['ratio']:.2f}", f"{r['new_program']:.3f}", f"{r['new_ratio']:.2f}",
                 f"{r['cc_cpu']:.3f}", f"{r['new_cc_cpu']:.3f}"]
        print("| " + " | ".join(cells) + " |")
    print("load average after:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "repeats": a.repeats, "cpus": os.cpu_count(),
                       "started": started, "load_before": load_before,
                       "load_after": os.getloadavg(),
                       "command": "python benchmarks/compile_time.py "
                                  f"--workloads {a.workloads} --repeats {a.repeats}"},
                      f, indent=1)


def print_table(paths: list[str]) -> None:
    """XLA's lower + compile, jdisc's cold and new-program first calls and their ratios, one
    column per result file's value (`a / b`)."""
    runs = [{r["workload"]: r for r in json.load(open(p))["rows"]} for p in paths]
    for run in runs:        # (a version without stage_seconds recorded zeros: n/a)
        for r in run.values():
            if r["export"]:
                r["cc"] = f"{r['cc']:.3f}"

    def cells(w, get, fmt):
        return " / ".join(fmt.format(get(run[w])) for run in runs if w in run)
    cpu = all("cc_cpu" in r for run in runs for r in run.values())
    firsts = all("xla_first_run" in r for run in runs for r in run.values())
    print("| W | XLA lower + compile s | jdisc cold s | cold / XLA | C compiler s (cold) | "
          "jdisc new program s | new / XLA |" + (" C compiler CPU s, cold | new program |"
                                                 if cpu else "") +
          (" XLA's first run s | jdisc's compile s, new program | new first call / XLA's |"
           if firsts else ""))
    print("| --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if cpu else "") +
          (" --- | --- | --- |" if firsts else ""))
    for w in runs[0]:
        print(f"| {w} | {cells(w, lambda r: r['xla_lower'] + r['xla_compile'], '{:.3f}')} | "
              f"{cells(w, lambda r: r['jdisc_first'], '{:.3f}')} | "
              f"{cells(w, lambda r: r['ratio'], '{:.2f}')} | "
              f"{cells(w, lambda r: r['cc'] if r['export'] else 'n/a', '{}')} | "
              f"{cells(w, lambda r: r['new_program'], '{:.3f}')} | "
              f"{cells(w, lambda r: r['new_ratio'], '{:.2f}')} |" +
              (f" {cells(w, lambda r: r['cc_cpu'], '{:.3f}')} | "
               f"{cells(w, lambda r: r['new_cc_cpu'], '{:.3f}')} |" if cpu else "") +
              (f" {cells(w, lambda r: r['xla_first_run'], '{:.3f}')} | "
               f"{cells(w, lambda r: r['new_compile'], '{:.3f}')} | "
               f"{cells(w, lambda r: r['new_first_ratio'], '{:.2f}')} |" if firsts else ""))

if __name__ == "__main__":
    main()
