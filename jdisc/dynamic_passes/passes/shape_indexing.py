"""Shape rules of the ops that read or write a window of their operand: slice, pad,
dynamic_slice, dynamic_update_slice, gather and their dynamic forms (real_dynamic_slice,
dynamic_pad, dynamic_gather), whose bounds and sizes come from shape operands. What cannot be
proven inside the operand becomes a run-time check, needed only where the op touches an element.

`IndexingShapes` is a part of shape_prop.py's propagator (which inherits it, as it does
shape_contents.SymbolicContents): it uses the propagator's `prog`, `fail`, `require_sym` and
`same_shape`.
"""

from __future__ import annotations

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.host_values import Pred
from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.program import Check, Value, bind_host_value
from jdisc.dynamic_passes.passes.shape_contents import data_start_sizes


class IndexingShapes:
    """The `shape_<op>` rules of the indexing ops, and the bounds checks they share."""

    def shape_slice(self, op):
        x = op.operands[0]
        return [self.slice_shape(op, x.shape, op.attrs["start_indices"],
                                 op.attrs["limit_indices"], op.attrs["strides"])]

    def shape_real_dynamic_slice(self, op):
        x, start, limit, strides = op.operands
        sizes = data_start_sizes(op, lambda h: bind_host_value(
            self.prog, h, True, f"slice sizes of stablehlo.{op.name} at {op.loc}"))
        if sizes is not None:   # start is data (e.g. a loop counter): a dynamic_slice
            op.attrs["slice_sizes"] = sizes
            op.attrs["data_start"] = True
            return self.shape_dynamic_slice(op)
        op.attrs.update(start_indices=self.require_sym(op, start, "start_indices"),
                        limit_indices=self.require_sym(op, limit, "limit_indices"),
                        strides=self.require_sym(op, strides, "strides"))
        return self.shape_slice(op)

    def slice_shape(self, op, shape, starts, limits, strides) -> tuple:
        """Result shape; what cannot be proven in bounds becomes a run-time check. The bounds
        of what the slice reads (start >= 0, limit <= the dim) matter only when it reads
        something: an empty result is legal whatever they are."""
        out, reads = [], []
        for axis, (d, a, b, c) in enumerate(zip(shape, starts, limits, strides)):
            for lhs, cmp, rhs, what in ((b, ">=", a, "limit"), (c, ">=", 1, "stride")):
                proven = Pred(cmp, lhs, rhs).decide()
                if proven is False:
                    raise self.fail(op, f"axis {axis}: {what} {lhs} {cmp} {rhs} never holds")
                if proven is None:
                    self.prog.checks.append(Check(lhs, cmp, rhs, (
                        f"stablehlo.{op.name} at {op.loc}: axis {axis} {what} out of range")))
            reads += [(a, ">=", 0, f"axis {axis} start out of range"),
                      (b, "<=", d, f"axis {axis} limit out of range")]
            out.append(symbolic.floordiv(b - a + c - 1, c))
        for lhs, cmp, rhs, what in reads:
            self.bound_unless_empty(op, prod(out), lhs, cmp, rhs, what)
        return tuple(out)

    def bound_unless_empty(self, op, count: Dim, lhs: Dim, cmp: str, rhs: Dim,
                           what: str) -> None:
        """`lhs cmp rhs` (cmp `<=` or `>=`), a bound that keeps an op's reads or writes inside
        its operand, needed only where the op touches `count` > 0 elements (its result, or its
        updates): checked as `min(count, slack) <= 0`, settled at compile time when it can be.
        (jax.export assumes every dim >= 1; at a dim of 0, e.g. a batch, slice sizes of 1 exceed
        the operand while the result is empty, which XLA accepts.)"""
        if Pred(cmp, lhs, rhs).decide() is True or symbolic.prove_eq(count, 0) is True:
            return
        message = f"stablehlo.{op.name} at {op.loc}: {what}"
        if symbolic.prove_ge(count, 1) is True:
            check = Check(lhs, cmp, rhs, message)
        else:
            slack = lhs - rhs if cmp == "<=" else rhs - lhs
            check = Check(symbolic.dmin(count, slack), "<=", 0, message,
                          shown=f"{lhs} {cmp} {rhs} (needed unless the result is empty)")
        if check.holds_statically() is False:
            raise self.fail(op, f"{what}: {lhs} {cmp} {rhs} never holds")
        self.prog.checks.append(check)

    def shape_pad(self, op):
        x = op.operands[0]
        out = []
        for d, lo, hi, it in zip(x.shape, op.attrs["edge_padding_low"],
                                 op.attrs["edge_padding_high"], op.attrs["interior_padding"]):
            out.append(lo + hi + d + symbolic.dmax(d - 1, 0) * it)
        return [tuple(out)]

    def shape_dynamic_pad(self, op):
        x, _, lo, hi, it = op.operands
        op.attrs.update(edge_padding_low=self.require_sym(op, lo, "edge_padding_low"),
                        edge_padding_high=self.require_sym(op, hi, "edge_padding_high"),
                        interior_padding=self.require_sym(op, it, "interior_padding"))
        for i, v in enumerate(op.attrs["interior_padding"]):
            if symbolic.prove_ge(v, 0) is not True:
                self.prog.checks.append(Check(v, ">=", 0, f"stablehlo.dynamic_pad at {op.loc}: "
                                              f"interior padding of axis {i} is negative"))
        return self.shape_pad(op)

    def shape_dynamic_slice(self, op):
        x = op.operands[0]
        sizes = op.attrs["slice_sizes"]
        for i, (d, n) in enumerate(zip(x.shape, sizes)):
            self.bound_unless_empty(op, prod(sizes), n, "<=", d,
                                    f"slice size of axis {i} exceeds the operand")
        return [tuple(sizes)]

    def shape_dynamic_update_slice(self, op):
        x, u = op.operands[:2]
        for i, (d, n) in enumerate(zip(x.shape, u.shape)):   # an empty update writes nothing
            self.bound_unless_empty(op, u.num_elements(), n, "<=", d,
                                    f"the update's axis {i} exceeds the operand")
        return [x.shape]

    def shape_gather(self, op):
        x, idx = op.operands[:2]
        sizes = op.attrs["slice_sizes"]
        out = self.gather_shape(op, idx, sizes)
        self.gather_index_checks(op, x, idx)
        for i, (d, n) in enumerate(zip(x.shape, sizes)):
            self.bound_unless_empty(op, prod(out), n, "<=", d,
                                    f"slice size of axis {i} exceeds the operand")
        return [out]

    def gather_index_checks(self, op, x: Value, idx: Value) -> None:
        """Each index vector holds one start per `start_index_map` entry (a missing
        `index_vector_dim` axis is a vector of one), and each operand batching axis has the
        size of the indices' batching axis it is read at."""
        dn = op.attrs["dimension_numbers"]
        ivd, starts = dn["index_vector_dim"], len(dn["start_index_map"])
        length = idx.shape[ivd] if ivd < idx.rank else 1
        self.same_shape(op, (length,), (starts,),
                        f"the index vector (start_indices axis {ivd}) against start_index_map")
        for od, idim in zip(dn["operand_batching_dims"], dn["start_indices_batching_dims"]):
            self.same_shape(op, (x.shape[od],), (idx.shape[idim],), f"operand batching axis "
                            f"{od} against start_indices batching axis {idim}")

    @staticmethod
    def gather_shape(op, idx, sizes) -> tuple:
        dn = op.attrs["dimension_numbers"]
        batch = [d for i, d in enumerate(idx.shape) if i != dn["index_vector_dim"]]
        offsets = [n for i, n in enumerate(sizes) if i not in dn["collapsed_slice_dims"]
                   and i not in dn["operand_batching_dims"]]
        rank = len(batch) + len(offsets)
        out, b, o = [], iter(batch), iter(offsets)
        for i in range(rank):
            out.append(next(o) if i in dn["offset_dims"] else next(b))
        return tuple(out)

    def shape_dynamic_gather(self, op):
        op.attrs["slice_sizes"] = self.require_sym(op, op.operands[2], "slice_sizes")
        return self.shape_gather(op)
