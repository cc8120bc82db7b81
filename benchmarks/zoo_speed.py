"""The model zoo's programs timed: jdisc against `jax.jit`, per model, at a tiny and a large shape.

    python benchmarks/zoo_speed.py [--json OUT.json] [-k EXPR] [--files tests/zoo/...]
    python benchmarks/zoo_speed.py --table A.json [B.json ...]   # the docs' table

Runs the zoo's default tier (tests/zoo, one process, no xdist: timings share no core with
another test) with `JDISC_ZOO_TIMES` set, so that `zoo_support.check_model`, after its usual
checks, also times every model's jdisc function against `jax.jit(fn)`: at the largest shape of
the test's own plan ("tiny", a few rows of a toy-sized model: per-call costs) and at every
dynamic dim near 8x that (4x, 2x or the prime below 2x where the model bounds a dim;
"large"). Both sides are warmed at the shape first (neither compile is timed, and jdisc's
count of compiles must stay 1), then five alternated rounds of about 40 ms each; medians.
These are programs written by the libraries people use, with shapes nobody tuned jdisc for:
the ratio's geomean and its worst model are what this reports. `--profile` also lists each
model's slowest kernels (`jdisc.jit(...).profile`; the counters add time, so a profiled run's
ratios are not reported). The default tier, or with `--slow` the slow one (four models that
take minutes each); models the zoo checks with `differential` directly are not timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(pytest_args: list[str], profile: bool = False) -> list[dict]:
    """The JSON lines the zoo wrote while running with `pytest_args`."""
    with tempfile.TemporaryDirectory(prefix="jdisc-zoo-speed-") as tmp:
        out = os.path.join(tmp, "times.jsonl")
        env = dict(os.environ, JDISC_ZOO_TIMES=out, JDISC_PROFILE="1" if profile else "0")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
               *pytest_args]
        proc = subprocess.run(cmd, cwd=ROOT, env=env)
        if proc.returncode not in (0, 5):   # 5: nothing collected (a -k that matched none)
            sys.exit(f"zoo_speed: the zoo's tests failed (pytest exit {proc.returncode})")
        if not os.path.exists(out):
            return []
        with open(out, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]


def _shape(row: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in row["shape"].items())


def summary(rows: list[dict], kind: str) -> str:
    timed = [r for r in rows if r["kind"] == kind and "ratio" in r]
    if not timed:
        return f"{kind}: nothing timed"
    geo = math.exp(sum(math.log(r["ratio"]) for r in timed) / len(timed))
    worst = max(timed, key=lambda r: r["ratio"])
    slower = sum(r["ratio"] > 1 for r in timed)
    return (f"{kind}: {len(timed)} models, geomean jdisc / jax.jit {geo:.2f}, "
            f"{slower} slower than jax.jit, worst {worst['ratio']:.2f} ({worst['model']} at "
            f"{_shape(worst)})")


def print_table(rows: list[dict]) -> None:
    """One row per model (its tiny and large shapes), slowest large ratio first."""
    by_model: dict[str, dict] = {}
    for r in rows:
        by_model.setdefault(r["model"], {})[r["kind"]] = r

    def cells(r):
        if r is None:
            return ["", "", "", ""]
        if "ratio" not in r:
            return ["refused", "", "", ""]
        return [_shape(r), f"{r['jdisc_s'] * 1e6:.0f}", f"{r['xla_s'] * 1e6:.0f}",
                f"{r['ratio']:.2f}"]

    def order(item):
        large = item[1].get("large") or {}
        return -large.get("ratio", 0.0), item[0]

    print("| model | tiny shape | jdisc us | jax.jit us | ratio | large shape | jdisc us | "
          "jax.jit us | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, kinds in sorted(by_model.items(), key=order):
        print("| " + " | ".join([model, *cells(kinds.get("tiny")),
                                 *cells(kinds.get("large"))]) + " |")
    print()
    for kind in ("tiny", "large"):
        print(f"- {summary(rows, kind)}")
    profiled = [r for r in rows if r.get("kernels")]
    if profiled:
        print("\nThe kernels that took longest (--profile; us per call):\n")
        for r in sorted(profiled, key=lambda r: (r["kind"], -r["ratio"])):
            top = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in r["kernels"].items())
            print(f"- {r['model']} ({r['kind']}, {_shape(r)}): {top}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the rows, the machine and the load here")
    p.add_argument("-k", help="only the zoo tests pytest's -k selects")
    p.add_argument("--files", nargs="+", default=["tests/zoo"], help="the zoo files to run")
    p.add_argument("--slow", action="store_true",
                   help="the zoo's slow tier instead of its default one (-m slow)")
    p.add_argument("--profile", action="store_true",
                   help="compile with JDISC_PROFILE=1 and list each model's slowest kernels "
                        "(the counters cost time: not for the ratios)")
    p.add_argument("--table", nargs="+", metavar="RESULT.json",
                   help="print the table of result files")
    args = p.parse_args(argv)
    from jdisc.bench import machine_info, machine_line
    if args.table:
        for path in args.table:
            with open(path) as f:
                d = json.load(f)
            load = [[round(v, 2) for v in d[k]] for k in ("load_before", "load_after")]
            print(f"`{os.path.relpath(path, ROOT)}`: {machine_line(d['machine'])}; "
                  f"load {load[0]} -> {load[1]}\n")
            print_table(d["rows"])
            print()
        return
    machine = machine_info()
    before = list(os.getloadavg())
    rows = run([*args.files, *(["-k", args.k] if args.k else []),
                *(["-m", "slow"] if args.slow else [])], args.profile)
    after = list(os.getloadavg())
    print(machine_line(machine))
    print(f"load before {before}, after {after}\n")
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "load_before": before, "load_after": after,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
