"""jdisc's fixed C: the helpers a generated program is built with, one header per concern.

    jd_libc.h           the C library functions generated C calls, declared (no system headers)
    jd_dims.h           floor division, modulo, min and max of dimension expressions
    jd_errors.h         the error message a failed check or kernel leaves for the caller
    jd_fp.h             subnormals flushed as XLA:CPU flushes them, on every thread of a call
    jd_shared.h         what a program's units share: the pool's and the GEMMs' declarations
    jd_pool.h           the pool of threads that runs kernels' parallel loops and GEMMs
    jd_skinny.h         f32 GEMMs of a few rows, which read the other operand once per 8 rows
    jd_conv.h           direct convolutions (NHWC x HWIO), over an element type (units.py)
    jd_gemm.h           GEMMs split into single-threaded BLAS calls on the pool
    jd_lanes.h          16 rows of 4-byte values to lanes (column by column) and back, by tiles
    jd_ffi.h            the body of every program's XLA FFI handler (over XLA's FFI C API)
    jd_arena.h          the per-call arena of intermediate buffers
    jd_half.h           f16 / bf16 conversions
    jd_math.h           vectorisable f32 exp, expm1, log, tanh, logistic
    jd_rng.h            Philox and ThreeFry counter-based random bits
    jd_fft.h            discrete Fourier transforms of any length (mixed radix, Rader, Bluestein)
    jd_fft_real.h       ... their passes and plans, over a working precision (lowering/fft.py)
    jd_fft_api.h        ... what an FFT kernel calls of them (they are one unit per program)
    jd_keep_branches.h  the attribute that keeps GCC from if-converting a kernel's loops

A program's C carries the text of the headers it uses (`source`), so that it builds on its own:
packages ship it, and the cache key is its hash. jd_fp.h, jd_pool.h, jd_gemm.h, jd_lanes.h and
jd_ffi.h are the runtime unit (lowering/units.py), compiled once for every program; jd_skinny.h
is the unit of the programs with float32 GEMMs; jd_conv.h, per element type, the unit of the
programs with direct convolutions; jd_fft.h and jd_fft_real.h are the FFT unit of
a program with FFTs, whose kernels carry jd_fft_api.h; the other units include jd_shared.h.
tests/test_c_runtime.py compiles each header.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def source(name: str) -> str:
    """The text of one header of this folder."""
    return resources.files(__name__).joinpath(name).read_text()


HEADERS = ("jd_libc.h", "jd_dims.h", "jd_errors.h", "jd_fp.h", "jd_shared.h", "jd_pool.h",
           "jd_skinny.h", "jd_conv.h", "jd_gemm.h", "jd_lanes.h", "jd_ffi.h", "jd_arena.h",
           "jd_half.h", "jd_math.h", "jd_rng.h", "jd_fft.h", "jd_fft_real.h", "jd_fft_api.h",
           "jd_keep_branches.h")
