"""jdisc's IR: `program` (Program, Block, Op, Value, Check, ArgSpec), `ops` (the op registry:
everything jdisc knows about one StableHLO op), `dtypes` and `verify` (the structural and
per-op checks run after every pass under JDISC_VERIFY=1)."""
