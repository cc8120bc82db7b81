"""Large constants as data, not C.

A constant of more than DATA_MIN_BYTES (a weight captured by the function: `jdisc.jit(lambda x:
x @ W)`) is not written into the C as an initializer list, which made the C as large as 6x the
weight and the C compiler as slow as that. Its bytes go into one data section, 64-byte aligned,
that the library is given at load time; the C keeps a pointer per constant and the function

    int jd_bind_data(const char *base, int64_t size);

which points them into the section (it refuses a section of the wrong size). The section is
stored beside the library in the cache entry (`data.bin`, mapped read-only at load) and as a
member of packages; its SHA-256, computed once here, is part of the cache key.
"""

from __future__ import annotations

import hashlib

import numpy as np

from jdisc.dynamic_passes.ir.dtypes import numpy_dtype
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter

DATA_MIN_BYTES = 1024
ALIGN = 64


def is_data(arr: np.ndarray) -> bool:
    return arr.nbytes > DATA_MIN_BYTES


class DataSection:
    """The data constants of one program, in the order the C names them."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0
        self.pointers: list[tuple[str, str, int]] = []     # (C name, C type, offset)

    def add(self, name: str, arr: np.ndarray, dtype: str) -> None:
        raw = np.ascontiguousarray(arr, dtype=numpy_dtype(dtype)).tobytes()
        pad = -self.size % ALIGN
        if pad:
            self.parts.append(bytes(pad))
        self.pointers.append((name, ctype(dtype), self.size + pad))
        self.parts.append(raw)
        self.size += pad + len(raw)

    def declare(self, w: CWriter, name: str, dtype: str, shape: tuple, where: str) -> None:
        w(f"/* {where}: {dtype}{list(shape)} in the data section (see jd_bind_data) */")
        w(f"static const {ctype(dtype)} *{name};")

    def blob(self) -> bytes:
        return b"".join(self.parts)

    def emit_bind(self, w: CWriter) -> None:
        with w.block("int jd_bind_data(const char *base, int64_t size)"):
            w(f"if (size != {self.size}LL) return 1;")
            if not self.pointers:
                w("(void)base;")
            for name, t, offset in self.pointers:
                w(f"{name} = (const {t} *)(base + {offset});")
            w("return 0;")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
