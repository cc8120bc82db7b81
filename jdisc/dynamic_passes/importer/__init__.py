"""StableHLO (the MLIR module jax.export gives) -> jdisc's IR: `mlir_import` (ops, regions,
locations), `mlir_helpers` (attribute and type readers), `legacy_ops` (mhlo and older forms),
`tuples`, `top_k` and `linalg` (custom calls jdisc compiles)."""
