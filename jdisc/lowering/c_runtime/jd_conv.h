/* Direct convolutions in JDCONV_T: NHWC input x HWIO kernel -> NHWC output, 1 to
   JD_CONV_MAX_DIMS spatial dims, any strides, padding, input (lhs) and kernel (rhs)
   dilation, window reversal and feature groups (jd_conv_args, jd_shared.h). The unit
   conv_JDCONV_S of the programs that have one (lowering/units.py conv_unit): compiled once for
   every program, where each convolution had been a kernel unit of its own, 70-90 ms of the C
   compiler's time apiece (W4 has two). The launcher calls jd_conv_JDCONV_S (lowering/conv.py).

   Output rows (an image and all its output positions but the innermost) run in parallel on the
   pool. Along a row, a block of P positions times F output features accumulates in registers:
   for each kernel tap and input feature, P input values times one row of F weights (the F
   loop is `omp simd`; the multiply-adds are fused where the target has a fast fma). A group's
   output features go in blocks of 2 * JDCONV_LANES (two vectors of 64 bytes), then one of
   JDCONV_LANES, then the last few (fewer than JDCONV_LANES) as one more of JDCONV_LANES whose
   weights are a copy padded with zeros (ctx.rest: no read past the kernel's last weight, and
   the code of two block widths only); a block of two vectors has 6 positions, of one 8: 12 of
   the 32 registers an AVX-512 core has hold the accumulators, leaving room for weights and
   broadcast inputs (blocks of 4..8 positions x 16..64 features measured within noise of each
   other on W4). The inputs of one group, each position's taps times features, are one run of
   input and of weights. The 1 to 3 positions past a row's last
   whole block run one at a time (a block of one position took a fifth to a quarter of a whole
   block's time in W4's second convolution), 4 or 5 in one more block that computes positions
   past the row but does not store them (1.05-1.25x faster than one at a time there). Against
   the kernels generated for each convolution before (lowering/conv.py, until 2026-12-07):
   W4's second convolution 1.1-2.4x faster, its first (3 input features, whose whole window
   the generated kernel unrolled with constant offsets) 1.1-1.4x slower (docs/performance.md).
   GCC clones a static function per call site's constants at -O3: the block widths' functions
   are noinline, noclone (a clone of the narrow width doubled its code).

   Taps outside the input (padding, dilation holes) are skipped for the outer spatial dims and
   read zeros for the innermost one; a block whose innermost taps are all inside reads them as
   one contiguous run of input. Every output sums its products in one order whatever its
   block: kernel positions outermost first, then input features (as the im2col + GEMM scheme
   of lowering/conv.py). */

#define JDCONV_MAXP 8
#define JDCONV_MAXF (2 * JDCONV_LANES)
/* multiply-adds below which a convolution runs on one thread (waking threads costs more) */
#define JDCONV_PARALLEL_MACS 4194304

typedef struct {
  jd_region jd;                 /* the parallel loop's: first, as jd_parallel expects */
  const jd_conv_args *a;
  const JDCONV_T *zeros;        /* cin_g zeros, read for taps outside the input */
  /* a group's last cout_g % JDCONV_LANES features' weights, each row padded with zeros to
     JDCONV_LANES (groups x taps x cin_g rows), or NULL where there are none */
  const JDCONV_T *rest;
  int64_t cin_g, cout_g, taps, outer_taps, contiguous;
} jd_conv_ctx_JDCONV_S;

typedef struct {                /* one output row: image b, outer positions o, group g */
  int64_t b, g, o[JD_CONV_MAX_DIMS];
  JDCONV_T *out;                /* the row's first output */
  const JDCONV_T **xrows;       /* per outer tap: its input row (group 0), NULL if outside */
} jd_conv_row_JDCONV_S;

/* Whether position y of an axis of n inputs spread ldil apart (input dilation) hits one, and
   which (*at). Without dilation no division: the row's edges take this per tap and position. */
static inline int jd_conv_hit_JDCONV_S(int64_t y, int64_t ldil, int64_t n, int64_t *at) {
  if (ldil == 1) {
    *at = y;
    return y >= 0 && y < n;
  }
  *at = y >= 0 ? y / ldil : 0;
  return y >= 0 && y % ldil == 0 && *at < n;
}

