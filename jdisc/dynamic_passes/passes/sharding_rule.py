"""A program's sharding rule: which input axes are parallel and where they go
(parallel_axes.find_parallel_axes fills it in; sharding.py partitions the call by it)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ParallelAxes:
    """The program's sharding rule. Per input and output, per axis: the parallel dimension
    variable that sizes it, or None. Per output, `(dim, kind, scale)` for each parallel dim
    whose shards must be combined: kind "add" / "max" / "min" (an all-reduce over the shards
    of dim) or "exact" (none), then a multiplication by n**-scale (n: the number of shards).
    `refused`: why each dimension variable of the inputs that is not parallel is not."""
    inputs: tuple[tuple[str | None, ...], ...]
    outputs: tuple[tuple[str | None, ...], ...]
    combine: tuple[tuple[tuple[str, str, int], ...], ...]
    refused: tuple[tuple[str, str], ...]

    @property
    def dims(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for axes in self.inputs:
            for d in axes:
                if d is not None:
                    seen.setdefault(d, None)
        return tuple(seen)

    def describe(self, in_names: list[str], out_names: list[str]) -> list[str]:
        lines = []
        for d in self.dims:
            ins = [f"{n} axis {i}" for n, axes in zip(in_names, self.inputs)
                   for i, a in enumerate(axes) if a == d]
            outs = [f"{n} axis {i}" for n, axes in zip(out_names, self.outputs)
                    for i, a in enumerate(axes) if a == d]
            for n, comb in zip(out_names, self.combine):
                for dim, kind, scale in comb:
                    if dim == d:
                        how = [f"{'sum' if kind == 'add' else kind} over shards"] * (
                            kind != "exact") + [f"times n**{-scale}"] * (scale != 0)
                        outs.append(f"{n} ({', '.join(how)})")
            lines.append(f"{d}: parallel: {', '.join(ins)} -> {', '.join(outs) or 'no output'}")
        lines.extend(f"{d}: not parallel: {why}" for d, why in self.refused)
        return lines
