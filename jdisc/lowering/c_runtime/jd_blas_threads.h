static int jd_blas_nt = -1, jd_blas_max = 1;
void jd_set_blas_threads(int n) { jd_blas_max = n > 0 ? n : 1; }
static inline void jd_blas_threads(double work) {
  const int free_now = __atomic_load_n(&jd_num_threads, __ATOMIC_RELAXED);
  const int want = work < 16777216.0 ? 1 : jd_blas_max < free_now ? jd_blas_max : free_now;
  if (want != jd_blas_nt) { scipy_openblas_set_num_threads(want); jd_blas_nt = want; }
}
