"""Symbolic shape propagation: every value gets a shape of symbolic dimensions.

Shape computations (`get_dimension_size`, a shape vector built by `concatenate` of `reshape`d
scalars, integer arithmetic on them) are evaluated at compile time into `Value.sym`; the dynamic
ops that consume them (`dynamic_broadcast_in_dim`, `dynamic_reshape`, ...) read their result
shape from there. A static dim in the StableHLO type that the propagation cannot prove equal to
its own result becomes a run-time check.
"""

from __future__ import annotations

import dataclasses

from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.host_values import HostValue, Pred
from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.ir.dtypes import bit_width
from jdisc.dynamic_passes.ir.ops import ELEMENTWISE
from jdisc.dynamic_passes.ir.program import Check, Op, Program, Value, bind_host_value
from jdisc.dynamic_passes.passes.shape_contents import SymbolicContents
from jdisc.dynamic_passes.passes.shape_indexing import IndexingShapes
from jdisc.errors import JdiscError, ShapeError


_CMP = {"EQ": "==", "NE": "!=", "GE": ">=", "GT": ">", "LE": "<=", "LT": "<"}


def _dilated_size(n: Dim, dilation: Dim) -> Dim:
    """The size of n elements spread `dilation` (>= 1) apart: (n - 1) * dilation + 1, or 0 when
    n is 0; that is max(n * dilation - dilation + 1, 0), and n for a dilation of 1. Written with
    n once, so that a CNN's spatial sizes grow by a term per layer, not double with each one."""
    if isinstance(dilation, int) and dilation == 1:
        return n
    return symbolic.dmax(n * dilation - dilation + 1, 0)


