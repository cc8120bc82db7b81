"""Fast tier: shape constraints collected from launcher checks, and sound queries under them."""

import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jdisc.bench import workloads as W
from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.algebra.constraints import ShapeConstraints
from jdisc.dynamic_passes.algebra.dim_text import parse
from jdisc.dynamic_passes.pipeline import analyze_constraints
from conftest import to_ir

pytestmark = pytest.mark.fast   # compiles no jdisc program: IR, plans and algebra only

B, S, X, seq = symbolic.var("B"), symbolic.var("S"), symbolic.var("X"), symbolic.var("seq")


# ---- from real programs -----------------------------------------------------------------------

def test_reshape_element_count_gives_product_equality():
    if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 9):
        pytest.skip("jax < 0.9's export refuses a reshape whose symbolic sizes differ")
    prog = to_ir(lambda x, y: x.reshape(y.shape) + y, ({0: "B", 1: "S"}, {0: "X"}),
                 np.ones((2, 3, 8), np.float32), np.ones((6, 8), np.float32))
    assert any(c.cmp == "==" for c in prog.checks)       # 8*B*S == 8*X, checked at run time
    sc = analyze_constraints(prog).constraints
    assert sc.prove_eq(X, B * S) is True
    assert sc.canonical(X) == B * S
    assert sc.prove_eq(X * 8, S * B * 8) is True
    assert sc.prove_eq(B, S) is None
    assert "X == B*S" in sc.describe()


def test_jax_divisibility_and_bound_constraints():
    prog = to_ir(lambda x: x * 2, ({0: "seq"},), np.ones(16, np.float32),
                 constraints=("seq % 8 == 0", "seq >= 16"))
    sc = ShapeConstraints.from_program(prog)
    assert sc.divisible(seq, 8) is True
    assert sc.divisible(seq, 4) is True
    assert sc.divisible(seq, 16) is None
    assert sc.divisible(2 * seq, 16) is True
    assert sc.divisible(seq + 4, 8) is False
    assert sc.bounds(seq) == (16, math.inf)
    assert sc.prove_ge(seq, 16) is True and sc.prove_lt(seq, 16) is False
    assert sc.prove_eq(seq, 20) is False          # not a multiple of 8
    assert sc.prove_eq(seq, 24) is None
    assert sc.canonical(symbolic.mod(seq, 8)) == 0
    assert sc.canonical(8 * symbolic.floordiv(seq, 8)) == seq
    assert {"seq >= 16", "seq % 8 == 0"} <= set(sc.describe())


