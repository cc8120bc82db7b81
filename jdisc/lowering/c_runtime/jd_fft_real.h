/* The transforms of jd_fft.h over the working precision jd_real (see there). This text is
   not included as a file: lowering/fft.py pastes it after jd_fft.h once per precision, with
   jd_real replaced by double or float (and, for float, the names jd_fft_* and jd_rfft_* by
   jd_fftf_* and jd_rfftf_*), so a generated program stays plain C without macros. */

typedef struct jd_fft_plan {
  int64_t n;                       /* the transform's length */
  int passes;                      /* mixed radix: one pass per factor */
  int64_t radix[JD_FFT_MAX_PASSES];
  jd_real *roots;                  /* mixed radix: exp(-2 pi i r / n) for r < n */
  jd_real *twiddles;               /* mixed radix: each pass's twiddles, one after another */
  struct jd_fft_plan *sub;         /* Rader: the plan of length n - 1; Bluestein: of m */
  jd_real *chirp;                  /* Bluestein: n values exp(-i pi k^2 / n) */
  jd_real *filter;                 /* Bluestein: the DFT of the conjugated, wrapped chirp;
                                      Rader: the DFT of exp(-2 pi i g^-m / n), over n - 1 */
  int64_t *perm;                   /* Rader: g^q mod n, then g^-p mod n, for q, p < n - 1 */
} jd_fft_plan;

/* One Stockham pass of radix p. a holds s transforms of length p * mp, entry j of transform q
   at a[j * s + q]; b receives the s * p transforms of length mp that they split into, entry
   j1 of transform q + s * k at b[(j1 * p + k) * s + q]:
       b[j1][q + s k] = w^(j1 k) * sum_j2 a[j1 + mp j2][q] * exp(-2 pi i j2 k / p),
   with w = exp(-2 pi i / (p mp)) (tw holds w^(j1 k) for j1 < mp, 1 <= k < p). root(t) is
   exp(-2 pi i t / p), at roots[t * rstride]. */
