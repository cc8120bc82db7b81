"""Sanitizer mode: the differential tests again, with every generated library built with
ASan/UBSan (JDISC_SANITIZE=1) and the sanitizer runtimes preloaded into Python.

Run with `pytest -m sanitizer`; CI runs it after the default suite.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from jdisc.custom_calls.compiler import compiler_command
from test_program_fuzz import NOT_JDISCS    # the findings that are not jdisc's bugs

pytestmark = pytest.mark.sanitizer
HERE = os.path.dirname(os.path.abspath(__file__))


def _runtime(lib: str) -> str | None:
    try:
        out = subprocess.run(compiler_command() + [f"-print-file-name={lib}"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def _env(cache: str) -> dict:
    libs = [_runtime("libasan.so"), _runtime("libubsan.so")]
    if None in libs:
        pytest.skip("the C compiler ships no ASan/UBSan runtime")
    env = dict(os.environ, JDISC_SANITIZE="1", JDISC_CACHE_DIR=cache,
               LD_PRELOAD=" ".join(libs), ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    return env


def test_sanitizer_catches_an_out_of_bounds_write(tmp_path):
    # the canary: proves the mode is live, so a green run below means something
    code = ("from jdisc.custom_calls.compiler import build\n"
            "lib = build('#include <stdlib.h>\\n int f(int n) { int *p = malloc(4 * n);"
            " p[n] = 1; int r = p[0]; free(p); return r; }', sanitize=True)\n"
            "lib.handle.f(4)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(str(tmp_path)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "heap-buffer-overflow" in proc.stderr


# The differential tests that reach every kind of generated code: elementwise and fused
# kernels of every op family and dtype, bounds checks on bad input, convolutions and pooling,
# bitcasts, GEMMs on the pool and their epilogues, host control flow (while / cond / scan in
# the launcher) and the LAPACK calls (their complex forms: the real ones use the same emitter
# with fewer workspaces), the FFTs.
# Left out for time (about 4 minutes of 2-core CI): the larger models, which combine the same
# kernels; the RNG bit-exactness tests; the decode loops, which repeat the control-flow tests
# at a larger scale; the real-valued LAPACK tests; the f64 FFTs (the C text of the f32 ones in
# double).
SANITIZED = [
    "test_bad_input.py", "test_fusion.py", "test_ops.py", "test_dtypes.py",
    "test_bitcast.py", "test_cnn_kernels.py", "test_conv_reference.py", "test_gemm_pool.py",
    "test_gemm_epilogue.py", "test_control_flow.py", "test_linalg.py", "test_fft.py"]
SKIPPED = "decode or (test_linalg and float32) or test_one_axis[True]"


def test_differential_suite_under_asan_ubsan():
    cache = tempfile.mkdtemp(prefix="jdisc-asan-")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "2",
             "-k", f"not ({SKIPPED})", *(os.path.join(HERE, f) for f in SANITIZED)],
            env=_env(cache), capture_output=True, text=True, timeout=1800, cwd=HERE)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout, tail


# Batches of the whole-program fuzzer's seeded tier (tests/test_program_fuzz.py), odd seeds:
# every kernel loop of more than one row runs in 3 pieces (JDISC_SPLIT_PIECES), so ASan sees
# the pieces' bounds and scratch buffers at the fuzzer's small sizes, beside in-place results
# (every input donated) and calls inside jax.jit.
FUZZ_SEEDS = (20261203, 20261205, 20261207, 20261209)

_FUZZ = """
import sys
sys.path.insert(0, {here!r})
import program_fuzz as pf
found = pf.run_batches(list({seeds!r}), 8, workers=2, shrink_budget_s=0)
bad = [fd for fds in found.values() for fd in fds if fd.failure.kind not in {not_jdiscs!r}]
print("\\n\\n".join(fd.report() for fd in bad) or "fuzz batches passed")
sys.exit(1 if bad else 0)
"""


def test_fuzz_batches_in_pieces_under_asan_ubsan():
    cache = tempfile.mkdtemp(prefix="jdisc-asan-fuzz-")
    try:
        proc = subprocess.run([sys.executable, "-c", _FUZZ.format(here=HERE, seeds=FUZZ_SEEDS,
                                                                  not_jdiscs=tuple(NOT_JDISCS))],
                              env=_env(cache), capture_output=True, text=True, timeout=1800,
                              cwd=HERE)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0 and "fuzz batches passed" in proc.stdout, tail
