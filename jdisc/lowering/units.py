"""A program's C as translation units, in one file.

A program's C file is a sequence of units, each starting at a marker line
`//@jdisc unit <name> <-O level>`: the launcher (with the file's header comment before it), one
unit per distinct kernel (a GEMM of a BLAS type has none: the launcher calls the runtime's
jd_dot), in a program with FFTs the FFT code its FFT kernels call (jd_fft.h,
jd_fft_real.h per precision: lowering/fft.py), in a program with float32 GEMMs their loops for a
few rows (jd_skinny.h), in a program with direct convolutions their code (jd_conv.h, one unit
per element type: the launcher calls it), and the runtime (jd_errors.h, jd_fp.h, jd_pool.h,
jd_gemm.h, jd_lanes.h, jd_ffi.h). Each unit is C that compiles on its own; custom_calls/compiler.py
compiles them in parallel, caches each object by its text, and links them into the program's
library. A kernel unit's text depends only on the kernel's code: its function is named after
its content (`jd_u<hash>`) and its dims are its own (`jd_dim0`, ...), so the same LayerNorm or
GEMM epilogue in another program, or twice in one, is the same unit and compiles once. The
runtime unit is the same for every program.

A kernel unit whose head is only what its body needs marks where its body starts (BODY): the
compiler may then compile several such kernels as one bundle, `bundle(bodies)`, and pay a C
compiler's start and the headers once for all of them (custom_calls/compiler.py). Kernels are
defined weak (JD_KERNEL, jd_shared.h): two bundles in the cache may both hold one kernel.
"""

from __future__ import annotations

import functools
import hashlib
import re

from jdisc.lowering import c_runtime
from jdisc.lowering.scalar_ops import c_prelude

MARK = "//@jdisc unit "
SELF = "JD_SELF"      # a kernel unit's own name, until its content names it
BODY = "//@jdisc body\n"  # where a kernel unit that may join a bundle starts its own code

# The optimisation level of each kind of unit, named in its marker, and the flags each name
# stands for (custom_calls/compiler.py). Kernels: -O3. A stitch kernel whose rows' length is
# not known when compiling (it has the path for short rows, blocks of rows reduced across the
# rows: lowering/stitch.py runs_rows_across): -O2 with -O3's vectoriser (its cost model; GCC
# 12's -O2 vectorises only loops that need no epilogue, none with a dynamic trip count) and
# loop unswitching. GCC's -O3 unrolls those kernels' fixed-length loops whole before it
# vectorises, and its register allocator pays for the code: W1's and W7's softmax kernels, the
# slowest units of their programs, compile in 0.4-0.5 of -O3's time. Their cost: a row of 100
# or more columns reduces 9-16 % slower (-O3 keeps the 64 lanes' accumulators in registers),
# shorter rows 3-5 % faster (CHANGELOG.md, 2026-12-06). Other kernels stay at -O3: at -O2v a
# convolution ran 1.3-2.2x slower, and a reduction over rows of a few known columns 3.4-9x
# (-O3 vectorises across the rows after unrolling the column loop). The launcher's checks
# and calls run once per call: -O0, which compiles W3's launcher (a program with no kernel
# unit of its own since GEMM epilogues) in 18 ms instead of 25 at -O1, with no measurable cost
# per call (`x[4] + 1` 3.9 us either way, W3 at one row 83-101 us either way); a launcher
# that runs loops (while, if, case: its host control flow) is -O1, as a loop's iteration
# took 5.4-5.6 ns at -O0 against 3.0 (`benchmarks/control_flow.py --skip-lstm`). The runtime
# unit compiles once for every program.
LEVELS = {"-O0": ("-O0",), "-O1": ("-O1",), "-O2": ("-O2",), "-O3": ("-O3",),
          "-O2v": ("-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-funswitch-loops")}
KERNEL_OPT, STITCH_OPT, LAUNCHER_OPT, RUNTIME_OPT = "-O3", "-O2v", "-O0", "-O1"
LOOP_LAUNCHER_OPT = "-O1"

_BASE_INCLUDES = ("stdint.h", "stddef.h", "stdlib.h", "string.h", "math.h")
_MESSAGE_INCLUDES = ("stdarg.h", "stdio.h")
_ERROR_NAMES = re.compile(r"\bjd_(?:tdiv|trem|copy|error)\b")

KEEP_BRANCHES_MACRO = c_runtime.source("jd_keep_branches.h")
ERROR_HELPER = c_runtime.source("jd_errors.h")
LIBC = c_runtime.source("jd_libc.h")


def compile_cost(name: str, opt: str, text: str) -> int:
    """A unit's compile time, roughly (microseconds), for ordering the compiles (the longest
    first). Each of W1's, W4's and W7's units compiled alone: a kernel's own code about 11 us
    per character at -O3 or -O2v, the declarations and helpers before it (its head) under 1,
    the launcher and the runtime 1-2.5, the skinny unit (-O1 around -O3 loops) 6; a kernel
    with whole runtime headers in its head (FFTs, LAPACK) counts 10 for all of it."""
    if name == "skinny":
        return 6 * len(text)
    if opt not in (KERNEL_OPT, STITCH_OPT):
        return len(text)
    own = body(text)
    return 10 * len(text) if own is None else len(text) + 10 * len(own)