static void jd_fft_pass(int64_t s, int64_t p, int64_t mp, const jd_real *tw, const jd_real *roots,
                        int64_t rstride, const jd_real *restrict a,
                        jd_real *restrict b) {
  const int64_t in_step = mp * s;           /* from a[j1 + mp j2] to a[j1 + mp (j2 + 1)] */
  for (int64_t j1 = 0; j1 < mp; j1++) {
    const jd_real *w = tw + 2 * j1 * (p - 1);
    const jd_real *restrict in = a + 2 * j1 * s;
    jd_real *restrict out = b + 2 * j1 * p * s;
    if (p == 2) {
      const jd_real wr = w[0], wi = w[1];
      for (int64_t q = 0; q < s; q++) {
        const jd_real *x0 = in + 2 * q, *x1 = x0 + 2 * in_step;
        jd_real *y0 = out + 2 * q, *y1 = y0 + 2 * s;
        const jd_real dr = x0[0] - x1[0], di = x0[1] - x1[1];
        y0[0] = x0[0] + x1[0]; y0[1] = x0[1] + x1[1];
        y1[0] = JD_CMUL_RE(dr, di, wr, wi); y1[1] = JD_CMUL_IM(dr, di, wr, wi);
      }
    } else if (p == 3) {
      const jd_real h = 0.86602540378443864676, half = 0.5;    /* sin(2 pi / 3) */
      for (int64_t q = 0; q < s; q++) {
        const jd_real *x0 = in + 2 * q, *x1 = x0 + 2 * in_step, *x2 = x1 + 2 * in_step;
        jd_real *y0 = out + 2 * q, *y1 = y0 + 2 * s, *y2 = y1 + 2 * s;
        const jd_real sr = x1[0] + x2[0], si = x1[1] + x2[1];
        const jd_real dr = x1[0] - x2[0], di = x1[1] - x2[1];
        const jd_real mr = x0[0] - half * sr, mi = x0[1] - half * si;
        const jd_real t1r = mr + h * di, t1i = mi - h * dr;
        const jd_real t2r = mr - h * di, t2i = mi + h * dr;
        y0[0] = x0[0] + sr; y0[1] = x0[1] + si;
        y1[0] = JD_CMUL_RE(t1r, t1i, w[0], w[1]); y1[1] = JD_CMUL_IM(t1r, t1i, w[0], w[1]);
        y2[0] = JD_CMUL_RE(t2r, t2i, w[2], w[3]); y2[1] = JD_CMUL_IM(t2r, t2i, w[2], w[3]);
      }
    } else if (p == 4) {
      for (int64_t q = 0; q < s; q++) {
        const jd_real *x0 = in + 2 * q, *x1 = x0 + 2 * in_step;
        const jd_real *x2 = x1 + 2 * in_step, *x3 = x2 + 2 * in_step;
        jd_real *y0 = out + 2 * q, *y1 = y0 + 2 * s, *y2 = y1 + 2 * s, *y3 = y2 + 2 * s;
        const jd_real ar = x0[0] + x2[0], ai = x0[1] + x2[1];     /* a0 + a2 */
        const jd_real br = x0[0] - x2[0], bi = x0[1] - x2[1];     /* a0 - a2 */
        const jd_real cr = x1[0] + x3[0], ci = x1[1] + x3[1];     /* a1 + a3 */
        const jd_real dr = x1[1] - x3[1], di = x3[0] - x1[0];     /* -i (a1 - a3) */
        const jd_real t1r = br + dr, t1i = bi + di, t2r = ar - cr, t2i = ai - ci;
        const jd_real t3r = br - dr, t3i = bi - di;
        y0[0] = ar + cr; y0[1] = ai + ci;
        y1[0] = JD_CMUL_RE(t1r, t1i, w[0], w[1]); y1[1] = JD_CMUL_IM(t1r, t1i, w[0], w[1]);
        y2[0] = JD_CMUL_RE(t2r, t2i, w[2], w[3]); y2[1] = JD_CMUL_IM(t2r, t2i, w[2], w[3]);
        y3[0] = JD_CMUL_RE(t3r, t3i, w[4], w[5]); y3[1] = JD_CMUL_IM(t3r, t3i, w[4], w[5]);
      }
    } else if (p == 5) {
      const jd_real c1 = 0.30901699437494742410, c2 = -0.80901699437494742410;  /* cos 2pi/5, 4pi/5 */
      const jd_real s1 = 0.95105651629515357212, s2 = 0.58778525229247312917;   /* sin */
      for (int64_t q = 0; q < s; q++) {
        const jd_real *x0 = in + 2 * q, *x1 = x0 + 2 * in_step, *x2 = x1 + 2 * in_step;
        const jd_real *x3 = x2 + 2 * in_step, *x4 = x3 + 2 * in_step;
        jd_real *y0 = out + 2 * q, *y1 = y0 + 2 * s, *y2 = y1 + 2 * s, *y3 = y2 + 2 * s;
        jd_real *y4 = y3 + 2 * s;
        const jd_real b1r = x1[0] + x4[0], b1i = x1[1] + x4[1];
        const jd_real b2r = x2[0] + x3[0], b2i = x2[1] + x3[1];
        const jd_real d1r = x1[0] - x4[0], d1i = x1[1] - x4[1];
        const jd_real d2r = x2[0] - x3[0], d2i = x2[1] - x3[1];
        const jd_real u1r = x0[0] + c1 * b1r + c2 * b2r, u1i = x0[1] + c1 * b1i + c2 * b2i;
        const jd_real u2r = x0[0] + c2 * b1r + c1 * b2r, u2i = x0[1] + c2 * b1i + c1 * b2i;
        const jd_real v1r = s1 * d1r + s2 * d2r, v1i = s1 * d1i + s2 * d2i;
        const jd_real v2r = s2 * d1r - s1 * d2r, v2i = s2 * d1i - s1 * d2i;
        /* t1 = u1 - i v1, t4 = u1 + i v1, t2 = u2 - i v2, t3 = u2 + i v2 */
        const jd_real t1r = u1r + v1i, t1i = u1i - v1r, t4r = u1r - v1i, t4i = u1i + v1r;
        const jd_real t2r = u2r + v2i, t2i = u2i - v2r, t3r = u2r - v2i, t3i = u2i + v2r;
        y0[0] = x0[0] + b1r + b2r; y0[1] = x0[1] + b1i + b2i;
        y1[0] = JD_CMUL_RE(t1r, t1i, w[0], w[1]); y1[1] = JD_CMUL_IM(t1r, t1i, w[0], w[1]);
        y2[0] = JD_CMUL_RE(t2r, t2i, w[2], w[3]); y2[1] = JD_CMUL_IM(t2r, t2i, w[2], w[3]);
        y3[0] = JD_CMUL_RE(t3r, t3i, w[4], w[5]); y3[1] = JD_CMUL_IM(t3r, t3i, w[4], w[5]);
        y4[0] = JD_CMUL_RE(t4r, t4i, w[6], w[7]); y4[1] = JD_CMUL_IM(t4r, t4i, w[6], w[7]);
      }
    } else {              /* any other (odd prime) radix <= JD_FFT_MAX_RADIX: a DFT by pairs */
      /* with S_j = a_j + a_(p-j), D_j = a_j - a_(p-j), c = cos, s = sin of 2 pi jk / p:
         t_k = a_0 + sum_j c S_j - i sum_j s D_j and t_(p-k) the same with + i; row k gathers
         U_k = sum_j c S_j and row p - k gathers V_k = sum_j s D_j, q innermost */
      const int64_t h = (p - 1) / 2;
      jd_real *y0 = out;
      for (int64_t q = 0; q < 2 * s; q++) y0[q] = in[q];
      for (int64_t k = 1; k < p; k++)
        for (int64_t q = 0; q < 2 * s; q++) out[2 * k * s + q] = 0;
      for (int64_t j = 1; j <= h; j++) {
        const jd_real *xa = in + 2 * j * in_step, *xb = in + 2 * (p - j) * in_step;
        for (int64_t q = 0; q < 2 * s; q++) y0[q] += xa[q] + xb[q];
        for (int64_t k = 1; k <= h; k++) {
          const jd_real *r = roots + 2 * ((j * k) % p) * rstride;
          const jd_real c = r[0], sn = -r[1];
          jd_real *u = out + 2 * k * s, *v = out + 2 * (p - k) * s;
          for (int64_t q = 0; q < 2 * s; q++) {
            u[q] += c * (xa[q] + xb[q]);
            v[q] += sn * (xa[q] - xb[q]);
          }
        }
      }
      for (int64_t k = 1; k <= h; k++) {
        jd_real *u = out + 2 * k * s, *v = out + 2 * (p - k) * s;
        const jd_real w1r = w[2 * (k - 1)], w1i = w[2 * (k - 1) + 1];
        const jd_real w2r = w[2 * (p - k - 1)], w2i = w[2 * (p - k - 1) + 1];
        for (int64_t q = 0; q < s; q++) {
          const jd_real ur = in[2 * q] + u[2 * q], ui = in[2 * q + 1] + u[2 * q + 1];
          const jd_real vr = v[2 * q], vi = v[2 * q + 1];
          const jd_real t1r = ur + vi, t1i = ui - vr, t2r = ur - vi, t2i = ui + vr;
          u[2 * q] = JD_CMUL_RE(t1r, t1i, w1r, w1i); u[2 * q + 1] = JD_CMUL_IM(t1r, t1i, w1r, w1i);
          v[2 * q] = JD_CMUL_RE(t2r, t2i, w2r, w2i); v[2 * q + 1] = JD_CMUL_IM(t2r, t2i, w2r, w2i);
        }
      }
    }
  }
}

