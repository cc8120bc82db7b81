
typedef uint16_t jd_f16;
typedef uint16_t jd_bf16;
static inline uint64_t jd_f64_bits(double f) { uint64_t u; memcpy(&u, &f, sizeof u); return u; }
static inline double jd_f64_from_bits(uint64_t u) { double f; memcpy(&f, &u, sizeof f); return f; }
static inline float jd_bf16_to_f32(jd_bf16 h) { return jd_f32_from_bits((uint32_t)h << 16); }
static inline jd_bf16 jd_f32_to_bf16(float f) {
    const uint32_t u = jd_f32_bits(f);
    /* NaN: quiet, sign kept, payload dropped (XLA:CPU and ml_dtypes do the same). Chosen in
       32 bits and narrowed once: widened again by the next op (bf16 ops compute in f32),
       ((uint32_t)(jd_bf16)(r >> 16)) << 16 folds to r & 0xffff0000, and a loop of bf16 ops
       keeps every value in 32-bit lanes. Narrowed in each arm of the select, the loop packed
       and unpacked 16-bit lanes around every op: jmp's bf16 GELU took 1.75x the time. */
    const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? (u & 0x80000000u) | 0x7fc00000u
                                                      : u + 0x7fffu + ((u >> 16) & 1u);
    return (jd_bf16)(r >> 16);
}
static inline float jd_f16_to_f32(jd_f16 h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    const uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
    /* inf, or NaN made quiet with its payload (as x86's vcvtph2ps, which XLA:CPU uses) */
    const uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13) | ((em & 0x3ffu) ? 0x400000u : 0u);
    const uint32_t subnormal = jd_f32_bits((float)em * 0x1p-24f);    /* exact */
    /* blended with masks, not selected: GCC then keeps the float multiply unconditional and
       vectorises the loop (it will not if-convert a branch holding it) */
    const uint32_t is_sub = -(uint32_t)(em < 0x0400u), is_special = -(uint32_t)(em >= 0x7c00u);
    return jd_f32_from_bits(sign | (subnormal & is_sub) | (special & is_special)
                            | (normal & ~(is_sub | is_special)));
}
static inline jd_f16 jd_f32_to_f16(float f) {
    const uint32_t u = jd_f32_bits(f), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    /* NaN: quiet, sign and the payload's top 10 bits kept (as XLA:CPU on x86) */
    const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    /* normal: rebias, then round the 13 dropped bits to nearest even */
    const uint32_t normal = (a - ((uint32_t)(127 - 15) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* below 2^-14: adding 0.5 leaves 2^-24 units in the low bits, rounded by the FPU (even) */
    const uint32_t small = jd_f32_bits(jd_f32_from_bits(a < 0x38800000u ? a : 0u) + 0.5f)
                           - 0x3f000000u;
    const uint32_t mag = a > 0x7f800000u ? nan : a >= 0x477ff000u ? 0x7c00u   /* >= 65520: inf */
                       : a >= 0x38800000u ? normal : small;
    return (jd_f16)(sign | mag);
}
static inline jd_f16 jd_f64_to_f16(double x) {
    return x != x ? (jd_f16)(signbit(x) ? 0xfe00u : 0x7e00u) : jd_f32_to_f16((float)x);
}
static inline jd_bf16 jd_f64_to_bf16(double x) { return jd_f32_to_bf16((float)x); }
