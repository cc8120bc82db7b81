
#ifndef JD_CMATH_H
#define JD_CMATH_H
#ifndef JD_LIBC_H   /* else jd_libc.h declared what this uses */
#include <math.h>
#include <stdint.h>
#include <string.h>
#endif

/* a * b + c, fused (one rounding) where the target has a fast fma, else as written: the
 * polynomials below are accurate either way, and twice as fast fused (GCC does not contract
 * a * b + c under -std=c99) */
#ifdef FP_FAST_FMAF
#define JD_FMAF(a, b, c) fmaf(a, b, c)
#else
#define JD_FMAF(a, b, c) ((a) * (b) + (c))
#endif

static inline uint32_t jd_f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static inline float jd_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

/* 2^k for -126 <= k <= 127, written straight into the exponent field. */
static inline float jd_pow2f(int32_t k) { return jd_f32_from_bits((uint32_t)(k + 127) << 23); }

/* (float)k for |k| < 2^22 without an int->float conversion: GCC will not if-convert a
 * conversion (it "could trap"), which would keep the caller's loop scalar. */
static inline float jd_int_to_f32(int32_t k) {
    return jd_f32_from_bits(0x4b400000u + (uint32_t)k) - 12582912.0f;
}

/* Range reduction shared by exp and expm1, for |x| < 2^21: x = k ln2 + r with |r| <= ~0.35.
 * k = round(x / ln2) by adding 1.5 * 2^23, read back from the bits of the sum; ln2 is split
 * into hi (15 significant bits, so k * hi is exact) + lo. Returns expm1(r) = r + r^2 P(r), P a
 * degree-4 minimax fit (relative error 2^-28, far below rounding). */
static inline float jd_exp_reduce(float x, int32_t *k) {
    float t = JD_FMAF(x, 1.44269504f, 12582912.0f);
    float kf = t - 12582912.0f;
    *k = (int32_t)(jd_f32_bits(t) - 0x4b400000u);
    float r = JD_FMAF(-kf, 1.42860677e-6f, JD_FMAF(-kf, 0.693145751953125f, x));
    float p = 0.0013813145f;
    p = JD_FMAF(p, r, 0.008369419f);
    p = JD_FMAF(p, r, 0.041668456f);
    p = JD_FMAF(p, r, 0.16666515f);
    p = JD_FMAF(p, r, 0.49999994f);
    return JD_FMAF(r, r * p, r);
}

/* exp(x) = (1 + expm1(r)) 2^k; max error 1 ulp. 1 + expm1(r) is in [0.7, 1.5), so adding k
 * to its exponent field is the exact scaling wherever the result is a normal number, k = 128
 * included (x up to ln(FLT_MAX), where 1 + expm1(r) < 1). Past that, x > 88.7228317 (the
 * largest float whose exp is finite), the result is +inf. Below, the sum's exponent field
 * runs out (0, or a borrow from the sign bit: the sum is below 2^23 as a signed integer):
 * the result is below FLT_MIN and flushed to +0 as XLA:CPU does; the clamp at -104 keeps
 * k >= -150, so the borrow never wraps round to a positive sum. NaN passes the clamp (the
 * compare is false) and comes back quiet. Two scalings by 2^(k/2) took 10 more vector
 * instructions than this add, for the same results (CHANGELOG.md, 2026-12-06). */
static inline float jd_expf(float x) {
    float xc = x < -104.0f ? -104.0f : x;
    int32_t k;
    float q = jd_exp_reduce(xc, &k);
    uint32_t bits = jd_f32_bits(1.0f + q) + ((uint32_t)k << 23);
    float r = (int32_t)bits < 0x00800000 ? 0.0f : jd_f32_from_bits(bits);
    r = x > 88.7228317f ? INFINITY : r;
    return x != x ? x + x : r;
}