static void jd_fft_plan_free(jd_fft_plan *p) {
  if (p->sub) {
    jd_fft_plan_free(p->sub);
    free(p->sub);
  }
  free(p->roots); free(p->twiddles); free(p->chirp); free(p->filter); free(p->perm);
  p->roots = p->twiddles = p->chirp = p->filter = NULL;
  p->sub = NULL;
  p->perm = NULL;
}

static void jd_fft_run(const jd_fft_plan *p, jd_real *x, int64_t v, int inverse, jd_real *work);
static int jd_fft_plan_init(jd_fft_plan *p, int64_t n);

/* complex scratch values per vector element that jd_fft_run needs */
static int64_t jd_fft_work(const jd_fft_plan *p) {
  if (p->n <= 1) return 0;
  if (p->passes > 0) return p->n;
  return p->sub->n + jd_fft_work(p->sub) + (p->perm ? 2 : 0);   /* Rader: x[0] and the sum */
}

/* Rader's plan for the prime n with generator g: 0, or 1 when out of memory */
static int jd_fft_rader_init(jd_fft_plan *p, int64_t n, int64_t g) {
  const int64_t m = n - 1;
  p->sub = (jd_fft_plan *)calloc(1, sizeof(jd_fft_plan));
  p->filter = (jd_real *)malloc(sizeof(jd_real) * (size_t)(2 * m));
  p->perm = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * m));
  if (!p->sub || !p->filter || !p->perm || jd_fft_plan_init(p->sub, m)) return 1;
  const uint64_t ginv = jd_dft_powmod((uint64_t)g, (uint64_t)(n - 2), (uint64_t)n);
  for (int64_t q = 0, up = 1, down = 1; q < m; q++) {
    p->perm[q] = up;                                 /* g^q */
    p->perm[m + q] = down;                           /* g^-q */
    const double angle = 2 * jd_pi * (double)down / (double)n;
    p->filter[2 * q] = (jd_real)(cos(angle) / (double)m);   /* the inverse DFT's 1 / (n - 1) */
    p->filter[2 * q + 1] = (jd_real)(-sin(angle) / (double)m);
    up = (int64_t)((uint64_t)up * (uint64_t)g % (uint64_t)n);
    down = (int64_t)((uint64_t)down * ginv % (uint64_t)n);
  }
  jd_real *work = (jd_real *)malloc(sizeof(jd_real) * (size_t)(2 * jd_fft_work(p->sub) + 2));
  if (!work) return 1;
  jd_fft_run(p->sub, p->filter, 1, 0, work);
  free(work);
  return 0;
}

