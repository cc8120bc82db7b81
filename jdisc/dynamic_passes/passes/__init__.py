"""The passes over jdisc's IR, each a named function `Program -> Program` that
`dynamic_passes/pipeline.py` lists in order: shape propagation and the dynamic ops' resolution,
control flow, dots and convolutions, fusion, the memory plan and its checker, the sharding
rule, cost analysis."""
