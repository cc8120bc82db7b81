"""Control flow (stablehlo.while / if / case) compiled into the host launcher: each model of
tests/control_models.py under jdisc.jit vs jax.jit at several values of every dynamic dim, one
compile for all of them; the loop bodies alone; hand-written StableHLO for `if` (jax never
emits it) and out-of-range `case` indices; and the errors for carried values whose shape would
change from one iteration to the next.

The fast tier (`-k "export or reference or trace or covered or valid"`) needs no C compiler: it
checks the JAX side only (every model runs under jax.jit and exports at symbolic shapes with the
expected control ops; the test data exercise what the tests claim: early stops, every branch,
zero trips...; the hand-written modules verify).

Tolerances (bound on max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_RECURRENT = 2e-5 for the scans and nested loops with GEMMs (LSTM, GRU, nested, decoder).
  Per step the two sides differ by a few ulp (f32 ulp ~ 6e-8 at 1.0): GEMMs of K <= 96 terms
  summed in another order (~sqrt(K) ulp ~ 6e-7) and jdisc's own exp/tanh (<= 2 ulp) against
  XLA's. The recurrences are contractive (tanh/sigmoid gates, a forget gate < 1), so errors
  do not compound: measured against float64, jax.jit's f32 output is within 5e-7 of the scale
  for T up to 256 (LSTM 3.1e-7, GRU 4.7e-7, nested 3.7e-7). Two f32 implementations are then
  within ~1e-6 of each other; 2e-5 leaves 20x for a different but sound evaluation order.
* TOL_ELEMENTWISE = 2e-6 for loops of elementwise math (cos in a contraction of Lipschitz
  constant 0.75, reverse cumulative sums with decay 0.5, sums of N rows): rounding differences
  stay within ~1 / (1 - 0.75) = 4 ulp-sized steps, and measured f32-vs-f64 errors are <= 6e-8.
* TOL_SOLVER = 1e-5 for the Jacobi and CG solvers once their iteration counts agree (which the
  tests require exactly; the data are chosen so that the stopping test is not a near tie): the
  matrices have condition number <= (m + 1) / (m - 1) = 21 for diagonal dominance margin
  m = 1.1, and f32-vs-f64 differences measured at equal iteration counts are <= 7e-8.
* 0 (exact) for integer outputs (token ids, lengths, trip counts) and for loops whose float
  arithmetic is exact (halving by 0.5).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jdisc
import control_models as C
from jdisc.dynamic_passes.importer import mlir_import
from jdisc.export.exporter import export_function
from jdisc.export.specs import leaf_specs, normalize_dynamic_axes, positional_names
from conftest import assert_close, differential, to_ir

TOL_RECURRENT = 2e-5
TOL_ELEMENTWISE = 2e-6
TOL_SOLVER = 1e-5

# (T, B): dims of 1, small primes, and a few larger ones for each dim
SHAPES_TB = [(1, 1), (2, 3), (3, 7), (7, 2), (64, 1), (129, 2), (5, 64)]


def normal(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


# ------------------------------------------------------------------------------- test data

def rnn_args(params, d):
    return lambda rng: [(params, normal(rng, t, b, d)) for t, b in SHAPES_TB]


def decode_args(rng):
    """(B, P, L) with each dim at 1, a small prime and a larger value: stop signals alternate
    +3 (ends after a few tokens) and -3 (runs to L); the last batch stops early everywhere (the
    loop exits before L). Few shapes: XLA takes ~1.3 s of CPU to compile each."""
    params = C.decoder_params()
    sets = [(params, C.decoder_prompt(b, p, rng), np.zeros(n, np.float32))
            for b, p, n in [(1, 1, 1), (2, 3, 7), (64, 13, 5), (7, 2, 64)]]
    sets.append((params, C.decoder_prompt(3, 4, rng, stop_signals=[3.0, 2.0, 3.0]),
                 np.zeros(64, np.float32)))
    return sets


def solver_args(name, rng):
    """(a, b, tol) per N in 1, 2, 3, 7, 64, 129, with tol chosen so that jax.jit stops after the
    same number of iterations for 0.9 tol and 1.1 tol: rounding differences between jdisc and
    XLA (~1e-6 of |b| in the residual) cannot move the stop by an iteration."""
    fn = jax.jit(C.MODELS[name])
    sets = []
    for n in (1, 2, 3, 7, 64, 129):
        a = C.diagonally_dominant(n, rng, margin=1.1, symmetric=name == "conjugate_gradient")
        b = normal(rng, n)
        for tol in (1e-3, 5e-4, 2e-4, 1e-4, 5e-5):
            counts = {int(fn(a, b, np.float32(tol * f))[1]) for f in (0.9, 1.0, 1.1)}
            if len(counts) == 1:
                break
        else:
            raise AssertionError(f"{name} N={n}: no tolerance away from a near tie")
        sets.append((a, b, np.float32(tol)))
    return sets


def cond_switch_args(rng):
    """x [B, 16] with x.sum() clearly positive or negative (the first cond), x[:, 0] = c for an
    integer c (the switch index, exact: the mean of equal values), and B on both sides of 4
    (the last cond)."""
    params = C.branch_params()
    sets = []
    for b, c, sign in [(1, 0, 1), (2, 1, -1), (3, 2, 1), (7, -2, -1), (64, 5, 1), (5, 1, 1),
                       (7, 0, -1), (2, 2, -1)]:
        x = sign * np.abs(normal(rng, b, 16)) + sign * 0.5
        x[:, 0] = c
        sets.append((params, x))
    return sets


def tiny_args(name, rng):
    """Argument tuples for the tiny loop models."""
    if name == "fori_dim_trips":
        return [(normal(rng, n, m),) for n, m in [(1, 1), (2, 3), (7, 5), (64, 2), (3, 129)]]
    if name in ("zero_trip", "zero_trip_while", "one_trip"):
        return [(normal(rng, n),) for n in (1, 2, 7, 129)]
    if name == "many_trips":
        return [(normal(rng, n),) for n in (1, 3, 64)]
    if name == "count_loop":
        return [(normal(rng, n), np.int32(k))
                for n, k in [(1, 0), (3, 1), (7, 5000), (64, 2), (2, 0), (129, 37)]]
    if name == "halve_until_small":       # scales from "already small" (no trip) to 1e6
        return [(normal(rng, b, s, scale=sc),)
                for b, s, sc in [(1, 1, 0.1), (2, 3, 10.0), (7, 5, 1e6), (3, 129, 100.0)]]
    if name == "cond_in_while":
        return [(rng.integers(1, 60, n).astype(np.int32),) for n in (1, 2, 3, 7, 64)]
    if name == "while_in_cond":
        return [(sign * np.abs(normal(rng, b, s, scale=10.0)) + sign,)
                for b, s, sign in [(1, 1, 1), (2, 3, -1), (7, 5, 1), (3, 64, -1), (64, 2, 1)]]
    if name == "reverse_cumulative":
        return [(normal(rng, t, n),) for t, n in SHAPES_TB]
    raise KeyError(name)


TINY = ["fori_dim_trips", "zero_trip", "zero_trip_while", "one_trip", "many_trips",
        "count_loop", "halve_until_small", "cond_in_while", "while_in_cond",
        "reverse_cumulative"]
TINY_TOL = {"halve_until_small": 0, "cond_in_while": 0, "while_in_cond": 0}


def all_args(name, rng):
    """Argument tuples for any model of control_models.MODELS."""
    if name in ("solver", "conjugate_gradient"):
        return solver_args(name, rng)
    return cheap_args(name, rng)


def cheap_args(name, rng):
    """Like all_args, but solvers get a fixed tolerance (no reference runs to choose one)."""
    if name in ("solver", "conjugate_gradient"):
        a = C.diagonally_dominant(5, rng, symmetric=name == "conjugate_gradient")
        return [(a, normal(rng, 5), np.float32(1e-3))]
    if name in ("lstm", "gru"):
        return rnn_args(C.lstm_params() if name == "lstm" else C.gru_params(), 32)(rng)
    if name.startswith("nested"):
        return rnn_args(C.nested_params(), 16)(rng)
    if name == "greedy_decode":
        return decode_args(rng)
    if name == "cond_switch":
        return cond_switch_args(rng)
    if name == "tree_search":
        return tree_search_args(rng)
    return tiny_args(name, rng)


def tree_search_args(rng):
    """(B, N) with no tree, one node (no simulation), two, small primes and 33 nodes; one run
    stops after 3 of its 12 possible simulations (the trip count is data)."""
    return [C.tree_search_inputs(b, n, rng, sims=s)
            for b, n, s in [(0, 5, None), (1, 1, None), (1, 2, None), (3, 7, None),
                            (2, 33, None), (5, 13, 3)]]


# ------------------------------------------------------------------------------- JAX side (fast)

# the control ops each model's StableHLO must contain (after jdisc's MLIR clean-up), with counts
EXPECTED_CONTROL = {
    "lstm": {"while": 1}, "gru": {"while": 1}, "reverse_cumulative": {"while": 1},
    "greedy_decode": {"while": 1}, "solver": {"while": 1}, "conjugate_gradient": {"while": 1},
    "cond_switch": {"case": 3}, "nested": {"while": 2}, "nested_data_trips": {"while": 2},
    "nested_dim_trips": {"while": 2}, "fori_dim_trips": {"while": 1}, "zero_trip": {"while": 1},
    "zero_trip_while": {"while": 1}, "one_trip": {"while": 1}, "many_trips": {"while": 1},
    "count_loop": {"while": 1}, "halve_until_small": {"while": 1},
    "cond_in_while": {"while": 1, "case": 1}, "while_in_cond": {"while": 1, "case": 1},
    "tree_search": {"while": 3},
}


def exported_text(fn, args, dynamic_axes) -> str:
    """The StableHLO jdisc compiles for fn at these args (symbolic dims), after its MLIR
    clean-up, as text."""
    names = positional_names(fn, len(args))
    leaves, tree = leaf_specs(args, normalize_dynamic_axes(dynamic_axes, names), names)
    exp = export_function(fn, leaves, tree, name=fn.__name__)
    assert any(isinstance(d, str) for shape in exp.in_shapes for d in shape)
    ctx = mlir_import.make_context()
    module = mlir_import.parse_module(exp.module, ctx)
    mlir_import.run_mlir_pipeline(module)
    return str(module)


def test_every_model_is_covered():
    assert set(EXPECTED_CONTROL) == set(C.MODELS) == set(C.DYNAMIC_AXES)


@pytest.mark.parametrize("name", sorted(C.MODELS))
def test_export_has_control_ops(name, rng):
    args = cheap_args(name, rng)[-1]
    text = exported_text(C.MODELS[name], args, C.DYNAMIC_AXES[name])
    found = {op: len(re.findall(rf"\bstablehlo\.{op}\b", text)) for op in ("while", "if", "case")}
    assert {op: n for op, n in found.items() if n} == EXPECTED_CONTROL[name]
    targets = set(re.findall(r"stablehlo\.custom_call @(\w+)", text))
    assert targets <= {"shape_assertion"}, targets


def test_decode_reference_stops_early_and_runs_to_max(rng):
    """On the JAX side: with these data some sequences end at END, others run to L, the last
    batch leaves the loop before L, and no greedy choice is a near tie (a gap >= 1e-3 between
    the top two logits, which are O(10); two f32 implementations differ by ~1e-4 there)."""
    ref = jax.jit(C.greedy_decode)
    early = full = 0
    arg_sets = decode_args(rng)
    for params, prompt, marker in arg_sets:
        tokens, lengths, steps, margin = map(np.asarray, ref(params, prompt, marker))
        n = marker.shape[0]
        assert tokens.shape == (prompt.shape[0], n) and (lengths >= 1).all()
        assert steps == lengths.max() <= n
        assert (margin >= 1e-3).all(), margin
        for row, k in zip(tokens, lengths):
            assert (row[:k] != C.PAD).all() and (row[k:] == C.PAD).all()
            assert (row[:k - 1] != C.END).all()
            if k < n:
                assert row[k - 1] == C.END
        if n > 1:
            early += int((lengths < n).sum())
            full += int((lengths == n).sum())
    assert early >= 5 and full >= 5, (early, full)
    all_stop = arg_sets[-1]                     # leaves the loop before L
    assert int(ref(*all_stop)[2]) < all_stop[2].shape[0]


@pytest.mark.parametrize("name", ["solver", "conjugate_gradient"])
def test_solver_reference_converges(name, rng):
    ref = jax.jit(C.MODELS[name])
    for a, b, tol in solver_args(name, rng):
        x, k, res = ref(a, b, tol)
        assert 1 <= int(k) < 1000 and float(res) <= tol
        exact = np.linalg.solve(a.astype(np.float64), b)
        assert np.abs(np.asarray(x) - exact).max() <= 10 * tol * np.abs(exact).max()


def test_cond_switch_reference_takes_every_branch(rng):
    ref = jax.jit(C.cond_switch)
    seen = set()
    for params, x in cond_switch_args(rng):
        assert abs(float(x.sum())) > 1.0                    # the cond is far from a tie
        idx = int(ref(params, x)[1])
        seen.add((x.sum() > 0, min(max(idx, 0), 2), x.shape[0] > 4, idx != min(max(idx, 0), 2)))
    assert {s[0] for s in seen} == {True, False}
    assert {s[1] for s in seen} == {0, 1, 2}
    assert {s[2] for s in seen} == {True, False}
    assert True in {s[3] for s in seen}                     # an index switch must clamp


def test_tiny_references(rng):
    """What the tiny models' data exercise, on the JAX side."""
    zt, ztw, ot = jax.jit(C.zero_trip), jax.jit(C.zero_trip_while), jax.jit(C.one_trip)
    for (x,) in tiny_args("zero_trip", rng):
        np.testing.assert_array_equal(zt(x), x)
        np.testing.assert_array_equal(ztw(x)[1], x)
        np.testing.assert_allclose(ot(x), C.contract(x) + 1.0, rtol=1e-6)
    trips = [int(jax.jit(C.count_loop)(x, n)[1]) for x, n in tiny_args("count_loop", rng)]
    assert trips == [0, 1, 5000, 2, 0, 37]
    halvings = [int(jax.jit(C.halve_until_small)(x)[1]) for (x,) in
                tiny_args("halve_until_small", rng)]
    assert halvings[0] == 0 and max(halvings) >= 20
    for (x,) in tiny_args("fori_dim_trips", rng):
        acc, buf = jax.jit(C.fori_dim_trips)(x)
        w = np.arange(1, x.shape[0] + 1, dtype=np.float64)[:, None]
        np.testing.assert_allclose(acc, (w * x).sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(buf, np.max(np.cumsum(w * x, 0), axis=1), rtol=1e-5,
                                   atol=1e-5)
    steps = [jax.jit(C.cond_in_while)(v) for (v,) in tiny_args("cond_in_while", rng)]
    assert all((np.asarray(v) == 1).all() for v, _, _ in steps)
    assert all(0 < int(n_odd) < int(k) for _, k, n_odd in steps[1:])
    signs = {bool(x.sum() > 0) for (x,) in tiny_args("while_in_cond", rng)}
    assert signs == {True, False}


@pytest.mark.parametrize("fn", [
    lambda x: lax.while_loop(lambda v: v[0] < 100.0, lambda v: jnp.concatenate([v, v]), x),
    lambda x: lax.fori_loop(0, 3, lambda i, v: jnp.concatenate([v, v[:1]]), x),
    lambda x: lax.scan(lambda c, r: (c[:-1], r), x, x)[0],
], ids=["while_doubles", "fori_grows_by_one", "scan_shrinks"])
def test_carry_shape_change_rejects_at_trace(fn):
    """A JAX loop whose carry changes shape cannot be traced: jdisc says so as a JdiscError,
    naming both shapes (e.g. float32[N] and float32[N + 1])."""
    jf = jdisc.jit(fn, dynamic_axes=({0: "N"},))
    with pytest.raises(jdisc.JdiscError, match=r"(?s)could not trace.*float32\[N\]"):
        jf(np.ones(5, np.float32))


# ------------------------------------------------------------------------------- loop bodies

def _decode_one(params, prompt, marker, stop):
    return C.decode_body(params, stop, C.decode_state(params, prompt, marker.shape[0]))


# name: (fn, dynamic_axes, make(rng, n) -> args, tolerance)
BODIES = {
    "lstm_cell": (lambda p, h, c, xp: C.lstm_cell(p, (h, c), xp),
                  (None, {0: "B"}, {0: "B"}, {0: "B"}),
                  lambda rng, b: (C.lstm_params(), normal(rng, b, 64), normal(rng, b, 64),
                                  normal(rng, b, 256)), TOL_RECURRENT),
    "gru_cell": (C.gru_cell, (None, {0: "B"}, {0: "B"}),
                 lambda rng, b: (C.gru_params(), normal(rng, b, 64), normal(rng, b, 32)),
                 TOL_RECURRENT),
    "decode_body": (_decode_one, (None, {0: "B", 1: "P"}, {0: "L"}, {0: "B"}),
                    lambda rng, b: (C.decoder_params(), C.decoder_prompt(b, b + 1, rng),
                                    np.zeros(2 * b + 1, np.float32), normal(rng, b)),
                    TOL_RECURRENT),
    "jacobi_sweep": (lambda a, b, x: C.jacobi_sweep(a, *C.jacobi_split(a), b, x),
                     ({0: "N", 1: "N"}, {0: "N"}, {0: "N"}),
                     lambda rng, n: (C.diagonally_dominant(n, rng), normal(rng, n),
                                     normal(rng, n)), TOL_SOLVER),
    "cg_step": (lambda a, x, r, p, rs: C.cg_step(a, (x, r, p, rs, jnp.int32(0))),
                ({0: "N", 1: "N"}, {0: "N"}, {0: "N"}, {0: "N"}, None),
                lambda rng, n: (C.diagonally_dominant(n, rng, symmetric=True), normal(rng, n),
                                normal(rng, n), normal(rng, n), np.float32(n)), TOL_SOLVER),
    "branches": (lambda p, x: [C.subnet(p, i, x) for i in range(5)] + [C.switch_index(x)],
                 (None, {0: "B"}), lambda rng, b: (C.branch_params(), normal(rng, b, 16)),
                 TOL_RECURRENT),
    "nested_inner": (C.nested_inner, (None, {0: "B"}, {0: "B"}),
                     lambda rng, b: (C.nested_params(), normal(rng, b, 16), normal(rng, b, 16)),
                     TOL_RECURRENT),
    "collatz_moves": (lambda v: (C.collatz_odd_move(v), C.collatz_even_move(v)), ({0: "N"},),
                      lambda rng, n: (rng.integers(1, 60, n).astype(np.int32),), 0),
    "contract": (C.contract, ({0: "N"},), lambda rng, n: (normal(rng, n),), TOL_ELEMENTWISE),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_body_without_control_flow(name, rng):
    """Each loop body alone (no control flow) under jdisc at a dynamic size: when one of these
    fails, the models that use it fail for a reason other than control flow."""
    fn, axes, make, tol = BODIES[name]
    differential(fn, axes, [make(rng, n) for n in (1, 2, 7)], tol, what=f"body {name}")


# ------------------------------------------------------------------------------- differential

@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_rnn(name, rng):
    differential(C.MODELS[name], C.DYNAMIC_AXES[name], all_args(name, rng), TOL_RECURRENT)


@pytest.mark.parametrize("name", ["nested", "nested_data_trips", "nested_dim_trips"])
def test_nested(name, rng):
    differential(C.MODELS[name], C.DYNAMIC_AXES[name], all_args(name, rng), TOL_RECURRENT)


def test_greedy_decode(rng):
    # token ids, lengths and step counts compare exactly (assert_close on integers); the margins
    # with TOL_RECURRENT. The reference's properties are checked in
    # test_decode_reference_stops_early_and_runs_to_max.
    differential(C.greedy_decode, C.DYNAMIC_AXES["greedy_decode"], decode_args(rng),
                 TOL_RECURRENT)


@pytest.mark.parametrize("name", ["solver", "conjugate_gradient"])
def test_solver(name, rng):
    # iteration counts compare exactly (int32), solutions and residuals with TOL_SOLVER
    differential(C.MODELS[name], C.DYNAMIC_AXES[name], solver_args(name, rng), TOL_SOLVER)


def test_tree_search(rng):
    # the children compare exactly (int32); visits (whole numbers) and value sums (the same
    # leaf values added in the same order on both sides) with TOL_ELEMENTWISE. Every step's
    # gathers and scatters land at nodes the previous steps chose, so one wrong index changes
    # the tree.
    differential(C.tree_search, C.DYNAMIC_AXES["tree_search"], tree_search_args(rng),
                 TOL_ELEMENTWISE)


# loops whose body changes a carried buffer through a scatter or an inner loop: in place where
# nothing reads the old value later (control_flow.confirm_in_place), two buffers otherwise
def _scatter_then_read_old(x, i):
    return lax.fori_loop(0, 5, lambda k, c: (c[0].at[i + k].add(1.0), c[1] + c[0].sum()),
                         (x, jnp.float32(0)))


def _scatter_of_own_gather(x, i):
    return lax.fori_loop(0, 7, lambda k, v: v.at[(i + k) % v.shape[0]].set(v[i] * 2.0 + k), x)


def _scatter_into_result_and_old(x, i):
    return lax.fori_loop(0, 3, lambda k, c: (c[0].at[i].add(c[1][i]), c[0] * 0.5),
                         (x, x))


def _inner_loop_then_read_old(x, n):
    def body(k, c):
        v, acc = c
        w = lax.fori_loop(0, n, lambda j, u: u.at[(j + k) % u.shape[0]].add(1.0), v)
        return w, acc + (v * w).sum()     # the old v, read after the inner loop
    return lax.fori_loop(0, 4, body, (x, jnp.float32(0)))


def _inner_loop_in_place(x, n):
    def body(k, v):
        return lax.fori_loop(0, n, lambda j, u: u.at[(j * 3 + k) % u.shape[0]].multiply(1.5), v)
    return lax.fori_loop(0, 4, body, x)


IN_PLACE_CASES = {   # name: (function, whether the outer loop keeps the vector's buffer single)
    "scatter_then_read_old": (_scatter_then_read_old, False),
    "scatter_of_own_gather": (_scatter_of_own_gather, True),
    "scatter_into_result_and_old": (_scatter_into_result_and_old, None),   # by kernel order
    "inner_loop_then_read_old": (_inner_loop_then_read_old, False),
    "inner_loop_in_place": (_inner_loop_in_place, True),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_CASES))
def test_carried_buffers_updated_in_place(name, rng):
    fn, single = IN_PLACE_CASES[name]
    second = np.int32(3) if name.startswith("inner") else np.int32(1)
    differential(fn, ({0: "N"}, None), [(normal(rng, n), second) for n in (2, 3, 7, 64)],
                 TOL_ELEMENTWISE)
    prog = to_ir(fn, ({0: "N"}, None), normal(rng, 5), second)
    (loop,) = [k.root for k in prog.kernels if k.kind == "while"]
    # the vectors are the loop's carried values of rank 1 (the rest: counters, sums)
    assert single is None or \
        any(loop.results[i].rank == 1 for i in loop.attrs["in_place"]) == single


def test_tree_search_updates_its_trees_in_place(rng):
    prog = to_ir(C.tree_search, C.DYNAMIC_AXES["tree_search"],
                 *C.tree_search_inputs(2, 9, rng))
    (loop,) = [k.root for k in prog.kernels if k.kind == "while"]
    assert loop.attrs["in_place"] == (1, 2, 3, 4)    # children, parents, visits, value sums
    inner = [k.root for k in loop.programs[1].kernels if k.kind == "while"]
    back_up = [w for w in inner if len(w.attrs["in_place"]) == 2]
    assert len(back_up) == 1        # visits and value sums, through masked scatters


def test_cond_switch(rng):
    differential(C.cond_switch, C.DYNAMIC_AXES["cond_switch"], cond_switch_args(rng),
                 TOL_RECURRENT)


@pytest.mark.parametrize("name", TINY)
def test_tiny_loops(name, rng):
    differential(C.MODELS[name], C.DYNAMIC_AXES[name], tiny_args(name, rng),
                 TINY_TOL.get(name, TOL_ELEMENTWISE))


# ------------------------------------------------------------------------------- hand-written

def _broadcast_1d(const: str, like: str, name: str) -> str:
    """StableHLO lines broadcasting scalar `const` to the (dynamic) shape of 1-d `like`."""
    return (f"%{name}_d = stablehlo.get_dimension_size {like}, dim = 0 : (tensor<?xf32>) -> "
            f"tensor<i32>\n"
            f"      %{name}_s = stablehlo.reshape %{name}_d : (tensor<i32>) -> tensor<1xi32>\n"
            f"      %{name} = stablehlo.dynamic_broadcast_in_dim {const}, %{name}_s, dims = [] : "
            f"(tensor<f32>, tensor<1xi32>) -> tensor<?xf32>")


WHILE_HLO = f"""
func.func @main(%x: tensor<?xf32>, %n: tensor<i32>) -> (tensor<?xf32>, tensor<i32>) {{
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %half = stablehlo.constant dense<0.5> : tensor<f32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<?xf32>
    cond {{
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      {_broadcast_1d("%half", "%v", "hb")}
      {_broadcast_1d("%one", "%v", "ob")}
      %m = stablehlo.multiply %v, %hb : tensor<?xf32>
      %a = stablehlo.add %m, %ob : tensor<?xf32>
      stablehlo.return %i1, %a : tensor<i32>, tensor<?xf32>
    }}
  return %r#1, %r#0 : tensor<?xf32>, tensor<i32>
}}
"""

IF_HLO = """
func.func @main(%x: tensor<?x?xf32>, %p: tensor<i1>) -> tensor<?x?xf32> {
  %r = "stablehlo.if"(%p) ({
    %e = stablehlo.exponential %x : tensor<?x?xf32>
    stablehlo.return %e : tensor<?x?xf32>
  }, {
    %n = stablehlo.negate %x : tensor<?x?xf32>
    stablehlo.return %n : tensor<?x?xf32>
  }) : (tensor<i1>) -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}
"""

# StableHLO's case: an index outside 0 .. N-1 runs the last branch
CASE_HLO = """
func.func @main(%x: tensor<?xf32>, %k: tensor<i32>) -> tensor<?xf32> {
  %r = "stablehlo.case"(%k) ({
    %a = stablehlo.add %x, %x : tensor<?xf32>
    stablehlo.return %a : tensor<?xf32>
  }, {
    %m = stablehlo.multiply %x, %x : tensor<?xf32>
    stablehlo.return %m : tensor<?xf32>
  }, {
    %n = stablehlo.negate %x : tensor<?xf32>
    stablehlo.return %n : tensor<?xf32>
  }) : (tensor<i32>) -> tensor<?xf32>
  return %r : tensor<?xf32>
}
"""

# Valid StableHLO whose carried value doubles in size every iteration (its type, tensor<?xf32>,
# stays the same): jdisc needs loop-invariant shapes and must say so.
GROWING_WHILE_HLO = """
func.func @main(%x: tensor<?xf32>, %n: tensor<i32>) -> tensor<?xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<?xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      %w = stablehlo.concatenate %v, %v, dim = 0 : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
      stablehlo.return %i1, %w : tensor<i32>, tensor<?xf32>
    }
  return %r#1 : tensor<?xf32>
}
"""

# Valid StableHLO whose result size depends on the branch taken
IF_BRANCH_SHAPES_DIFFER_HLO = """
func.func @main(%x: tensor<?xf32>, %p: tensor<i1>) -> tensor<?xf32> {
  %r = "stablehlo.if"(%p) ({
    stablehlo.return %x : tensor<?xf32>
  }, {
    %w = stablehlo.concatenate %x, %x, dim = 0 : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
    stablehlo.return %w : tensor<?xf32>
  }) : (tensor<i1>) -> tensor<?xf32>
  return %r : tensor<?xf32>
}
"""


@pytest.mark.parametrize("text", [WHILE_HLO, IF_HLO, CASE_HLO, GROWING_WHILE_HLO,
                                  IF_BRANCH_SHAPES_DIFFER_HLO],
                         ids=["while", "if", "case", "growing_while", "if_shapes_differ"])
def test_hand_written_hlo_is_valid(text):
    """Fast tier: the modules below parse and verify, and survive jdisc's MLIR clean-up."""
    ctx = mlir_import.make_context()
    module = mlir_import.parse_module(text, ctx)
    mlir_import.run_mlir_pipeline(module)
    assert re.search(r"stablehlo\.(while|if|case)", str(module))


def test_hand_written_while(rng):
    f = jdisc.compile_stablehlo(WHILE_HLO)
    for size, n in [(1, 0), (3, 1), (7, 40), (129, 3)]:
        x = normal(rng, size)
        want = x.astype(np.float64)
        for _ in range(n):
            want = want * 0.5 + 1.0
        got, trips = f(x, np.int32(n))
        assert_close(got, want.astype(np.float32), TOL_ELEMENTWISE, f"while at {size}, {n}")
        assert int(trips) == n


def test_hand_written_if(rng):
    f = jdisc.compile_stablehlo(IF_HLO)
    for shape, p in [((1, 1), True), ((2, 3), False), ((7, 64), True), ((5, 1), False)]:
        x = normal(rng, *shape)
        (got,) = f(x, np.bool_(p))
        assert_close(got, np.exp(x) if p else -x, TOL_ELEMENTWISE, f"if at {shape}, {p}")


def test_hand_written_case_clamps_like_stablehlo(rng):
    f = jdisc.compile_stablehlo(CASE_HLO)
    branches = [lambda v: v + v, lambda v: v * v, lambda v: -v]
    for size, k in [(1, 0), (2, 1), (3, 2), (7, -1), (64, 3), (5, 100)]:
        x = normal(rng, size)
        (got,) = f(x, np.int32(k))
        want = branches[k if 0 <= k < 3 else 2](x)
        assert_close(got, want, 0, f"case at {size}, index {k}")


@pytest.mark.parametrize("text", [GROWING_WHILE_HLO, IF_BRANCH_SHAPES_DIFFER_HLO],
                         ids=["growing_while", "if_shapes_differ"])
def test_shape_changing_control_flow_is_a_clear_error(text):
    """A carried value (or an `if` result) whose size is not the same symbolic expression on
    every path: jdisc refuses, at compile time or (where the sizes could agree, e.g. d == 2*d
    at d = 0) when the launcher checks the shapes, with a JdiscError that names the op and says
    why (a loop-carried value or branch result whose shape changes), not "not supported"."""
    with pytest.raises(jdisc.JdiscError) as info:
        jdisc.compile_stablehlo(text)(np.arange(3, dtype=np.float32), np.int32(2)
                                      if "while" in text else np.bool_(False))
    msg = str(info.value)
    assert re.search(r"stablehlo\.(while|if)", msg), msg
    assert re.search(r"(?i)carried|invariant|branch", msg), msg
    assert "with regions" not in msg and "not supported yet" not in msg, msg


def test_scan_over_an_empty_axis_runs_no_iteration():
    # the body's shape checks (its dynamic_slice needs 1 <= T) are the body's own: checked
    # when it runs, so T == 0 is a zero-trip loop, as under jax.jit, not a refused shape
    def rnn(w, xs):
        def step(h, x):
            h = jnp.tanh(x @ w + h)
            return h, 2 * h
        return lax.scan(step, jnp.zeros((xs.shape[1], w.shape[1]), xs.dtype), xs)

    w = np.eye(8, dtype=np.float32) * 0.5
    f = jdisc.jit(rnn, dynamic_axes=(None, {0: "T", 1: "B"}))
    for t, b in ((0, 2), (1, 1), (4, 3), (0, 5)):
        xs = np.random.default_rng(t).standard_normal((t, b, 8)).astype(np.float32)
        jax.tree_util.tree_map(lambda g, r: assert_close(g, r, 2e-6), f(w, xs),
                               jax.jit(rnn)(w, xs))
    assert f.stats()["compiles"] == 1