/* 0, or 1 when out of memory (the plan is then empty) */
static int jd_fft_plan_init(jd_fft_plan *p, int64_t n) {
  memset(p, 0, sizeof *p);
  p->n = n;
  if (n <= 1) return 0;
  p->passes = jd_dft_factor(n, p->radix);
  if (p->passes > 0) {                                    /* mixed radix */
    int64_t count = 0;                                    /* twiddles over every pass */
    for (int64_t i = 0, s = 1; i < p->passes; s *= p->radix[i], i++)
      count += (n / (s * p->radix[i])) * (p->radix[i] - 1);
    p->roots = (jd_real *)malloc(sizeof(jd_real) * (size_t)(2 * n));
    p->twiddles = (jd_real *)malloc(sizeof(jd_real) * (size_t)(2 * count));
    if (!p->roots || !p->twiddles) {
      jd_fft_plan_free(p);
      return 1;
    }
    for (int64_t r = 0; r < n; r++) {
      p->roots[2 * r] = (jd_real)cos(2 * jd_pi * (double)r / (double)n);
      p->roots[2 * r + 1] = (jd_real)-sin(2 * jd_pi * (double)r / (double)n);
    }
    jd_real *tw = p->twiddles;
    for (int64_t i = 0, s = 1; i < p->passes; s *= p->radix[i], i++) {
      const int64_t radix = p->radix[i], mp = n / (s * radix);
      for (int64_t j1 = 0; j1 < mp; j1++)                 /* exp(-2 pi i j1 k / (n / s)) */
        for (int64_t k = 1; k < radix; k++, tw += 2) {
          const int64_t r = (s * j1 * k) % n;
          tw[0] = p->roots[2 * r]; tw[1] = p->roots[2 * r + 1];
        }
    }
    return 0;
  }
  int64_t small[JD_FFT_MAX_PASSES];
  const int64_t g = n < ((int64_t)1 << 32) && jd_dft_factor(n - 1, small) ? jd_dft_generator(n) : 0;
  if (g) {                                                /* Rader */
    if (jd_fft_rader_init(p, n, g)) {
      jd_fft_plan_free(p);
      return 1;
    }
    return 0;
  }
  const int64_t m = jd_dft_smooth(2 * n - 1);            /* Bluestein */
  p->sub = (jd_fft_plan *)calloc(1, sizeof(jd_fft_plan));
  p->chirp = (jd_real *)malloc(sizeof(jd_real) * (size_t)(2 * n));
  p->filter = (jd_real *)calloc((size_t)(2 * m), sizeof(jd_real));
  if (!p->sub || !p->chirp || !p->filter || jd_fft_plan_init(p->sub, m)) {
    jd_fft_plan_free(p);
    return 1;
  }
  for (int64_t k = 0; k < n; k++) {
    const int64_t r = (int64_t)(((uint64_t)k * (uint64_t)k) % (uint64_t)(2 * n));
    const double angle = jd_pi * (double)r / (double)n;
    p->chirp[2 * k] = (jd_real)cos(angle);
    p->chirp[2 * k + 1] = (jd_real)-sin(angle);
  }
  for (int64_t k = 0; k < n; k++) {                       /* conj(chirp) at k and at -k (mod m) */
    p->filter[2 * k] = p->chirp[2 * k];
    p->filter[2 * k + 1] = -p->chirp[2 * k + 1];
    if (k > 0) {
      p->filter[2 * (m - k)] = p->chirp[2 * k];
      p->filter[2 * (m - k) + 1] = -p->chirp[2 * k + 1];
    }
  }
  jd_real *work = (jd_real *)malloc(sizeof(jd_real) * (size_t)(2 * jd_fft_work(p->sub) + 2));
  if (!work) {
    jd_fft_plan_free(p);
    return 1;
  }
  jd_fft_run(p->sub, p->filter, 1, 0, work);
  free(work);
  return 0;
}

