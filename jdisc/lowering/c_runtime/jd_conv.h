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

   Taps outside the input along the outer spatial dims are skipped. Along the innermost one,
   each output row first copies the input rows it reads (one per outer tap) into rows padded
   with zeros (the padding, input dilation's holes and the positions past the row that a last
   block computes but does not store), so that every block reads its taps at fixed offsets,
   without a check: one path for the row's edges and its middle. The copy is a row of input per
   outer tap and output row, against a row of outputs times cout x cin_g x taps of work. Every
   output sums its products in one order whatever its block: kernel positions outermost
   first, then input features (as the im2col + GEMM scheme of lowering/conv.py). */

#define JDCONV_MAXP 8
#define JDCONV_MAXF (2 * JDCONV_LANES)
/* multiply-adds below which a convolution runs on one thread (waking threads costs more) */
#define JDCONV_PARALLEL_MACS 4194304
/* about the bytes of padded input rows a chunk of an output row copies (jd_conv_rows) */
#define JDCONV_CHUNK_BYTES 262144

typedef struct {
  jd_region jd;                 /* the parallel loop's: first, as jd_parallel expects */
  const jd_conv_args *a;
  /* a group's last cout_g % JDCONV_LANES features' weights, each row padded with zeros to
     JDCONV_LANES (groups x taps x cin_g rows), or NULL where there are none */
  const JDCONV_T *rest;
  int64_t cin_g, cout_g, taps, outer_taps;
  int64_t chunk;                /* output positions a row is copied for at a time */
  int64_t span;                 /* positions in a padded input row: a chunk's */
  int64_t one_run;              /* one group, kernel taps side by side: a position's taps
                                   times features are one run of a padded row */
} jd_conv_ctx_JDCONV_S;

typedef struct {                /* a chunk of an output row: image b, outer positions o, group g */
  int64_t b, g, o[JD_CONV_MAX_DIMS];
  int64_t n;                    /* the chunk's positions */
  JDCONV_T *out;                /* its first output */
  const JDCONV_T **xrows;       /* per outer tap: its padded input row, NULL if outside */
  JDCONV_T *padded;             /* those rows: outer_taps x span x cin values */
  int64_t *xoff;                /* per innermost tap: where it reads in a padded row */
} jd_conv_row_JDCONV_S;

/* Whether position y of an axis of n inputs spread ldil apart (input dilation) hits one, and
   which (*at). */
static inline int jd_conv_hit_JDCONV_S(int64_t y, int64_t ldil, int64_t n, int64_t *at) {
  if (ldil == 1) {
    *at = y;
    return y >= 0 && y < n;
  }
  *at = y >= 0 ? y / ldil : 0;
  return y >= 0 && y % ldil == 0 && *at < n;
}

/* r.xrows for the chunk of row r from output position x0: for each tap of the outer spatial
   dims (outermost first, as an odometer counts), its input row copied into a padded row
   (position q of which is the innermost dim's position x0 * stride + q - lo, in input-dilated
   coordinates), or NULL where one of the tap's outer positions falls outside the input. */
