"""jdisc's fixed C (jdisc/lowering/c_runtime/*.h): every header compiles, warning-free, after the
headers it builds on and the standard includes a generated program starts with; and a program's
C carries the headers' text verbatim."""

import platform
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
         "jd_lanes.h": ["jd_shared.h"],
         "jd_ffi.h": ["jd_shared.h"],
         "jd_half.h": ["jd_math.h"]}
INCLUDES = ("stdint.h", "stddef.h", "stdlib.h", "string.h", "math.h", "stdarg.h", "stdio.h",
            "cblas.h")


@pytest.mark.parametrize("name", c_runtime.HEADERS)
def test_header_compiles_on_its_own(name, tmp_path):
    src = ["#define _POSIX_C_SOURCE 200112L"]
    if name != "jd_libc.h":     # it stands in for them (lowering/units.py head)
        src += [f"#include <{h}>" for h in INCLUDES]
    if name == "jd_conv.h":     # pasted once per element type (units.py conv_unit)
        from jdisc.lowering import units
        src = [units.conv_unit("f32"), units.conv_unit("f64")]
    elif name in ("jd_fft_real.h", "jd_fft_api.h"):   # pasted once per precision (fft.py)
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


# the headers a unit without a C library header of its own carries, after jd_libc.h
# (lowering/units.py head); jd_half.h and jd_rng.h come with what they use
PLAIN_UNIT_HEADERS = ("jd_dims.h", "jd_shared.h", "jd_errors.h", "jd_fp.h", "jd_arena.h",
                      "jd_math.h", "jd_half.h", "jd_rng.h", "jd_skinny.h", "jd_keep_branches.h")


