"""The `jdisc` command, run as a subprocess (`python -m jdisc`): every subcommand's help, its
happy path, and a one-line reason with exit status 1 for each kind of bad input."""

import contextlib
import hashlib
import io
import os
import stat
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

import jdisc
from jdisc.package import from_stablehlo
from subprocess_support import env_with, error_line, run_jdisc, start_jdisc

ADD_TANH = """
func.func @main(%a: tensor<?x4xf32>, %b: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = stablehlo.add %a, %b : tensor<?x4xf32>
  %1 = stablehlo.tanh %0 : tensor<?x4xf32>
  return %1 : tensor<?x4xf32>
}
"""

UNSUPPORTED = """
func.func @main(%a: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %0 = stablehlo.cholesky %a, lower = true : tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A module, its package (built in this process), and input arrays."""
    d = tmp_path_factory.mktemp("cli")
    (d / "add.mlir").write_text(ADD_TANH)
    from_stablehlo(ADD_TANH, name="add").save(d / "add.jdisc")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    np.save(d / "a.npy", a)
    np.save(d / "b.npy", b)
    np.save(d / "b2.npy", b[:2])
    np.save(d / "i.npy", b.astype(np.int32))
    np.savez(d / "ab.npz", a=a, b=b)
    (d / "notes.txt").write_text("not an array\n")
    (d / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (d / "broken.mlir").write_text("func.func @main(%a: tensor<4xf32>) { this is not mlir }\n")
    (d / "unsupported.mlir").write_text(UNSUPPORTED)
    data = (d / "add.jdisc").read_bytes()
    (d / "truncated.jdisc").write_bytes(data[:len(data) // 2])
    with zipfile.ZipFile(d / "add.jdisc") as src, zipfile.ZipFile(d / "tampered.jdisc", "w") as dst:
        for name in src.namelist():
            body = src.read(name)
            dst.writestr(name, body.replace(b"tanh", b"tanH") if name == "kernel.c" else body)
    (d / "outdir").mkdir()
    return d, a, b


@pytest.mark.parametrize("command", ["", "bench", "compile", "run", "inspect", "cache"])
def test_help(command):
    proc = run_jdisc(*command.split(), "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: jdisc {command}".rstrip())


def test_version_and_usage_errors():
    proc = run_jdisc("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"jdisc {jdisc.__version__}"
    assert run_jdisc().returncode == 2                      # no command
    bad = run_jdisc("cache", "frob")
    assert bad.returncode == 2 and "invalid choice: 'frob'" in bad.stderr


def test_console_script_is_registered():
    import tomllib
    from jdisc import cli
    from subprocess_support import REPO
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["scripts"]["jdisc"] == "jdisc.cli:main" and callable(cli.main)
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["plot"])


def test_compile_run_inspect(files, tmp_path):
    d, a, b = files
    proc = run_jdisc("compile", d / "add.mlir", "-o", tmp_path / "m.jdisc")
    assert proc.returncode == 0, proc.stderr
    assert "in   args[0]: f32[d0_0, 4]" in proc.stdout
    # inputs by position and by name
    proc = run_jdisc("run", tmp_path / "m.jdisc", "--input", f"0={d / 'a.npy'}",
                     "--input", f"args[1]={d / 'b.npy'}", "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "result[0]: float32[3, 4] ->" in proc.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out" / "result_0.npy"), np.tanh(a + b),
                               rtol=1e-6, atol=1e-6)
    proc = run_jdisc("inspect", tmp_path / "m.jdisc", "--dot", tmp_path / "g.dot")
    assert proc.returncode == 0, proc.stderr
    for text in ("jdisc package 'add'", "library: not loaded", "member lib.so", "constraints:",
                 "jd_k0_add_tanh  [loop]", "stablehlo.tanh", "peak intermediate memory"):
        assert text in proc.stdout, text
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith('digraph "add" {') and "in0 -> k0" in dot and "k0 -> out0" in dot
    assert "add, tanh" in dot
    proc = run_jdisc("inspect", d / "add.mlir")
    assert proc.returncode == 0 and "jd_k0_add_tanh" in proc.stdout


def test_package_mode_follows_the_umask_and_run_warns_before_casting(files, tmp_path):
    d, a, b = files
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        out = tmp_path / f"m{umask:o}.jdisc"
        proc = subprocess.run(["sh", "-c", f"umask {umask:03o} && exec \"$0\" -m jdisc compile "
                               f"\"$1\" -o \"$2\"", sys.executable, d / "add.mlir", out],
                              env=env_with(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(os.stat(out).st_mode) == mode, (oct(umask), oct(os.stat(out).st_mode))
    np.save(tmp_path / "a64.npy", a.astype(np.float64))
    proc = run_jdisc("run", tmp_path / "m22.jdisc", "--input", f"0={tmp_path / 'a64.npy'}",
                     "--input", f"1={d / 'b.npy'}", "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == ("warning: input 'args[0]' is float64 but the package takes "
                                   "float32: casting it to float32")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "result_0.npy"), np.tanh(a + b),
                               rtol=1e-6, atol=1e-6)


def test_inspect_into_a_closed_pipe_exits_quietly(files, tmp_path):
    """`jdisc inspect m | head`: head exits before jdisc writes; the reader closed the pipe
    first here (every write fails with EPIPE), and jdisc exits 0 without a traceback."""
    d, _, _ = files
    proc = subprocess.Popen([sys.executable, "-m", "jdisc", "inspect", str(d / "add.mlir")],
                            env=env_with(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                   # before jdisc has compiled anything to print
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0 and err == "", err


def test_compile_bytecode(files, tmp_path):
    from jaxlib.mlir import ir
    from jdisc.dynamic_passes.importer import mlir_import
    d, a, b = files
    module = mlir_import.parse_module(ADD_TANH, mlir_import.make_context())
    with open(tmp_path / "add.mlirbc", "wb") as f:
        module.operation.write_bytecode(f)
    assert (tmp_path / "add.mlirbc").read_bytes().startswith(b"ML\xefR")
    assert isinstance(module, ir.Module)
    proc = run_jdisc("compile", tmp_path / "add.mlirbc", "-o", tmp_path / "bc.jdisc")
    assert proc.returncode == 0, proc.stderr
    out = jdisc.load(tmp_path / "bc.jdisc")(a, b)
    np.testing.assert_allclose(np.asarray(out[0]), np.tanh(a + b), rtol=1e-6, atol=1e-6)


def test_compile_a_serialized_jax_export(tmp_path):
    import jax
    import jax.numpy as jnp
    from jax import export
    n, = export.symbolic_shape("tokens")
    exp = export.export(jax.jit(lambda x, y: jnp.tanh(x + y)))(
        jax.ShapeDtypeStruct((n, 4), jnp.float32), jax.ShapeDtypeStruct((n, 4), jnp.float32))
    (tmp_path / "m.jaxexport").write_bytes(exp.serialize())
    proc = run_jdisc("compile", tmp_path / "m.jaxexport", "-o", tmp_path / "m.jdisc")
    assert proc.returncode == 0, proc.stderr
    assert "in   args[0]: f32[tokens, 4]" in proc.stdout
    a, b = (np.random.default_rng(i).standard_normal((5, 4)).astype(np.float32) for i in (0, 1))
    out = jdisc.load(tmp_path / "m.jdisc")(a, b)
    assert out.shape == (5, 4)                      # one result: an array, as jax returns it
    np.testing.assert_allclose(np.asarray(out), np.tanh(a + b), rtol=1e-6, atol=1e-6)


def test_run_exported_model_by_input_name(tmp_path):
    import jax.numpy as jnp

    def mlp(params, x):
        return jnp.maximum(x @ params["w"], 0.0) @ params["v"]
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((5, 7)).astype(np.float32),
              "v": rng.standard_normal((7, 2)).astype(np.float32)}
    x = rng.standard_normal((6, 5)).astype(np.float32)
    jdisc.export_package(mlp, params, x, dynamic_axes=(None, {0: "batch"}),
                 bake_params=("params",)).save(tmp_path / "mlp.jdisc")
    np.save(tmp_path / "x.npy", x)
    proc = run_jdisc("run", tmp_path / "mlp.jdisc", "--input", f"x={tmp_path / 'x.npy'}",
                     "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "result.npy"),
                               np.maximum(x @ params["w"], 0) @ params["v"], rtol=1e-5, atol=1e-5)


BAD_INPUT = [
    ("compile", "compile {d}/missing.mlir -o {t}/x.jdisc", "cannot read .*missing.mlir"),
    ("compile", "compile {d}/garbage.bin -o {t}/x.jdisc", "neither StableHLO text nor MLIR"),
    ("compile", "compile {d}/broken.mlir -o {t}/x.jdisc", "is not valid StableHLO"),
    ("compile", "compile {d}/unsupported.mlir -o {t}/x.jdisc",
     "cannot compile 1 op.* stablehlo.cholesky at .*not supported"),
    ("compile", "compile {d}/add.mlir -o {d}/outdir", "is a directory"),
    ("run", "run {d}/missing.jdisc --output {t}/o", "cannot read package"),
    ("run", "run {d}/truncated.jdisc --output {t}/o", "not a complete jdisc package"),
    ("run", "run {d}/tampered.jdisc --input 0={d}/a.npy --input 1={d}/b.npy --output {t}/o",
     "member kernel.c has SHA-256"),
    ("run", "run {d}/add.mlir --output {t}/o", "not a complete jdisc package"),
    ("run", "run {d}/add.jdisc --input {d}/a.npy --output {t}/o", "expected NAME=FILE.npy"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --output {t}/o", r"needs input\(s\)"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --input 0={d}/b.npy --output {t}/o",
     "given twice"),
    ("run", "run {d}/add.jdisc --input x={d}/a.npy --input 1={d}/b.npy --output {t}/o",
     "has no input 'x'"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --input 1={d}/nope.npy --output {t}/o",
     "cannot read .*nope.npy"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --input 1={d}/notes.txt --output {t}/o",
     "cannot read .*notes.txt as a .npy array"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --input 1={d}/ab.npz --output {t}/o",
     "is an .npz archive"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --input 1={d}/b2.npy --output {t}/o",
     r"axis 0 must match.*d0_0 = 3, d1_0 = 2"),
    ("run", "run {d}/add.jdisc --input 0={d}/a.npy --input 1={d}/i.npy --output {t}/o",
     "has dtype int32 but the function was compiled for float32"),
    ("inspect", "inspect {d}/missing.mlir", "cannot read"),
    ("inspect", "inspect {d}/broken.mlir", "is not valid StableHLO"),
    ("inspect", "inspect {d}/truncated.jdisc", "not a complete jdisc package"),
    ("bench", "bench --workloads W9", r"unknown workload\(s\) \['W9'\]"),
    ("bench", "bench --shapes 0", "must be at least 1"),
    ("bench", "bench --busy -1", "between 0 and 64 busy processes"),
]


@pytest.mark.parametrize("command,args,reason", BAD_INPUT,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(BAD_INPUT)])
def test_bad_input_is_one_line(files, tmp_path, command, args, reason):
    import re
    d = files[0]
    proc = run_jdisc(*args.format(d=d, t=tmp_path).split())
    line = error_line(proc, command)
    assert re.search(reason, line), line
    assert not (tmp_path / "o").exists() and not (tmp_path / "x.jdisc").exists()


def test_two_processes_compile_once(files, tmp_path, cache, counting_cc):
    """Both compile the same program at once: one C compile, two working packages."""
    d, a, b = files
    procs = [start_jdisc("compile", d / "add.mlir", "-o", tmp_path / f"p{i}.jdisc",
                         JDISC_TEST_CC_SLEEP="1") for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert counting_cc() == 1
    libs = set()
    for i in range(2):
        with zipfile.ZipFile(tmp_path / f"p{i}.jdisc") as zf:
            libs.add(hashlib.sha256(zf.read("lib.so")).hexdigest())
        out = jdisc.load(tmp_path / f"p{i}.jdisc")(a, b)
        np.testing.assert_allclose(np.asarray(out[0]), np.tanh(a + b), rtol=1e-6, atol=1e-6)
    assert len(libs) == 1


def test_cache_info_and_clear(tmp_path, cache, counting_cc):
    from jdisc.custom_calls import compiler
    compiler.build("/* jdisc cli cache test */ int jd_one(void) { return 1; }\n")
    cache.joinpath("notes.txt").write_text("mine\n")      # not the cache's: must survive
    cache.joinpath("zz").mkdir()
    info = run_jdisc("cache", "info")
    assert info.returncode == 0, info.stderr
    assert f"cache directory: {cache}" in info.stdout
    assert "entries: 1 (1 with a valid library)" in info.stdout
    clear = run_jdisc("cache", "clear")
    assert clear.returncode == 0 and f"removed 1 cache entry from {cache}" in clear.stdout
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt", "zz"]
    assert "entries: 0" in run_jdisc("cache", "info").stdout


def test_bench_tiny(tmp_path):
    pytest.importorskip("matplotlib")
    proc = run_jdisc("bench", "--quick", "--shapes", "1", "--repeats", "1", "--workloads", "W2",
                     "--plot", tmp_path / "lat.png", "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    assert "W2: LayerNorm+GELU+residual+softmax" in proc.stdout     # the table
    assert "jdisc ms" in proc.stdout and "compiles: 1" in proc.stdout
    assert "worst shape (steady state): " in proc.stdout
    assert "[W2 1/1] B=" in proc.stderr and "done in" in proc.stderr  # progress
    assert (tmp_path / "lat.png").read_bytes().startswith(b"\x89PNG")
    assert '"W2"' in (tmp_path / "r.json").read_text()
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith(("verdict:", "warning:"))]
    assert last and last[0].startswith("verdict: jdisc ") and \
        " of 1 shapes in steady state" in last[0] and "1 jdisc compile(s)" in last[0], last


def test_bench_decode_loop(tmp_path, monkeypatch):
    # W7 (jdisc/bench/decode.py): every side runs the same tokens, and jdisc's logits match
    # the per-length jax.jit side's; a tiny loop here (the bench runs 16 + 128 steps)
    from jdisc.bench import verdict
    from jdisc.bench.decode import print_decode, run_decode
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path / "unused"))
    dirs = iter(range(100))
    res = run_decode(2, 3, 1, lambda: str(tmp_path / f"c{next(dirs)}"))
    rows = res["rows"]
    assert set(rows) == {"jdisc", "padded", "per_length"}
    for side, r in rows.items():     # f32 through 2 layers: a few ulps of logits of size ~10
        assert r["max_abs_diff"] < 1e-4 and r["end_to_end"] > r["steady"] > 0, (side, r)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_decode(res)
    assert "| jdisc |" in out.getvalue() and "2 prompt + 3 new tokens" in out.getvalue()
    assert verdict({}, 0, [], res)[0].startswith("verdict: W7 decode loop, jdisc / padded")
    proc = run_jdisc("bench", "--workloads", "W7", "--plot", tmp_path / "p.png")
    assert "W7 has none" in error_line(proc, "bench")


def test_bench_shapes_are_small_odd_prime_and_large_and_follow_the_seed():
    from jdisc.bench import draw_shapes, release_seed
    shapes = draw_shapes(30, release_seed(), None)
    assert len(set(shapes)) == 30 and shapes == draw_shapes(30, release_seed(), None)
    assert shapes != draw_shapes(30, release_seed() + 1, None)
    sizes = [s for _, s in shapes]
    assert min(sizes) <= 40 and max(sizes) >= 384 and any(s % 2 for s in sizes)
    assert any(all(s % q for q in range(2, int(s ** 0.5) + 1)) for s in sizes)    # a prime
    assert all(1 <= b <= 8 and 16 <= s <= 512 for b, s in shapes)
    assert all(b * s <= 1024 for b, s in draw_shapes(4, 0, 1024))


def test_bench_verdict_and_busy_warning():
    from jdisc.bench import verdict
    res = {"W1": {"rows": [{"ratio": 0.8}, {"ratio": 1.2}, {"ratio": 0.9}], "jdisc_compiles": 1,
                  "stream": {"ratio": 0.5}}}
    quiet = verdict(res, 0, [0, 0, 1])
    assert quiet == ["verdict: jdisc faster than XLA on 2 of 3 shapes in steady state (slower "
                     "on 1); 1 jdisc compile(s) for 1 workload(s) against 3 XLA compiles; the "
                     "cold stream faster on 1 of 1 workload(s)"]
    busy = verdict(res, 2, [4, 5, 4])          # two --busy loops and two others
    assert len(busy) == 2 and busy[1].startswith("warning: the machine was busy while this "
                                                 "measured (a median of 2 other runnable")
    assert len(verdict(res, 2, [2, 3, 2])) == 1     # only the --busy loops: no warning


def test_bench_plot_without_matplotlib(tmp_path):
    fake = tmp_path / "site" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    proc = run_jdisc("bench", "--workloads", "W2", "--plot", tmp_path / "p.png",
                     PYTHONPATH=str(tmp_path / "site"))
    line = error_line(proc, "bench")
    assert "--plot needs matplotlib: pip install 'jdisc[plot]'" in line
    assert "warm-up" not in proc.stderr           # refused before anything ran


@pytest.mark.slow
def test_bench_quick_all_workloads(tmp_path):
    proc = run_jdisc("bench", "--quick", "--plot", tmp_path / "lat.png", timeout=3000)
    assert proc.returncode == 0, proc.stderr
    for name in ("W1", "W2", "W3", "W4"):
        assert f"\n{name}: " in proc.stdout


def test_busy_neighbours_run_while_timing_and_end_after():
    from jdisc.bench import busy_neighbours
    with busy_neighbours(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        time.sleep(0.3)
    assert all(p.poll() is not None for p in procs)
