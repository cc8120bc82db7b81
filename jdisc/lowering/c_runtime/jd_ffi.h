/* The XLA FFI handler's body, the same for every program (lowering/ffi.py): a program's
   `jd_ffi_handler` calls jd_ffi_call with its jd_ffi_program. XLA calls the handler with the
   argument and result buffers; this reads the argument dims, runs jd_prepare (every shape check
   of the launcher), checks that the buffers XLA allocated for the results have the dims jdisc
   computes, and runs jd_run on them. A failed check comes back to XLA as an FFI error carrying
   the launcher's message. Written to XLA's FFI C API (xla/ffi/api/c_api.h, in jaxlib's include
   directory), which only this unit includes. */
#include <stdio.h>
#include "xla/ffi/api/c_api.h"

static XLA_FFI_Error *jd_ffi_error(const XLA_FFI_Api *api, XLA_FFI_Error_Code code,
                                   const char *message) {
  XLA_FFI_Error_Create_Args args;
  memset(&args, 0, sizeof args);
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message;
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

JD_RT void *jd_ffi_call(void *call_frame, const jd_ffi_program *p) {
  XLA_FFI_CallFrame *frame = (XLA_FFI_CallFrame *)call_frame;
  const XLA_FFI_Api *api = frame->api;
  if (frame->extension_start && frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    XLA_FFI_Metadata_Extension *ext = (XLA_FFI_Metadata_Extension *)frame->extension_start;
    ext->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    ext->metadata->api_version.extension_start = NULL;
    ext->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    ext->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    ext->metadata->traits = 0;
    return NULL;
  }
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  char err[1024];
  if (frame->args.size != p->n_in || frame->rets.size != p->n_out) {
    snprintf(err, sizeof err, "jdisc: the custom call has %lld arguments and %lld results; "
             "the program takes %lld and returns %lld", (long long)frame->args.size,
             (long long)frame->rets.size, (long long)p->n_in, (long long)p->n_out);
    return jd_ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, err);
  }
  /* sizes at least 1: a program may have no inputs, dims or outputs */
  int64_t in_dims[p->in_rank + 1], dims[p->n_dims + 1], out_dims[p->out_rank + 1];
  void *ins[p->n_in + 1], *outs[p->n_out + 1];
  int64_t pos = 0;
  for (int64_t i = 0; i < p->n_in; i++) {
    const XLA_FFI_Buffer *b = (const XLA_FFI_Buffer *)frame->args.args[i];
    for (int64_t d = 0; d < b->rank && pos < p->in_rank; d++) in_dims[pos++] = b->dims[d];
    ins[i] = b->data;
  }
  if (pos != p->in_rank) {
    snprintf(err, sizeof err, "jdisc: the custom call's arguments have %lld dims in all; "
             "the program's inputs have %lld", (long long)pos, (long long)p->in_rank);
    return jd_ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, err);
  }
  if (p->prepare(in_dims, dims, out_dims, err, sizeof err))
    return jd_ffi_error(api, XLA_FFI_Error_Code_INVALID_ARGUMENT, err);
  pos = 0;
  for (int64_t i = 0; i < p->n_out; i++) {
    const XLA_FFI_Buffer *b = (const XLA_FFI_Buffer *)frame->rets.rets[i];
    int ok = b->rank == p->out_ranks[i];
    for (int64_t d = 0; ok && d < b->rank; d++) ok = b->dims[d] == out_dims[pos + d];
    if (!ok) {
      snprintf(err, sizeof err, "jdisc: result %lld was allocated with another shape than "
               "the program computes for these inputs", (long long)i);
      return jd_ffi_error(api, XLA_FFI_Error_Code_INTERNAL, err);
    }
    pos += p->out_ranks[i];
    outs[i] = b->data;
  }
  if (p->run(dims, ins, outs, err, sizeof err))
    return jd_ffi_error(api, XLA_FFI_Error_Code_INTERNAL, err);
  return NULL;
}
