"""Tests of jdisc's symbolic-dimension algebra (jdisc/dynamic_passes/algebra/symbolic.py).

Property tests build random expressions twice from one tree: symbolically (normalised) and with
plain Python ints at a point; the two must agree wherever the plain evaluation is defined.
"""

import math
import operator
import pickle
import random
import shutil
import subprocess
import time

import pytest
from hypothesis import given, settings, strategies as st

from jdisc.dynamic_passes.algebra.dim_text import parse, to_c
from jdisc.dynamic_passes.algebra.relaxed import nonneg_relaxed
from jdisc.lowering.c_runtime import source

C_DIMS = source("jd_dims.h")
from jdisc.dynamic_passes.algebra.symbolic import (Expr, as_int, bounds, dmax, dmin, evaluate,
                                                   floordiv, is_const, mod, prove_eq, prove_ge,
                                                   prove_gt, prove_le, prove_lt, substitute, var,
                                                   variables)

pytestmark = pytest.mark.fast   # compiles no jdisc program: IR, plans and algebra only

VARS = ("A", "B", "C")
B, S = var("B"), var("S")

# ---- random expression trees ------------------------------------------------------------------
# A tree is ("var", name) | ("const", k) | ("neg", t) | (op, t1, t2) with op one of BINARY.

SYMBOLIC = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "floordiv": operator.floordiv, "mod": operator.mod,
    "ffloordiv": floordiv, "fmod": mod, "max": dmax, "min": dmin,
}
CONCRETE = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "floordiv": operator.floordiv, "mod": operator.mod,
    "ffloordiv": operator.floordiv, "fmod": operator.mod, "max": max, "min": min,
}
BINARY = tuple(SYMBOLIC)
DIVISORS = (1, 2, 3, 4, 8, -2, -3)


def build(tree, leaf, table):
    kind = tree[0]
    if kind == "var":
        return leaf(tree[1])
    if kind == "const":
        return tree[1]
    if kind == "neg":
        return -build(tree[1], leaf, table)
    return table[kind](build(tree[1], leaf, table), build(tree[2], leaf, table))


def symbolic(tree):
    return build(tree, var, SYMBOLIC)


def concrete(tree, env):
    """The value of the tree at env with plain ints, or None where it divides by zero."""
    try:
        return build(tree, env.__getitem__, CONCRETE)
    except ZeroDivisionError:
        return None


leaves = st.one_of(
    st.sampled_from(VARS).map(lambda v: ("var", v)),
    st.integers(-5, 12).map(lambda k: ("const", k)),
)


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(BINARY), children, children),
        st.tuples(st.just("neg"), children),
        # constant divisors and multipliers, to exercise the simplifications that need them
        st.tuples(st.sampled_from(["floordiv", "mod", "mul"]), children,
                  st.sampled_from(DIVISORS).map(lambda k: ("const", k))),
    )


trees = st.recursive(leaves, _extend, max_leaves=8)
points = st.fixed_dictionaries({v: st.integers(0, 12) for v in VARS})


@st.composite
def bounded_points(draw):
    """(var_bounds, points inside them); a variable left out of var_bounds ranges over [0, inf)."""
    var_bounds, ranges = {}, {}
    for v in VARS:
        lo = draw(st.integers(0, 6))
        hi = draw(st.one_of(st.just(math.inf), st.integers(lo, lo + 6)))
        if draw(st.booleans()):
            var_bounds[v] = (lo, hi)
        else:
            lo, hi = 0, math.inf
        ranges[v] = st.integers(lo, min(hi, lo + 15))
    envs = draw(st.lists(st.fixed_dictionaries(ranges), min_size=1, max_size=4))
    return var_bounds, envs


def random_tree(rng, depth=3):
    """The same grammar as `trees`, from a seeded random.Random (for the C test)."""
    if depth == 0 or rng.random() < 0.25:
        return ("var", rng.choice(VARS)) if rng.random() < 0.7 else ("const", rng.randint(-5, 12))
    r = rng.random()
    if r < 0.1:
        return ("neg", random_tree(rng, depth - 1))
    if r < 0.35:
        op = rng.choice(["floordiv", "mod", "mul"])
        return (op, random_tree(rng, depth - 1), ("const", rng.choice(DIVISORS)))
    return (rng.choice(BINARY), random_tree(rng, depth - 1), random_tree(rng, depth - 1))


