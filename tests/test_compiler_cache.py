"""The compile cache: build, load, hit across processes, recover from corruption, report errors.

Compiler runs are counted through a JDISC_CC wrapper script that logs each compile (not the
`--version` probe that identifies the compiler) and then runs the real `cc`.
"""

import ctypes
import hashlib
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest

from cache_support import add_source, call_add, child, run_child
from jdisc.custom_calls import compiler, runs
from jdisc.errors import CompileError


def test_build_loads_and_calls(cache, tmp_path, monkeypatch):
    src = add_source("basic")
    lib = compiler.build(src)
    assert call_add(lib, 2, 3) == 5
    assert not lib.cache_hit
    assert len(lib.key) == 64 and int(lib.key, 16) >= 0
    entry = cache / lib.key[:2] / lib.key
    assert Path(lib.path) == entry / "lib.so"
    assert Path(lib.c_path) == entry / "kernel.c"
    assert Path(lib.c_path).read_text() == src
    assert (entry / "lib.so.sha256").is_file()

    again = compiler.build(src)
    assert again.cache_hit and again.handle is lib.handle and again.path == lib.path

    # A different cache dir must not hand back the handle loaded from the first one.
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path / "other"))
    other = compiler.build(src)
    assert not other.cache_hit and other.path != lib.path
    assert call_add(other, 1, 1) == 2


def test_second_process_is_cache_hit(cache, counting_cc, tmp_path):
    src_file = tmp_path / "k.c"
    src_file.write_text(add_source("two-process"))
    assert run_child(src_file)[:2] == (42, False)
    assert counting_cc() == 1
    assert run_child(src_file)[:2] == (42, True)
    assert counting_cc() == 1


@pytest.mark.parametrize("damage", ["truncate", "drop_digest", "flip_byte"])
def test_corrupted_entry_is_rebuilt(cache, counting_cc, tmp_path, damage):
    src_file = tmp_path / "k.c"
    src_file.write_text(add_source("corrupt"))
    _, _, so_path = run_child(src_file)  # built in a child: this process never mapped it
    so = Path(so_path)
    data = so.read_bytes()
    if damage == "truncate":
        so.write_bytes(data[: len(data) // 2])
    elif damage == "drop_digest":
        Path(so_path + ".sha256").unlink()
    else:
        so.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))

    lib = compiler.build(src_file.read_text())
    assert not lib.cache_hit
    assert counting_cc() == 2
    assert call_add(lib, 20, 22) == 42
    assert Path(so_path + ".sha256").read_text().strip() == hashlib.sha256(so.read_bytes()).hexdigest()


def test_bad_c_raises_compile_error(cache):
    src = add_source("bad") + "int broken(void) { return undeclared_name_xyz; }\n"
    with pytest.raises(CompileError) as info:
        compiler.build(src)
    msg = str(info.value)
    assert "undeclared_name_xyz" in msg and "error" in msg
    assert " -c " in msg and "-fPIC" in msg  # the command (of the failing unit)
    key_dirs = [p for p in cache.glob("*/*") if p.is_dir() and len(p.name) == 64]
    assert len(key_dirs) == 1
    c_path = key_dirs[0] / "kernel.c"
    assert str(c_path) in msg and c_path.read_text() == src
    assert not (key_dirs[0] / "lib.so").exists()
    assert [p.name for p in key_dirs[0].iterdir() if p.name.endswith(".tmp")] == []


def test_missing_compiler_is_clear(cache, monkeypatch):
    monkeypatch.setenv("JDISC_CC", "/nonexistent/cc")
    with pytest.raises(CompileError, match="JDISC_CC") as info:
        compiler.build(add_source("nocc"))
    assert "/nonexistent/cc" in str(info.value)


