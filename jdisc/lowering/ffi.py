"""The XLA FFI handler of a compiled program: `jd_ffi_handler`, in plain C over XLA's FFI C API
(`xla/ffi/api/c_api.h`, shipped in jaxlib's include directory).

Under a JAX trace a jdisc function becomes `jax.ffi.ffi_call` of a target registered with this
handler (custom_calls/ffi.py). XLA calls it with the argument and result buffers; the handler
reads the argument dims, runs `jd_prepare` (every shape check of the launcher), checks that the
buffers XLA allocated for the results have the dims jdisc computes, and runs `jd_run` on them.
A failed check comes back to XLA as an FFI error carrying the launcher's message.
"""

from __future__ import annotations

from jdisc.dynamic_passes.ir.program import Program


def ffi_handler(prog: Program) -> str:
    n_in, n_out = len(prog.inputs), len(prog.outputs)
    in_rank = sum(len(s.shape) for s in prog.inputs)
    out_ranks = [len(s.shape) for s in prog.outputs]
    n_dims = max(len(prog.dim_vars), 1)
    return f"""
/* ---- XLA FFI handler: the launcher as a custom call (see jdisc/lowering/ffi.py) ---- */
#include "xla/ffi/api/c_api.h"

static XLA_FFI_Error *jd_ffi_error(const XLA_FFI_Api *api, XLA_FFI_Error_Code code,
                                   const char *message) {{
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message;
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}}

static const int64_t jd_ffi_out_ranks[{max(n_out, 1)}] = {{{', '.join(map(str, out_ranks)) or '0'}}};

XLA_FFI_Error *jd_ffi_handler(XLA_FFI_CallFrame *frame) {{
  const XLA_FFI_Api *api = frame->api;
  if (frame->extension_start && frame->extension_start->type == XLA_FFI_Extension_Metadata) {{
    XLA_FFI_Metadata_Extension *ext = (XLA_FFI_Metadata_Extension *)frame->extension_start;
    ext->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    ext->metadata->api_version.extension_start = NULL;
    ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    ext->metadata->traits = 0;
    return NULL;
  }}
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  char err[1024];
  if (frame->args.size != {n_in} || frame->rets.size != {n_out}) {{
    snprintf(err, sizeof err, "jdisc: the custom call has %lld arguments and %lld results; "
             "the program takes {n_in} and returns {n_out}",
             (long long)frame->args.size, (long long)frame->rets.size);
    return jd_ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, err);
  }}
  int64_t in_dims[{max(in_rank, 1)}];
  void *ins[{max(n_in, 1)}];
  int64_t pos = 0;
  for (int64_t i = 0; i < {n_in}; i++) {{
    const XLA_FFI_Buffer *b = (const XLA_FFI_Buffer *)frame->args.args[i];
    for (int64_t d = 0; d < b->rank && pos < {max(in_rank, 1)}; d++) in_dims[pos++] = b->dims[d];
    ins[i] = b->data;
  }}
  if (pos != {in_rank}) {{
    snprintf(err, sizeof err, "jdisc: the custom call's arguments have %lld dims in all; "
             "the program's inputs have {in_rank}", (long long)pos);
    return jd_ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, err);
  }}
  int64_t dims[{n_dims}], out_dims[{max(sum(out_ranks), 1)}];
  if (jd_prepare(in_dims, dims, out_dims, err, sizeof err))
    return jd_ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, err);
  void *outs[{max(n_out, 1)}];
  pos = 0;
  for (int64_t i = 0; i < {n_out}; i++) {{
    const XLA_FFI_Buffer *b = (const XLA_FFI_Buffer *)frame->rets.rets[i];
    int ok = b->rank == jd_ffi_out_ranks[i];
    for (int64_t d = 0; ok && d < b->rank; d++) ok = b->dims[d] == out_dims[pos + d];
    if (!ok) {{
      snprintf(err, sizeof err, "jdisc: result %lld was allocated with another shape than "
               "the program computes for these inputs", (long long)i);
      return jd_ffi_error(api, XLA_FFI_Error_Code_INTERNAL, err);
    }}
    pos += jd_ffi_out_ranks[i];
    outs[i] = b->data;
  }}
  if (jd_run(dims, ins, outs, err, sizeof err))
    return jd_ffi_error(api, XLA_FFI_Error_Code_INTERNAL, err);
  return NULL;
}}
"""
