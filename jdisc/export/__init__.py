"""jdisc/export: a JAX function -> StableHLO with symbolic dims and its signature (exporter.py,
specs.py). The first stage of the pipeline; it imports no other jdisc stage.

Compiling a function into a saved package is `jdisc.export_package` (jdisc/package.py), which sits
downstream of every stage.
"""