static void *jd_fft_build(int64_t n) {
  jd_fft_plan *p = (jd_fft_plan *)malloc(sizeof(jd_fft_plan));
  if (p && jd_fft_plan_init(p, n)) { free(p); p = NULL; }
  return p;
}

static void jd_fft_drop(void *p) {
  jd_fft_plan_free((jd_fft_plan *)p);
  free(p);
}

static void jd_fft_conj(jd_real *x, int64_t n) {
  for (int64_t k = 0; k < n; k++) x[2 * k + 1] = -x[2 * k + 1];
}

/* Rader's and Bluestein's convolution: each column of a (sub->n x v) <- the unnormalised
   inverse DFT of its DFT times p->filter */
static void jd_fft_convolve(const jd_fft_plan *p, jd_real *a, int64_t v, jd_real *work) {
  const int64_t m = p->sub->n;
  jd_fft_run(p->sub, a, v, 0, work);
  for (int64_t k = 0; k < m; k++) {
    const jd_real fr = p->filter[2 * k], fi = p->filter[2 * k + 1];
    for (int64_t e = 0; e < v; e++) {
      jd_real *av = a + 2 * (k * v + e);
      const jd_real ar = av[0], ai = av[1];
      av[0] = JD_CMUL_RE(ar, ai, fr, fi);
      av[1] = JD_CMUL_IM(ar, ai, fr, fi);
    }
  }
  jd_fft_run(p->sub, a, v, 1, work);
}

