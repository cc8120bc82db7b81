"""jdisc's own IR: one small graph of ops over values with symbolic shapes.

* A `Value` has a dtype (short names: f32, f64, i1, i8..i64, u8..u64, f16, bf16, c64, c128;
  see `dtypes.py`) and a shape made of symbolic dimensions (`int | Expr`, see
  `algebra/symbolic.py`). An integer value whose contents are known symbolically (a dimension
  size, a shape vector) carries them in `sym`.
* An `Op` keeps its StableHLO name (`add`, `dot_general`, ...) and the source location it came
  from, so every error and every generated kernel can point back to the user's line.
* A `Block` is a function body: parameters, ops in order, results.
* A `Program` is the whole compiled function: its body, the symbolic signature of its inputs and
  outputs, and the checks the host launcher makes at run time. `bind_host_value` adds a
  dimension variable the launcher computes (`Program.derived`).

What each op is (its category, operands, kernel kind, ...) is its entry in the op registry,
`ops.py`; `verify.py` checks a Program against it.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.constraints import ShapeConstraints
from jdisc.dynamic_passes.algebra.host_values import HostValue
from jdisc.dynamic_passes.algebra.symbolic import Dim

if TYPE_CHECKING:   # what the passes put in Program's later fields (they import this module)
    from jdisc.dynamic_passes.passes.fusion import Kernel
    from jdisc.dynamic_passes.passes.memory_plan import MemoryPlan
    from jdisc.dynamic_passes.passes.sharding_rule import ParallelAxes

_value_ids = itertools.count()


@dataclasses.dataclass(eq=False)
class Value:
    dtype: str
    shape: tuple[Dim, ...]
    producer: "Op | None" = None
    sym: tuple[Dim, ...] | None = None   # known integer contents, row-major, when small
    id: int = dataclasses.field(default_factory=lambda: next(_value_ids))

    @property
    def rank(self) -> int:
        return len(self.shape)

    def num_elements(self) -> Dim:
        return symbolic.prod(self.shape)

    def type_str(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type_str()}"


@dataclasses.dataclass(eq=False)
class Op:
    name: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    loc: str = "unknown"
    regions: list["Block"] = dataclasses.field(default_factory=list)
    # control flow (while/if/case) after outlining: one Program per region, body == region
    programs: list["Program"] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        for r in self.results:
            r.producer = self

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, self.name
        return self.results[0]


@dataclasses.dataclass(eq=False)
class Block:
    params: list[Value]
    ops: list[Op]
    results: list[Value]
    # a control-flow region's own run-time checks: they hold only when the region runs
    checks: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Check:
    """A fact the host launcher verifies at run time: `lhs <cmp> rhs` over dimension variables.

    `message` is the user-facing explanation. If `args` is empty the launcher appends the values
    of the variables involved; otherwise `{k}` in the message is replaced by the value of args[k]
    (jax.export's shape-assertion messages are written that way).
    """
    lhs: Dim
    cmp: str          # one of == != >= > <= <
    rhs: Dim
    message: str
    args: tuple = ()
    shown: str = ""   # how to print the condition, when `lhs cmp rhs` reads badly

    def holds_statically(self) -> bool | None:
        fn = {"==": symbolic.prove_eq, ">=": symbolic.prove_ge, ">": symbolic.prove_gt,
              "<=": symbolic.prove_le, "<": symbolic.prove_lt}.get(self.cmp)
        if self.cmp == "!=":
            r = symbolic.prove_eq(self.lhs, self.rhs)
            return None if r is None else not r
        return fn(self.lhs, self.rhs)


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """How one flat input or output of the program looks: name, dtype, symbolic shape and, for
    each axis, the user's dimension name (or None for a static axis)."""
    name: str
    dtype: str
    shape: tuple[Dim, ...]


@dataclasses.dataclass
class Scope:
    """What a region program knows from the top level: its dimension variables, the ones the
    launcher derives, and the checks that hold (the top level's and the region's own)."""
    dim_vars: list[str]
    derived: list
    checks: list[Check]


@dataclasses.dataclass(eq=False)
class Program:
    name: str
    body: Block
    inputs: list[ArgSpec]
    outputs: list[ArgSpec]
    checks: list[Check] = dataclasses.field(default_factory=list)
    kernels: list[Kernel] = dataclasses.field(default_factory=list)  # fusion.plan_kernels
    memory: MemoryPlan | None = None                               # memory_plan.plan_memory
    constraints: ShapeConstraints | None = None            # pipeline.analyze_constraints
    # a region program (a while body, an if branch): the program around it (compile_regions)
    scope: Scope | None = None
    # dimension variables the launcher computes from others: (name, HostValue); see
    # bind_host_value
    derived: list = dataclasses.field(default_factory=list)
    # the JDISC_DUMP_DIR folder of this program: its name and a hash of its StableHLO, so that
    # two functions with one name (two lambdas) never share a folder
    dump_name: str = ""
    # param positions the caller donates, and (param position, result position) pairs whose
    # buffers the results may take (memory_plan.plan_donation)
    donated: frozenset = frozenset()
    donation: tuple = ()
    # which input axes are parallel and where they go: the sharding rule of the custom call
    # (parallel_axes.find_parallel_axes; None in region programs)
    parallel: ParallelAxes | None = None

    @property
    def dim_vars(self) -> list[str]:
        """Dimension variables in the order they are first bound from the inputs."""
        seen: dict[str, None] = {}
        for spec in self.inputs:
            for d in spec.shape:
                for v in sorted(symbolic.variables(d)):
                    seen.setdefault(v, None)
        for name, _ in self.derived:
            seen.setdefault(name, None)
        return list(seen)


def bind_host_value(prog: Program, h: HostValue, as_shape: bool, where: str) -> symbolic.Expr:
    """A dimension variable `_hN` that the launcher defines as `h` before its checks (a fresh
    entry of `prog.derived`, with a `>= 0` check when it is a size)."""
    for name, existing in prog.derived:   # the same node first (cheap), then an equal tree
        if existing is h:
            return symbolic.var(name)
    for name, existing in prog.derived:
        if existing == h:
            return symbolic.var(name)
    # a fresh name: a user's dimension may be called `_h0` too
    taken = {n for spec in prog.inputs for d in spec.shape for n in symbolic.variables(d)}
    taken.update(n for n, _ in prog.derived)
    name = f"_h{len(prog.derived)}"
    while name in taken:
        name = "_" + name
    prog.derived.append((name, h))
    if as_shape:
        prog.checks.append(Check(symbolic.var(name), ">=", 0,
                                 f"{where}: a size computed at run time is negative"))
    return symbolic.var(name)


def walk(block: Block):
    """Every op in a block, nested regions included, in program order."""
    for op in block.ops:
        yield op
        for region in op.regions:
            yield from walk(region)


def format_block(block: Block, indent: str = "  ") -> list[str]:
    lines = [f"{indent}params({', '.join(repr(p) for p in block.params)})"]
    for op in block.ops:
        res = ", ".join(repr(r) for r in op.results)
        args = ", ".join(f"%{v.id}" for v in op.operands)
        attrs = {k: v for k, v in op.attrs.items() if not isinstance(v, np.ndarray)}
        attr_s = f" {attrs}" if attrs else ""
        sym = ""
        if len(op.results) == 1 and op.results[0].sym is not None:
            sym = f"  = <{', '.join(str(d) for d in op.results[0].sym)}>"
        lines.append(f"{indent}{res + ' = ' if res else ''}{op.name}({args}){attr_s}{sym}"
                     f"    # {op.loc}")
        for region in op.regions:
            lines.extend(format_block(region, indent + "    "))
    lines.append(f"{indent}return {', '.join(f'%{v.id}' for v in block.results)}")
    return lines


def format_signature(prog: Program) -> list[str]:
    """One line per input and output: name, dtype and symbolic shape."""
    return ([f"  in   {s.name}: {s.dtype}[{', '.join(map(str, s.shape))}]" for s in prog.inputs]
            + [f"  out  {s.name}: {s.dtype}[{', '.join(map(str, s.shape))}]"
               for s in prog.outputs])


def format_program(prog: Program) -> str:
    """A readable dump of the program (what JDISC_DUMP_DIR writes after each pass)."""
    out = [f"program {prog.name}"] + format_signature(prog)
    for name, h in prog.derived:
        out.append(f"  derived {name} = {h}")
    for c in prog.checks:
        out.append(f"  check  {c.lhs} {c.cmp} {c.rhs}    # {c.message[:80]}")
    out.extend(format_block(prog.body))
    for k in prog.kernels:
        out.append(f"  kernel {k.describe()}")
    if prog.memory is not None:
        out.extend(f"  memory {line}" for line in prog.memory.describe())
    if prog.parallel is not None:
        out.extend(f"  parallel {line}" for line in prog.parallel.describe(
            [s.name for s in prog.inputs], [s.name for s in prog.outputs]))
    for i, j in prog.donation:
        out.append(f"  donation: result {j} ({prog.outputs[j].name}) may take the buffer of "
                   f"input {i} ({prog.inputs[i].name})")
    return "\n".join(out) + "\n"
