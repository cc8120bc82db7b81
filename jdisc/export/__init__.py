"""jdisc/export: a JAX function -> StableHLO with symbolic dims and its signature (exporter.py,
specs.py). This module is also the function `jdisc.export(fun, *examples, dynamic_axes=...)`,
which compiles a function into a package (see jdisc/package.py).

Why a callable module: the design card fixes this subpackage's name, and the issue names the
function `jdisc.export`. Importing any submodule (`import jdisc.export.exporter`, which jdisc
itself does) sets the attribute `jdisc.export` to this module object, so a plain function of that
name in jdisc/__init__.py would be overwritten by whichever import came last. Instead the module
object itself is callable: its class is a ModuleType subclass whose __call__ delegates to
`jdisc.package.export`, so `jdisc.export(...)` works whatever was imported, in any order. The
delegate is imported at call time: jdisc.package sits downstream of every stage, this one
included, and importing it here would make the pipeline's first stage import all the others.
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, fun, *example_args, **kwargs):
        """`jdisc.export(fun, *example_args, dynamic_axes=None, constraints=(), bake_params=(),
        name=None)` -> a `jdisc.Package`; see `jdisc.package.export`."""
        from jdisc.package import export
        return export(fun, *example_args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