/* x (n x v interleaved values) <- the DFT of each of its v columns: exp(-2 pi i jk / n)
   forward, exp(+...) inverse; work has jd_fft_work(p) * v complex values */
static void jd_fft_run(const jd_fft_plan *p, jd_real *x, int64_t v, int inverse, jd_real *work) {
  const int64_t n = p->n;
  if (n <= 1) return;
  if (inverse) jd_fft_conj(x, n * v);     /* the inverse DFT is conj(DFT(conj(x))) */
  if (p->passes > 0) {
    jd_real *a = x, *b = work;
    const jd_real *tw = p->twiddles;
    for (int64_t i = 0, s = 1; i < p->passes; s *= p->radix[i], i++) {
      const int64_t radix = p->radix[i], mp = n / (s * radix);
      jd_fft_pass(s * v, radix, mp, tw, p->roots, n / radix, a, b);
      tw += 2 * mp * (radix - 1);
      jd_real *t = a; a = b; b = t;
    }
    if (a != x) memcpy(x, a, sizeof(jd_real) * (size_t)(2 * n * v));
  } else if (p->perm) {                    /* Rader */
    const int64_t m = n - 1;
    jd_real *a = work, *x0 = work + 2 * m * v, *sum = x0 + 2 * v, *sub_work = sum + 2 * v;
    for (int64_t e = 0; e < v; e++) {
      x0[2 * e] = sum[2 * e] = x[2 * e];
      x0[2 * e + 1] = sum[2 * e + 1] = x[2 * e + 1];
    }
    for (int64_t q = 0; q < m; q++) {
      const jd_real *xv = x + 2 * p->perm[q] * v;
      jd_real *av = a + 2 * q * v;
      for (int64_t e = 0; e < 2 * v; e++) {
        av[e] = xv[e];
        sum[e] += xv[e];
      }
    }
    jd_fft_convolve(p, a, v, sub_work);
    memcpy(x, sum, sizeof(jd_real) * (size_t)(2 * v));
    for (int64_t q = 0; q < m; q++) {
      jd_real *xv = x + 2 * p->perm[m + q] * v;
      const jd_real *av = a + 2 * q * v;
      for (int64_t e = 0; e < 2 * v; e++) xv[e] = x0[e] + av[e];
    }
  } else {                                 /* Bluestein */
    const int64_t m = p->sub->n;
    jd_real *a = work, *sub_work = work + 2 * m * v;
    for (int64_t k = 0; k < n; k++) {
      const jd_real cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
      for (int64_t e = 0; e < v; e++) {
        const jd_real *xv = x + 2 * (k * v + e);
        a[2 * (k * v + e)] = JD_CMUL_RE(xv[0], xv[1], cr, ci);
        a[2 * (k * v + e) + 1] = JD_CMUL_IM(xv[0], xv[1], cr, ci);
      }
    }
    memset(a + 2 * n * v, 0, sizeof(jd_real) * (size_t)(2 * (m - n) * v));
    jd_fft_convolve(p, a, v, sub_work);
    const jd_real scale = (jd_real)(1.0 / (double)m);
    for (int64_t k = 0; k < n; k++) {
      const jd_real cr = p->chirp[2 * k] * scale, ci = p->chirp[2 * k + 1] * scale;
      for (int64_t e = 0; e < v; e++) {
        const jd_real *av = a + 2 * (k * v + e);
        x[2 * (k * v + e)] = JD_CMUL_RE(av[0], av[1], cr, ci);
        x[2 * (k * v + e) + 1] = JD_CMUL_IM(av[0], av[1], cr, ci);
      }
    }
  }
  if (inverse) jd_fft_conj(x, n * v);
}

/* The DFT along axes 0..rank-1 (lengths len[...]) of the block x of shape len[0] x ... x
   len[rank-1] x tail, interleaved values in row-major order; work has jd_fft_axes_work
   complex values. */
