"""jdisc's middle end: its own IR and the passes over it, in four parts that import downstream.

    algebra/    symbolic dims and what is known about them: the `Dim` class, intervals,
                constraints, host values (imports nothing of the IR)
    ir/         the program (`Program`, `Op`, `Value`), the op registry, the verifier
    importer/   StableHLO (MLIR, from jax.export) -> the IR
    passes/     shape propagation, constraints, fusion, the memory plan, the sharding rule

`pipeline.py` lists the passes in order; `tests/test_layering.py` checks the layering.
"""
