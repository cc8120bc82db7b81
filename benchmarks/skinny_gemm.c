/* One thread: OpenBLAS's sgemm against jd_skinny_nn (jdisc/lowering/c_runtime/jd_skinny.h),
   C[m, n] = A[m, k] @ B[k, n], B the same matrix every time ("L3") or 8 matrices in turn
   ("memory"); medians of 41 calls. Built and run by benchmarks/skinny_gemm.py, with
   JD_SKINNY_ROWS = 64 for the rows past jdisc's limits. A "!" after a cell: the two results
   differ by more than 1e-3. */
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cblas.h>
#define JD_RT static
#include "jd_skinny.h"

enum { REPEATS = 41, MATRICES = 8, MAX_ROWS = 64 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static float *filled(int64_t count, int64_t seed) {
  float *p = malloc(sizeof(float) * (size_t)count);
  for (int64_t i = 0; i < count; i++) p[i] = (float)((i * 7919 + seed) % 1000) / 1000.f - 0.5f;
  return p;
}

int main(void) {
  const int64_t shapes[][2] = {{512, 2048}, {2048, 512}, {768, 768}, {768, 3072},
                               {3072, 768}};    /* k, n */
  const int rows[] = {2, 3, 4, 5, 8, 12, 16, 24, 32, 40, 48, 56, 64};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    for (int mats = 1; mats <= MATRICES; mats += MATRICES - 1) {
      const int64_t k = shapes[s][0], n = shapes[s][1];
      float *bs[MATRICES];
      for (int q = 0; q < mats; q++) bs[q] = filled(n * k, q);
      float *a = filled(MAX_ROWS * k, 104729);
      float *c = malloc(sizeof(float) * MAX_ROWS * n), *c2 = malloc(sizeof(float) * MAX_ROWS * n);
      printf("[m,%ld]@[%ld,%ld] %s: sgemm/skinny us", (long)k, (long)k, (long)n,
             mats == 1 ? "L3" : "memory");
      for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
        const int m = rows[ri];
        double t1[REPEATS], t2[REPEATS];
        for (int r = 0; r < REPEATS; r++) {
          const float *b = bs[r % mats];
          double t0 = now();
          scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, (blasint)n,
                            (blasint)k, 1, a, (blasint)k, b, (blasint)n, 0, c, (blasint)n);
          t1[r] = now() - t0;
          t0 = now();
          jd_skinny_nn(m, n, k, a, k, 1, b, n, c2, n);
          t2[r] = now() - t0;
        }
        qsort(t1, REPEATS, sizeof(double), by_value);
        qsort(t2, REPEATS, sizeof(double), by_value);
        double err = 0;
        for (int64_t i = 0; i < m * n; i++) {
          const double d = c[i] > c2[i] ? c[i] - c2[i] : c2[i] - c[i];
          if (d > err) err = d;
        }
        printf(" %d:%.0f/%.0f%s", m, t1[REPEATS / 2] * 1e6, t2[REPEATS / 2] * 1e6,
               err > 1e-3 ? "!" : "");
      }
      printf("\n");
      for (int q = 0; q < mats; q++) free(bs[q]);
      free(a);
      free(c);
      free(c2);
    }
  }
  return 0;
}