static void jd_conv_pad_rows_JDCONV_S(const jd_conv_ctx_JDCONV_S *c, jd_conv_row_JDCONV_S *r,
                                      int64_t x0) {
  const jd_conv_args *a = c->a;
  const int64_t last = a->ns - 1, cin = a->cin, span = c->span, isl = a->isz[last];
  const int64_t lo = a->lo[last] - x0 * a->stride[last], ldil = a->ldil[last];
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
    r->xrows[t] = NULL;
    if (inside) {
      const JDCONV_T *x = (const JDCONV_T *)a->x + at * isl * cin;
      JDCONV_T *row = r->padded + t * span * cin;
      if (ldil == 1) {          /* zeros, the input's positions [q0 - lo, q1 - lo), zeros */
        const int64_t q0 = lo > 0 ? (lo < span ? lo : span) : 0;
        int64_t q1 = isl + lo;
        q1 = q1 < q0 ? q0 : q1 > span ? span : q1;
        memset(row, 0, sizeof(JDCONV_T) * (size_t)(q0 * cin));
        if (q1 > q0)
          memcpy(row + q0 * cin, x + (q0 - lo) * cin, sizeof(JDCONV_T) * (size_t)((q1 - q0) * cin));
        memset(row + q1 * cin, 0, sizeof(JDCONV_T) * (size_t)((span - q1) * cin));
      } else {
        for (int64_t q = 0; q < span; q++) {
          int64_t y;
          if (jd_conv_hit_JDCONV_S(q - lo, ldil, isl, &y))
            memcpy(row + q * cin, x + y * cin, sizeof(JDCONV_T) * (size_t)cin);
          else
            memset(row + q * cin, 0, sizeof(JDCONV_T) * (size_t)cin);
        }
      }
      r->xrows[t] = row;
    }
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
  const int64_t last = a->ns - 1, cin_g = c->cin_g, ld = wt->ld, kl = a->ksz[last];
  const int64_t step = a->stride[last] * a->cin;      /* between positions in a padded row */
  /* the taps times features of a position: one run, or a run of features per tap */
  const int64_t runs = c->one_run ? 1 : kl, run = c->one_run ? kl * cin_g : cin_g;
  JDCONV_T acc[JDCONV_MAXP][JDCONV_MAXF];
  for (int p = 0; p < P; p++) {
#pragma omp simd
    for (int j = 0; j < F; j++) acc[p][j] = 0;
  }
  for (int64_t t = 0; t < c->outer_taps; t++) {
    if (!r->xrows[t]) continue;
    const JDCONV_T *xb = r->xrows[t] + ob * step + r->g * cin_g;
    const JDCONV_T *wtap = wt->w + t * kl * cin_g * ld;
    for (int64_t wl = 0; wl < runs; wl++) {
      const JDCONV_T *xw = xb + r->xoff[wl];
      for (int64_t ci = 0; ci < run; ci++) {
        const JDCONV_T *wv = wtap + (wl * cin_g + ci) * ld;
        for (int p = 0; p < P; p++) {
          const JDCONV_T xv = xw[p * step + ci];
#pragma omp simd
          for (int j = 0; j < F; j++) acc[p][j] = jd_fma_JDCONV_S(xv, wv[j], acc[p][j]);
        }
      }
    }
  }
  JDCONV_T *o = r->out + r->g * c->cout_g + wt->f0;
  for (int p = 0; p < P && ob + p < r->n; p++) {
    if (F == JDCONV_MAXF || F == wt->width) {   /* a wide block stores every feature */
#pragma omp simd
      for (int j = 0; j < F; j++) o[(ob + p) * a->cout + j] = acc[p][j];
    } else {
      for (int j = 0; j < wt->width; j++) o[(ob + p) * a->cout + j] = acc[p][j];
    }
  }
}

/* Features wt.f0 .. wt.f0 + F - 1 of chunk r at every position: whole blocks of P, then the
   last few positions one at a time or as one more block. */