def bundle_cost(units: list[str]) -> int:
    """compile_cost of the bundle of kernel units `units` (each with a body): one head, the
    longest of theirs, and every body."""
    heads = [len(u) - len(body(u)) for u in units]
    return max(heads) + sum(11 * len(body(u)) for u in units)


def marker(name: str, opt: str) -> str:
    return f"{MARK}{name} {opt}\n"


_LIBC_GUARDED = re.compile(r"^#ifndef JD_LIBC_H\b.*?^#endif", re.M | re.S)


def _includes_libc(text: str) -> bool:
    """Whether `text` includes a header of the C library itself, besides the includes jdisc's
    own headers make only where jd_libc.h has not declared what they use."""
    return "#include <" in _LIBC_GUARDED.sub("", text)


def head(body: str, *, blas: bool = False, lapack: bool = False, extra: str = "") -> str:
    """What a unit whose own code is `body` starts with: the C library's declarations it
    needs, jdisc's shared declarations, `extra` (whole runtime headers: jd_fft.h, jd_rng.h)
    and the scalar helpers the body and `extra` call. The C library comes as jd_libc.h's
    declarations, or as its headers where the unit includes one of them itself (complex.h,
    time.h), calls BLAS or LAPACK (whose headers include the C library's), or is the
    runtime."""
    errors = bool(_ERROR_NAMES.search(body))
    helpers = c_prelude(extra + body)
    lines = ["#define _POSIX_C_SOURCE 200112L   /* posix_memalign */", KEEP_BRANCHES_MACRO]
    if blas or lapack or "cblas_" in body or _includes_libc(body + extra + helpers):
        includes = _BASE_INCLUDES + (_MESSAGE_INCLUDES if errors else ()) \
            + (("cblas.h",) if blas or "cblas_" in body else ())
        lines += [f"#include <{inc}>" for inc in includes]
    else:
        lines.append(LIBC)
    if lapack:     # it includes <complex.h>: drop its macros
        lines.append("#include <lapacke.h>\n#undef I\n#undef complex")
    text = "\n".join(lines) + "\n" + c_runtime.source("jd_dims.h") + \
        c_runtime.source("jd_shared.h") + "\n"
    if errors:
        text += ERROR_HELPER + "\n"
    return text + extra + helpers + "\n"


def kernel_unit(text: str, *, lapack: bool = False, extra: str = "",
                opt: str = KERNEL_OPT) -> tuple[str, str]:
    """(symbol, unit text) of a kernel whose functions `text` names with SELF, compiled at
    `opt`."""
    plain = not lapack and not extra
    unit = head(text, lapack=lapack, extra=extra) + (BODY if plain else "") + text
    symbol = "jd_u" + hashlib.sha256(unit.encode()).hexdigest()[:16]
    return symbol, marker(symbol, opt) + unit.replace(SELF, symbol)


@functools.cache
def runtime_unit() -> str:
    """The pool, the GEMMs on it, the tiles of a stitch kernel's short rows and the body of
    the XLA FFI handler: the same text in every program."""
    body = "\n".join(c_runtime.source(h) for h in ("jd_fp.h", "jd_pool.h", "jd_gemm.h",
                                                     "jd_lanes.h", "jd_ffi.h"))
    return marker("runtime", RUNTIME_OPT) + head(body, blas=True) + body


@functools.cache
def skinny_unit() -> str:
    """The float32 GEMM loops for a few rows (jd_skinny.h), a unit of the programs with
    float32 GEMMs only: about 85 ms of compile, beside the others on an empty cache, and none
    for the other programs."""
    body = c_runtime.source("jd_skinny.h")
    return marker("skinny", RUNTIME_OPT) + head(body) + body


@functools.cache
def conv_unit(dtype: str) -> str:
    """The direct convolutions in `dtype` (f32 or f64: jd_conv.h), a unit of the programs that
    have one: compiled once for every program."""
    ct, lanes = {"f32": ("float", 16), "f64": ("double", 8)}[dtype]
    text = c_runtime.source("jd_conv.h").replace("JDCONV_T", ct).replace(
        "JDCONV_S", dtype).replace("JDCONV_LANES", str(lanes))
    return marker("conv_" + dtype, KERNEL_OPT) + head(text) + text


def body(unit: str) -> str | None:
    """A kernel unit's own code, when it may join a bundle (its head is `head(body)`)."""
    before, mark, after = unit.partition(BODY)
    return after if mark else None


def bundle(bodies: list[str]) -> str:
    """One unit of several kernels' bodies: the head they need once, then each body."""
    text = "\n".join(bodies)
    return head(text) + text


def split(source: str) -> list[tuple[str, str, str]]:
    """(name, -O level, text) of each unit of a program's C file; a file without markers (a
    package written before units) is one unit, `program`, at the kernels' level."""
    parts = ("\n" + source).split("\n" + MARK)
    if len(parts) == 1:
        return [("program", KERNEL_OPT, source)]
    preamble, units = parts[0][1:], []
    for i, part in enumerate(parts[1:]):
        first, _, text = part.partition("\n")
        name, _, opt = first.partition(" ")
        units.append((name, opt, (preamble + "\n" if i == 0 and preamble else "") + text))
    return units
