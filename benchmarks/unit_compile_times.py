"""Which kernels the C compiler spends its time on: every kernel unit of dumped programs, alone.

    JDISC_DUMP_DIR=DUMP python -m pytest -q tests/zoo     # or any program run with it set
    python benchmarks/unit_compile_times.py DUMP [--top 15] [--json OUT.json]
    python benchmarks/unit_compile_times.py --table A.json [B.json ...]   # the docs' table

Each distinct kernel unit (lowering/units.py: one per kernel, named after its content) of the
`kernels.c` files under DUMP is compiled by itself with the flags jdisc uses, one at a time,
and timed. The slowest, and those slow for their length (microseconds per character of C),
are where GCC meets a pattern it handles badly: a whole-array sum's blocks of rows, a concat's
short inner loop unrolled whole (CHANGELOG.md) were found this way. Units are compiled here one
by one, not in jdisc's bundles; the total is the C compiler's time over all of them. `--json`
keeps the total and the 50 slowest.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

from jdisc.custom_calls import compiler
from jdisc.lowering import units


def kernel_units(dump: str) -> dict[str, tuple[str, str, str]]:
    """unit name -> (-O level, text, the program it came from), each distinct unit once."""
    out: dict[str, tuple[str, str, str]] = {}
    for path in sorted(glob.glob(os.path.join(dump, "*", "kernels.c"))):
        program = os.path.basename(os.path.dirname(path))
        with open(path, encoding="utf-8") as f:
            for name, opt, text in units.split(f.read()):
                if name.startswith("jd_u") and name not in out:
                    out[name] = (opt, text, program)
    return out


def kind(text: str) -> str:
    """The kernel's kind, from the comment above its entry (`/* stitch kernel: ... */`)."""
    for line in text.splitlines():
        if line.startswith("/* ") and " kernel: " in line:
            return line[3:line.index(" kernel: ")]
    return "?"


def print_table(paths: list[str]) -> None:
    """One row per result file: its units, their total and the five slowest."""
    print("| file | units | total s | the five slowest, ms (kind) | load |\n"
          "| --- | --- | --- | --- | --- |")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        slow = ", ".join(f"{r['seconds'] * 1e3:.0f} ({r['kind']})" for r in d["slowest"][:5])
        print(f"| {os.path.basename(path)} | {d['count']} | {d['total_seconds']:.1f} | {slow} | "
              f"{d['load_before'][0]:.1f} -> {d['load_after'][0]:.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dump", nargs="?", help="a JDISC_DUMP_DIR that programs were compiled with")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--json", default=None)
    p.add_argument("--table", nargs="+", metavar="RESULT.json")
    a = p.parse_args()
    if a.table:
        print_table(a.table)
        return
    if not a.dump:
        p.error("give a dump directory, or --table")
    found = kernel_units(a.dump)
    if not found:
        sys.exit(f"no kernel units under {a.dump}/*/kernels.c")
    cflags, _ = compiler._flag_parts(False)
    cc, rows = compiler.compiler_command(), []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for name, (opt, text, program) in found.items():
            c_path = os.path.join(tmp, name + ".c")
            with open(c_path, "w", encoding="utf-8") as f:
                f.write(text)
            t0 = time.perf_counter()
            done = subprocess.run([*cc, *compiler._unit_flags(cflags, opt, False), c_path,
                                   "-o", c_path + ".o"], capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            if done.returncode:    # its warnings (-Wall) are jdisc's usual ones: not shown
                sys.exit(f"{name} of {program} did not compile:\n{done.stderr[-3000:]}")
            rows.append({"unit": name, "kind": kind(text), "program": program,
                         "chars": len(text), "seconds": seconds})
    rows.sort(key=lambda r: -r["seconds"])
    total = sum(r["seconds"] for r in rows)
    print(f"{len(rows)} kernel units, {total:.2f} s in all; load {load_before[0]:.2f} -> "
          f"{os.getloadavg()[0]:.2f}")
    print("| ms | chars | us / char | kind | program |\n| --- | --- | --- | --- | --- |")
    for r in rows[:a.top]:
        print(f"| {r['seconds'] * 1e3:.0f} | {r['chars']} | "
              f"{r['seconds'] * 1e6 / r['chars']:.1f} | {r['kind']} | {r['program']} |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"command": " ".join(["python", "benchmarks/unit_compile_times.py"]
                                           + sys.argv[1:]),
                       "started": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                       "load_before": load_before, "load_after": os.getloadavg(),
                       "count": len(rows), "total_seconds": total,
                       "slowest": rows[:50]}, f, indent=1)


if __name__ == "__main__":
    main()
