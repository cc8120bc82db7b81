"""jax's LAPACK custom calls (`lapack_sgetrf_ffi`, ...) as one IR op, `lapack`.

jax lowers jnp.linalg / lax.linalg on CPU to typed-FFI custom calls, one per LAPACK routine
and element type (s, d, c, z), with the routine's flags (LAPACK characters as ui8, or i32)
in `mhlo.backend_config`. With symbolic shapes every result's shape comes as an extra i32
operand (`indices_of_shape_operands`); shape propagation reads them and drops them. The
declared layouts are column-major, but the values are the logical arrays: the kernels
(lowering/lapack.py) call LAPACKE's row-major interface, which transposes as LAPACK needs.

Failed factorisations are jax's business, not the kernel's: jax compares each matrix's `info`
output with 0 in StableHLO and selects NaN, so the kernel returns LAPACK's info as is.
(triangular solves, `lapack_?trsm_ffi`, are imported as stablehlo.triangular_solve.)
"""

from __future__ import annotations

import re

from jdisc.dynamic_passes.ir.program import Op

# routine -> the flags its backend config may carry
ROUTINES: dict[str, tuple[str, ...]] = {
    "potrf": ("uplo",), "getrf": (), "geqrf": (), "orgqr": (), "ungqr": (),
    "syevd": ("uplo", "mode"), "heevd": ("uplo", "mode"), "gesdd": ("mode",),
    "geev": ("compute_left", "compute_right"), "gees": ("mode", "sort"),
    "gehrd": ("low", "high"), "sytrd": ("uplo",), "hetrd": ("uplo",), "gtsv": (),
}
_TARGET = re.compile(r"lapack_([sdcz])([a-z]+)_ffi")


def lapack_routine(target: str) -> str | None:
    """The routine a custom call target runs (`getrf` for lapack_sgetrf_ffi), if jdisc has it."""
    m = _TARGET.fullmatch(target)
    return m.group(2) if m and m.group(2) in ROUTINES else None


def import_lapack_call(o, op: Op, read_scalar) -> None:
    """The custom call `o` (already imported as `op`) as the `lapack` op. `read_scalar` reads
    an integer attribute."""
    routine = lapack_routine(op.name)
    try:
        config = o.attributes["mhlo.backend_config"]
    except KeyError:
        config = None
    flags = {}
    for key in ROUTINES[routine]:
        try:
            flags[key] = int(read_scalar(config[key]))
        except (KeyError, TypeError):
            pass
    shape_operands = len(op.attrs.get("indices_of_shape_operands", ()))
    op.attrs = {"routine": routine, **flags, "shape_operands": shape_operands}
    op.name = "lapack"


def flag(op: Op, key: str, default: str) -> str:
    """A LAPACK character flag of a `lapack` op ('L', 'V', ...)."""
    value = op.attrs.get(key)
    return default if value is None else chr(value)
