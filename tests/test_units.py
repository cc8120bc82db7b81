"""A program's C is translation units (lowering/units.py) compiled through a unit cache: a
kernel that two programs (or one program twice) contain compiles once, the runtime unit compiles
once for every program, and what is compiled is what the program's C file says."""

import os
import re
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc.custom_calls import cache_admin, compiler
from jdisc.lowering import units
from jdisc.lowering.stitch import runs_rows_across

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@pytest.fixture
def unit_compiles(tmp_path, monkeypatch):
    """JDISC_CC logging each unit it compiles (its C file); returns the list so far."""
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path / "cache"))
    log = tmp_path / "units.log"
    script = tmp_path / "cc-wrapper"
    script.write_text("#!/bin/sh\n"
                      'case " $* " in *" -c "*)\n'
                      f'  for a in "$@"; do case "$a" in *.c) echo "$a" >> "{log}";; esac; done\n'
                      "esac\n"
                      'exec cc "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("JDISC_CC", str(script))
    return lambda: log.read_text().splitlines() if log.exists() else []


def _kinds(paths):
    """What each compiled unit is: runtime, launcher or a kernel."""
    out = []
    for p in paths:
        text = open(p).read()
        out.append("launcher" if "jd_run(" in text else
                   "runtime" if "jd_set_threads" in text else
                   "skinny" if "JD_RT void jd_skinny_f32(" in text else "kernel")
    return sorted(out)


def test_a_kernel_shared_by_two_programs_compiles_once(unit_compiles):
    def layer(x, b):
        return jnp.tanh(x * 2.0 + b)
    f = jdisc.jit(lambda x, b: layer(x, b).sum(axis=-1), dynamic_axes=({0: "n"}, None))
    g = jdisc.jit(lambda y, b: jnp.exp(layer(y, b)), dynamic_axes=({0: "rows"}, None))
    x, b = np.ones((5, 8), np.float32), np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(f(x, b), np.tanh(x * 2 + b).sum(-1), rtol=1e-6)
    first = unit_compiles()
    assert _kinds(first).count("runtime") == 1 and _kinds(first).count("launcher") == 1
    np.testing.assert_allclose(g(x, b), np.exp(np.tanh(x * 2 + b)), rtol=1e-6)
    second = unit_compiles()[len(first):]
    # g's launcher, and its one kernel (tanh then exp, fused): not the runtime
    assert _kinds(second) == ["kernel", "launcher"], second
    assert f.stats()["compiles"] == g.stats()["compiles"] == 1


def test_identical_kernels_in_one_program_are_one_unit(unit_compiles):
    def two_layers(x, w):             # the same elementwise kernel after each GEMM (each
        return jnp.tanh(jnp.tanh(x @ w + 1.0) @ w + 1.0) @ w      # writing over its output)
    f = jdisc.jit(two_layers, dynamic_axes=({0: "n"}, None))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_allclose(f(x, w), np.tanh(np.tanh(x @ w + 1) @ w + 1) @ w, rtol=1e-5,
                               atol=1e-6)
    source = f.compiled_for(x, w).c_source
    names = [line.split()[2] for line in source.splitlines() if line.startswith(units.MARK)]
    assert len(names) == len(set(names))
    tanh_units = [n for n in names if n.startswith("jd_u")
                  and "jd_tanhf(" in source.split(units.MARK + n)[1].split(units.MARK)[0]]
    assert len(tanh_units) == 1, names
    assert source.count(f"{tanh_units[0]}(") == 1 + 1 + 2   # defined, declared, called twice
    compiled = [open(p).read() for p in unit_compiles()]
    kernels = [n for n in names if n.startswith("jd_u")]
    for n in kernels:           # each kernel compiled once: here both in one bundle
        assert sum(_defines(text, n) for text in compiled) == 1, n
    # the launcher, the runtime, the bundle, and the f32 GEMMs' loops for a few rows
    assert len(compiled) == 4 and names[-2:] == ["skinny", "runtime"], names


def _defines(text, kernel):
    return re.search(rf"^JD_KERNEL [\w ]*\bint {kernel}\(", text, re.M) is not None


def _kernel_names(f, *args):
    source = f.compiled_for(*args).c_source
    return [line.split()[2] for line in source.splitlines()
            if line.startswith(units.MARK) and line.split()[2].startswith("jd_u")]


def _tanh_then_exp(x, w):            # two kernels, a GEMM between them
    return jnp.exp(jnp.tanh(x + 1.0) @ w * 3.0)


def test_a_kernel_compiled_in_a_bundle_serves_the_next_program(unit_compiles):
    f = jdisc.jit(_tanh_then_exp, dynamic_axes=({0: "n"}, None))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(4, 4)
    want = np.exp(np.tanh(x + 1) @ w * 3)
    np.testing.assert_allclose(f(x, w), want, rtol=1e-5)
    names = _kernel_names(f, x, w)
    bundled = [open(p).read() for p in unit_compiles()]
    assert len(names) >= 2 and len(bundled) == 4    # launcher, runtime, skinny, one bundle
    assert all(sum(_defines(t, n) for t in bundled) == 1 for n in names)
    # another program with the first kernel (its launcher differs): only the launcher compiles
    g = jdisc.jit(lambda x, w: jnp.tanh(x + 1.0) @ w, dynamic_axes=({0: "n"}, None))
    np.testing.assert_allclose(g(x, w), np.tanh(x + 1) @ w, rtol=1e-5, atol=1e-6)
    assert set(_kernel_names(g, x, w)) <= set(names)
    assert _kinds(unit_compiles()[len(bundled):]) == ["launcher"]
    # `jdisc cache info` counts the bundle's object once, not once per kernel filed under it
    root = os.environ["JDISC_CACHE_DIR"]
    unit_files = [f.stat() for f in (Path(root) / "units").rglob("*") if f.is_file()]
    once = {(st.st_dev, st.st_ino): st.st_size for st in unit_files}
    assert len(once) < len(unit_files)          # hard links
    entries = sum(f.stat().st_size for e in cache_admin.entries(root) for f in e.iterdir()
                  if f.is_file())
    assert cache_admin.info(root)["bytes"] == entries + sum(once.values())


def test_a_kernel_in_two_objects_links_once(unit_compiles, tmp_path):
    """A kernel's entry is weak: a program may link a bundle holding it and its own object."""
    f = jdisc.jit(_tanh_then_exp, dynamic_axes=({0: "n"}, None))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.linspace(-0.5, 0.5, 16, dtype=np.float32).reshape(4, 4)
    f(x, w)
    first, second = _kernel_names(f, x, w)[:2]
    unit_of = {}
    for path in unit_compiles():
        for n in (first, second):
            if _defines(open(path).read(), n):
                unit_of[n] = path
    assert unit_of[first] == unit_of[second]       # one bundle
    # the second kernel's own entry is gone (as when another compile held it while the bundle
    # was published): the next program finds the first kernel in the bundle and compiles the
    # second alone, so both objects define it
    units_dir = tmp_path / "cache" / "units"
    removed = 0
    for obj in units_dir.glob("*/*.c"):
        text = obj.read_text()
        if units.body(text) is not None and _defines(text, second) \
                and not _defines(text, first):
            obj.with_suffix(".o").unlink()
            removed += 1
    assert removed == 1
    g = jdisc.jit(lambda x, w: (_tanh_then_exp(x, w), x * 2.0), dynamic_axes=({0: "n"}, None))
    got = g(x, w)
    np.testing.assert_allclose(got[0], np.exp(np.tanh(x + 1) @ w * 3), rtol=1e-5)
    np.testing.assert_allclose(got[1], x * 2, rtol=0)
    again = [open(p).read() for p in unit_compiles()[2 + 1:]]
    assert any(_defines(t, second) and not _defines(t, first)
               for t in again), "the second kernel did not compile alone"


def test_bundles_fill_up_to_their_size_longest_first():
    sizes = {0: 9000, 1: 5000, 2: 3000, 3: 2500, 4: 400, 5: compiler.BUNDLE_CHARS}
    groups = compiler._bundles(sizes)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert groups[0] == [5]
    for g in groups:
        assert len(g) == 1 or sum(sizes[i] for i in g) <= compiler.BUNDLE_CHARS
    assert len(groups) == 3


def test_the_file_splits_into_what_was_compiled():
    source = units.marker("launcher", "-O1") + "int a;\n" + units.marker("jd_u1", "-O3") + \
        "int b;\n"
    assert units.split("/* head */\n" + source) == [
        ("launcher", "-O1", "/* head */\nint a;"), ("jd_u1", "-O3", "int b;\n")]
    assert units.split("int old_single_file;\n") == [("program", units.KERNEL_OPT,
                                                      "int old_single_file;\n")]


def test_each_level_compiles_with_its_own_flags():
    cflags = ["-std=c99", "-O3", "-fPIC", "-shared", "-march=native"]
    stitch = compiler._unit_flags(cflags, units.STITCH_OPT, False)
    assert stitch == ["-std=c99", *units.LEVELS[units.STITCH_OPT], "-fPIC", "-march=native",
                      "-c"]
    assert "-O3" not in stitch and "-fvect-cost-model=dynamic" in stitch  # vectorised loops
    assert compiler._unit_flags(cflags, units.KERNEL_OPT, False)[1] == "-O3"
    assert compiler._unit_flags(cflags, "-O1", False)[1] == "-O1"
    assert compiler._unit_flags(cflags, "-Ofancy", False)[1] == "-O3"     # unknown: the base
    assert compiler._unit_flags(cflags, units.STITCH_OPT, True) == \
        ["-std=c99", "-O3", "-fPIC", "-march=native", "-c"]     # the sanitizer's own -O


def test_stitch_kernels_with_rows_of_unknown_length_compile_at_their_level(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path))
    f = jdisc.jit(lambda x, y: (jax.nn.softmax(jnp.tanh(x) * 2.0, axis=-1),
                                jax.nn.softmax(y, axis=-1), x.T + 1.0),
                  dynamic_axes=({0: "n", 1: "m"}, {0: "n"}), bridge=False)
    x = np.linspace(-3, 3, 37 * 5, dtype=np.float32).reshape(37, 5)
    y = np.linspace(-3, 3, 37 * 80, dtype=np.float32).reshape(37, 80)
    got = f(x, y)
    for out, z in ((got[0], np.tanh(x) * 2.0), (got[1], y)):
        want = np.exp(z - z.max(1, keepdims=True))
        np.testing.assert_allclose(out, want / want.sum(1, keepdims=True), rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(got[1 + 1], x.T + 1.0)
    entry = f.compiled_for(x, y)
    stitch = [k for k in entry.program.kernels if k.kind == "stitch"]
    # x's rows (m columns) run across the rows when short; y's (80 columns) are long
    assert sorted(map(runs_rows_across, stitch)) == [False, True]
    assert any(k.kind != "stitch" for k in entry.program.kernels)
    split = units.split(entry.c_source)
    assert [opt for name, opt, _ in split if name == "launcher"] == [units.LAUNCHER_OPT]
    kernel_units = [(opt, text) for name, opt, text in split if name.startswith("jd_u")]
    # the one unit with blocks of rows (`across`) is the one at the stitch level
    assert sorted(opt for opt, _ in kernel_units) == \
        sorted([units.STITCH_OPT] + [units.KERNEL_OPT] * (len(kernel_units) - 1))
    for opt, text in kernel_units:
        assert (opt == units.STITCH_OPT) == ("const int across" in text)


def test_a_unit_that_fails_names_both_files(tmp_path, monkeypatch):
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path))
    source = (units.marker("launcher", "-O1") + "int jd_ok(void) { return 1; }\n"
              + units.marker("jd_ubroken", "-O3") + "int jd_bad(void) { return nope; }\n")
    with pytest.raises(jdisc.CompileError) as info:
        compiler.build(source)
    msg = str(info.value)
    assert "nope" in msg and "the program's C file:" in msg and "kernel.c" in msg
    assert "/units/" in msg       # the failing unit's own C file


