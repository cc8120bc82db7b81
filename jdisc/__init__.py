"""jdisc: a dynamic-shape compiler for JAX. Compile once for symbolic shapes, run every shape.

    import jdisc

    @jdisc.jit(dynamic_axes=(None, {0: "batch", 1: "seq"}))
    def layer(params, x): ...

    pkg = jdisc.export_package(layer, params, x, dynamic_axes=(None, {0: "batch"}))  # a Package
    pkg.save("layer.jdisc"); layer2 = jdisc.load("layer.jdisc")
"""

from jdisc.api import JdiscFunction, jit
from jdisc.errors import (ArgumentError, CompileError, DtypeError, JdiscError, PackageError,
                          RuntimeCheckError, ShapeError, UnsupportedOpError)
from jdisc.modules import StablehloFunction, compile_stablehlo
from jdisc.package import Package, export_package, load
from jdisc.version import __version__

__all__ = ["jit", "JdiscFunction", "compile_stablehlo", "StablehloFunction", "export_package",
           "load", "Package", "JdiscError", "ArgumentError", "DtypeError", "ShapeError",
           "UnsupportedOpError", "CompileError", "RuntimeCheckError", "PackageError",
           "__version__"]
