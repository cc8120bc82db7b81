/* jdisc symbolic-dimension helpers: floor division and modulo with Python semantics. */
#ifndef JD_SYMBOLIC_PRELUDE
#define JD_SYMBOLIC_PRELUDE
#ifndef JD_LIBC_H   /* else jd_libc.h declared what this uses */
#include <stdint.h>
#endif
static inline int64_t jd_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}
static inline int64_t jd_mod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}
static inline int64_t jd_max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t jd_min(int64_t a, int64_t b) { return a < b ? a : b; }
#endif