def test_only_programs_with_float32_gemms_carry_the_skinny_unit():
    """jd_skinny.h is a unit of its own, linked where a dot runs on float32 (jd_gemm.h finds
    its entry NULL elsewhere and calls sgemm/dgemm)."""
    import jax

    def unit_names(f, *args):
        source = f.compiled_for(*args).c_source
        return [line.split()[2] for line in source.splitlines() if line.startswith(units.MARK)]
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.ones((4, 5), np.float32)
    mm = jdisc.jit(lambda x, w: x @ w, dynamic_axes=({0: "n"}, None))
    assert "skinny" in unit_names(mm, x, w)
    ew = jdisc.jit(lambda x: jnp.tanh(x) * 2.0, dynamic_axes=({0: "n"},))
    assert "skinny" not in unit_names(ew, x)
    with jax.enable_x64(True):
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        mm64 = jdisc.jit(lambda x, w: x @ w, dynamic_axes=({0: "n"}, None))
        assert "skinny" not in unit_names(mm64, x64, w64)
        np.testing.assert_allclose(mm64(x64, w64), x64 @ w64, rtol=1e-12)


def _kernel_with_body(chars: int, seed: int) -> str:
    """A kernel unit whose own code (its body) is about `chars` characters of C."""
    lines = [f"JD_KERNEL int JD_SELF(float *restrict o) {{ /* {seed} */"]
    while sum(map(len, lines)) < chars:
        lines.append(f"  o[{len(lines)}] = o[{len(lines) - 1}] * 1.5f + {seed}.0f;")
    return units.kernel_unit("\n".join(lines + ["  return 0;", "}"]))[1]


