/* The part of the C library that kernels and launchers call, declared here instead of included.
   GCC spends about 7 ms of every unit's compile reading <stdint.h>, <stdlib.h>, <string.h> and
   <math.h> (5.5 of them in <math.h>), a third of a small kernel's compile; these declarations
   cost nothing measurable. They are C99's own prototypes and glibc's macro definitions (the
   same code comes out: tests/test_c_runtime.py compares the assembly), and a unit that needs a
   header of the C library itself (BLAS, LAPACK, complex.h, the runtime unit) includes the
   real headers instead of this one (lowering/units.py). <stddef.h> and <stdarg.h> are the
   compiler's own, read in no measurable time. */
#ifndef JD_LIBC_H
#define JD_LIBC_H
#include <stdarg.h>
#include <stddef.h>

typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
#define INT64_MAX __INT64_MAX__
#define INT64_MIN (-__INT64_MAX__ - 1)

/* <stdlib.h>, <string.h> */
void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *p, size_t size);
void free(void *p);
int posix_memalign(void **p, size_t alignment, size_t size);
void abort(void);
char *getenv(const char *name);
int abs(int x);
long labs(long x);
void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *p, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);

/* <stdio.h>: the error messages' formatting (jd_errors.h) */
int snprintf(char *restrict s, size_t n, const char *restrict format, ...);
int vsnprintf(char *restrict s, size_t n, const char *restrict format, va_list args);

/* <math.h>: every C99 function jdisc's C may call, in double and float */
#define JD_LIBM1(name) double name(double x); float name##f(float x);
#define JD_LIBM2(name) double name(double x, double y); float name##f(float x, float y);
JD_LIBM1(acos) JD_LIBM1(asin) JD_LIBM1(atan) JD_LIBM1(cos) JD_LIBM1(sin) JD_LIBM1(tan)
JD_LIBM1(acosh) JD_LIBM1(asinh) JD_LIBM1(atanh) JD_LIBM1(cosh) JD_LIBM1(sinh) JD_LIBM1(tanh)
JD_LIBM1(exp) JD_LIBM1(exp2) JD_LIBM1(expm1) JD_LIBM1(log) JD_LIBM1(log10) JD_LIBM1(log1p)
JD_LIBM1(log2) JD_LIBM1(logb) JD_LIBM1(cbrt) JD_LIBM1(fabs) JD_LIBM1(sqrt) JD_LIBM1(erf)
JD_LIBM1(erfc) JD_LIBM1(lgamma) JD_LIBM1(tgamma) JD_LIBM1(ceil) JD_LIBM1(floor)
JD_LIBM1(nearbyint) JD_LIBM1(rint) JD_LIBM1(round) JD_LIBM1(trunc)
JD_LIBM2(atan2) JD_LIBM2(pow) JD_LIBM2(fmod) JD_LIBM2(remainder) JD_LIBM2(copysign)
JD_LIBM2(fdim) JD_LIBM2(fmax) JD_LIBM2(fmin) JD_LIBM2(hypot) JD_LIBM2(nextafter)
#undef JD_LIBM1
#undef JD_LIBM2
double fma(double x, double y, double z);
float fmaf(float x, float y, float z);
double frexp(double x, int *e);
float frexpf(float x, int *e);
double ldexp(double x, int e);
float ldexpf(float x, int e);
long lrint(double x);
long lrintf(float x);
long lround(double x);
long lroundf(float x);
#define HUGE_VAL (__builtin_huge_val ())
#define HUGE_VALF (__builtin_huge_valf ())
#define INFINITY (__builtin_inff ())
#define NAN (__builtin_nanf (""))
#define isfinite(x) __builtin_isfinite (x)
#define isinf(x) __builtin_isinf_sign (x)
#define isnan(x) __builtin_isnan (x)
#define signbit(x) __builtin_signbit (x)
#ifdef __FP_FAST_FMA
#define FP_FAST_FMA 1
#endif
#ifdef __FP_FAST_FMAF
#define FP_FAST_FMAF 1
#endif
#endif /* JD_LIBC_H */
