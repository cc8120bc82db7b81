"""Branch-free f32 exp, expm1, tanh, log and logistic in plain C99 that GCC vectorises.

glibc's `expf`, `tanhf` and `logf` are opaque scalar calls: without -ffast-math GCC keeps a loop
such as `out[c] = tanhf(a[c]) + expf(b[c])` scalar. The functions in `C_MATH` are `static
inline`, use only float arithmetic, integer bit casts through `memcpy` and ternaries that
if-convert, so the same loop vectorises at -O3 -march=native (-std=c99 -fwrapv -fno-math-errno,
no -ffast-math, no intrinsics).

Accuracy, measured exhaustively over all 2^32 inputs against double-precision libm rounded to
float (tests/test_cmath.py re-checks ~2M of them, and the differences from jax.jit on CPU):

    jd_expf       <= 1 ulp      jd_tanhf   <= 1 ulp (exact, x itself, for |x| < 2^-12)
    jd_expm1f     <= 2 ulp      jd_logf    <= 1 ulp (denormal inputs included)
    jd_logisticf  <= 2 ulp

Special values follow C99 Annex F: exp(+inf) = +inf, exp(-inf) = +0, exp overflows to +inf
above ln(FLT_MAX) = 88.7228; tanh(+-inf) = +-1, tanh(-0) = -0; log(+-0) = -inf, log(x < 0) =
NaN, log(+inf) = +inf; NaN in gives NaN out everywhere. One deliberate difference from Annex F,
to match XLA:CPU (whose kernels run with flush-to-zero): results of exp and logistic below
FLT_MIN (2^-126) are +0, not denormals. XLA also treats denormal inputs of log as zero (-inf);
jd_logf does not, it returns the correct finite value.

The results do not depend on -ffp-contract: every step is exact or stays within the bounds
above whether or not the compiler fuses a multiply-add. f64 keeps libm.
"""

from __future__ import annotations
from jdisc.lowering import c_runtime

C_MATH = c_runtime.source("jd_math.h")

# StableHLO op -> C function in C_MATH, for f32 operands only (f64 keeps libm).
VECTOR_FUNCTIONS: dict[str, str] = {
    "exponential": "jd_expf",
    "exponential_minus_one": "jd_expm1f",
    "log": "jd_logf",
    "logistic": "jd_logisticf",
    "tanh": "jd_tanhf",
}