static void jd_fft_axes(const jd_fft_plan *const *plans, const int64_t *len, int rank,
                        int64_t tail, jd_real *x, int inverse, jd_real *work) {
  int64_t total = tail;
  for (int a = 0; a < rank; a++) total *= len[a];
  int64_t inner = total;
  for (int a = 0; a < rank; a++) {
    inner /= len[a];                              /* the axis's stride, in values */
    for (int64_t o = 0; o < total; o += len[a] * inner)
      jd_fft_run(plans[a], x + 2 * o, inner, inverse, work);
  }
}

static int64_t jd_fft_axes_work(const jd_fft_plan *const *plans, const int64_t *len, int rank,
                                int64_t tail) {
  int64_t inner = tail, most = 0;
  for (int a = rank - 1; a >= 0; a--) {
    const int64_t need = jd_fft_work(plans[a]) * inner;
    if (need > most) most = need;
    inner *= len[a];
  }
  return most;
}

/* Real transforms of length n. An even n packs the n real values into n / 2 complex ones,
   z[k] = r[2k] + i r[2k+1], runs one complex transform of length n / 2 and separates the
   halves: with E and O the DFTs of the even and odd samples,
       E[k] = (Z[k] + conj Z[h-k]) / 2,   O[k] = (Z[k] - conj Z[h-k]) / 2i,
       X[k] = E[k] + w^k O[k]   (h = n / 2, w = exp(-2 pi i / n), Z[h] = Z[0]).
   An odd n runs the complex transform of length n. */
typedef struct jd_rfft_plan {
  int64_t n;
  jd_fft_plan plan;   /* length n / 2 (even n) or n */
  jd_real *w;                      /* even n: w^k for k <= n / 2 */
} jd_rfft_plan;

static void jd_rfft_plan_free(jd_rfft_plan *p) {
  jd_fft_plan_free(&p->plan);
  free(p->w);
  p->w = NULL;
}

/* 0, or 1 when out of memory (the plan is then empty) */
static int jd_rfft_plan_init(jd_rfft_plan *p, int64_t n) {
  const int even = n % 2 == 0;
  p->n = n;
  p->w = even ? (jd_real *)malloc(sizeof(jd_real) * (size_t)(n + 2)) : NULL;
  if (jd_fft_plan_init(&p->plan, even ? n / 2 : n) || (even && !p->w)) {
    jd_rfft_plan_free(p);
    return 1;
  }
  for (int64_t k = 0; even && k <= n / 2; k++) {
    p->w[2 * k] = (jd_real)cos(2 * jd_pi * (double)k / (double)n);
    p->w[2 * k + 1] = (jd_real)-sin(2 * jd_pi * (double)k / (double)n);
  }
  return 0;
}

/* complex scratch values that jd_rfft_forward / jd_rfft_inverse need */
static int64_t jd_rfft_work(const jd_rfft_plan *p) {   /* per vector element */
  return p->n + jd_fft_work(&p->plan);
}

static void *jd_rfft_build(int64_t n) {
  jd_rfft_plan *p = (jd_rfft_plan *)malloc(sizeof(jd_rfft_plan));
  if (p && jd_rfft_plan_init(p, n)) { free(p); p = NULL; }
  return p;
}

static void jd_rfft_drop(void *p) {
  jd_rfft_plan_free((jd_rfft_plan *)p);
  free(p);
}

/* X <- the DFT of each of the v columns of the n x v real values r (entry k of column e at
   r[k * v + e]): rows 0 .. n/2 of the (n/2 + 1) x v interleaved values X */
