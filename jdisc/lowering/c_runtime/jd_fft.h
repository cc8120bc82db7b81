/* Discrete Fourier transforms of any length, O(n log n), computed in double precision.

   A length that is a power of two runs an iterative radix-2 FFT; every other length runs
   Bluestein's algorithm: the DFT written as a convolution with the chirp exp(-i pi k^2 / n),
   computed by power-of-two FFTs of length m >= 2n - 1. The chirp's angle is reduced exactly
   (k^2 mod 2n, in integers) before the sine and cosine, so long transforms keep their
   accuracy; every twiddle is its own cos/sin call, never a product of earlier ones.

   Values are interleaved (re, im) doubles. A plan holds the tables of one length; transforms
   are unnormalised (the caller scales an inverse by 1/n). */

#ifndef JD_FFT_H
#define JD_FFT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
  int64_t n;       /* the transform's length */
  int64_t m;       /* the power-of-two FFT length: n itself, or >= 2n - 1 for Bluestein */
  double *tw;      /* m / 2 twiddles exp(-2 pi i k / m) */
  double *chirp;   /* Bluestein: n values exp(-i pi k^2 / n) */
  double *filter;  /* Bluestein: the forward FFT of the conjugated, wrapped chirp (m values) */
  double *work;    /* Bluestein: m values of scratch */
} jd_fft_plan;

static const double jd_pi = 3.14159265358979323846264338327950288;

static void jd_fft_pow2(double *x, int64_t m, const double *tw, int inverse) {
  for (int64_t i = 1, j = 0; i < m; i++) {      /* bit-reversal permutation */
    int64_t bit = m >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      double t0 = x[2 * i], t1 = x[2 * i + 1];
      x[2 * i] = x[2 * j]; x[2 * i + 1] = x[2 * j + 1];
      x[2 * j] = t0; x[2 * j + 1] = t1;
    }
  }
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t len = 2; len <= m; len <<= 1) {
    const int64_t half = len >> 1, step = m / len;
    for (int64_t s = 0; s < m; s += len) {
      for (int64_t k = 0; k < half; k++) {
        const double wr = tw[2 * k * step], wi = sign * tw[2 * k * step + 1];
        double *a = x + 2 * (s + k), *b = x + 2 * (s + k + half);
        const double tr = b[0] * wr - b[1] * wi, ti = b[0] * wi + b[1] * wr;
        b[0] = a[0] - tr; b[1] = a[1] - ti;
        a[0] += tr; a[1] += ti;
      }
    }
  }
}

static void jd_fft_plan_free(jd_fft_plan *p) {
  free(p->tw); free(p->chirp); free(p->filter); free(p->work);
  p->tw = p->chirp = p->filter = p->work = NULL;
}

/* 0, or 1 when out of memory (the plan is then empty) */
static int jd_fft_plan_init(jd_fft_plan *p, int64_t n) {
  p->n = n;
  p->tw = p->chirp = p->filter = p->work = NULL;
  const int pow2 = n > 0 && (n & (n - 1)) == 0;
  int64_t m = 1;
  while (m < (pow2 ? n : 2 * n - 1)) m <<= 1;
  p->m = m;
  p->tw = (double *)malloc(sizeof(double) * (size_t)(m + 2));
  if (!p->tw) return 1;
  for (int64_t k = 0; k < m / 2; k++) {
    p->tw[2 * k] = cos(2 * jd_pi * (double)k / (double)m);
    p->tw[2 * k + 1] = -sin(2 * jd_pi * (double)k / (double)m);
  }
  if (pow2 || n <= 1) return 0;
  p->chirp = (double *)malloc(sizeof(double) * (size_t)(2 * n));
  p->filter = (double *)calloc((size_t)(2 * m), sizeof(double));
  p->work = (double *)malloc(sizeof(double) * (size_t)(2 * m));
  if (!p->chirp || !p->filter || !p->work) {
    jd_fft_plan_free(p);
    return 1;
  }
  for (int64_t k = 0; k < n; k++) {
    const int64_t r = (int64_t)(((uint64_t)k * (uint64_t)k) % (uint64_t)(2 * n));
    const double angle = jd_pi * (double)r / (double)n;
    p->chirp[2 * k] = cos(angle);
    p->chirp[2 * k + 1] = -sin(angle);
  }
  for (int64_t k = 0; k < n; k++) {              /* conj(chirp) at k and at -k (mod m) */
    p->filter[2 * k] = p->chirp[2 * k];
    p->filter[2 * k + 1] = -p->chirp[2 * k + 1];
    if (k > 0) {
      p->filter[2 * (m - k)] = p->chirp[2 * k];
      p->filter[2 * (m - k) + 1] = -p->chirp[2 * k + 1];
    }
  }
  jd_fft_pow2(p->filter, m, p->tw, 0);
  return 0;
}

