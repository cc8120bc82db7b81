"""The XLA FFI handler of a compiled program: `jd_ffi_handler`, a call of the runtime's
`jd_ffi_call` (c_runtime/jd_ffi.h, over XLA's FFI C API in jaxlib's include directory) with
the program's counts, output ranks and entry points.

Under a JAX trace a jdisc function becomes `jax.ffi.ffi_call` of a target registered with this
handler (custom_calls/ffi.py). XLA calls it with the argument and result buffers; jd_ffi_call
reads the argument dims, runs `jd_prepare` (every shape check of the launcher), checks that the
buffers XLA allocated for the results have the dims jdisc computes, and runs `jd_run` on them.
A failed check comes back to XLA as an FFI error carrying the launcher's message. The body is
the same for every program, so it compiles once, in the runtime unit, and the launcher does not
include XLA's header (a fifth of the launcher's compile).
"""

from __future__ import annotations

from jdisc.dynamic_passes.ir.program import Program


def ffi_handler(prog: Program) -> str:
    out_ranks = [len(s.shape) for s in prog.outputs]
    counts = (len(prog.inputs), len(prog.outputs), sum(len(s.shape) for s in prog.inputs),
              sum(out_ranks), max(len(prog.dim_vars), 1))
    return f"""
/* ---- XLA FFI handler: the launcher as a custom call (see jdisc/lowering/ffi.py) ---- */
static const int64_t jd_ffi_out_ranks[{max(len(out_ranks), 1)}] = {{{', '.join(map(str, out_ranks)) or '0'}}};
static const jd_ffi_program jd_ffi_this = {{{', '.join(map(str, counts))}, jd_ffi_out_ranks,
                                           jd_prepare, jd_run}};

void *jd_ffi_handler(void *frame) {{ return jd_ffi_call(frame, &jd_ffi_this); }}
"""