/* r.xrows for row r: for each tap of the outer spatial dims (outermost first, as an odometer
   counts), the input row it reads, or NULL where one of its positions falls outside the
   input. Once per row: the blocks along the row read them. */
static void jd_conv_xrows_JDCONV_S(const jd_conv_ctx_JDCONV_S *c, jd_conv_row_JDCONV_S *r) {
  const jd_conv_args *a = c->a;
  const int64_t last = a->ns - 1;
  int64_t w[JD_CONV_MAX_DIMS] = {0};
  for (int64_t t = 0; t < c->outer_taps; t++) {
    int64_t at = r->b, inside = 1;
    for (int64_t i = 0; i < last && inside; i++) {
      const int64_t kpos = a->rev[i] ? a->ksz[i] - 1 - w[i] : w[i];
      int64_t yi;
      inside = jd_conv_hit_JDCONV_S(r->o[i] * a->stride[i] + kpos * a->rdil[i] - a->lo[i],
                                    a->ldil[i], a->isz[i], &yi);
      at = at * a->isz[i] + yi;
    }
    r->xrows[t] = inside ? (const JDCONV_T *)a->x + at * a->isz[last] * a->cin : NULL;
    for (int64_t i = last - 1; i >= 0 && ++w[i] == a->ksz[i]; i--) w[i] = 0;
  }
}

/* The weights a block reads: its first feature's weight at the first tap and input feature,
   the distance between rows (one per tap and input feature), and how many of its F features
   are stored (fewer than F for a group's last few features, read from ctx.rest). */
typedef struct {
  const JDCONV_T *w;
  int64_t ld, f0, width;
} jd_conv_weights_JDCONV_S;

/* One block: acc[p][j] for positions ob + p (p < P) and features f0 + j (j < F) of row r.
   Inlined with constant P and F, so that the accumulators stay in registers. */
static inline __attribute__((always_inline)) void jd_conv_block_JDCONV_S(
    const jd_conv_ctx_JDCONV_S *c, const jd_conv_row_JDCONV_S *r, int64_t ob,
    const jd_conv_weights_JDCONV_S *wt, const int P, const int F) {
  const jd_conv_args *a = c->a;
  const int64_t last = a->ns - 1, cin = a->cin, cin_g = c->cin_g, ld = wt->ld;
  const int64_t kl = a->ksz[last], isl = a->isz[last], osl = a->osz[last];
  const int64_t stride = a->stride[last], ldil = a->ldil[last], lo = a->lo[last];
  /* all the block's innermost taps inside the input: read as one run */
  const int64_t first = ob * stride - lo, end = (ob + P - 1) * stride + kl - 1 - lo;
  const int inner = P > 1 && c->contiguous && first >= 0 && end < isl;
  JDCONV_T acc[JDCONV_MAXP][JDCONV_MAXF];
  for (int p = 0; p < P; p++) {
#pragma omp simd
    for (int j = 0; j < F; j++) acc[p][j] = 0;
  }
  for (int64_t t = 0; t < c->outer_taps; t++) {
    if (!r->xrows[t]) continue;
    const JDCONV_T *xrow = r->xrows[t] + r->g * cin_g;
    const JDCONV_T *wtap = wt->w + t * kl * cin_g * ld;
    if (inner) {
      /* one group: the row's taps times features are one run of input and of weights */
      const JDCONV_T *xb = xrow + first * cin;
      const int64_t runs = cin_g == cin ? 1 : kl, run = cin_g == cin ? kl * cin : cin_g;
      for (int64_t wl = 0; wl < runs; wl++)
        for (int64_t ci = 0; ci < run; ci++) {
          const JDCONV_T *wv = wtap + (wl * cin_g + ci) * ld;
          for (int p = 0; p < P; p++) {
            const JDCONV_T xv = xb[p * stride * cin + wl * cin + ci];
#pragma omp simd
            for (int j = 0; j < F; j++) acc[p][j] = jd_fma_JDCONV_S(xv, wv[j], acc[p][j]);
          }
        }
      continue;
    }
    for (int64_t wl = 0; wl < kl; wl++) {
      const JDCONV_T *xp[JDCONV_MAXP];   /* each position's input features at this tap */
      const int64_t kpos = a->rev[last] ? kl - 1 - wl : wl;
      for (int p = 0; p < P; p++) {
        int64_t y;
        xp[p] = ob + p < osl && jd_conv_hit_JDCONV_S((ob + p) * stride + kpos * a->rdil[last] - lo,
                                                     ldil, isl, &y) ? xrow + y * cin : c->zeros;
      }
      for (int64_t ci = 0; ci < cin_g; ci++) {
        const JDCONV_T *wv = wtap + (wl * cin_g + ci) * ld;
        for (int p = 0; p < P; p++) {
          const JDCONV_T xv = xp[p][ci];
#pragma omp simd
          for (int j = 0; j < F; j++) acc[p][j] = jd_fma_JDCONV_S(xv, wv[j], acc[p][j]);
        }
      }
    }
  }
  JDCONV_T *o = r->out + r->g * c->cout_g + wt->f0;
  for (int p = 0; p < P && ob + p < osl; p++) {
    if (F == JDCONV_MAXF || F == wt->width) {   /* a wide block stores every feature */
#pragma omp simd
      for (int j = 0; j < F; j++) o[(ob + p) * a->cout + j] = acc[p][j];
    } else {
      for (int j = 0; j < wt->width; j++) o[(ob + p) * a->cout + j] = acc[p][j];
    }
  }
}

