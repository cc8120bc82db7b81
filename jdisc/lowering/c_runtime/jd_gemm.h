/* GEMMs on the program's pool (jd_pool.h).

   A large GEMM is cut into pieces (blocks of rows or of columns of each result matrix); each
   piece is one single-threaded BLAS call (jd_set_threads sets OpenBLAS to one thread; the count
   is process-wide, so jd_gemm sets it back should other code in the process change it). Below
   JD_GEMM_SPLIT_WORK multiply-adds a GEMM is one call on the caller's thread: waking a worker
   costs more than it saves. */

#define JD_GEMM_SPLIT_WORK 4194304.0   /* multiply-adds (2^22, about 0.1 ms on two cores) */
#define JD_GEMM_MIN_ROWS 32            /* a piece's rows or columns, at least */
/* pieces per thread, over all matrices: each piece re-packs the other operand, and 4 made
   W3's GEMMs 5-10 % slower than 1 or 2 on a quiet machine (`jdisc bench --workloads W1,W3
   --seed 23`); 2 leaves a thread that a busy machine holds back less to wait for */
#define JD_GEMM_PIECES 2

/* the skinny unit's entry (jd_skinny.h), linked into programs with float32 GEMMs only: NULL
   in the others */
JD_RT __attribute__((weak)) void jd_skinny_f32(int64_t m, int64_t n, int64_t k, const float *a,
                                               int64_t sa_row, int64_t sa_col, const float *b,
                                               int64_t ldb, float *c, int64_t ldc);
/* An f32 piece of 2 to 16 rows whose B (not transposed) holds at least JD_SKINNY_MIN_ELEMS
   elements runs in jd_skinny.h's loops, which read B once per 8 rows instead of packing it as
   sgemm does; up to 32 rows when B holds at most JD_SKINNY_WIDE_ELEMS or k <= JD_SKINNY_WIDE_K
   (past 8 rows the later groups of 8 find B's chunk, k x 256 floats, in L2). One thread,
   sgemm's time over theirs (`benchmarks/skinny_gemm.py`; and k, n each of 256, 512, 1024,
   2048, 4096): 1.08-2.21 at 16 rows but 0.89 at k = n = 4096; at 24 and 32 rows 1.04-1.72
   where k <= 1024 or k * n <= 2^20, 0.68-0.95 where k >= 2048 and n >= 1024; up to 64 rows
   when k <= JD_SKINNY_TALL_K (B's chunk, 768 KB at k = 768, stays in a 1 MB L2 for all 8
   groups): at 40 to 56 rows 1.08-1.44 for k = 512 and 768 (n = 768, 2048, 3072), 1.00-1.18 at
   64, but from 40 rows at k = 2048 and 3072 0.74-0.93 with B in L3, 0.86-1.22 from memory
   (`benchmarks/results/skinny-gemm-tall-run*.txt`). A transposed B, dot products along its
   rows, was 1.1-2.5x slower than sgemm at 16 rows: it stays with sgemm. Reading B is the
   loops' time: for the split below, each of its elements counts as JD_SKINNY_WEIGHT
   multiply-adds (W3 at N = 2 and 3, 2 and 3 million multiply-adds a GEMM, took 0.16-0.27 ms
   on one thread, 0.11-0.15 at N = 4 on two). */
#define JD_SKINNY_MIN_ELEMS 65536.0
#define JD_SKINNY_WIDE_ELEMS 1048576.0
#define JD_SKINNY_WIDE_K 1024
#define JD_SKINNY_TALL_K 768
#define JD_SKINNY_WEIGHT 8.0

/* JD_GEMM_F32 .. JD_GEMM_C128, the element types jd_gemm's `kind` selects: jd_shared.h */

typedef struct {
  int kind, trans_a, trans_b;
  int64_t m, n, k, lda, ldb, stride_a, stride_b, stride_c;
  const void *a, *b;
  void *c;
  int64_t parts, step;         /* pieces per matrix, and each one's rows (split_n: columns) */
  int split_n;
  const void *bias;            /* the epilogue (jd_epilogue): a row vector of n, or NULL */
  int relu;
} jd_gemm_job;

/* A GEMM's epilogue (lowering/blas.py, dynamic_passes/passes/gemm_epilogue.py), on `rows`
   rows of `cols` values from c (row stride ldc) as a piece finishes, while it is in cache:
   c[i, j] = c[i, j] + bias[j] where bias is not NULL, then max(c, 0) where relu, with
   stablehlo.maximum's NaN (kept) and signed zeros (max(-0, +0) = +0). These are the loop
   kernel's own operations on the same values, so the same bits come out. The runtime unit is
   -O1; these loops are compiled at -O3 (GCC's per-function attribute, as jd_skinny.h's), which
   vectorises them. Real types only (the pass fuses f32 and f64). */
