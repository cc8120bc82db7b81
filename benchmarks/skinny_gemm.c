/* One thread: OpenBLAS's sgemm against jd_skinny_nn (jdisc/lowering/c_runtime/jd_skinny.h),
   C[m, n] = A[m, k] @ B[k, n], B the same matrix every time ("L3") or 8 matrices in turn
   ("memory"); medians of 41 calls. Built and run by benchmarks/skinny_gemm.py, with
   JD_SKINNY_ROWS = 64 for the rows past jdisc's 16. */
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cblas.h>
#include "jd_skinny.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *x, const void *y) { double a = *(double*)x, b = *(double*)y; return a < b ? -1 : a > b; }
int main(void) {
  int64_t shapes[][2] = {{512, 2048}, {768, 3072}, {3072, 768}};
  int ms[] = {2, 3, 4, 5, 8, 12, 16, 24, 32, 48, 64};
  for (int s = 0; s < 3; s++) for (int nmat = 1; nmat <= 8; nmat += 7) {
    int64_t k = shapes[s][0], n = shapes[s][1];
    float *Bs[8];
    for (int q = 0; q < nmat; q++) { Bs[q] = malloc(4 * n * k); for (int64_t i = 0; i < n * k; i++) Bs[q][i] = (float)((i * 7919 + q) % 1000) / 1000.f - 0.5f; }
    float *A = malloc(4 * 64 * k), *C = malloc(4 * 64 * n), *C2 = malloc(4 * 64 * n);
    for (int64_t i = 0; i < 64 * k; i++) A[i] = (float)((i * 104729) % 1000) / 1000.f - 0.5f;
    printf("[m,%ld]@[%ld,%ld] %s: sgemm/skinny us", k, k, n, nmat == 1 ? "L3" : "memory");
    for (int mi = 0; mi < (int)(sizeof ms / sizeof *ms); mi++) {
      int m = ms[mi];
      double t1[41], t2[41];
      for (int r = 0; r < 41; r++) {
        const float *B = Bs[r % nmat];
        double t0 = now();
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, A, k, B, n, 0, C, n);
        t1[r] = now() - t0; t0 = now();
        jd_skinny_nn(m, n, k, A, k, 1, B, n, C2, n);
        t2[r] = now() - t0;
      }
      qsort(t1, 41, 8, cmp); qsort(t2, 41, 8, cmp);
      double err = 0; for (int64_t i = 0; i < m * n; i++) { double d = C[i] - C2[i]; if (d < 0) d = -d; if (d > err) err = d; }
      printf(" %d:%.0f/%.0f%s", m, t1[20] * 1e6, t2[20] * 1e6, err > 1e-3 ? "!" : "");
    }
    printf("\n");
    for (int q = 0; q < nmat; q++) free(Bs[q]);
  }
  return 0;
}
