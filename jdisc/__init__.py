"""jdisc: a dynamic-shape compiler for JAX. Compile once for symbolic shapes, run every shape.

    import jdisc

    @jdisc.jit(dynamic_axes=(None, {0: "batch", 1: "seq"}))
    def layer(params, x): ...
"""

from jdisc.api import JdiscFunction, jit
from jdisc.errors import (ArgumentError, CompileError, DtypeError, JdiscError, RuntimeCheckError,
                          ShapeError, UnsupportedOpError)
from jdisc.modules import StablehloFunction, compile_stablehlo
from jdisc.version import __version__

__all__ = ["jit", "JdiscFunction", "compile_stablehlo", "StablehloFunction", "JdiscError", "ArgumentError", "DtypeError", "ShapeError",
           "UnsupportedOpError", "CompileError", "RuntimeCheckError", "__version__"]