class _Propagator(SymbolicContents, IndexingShapes):
    def __init__(self, prog: Program):
        self.prog = prog
        self.nonneg_checked: set = set()    # dims with a `>= 0` check in this scope

    def decide(self, pred: Pred, op: Op) -> bool | None:
        """Decided for every assignment of non-negative dims, or None."""
        return pred.decide()

    def fail(self, op: Op, msg: str) -> JdiscError:
        return ShapeError(f"{msg} (stablehlo.{op.name} at {op.loc})")

    # -- shapes -----------------------------------------------------------------------------
    def run(self) -> None:
        for op in self.prog.body.ops:
            self.visit(op)

    def visit(self, op: Op) -> None:
        handler = getattr(self, "shape_" + op.name, None)
        if handler is None:
            if op.name in ELEMENTWISE:
                shapes = [self.elementwise(op)]
            else:
                shapes = [self.from_type(op, r) for r in op.results]
        else:
            shapes = handler(op)
        for r, s in zip(op.results, shapes):
            r.shape = self.reconcile(op, r.shape, tuple(s))
            self.nonnegative(op, r.shape)
        sym_fn = getattr(self, "sym_" + op.name, None)
        needs_operands = op.name not in ("get_dimension_size", "constant", "shape_of")
        if sym_fn is not None and len(op.results) == 1 and op.results[0].dtype != "i1" and (
                not needs_operands
                or all(v.sym is not None for v in op.operands if v.dtype != "i1")):
            try:
                sym = sym_fn(op)
            except (ZeroDivisionError, TypeError):
                sym = None
            if sym is not None:
                op.results[0].sym = tuple(sym)
        elif op.name == "compare":
            a, b = op.operands
            if a.sym is not None and b.sym is not None and len(a.sym) == 1 == len(b.sym):
                p = Pred(_CMP[op.attrs["comparison_direction"]], a.sym[0], b.sym[0])
                decided = self.decide(p, op)
                op.results[0].sym = (p if decided is None else decided,)
        elif op.name == "and" and op.results[0].dtype == "i1" and op.results[0].rank == 0 \
                and all(v.sym is not None for v in op.operands):
            terms = [t for v in op.operands for t in v.sym]
            if any(t is False for t in terms):
                op.results[0].sym = (False,)
            else:
                preds = tuple(t for t in terms if t is not True)
                op.results[0].sym = (True,) if not preds else (
                    preds[0] if len(preds) == 1 else Pred("and", preds, ()),)

    def reconcile(self, op: Op, typed: tuple, computed: tuple) -> tuple:
        if len(typed) != len(computed):
            raise self.fail(op, f"rank {len(computed)} computed, {len(typed)} in the type")
        out = []
        for t, c in zip(typed, computed):
            if t is None or t == c:
                out.append(c)
            elif symbolic.prove_eq(c, t) is False:
                raise self.fail(op, f"dimension {c} can never equal the static size {t}")
            else:   # symbolic vs static: trust the type and check at run time
                self.prog.checks.append(Check(c, "==", t, f"stablehlo.{op.name} at {op.loc} "
                                              f"expects dimension {c} to be {t}"))
                out.append(t)
        return tuple(out)

    def nonnegative(self, op: Op, shape: tuple) -> None:
        """Every symbolic size is >= 0 at run time (`S - 1` at S = 0 is an error, as in jax):
        a check, and so a fact that every later pass and the plan checker may rely on."""
        for d in shape:
            if isinstance(d, int) or d in self.nonneg_checked or symbolic.prove_ge(d, 0):
                continue
            self.nonneg_checked.add(d)
            self.prog.checks.append(Check(d, ">=", 0, f"stablehlo.{op.name} at {op.loc} gets "
                                                      f"a negative dimension {d}"))

    def from_type(self, op: Op, r: Value) -> tuple:
        if any(d is None for d in r.shape):
            raise self.fail(op, f"cannot infer the dynamic result shape {r.type_str()}")
        return r.shape

    def require_sym(self, op: Op, v: Value, what: str) -> tuple[Dim, ...]:
        if v.sym is None or any(isinstance(d, (bool, Pred)) for d in v.sym):
            raise self.fail(op, f"the {what} operand is not a shape computation jdisc can "
                                f"evaluate symbolically")
        where = f"{what} of stablehlo.{op.name} at {op.loc}"
        return tuple(bind_host_value(self.prog, d, True, where) if isinstance(d, HostValue)
                     else d for d in v.sym)

    def same_shape(self, op: Op, a: tuple, b: tuple, what: str) -> None:
        for i, (x, y) in enumerate(zip(a, b)):
            if symbolic.prove_eq(x, y) is not True:
                if symbolic.prove_eq(x, y) is False:
                    raise self.fail(op, f"{what}: axis {i} is {x} and {y}")
                self.prog.checks.append(Check(x, "==", y, f"{what} of stablehlo.{op.name} at "
                                              f"{op.loc}: axis {i} must match"))

    def same_shape_or_scalar(self, op: Op, v: Value, ref: tuple, what: str) -> None:
        """`v` is a scalar (read at index 0 for every element) or has the shape `ref`;
        `what` names the two, e.g. "min against the operand"."""
        if v.rank == 0:
            return
        if v.rank != len(ref):
            raise self.fail(op, f"{what}: rank {v.rank} and {len(ref)}; it must be a scalar "
                                f"or have the same shape")
        self.same_shape(op, v.shape, ref, what)

    def divisible(self, op: Op, d: Dim, k: int, what: str) -> None:
        """`d % k == 0`, proven at compile time or checked at run time."""
        check = Check(symbolic.mod(d, k), "==", 0, f"stablehlo.{op.name} at {op.loc}: {what}",
                      shown=f"{d} % {k} == 0")
        proven = check.holds_statically()
        if proven is False:
            raise self.fail(op, f"{what}: {d} is not a multiple of {k}")
        if proven is None:
            self.prog.checks.append(check)

    def elementwise(self, op: Op) -> tuple:
        shaped = [v for v in op.operands if v.rank > 0] or op.operands
        ref = shaped[0].shape
        for v in shaped[1:]:
            self.same_shape(op, ref, v.shape, "operand shapes")
        return ref

    # -- per-op shape rules ------------------------------------------------------------------
    def shape_get_dimension_size(self, op):
        return [()]

    def shape_shape_of(self, op):
        return [(op.operands[0].rank,)]

    def shape_shape_broadcast(self, op):
        return [(max(v.shape[0] for v in op.operands),)]

    def shape_cstr_broadcastable(self, op):
        """shape.cstr_broadcastable: right-aligned, each pair of dims is equal or has a 1 --
        settled now where it can be, else checked when the program runs."""
        shapes = [self.require_sym(op, v, f"shape {i}") for i, v in enumerate(op.operands)]
        rank = max(len(s) for s in shapes)
        padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
        for axis in range(rank):
            dims = [s[axis] for s in padded]
            for a, b in zip(dims, dims[1:]):
                if 1 in (a, b) or symbolic.prove_eq(a, b) is True:
                    continue
                # a == b or a == 1 or b == 1: the smallest distance among them is 0
                apart = symbolic.dmin(symbolic.dmin(_dist(a, b), _dist(a, 1)), _dist(b, 1))
                check = Check(apart, "==", 0, f"shape.cstr_broadcastable at {op.loc}: axis "
                              f"{axis} (from the right: {rank - axis}) has sizes {a} and {b}, "
                              f"which do not broadcast", shown=f"{a} == {b} or one is 1")
                if check.holds_statically() is False:
                    raise self.fail(op, f"sizes {a} and {b} never broadcast")
                self.prog.checks.append(check)
        return [()]

    def shape_const_witness(self, op):
        return [()]

    def shape_assuming_all(self, op):
        return [()]

    def shape_dynamic_broadcast_in_dim(self, op):
        out = self.require_sym(op, op.operands[1], "output_dimensions")
        self.broadcast_checks(op, out)
        return [out]

    def broadcast_checks(self, op, out: tuple) -> None:
        """Each operand dim is 1 or equal to its result dim (else the read is out of bounds)."""
        x = op.operands[0]
        for j, d in enumerate(op.attrs["broadcast_dimensions"]):
            xd, od = x.shape[j], out[d]
            if xd == 1 or symbolic.prove_eq(xd, od):
                continue
            self.prog.checks.append(Check((xd - 1) * (xd - od), "==", 0, (
                f"stablehlo.{op.name} at {op.loc}: operand axis {j} has size {xd}, which must "
                f"be 1 or equal to the result's axis {d} ({od})"),
                shown=f"{xd} == 1 or {xd} == {od}"))

    def shape_broadcast_in_dim(self, op):
        r, x = op.results[0], op.operands[0]
        out = list(r.shape)
        for i, d in enumerate(op.attrs["broadcast_dimensions"]):
            if out[d] is None:
                out[d] = x.shape[i]
        out = self.from_type(op, Value(r.dtype, tuple(out)))
        self.broadcast_checks(op, out)
        return [out]

    def shape_dynamic_reshape(self, op):
        out = self.require_sym(op, op.operands[1], "output_shape")
        self.same_shape(op, (op.operands[0].num_elements(),), (prod(out),), "element counts")
        return [out]

    def shape_reshape(self, op):
        r, x = op.results[0], op.operands[0]
        unknown = [i for i, d in enumerate(r.shape) if d is None]
        if not unknown:     # a dynamic operand must hold exactly the static count
            self.same_shape(op, (x.num_elements(),), (prod(r.shape),), "element counts")
            return [r.shape]
        if len(unknown) > 1:
            raise self.fail(op, "reshape with more than one dynamic result dim")
        known: Dim = 1
        for d in r.shape:
            if d is not None:
                known = known * d
        out = list(r.shape)
        out[unknown[0]] = symbolic.floordiv(x.num_elements(), known)
        self.same_shape(op, (x.num_elements(),), (prod(out),), "element counts")
        return [tuple(out)]

    def shape_dynamic_iota(self, op):
        return [self.require_sym(op, op.operands[0], "output_shape")]

    def shape_transpose(self, op):
        x = op.operands[0]
        return [tuple(x.shape[p] for p in op.attrs["permutation"])]

    def shape_dot_general(self, op):
        lhs, rhs = op.operands
        dn = op.attrs["dot_dimension_numbers"]
        for a, b in zip(dn["lhs_contract"], dn["rhs_contract"]):
            self.same_shape(op, (lhs.shape[a],), (rhs.shape[b],), "contracting dimensions")
        for a, b in zip(dn["lhs_batch"], dn["rhs_batch"]):
            self.same_shape(op, (lhs.shape[a],), (rhs.shape[b],), "batch dimensions")
        lhs_free = [i for i in range(lhs.rank) if i not in dn["lhs_batch"] + dn["lhs_contract"]]
        rhs_free = [i for i in range(rhs.rank) if i not in dn["rhs_batch"] + dn["rhs_contract"]]
        return [tuple(lhs.shape[i] for i in dn["lhs_batch"]) + tuple(lhs.shape[i] for i in lhs_free)
                + tuple(rhs.shape[i] for i in rhs_free)]

    def shape_reduce(self, op):
        n = len(op.results)
        dims = op.attrs["dimensions"]
        for x in op.operands[1:n]:      # a variadic reduce (argmax) walks its inputs together
            self.same_shape(op, op.operands[0].shape, x.shape, "operand shapes")
        return [tuple(d for i, d in enumerate(x.shape) if i not in dims) for x in op.operands[:n]]

    def shape_concatenate(self, op):
        axis = op.attrs["dimension"]
        ref = list(op.operands[0].shape)
        total: Dim = 0
        for v in op.operands:
            total = total + v.shape[axis]
            self.same_shape(op, tuple(ref[:axis] + ref[axis + 1:]),
                            tuple(v.shape[:axis] + v.shape[axis + 1:]), "operand shapes")
        ref[axis] = total
        return [tuple(ref)]

    # -- control flow: regions are propagated in place, their checks hoisted -----------------
    def visit_block(self, block) -> None:
        """A region: its checks are its own (a loop body that never runs checks nothing), but
        for the `>= 0` check of a dim the launcher derives from host values (bind_host_value),
        which goes to the program around it: that dim is the whole program's (a branch's
        result may have it, and the program allocates that result before the branch runs),
        and jax too rejects a negative size in a branch or body it traces but never runs."""
        outer, self.prog.checks = self.prog.checks, []
        outer_checked, self.nonneg_checked = self.nonneg_checked, set(self.nonneg_checked)
        try:
            for op in block.ops:
                self.visit(op)
        finally:
            derived = {symbolic.var(name) for name, _ in self.prog.derived}
            for c in self.prog.checks:
                hoisted = c.cmp == ">=" and c.rhs == 0 and c.lhs in derived
                (outer if hoisted else block.checks).append(c)
            self.prog.checks, self.nonneg_checked = outer, outer_checked

    def shape_while(self, op):
        shapes = [v.shape for v in op.operands]
        cond, body = op.regions
        for block in (cond, body):
            for p, s in zip(block.params, shapes):
                p.shape = self.reconcile(op, p.shape, s)
        self.visit_block(cond)
        self.visit_block(body)
        for i, (p, r) in enumerate(zip(body.params, body.results)):
            self.same_region_shape(op, p, r, f"loop-carried value {i} changes shape from "
                                   f"{p.type_str()} to {r.type_str()} in one iteration; jdisc "
                                   f"compiles loops whose carried shapes are loop-invariant")
        return [p.shape for p in body.params]

    def shape_if(self, op):
        for block in op.regions:
            self.visit_block(block)
        first = op.regions[0].results
        for b, block in enumerate(op.regions[1:], 1):
            for i, (a, r) in enumerate(zip(first, block.results)):
                self.same_region_shape(op, a, r, f"result {i} has shape {a.type_str()} in "
                                       f"branch 0 and {r.type_str()} in branch {b}")
        return [v.shape for v in first]

    shape_case = shape_if

    def same_region_shape(self, op, a: Value, b: Value, what: str) -> None:
        if a.rank != b.rank or any(symbolic.prove_eq(x, y) is False
                                   for x, y in zip(a.shape, b.shape)):
            raise self.fail(op, what)
        for x, y in zip(a.shape, b.shape):
            if symbolic.prove_eq(x, y) is not True:
                self.prog.checks.append(Check(x, "==", y, f"stablehlo.{op.name} at {op.loc}: "
                                              f"{what}"))

    def shape_triangular_solve(self, op):
        a, b = op.operands
        m = b.shape[-2] if op.attrs.get("left_side") else b.shape[-1]
        self.same_shape(op, (a.shape[-1], a.shape[-2]), (m, m), "the triangular matrix")
        self.same_shape(op, a.shape[:-2], b.shape[:-2], "batch dimensions")
        return [b.shape]

    def shape_lapack(self, op):
        """A LAPACK call's results have the shapes its trailing shape operands hold (symbolic
        exports), or their static types; the shape operands are then dropped."""
        k = op.attrs.pop("shape_operands", 0)
        if not k:
            return [self.from_type(op, r) for r in op.results]
        shape_ops = op.operands[len(op.operands) - k:]
        op.operands = op.operands[:len(op.operands) - k]
        return [self.require_sym(op, v, f"shape of result {i}")
                for i, v in enumerate(shape_ops)]

    def shape_fft(self, op):
        """The transformed trailing axes have the fft_length sizes (an IRFFT's last operand
        axis: length // 2 + 1); RFFT keeps length // 2 + 1 entries of the last, IRFFT
        returns length of them."""
        x = op.operands[0]
        lengths = tuple(int(n) for n in op.attrs.get("fft_length", ()))
        kind = str(op.attrs.get("fft_type", ""))
        inverse_real = "IRFFT" in kind
        if not 1 <= len(lengths) <= min(3, x.rank):
            raise self.fail(op, f"fft_length {list(lengths)} for an operand of rank {x.rank}")
        want = lengths[:-1] + ((lengths[-1] // 2 + 1) if inverse_real else lengths[-1],)
        self.same_shape(op, x.shape[-len(lengths):], want, "the transformed axes")
        if "RFFT" in kind and not inverse_real:
            return [x.shape[:-1] + (lengths[-1] // 2 + 1,)]
        if inverse_real:
            return [x.shape[:-1] + (lengths[-1],)]
        return [x.shape]

    def shape_dynamic_reduce_window(self, op):
        # operands: the n inputs, their n init values, then the five shape operands
        n = len(op.results)
        names = ("window_dimensions", "window_strides", "base_dilations", "window_dilations",
                 "padding")
        for name, v in zip(names, op.operands[2 * n:2 * n + 5]):
            op.attrs[name] = self.require_sym(op, v, name)
        return self.shape_reduce_window(op)

    def shape_reduce_window(self, op):
        n = len(op.results)
        x = op.operands[0]
        r = x.rank
        a = op.attrs
        win = a["window_dimensions"]
        strides = a.get("window_strides") or (1,) * r
        base = a.get("base_dilations") or (1,) * r
        wdil = a.get("window_dilations") or (1,) * r
        pad = a.get("padding") or (0,) * (2 * r)
        a.update(window_strides=tuple(strides), base_dilations=tuple(base),
                 window_dilations=tuple(wdil), padding=tuple(pad))
        out = []
        for d in range(r):
            padded = _dilated_size(x.shape[d], base[d]) + pad[2 * d] + pad[2 * d + 1]
            extent = (win[d] - 1) * wdil[d] + 1
            out.append(symbolic.dmax(symbolic.floordiv(padded - extent, strides[d]) + 1, 0))
        return [tuple(out)] * n

    def shape_convolution(self, op):
        x, k = op.operands
        a = op.attrs
        dn = a["dimension_numbers"]
        ns = len(dn["in_spatial"])
        batch_groups = a.get("batch_group_count", 1)
        self.group_checks(op, batch_groups, a.get("feature_group_count", 1))
        strides = a.get("window_strides") or (1,) * ns
        pad = a.get("padding") or (0,) * (2 * ns)
        lhs_dil = a.get("lhs_dilation") or (1,) * ns
        rhs_dil = a.get("rhs_dilation") or (1,) * ns
        a.update(window_strides=tuple(strides), padding=tuple(pad), lhs_dilation=tuple(lhs_dil),
                 rhs_dilation=tuple(rhs_dil))
        groups = a.get("feature_group_count", 1)
        self.same_shape(op, (x.shape[dn["in_feature"]],), (k.shape[dn["k_in"]] * groups,),
                        "input features")
        out = [None] * x.rank
        out[dn["out_batch"]] = symbolic.floordiv(x.shape[dn["in_batch"]], batch_groups)
        out[dn["out_feature"]] = k.shape[dn["k_out"]]
        for i in range(ns):
            n, w = x.shape[dn["in_spatial"][i]], k.shape[dn["k_spatial"][i]]
            padded = _dilated_size(n, lhs_dil[i]) + pad[2 * i] + pad[2 * i + 1]
            extent = (w - 1) * rhs_dil[i] + 1
            out[dn["out_spatial"][i]] = symbolic.dmax(
                symbolic.floordiv(padded - extent, strides[i]) + 1, 0)
        return [tuple(out)]

    def group_checks(self, op, batch_groups: int, feature_groups: int) -> None:
        """StableHLO's convolution constraints C10, C15, C16: the input batch and the kernel's
        output features split evenly into the groups (a batch-grouped convolution is split
        into that many convolutions, convolutions.py, whose results are concatenated). C11
        and C14, on the input features, are the "input features" check."""
        x, k = op.operands
        dn = op.attrs["dimension_numbers"]
        out_features = k.shape[dn["k_out"]]
        if batch_groups != 1:
            self.divisible(op, x.shape[dn["in_batch"]], batch_groups,
                           f"the input batch must divide into {batch_groups} batch groups")
            self.divisible(op, out_features, batch_groups, f"the kernel's output features "
                           f"must divide into {batch_groups} batch groups")
        if feature_groups != 1:
            self.divisible(op, out_features, feature_groups, f"the kernel's output features "
                           f"must divide into {feature_groups} feature groups")

    def shape_scatter(self, op):
        return [op.operands[0].shape]

    def shape_dynamic_conv(self, op):
        op.attrs["padding"] = self.require_sym(op, op.operands[2], "padding")
        op.name, op.operands = "convolution", op.operands[:2]
        return self.shape_convolution(op)

    def shape_select_and_scatter(self, op):
        return [op.operands[0].shape]

    def shape_sort(self, op):
        return [x.shape for x in op.operands]

    def shape_reverse(self, op):
        return [op.operands[0].shape]

    def shape_select(self, op):
        pred, on_true, on_false = op.operands
        if on_true.rank != on_false.rank:
            raise self.fail(op, f"on_true has rank {on_true.rank} and on_false rank "
                                f"{on_false.rank}")
        self.same_shape(op, on_true.shape, on_false.shape, "on_true against on_false")
        self.same_shape_or_scalar(op, pred, on_true.shape, "the predicate against on_true")
        return [on_true.shape]

    def shape_clamp(self, op):
        lo, x, hi = op.operands
        self.same_shape_or_scalar(op, lo, x.shape, "min against the operand")
        self.same_shape_or_scalar(op, hi, x.shape, "max against the operand")
        return [x.shape]

    def shape_shape_assertion(self, op):
        return []

    def shape_bitcast_convert(self, op):
        """Same bit width: elementwise. Narrower result: one more trailing axis of
        wide/narrow elements. Wider result: the operand's trailing axis, of wide/narrow
        elements, is consumed (i1 counts as one bit, as the StableHLO spec says)."""
        x, r = op.operands[0], op.results[0]
        wide, narrow = bit_width(x.dtype), bit_width(r.dtype)
        if wide == narrow:
            return [self.elementwise(op)]
        if wide > narrow:
            return [x.shape + (wide // narrow,)]
        per = narrow // wide
        why = (f"{x.dtype} -> {r.dtype}: the operand's last axis must have {per} elements "
               f"({narrow} bits from {wide}-bit elements)")
        if x.rank == 0 or symbolic.prove_eq(x.shape[-1], per) is False:
            raise self.fail(op, why)
        if symbolic.prove_eq(x.shape[-1], per) is not True:
            self.prog.checks.append(Check(x.shape[-1], "==", per,
                                          f"stablehlo.bitcast_convert at {op.loc}: {why}"))
        return [x.shape[:-1]]

    def shape_rng_bit_generator(self, op):
        return [op.operands[0].shape, self.from_type(op, op.results[1])]

    def shape_dynamic_rng_bit_generator(self, op):
        return [op.operands[0].shape, self.require_sym(op, op.operands[1], "output_shape")]




def _dist(a: Dim, b: Dim) -> Dim:
    """|a - b| as a dimension expression."""
    return symbolic.dmax(a - b, b - a)


def propagate_shapes(prog: Program) -> Program:
    """Pass: give every value a symbolic shape; track symbolic integer contents."""
    prop = _Propagator(prog)
    prop.run()
    prog.outputs = [dataclasses.replace(spec, shape=v.shape)
                    for spec, v in zip(prog.outputs, prog.body.results)]
    return prog
