"""Element types of the IR: the short names values carry (f32, i1, u8, c64, bf16, ...), their
numpy dtypes, their bit widths, and which types jdisc compiles (`dtype_problem`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# dtype name -> numpy dtype. Short names follow StableHLO's element types (ui32 -> u32).
NUMPY_DTYPES = {
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
    "i1": np.dtype(np.bool_), "i8": np.dtype(np.int8), "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}

# a complex dtype -> the dtype of its real and imaginary parts
COMPLEX_PARTS = {"c64": "f32", "c128": "f64"}


def dtype_name(dtype: Any) -> str:
    """The IR's short dtype name for a numpy/jax dtype."""
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":
        return "bf16"
    for name, np_dt in NUMPY_DTYPES.items():
        if np_dt == dt:
            return name
    raise KeyError(f"dtype {dt} has no jdisc equivalent")


def numpy_dtype(name: str) -> np.dtype:
    if name == "bf16":
        import ml_dtypes  # shipped with jax
        return np.dtype(ml_dtypes.bfloat16)
    return NUMPY_DTYPES[name]


def is_float(dtype: str) -> bool:
    return dtype in ("f16", "bf16", "f32", "f64")


def is_complex(dtype: str) -> bool:
    return dtype in COMPLEX_PARTS


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("u") or dtype == "i1"


def bit_width(dtype: str) -> int:
    """Bits of one element as StableHLO counts them (i1 is one bit: bitcast_convert packs it)."""
    return 1 if dtype == "i1" else numpy_dtype(dtype).itemsize * 8


# element types (the IR's short names): the numpy ones and bf16
SUPPORTED_DTYPES = frozenset(NUMPY_DTYPES) | {"bf16"}

_SMALL_FLOAT = re.compile(r"(?:float|f)[864](?:_|E|$)")
_INTEGER = re.compile(r"u?i(?:nt)?(\d+)")


def dtype_problem(dtype: str) -> str | None:
    """Why jdisc cannot compile values of this element type (an IR name such as `f8E4M3FN`,
    `i4`, `tuple<...>`, `!stablehlo.token`, or a numpy name such as `float8_e4m3fn`), or None
    when it can."""
    if dtype in SUPPORTED_DTYPES or dtype in ("bfloat16", "complex64", "complex128"):
        return None
    if _SMALL_FLOAT.match(dtype):
        return "8-bit and smaller floating-point types (f8, f6, f4) are not supported yet"
    m = _INTEGER.fullmatch(dtype)
    if m and int(m.group(1)) < 8:
        return "sub-byte integers (i2, i4) are not supported yet"
    if dtype.startswith("tuple"):
        return "tuple-typed values are not supported yet"
    if "token" in dtype:
        return "tokens (the ordering of side effects) are not supported"
    if dtype.startswith("tensor<*"):
        return "unranked tensors are not supported"
    if "quant" in dtype:
        return "quantized types are not supported"
    return f"element type {dtype} is not supported"
