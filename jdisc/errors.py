"""The one hierarchy of errors jdisc raises.

Every message says what failed, with the values, where (argument/axis, or StableHLO op and source
location) and, where it helps, how to fix it.

Anything else escaping the compiler is a bug in jdisc: `compile_stage` turns it into a
`CompileError` that names the stage (and the op, location and kernel being worked on when they
can be found in the traceback) and chains the original exception as its `__cause__`.
"""

from __future__ import annotations

import contextlib
import traceback


class JdiscError(Exception):
    """Base class of every error jdisc raises on purpose."""


class ArgumentError(JdiscError, TypeError):
    """Wrong number or structure of arguments for a jdisc function."""


class DtypeError(JdiscError, TypeError):
    """An argument's dtype differs from the one the function was compiled for."""


class ShapeError(JdiscError, ValueError):
    """An argument's rank or dimensions do not fit the compiled symbolic signature,
    or a shape constraint does not hold at run time."""


class UnsupportedOpError(JdiscError, NotImplementedError):
    """The program uses a StableHLO op, an element type (f8, sub-byte integers, tuples,
    tokens) or an attribute jdisc cannot compile yet."""


class CompileError(JdiscError, RuntimeError):
    """jdisc could not compile the program: the C compiler failed on generated code (the error
    carries the command, its output and the C path), or an internal error in one of jdisc's
    stages (a bug in jdisc). `stage`, `op`, `location` and `kernel` say where, when known; an
    internal error chains the original exception as `__cause__`."""

    def __init__(self, message: str = "", *, stage: str | None = None, op: str | None = None,
                 location: str | None = None, kernel: str | None = None):
        super().__init__(message)
        self.stage, self.op, self.location, self.kernel = stage, op, location, kernel


class RuntimeCheckError(JdiscError, RuntimeError):
    """The compiled program stopped on a check it makes at run time (e.g. BLAS size limits)."""


class PackageError(JdiscError, ValueError):
    """A package file is not one jdisc can use: truncated, a member whose SHA-256 does not match
    the manifest, or written by an incompatible jdisc. Nothing from it has been executed."""


# ------------------------------------------------------------------------- internal errors

def short_exception(exc: BaseException, limit: int = 240) -> str:
    """`KeyError: 'complex<f32>'`: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > limit:
        first = first[:limit] + " ..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _looks_like_op(x) -> bool:
    try:        # an MLIR object may raise on any attribute (an erased operation does)
        return (isinstance(getattr(x, "name", None), str) and
                isinstance(getattr(x, "loc", None), str) and
                isinstance(getattr(x, "operands", None), list))
    except Exception:
        return False


def _looks_like_kernel(x) -> bool:
    try:
        return (isinstance(getattr(x, "name", None), str) and
                isinstance(getattr(x, "kind", None), str) and
                isinstance(getattr(x, "ops", None), list))
    except Exception:
        return False


def _site(exc: BaseException) -> tuple:
    """(op, kernel) the innermost frames of exc's traceback were working on, each or None."""
    op = kernel = None
    frames = [f for f, _ in traceback.walk_tb(exc.__traceback__)]
    for frame in reversed(frames):          # innermost first
        local = frame.f_locals
        if op is None:
            op = next((v for k, v in local.items() if k == "op" and _looks_like_op(v)), None) \
                or next((v for v in local.values() if _looks_like_op(v)), None)
        if kernel is None:
            kernel = next((v for v in local.values() if _looks_like_kernel(v)), None)
        if op is not None and kernel is not None:
            break
    return op, kernel


def internal_error(stage: str, exc: BaseException, op=None) -> CompileError:
    """The CompileError for an unexpected exception in `stage` (raise it `from exc`)."""
    found_op, kernel = _site(exc)
    op = op if op is not None else found_op
    where = []
    op_name = loc = None
    if op is not None:
        op_name = op.name if "." in op.name else f"stablehlo.{op.name}"
        loc = op.loc
        where.append(f"at {op_name} ({loc})")
    kname = kernel.name if kernel is not None else None
    if kname:
        where.append(f"in kernel {kname}")
    msg = (f"internal compiler error in {stage}{' ' + ' '.join(where) if where else ''}: "
           f"{short_exception(exc)}. This is a bug in jdisc, not in the program (the original "
           f"traceback is chained above); jdisc.jit(..., fallback='xla') runs such functions "
           f"with jax.jit instead.")
    return CompileError(msg, stage=stage, op=op_name, location=loc, kernel=kname)


@contextlib.contextmanager
def compile_stage(stage: str):
    """Run a compiler stage: JdiscErrors pass through, anything else becomes a CompileError."""
    try:
        yield
    except JdiscError:
        raise
    except Exception as exc:
        raise internal_error(stage, exc) from exc
