"""A readable account of a compiled program: kernels, checks, memory (`JdiscFunction.explain`)."""

from __future__ import annotations

from jdisc.dynamic_passes.ir.program import Program, format_signature


def explain_program(prog: Program) -> str:
    lines = [f"jdisc program '{prog.name}'"] + format_signature(prog)
    kinds: dict[str, int] = {}
    for k in prog.kernels:
        kinds[k.kind] = kinds.get(k.kind, 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    lines.append(f"kernels: {len(prog.kernels)} ({summary})")
    lines.extend(_kernel_lines(prog, "  "))
    lines.append(f"checks at run time: {len(prog.checks)}")
    for c in prog.checks:
        lines.append(f"  {c.lhs} {c.cmp} {c.rhs}    ({c.message[:90]})")
    for name, h in prog.derived:
        lines.append(f"  host-computed {name}")
    constraints = prog.constraints
    if constraints is not None:
        lines.append("constraints:")
        lines.extend(f"  {fact}" for fact in constraints.describe())
    if prog.memory is not None:
        lines.append(f"peak intermediate memory: {prog.memory.arena_bytes} bytes")
        lines.extend(f"  {line}" for line in prog.memory.describe())
    if prog.parallel is not None:
        lines.append("sharding (under jax.jit with shardings, or an eager call on a sharded "
                     "array):")
        lines.extend(f"  {line}" for line in prog.parallel.describe(
            [s.name for s in prog.inputs], [s.name for s in prog.outputs]) or ["no dynamic axes"])
    for i, j in prog.donation:
        lines.append(f"donation: result {prog.outputs[j].name} is written into the buffer of "
                     f"donated input {prog.inputs[i].name}")
    return "\n".join(lines) + "\n"


def _kernel_lines(prog: Program, indent: str) -> list[str]:
    """Kernels with their fused ops; a control op's regions nested under it."""
    lines = []
    for k in prog.kernels:
        versions = getattr(k, "versions", ())
        extra = f", versions: {'; '.join(versions)}" if versions else ""
        if k.kind == "while" and k.root.attrs.get("in_place"):
            extra += f", carried {list(k.root.attrs['in_place'])} updated in place"
        lines.append(f"{indent}{k.name}  [{k.kind}{extra}]")
        for op in k.ops:
            if op.name != "constant":
                lines.append(f"{indent}    stablehlo.{op.name:24s} {op.loc}")
        for sub in k.root.programs:
            lines.append(f"{indent}    region {sub.name}: {len(sub.kernels)} kernels, arena "
                         f"{sub.memory.arena_bytes} bytes")
            lines.extend(_kernel_lines(sub, indent + "      "))
    return lines


def fused_graph_dot(prog: Program) -> str:
    """The kernel graph as Graphviz DOT: inputs, kernels (with the ops each fuses), outputs, and
    the buffers between them (`jdisc inspect --dot`; render with `dot -Tsvg`)."""
    lines = [f"digraph {_dot_str(prog.name)} {{", "  rankdir=TB;",
             "  node [fontname=\"monospace\", fontsize=10];"]
    made: dict[int, str] = {}        # value id -> node that produces it
    for i, (param, spec) in enumerate(zip(prog.body.params, prog.inputs)):
        made[param.id] = f"in{i}"
        lines.append(f"  in{i} [shape=box, style=filled, fillcolor=\"#dde8f5\", "
                     f"label={_dot_str(spec.name + chr(10) + _type(spec))}];")
    for j, k in enumerate(prog.kernels):
        ops = [op.name for op in k.ops if op.name != "constant"]
        regions = sum(len(op.programs) for op in k.ops)
        label = "\n".join([k.name, f"[{k.kind}]" + (f" {regions} region(s)" if regions else "")]
                          + _wrap(ops))
        lines.append(f"  k{j} [shape=box, style=rounded, label={_dot_str(label)}];")
        for v in k.inputs:
            src = made.get(v.id)
            if src is None and v.producer is not None:       # a constant buffer
                src = made[v.id] = f"v{v.id}"
                lines.append(f"  {src} [shape=note, label={_dot_str(v.producer.name)}];")
            if src is not None:
                lines.append(f"  {src} -> k{j} [label={_dot_str(v.type_str())}, fontsize=8];")
        for v in k.outputs:
            made[v.id] = f"k{j}"
    for i, (v, spec) in enumerate(zip(prog.body.results, prog.outputs)):
        lines.append(f"  out{i} [shape=box, style=filled, fillcolor=\"#e2f0d9\", "
                     f"label={_dot_str(spec.name + chr(10) + _type(spec))}];")
        if v.id in made:
            lines.append(f"  {made[v.id]} -> out{i};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _type(spec) -> str:
    return f"{spec.dtype}[{', '.join(map(str, spec.shape))}]"


def _wrap(names: list[str], width: int = 40) -> list[str]:
    rows, row = [], ""
    for n in names:
        if row and len(row) + len(n) + 2 > width:
            rows.append(row + ",")
            row = n
        else:
            row = f"{row}, {n}" if row else n
    return rows + ([row] if row else [])


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
