"""GEMMs of a few rows: OpenBLAS's sgemm against jdisc's skinny loops, one thread.

    python benchmarks/skinny_gemm.py

Builds benchmarks/skinny_gemm.c with jdisc's compiler and flags (the runtime unit's -O1) against
the OpenBLAS jdisc links, and runs it with OpenBLAS on one thread: for [m, k] @ [k, n] at m = 2
to 64 (jdisc uses the loops up to 16, 32 or 64 rows: jd_gemm.h), the microseconds of each
(`sgemm/skinny`), B in L3 and B from memory. The numbers in jd_skinny.h's and jd_gemm.h's
comments come from it. Run with OPENBLAS_CORETYPE unset where the machine sets it
(benchmarks/README.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from jdisc.custom_calls import compiler
from jdisc.lowering import c_runtime

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    cflags, ldflags = compiler._flag_parts(False)
    flags = [f for f in cflags if f not in ("-shared", "-fPIC", "-O3")] + ["-O1"]
    with tempfile.TemporaryDirectory() as tmp:
        header = os.path.join(tmp, "jd_skinny.h")
        with open(header, "w", encoding="utf-8") as f:
            f.write(c_runtime.source("jd_skinny.h"))
        exe = os.path.join(tmp, "skinny_gemm")
        subprocess.run([*compiler.compiler_command(), "-D_POSIX_C_SOURCE=200112L",
                        "-DJD_SKINNY_ROWS=64", *flags,
                        "-I", tmp, os.path.join(HERE, "skinny_gemm.c"), "-o", exe, *ldflags],
                       check=True)
        print(f"load {os.getloadavg()[0]:.2f}", flush=True)
        subprocess.run([exe], check=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
