"""The compile cache's test helpers: a tiny C library, calling it, and building it in a child
process (test_compiler_cache.py, test_cache_policy.py)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import uuid
from pathlib import Path

from jdisc.custom_calls import compiler

REPO = Path(__file__).resolve().parent.parent


def add_source(tag: str) -> str:
    # A unique comment makes a new cache entry even if a stale cache dir were shared.
    return f"/* {tag} {uuid.uuid4().hex} */\nint jd_add(int a, int b) {{ return a + b; }}\n"


CHILD = """
import ctypes, sys
from jdisc.custom_calls import compiler
lib = compiler.build(open(sys.argv[1]).read())
f = lib.handle.jd_add
f.restype = ctypes.c_int
f.argtypes = [ctypes.c_int, ctypes.c_int]
print(f(40, 2), lib.cache_hit, lib.path)
"""


def child(src_file: Path, env_extra=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.update(env_extra or {})
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(src_file)], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def run_child(src_file: Path) -> tuple[int, bool, str]:
    proc = child(src_file)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    value, hit, path = out.split()
    return int(value), hit == "True", path


def call_add(lib: compiler.Library, a: int, b: int) -> int:
    f = lib.handle.jd_add
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_int, ctypes.c_int]
    return f(a, b)