@pytest.mark.fast
def test_compile_order_counts_a_bundles_head_once():
    # the compiles run longest first: a bundle of five short kernels shares one head (the
    # declarations before each body), and costs less than one kernel with twice their code
    # (W1's softmax: counted with five heads, a bundle ran first and the softmax after it)
    short = [_kernel_with_body(1000, k) for k in range(5)]
    long = _kernel_with_body(10000, 9)
    assert all(units.body(u) is not None for u in short + [long])
    bundle = units.bundle_cost(short)
    assert bundle < units.compile_cost("k", units.KERNEL_OPT, long)
    assert bundle < sum(units.compile_cost("k", units.KERNEL_OPT, u) for u in short)
    assert units.bundle_cost([long]) == units.compile_cost("k", units.KERNEL_OPT, long)


def test_the_launcher_is_O0_unless_it_runs_loops():
    """The launcher's checks and calls run once per call (-O0 compiles fastest); a launcher
    with host control flow runs its loops' iterations itself, at -O1."""
    from conftest import to_ir
    from jdisc.lowering.codegen import generate

    def level(fn):
        source = generate(to_ir(fn, ({0: "n"},), np.ones(5, np.float32))).source
        return [opt for name, opt, _ in units.split(source) if name == "launcher"]

    assert units.LAUNCHER_OPT == "-O0" and units.LOOP_LAUNCHER_OPT == "-O1"
    assert level(lambda x: jnp.tanh(x) * 2) == ["-O0"]
    assert level(lambda x: jax.lax.while_loop(lambda c: c[0] < 10,
                                              lambda c: (c[0] + 1, c[1] * 2), (0, x))[1]) == \
        ["-O1"]
    assert level(lambda x: jax.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x)) == ["-O1"]
