/* Discrete Fourier transforms of any length, O(n log n): what both precisions share. The
   transforms themselves are jd_fft_real.h, written once over the type jd_real and pasted by
   lowering/fft.py once per precision a program uses: as written (jd_real = double, names
   jd_fft_* and jd_rfft_*) and for float (names jd_fftf_* and jd_rfftf_*); see there.

   A length whose prime factors are all at most JD_FFT_MAX_RADIX runs a mixed-radix Stockham
   FFT: one pass per factor (radix 4 first, then 2, 3, 5 and the other small primes), each pass
   reading one buffer and writing the other in sorted order, so no bit reversal is needed.
   A larger prime n whose n - 1 has small factors runs Rader's algorithm: with g a generator
   of the integers mod n, X[g^-p] - x[0] is the cyclic convolution of x[g^q] with
   exp(-2 pi i g^-m / n), computed by mixed-radix FFTs of length n - 1. Every other length runs
   Bluestein's algorithm: the DFT written as a convolution with the chirp exp(-i pi k^2 / n),
   computed by mixed-radix FFTs of a 5-smooth length m >= 2n - 1.

   Accuracy: every twiddle factor is one entry of a table of the n roots exp(-2 pi i r / n),
   each its own cos/sin call in double with r reduced exactly in integers (never a product of
   earlier twiddles), rounded once to the working precision; the chirp's angle is reduced the
   same way (k^2 mod 2n). Single precision rounds in every pass, as XLA's float FFT does.

   Values are interleaved (re, im) pairs. A transform runs on a vector of v values per point
   (x[k * v + e] is entry k of transform e), so a strided axis is transformed in place, v
   transforms at a time, and a batch of v transforms side by side: the inner loops run over
   the vector, contiguous and vectorisable. A plan holds the read-only tables of one length;
   the caller passes scratch (jd_fft_work: complex values per vector element). Plans are built
   once per kernel and process (jd_dft_cached). Transforms are unnormalised (the caller scales
   an inverse by 1/n). */

#ifndef JD_FFT_H
#define JD_FFT_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JD_FFT_MAX_RADIX 31
#define JD_FFT_MAX_PASSES 64

static const double jd_pi = 3.14159265358979323846264338327950288;

/* the radices of n in the order the passes run, or 0 when a prime factor is too large */
static int jd_dft_factor(int64_t n, int64_t *radix) {
  int count = 0;
  while (n % 4 == 0) { radix[count++] = 4; n /= 4; }
  for (int64_t p = 2; p <= JD_FFT_MAX_RADIX && n > 1; p++)
    while (n % p == 0) { radix[count++] = p; n /= p; }
  return n == 1 ? count : 0;
}

/* the smallest 2^a 3^b 5^c >= n */
static int64_t jd_dft_smooth(int64_t n) {
  int64_t best = 1;
  while (best < n) best *= 2;
  for (int64_t p5 = 1; p5 < 2 * n; p5 *= 5)
    for (int64_t p35 = p5; p35 < 2 * n; p35 *= 3) {
      int64_t v = p35;
      while (v < n) v *= 2;
      if (v < best) best = v;
    }
  return best;
}

#define JD_CMUL_RE(ar, ai, br, bi) ((ar) * (br) - (ai) * (bi))
#define JD_CMUL_IM(ar, ai, br, bi) ((ar) * (bi) + (ai) * (br))

static uint64_t jd_dft_powmod(uint64_t b, uint64_t e, uint64_t n) {   /* n < 2^32 */
  uint64_t r = 1;
  for (b %= n; e; e >>= 1, b = b * b % n)
    if (e & 1) r = r * b % n;
  return r;
}

/* a generator of the integers mod the prime n (n < 2^32), or 0 when n is not prime */
static int64_t jd_dft_generator(int64_t n) {
  int64_t factors[64], count = 0, rest = n - 1;
  for (int64_t d = 2; d * d <= n; d++)
    if (n % d == 0) return 0;
  for (int64_t d = 2; d * d <= rest; d++)
    if (rest % d == 0) {
      factors[count++] = d;
      while (rest % d == 0) rest /= d;
    }
  if (rest > 1) factors[count++] = rest;
  for (int64_t g = 2; g < n; g++) {
    int ok = 1;
    for (int64_t i = 0; i < count && ok; i++)
      ok = jd_dft_powmod((uint64_t)g, (uint64_t)((n - 1) / factors[i]), (uint64_t)n) != 1;
    if (ok) return g;
  }
  return 0;
}

/* The plan in *slot, built by the first caller with build(n) (threads racing to build it
   keep the first one stored); NULL when out of memory. Plans live as long as the process. */
static void *jd_dft_cached(void **slot, int64_t n, void *(*build)(int64_t),
                           void (*drop)(void *)) {
  void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE), *expected = NULL;
  if (p || !(p = build(n))) return p;
  if (!__atomic_compare_exchange_n(slot, &expected, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    drop(p);
    return expected;
  }
  return p;
}

#endif