#if defined(__GNUC__) && !defined(__clang__)
#define JD_EPILOGUE_OPT __attribute__((optimize("O3")))
#else
#define JD_EPILOGUE_OPT
#endif
#define JD_EPILOGUE(T, NAME)                                                                 \
  JD_EPILOGUE_OPT static void NAME(T *c, int64_t rows, int64_t cols, int64_t ldc,             \
                                   const T *bias, int relu) {                                \
    for (int64_t i = 0; i < rows; i++) {                                                     \
      T *restrict r = c + i * ldc;                                                           \
      if (bias && relu)                                                                      \
        for (int64_t j = 0; j < cols; j++) {                                                 \
          const T x = r[j] + bias[j];                                                        \
          r[j] = x > 0 || x != x ? x : (T)0;                                                 \
        }                                                                                    \
      else if (bias)                                                                         \
        for (int64_t j = 0; j < cols; j++) r[j] = r[j] + bias[j];                            \
      else                                                                                   \
        for (int64_t j = 0; j < cols; j++) r[j] = r[j] > 0 || r[j] != r[j] ? r[j] : (T)0;    \
    }                                                                                        \
  }
JD_EPILOGUE(float, jd_epilogue_f32)
JD_EPILOGUE(double, jd_epilogue_f64)
#undef JD_EPILOGUE

/* the epilogue of a piece: `rows` x `cols` values of C from element oc, whose first column is
   column j0 of the product */
static void jd_epilogue(const jd_gemm_job *g, int64_t rows, int64_t cols, int64_t oc,
                        int64_t j0) {
  if (!g->bias && !g->relu) return;
  if (g->kind == JD_GEMM_F64)
    jd_epilogue_f64((double *)g->c + oc, rows, cols, g->n,
                    g->bias ? (const double *)g->bias + j0 : NULL, g->relu);
  else if (g->kind == JD_GEMM_F32)
    jd_epilogue_f32((float *)g->c + oc, rows, cols, g->n,
                    g->bias ? (const float *)g->bias + j0 : NULL, g->relu);
}

/* A real piece with one row or one column (a decoder step's x @ W, a matrix times a vector)
   as one matrix-vector product: 2-3x faster than the same GEMM through BLAS's gemm at these
   sizes (OpenBLAS sgemv against sgemm, [1, 128] @ [128, 512]: 5.5 against 16 us). The
   vector is the one-row (or one-column) operand, read with its stride; k >= 1. A piece of m
   rows and one column is also the last piece of a split along n that has one column left. */
static void jd_gemv_piece(const jd_gemm_job *g, int64_t m, int64_t n, int64_t oa, int64_t ob,
                          int64_t oc) {
  enum CBLAS_TRANSPOSE t;
  int64_t rows, cols, ld, incx;
  const void *mat, *vec;
  if (m == 1) {           /* C[0, :] = x @ op(B): x is A's only row (or column) */
    vec = g->kind == JD_GEMM_F64 ? (const void *)((const double *)g->a + oa)
                                 : (const void *)((const float *)g->a + oa);
    incx = g->trans_a ? g->lda : 1;
    mat = g->kind == JD_GEMM_F64 ? (const void *)((const double *)g->b + ob)
                                 : (const void *)((const float *)g->b + ob);
    ld = g->ldb;
    t = g->trans_b ? CblasNoTrans : CblasTrans;       /* B is [n, k] or [k, n] */
    rows = g->trans_b ? n : g->k;
    cols = g->trans_b ? g->k : n;
  } else {                /* C[:, 0] = op(A) @ y: y is B's only column (or row) */
    vec = g->kind == JD_GEMM_F64 ? (const void *)((const double *)g->b + ob)
                                 : (const void *)((const float *)g->b + ob);
    incx = g->trans_b ? 1 : g->ldb;
    mat = g->kind == JD_GEMM_F64 ? (const void *)((const double *)g->a + oa)
                                 : (const void *)((const float *)g->a + oa);
    ld = g->lda;
    t = g->trans_a ? CblasTrans : CblasNoTrans;       /* A is [k, m] or [m, k] */
    rows = g->trans_a ? g->k : m;
    cols = g->trans_a ? m : g->k;
  }
  /* a row of C is contiguous; a column has C's row stride (a piece of one column of a wider
     C, as the last piece of a split can be) */
  const int64_t incy = m == 1 ? 1 : g->n;
  if (g->kind == JD_GEMM_F64)
    scipy_cblas_dgemv(CblasRowMajor, t, (blasint)rows, (blasint)cols, 1, (const double *)mat,
                      (blasint)ld, (const double *)vec, (blasint)incx, 0, (double *)g->c + oc,
                      (blasint)incy);
  else
    scipy_cblas_sgemv(CblasRowMajor, t, (blasint)rows, (blasint)cols, 1, (const float *)mat,
                      (blasint)ld, (const float *)vec, (blasint)incx, 0, (float *)g->c + oc,
                      (blasint)incy);
}

