/* jdisc symbolic-dimension helpers: floor division and modulo with Python semantics. */
#ifndef JD_SYMBOLIC_PRELUDE
#define JD_SYMBOLIC_PRELUDE
#ifndef JD_LIBC_H   /* else jd_libc.h declared what this uses */
#include <stdint.h>
#endif
/* Branch-free: a nonzero remainder whose sign is not the divisor's ((r ^ b) < 0) moves the
   quotient down by one and the remainder up by b. With a branch there (a short-circuit &&),
   GCC unswitched every loop whose index used one on a dim, once per condition: a reduction
   kernel indexing by floordiv(H, 2) compiled in 80 ms instead of 43. */
static inline int64_t jd_floordiv(int64_t a, int64_t b) {
    int64_t r = a % b;
    return a / b - (int64_t)((r != 0) & ((r ^ b) < 0));
}
static inline int64_t jd_mod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return r + (b & -(int64_t)((r != 0) & ((r ^ b) < 0)));
}
static inline int64_t jd_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t jd_min(int64_t a, int64_t b) { return a < b ? a : b; }
#endif
