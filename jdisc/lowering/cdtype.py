"""IR dtypes in C: storage types, compute types and literals."""

from __future__ import annotations

import math

import numpy as np

C_TYPES = {
    "f32": "float", "f64": "double", "i1": "uint8_t",
    "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
}

INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}


def ctype(dtype: str) -> str:
    return C_TYPES[dtype]


def literal(value, dtype: str) -> str:
    """An exact, deterministic C literal of `dtype`."""
    if dtype == "i1":
        return "1" if bool(value) else "0"
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
    return ", ".join(literal(x, dtype) for x in arr.reshape(-1).tolist())
