/* What a kernel calls of the FFT unit (lowering/fft.py), over a working precision jd_real
   (pasted once per precision, as jd_fft_real.h is): the plans are opaque here. The FFT unit
   holds jd_fft.h and jd_fft_real.h once for the whole program, its functions hidden inside
   the library; every FFT kernel unit carries only these declarations. */
typedef struct jd_fft_plan jd_fft_plan;
typedef struct jd_rfft_plan jd_rfft_plan;
JD_RT void *jd_fft_build(int64_t n);
JD_RT void jd_fft_drop(void *p);
JD_RT void *jd_rfft_build(int64_t n);
JD_RT void jd_rfft_drop(void *p);
JD_RT int64_t jd_fft_axes_work(const jd_fft_plan *const *plans, const int64_t *len, int rank,
                               int64_t tail);
JD_RT int64_t jd_rfft_work(const jd_rfft_plan *p);
JD_RT void jd_fft_axes(const jd_fft_plan *const *plans, const int64_t *len, int rank,
                       int64_t tail, jd_real *x, int inverse, jd_real *work);
JD_RT void jd_rfft_forward(const jd_rfft_plan *p, const jd_real *r, jd_real *X, int64_t v,
                           jd_real *work);
JD_RT void jd_rfft_inverse(const jd_rfft_plan *p, const jd_real *X, jd_real *r, int64_t v,
                           jd_real *work);