/* whether a piece of m rows runs in jd_skinny.h's loops; k, n: the whole B's (a piece of some
   columns of B reads as much of it as its own width, and its choice is the whole GEMM's) */
static int jd_skinny(int kind, int trans_b, int64_t m, int64_t n, int64_t k) {
  const double elems = (double)k * n;
  return jd_skinny_f32 != NULL && kind == JD_GEMM_F32 && !trans_b && m >= 2 && k >= 1 &&
         elems >= JD_SKINNY_MIN_ELEMS &&
         m <= (k <= JD_SKINNY_TALL_K ? 64 :
               elems <= JD_SKINNY_WIDE_ELEMS || k <= JD_SKINNY_WIDE_K ? 32 : 16);
}

/* one piece through BLAS's gemm */
static void jd_blas_piece(const jd_gemm_job *g, int64_t m, int64_t n, int64_t oa, int64_t ob,
                          int64_t oc) {
  const enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  switch (g->kind) {
  case JD_GEMM_F64:
    scipy_cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, 1,
                      (const double *)g->a + oa, (blasint)g->lda, (const double *)g->b + ob,
                      (blasint)g->ldb, 0, (double *)g->c + oc, (blasint)g->n);
    break;
  case JD_GEMM_C64: {
    const float one[2] = {1, 0}, zero[2] = {0, 0};
    scipy_cblas_cgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, one,
                      (const float *)g->a + 2 * oa, (blasint)g->lda, (const float *)g->b + 2 * ob,
                      (blasint)g->ldb, zero, (float *)g->c + 2 * oc, (blasint)g->n);
    break;
  }
  case JD_GEMM_C128: {
    const double one[2] = {1, 0}, zero[2] = {0, 0};
    scipy_cblas_zgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, one,
                      (const double *)g->a + 2 * oa, (blasint)g->lda,
                      (const double *)g->b + 2 * ob, (blasint)g->ldb, zero,
                      (double *)g->c + 2 * oc, (blasint)g->n);
    break;
  }
  default:
    scipy_cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, 1,
                      (const float *)g->a + oa, (blasint)g->lda, (const float *)g->b + ob,
                      (blasint)g->ldb, 0, (float *)g->c + oc, (blasint)g->n);
  }
}

static void jd_gemm_piece(const void *ctx, int64_t piece) {
  const jd_gemm_job *g = (const jd_gemm_job *)ctx;
  const int64_t mat = piece / g->parts, lo = piece % g->parts * g->step;
  const int64_t extent = g->split_n ? g->n : g->m;
  const int64_t len = extent - lo < g->step ? extent - lo : g->step;
  /* offsets, in elements, of the piece's first A, B and C entries */
  int64_t oa = mat * g->stride_a, ob = mat * g->stride_b, oc = mat * g->stride_c;
  int64_t m = g->m, n = g->n;
  if (g->split_n) {
    ob += g->trans_b ? lo * g->ldb : lo;
    oc += lo;
    n = len;
  } else {
    oa += g->trans_a ? lo : lo * g->lda;
    oc += lo * g->n;
    m = len;
  }
  if ((m == 1 || n == 1) && g->k >= 1 && (g->kind == JD_GEMM_F32 || g->kind == JD_GEMM_F64)) {
    jd_gemv_piece(g, m, n, oa, ob, oc);
  } else if (jd_skinny(g->kind, g->trans_b, m, g->n, g->k)) {
    const float *a = (const float *)g->a + oa, *b = (const float *)g->b + ob;
    float *c = (float *)g->c + oc;
    /* op(A)'s element (i, p): A[i, p] (row stride lda) or, transposed, A[p, i] */
    const int64_t sa_row = g->trans_a ? 1 : g->lda, sa_col = g->trans_a ? g->lda : 1;
    jd_skinny_f32(m, n, g->k, a, sa_row, sa_col, b, g->ldb, c, g->n);
  } else {
    jd_blas_piece(g, m, n, oa, ob, oc);
  }
  jd_epilogue(g, m, n, oc, g->split_n ? lo : 0);
}

/* C[b] = op(A[b]) @ op(B[b]) for b < nb, row-major, C packed (ldc = n); the callers checked
   that every size fits blasint. */
