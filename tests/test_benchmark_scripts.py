"""The benchmark scripts measure what they say they measure (a smoke run each, no timing
asserted: speed is measured in benchmarks/, never asserted in tests)."""

import json
import subprocess
import sys

from subprocess_support import REPO, env_with


def test_compile_time_measures_the_compile_not_the_bridge(tmp_path):
    # with the bridge on (the default, which the test session turns off), a first call is
    # served by jax.jit while jdisc compiles: the script must still time jdisc's compile
    out = tmp_path / "compile.json"
    env = env_with()
    env.pop("JDISC_BRIDGE", None)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "compile_time.py"),
                           "--workloads", "W3", "--repeats", "1", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["cc"] > 0 and row["library"] >= row["cc"], row
    stages = sum(row[s] for s in ("export", "mlir", "import", "passes", "c", "library"))
    assert row["jdisc_first"] >= stages > 0, row
    assert row["new_program"] > 0, row
