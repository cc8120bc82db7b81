/* What the units of one program share: a program is compiled as several translation units
   (its launcher, one per kernel, and the runtime: jd_errors.h, jd_pool.h and jd_gemm.h) linked
   into one library, and the runtime's pool is the library's one pool. The functions declared
   here are defined once, in the runtime unit, and stay inside the library (hidden). */
#ifndef JD_SHARED_H
#define JD_SHARED_H
#ifndef JD_LIBC_H   /* else jd_libc.h declared what this uses */
#include <stdint.h>
#endif
#define JD_RT __attribute__((visibility("hidden")))
/* a kernel's entry: weak, since two objects in the unit cache may both hold it (a kernel
   compiled in two bundles: lowering/units.py), and any one of them serves */
#define JD_KERNEL JD_RT __attribute__((weak))

typedef void (*jd_piece_fn)(const void *ctx, int64_t piece);

/* What every parallel loop's context starts with (a kernel's loop is a function of its own,
   `<kernel>_p<n>`, whose context struct carries the kernel's parameters after this). */
typedef struct {
  int64_t count, step;        /* the loop runs [0, count); piece p is [p * step, p * step + step) */
  int failed;                 /* a piece could not allocate its scratch memory */
} jd_region;

static inline void jd_region_fail(jd_region *r) {
  __atomic_store_n(&r->failed, 1, __ATOMIC_RELAXED);
}

/* Run a kernel's loop over [0, count): on the pool when `go` (the kernel judged the work large
   enough to share), else as one piece on the calling thread (jd_pool.h). */
JD_RT void jd_parallel(jd_piece_fn fn, jd_region *r, int64_t count, int go);

/* A block of 16 rows of 4-byte values (n of each) laid out column by column
   (`lanes[c * 16 + l]`) and back, the latter into the block's first nb rows (jd_lanes.h) */
JD_RT void jd_to_lanes32(void *restrict lanes, const void *const rows[16], int64_t n);
JD_RT void jd_from_lanes32(void *const rows[16], const void *restrict lanes, int64_t n,
                           int64_t nb);

/* the threads a parallel loop would run on now (a kernel that sizes its pieces itself) */
JD_RT int jd_parallel_threads(void);

/* the element type: what jd_gemm's `kind` selects */
enum { JD_GEMM_F32 = 0, JD_GEMM_F64 = 1, JD_GEMM_C64 = 2, JD_GEMM_C128 = 3 };

/* C[b] = op(A[b]) @ op(B[b]) for b < nb, row-major, C packed (ldc = n), on the pool, then
   the epilogue: C[.., j] += bias[j] (bias not NULL), max(C, 0) (relu); the callers checked
   that every size fits blasint (jd_gemm.h). */
JD_RT void jd_gemm(int kind, int trans_a, int trans_b, int64_t nb, int64_t m, int64_t n,
                   int64_t k, const void *a, const void *b, void *c, const void *bias,
                   int relu);
/* jd_gemm for the launcher's dot_general calls: m, n or k of 0, and k = 1 too (jd_gemm.h) */
JD_RT int jd_dot(int kind, int trans_a, int trans_b, int64_t nb, int64_t m, int64_t n,
                 int64_t k, const void *a, const void *b, void *c, const void *bias, int relu);

/* A direct convolution, NHWC x HWIO -> NHWC, as the launcher passes it to the conv unit's
   jd_conv_f32 / jd_conv_f64 (jd_conv.h): per spatial dim (outermost first) the input, output
   and kernel sizes, stride, kernel (rhs) and input (lhs) dilation, low padding and whether the
   window is reversed; cin and cout count every group's features. */
#define JD_CONV_MAX_DIMS 3
typedef struct {
  int64_t ns, batch, cin, cout, groups;
  int64_t isz[JD_CONV_MAX_DIMS], osz[JD_CONV_MAX_DIMS], ksz[JD_CONV_MAX_DIMS];
  int64_t stride[JD_CONV_MAX_DIMS], rdil[JD_CONV_MAX_DIMS], ldil[JD_CONV_MAX_DIMS];
  int64_t lo[JD_CONV_MAX_DIMS], rev[JD_CONV_MAX_DIMS];
  const void *x, *k;
  void *out;
} jd_conv_args;
JD_RT int jd_conv_f32(const jd_conv_args *a);
JD_RT int jd_conv_f64(const jd_conv_args *a);

/* A program as its XLA FFI handler sees it (jd_ffi.h): counts, output ranks, its entry points */
typedef struct {
  int64_t n_in, n_out, in_rank, out_rank, n_dims;   /* ranks: summed over inputs, outputs */
  const int64_t *out_ranks;
  int (*prepare)(const int64_t *, int64_t *, int64_t *, char *, int64_t);
  int (*run)(const int64_t *, void *const *, void *const *, char *, int64_t);
} jd_ffi_program;

/* The body of every program's XLA FFI handler, jd_ffi_handler (jd_ffi.h) */
JD_RT void *jd_ffi_call(void *call_frame, const jd_ffi_program *p);
#endif
