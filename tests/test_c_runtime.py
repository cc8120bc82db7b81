"""jdisc's fixed C (jdisc/lowering/c_runtime/*.h): every header compiles, warning-free, after the
headers it builds on and the standard includes a generated program starts with; and a program's
C carries the headers' text verbatim."""

import shutil
import subprocess

import numpy as np
import pytest

import jdisc
from jdisc.lowering import c_runtime

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

# what each header uses from another
NEEDS = {"jd_pool.h": ["jd_shared.h", "jd_fp.h"],
         "jd_gemm.h": ["jd_shared.h", "jd_fp.h", "jd_pool.h"],
         "jd_skinny.h": ["jd_shared.h"],
         "jd_ffi.h": ["jd_shared.h"],
         "jd_half.h": ["jd_math.h"]}
INCLUDES = ("stdint.h", "stddef.h", "stdlib.h", "string.h", "math.h", "stdarg.h", "stdio.h",
            "cblas.h")


@pytest.mark.parametrize("name", c_runtime.HEADERS)
def test_header_compiles_on_its_own(name, tmp_path):
    src = ["#define _POSIX_C_SOURCE 200112L"] + [f"#include <{h}>" for h in INCLUDES]
    if name in ("jd_fft_real.h", "jd_fft_api.h"):   # pasted once per precision (fft.py)
        from jdisc.lowering import fft
        src.append(c_runtime.source("jd_shared.h"))
        src.append(fft.runtime_source(["double", "float"]) if name == "jd_fft_real.h" else
                   fft.declarations("double") + fft.declarations("float"))
    else:
        src += [c_runtime.source(h) for h in NEEDS.get(name, []) + [name]]
    path = tmp_path / "t.c"
    path.write_text("\n".join(src) + "\n")
    import jax.ffi              # XLA's FFI C API, which jd_ffi.h is written to
    import scipy_openblas32     # the BLAS jdisc links, whose cblas.h programs include
    proc = subprocess.run(["cc", "-std=c99", "-fopenmp-simd", "-fsyntax-only", "-Wall", "-Wextra",
                           "-Werror", f"-I{scipy_openblas32.get_include_dir()}",
                           f"-I{jax.ffi.include_dir()}", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_header_is_listed():
    from importlib import resources
    on_disk = {p.name for p in resources.files(c_runtime).iterdir() if p.name.endswith(".h")}
    assert on_disk == set(c_runtime.HEADERS)


def test_a_program_carries_the_headers_it_uses():
    jf = jdisc.jit(lambda x: jnp_tanh(x) + 1, dynamic_axes=({0: "n"},))
    source = jf.compiled_for(np.ones(3, np.float32)).c_source
    for name in ("jd_dims.h", "jd_errors.h", "jd_fp.h", "jd_shared.h", "jd_pool.h", "jd_arena.h"):
        assert c_runtime.source(name) in source, name


def jnp_tanh(x):
    import jax.numpy as jnp
    return jnp.tanh(x)