/* Features wt.f0 .. wt.f0 + F - 1 of row r at every position: whole blocks of P, then the
   last few positions one at a time or as one more block. */
static inline __attribute__((always_inline)) void jd_conv_positions_JDCONV_S(
    const jd_conv_ctx_JDCONV_S *c, const jd_conv_row_JDCONV_S *r,
    const jd_conv_weights_JDCONV_S *wt, const int P, const int F) {
  const int64_t osl = c->a->osz[c->a->ns - 1];
  const int64_t left = osl % P;
  const int64_t tail = left && left <= 3 ? osl - left : osl;
  for (int64_t ob = 0; ob < tail; ob += P) jd_conv_block_JDCONV_S(c, r, ob, wt, P, F);
  for (int64_t ob = tail; ob < osl; ob++) jd_conv_block_JDCONV_S(c, r, ob, wt, 1, F);
}

/* the two block widths, each a function of its own: two vectors of features, then one */
#if defined(__GNUC__) && !defined(__clang__)
#define JDCONV_ONCE __attribute__((noinline, noclone))
#else
#define JDCONV_ONCE __attribute__((noinline))
#endif
static JDCONV_ONCE void jd_conv_wide_JDCONV_S(const jd_conv_ctx_JDCONV_S *c,
                                              const jd_conv_row_JDCONV_S *r,
                                              const jd_conv_weights_JDCONV_S *wt) {
  jd_conv_positions_JDCONV_S(c, r, wt, 6, JDCONV_MAXF);
}
static JDCONV_ONCE void jd_conv_vector_JDCONV_S(const jd_conv_ctx_JDCONV_S *c,
                                                const jd_conv_row_JDCONV_S *r,
                                                const jd_conv_weights_JDCONV_S *wt) {
  jd_conv_positions_JDCONV_S(c, r, wt, 8, JDCONV_LANES);
}