static inline __attribute__((always_inline)) void jd_conv_positions_JDCONV_S(
    const jd_conv_ctx_JDCONV_S *c, const jd_conv_row_JDCONV_S *r,
    const jd_conv_weights_JDCONV_S *wt, const int P, const int F) {
  const int64_t osl = r->n;
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

/* Every feature of chunk r's group r.g: blocks of two vectors of features, then one, then the
   last few (a vector's worth of padded weights) */
static void jd_conv_group_JDCONV_S(const jd_conv_ctx_JDCONV_S *c, const jd_conv_row_JDCONV_S *r) {
  const int64_t cout_g = c->cout_g;
  jd_conv_weights_JDCONV_S wt = {(const JDCONV_T *)c->a->k + r->g * cout_g, c->a->cout, 0,
                                 JDCONV_MAXF};
  for (; cout_g - wt.f0 >= JDCONV_MAXF; wt.f0 += JDCONV_MAXF, wt.w += JDCONV_MAXF)
    jd_conv_wide_JDCONV_S(c, r, &wt);
  wt.width = JDCONV_LANES;
  if (cout_g - wt.f0 >= JDCONV_LANES) {
    jd_conv_vector_JDCONV_S(c, r, &wt);
    wt.f0 += JDCONV_LANES;
    wt.w += JDCONV_LANES;
  }
  if (cout_g > wt.f0) {
    const jd_conv_weights_JDCONV_S pad = {c->rest + r->g * c->taps * c->cin_g * JDCONV_LANES,
                                          JDCONV_LANES, wt.f0, cout_g - wt.f0};
    jd_conv_vector_JDCONV_S(c, r, &pad);
  }
}

static void jd_conv_rows_JDCONV_S(const void *ctx, int64_t piece) {
  const jd_conv_ctx_JDCONV_S *c = (const jd_conv_ctx_JDCONV_S *)ctx;
  const jd_conv_args *a = c->a;
  const int64_t last = a->ns - 1, kl = a->ksz[last];
  const int64_t lo = piece * c->jd.step;
  const int64_t hi = c->jd.count - lo < c->jd.step ? c->jd.count : lo + c->jd.step;
  jd_conv_row_JDCONV_S r;
  r.xrows = (const JDCONV_T **)malloc(sizeof(JDCONV_T *) * (size_t)c->outer_taps);
  r.padded = (JDCONV_T *)malloc(sizeof(JDCONV_T) * (size_t)(c->outer_taps * c->span * a->cin));
  r.xoff = (int64_t *)malloc(sizeof(int64_t) * (size_t)kl);
  if (!r.xrows || !r.padded || !r.xoff) {
    free(r.xrows);
    free(r.padded);
    free(r.xoff);
    jd_region_fail((jd_region *)&c->jd);
    return;
  }
  for (int64_t wl = 0; wl < kl; wl++)   /* the weights' tap wl reads kernel position kpos */
    r.xoff[wl] = (a->rev[last] ? kl - 1 - wl : wl) * a->rdil[last] * a->cin;
  for (int64_t row = lo; row < hi; row++) {
    int64_t rest = row;
    for (int64_t i = last - 1; i >= 0; i--) {
      r.o[i] = rest % a->osz[i];
      rest /= a->osz[i];
    }
    r.b = rest;
    for (int64_t x0 = 0; x0 < a->osz[last]; x0 += c->chunk) {
      r.n = a->osz[last] - x0 < c->chunk ? a->osz[last] - x0 : c->chunk;
      r.out = (JDCONV_T *)a->out + (row * a->osz[last] + x0) * a->cout;
      jd_conv_pad_rows_JDCONV_S(c, &r, x0);
      for (r.g = 0; r.g < a->groups; r.g++) jd_conv_group_JDCONV_S(c, &r);
    }
  }
  free(r.xrows);
  free(r.padded);
  free(r.xoff);
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
  const int64_t width = cout_g % JDCONV_LANES, rows_of_rest = a->groups * taps * cin_g;
  JDCONV_T *rest = width ? (JDCONV_T *)calloc((size_t)(rows_of_rest * JDCONV_LANES),
                                              sizeof(JDCONV_T)) : NULL;
  if (width && !rest) return 1;
  for (int64_t i = 0; width && i < rows_of_rest; i++)   /* row i: group i / (taps cin_g) */
    memcpy(rest + i * JDCONV_LANES, (const JDCONV_T *)a->k + i % (taps * cin_g) * a->cout
               + i / (taps * cin_g) * cout_g + cout_g - width, sizeof(JDCONV_T) * (size_t)width);
  /* a row is copied for chunks of output positions (the whole row, or a multiple of 24: whole
     blocks of 6 and of 8), whose padded rows hold about JDCONV_CHUNK_BYTES (a long 1-D row of
     many features would otherwise copy all of itself per piece); a padded row holds every
     position its chunk's blocks read: the last block's up to JDCONV_MAXP - 1 positions past
     the chunk, each reading (ksz - 1) * rdil positions on */
  const int64_t per_position = outer_taps * a->cin * a->stride[last] * (int64_t)sizeof(JDCONV_T);
  const int64_t fits = JDCONV_CHUNK_BYTES / (per_position > 0 ? per_position : 1) / 24 * 24;
  const int64_t chunk = a->osz[last] <= fits ? a->osz[last] : fits > 24 ? fits : 24;
  const int64_t span = (chunk + JDCONV_MAXP - 1) * a->stride[last]
                       + (a->ksz[last] - 1) * a->rdil[last] + 1;
  jd_conv_ctx_JDCONV_S c = {{0, 0, 0}, a, rest, cin_g, cout_g, taps, outer_taps, chunk, span,
                            a->groups == 1 && a->rdil[last] == 1 && !a->rev[last]};
  /* in parallel: rows of output positions */
  jd_parallel(jd_conv_rows_JDCONV_S, &c.jd, rows,
              rows > 1 && (double)outputs * cin_g * taps >= JDCONV_PARALLEL_MACS);
  free(rest);
  return c.jd.failed;
}

#undef JDCONV_MAXP
#undef JDCONV_MAXF
#undef JDCONV_PARALLEL_MACS
#undef JDCONV_CHUNK_BYTES
#undef JDCONV_ONCE
