"""A readable account of a compiled program: kernels, checks, memory (`JdiscFunction.explain`)."""

from __future__ import annotations

from jdisc.dynamic_passes.ir import Program, format_signature


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
    constraints = getattr(prog, "constraints", None)
    if constraints is not None:
        lines.append("constraints:")
        lines.extend(f"  {fact}" for fact in constraints.describe())
    if prog.memory is not None:
        lines.append(f"peak intermediate memory: {prog.memory.arena_bytes} bytes")
        lines.extend(f"  {line}" for line in prog.memory.describe())
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
