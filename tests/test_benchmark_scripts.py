"""The benchmark scripts measure what they say they measure (a smoke run each, no timing
asserted: speed is measured in benchmarks/, never asserted in tests)."""

import json
import subprocess
import sys

from subprocess_support import REPO, env_with


def _table(script: str, *args: str) -> tuple[str, list[list[str]]]:
    """Run a benchmark script; its output and the body rows of the Markdown tables it printed
    (a row whose first cell starts with a digit), each as its cells."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, [line.split("|")[1:-1] for line in proc.stdout.splitlines()
                         if line.startswith("| ") and line[2:3].isdigit()]


def _ratio_agrees(jd: float, xla: float, ratio: float) -> bool:
    """A printed ratio (2 decimals) is some true jd / xla whose printed ms (3 decimals) round
    to the cells shown: the interval each rounding leaves, never a fixed tolerance."""
    h = 0.0005 + 1e-9
    lo, hi = (jd - h) / (xla + h), (jd + h) / max(xla - h, 1e-9)
    return lo - 0.005 - 1e-9 <= ratio <= hi + 0.005 + 1e-9


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
    # both first calls: XLA's includes a run of its executable, as jdisc's always did
    assert row["xla_first_run"] > 0 and 0 < row["new_compile"] <= row["new_program"], row


def test_gemm_shapes_times_each_shape_on_both_sides():
    _, rows = _table("gemm_shapes.py", "--shapes", "3x5x7,40x16x8,40x8x16", "--calls", "2",
                     "--rounds", "1")
    assert [r[0].strip() for r in rows] == ["3x5x7", "40x16x8", "40x8x16"]
    for r in rows:          # jdisc ms, jax.jit ms (3 decimals), their ratio, both GFLOP/s
        jd, xla, ratio = map(float, r[1:4])
        assert jd > 0 and xla > 0 and _ratio_agrees(jd, xla, ratio), r


def test_small_batches_compares_each_row_count_against_jax_jit():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "small_batches.py"),
                           "--rows", "2,3", "--repeats", "2"],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith("| W")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == \
        [("W3", "2"), ("W3", "3"), ("W1", "2"), ("W1", "3")]
    for r in rows:          # jdisc ms, jax.jit ms, their ratio
        jd, xla, ratio = map(float, r[2:])
        assert jd > 0 and xla > 0 and _ratio_agrees(jd, xla, ratio), r


def test_skinny_gemm_times_both_sides_at_every_row_count():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "skinny_gemm.py")],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "sgemm/skinny" in line]
    assert len(lines) == 10 and not any("!" in line for line in lines), proc.stdout
    for line in lines:
        cells = line.split("us ")[1].split()
        assert [c.split(":")[0] for c in cells] == \
            ["2", "3", "4", "5", "8", "12", "16", "24", "32", "40", "48", "56", "64"]
        assert all(float(t) > 0 for c in cells for t in c.split(":")[1].split("/"))


def test_unit_compile_times_lists_the_kernel_units_of_a_dump(tmp_path):
    dump = tmp_path / "dump"
    prog = ("import numpy as np, jax.numpy as jnp, jdisc\n"
            "jdisc.jit(lambda x: jnp.tanh(x).sum(), dynamic_axes=({0: 'n'},))"
            "(np.ones(5, np.float32))\n")
    subprocess.run([sys.executable, "-c", prog], env=env_with(JDISC_DUMP_DIR=str(dump)),
                   check=True, timeout=600)
    out = tmp_path / "units.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "unit_compile_times.py"),
                           str(dump), "--json", str(out)],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["count"] >= 1 and d["total_seconds"] > 0, d
    assert {r["kind"] for r in d["slowest"]} >= {"stitch"}, d["slowest"]


def test_kernel_times_reports_each_kernel_per_side(tmp_path):
    # --before at this same checkout: two sides, the same kernels, positive times per call
    out = tmp_path / "kernels.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "kernel_times.py"), "W3",
                           "1x5", "2x9", "--calls", "2", "--rounds", "1", "--before", str(REPO),
                           "--json", str(out)],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    assert set(d["sides"]) == {"before", "after"} and d["shapes"] == ["1x5", "2x9"]
    for runs in d["sides"].values():
        (run,) = runs
        for shape in d["shapes"]:
            # the bias and ReLU are the GEMMs' epilogues (gemm_epilogue.py)
            assert [k.split("_", 2)[2] for k in run[shape]] == \
                ["dot_general", "dot_general"], run[shape]
            assert all(t > 0 for t in run[shape].values()), run[shape]


def test_row_reductions_times_each_length_both_ways():
    # a dynamic row length (one compile) and one known when compiling (one per length)
    for extra in ([], ["--known"]):
        out, rows = _table("row_reductions.py", "--lengths", "3,70", "--elements", "2000",
                           "--repeats", "2", *extra)
        assert [r[0].strip() for r in rows] == ["3", "70"], out
        assert ("known when compiling" in out) == bool(extra), out
        assert all(float(c) > 0 for r in rows for c in r[1:4]), rows   # ms, ms, ratio


def test_pytree_calls_times_each_leaf_count():
    out, rows = _table("pytree_calls.py", "--leaves", "1,3", "--calls", "20", "--repeats", "2")
    assert [r[0].strip() for r in rows] == ["1", "3"], out
    assert all(float(c) > 0 for r in rows for c in r[1:]), rows     # us, us, ratio


def test_transposes_times_the_kernel_and_both_calls(tmp_path):
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "transposes.py"),
                           "--repeats", "7", "--json", str(out)], env=env_with(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["case"] for r in rows} == {"x.T", "keys [T, 128] -> [4, 32, T]",
                                        "transpose(x, (0, 2, 1)) + 1"}
    assert all(r["kernel_us"] > 0 and r["jdisc_us"] > 0 and r["xla_us"] > 0 for r in rows)


def test_interop_times_the_compiled_eager_call_not_the_bridge(tmp_path):
    # with the bridge on (the users' default), a new jdisc function's calls run with jax.jit
    # until the compile in the background is done: the overhead line must time jdisc's call
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import interop, jdisc\n"
            "made = []\n"
            "def jit(*a, _jit=jdisc.jit, **k):\n"
            "    made.append(_jit(*a, **k)); return made[-1]\n"
            "interop.jdisc.jit = jit\n"
            "res = interop.bench_overhead(50, 1)\n"
            "assert all(v > 0 for v in res.values()), res\n"
            "print(made[0].stats())\n")
    env = env_with(JDISC_CACHE_DIR=str(tmp_path))
    env.pop("JDISC_BRIDGE", None)
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "benchmarks")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = eval(proc.stdout.strip().splitlines()[-1])
    assert stats["compiles"] == 1 and not stats.get("bridged_calls"), stats


def test_first_call_times_each_side_until_jdisc_is_ready(tmp_path):
    out = tmp_path / "first.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "first_call.py"),
                           "--workloads", "W3", "--repeats", "1", "--cache", "new",
                           "--json", str(out)],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["cache"] == "new"
    r = result["rows"]["W3"]
    for side in ("xla", "jdisc", "nobridge"):
        s = r[side]
        assert 0 < s["first_s"] <= s["stream_s"] <= s["stream_ready_s"], (side, s)
        assert 0 < s["loop_s"] <= s["loop_ready_s"], (side, s)
    assert r["jdisc"]["bridged"] >= 1 and r["nobridge"]["bridged"] == 0, r
    assert "jdisc ready s" in proc.stdout


def test_zoo_speed_times_a_zoo_model_at_both_shapes(tmp_path):
    # the zoo's own test runs (its checks unchanged), then both sides are timed at the plan's
    # largest shape and at a large one; the table prints from the file
    out = tmp_path / "zoo.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo_speed.py"),
                           "--files", "tests/zoo/test_zoo_others.py", "-k", "graph_network",
                           "--json", str(out)],
                          env=env_with(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert sorted(r["kind"] for r in rows) == ["large", "tiny"], rows
    for r in rows:
        assert r["jdisc_s"] > 0 and r["xla_s"] > 0 and r["compiles"] == 1, r
        assert abs(r["ratio"] - r["jdisc_s"] / r["xla_s"]) < 1e-12, r
    large = next(r for r in rows if r["kind"] == "large")
    tiny = next(r for r in rows if r["kind"] == "tiny")
    assert all(large["shape"][d] > tiny["shape"][d] for d in tiny["shape"]), rows
    table = subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo_speed.py"),
                            "--table", str(out)], env=env_with(), capture_output=True,
                           text=True, timeout=600)
    assert table.returncode == 0 and "| GNN layer |" in table.stdout, table.stderr[-3000:]