/* expm1(x) = 2^k expm1(r) + (2^k - 1), both terms exact scalings; max error 2 ulp. For
 * k > 64 the -1 no longer matters and (1 + expm1(r)) 2^(k-1) 2 reaches FLT_MAX and +inf.
 * Below x = -30 the result is -1 anyway. */
static inline float jd_expm1f(float x) {
    float xc = x < -30.0f ? -30.0f : (x > 89.0f ? 89.0f : x);
    int32_t k;
    float q = jd_exp_reduce(xc, &k);
    float s = jd_pow2f(k > 64 ? k - 1 : k);
    float small = s * q + (s - 1.0f);
    float big = ((1.0f + q) * s) * 2.0f;
    float r = k > 64 ? big : small;
    return x == 0.0f ? x : r;   /* expm1(-0) = -0 */
}

/* tanh(x) = sign(x) tanh(|x|). For |x| < atanh(1/2), |x| + |x|^3 P(x^2) with P a degree-4
 * minimax fit (relative error 2^-30; exactly x for tiny x, and tanh(-0) = -0); otherwise
 * 1 - 2 / (exp(2|x|) + 1), which cannot cancel badly there. tanh(|x|) rounds to 1 from
 * 2|x| = 17.4 on, so exp's argument is clamped to [0, 20] (NaN passes): k <= 29, a single
 * exact scaling by 2^k and nothing to flush, the same values as jd_expf's in a fifth fewer
 * instructions. Max error 1 ulp. */
static inline float jd_tanhf(float x) {
    float ax = fabsf(x);
    float x2 = x * x;
    float p = -0.006279471f;
    p = JD_FMAF(p, x2, 0.021075152f);
    p = JD_FMAF(p, x2, -0.053853095f);
    p = JD_FMAF(p, x2, 0.13332593f);
    p = JD_FMAF(p, x2, -0.33333316f);
    float small = JD_FMAF(ax * x2, p, ax);
    float y = ax + ax > 20.0f ? 20.0f : ax + ax;
    int32_t k;
    float q = jd_exp_reduce(y, &k);
    float big = 1.0f - 2.0f / ((1.0f + q) * jd_pow2f(k) + 1.0f);
    return copysignf(ax < 0.54930614f ? small : big, x);
}

/* log: x = 2^k m with m in [sqrt(2)/2, sqrt(2)), found by integer arithmetic on the bits
 * (denormals are first scaled by 2^23). With f = m - 1, s = f / (2 + f):
 * log(m) = f - (f^2/2 - s (f^2/2 + R(s^2))), R a degree-3 minimax fit (fdlibm's scheme), and
 * k ln2 is added in two parts. Max error 1 ulp. */
static inline float jd_logf(float x) {
    int32_t tiny = x < 0x1p-126f;
    float xs = tiny ? x * 0x1p23f : x;
    uint32_t ix = jd_f32_bits(xs) - 0x3f3504f3u;
    int32_t k = ((int32_t)ix >> 23) - (tiny ? 23 : 0);   /* arithmetic shift */
    float f = jd_f32_from_bits((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float R = z * JD_FMAF(z, JD_FMAF(z, 0.2987173f, 0.39977542f), 0.66666776f);
    float hfsq = 0.5f * f * f;
    float kf = jd_int_to_f32(k);
    float r = kf * 0.693145751953125f
              - ((hfsq - (s * (hfsq + R) + kf * 1.42860677e-6f)) - f);
    float special = x == 0.0f ? -INFINITY : (x < 0.0f ? NAN : x);   /* also +inf and NaN */
    return x > 0.0f ? (x < INFINITY ? r : x) : special;
}

/* logistic 1 / (1 + exp(-x)) as (x >= 0 ? 1 : e) / (1 + e) with e = exp(-|x|) in [0, 1]:
 * nothing overflows, and for x << 0 the result is e itself (flushed below FLT_MIN like exp).
 * Max error 2 ulp. */
static inline float jd_logisticf(float x) {
    float e = jd_expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}
#endif /* JD_CMATH_H */
