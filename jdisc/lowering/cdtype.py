"""IR dtypes in C: storage types, compute types and literals.

f16 and bf16 are stored as their 16-bit patterns (`jd_f16`, `jd_bf16`: typedefs of uint16_t)
and computed in f32: `widen` turns a stored value into a float, `narrow` rounds a float back
(round to nearest even, as XLA:CPU does after every f16/bf16 op). The C helpers are in
`scalar_ops.c_prelude`.
"""

from __future__ import annotations

import math

import numpy as np

C_TYPES = {
    "f32": "float", "f64": "double", "f16": "jd_f16", "bf16": "jd_bf16", "i1": "uint8_t",
    "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
    "c64": "jd_c64", "c128": "jd_c128",   # C99 _Complex (lowering/complex_ops.py)
}

INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}

# 16-bit floats: stored as bit patterns, computed in f32
HALF_FLOATS = ("f16", "bf16")


def ctype(dtype: str) -> str:
    return C_TYPES[dtype]


def compute_dtype(dtype: str) -> str:
    """The dtype C arithmetic on `dtype` runs in: f32 for f16/bf16, else the dtype itself."""
    return "f32" if dtype in HALF_FLOATS else dtype


def widen(expr: str, dtype: str) -> str:
    """A stored value of `dtype` as its compute type (exact)."""
    return f"jd_{dtype}_to_f32({expr})" if dtype in HALF_FLOATS else expr


def narrow(expr: str, dtype: str) -> str:
    """A compute-type value rounded to `dtype`'s storage (round to nearest even for halves)."""
    return f"jd_f32_to_{dtype}({expr})" if dtype in HALF_FLOATS else expr


def half_bits(value, dtype: str) -> int:
    """The 16-bit pattern of `value` as f16/bf16 (a numpy scalar of that dtype keeps its bits)."""
    from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
    return int(np.asarray(value, dtype=numpy_dtype(dtype)).reshape(()).view(np.uint16))


def literal(value, dtype: str) -> str:
    """An exact, deterministic C literal of `dtype`."""
    if dtype == "i1":
        return "1" if bool(value) else "0"
    if dtype in HALF_FLOATS:
        return f"(({ctype(dtype)})0x{half_bits(value, dtype):04x}u)"
    if dtype in ("c64", "c128"):
        part = "f32" if dtype == "c64" else "f64"
        z = complex(value)
        return f"JD_{dtype.upper()}({literal(z.real, part)}, {literal(z.imag, part)})"
    if dtype in ("f32", "f64"):
        v = float(np.float32(value)) if dtype == "f32" else float(value)
        suffix = "f" if dtype == "f32" else ""
        if math.isnan(v):
            return f"((({ctype(dtype)})NAN))"
        if math.isinf(v):
            return f"(({ctype(dtype)})({'-' if v < 0 else ''}INFINITY))"
        return f"{v.hex()}{suffix}" if v != int(v) or abs(v) > 2**24 else f"{v!r}{suffix}"
    v = int(value)
    bits = INT_BITS[dtype]
    if dtype.startswith("u"):
        return f"(({ctype(dtype)}){v}ULL)"
    if v == -(2 ** (bits - 1)):
        return f"(({ctype(dtype)})({v + 1}LL - 1))"
    return f"(({ctype(dtype)}){v}LL)" if bits == 64 else f"(({ctype(dtype)}){v})"


def array_initializer(arr: np.ndarray, dtype: str) -> str:
    if dtype in HALF_FLOATS:   # the bit patterns themselves: NaN payloads survive
        return ", ".join(f"0x{b:04x}u" for b in arr.reshape(-1).view(np.uint16).tolist())
    return ", ".join(literal(x, dtype) for x in arr.reshape(-1).tolist())
