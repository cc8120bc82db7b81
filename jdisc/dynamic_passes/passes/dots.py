"""dot_general as a (batched) GEMM: layout analysis and the pass that makes layouts fit.

A BLAS GEMM reads each operand as [batch, rows, cols] in row-major order, optionally
transposed. An operand fits when its batch dims lead (in order) and its free and contracting dims
each form one contiguous block; then transposes fold into the GEMM's layout flags. An operand
that does not fit gets an explicit `transpose` op in front of it, to whichever of the two GEMM
layouts (plain or transposed) keeps more of its trailing dims in place: that transpose copies
runs of them whole. An attention's keys [T, heads, d] for the scores' GEMM become [heads, T,
d] (runs of d), not [heads, d, T], which moves every element by itself and took 1.8-5x as
long at T = 101 to 1000 (CHANGELOG.md, 2026-12-06).
"""

from __future__ import annotations

import dataclasses

from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.ir.program import Op, Program, Value


@dataclasses.dataclass(frozen=True)
class GemmLayout:
    batch: tuple[Dim, ...]
    m: tuple[Dim, ...]     # lhs free dims
    n: tuple[Dim, ...]     # rhs free dims
    k: tuple[Dim, ...]     # contracting dims
    trans_a: bool          # lhs stored [batch, K, M]
    trans_b: bool          # rhs stored [batch, N, K]


def _free(rank: int, batch, contract) -> list[int]:
    return [i for i in range(rank) if i not in batch and i not in contract]


def _operand_orders(rank: int, batch, contract, lhs: bool) -> tuple[list[int], list[int]]:
    """(untransposed order, transposed order) of one operand's dims for the GEMM."""
    free = _free(rank, batch, contract)
    plain = list(batch) + (free + list(contract) if lhs else list(contract) + free)
    flipped = list(batch) + (list(contract) + free if lhs else free + list(contract))
    return plain, flipped


def _kept_tail(perm: list[int]) -> int:
    """How many trailing dims a transpose by `perm` leaves in place."""
    n = 0
    while n < len(perm) and perm[len(perm) - 1 - n] == len(perm) - 1 - n:
        n += 1
    return n


def _layout_order(plain: list[int], flipped: list[int]) -> list[int]:
    """The order to transpose an operand to: the GEMM layout that keeps more trailing dims
    in place (the plain one on a tie)."""
    return flipped if _kept_tail(flipped) > _kept_tail(plain) else plain


def gemm_layout(op: Op) -> GemmLayout | None:
    """The GEMM view of a dot_general, or None if an operand needs a transpose first."""
    lhs, rhs = op.operands
    dn = op.attrs["dot_dimension_numbers"]
    identity_l, identity_r = list(range(lhs.rank)), list(range(rhs.rank))
    pl, fl = _operand_orders(lhs.rank, dn["lhs_batch"], dn["lhs_contract"], lhs=True)
    pr, fr = _operand_orders(rhs.rank, dn["rhs_batch"], dn["rhs_contract"], lhs=False)
    if identity_l not in (pl, fl) or identity_r not in (pr, fr):
        return None
    return GemmLayout(
        batch=tuple(lhs.shape[i] for i in dn["lhs_batch"]),
        m=tuple(lhs.shape[i] for i in _free(lhs.rank, dn["lhs_batch"], dn["lhs_contract"])),
        n=tuple(rhs.shape[i] for i in _free(rhs.rank, dn["rhs_batch"], dn["rhs_contract"])),
        k=tuple(lhs.shape[i] for i in dn["lhs_contract"]),
        trans_a=identity_l != pl, trans_b=identity_r != pr)


def _transposed(v: Value, perm: list[int], loc: str) -> tuple[Op, Value]:
    out = Value(v.dtype, tuple(v.shape[p] for p in perm))
    return Op("transpose", [v], [out], {"permutation": tuple(perm)}, loc), out


def _fold_result_transposes(prog: Program) -> None:
    """transpose(dot(a, b)) that swaps the lhs-free and rhs-free blocks of a dot without batch
    dims is dot(b, a): (A B)^T = B^T A^T, one GEMM and no transposed copy (jax's weight
    gradients come that way)."""
    users: dict[int, list[Op]] = {}
    for op in prog.body.ops:
        for v in op.operands:
            users.setdefault(v.id, []).append(op)
    results = {v.id for v in prog.body.results}
    for op in prog.body.ops:
        if op.name != "transpose" or op.operands[0].producer is None:
            continue
        dot = op.operands[0].producer
        d = op.operands[0]
        if dot.name != "dot_general" or len(users.get(d.id, [])) != 1 or d.id in results:
            continue
        dn = dot.attrs["dot_dimension_numbers"]
        if dn["lhs_batch"]:
            continue
        lhs, rhs = dot.operands
        n_m = lhs.rank - len(dn["lhs_contract"])
        n_n = rhs.rank - len(dn["rhs_contract"])
        if tuple(op.attrs["permutation"]) != tuple(range(n_m, n_m + n_n)) + tuple(range(n_m)):
            continue
        out = op.results[0]
        dot.operands = [rhs, lhs]
        dot.attrs["dot_dimension_numbers"] = dict(
            dn, lhs_contract=dn["rhs_contract"], rhs_contract=dn["lhs_contract"])
        dot.results = [out]
        out.producer = dot
        op.name, op.operands, op.results = "_dead", [], []
    # the dot keeps its place (its operands come before it); its result is now the transpose's
    prog.body.ops = [op for op in prog.body.ops if op.name != "_dead"]


def canonicalize_dot_layouts(prog: Program) -> Program:
    """Pass: transposed GEMM results folded into the GEMM; then transposes inserted so every
    dot_general is a plain (batched) GEMM."""
    _fold_result_transposes(prog)
    new_ops = []
    for op in prog.body.ops:
        if op.name == "dot_general" and gemm_layout(op) is None:
            lhs, rhs = op.operands
            dn = dict(op.attrs["dot_dimension_numbers"])
            pl, fl = _operand_orders(lhs.rank, dn["lhs_batch"], dn["lhs_contract"], lhs=True)
            pr, fr = _operand_orders(rhs.rank, dn["rhs_batch"], dn["rhs_contract"], lhs=False)
            if list(range(lhs.rank)) not in (pl, fl):
                order = _layout_order(pl, fl)
                t, lhs = _transposed(lhs, order, op.loc)
                new_ops.append(t)
                nb, nc = len(dn["lhs_batch"]), len(dn["lhs_contract"])
                dn["lhs_batch"] = tuple(range(nb))      # [batch, M, K] or [batch, K, M]
                dn["lhs_contract"] = tuple(range(lhs.rank - nc, lhs.rank)) if order is pl \
                    else tuple(range(nb, nb + nc))
            if list(range(rhs.rank)) not in (pr, fr):
                order = _layout_order(pr, fr)
                t, rhs = _transposed(rhs, order, op.loc)
                new_ops.append(t)
                nb, nc = len(dn["rhs_batch"]), len(dn["rhs_contract"])
                dn["rhs_batch"] = tuple(range(nb))      # [batch, K, N] or [batch, N, K]
                dn["rhs_contract"] = tuple(range(nb, nb + nc)) if order is pr \
                    else tuple(range(rhs.rank - nc, rhs.rank))
            op.operands = [lhs, rhs]
            op.attrs["dot_dimension_numbers"] = dn
            assert gemm_layout(op) is not None
        new_ops.append(op)
    prog.body.ops = new_ops
    return prog