def test_user_range_through_a_dynamic_slice():
    prog = to_ir(lambda x: jax.lax.slice(x, (0,), (x.shape[0] // 2,)), ({0: "N"},),
                 np.ones(8, np.float32), constraints=("N <= 100",))
    sc = ShapeConstraints.from_program(prog)
    n = symbolic.var("N")
    assert sc.bounds(n) == (0, 100)
    assert sc.prove_le(n, 100) is True and sc.prove_gt(n, 100) is False
    assert sc.describe() == ShapeConstraints.from_program(prog).describe()   # deterministic


def test_bert_facts():
    wl = W.workloads()["W1"]
    prog = to_ir(wl.fn, wl.dynamic_axes, *wl.make_args(2, 3, np.random.default_rng(0)))
    sc = ShapeConstraints.from_program(prog)
    assert {"B >= 0", "S >= 0"} <= set(sc.describe())
    assert sc.prove_eq(B, S) is None


# ---- facts and queries, directly --------------------------------------------------------------

def test_product_equality_divides_out_constants():
    sc = ShapeConstraints()
    sc.add_equal(B * S * 768, X * 768)
    assert sc.prove_eq(X, B * S) is True
    sc = ShapeConstraints()
    sc.add_equal(768 * X, 2 * B * S)              # X = B*S/384: kept as an equation
    assert sc.prove_eq(384 * X, B * S) is True
    assert sc.divisible(B * S, 384) is True
    assert sc.prove_eq(X, B * S) is None


def test_a_bound_is_used_at_any_positive_multiple():
    # regression (whole-program fuzzer, batch seed 11283783): jax's check `2*a*b - 2 >= 0` (a
    # dynamic_slice of size 2*a*b - 2) is kept divided by its content, `a*b - 1 >= 0`, and the
    # plan checker could not prove the size `2*a*b - 2` itself >= 0 (a scan's stacked output
    # [b, 2*a*b - 2]: "slot 3 has a size ... that may be negative", an internal compiler error)
    a, b = symbolic.var("a"), symbolic.var("b")
    sc = ShapeConstraints(["a", "b"])
    sc.add_check(2 * a * b, ">=", 2)
    assert sc.prove_ge(2 * a * b - 2, 0) is True and sc.prove_ge(6 * a * b - 5, 0) is True
    assert sc.prove_ge(a * b, 1) is True
    assert sc.prove_ge(2 * a * b - 3, 0) is None           # false at a = b = 1: not proven
    assert ShapeConstraints(["a", "b"]).prove_ge(2 * a * b - 2, 0) is None     # no fact


def test_a_bound_whose_first_term_is_negative_is_used_at_any_positive_multiple():
    # regression (whole-program fuzzer, batch seed 6495373): a slice's check `h1 - h0 >= 0`
    # and a tile's size 3*h1 - 3*h0 (a strided VALID convolution, sliced, tiled, summed); the
    # scaled fact was only tried from the fact's first term, here -h0, negative: "slot 3 has a
    # size 64*floordiv(24*_h3 + 63, 64) that may be negative", an internal compiler error
    h0, h1 = symbolic.var("h0"), symbolic.var("h1")
    sc = ShapeConstraints(["h0", "h1"])
    sc.add_check(h1, ">=", h0)
    assert sc.prove_ge(3 * h1 - 3 * h0, 0) is True and sc.prove_ge(5 * h1 - 5 * h0 + 2, 0) is True
    assert sc.prove_ge(3 * h1 - 2 * h0, 0) is True            # h1 >= h0 >= 0
    assert sc.prove_ge(3 * h1 - 3 * h0 - 1, 0) is None        # false at h0 = h1: not proven
    assert ShapeConstraints(["h0", "h1"]).prove_ge(3 * h1 - 3 * h0, 0) is None   # no fact


def test_a_scan_over_a_slice_whose_size_has_a_check():
    # the fuzzer's program, by hand: jdisc compiles it (plans checked: conftest) and agrees
    # with jax.jit at sizes where the slice's size 2*a*b - 2 is 0 and more
    import jax.numpy as jnp
    import jdisc
    from conftest import assert_close

    def f(x):                                       # x: [b, a, 2]
        v = (x + x).reshape(-1)                     # 2*a*b
        s = jax.lax.dynamic_slice_in_dim(v * v, 3, v.shape[0] - 2)
        carry, ys = jax.lax.scan(lambda c, _: (-jnp.clip(c, -16, 16), c), s, x)
        return carry, ys
    jf = jdisc.jit(f, dynamic_axes=({0: "b", 1: "a"},), bridge=False)
    for b_, a_ in ((1, 1), (2, 7), (3, 3), (7, 13)):
        x = np.linspace(-2, 2, 2 * a_ * b_, dtype=np.float32).reshape(b_, a_, 2)
        for got, want in zip(jf(x), jax.jit(f)(x)):
            assert got.shape == want.shape
            assert_close(got, want, 1e-6)
    assert jf.stats()["compiles"] == 1


def test_equality_chains():
    a, b, c = symbolic.var("a"), symbolic.var("b"), symbolic.var("c")
    sc = ShapeConstraints()
    sc.add_equal(a, b)
    sc.add_equal(b, c)
    assert sc.prove_eq(a, c) is True and sc.prove_eq(c, a) is True
    assert sc.canonical(c) == sc.canonical(b) == a       # the first name represents the class
    sc.add_equal(c, a)                                   # redundant: no cycle
    assert sc.describe() == ["b == a", "c == a", "a >= 0"]


def test_representative_is_the_variable_bound_first():
    sc = ShapeConstraints(order=["S", "B"])
    sc.add_equal(B, S)
    assert sc.canonical(B) == S and sc.describe()[0] == "B == S"


def test_substitution_carries_bounds_and_divisibility():
    sc = ShapeConstraints()
    sc.add_bound(X, lo=3, hi=9)
    sc.add_divisible(X, 4)
    sc.add_equal(X, B + 1)
    assert sc.canonical(X) == B + 1 and sc.bounds(B) == (2, 8)
    assert sc.divisible(B + 1, 4) is True


def test_divisibility_of_monomials():
    v = symbolic.var("v")
    sc = ShapeConstraints()
    sc.add_divisible(v, 2)
    assert sc.divisible(v * 4, 8) is True
    assert sc.divisible(v * 4 + 2, 8) is False
    assert sc.divisible(v * 3, 4) is None
    assert sc.prove_eq(2 * B, 2 * S + 1) is False  # parity, with no facts at all


def test_broadcast_disjunction_is_not_an_equality():
    x, o = symbolic.var("x"), symbolic.var("o")
    sc = ShapeConstraints()
    sc.add_equal((x - 1) * (x - o), 0)
    assert sc.prove_eq(x, o) is None and sc.prove_eq(x, 1) is None
    assert sc.prove_eq((x - 1) * (x - o), 0) is True


def test_unknown_stays_none():
    sc = ShapeConstraints()
    assert sc.prove_eq(B, S) is None
    assert sc.prove_ge(B, S) is None
    assert sc.prove_ge(B, 0) is True               # sizes are >= 0
    assert sc.divisible(B, 2) is None
    assert sc.bounds(B - S) == (-math.inf, math.inf)


def test_signed_variables_are_not_sizes():
    h = symbolic.var("_h0")
    sc = ShapeConstraints(signed=["_h0"])
    assert sc.prove_ge(h, 0) is None
    sc.add_check(h, ">=", 0)
    assert sc.prove_ge(h, 0) is True


# ---- soundness --------------------------------------------------------------------------------

NAMES = ("a", "b", "c", "d")


def dims(names=NAMES, atoms=True):
    leaves = st.one_of(st.sampled_from(names).map(symbolic.var), st.integers(-3, 3))

    def extend(inner):
        pair = st.tuples(inner, inner)
        options = [pair.map(lambda t: t[0] + t[1]), pair.map(lambda t: t[0] - t[1]),
                   pair.map(lambda t: t[0] * t[1]),
                   st.tuples(inner, st.integers(2, 8)).map(lambda t: t[0] * t[1])]
        if atoms:
            options += [st.tuples(inner, st.integers(1, 8)).map(
                lambda t: symbolic.floordiv(t[0], t[1])),
                st.tuples(inner, st.integers(1, 8)).map(lambda t: symbolic.mod(t[0], t[1]))]
        return st.one_of(options)
    return st.recursive(leaves, extend, max_leaves=4)


FACT_KINDS = ("eq", "var_eq", "bound", "check_ge", "div", "mod_check", "floordiv_check",
              "disjunction")


def add_fact(sc, env, kind, e1, e2, k, r):
    """Add a fact of `kind` built from e1, e2 so that it holds at env."""
    ev = lambda d: symbolic.evaluate(d, env)      # noqa: E731
    if kind == "eq":
        sc.add_equal(e1 + (ev(e2) - ev(e1)), e2)
    elif kind == "var_eq":
        name = sorted(symbolic.variables(e1) or {"a"})[0]
        sc.add_equal(symbolic.var(name), e2 + (env[name] - ev(e2)))
    elif kind == "bound":
        sc.add_bound(e1, lo=ev(e1) - r, hi=ev(e1) + r if r % 2 else None)
    elif kind == "check_ge":
        sc.add_check(e1, ">=", e2 + (ev(e1) - ev(e2)) - r)
    elif kind == "div":
        sc.add_divisible(e1 - ev(e1) % k, k)
    elif kind == "mod_check":
        sc.add_check(symbolic.mod(e1 - ev(e1) % k, k), "==", 0)
    elif kind == "floordiv_check":
        x = e1 - ev(e1) % k
        sc.add_check(k * symbolic.floordiv(x, k), "==", x)
    elif kind == "disjunction":
        sc.add_equal(e1 * (e2 - ev(e2)), 0)


def check_sound(sc, env, queries):
    ev = lambda d: symbolic.evaluate(d, env)      # noqa: E731
    for a, b, k in queries:
        va, vb = ev(a), ev(b)
        assert ev(sc.canonical(a)) == va, (a, sc.canonical(a))
        assert sc.prove_eq(a, b) in (None, va == vb), (a, b)
        assert sc.prove_ge(a, b) in (None, va >= vb), (a, b)
        assert sc.prove_gt(a, b) in (None, va > vb), (a, b)
        assert sc.prove_le(a, b) in (None, va <= vb), (a, b)
        assert sc.prove_lt(a, b) in (None, va < vb), (a, b)
        assert sc.divisible(a, k) in (None, va % k == 0), (a, k)
        lo, hi = sc.bounds(a)
        assert lo <= va <= hi, (a, lo, hi)
    for line in sc.describe():          # every fact it states holds at env
        if " % " in line:
            left, right = line.split(" % ")
            assert ev(parse(left)) % int(right.split(" == ")[0]) == 0, line
        elif " == " in line:
            left, right = line.split(" == ")
            assert ev(parse(left)) == ev(parse(right)), line
        else:
            sides = [ev(parse(p)) for p in line.replace(">=", "<=").split(" <= ")]
            assert sides == sorted(sides, reverse=">=" in line), line


facts = st.lists(st.tuples(st.sampled_from(FACT_KINDS), dims(), dims(), st.integers(1, 8),
                           st.integers(0, 3)), max_size=6)
queries = st.lists(st.tuples(dims(), dims(), st.integers(1, 16)), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({n: st.integers(0, 12) for n in NAMES}), facts, queries,
       st.permutations(NAMES))
def test_facts_true_at_a_point_never_contradict_it(env, fact_list, query_list, order):
    sc = ShapeConstraints(order=order)
    for fact in fact_list:
        add_fact(sc, env, *fact)
    check_sound(sc, env, query_list)


SIGNED = NAMES + ("s",)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({n: st.integers(0, 12) for n in NAMES}), st.integers(-12, 12),
       st.lists(st.tuples(st.sampled_from(("eq", "var_eq", "bound", "check_ge", "disjunction")),
                          dims(SIGNED, atoms=False), dims(SIGNED, atoms=False),
                          st.integers(1, 8), st.integers(0, 3)), max_size=6),
       st.lists(st.tuples(dims(SIGNED, atoms=False), dims(SIGNED, atoms=False),
                          st.integers(1, 16)), min_size=1, max_size=4))
def test_signed_variable_may_be_negative(env, s, fact_list, query_list):
    env = dict(env, s=s)
    sc = ShapeConstraints(order=NAMES, signed=["s"])
    for fact in fact_list:
        add_fact(sc, env, *fact)
    check_sound(sc, env, query_list)
