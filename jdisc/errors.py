"""The one hierarchy of errors jdisc raises.

Every message says what failed, with the values, where (argument/axis, or StableHLO op and source
location) and, where it helps, how to fix it.
"""


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
    """The program uses a StableHLO op (or an attribute of one) jdisc cannot compile yet."""


class CompileError(JdiscError, RuntimeError):
    """The C compiler failed on generated code; carries the command, its output and the C path."""


class RuntimeCheckError(JdiscError, RuntimeError):
    """The compiled program stopped on a check it makes at run time (e.g. BLAS size limits)."""


class PackageError(JdiscError, ValueError):
    """A package file is not one jdisc can use: truncated, a member whose SHA-256 does not match
    the manifest, or written by an incompatible jdisc. Nothing from it has been executed."""