# ---- properties -------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(trees, st.lists(points, min_size=1, max_size=4))
def test_simplification_never_changes_the_value(tree, envs):
    expected = [concrete(tree, env) for env in envs]
    if all(want is None for want in expected):
        return
    d = symbolic(tree)
    assert type(d) is int or (isinstance(d, Expr) and not is_const(d))
    assert variables(d) <= set(VARS)
    for env, want in zip(envs, expected):
        if want is not None:
            assert evaluate(d, env) == want, (tree, str(d), env)


@settings(max_examples=300, deadline=None)
@given(trees, st.integers(-3, 3), bounded_points())
def test_relaxed_nonnegativity_is_never_wrong(tree, c, bounded):
    var_bounds, envs = bounded
    try:
        d = symbolic(tree) + c
    except ZeroDivisionError:
        return
    if nonneg_relaxed(d, var_bounds):
        for env in envs:
            value = concrete(tree, env)
            if value is not None:
                assert value + c >= 0, (str(d), var_bounds, env)


def test_relaxed_nonnegativity_examples():
    a, b = var("a"), var("b")
    up = lambda n: 64 * floordiv(n + 63, 64)          # a buffer rounded up to 64 bytes
    nonneg = nonneg_relaxed
    assert nonneg(up(4 * a * b) + 128 - 4 * a * b)
    assert not nonneg(up(4 * a * b) - 4 * a * b - 1)
    assert nonneg(8 * a * (a - 1) ** 2, {"a": (1, math.inf)})     # shifted: 8t^3 + 8t^2
    assert not nonneg(a * a - 3 * a, {"a": (1, math.inf)})
    # shifting a = 2 + t makes the divisor floordiv(1, 2 + t) the constant 0: no proof, and no
    # ZeroDivisionError (found by test_relaxed_nonnegativity_is_never_wrong)
    assert not nonneg(floordiv(a, floordiv(1, a)), {"a": (2, math.inf)})
    assert nonneg(up(4 * (a - 1) ** 2 - 1) + 64, {"a": (1, math.inf)})
    m = dmin(a, 3)                       # x[:, 1:3] has min(a, 3) - 1 columns: a fact >= 0
    atom = (m - 1).terms[0][0].factors[0][0]
    assert nonneg(up(4 * a * m - 4 * a), {}, {atom: 1})
    assert not nonneg(up(4 * a * m - 4 * a))
    q = floordiv(b + 1, 2)                   # a rounded-up slot of a value with a floor dim
    assert nonneg(up(16 * q) + 128 - 16 * q)


@settings(max_examples=300, deadline=None)
@given(trees, bounded_points())
def test_bounds_contain_the_value(tree, bounded):
    var_bounds, envs = bounded
    try:
        d = symbolic(tree)
    except ZeroDivisionError:
        return
    lo, hi = bounds(d, var_bounds)
    for env in envs:
        value = concrete(tree, env)
        if value is not None:
            assert lo <= value <= hi, (str(d), var_bounds, env)


@settings(max_examples=300, deadline=None)
@given(trees, st.one_of(trees, st.integers(-3, 3)), bounded_points())
def test_prove_is_never_wrong(tree_a, b, bounded):
    # b: another tree, or tree_a plus a small constant (so that proofs actually happen)
    tree_b = b if isinstance(b, tuple) else ("add", tree_a, ("const", b))
    var_bounds, envs = bounded
    try:
        a, b = symbolic(tree_a), symbolic(tree_b)
    except ZeroDivisionError:
        return
    claims = {
        prove_eq: operator.eq, prove_ge: operator.ge, prove_gt: operator.gt,
        prove_le: operator.le, prove_lt: operator.lt,
    }
    verdicts = {prove: prove(a, b, var_bounds) for prove in claims}
    for env in envs:
        va, vb = concrete(tree_a, env), concrete(tree_b, env)
        if va is None or vb is None:
            continue
        for prove, compare in claims.items():
            if verdicts[prove] is not None:
                assert verdicts[prove] == compare(va, vb), (prove.__name__, str(a), str(b), env)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_parse_reads_back_str(tree):
    try:
        d = symbolic(tree)
    except ZeroDivisionError:
        return
    assert parse(str(d)) == d
    assert str(parse(str(d))) == str(d)
    assert pickle.loads(pickle.dumps(d)) == d


