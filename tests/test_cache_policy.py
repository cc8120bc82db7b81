"""The compile cache in real use: entries of another jdisc version are never used, a damaged
entry is rebuilt without ever being loaded, and `jdisc cache info|clear` (cache_admin) count and
remove only what is the cache's. (Atomic writes, one compile for two racing processes and
truncated entries: test_compiler_cache.py; the same through `jdisc compile`: test_cli.py.)"""

import os
import fcntl
import uuid

from jdisc.custom_calls import cache_admin, compiler
from cache_support import call_add, run_child


def _source(tag: str) -> str:
    return f"/* {tag} {uuid.uuid4().hex} */\nint jd_add(int a, int b) {{ return a + b; }}\n"


def test_entries_of_another_jdisc_version_are_not_used(cache, counting_cc, monkeypatch):
    src = _source("versions")
    mine, mine_version = compiler.build(src), compiler.__version__
    monkeypatch.setattr(compiler, "_jdisc_fingerprint", None)    # recomputed with ...
    monkeypatch.setattr(compiler, "__version__", "0.0.0-older")   # ... another version
    other = compiler.build(src)
    assert other.key != mine.key and other.path != mine.path and not other.cache_hit
    assert counting_cc() == 2
    assert call_add(other, 2, 3) == 5
    monkeypatch.setattr(compiler, "__version__", mine_version)   # this version again
    monkeypatch.setattr(compiler, "_jdisc_fingerprint", None)
    assert compiler.build(src).key == mine.key and counting_cc() == 2
    assert cache_admin.info(str(cache))["entries"] == 2


def test_damaged_entry_is_rebuilt_never_loaded(cache, counting_cc, tmp_path):
    """A cached lib.so replaced by a library whose constructor leaves a mark, its digest left as
    it was: the next build notices, rebuilds and never maps the impostor."""
    marker = tmp_path / "constructor-ran"
    trap = compiler.build(f'#include <stdio.h>\n__attribute__((constructor)) static void m(void)'
                          f' {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n'
                          f'/* {uuid.uuid4().hex} */\n')
    assert marker.exists()
    marker.unlink()
    src_file = tmp_path / "k.c"
    src_file.write_text(_source("impostor"))
    _, _, so_path = run_child(src_file)          # built in a child: not mapped here
    with open(trap.path, "rb") as f, open(so_path, "wb") as g:
        g.write(f.read())
    lib = compiler.build(src_file.read_text())
    assert not lib.cache_hit and call_add(lib, 40, 2) == 42
    assert not marker.exists()
    assert counting_cc() == 3


def test_info_and_clear_touch_only_cache_entries(cache):
    lib = compiler.build(_source("admin"))
    (cache / "notes.txt").write_text("mine")
    (cache / "ab").mkdir(exist_ok=True)     # (the real entry may share the prefix: 1 in 256)
    (cache / "ab" / "not-a-key").mkdir()
    d = cache_admin.info(str(cache))
    assert (d["entries"], d["valid"]) == (1, 1) and d["bytes"] > 0
    # truncated: counted, not valid. Written as a new file renamed over the entry: truncating
    # the mapped library in place would fault (SIGBUS) when the process unloads it at exit
    with open(lib.path, "rb") as f:
        head = f.read(10)
    with open(lib.path + ".tmp", "wb") as f:
        f.write(head)
    os.replace(lib.path + ".tmp", lib.path)
    assert cache_admin.info(str(cache))["valid"] == 0
    assert "entries: 1 (0 with a valid library)" in cache_admin.format_info(
        cache_admin.info(str(cache)))
    assert cache_admin.clear(str(cache)) == (1, 0)
    assert sorted(p.name for p in cache.iterdir()) == ["ab", "notes.txt"]
    assert (cache / "ab" / "not-a-key").is_dir()


def test_clear_leaves_an_entry_being_compiled(cache):
    busy, idle = compiler.build(_source("busy")), compiler.build(_source("idle"))
    entry = cache / busy.key[:2] / busy.key
    with open(entry / "lock", "a+b") as lock:     # as a compiling process holds it
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert cache_admin.clear(str(cache)) == (1, 1)
    assert entry.is_dir() and not (cache / idle.key[:2] / idle.key).exists()
    assert cache_admin.clear(str(cache)) == (1, 0)