static void jd_conv_rows_JDCONV_S(const void *ctx, int64_t piece) {
  const jd_conv_ctx_JDCONV_S *c = (const jd_conv_ctx_JDCONV_S *)ctx;
  const jd_conv_args *a = c->a;
  const int64_t last = a->ns - 1, cout_g = c->cout_g;
  const int64_t lo = piece * c->jd.step;
  const int64_t hi = c->jd.count - lo < c->jd.step ? c->jd.count : lo + c->jd.step;
  jd_conv_row_JDCONV_S r;
  r.xrows = (const JDCONV_T **)malloc(sizeof(JDCONV_T *) * (size_t)c->outer_taps);
  if (!r.xrows) {
    jd_region_fail((jd_region *)&c->jd);
    return;
  }
  for (int64_t row = lo; row < hi; row++) {
    int64_t rest = row;
    for (int64_t i = last - 1; i >= 0; i--) {
      r.o[i] = rest % a->osz[i];
      rest /= a->osz[i];
    }
    r.b = rest;
    r.out = (JDCONV_T *)a->out + row * a->osz[last] * a->cout;
    jd_conv_xrows_JDCONV_S(c, &r);
    for (r.g = 0; r.g < a->groups; r.g++) {
      jd_conv_weights_JDCONV_S wt = {(const JDCONV_T *)a->k + r.g * cout_g, a->cout, 0,
                                     JDCONV_MAXF};
      for (; cout_g - wt.f0 >= JDCONV_MAXF; wt.f0 += JDCONV_MAXF, wt.w += JDCONV_MAXF)
        jd_conv_wide_JDCONV_S(c, &r, &wt);
      wt.width = JDCONV_LANES;
      if (cout_g - wt.f0 >= JDCONV_LANES) {
        jd_conv_vector_JDCONV_S(c, &r, &wt);
        wt.f0 += JDCONV_LANES;
        wt.w += JDCONV_LANES;
      }
      if (cout_g > wt.f0) {   /* the last few features: a vector's worth of padded weights */
        const jd_conv_weights_JDCONV_S pad = {c->rest + r.g * c->taps * c->cin_g * JDCONV_LANES,
                                              JDCONV_LANES, wt.f0, cout_g - wt.f0};
        jd_conv_vector_JDCONV_S(c, &r, &pad);
      }
    }
  }
  free(r.xrows);
}

/* The convolution `a` describes; 1 if its scratch memory could not be allocated. */
JD_RT int jd_conv_JDCONV_S(const jd_conv_args *a) {
  const int64_t last = a->ns - 1;
  int64_t rows = a->batch, taps = 1, outer_taps = 1;
  for (int64_t i = 0; i < last; i++) rows *= a->osz[i];
  for (int64_t i = 0; i < a->ns; i++) taps *= a->ksz[i];
  for (int64_t i = 0; i < last; i++) outer_taps *= a->ksz[i];
  const int64_t outputs = rows * a->osz[last] * a->cout;
  if (outputs == 0) return 0;
  const int64_t cin_g = a->cin / a->groups, cout_g = a->cout / a->groups;
  if (cin_g == 0 || taps == 0) {     /* no products: every output is an empty sum */
    memset(a->out, 0, sizeof(JDCONV_T) * (size_t)outputs);
    return 0;
  }
  JDCONV_T *zeros = (JDCONV_T *)calloc((size_t)cin_g, sizeof(JDCONV_T));
  const int64_t width = cout_g % JDCONV_LANES, rows_of_rest = a->groups * taps * cin_g;
  JDCONV_T *rest = width ? (JDCONV_T *)calloc((size_t)(rows_of_rest * JDCONV_LANES),
                                              sizeof(JDCONV_T)) : NULL;
  if (!zeros || (width && !rest)) {
    free(zeros);
    free(rest);
    return 1;
  }
  for (int64_t i = 0; width && i < rows_of_rest; i++)   /* row i: group i / (taps cin_g) */
    memcpy(rest + i * JDCONV_LANES, (const JDCONV_T *)a->k + i % (taps * cin_g) * a->cout
               + i / (taps * cin_g) * cout_g + cout_g - width, sizeof(JDCONV_T) * (size_t)width);
  jd_conv_ctx_JDCONV_S c = {{0, 0, 0}, a, zeros, rest, cin_g, cout_g, taps, outer_taps,
                            a->ldil[last] == 1 && a->rdil[last] == 1 && !a->rev[last]};
  /* in parallel: rows of output positions */
  jd_parallel(jd_conv_rows_JDCONV_S, &c.jd, rows,
              rows > 1 && (double)outputs * cin_g * taps >= JDCONV_PARALLEL_MACS);
  free(zeros);
  free(rest);
  return c.jd.failed;
}

#undef JDCONV_MAXP
#undef JDCONV_MAXF
#undef JDCONV_PARALLEL_MACS
#undef JDCONV_ONCE