def test_two_processes_compile_once(cache, counting_cc, tmp_path):
    src_file = tmp_path / "k.c"
    src_file.write_text(add_source("race"))
    # The wrapper sleeps during the compile, so the second process arrives while it runs.
    procs = [child(src_file, {"JDISC_TEST_CC_SLEEP": "1"}) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(out.split())
    assert counting_cc() == 1
    assert [r[0] for r in results] == ["42", "42"]
    assert sorted(r[1] for r in results) == ["False", "True"]


def test_threads_compile_once(cache, counting_cc):
    src = add_source("threads")
    libs, errors = [], []

    def work():
        try:
            libs.append(compiler.build(src))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert counting_cc() == 1
    assert len({id(lib.handle) for lib in libs}) == 1
    assert sum(not lib.cache_hit for lib in libs) == 1


def test_cblas_sgemm_links(cache):
    src = (
        f"/* {uuid.uuid4().hex} */\n"
        "#include <cblas.h>\n"
        "void jd_mm2(const float *a, const float *b, float *c) {\n"
        "  scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2,\n"
        "                    1.0f, a, 2, b, 2, 0.0f, c, 2);\n"
        "}\n"
    )
    lib = compiler.build(src)
    F4 = ctypes.c_float * 4
    a, b, c = F4(1, 2, 3, 4), F4(5, 6, 7, 8), F4()
    lib.handle.jd_mm2.restype = None
    lib.handle.jd_mm2(a, b, c)
    assert list(c) == [19.0, 22.0, 43.0, 50.0]


def test_flags_and_sanitize_mode(cache, monkeypatch):
    normal = compiler.compile_flags()
    assert "-O3" in normal and "-march=native" in normal and normal[-1] == "-lm"
    assert any(f.startswith("-lscipy_openblas") for f in normal)
    san = compiler.compile_flags(sanitize=True)
    assert "-O3" not in san and "-fsanitize=address,undefined" in san and "-O1" in san
    monkeypatch.setenv("JDISC_CC", "ccache  cc")
    assert compiler.compiler_command() == ["ccache", "cc"]
    monkeypatch.delenv("JDISC_CC")
    assert compiler.compiler_command() == ["cc"]
    # Sanitize mode gets its own cache key (no compile needed to check that).
    k1 = compiler._cache_key("x", ["cc"], normal)
    k2 = compiler._cache_key("x", ["cc"], san)
    assert k1 != k2


def test_cache_dir_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("JDISC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiler.cache_dir() == str(tmp_path / "xdg" / "jdisc")
    assert (tmp_path / "xdg" / "jdisc").is_dir()
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path / "explicit"))
    assert compiler.cache_dir() == str(tmp_path / "explicit")


def test_links_with_gold_where_it_links_else_with_the_default_linker(cache, monkeypatch):
    real = compiler._run_compiler
    links, broken = [], {"gold": False, "all": False}

    def run(cmd, comp, c_path):
        if "-c" not in cmd:                        # a link
            gold = "-fuse-ld=gold" in cmd
            links.append(gold)
            if broken["all"] or (gold and broken["gold"]):
                raise CompileError(f"link failed ({'gold' if gold else 'default'})")
        return real(cmd, comp, c_path)
    monkeypatch.setattr(compiler, "_run_compiler", run)
    monkeypatch.setattr(compiler, "_linkers", {})
    assert call_add(compiler.build(add_source("gold-1")), 2, 3) == 5
    # with gold (binutils' ld.gold) where the compiler finds it, else the default linker's
    assert links == ([True] if shutil.which("ld.gold") else [True, False])
    # a compiler whose gold link fails: the default linker's, and gold not tried again
    monkeypatch.setattr(compiler, "_linkers", {})
    broken["gold"], links[:] = True, []
    assert call_add(compiler.build(add_source("gold-2")), 2, 3) == 5
    assert call_add(compiler.build(add_source("gold-3")), 1, 3) == 4
    assert links == [True, False, False]
    # a link that fails either way raises the default linker's error and decides nothing
    monkeypatch.setattr(compiler, "_linkers", {})
    broken["all"], links[:] = True, []
    with pytest.raises(CompileError, match=r"link failed \(default\)"):
        compiler.build(add_source("gold-4"))
    assert links == [True, False] and compiler._linkers == {}


def test_compiler_runs_step_back_while_a_caller_waits_on_other_work(tmp_path):
    # the bridge's XLA compile for a new shape (bridge.py) gets the CPUs before jdisc's own
    # C compiles: a run that starts inside yield_cpus, and one running when it begins, are
    # nicer than the process; runs outside it are not
    import os
    base = os.getpriority(os.PRIO_PROCESS, 0)
    want = min(19, base + runs.YIELD_NICE)

    def nice_of_a_run(delay: float, started=None) -> int:
        out = tmp_path / f"nice-{uuid.uuid4().hex}"      # `nice` prints the niceness
        cmd = ["sh", "-c", f'{started or ":"}; sleep {delay}; nice > "$2"', "sh", "-o", str(out)]
        compiler._run_compiler(cmd, ["sh"], "unit.c")
        return int(out.read_text())
    assert nice_of_a_run(0) == base
    with runs.yield_cpus():
        assert nice_of_a_run(0.1) == want
    assert nice_of_a_run(0) == base
    flag = tmp_path / "started"
    result = []
    t = threading.Thread(target=lambda: result.append(nice_of_a_run(1.0, f'touch "{flag}"')))
    t.start()
    while not flag.exists():
        time.sleep(0.005)
    with runs.yield_cpus():
        t.join()
    assert result == [want]


def test_a_compile_reports_what_is_left_of_it(cache):
    # the bridge (bridge.py) weighs this estimate against an XLA compile: a compile with units
    # to build reports once, a cache hit not at all, and only in the thread that asked
    seen = []
    src = add_source("reported")
    other = threading.Thread(target=compiler.build, args=(add_source("elsewhere"),))
    other.start()
    with runs.reporting(seen.append):
        assert call_add(compiler.build(src), 2, 3) == 5
        assert len(seen) == 1 and compiler.LINK_S < seen[0] < 60, seen
        compiler.build(src)
    other.join()
    assert len(seen) == 1