/* x (n interleaved values) <- its DFT: exp(-2 pi i jk / n) forward, exp(+...) inverse */
static void jd_fft_run(const jd_fft_plan *p, double *x, int inverse) {
  const int64_t n = p->n, m = p->m;
  if (n <= 1) return;
  if (m == n) {
    jd_fft_pow2(x, n, p->tw, inverse);
    return;
  }
  /* the inverse DFT is the conjugate of the forward DFT of the conjugate */
  const double s = inverse ? -1.0 : 1.0;
  double *a = p->work;
  for (int64_t k = 0; k < n; k++) {
    const double xr = x[2 * k], xi = s * x[2 * k + 1];
    const double cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
    a[2 * k] = xr * cr - xi * ci;
    a[2 * k + 1] = xr * ci + xi * cr;
  }
  for (int64_t k = 2 * n; k < 2 * m; k++) a[k] = 0;
  jd_fft_pow2(a, m, p->tw, 0);
  for (int64_t k = 0; k < m; k++) {
    const double ar = a[2 * k], ai = a[2 * k + 1];
    const double fr = p->filter[2 * k], fi = p->filter[2 * k + 1];
    a[2 * k] = ar * fr - ai * fi;
    a[2 * k + 1] = ar * fi + ai * fr;
  }
  jd_fft_pow2(a, m, p->tw, 1);
  const double scale = 1.0 / (double)m;
  for (int64_t k = 0; k < n; k++) {
    const double ar = a[2 * k] * scale, ai = a[2 * k + 1] * scale;
    const double cr = p->chirp[2 * k], ci = p->chirp[2 * k + 1];
    x[2 * k] = ar * cr - ai * ci;
    x[2 * k + 1] = s * (ar * ci + ai * cr);
  }
}

/* The DFT along each of `rank` trailing axes (lengths len[0..rank-1]) of the block x, which
   holds prod(len) interleaved values in row-major order; `line` has room for the longest
   axis. */
static void jd_fft_block(jd_fft_plan *plans, const int64_t *len, int rank, double *x,
                         double *line, int inverse) {
  int64_t total = 1;
  for (int a = 0; a < rank; a++) total *= len[a];
  int64_t inner = total;
  for (int a = 0; a < rank; a++) {
    const int64_t n = len[a];
    inner /= n;                                   /* the axis's stride, in values */
    const int64_t outer = total / (n * inner);
    for (int64_t o = 0; o < outer; o++) {
      for (int64_t i = 0; i < inner; i++) {
        double *base = x + 2 * (o * n * inner + i);
        for (int64_t k = 0; k < n; k++) {
          line[2 * k] = base[2 * k * inner];
          line[2 * k + 1] = base[2 * k * inner + 1];
        }
        jd_fft_run(&plans[a], line, inverse);
        for (int64_t k = 0; k < n; k++) {
          base[2 * k * inner] = line[2 * k];
          base[2 * k * inner + 1] = line[2 * k + 1];
        }
      }
    }
  }
}

#endif