def test_plain_unit_headers_compile_after_jd_libc_alone(tmp_path):
    """jd_libc.h declares all that these headers call: no C library header, no warning, and
    an undeclared call would be an error."""
    src = ["#define _POSIX_C_SOURCE 200112L", c_runtime.source("jd_libc.h")]
    src += [c_runtime.source(h) for h in PLAIN_UNIT_HEADERS]
    path = tmp_path / "t.c"
    path.write_text("\n".join(src) + "\n")
    proc = subprocess.run(["cc", "-std=c99", "-fopenmp-simd", "-fsyntax-only", "-Wall", "-Wextra",
                           "-Werror", "-march=native", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _math_program(x, y, i):
    import jax.numpy as jnp
    a = jnp.tanh(x) + jnp.exp(x) * jnp.log1p(jnp.abs(y)) - jax_nn_logistic(y)
    b = jnp.sin(x.astype(jnp.float64)) ** 2 + jnp.fmod(y, 1.5) + jnp.round(x) + jnp.floor(y)
    c = jnp.where(jnp.isfinite(a), a, 0.0) + jnp.maximum(x, y) + jnp.sqrt(jnp.abs(x))
    return a.sum(), b, c, (i // 3) % 5, x[i[0] % x.shape[0]]


def jax_nn_logistic(v):
    import jax
    return jax.nn.sigmoid(v)


def _numbered_labels(asm: str) -> str:
    """GCC's local labels (.LFB20, .LC3) renumbered in order of appearance, and the source
    line markers of inline assembly dropped: the count of declarations and lines before a
    function shifts them, not the code."""
    import re
    seen: dict[str, str] = {}
    asm = re.sub(r'^\s*# \d+ "u\.c" \d+\n', "", asm, flags=re.M)
    return re.sub(r"\.L[A-Za-z]*\d+\b",
                  lambda m: seen.setdefault(m.group(), f".L{len(seen)}"), asm)


def test_jd_libc_gives_the_code_the_c_library_headers_give(tmp_path):
    """Each unit of a program with math of both precisions, integer division, a gather and
    error checks compiles to the same assembly with jd_libc.h as with the C library's headers
    in its place: the declarations and macros are the headers' own."""
    import jax
    from jdisc.custom_calls import compiler
    from jdisc.lowering import units
    with jax.enable_x64(True):
        f = jdisc.jit(_math_program, dynamic_axes=({0: "n"}, {0: "n"}, {0: "n"}))
        c = f.compiled_for(np.ones(5, np.float32), np.ones(5, np.float32),
                           np.ones(5, np.int32)).c_source
    headers = "\n".join(f"#include <{h}>" for h in units._BASE_INCLUDES + units._MESSAGE_INCLUDES)
    cflags, _ = compiler._flag_parts(False)
    compared = 0
    for name, opt, text in units.split(c):
        if units.LIBC not in text:
            continue
        asm = []
        for variant, body in (("libc", text), ("headers", text.replace(units.LIBC, headers))):
            d = tmp_path / variant
            d.mkdir(exist_ok=True)
            (d / "u.c").write_text(body)
            flags = [f for f in compiler._unit_flags(cflags, opt, False) if f != "-c"]
            proc = subprocess.run([*compiler.compiler_command(), *flags, "-S", "u.c", "-o",
                                   "u.s"], cwd=d, capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            asm.append(_numbered_labels((d / "u.s").read_text()))
        assert asm[0] == asm[1], name
        compared += 1
    assert compared >= 3


LANES_CHECK = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
%s
int main(void) {
  static const int64_t ns[] = {0, 1, 2, 15, 16, 17, 31, 32, 33, 100, 127};
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    const int64_t n = ns[k];
    for (int64_t nb = 1; nb <= 16; nb++) {
      /* 16 rows of n values a row apart by n + 3 (no tile may read or write past a row) */
      const int64_t ld = n + 3;
      uint32_t *src = malloc(sizeof(uint32_t) * (16 * ld + 1));
      uint32_t *lanes = malloc(sizeof(uint32_t) * (16 * n + 1));
      uint32_t *dst = malloc(sizeof(uint32_t) * (16 * ld + 1));
      for (int64_t i = 0; i < 16 * ld; i++) {
        src[i] = 0x7f800001u + (uint32_t)i * 2654435761u;  /* NaN payloads, any bits */
        dst[i] = 0xdeadbeefu;
      }
      const void *in[16];
      void *out[16];
      for (int l = 0; l < 16; l++) {
        in[l] = src + (l < nb ? l : nb - 1) * ld;   /* a short block repeats its last row */
        out[l] = dst + (l < nb ? l : nb - 1) * ld;
      }
      jd_to_lanes32(lanes, in, n);
      for (int64_t c = 0; c < n; c++)
        for (int l = 0; l < 16; l++)
          if (lanes[c * 16 + l] != src[(l < nb ? l : nb - 1) * ld + c]) {
            printf("to_lanes n=%%lld nb=%%lld c=%%lld l=%%d\n", (long long)n, (long long)nb,
                   (long long)c, l);
            return 1;
          }
      for (int64_t c = 0; c < n; c++)     /* lanes past the block's rows: not its output */
        for (int64_t l = nb; l < 16; l++) lanes[c * 16 + l] = 0xbad0bad0u;
      jd_from_lanes32(out, lanes, n, nb);
      for (int64_t r = 0; r < 16; r++)
        for (int64_t c = 0; c < ld; c++) {
          const uint32_t want = r < nb && c < n ? src[r * ld + c] : 0xdeadbeefu;
          if (dst[r * ld + c] != want) {
            printf("from_lanes n=%%lld nb=%%lld r=%%lld c=%%lld\n", (long long)n, (long long)nb,
                   (long long)r, (long long)c);
            return 1;
          }
        }
      free(src); free(lanes); free(dst);
    }
  }
  puts("ok");
  return 0;
}
"""


@pytest.mark.parametrize("arch", ["native", "x86-64"])
@pytest.mark.parametrize("opt", ["-O1", "-O3"])
def test_lanes_move_every_bit_of_every_row_and_nothing_else(tmp_path, opt, arch):
    # jd_lanes.h: 16 rows to lanes and back by tiles (the last overlapping the one before),
    # at lengths below, at and past a tile, for every block size; bits, not values (NaNs with
    # payloads), and nothing written past a row's n values or into the rows past the block's.
    # The tiles' blocks are as wide as the target's vectors: this machine's (16 floats with
    # AVX-512, 8 with AVX) and SSE2's 4 (x86-64's baseline)
    if arch != "native" and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86-64 baseline build needs an x86-64 machine")
    src = "\n".join(["#define JD_RT static", c_runtime.source("jd_lanes.h")])
    path = tmp_path / "lanes.c"
    path.write_text(LANES_CHECK % src)
    exe = tmp_path / "lanes"
    subprocess.run(["cc", "-std=c99", opt, f"-march={arch}", "-Wall", "-Werror", str(path),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip() == "ok"


def test_select_max_and_min_give_the_bits_of_the_branchy_ones(tmp_path):
    # jd_fmax_sel / jd_fmin_sel (the forms kernels that keep their branches take: codegen.py)
    # against jd_fmax / jd_fmin, every pair of special and ordinary values, f32 and f64
    import ctypes
    from jdisc.lowering.scalar_ops import c_prelude
    names = [f"jd_{f}{v}_{t}" for f in ("fmax", "fmin") for v in ("", "_sel")
             for t in ("f32", "f64")]
    src = ["#include <stdint.h>", "#include <string.h>", "#include <math.h>",
           c_prelude(" ".join(names))]
    for f in ("fmax", "fmin"):
        for t, ct in (("f32", "float"), ("f64", "double")):
            src.append(f"void run_{f}_{t}(int64_t n, const {ct} *a, const {ct} *b, {ct} *x, "
                       f"{ct} *y) {{ for (int64_t i = 0; i < n; i++) {{ "
                       f"x[i] = jd_{f}_{t}(a[i], b[i]); y[i] = jd_{f}_sel_{t}(a[i], b[i]); }} }}")
    (tmp_path / "m.c").write_text("\n".join(src))
    so = tmp_path / "m.so"
    subprocess.run(["cc", "-std=c99", "-O2", "-fPIC", "-shared", "-fno-trapping-math",
                    str(tmp_path / "m.c"), "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    values = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.5,
              np.finfo(np.float32).max, np.finfo(np.float32).tiny]
    a, b = (np.array(v).ravel() for v in np.meshgrid(values, values))
    for f in ("fmax", "fmin"):
        for t, dt, ut in (("f32", np.float32, np.uint32), ("f64", np.float64, np.uint64)):
            x, y = np.zeros(a.size, dt), np.ones(a.size, dt)
            ptr = lambda v: v.ctypes.data_as(ctypes.c_void_p)
            aa, bb = a.astype(dt), b.astype(dt)
            getattr(lib, f"run_{f}_{t}")(ctypes.c_int64(a.size), ptr(aa), ptr(bb), ptr(x), ptr(y))
            np.testing.assert_array_equal(x.view(ut), y.view(ut), err_msg=f"{f} {t}")
            # and the StableHLO semantics: NaN wins, max(-0, +0) = +0, min(-0, +0) = -0
            z = np.array([0.0, -0.0], dt)
            assert np.isnan(x[np.isnan(aa) | np.isnan(bb)]).all()
            pick = (aa == 0) & (bb == 0) & (np.signbit(aa) != np.signbit(bb))
            assert (np.signbit(x[pick]) == (f == "fmin")).all(), (f, t, z)