JD_RT void jd_gemm(int kind, int trans_a, int trans_b, int64_t nb, int64_t m, int64_t n,
                   int64_t k, const void *a, const void *b, void *c, const void *bias,
                   int relu) {
  if (scipy_openblas_get_num_threads() != 1) scipy_openblas_set_num_threads(1);  /* if reset */
  jd_gemm_job g = {kind, trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n,
                   m * k, k * n, m * n, a, b, c, 1, 0, 0, bias, relu};
  double work = (double)nb * m * n * k * (kind >= JD_GEMM_C64 ? 4 : 1);
  if (jd_skinny(kind, trans_b, m, n, k))
    work = fmax(work, (double)nb * n * k * JD_SKINNY_WEIGHT);
  /* All the pool's threads, busy machine or not: a late worker costs nothing, and fewer
     threads would only give up CPU share to the neighbours (measured: `jdisc bench --busy 2`,
     W1 and W3, against a count adapted to /proc/loadavg). */
  const int threads = work < JD_GEMM_SPLIT_WORK ? 1 : jd_pool_threads;
  /* Split the larger of m and n (each piece re-packs the whole of the other operand), into
     about JD_GEMM_PIECES pieces per thread over all matrices, each at least JD_GEMM_MIN_ROWS
     wide. */
  g.split_n = n > m;
  const int64_t extent = g.split_n ? n : m;
  int64_t parts = threads > 1 ? (JD_GEMM_PIECES * threads + nb - 1) / nb : 1;
  const int64_t widest = (extent + JD_GEMM_MIN_ROWS - 1) / JD_GEMM_MIN_ROWS;
  if (parts > widest) parts = widest;
  if (parts < 1) parts = 1;
  g.step = (extent + parts - 1) / parts;
  g.step = (g.step + 7) / 8 * 8;                  /* whole register blocks where possible */
  g.parts = (extent + g.step - 1) / g.step;
  jd_pool_run(jd_gemm_piece, &g, nb * g.parts, threads);
}

/* The product per element of a contraction of size 1, C[b, i, j] = A[b, i] * B[b, j] (with one
   contracted element, A's and B's layouts index by i and j alone), as XLA computes it: its
   simplifier makes such a dot a multiply, so 0 * -1 is -0 there, where a GEMM's accumulator,
   starting from +0, gives +0. Complex values are W = 2 scalars, multiplied by XLA's
   four-product formula. */
#define JD_OUTER(T, W, MUL)                                                                  \
  for (int64_t bi = 0; bi < nb; bi++)                                                        \
    for (int64_t i = 0; i < m; i++) {                                                        \
      const T *restrict x = (const T *)a + (bi * m + i) * W;                                 \
      const T *restrict y = (const T *)b + bi * n * W;                                       \
      T *restrict z = (T *)c + (bi * m + i) * n * W;                                         \
      for (int64_t j = 0; j < n; j++) MUL;                                                   \
    }
#define JD_CMUL (z[2 * j] = x[0] * y[2 * j] - x[1] * y[2 * j + 1],                            \
                 z[2 * j + 1] = x[0] * y[2 * j + 1] + x[1] * y[2 * j])
static void jd_outer(int kind, int64_t nb, int64_t m, int64_t n, const void *a, const void *b,
                     void *c) {
  switch (kind) {
  case JD_GEMM_F32: JD_OUTER(float, 1, z[j] = x[0] * y[j]) break;
  case JD_GEMM_F64: JD_OUTER(double, 1, z[j] = x[0] * y[j]) break;
  case JD_GEMM_C64: JD_OUTER(float, 2, JD_CMUL) break;
  default: JD_OUTER(double, 2, JD_CMUL)
  }
}
#undef JD_CMUL
#undef JD_OUTER

/* A dot kernel that is one GEMM of a BLAS element type: the launcher calls this instead of a
   kernel of its own, so no unit is compiled for it (lowering/blas.py). Sizes as jd_gemm's;
   `bias` (or NULL) and `relu` its epilogue (jd_epilogue; f32 and f64 only). */
JD_RT int jd_dot(int kind, int trans_a, int trans_b, int64_t nb, int64_t m, int64_t n,
                 int64_t k, const void *a, const void *b, void *c, const void *bias, int relu) {
  if (nb == 0 || m == 0 || n == 0) return 0;
  if (k >= 2) {
    jd_gemm(kind, trans_a, trans_b, nb, m, n, k, a, b, c, bias, relu);
    return 0;
  }
  if (k == 0) {
    const size_t scalar = kind == JD_GEMM_F32 ? 4 : kind == JD_GEMM_C128 ? 16 : 8;
    memset(c, 0, (size_t)(nb * m * n) * scalar);          /* all-zero bits are +0 */
  } else {
    jd_outer(kind, nb, m, n, a, b, c);
  }
  const jd_gemm_job g = {.kind = kind, .n = n, .c = c, .bias = bias, .relu = relu};
  jd_epilogue(&g, nb * m, n, 0, 0);
  return 0;
}