@settings(max_examples=200, deadline=None)
@given(trees, trees, points)
def test_substitute_agrees_with_evaluate(tree, replacement, env):
    try:
        d, r = symbolic(tree), symbolic(replacement)
    except ZeroDivisionError:
        return
    env_a = dict(env, A=concrete(replacement, env))
    want = concrete(tree, env_a) if env_a["A"] is not None and env_a["A"] >= 0 else None
    if want is None:
        return  # A is a size, so only a non-negative replacement keeps the simplifications valid
    assert evaluate(substitute(d, {"A": r}), env) == want
    plain = concrete(tree, env)
    if plain is not None:
        assert substitute(d, env) == plain


# ---- the named simplifications ----------------------------------------------------------------

def test_named_simplifications():
    assert (B * S * 768) // 768 == B * S
    assert (2 * B + 4) // 2 == B + 2
    assert (B * 8) % 8 == 0
    assert B // 1 == B
    assert B % 1 == 0
    assert (B * S) // S == B
    assert (B * S + 3 * S) // S == B + 3
    assert mod(B * S, S) == 0
    assert str(B // 2) == "floordiv(B, 2)"
    assert str(S % 8) == "mod(S, 8)"
    assert str((B + S) // S) == "floordiv(B, S) + 1"
    assert mod(mod(S, 8), 8) == mod(S, 8)
    assert floordiv(mod(S, 8), 8) == 0
    assert floordiv(floordiv(S, 2), 4) == floordiv(S, 8)
    assert floordiv(2 * (B + S), B + S) == 2
    assert mod(S, S + 1) == S
    assert B * S - S * B == 0


def test_max_and_min_fold_when_provable():
    assert dmax(B, 0) == B
    assert dmax(B + 1, B) == B + 1
    assert dmin(B + 1, B) == B
    assert dmin(B, 0) == 0
    assert dmax(3, 5) == 5 and dmin(3, 5) == 3
    assert str(dmax(B, 1)) == "max(B, 1)"
    assert dmax(B, S) == dmax(S, B)


def test_constant_results_are_python_ints():
    for d in [B - B, (2 * B + 4) - 2 * B, floordiv(7, 2), mod(-7, 2), dmax(3, 5), B * 0,
              substitute(B * S, {"B": 2, "S": 3}), parse("3*4 - 2"), (B * 8) % 8, 6 // (B - B + 2)]:
        assert type(d) is int
    assert as_int(B - B + 3) == 3 and as_int(B) is None
    assert is_const(4) and not is_const(B)


def test_str_is_the_normal_form():
    assert str(B * S * 768) == "768*B*S"
    assert str(2 * B + 4) == "2*B + 4"
    assert str(B * B) == "B^2"
    assert str(3 - S) == "-S + 3"
    assert str((B + S) * (B - S)) == "B^2 - S^2"
    assert str(S * B * B + B + 1) == "B^2*S + B + 1"
    assert str(floordiv(-B, 2)) == "floordiv(-B, 2)"
    assert repr((B, 768)) == "(B, 768)"


def test_parse():
    for text in ["B*S*768", "2*B + 4", "floordiv(B, 2)", "mod(S, 8)", "max(B, 1)", "-S + 3",
                 "B^2", "min(B, S)*3 - 1"]:
        assert str(parse(text)) == str(parse(str(parse(text))))
    assert parse("B*S*768") == 768 * B * S
    assert parse("-S + 3") == 3 - S
    assert parse("(B + 1)**2") == parse("B^2 + 2*B + 1")
    assert parse("B // 2 + S % 8") == floordiv(B, 2) + mod(S, 8)
    for bad in ["", "B +", "2B", "floordiv(B)", "B $ 2", "B^S", "(B"]:
        with pytest.raises(ValueError):
            parse(bad)


def test_equality_is_structural_and_hash_is_consistent():
    assert {B * S: 1}[S * B] == 1
    assert hash(parse("2*B + 4")) == hash(2 * B + 4)
    assert not (B == 3) and B != 3
    assert (dmax(B, S) + dmin(B, S) == B + S) is False  # same value, other normal form
    with pytest.raises(TypeError):
        B < S  # noqa: B015 -- ordering would lie; use prove_*
    with pytest.raises(AttributeError):
        B.const = 1


def test_bounds_examples():
    inf = math.inf
    assert bounds(mod(S, 8)) == (0, 7)
    assert bounds(B - S) == (-inf, inf)
    assert bounds(10 - 2 * B, {"B": (1, 3)}) == (4, 8)
    assert bounds(B * B - 2 * B, {"B": (0, 5)}) == (-10, 25)
    assert bounds(floordiv(B, 4), {"B": (5, 20)}) == (1, 5)
    assert bounds(floordiv(B - 10, S), {"B": (0, 3)}) == (-10, -1)
    assert bounds(mod(B, S), {"S": (1, 8)}) == (0, 7)
    assert bounds(dmax(B, S) - 1, {"B": (2, 4), "S": (1, 9)}) == (1, 8)


def test_bounds_see_through_a_term_and_the_extremum_that_contains_it():
    # a - min(a, 2) >= 0 (the size of x[2:] minus nothing): plain intervals said >= -2, so
    # shape propagation could not decide the sign of x[2::2]'s size (fuzzer batch 40000425)
    inf = math.inf
    assert bounds(B - dmin(B, 2) + 1) == (1, inf)
    assert bounds(floordiv(B - dmin(B, 2) + 1, 2)) == (0, inf)
    assert bounds(S * (B - dmin(B, S))) == (0, inf)
    assert bounds(dmax(B, S) - B) == (0, inf)
    assert bounds(2 - dmin(B, 2)) == (0, 2)
    assert bounds(dmin(B, S) - B) == (-inf, 0)
    assert prove_ge(B - dmin(B, 3), 0) is True


def test_prove_examples():
    assert prove_eq(B + 1, B) is False
    assert prove_eq(B * S, S * B) is True
    assert prove_eq(B, S) is None
    assert prove_ge(B + 1, B) is True
    assert prove_gt(B, B + 1) is False
    assert prove_ge(B, S) is None
    assert prove_ge(B, 8, {"B": (8, math.inf)}) is True
    assert prove_lt(mod(S, 8), 8) is True
    assert prove_le(B, 2 * B) is True


def test_evaluate_and_variables():
    d = floordiv(B * S + 7, 2) + dmax(B, S) - mod(S, 3)
    assert evaluate(d, {"B": 3, "S": 5}) == (3 * 5 + 7) // 2 + 5 - 5 % 3
    assert variables(d) == {"B", "S"} and variables(7) == frozenset()
    with pytest.raises(KeyError, match="S"):
        evaluate(B + S, {"B": 1})


def test_to_c_text():
    assert to_c(5) == "((int64_t)5)"
    assert to_c(-5) == "((int64_t)-5)"
    assert to_c(B) == "B"
    assert to_c(B * S * 768) == "(768 * B * S)"
    assert to_c(3 - S) == "(-S + 3)"
    assert to_c(floordiv(B, 2), name=lambda v: f"d_{v}") == "jd_floordiv(d_B, 2)"
    assert to_c(dmax(B + 1, S) * B) == "(B * jd_max(B + 1, S))"
    assert "jd_floordiv(" in C_DIMS and "jd_mod(" in C_DIMS and "jd_min(" in C_DIMS


def test_building_is_fast():
    names = [var(f"x{i}") for i in range(30)]
    start = time.perf_counter()
    for _ in range(100):
        total = 0
        for i, x in enumerate(names):
            total = total + (i + 1) * x
        floordiv(total * 8, 8) - total
    assert time.perf_counter() - start < 2.0  # about 1 ms per 30-term build; this is very loose


def test_to_c_matches_evaluate(tmp_path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    rng = random.Random(1234)
    exprs = [B * S * 768, 3 - S, floordiv(-B - 7, 3), mod(-B, 4), floordiv(B, S - 3),
             mod(B + 5, S - 3), dmax(B - S, 2) * dmin(S, B), (B - S) ** 3]
    exprs = [substitute(e, {"B": var("A"), "S": var("C")}) for e in exprs]
    for _ in range(80):
        try:
            exprs.append(symbolic(random_tree(rng)))
        except ZeroDivisionError:
            pass
    envs = [{"A": 0, "B": 1, "C": 7}, {"A": 5, "B": 12, "C": 3}, {"A": 9, "B": 2, "C": 11},
            {"A": 1, "B": 0, "C": 2}]
    lines, expected = [], []
    for env in envs:
        lines.append("  " + " ".join(f"d_{v} = {env[v]};" for v in VARS))
        for e in exprs:
            try:
                want = evaluate(e, env)
            except ZeroDivisionError:
                continue
            lines.append(f'  printf("%lld\\n", (long long){to_c(e, name=lambda v: "d_" + v)});')
            expected.append(want)
    source = tmp_path / "dims.c"
    source.write_text(
        C_DIMS + "#include <stdio.h>\nint main(void) {\n  int64_t d_A, d_B, d_C;\n"
        + "\n".join(lines) + "\n  return 0;\n}\n")
    exe = tmp_path / "dims"
    build = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                            str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    assert [int(x) for x in run.stdout.split()] == expected


def test_c_floordiv_and_mod_are_pythons(tmp_path):
    """jd_floordiv and jd_mod (branch-free) against Python's // and % over every sign pairing,
    remainders zero and not, and operands near the int64 limits."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    big = 2 ** 63 - 1
    values = list(range(-40, 41)) + [big, big - 1, -big, -big + 1, 2 ** 40 + 3, -(2 ** 40) - 3]
    divisors = [d for d in range(-9, 10) if d] + [big, -big, 2 ** 31, -(2 ** 31) - 7]
    pairs = [(a, b) for a in values for b in divisors]
    body = "\n".join(f'  printf("%lld %lld\\n", (long long)jd_floordiv({a}LL, {b}LL), '
                     f'(long long)jd_mod({a}LL, {b}LL));' for a, b in pairs)
    source = tmp_path / "divmod.c"
    source.write_text(C_DIMS + "#include <stdio.h>\nint main(void) {\n" + body
                      + "\n  return 0;\n}\n")
    exe = tmp_path / "divmod"
    build = subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Werror", "-o", str(exe),
                            str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    for (a, b), line in zip(pairs, out):
        assert [int(x) for x in line.split()] == [a // b, a % b], (a, b)


def test_relaxed_nonnegativity_through_min_and_max():
    a, b = var("a"), var("b")
    assert nonneg_relaxed(4 * a * a - 4 * a * dmin(a, 2))            # a*(a - min(a, 2))
    assert nonneg_relaxed(192 * floordiv(4 * a * a - 4 * a * dmin(a, 2) + 63, 64) + 192)
    assert nonneg_relaxed(a * b - a * dmin(b, 3)) and nonneg_relaxed(a * dmax(b, 3) - 3 * a)
    assert not nonneg_relaxed(4 * a * a - 4 * a * dmin(a, 2) - 1)
    assert not nonneg_relaxed(a * dmax(b, 3) - 4 * a)
    assert not nonneg_relaxed(a * dmin(b, 3) - a * b)                # the wrong direction


def test_dividing_a_power_lowers_its_exponent():
    # found by the property test above (CI, 2026-12-01): (B*B)//B was B^2, the exponent of a
    # factor the divisor shares was kept instead of reduced
    from jdisc.dynamic_passes.algebra.symbolic import floordiv, var
    a, b = var("A"), var("B")
    assert floordiv(b * b, b) == b and floordiv(b * b * b, b) == b * b
    assert floordiv(6 * a * b * b, 3 * b) == 2 * a * b
    assert evaluate(floordiv(b * b * a, b * a), {"A": 3, "B": 5}) == 5
