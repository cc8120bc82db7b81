"""Probes of the C compiler for known miscompilations, and the flags that avoid them.

GCC 12.2 (Debian 12's compiler) with -O3 on AVX/AVX2 targets vectorises a loop whose body is
unrolled over several vectors' worth of lanes (jdisc's 16- and 64-lane reductions) and contains a
conditional load (`if (m[i]) t = a[i]`, or a select whose load GCC sinks into the branch) into
masked loads that all use the FIRST vector's mask. Lanes past the first vector then read zeros:
`jnp.sum(jnp.where(eye, a, 0), 1)` lost the diagonal for rows 4..15. Masked loads are only made
by GCC's loop if-conversion, so no if-conversion avoids the bug. Only kernels with conditional
loads are at risk (lowering/codegen.py `needs_branches`): they carry
`__attribute__((optimize("no-tree-loop-if-convert")))`, and the rest keep if-conversion, which
vectorises their branchy math (tanh, exp, NaN-aware max). The probe checks that the attribute
avoids the bug; where it does not, `-fno-tree-loop-if-convert` applies to the whole file.

Rather than trusting a version number, jdisc compiles a small program shaped like its own lane
loops with the flags it uses and runs it; if the answer is wrong, the workaround flag is added.
The verdict is kept per compiler and CPU in the cache directory, so the probe runs once.
"""

from __future__ import annotations

import hashlib
import json
import os
import string
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from jdisc.lowering.stitch import LANES, LANES_SHORT

# Each probe: (name, C program printing "ok" when compiled correctly, flags that avoid the bug).
# The lane loop is written at each width of the stitch kernels' reduction loops
# (lowering/stitch.py LANES, LANES_SHORT): how many vectors it unrolls over depends on the
# width. Both widths are one program, so that a cold cache pays one compile per kernel level.
_LANE_LOOP = string.Template(r"""
__attribute__((noinline)) static void lanes_$W(int64_t n, const int32_t *restrict m,
                                               const float *restrict a, float *restrict out) {
  float acc[$W];
  for (int l = 0; l < $W; l++) acc[l] = 0.0f;
  for (int64_t c = 0; c + $W <= n; c += $W) {
    for (int64_t l = 0; l < $W; l++) {
      float t = 0.0f;
      if (m[c + l]) t = a[c + l];
      acc[l] = acc[l] + t;
    }
  }
  for (int l = 0; l < $W; l++) out[l] = acc[l];
}
static int check_$W(int argc) {
  int32_t m[4 * $W];
  float a[4 * $W], out[$W], want[$W] = {0};
  for (int i = 0; i < 4 * $W; i++) {
    m[i] = (i % 5 == argc - 1);
    a[i] = (float)i;
    if (m[i]) want[i % $W] += a[i];
  }
  lanes_$W(4 * $W, m, a, out);
  for (int l = 0; l < $W; l++)
    if (out[l] != want[l]) return 0;
  return 1;
}
""")


def _lane_loops(widths: tuple[int, ...]) -> str:
    """One program checking the lane loop at each width; it prints "ok" when all are right."""
    checks = " && ".join(f"check_{w}(argc)" for w in widths)
    return ("#include <stdint.h>\n#include <stdio.h>\n"
            + "".join(_LANE_LOOP.substitute(W=w) for w in widths)
            + "int main(int argc, char **argv) {\n  (void)argv;\n"
            + f'  printf({checks} ? "ok\\n" : "wrong\\n");\n  return 0;\n}}\n')


_MASKED_LOAD_LANES = _lane_loops((LANES, LANES_SHORT))

# The same program with the per-function attribute jdisc's kernels use (lowering/codegen.py,
# JD_KEEP_BRANCHES): if it prints "ok" where the plain one does not, the attribute avoids the
# bug and no global flag is needed; otherwise every kernel is built without if-conversion.
_MASKED_LOAD_LANES_KEPT = _MASKED_LOAD_LANES.replace(
    "__attribute__((noinline)) static",
    "__attribute__((noinline, optimize(\"no-tree-loop-if-convert\"))) static")

# (name, program, the same program as jdisc's kernels avoid the bug in it, global flags used
# only when that avoidance does not work)
PROBES = [("masked-load-lanes", _MASKED_LOAD_LANES, _MASKED_LOAD_LANES_KEPT,
           ["-fno-tree-loop-if-convert"])]
PROBE_VERSION = 4       # part of the verdict's cache key

_verdicts: dict[tuple, list[str]] = {}
_probing = threading.Lock()


def workaround_flags(compiler: list[str], flag_sets: list[list[str]], identity: str, host: str,
                     cache_root: str) -> list[str]:
    """Extra flags this compiler needs on this CPU (usually none), with each of `flag_sets`
    (the flags of each level kernels compile at: lowering/units.py LEVELS)."""
    key = (tuple(compiler), tuple(map(tuple, flag_sets)), identity, host, PROBE_VERSION)
    if key in _verdicts:
        return _verdicts[key]
    with _probing:     # one thread probes (compiler.start_runtime_unit's, often); others wait
        if key not in _verdicts:
            _verdicts[key] = _verdict(key, compiler, flag_sets, identity, cache_root)
    return _verdicts[key]


def _verdict(key, compiler: list[str], flag_sets: list[list[str]], identity: str,
             cache_root: str) -> list[str]:
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
    path = os.path.join(cache_root, "probes", digest + ".json")
    try:
        with open(path, encoding="utf-8") as f:
            flags = json.load(f)["flags"]
    except (OSError, ValueError, KeyError, TypeError):
        flags = _run_probes(compiler, flag_sets)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"compiler": identity, "flags": flags}, f)
        os.replace(tmp, path)
    return flags


def _run_probes(compiler: list[str], flag_sets: list[list[str]]) -> list[str]:
    # only code-generation flags matter; -shared/-fPIC would make the probe a library
    runs = [(i, [f for f in flags if f not in ("-shared", "-fPIC")], probe)
            for i, flags in enumerate(flag_sets) for probe in PROBES]

    def needs(run) -> list[str]:
        i, flags, (name, source, avoided, fix) = run
        name += f"-{i}"
        if _probe_ok(compiler, flags, tmp, name, source) or \
                _probe_ok(compiler, flags, tmp, name + "-avoided", avoided):
            return []
        return fix

    extra: list[str] = []
    with tempfile.TemporaryDirectory(prefix="jdisc-probe-") as tmp:
        # at once: on a cold cache every compile waits for the verdict
        with ThreadPoolExecutor(max(1, len(runs))) as pool:
            for fix in pool.map(needs, runs):
                extra += [f for f in fix if f not in extra]
    return extra


def _probe_ok(compiler: list[str], flags: list[str], tmp: str, name: str, source: str) -> bool:
    c_path, exe = os.path.join(tmp, name + ".c"), os.path.join(tmp, name)
    with open(c_path, "w", encoding="utf-8") as f:
        f.write(source)
    try:
        built = subprocess.run([*compiler, *flags, c_path, "-o", exe],
                               capture_output=True, timeout=120).returncode == 0
        out = subprocess.run([exe], capture_output=True, text=True,
                             timeout=60).stdout.strip() if built else "ok"
    except (OSError, subprocess.TimeoutExpired):
        out = "ok"   # a compiler that cannot build the probe fails loudly later
    return out == "ok"