static void jd_rfft_forward(const jd_rfft_plan *p, const jd_real *r, jd_real *X, int64_t v,
                            jd_real *work) {
  const int64_t n = p->n, h = n / 2;
  const jd_real half = 0.5;
  jd_real *z = work, *rest = work + 2 * n * v;
  if (n % 2) {
    for (int64_t k = 0; k < n * v; k++) { z[2 * k] = r[k]; z[2 * k + 1] = 0; }
    jd_fft_run(&p->plan, z, v, 0, rest);
    memcpy(X, z, sizeof(jd_real) * (size_t)(2 * (h + 1) * v));
    return;
  }
  for (int64_t k = 0; k < h; k++)                  /* z[k] = r[2k] + i r[2k + 1] */
    for (int64_t e = 0; e < v; e++) {
      z[2 * (k * v + e)] = r[2 * k * v + e];
      z[2 * (k * v + e) + 1] = r[(2 * k + 1) * v + e];
    }
  jd_fft_run(&p->plan, z, v, 0, rest);
  for (int64_t k = 0; k <= h; k++) {
    const jd_real *za = z + 2 * (k % h) * v, *zb = z + 2 * ((h - k) % h) * v;  /* Z[k], Z[h-k] */
    const jd_real wr = p->w[2 * k], wi = p->w[2 * k + 1];
    jd_real *xk = X + 2 * k * v;
    for (int64_t e = 0; e < v; e++) {
      const jd_real *a = za + 2 * e, *b = zb + 2 * e;
      const jd_real er = half * (a[0] + b[0]), ei = half * (a[1] - b[1]);
      const jd_real or_ = half * (a[1] + b[1]), oi = -half * (a[0] - b[0]);
      xk[2 * e] = er + JD_CMUL_RE(or_, oi, wr, wi);
      xk[2 * e + 1] = ei + JD_CMUL_IM(or_, oi, wr, wi);
    }
  }
}

/* r <- the real parts of the unnormalised inverse DFTs of the v Hermitian columns whose first
   n/2 + 1 rows are X (the imaginary parts of X[0] and, for even n, X[n/2] drop out); the
   layouts as jd_rfft_forward's */
static void jd_rfft_inverse(const jd_rfft_plan *p, const jd_real *X, jd_real *r, int64_t v,
                            jd_real *work) {
  const int64_t n = p->n, h = n / 2;
  jd_real *z = work, *rest = work + 2 * n * v;
  if (n % 2) {
    for (int64_t k = 0; k < n; k++) {
      const jd_real *xk = X + 2 * (k <= h ? k : n - k) * v;
      const jd_real sign = k <= h ? 1 : -1;
      for (int64_t e = 0; e < v; e++) {
        z[2 * (k * v + e)] = xk[2 * e];
        z[2 * (k * v + e) + 1] = sign * xk[2 * e + 1];
      }
    }
    jd_fft_run(&p->plan, z, v, 1, rest);
    for (int64_t k = 0; k < n * v; k++) r[k] = z[2 * k];
    return;
  }
  /* E'[k] = X[k] + conj X[h-k], O'[k] = (X[k] - conj X[h-k]) conj(w^k); z = E' + i O' */
  for (int64_t k = 0; k < h; k++) {
    const jd_real *xa = X + 2 * k * v, *xb = X + 2 * (h - k) * v;
    const jd_real wr = p->w[2 * k], wi = -p->w[2 * k + 1];
    for (int64_t e = 0; e < v; e++) {
      const jd_real ar = xa[2 * e], br = xb[2 * e];
      const jd_real ai = k == 0 ? 0 : xa[2 * e + 1], bi = k == 0 ? 0 : xb[2 * e + 1];
      const jd_real er = ar + br, ei = ai - bi, dr = ar - br, di = ai + bi;
      const jd_real or_ = JD_CMUL_RE(dr, di, wr, wi), oi = JD_CMUL_IM(dr, di, wr, wi);
      z[2 * (k * v + e)] = er - oi;
      z[2 * (k * v + e) + 1] = ei + or_;
    }
  }
  jd_fft_run(&p->plan, z, v, 1, rest);
  for (int64_t k = 0; k < h; k++)                  /* r[2k] + i r[2k + 1] = z[k] */
    for (int64_t e = 0; e < v; e++) {
      r[2 * k * v + e] = z[2 * (k * v + e)];
      r[(2 * k + 1) * v + e] = z[2 * (k * v + e) + 1];
    }
}
