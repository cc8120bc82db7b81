"""Whole-program fuzzing (program_fuzz.py): random JAX programs of 5-60 ops over the symbolic
dims a, b, run by jdisc and by jax.jit at four sizes each (0, 1, 13 and primes), one jdisc compile
per batch of 8 programs; a failing program is shrunk to a few-line standalone repro.

Seeded tier: 28 batches, 224 programs (`test_random_programs`, batch seeds SEED0 + k;
JDISC_PROGRAM_FUZZ_BATCHES changes the count; in the default run: about 250 s of CPU, 125 s on
two idle cores, most of it the C compiler and XLA), checked by two worker
processes (a crash in generated code fails its batch, not the session), then the failures shrunk
within a shared time budget (JDISC_PROGRAM_FUZZ_SHRINK_S, default 240 s, at most 90 s each). A
failure's report is its repro; `python tests/program_fuzz.py --seed S --n 8` regenerates batch S
and shrinks every failure in it. A ShapeError for a size-0 call that jax.jit runs is recorded as
a SizeZeroRefusal warning, as in test_fuzz.py.

Slow tier (`-m slow`): JDISC_PROGRAM_FUZZ_N programs (default 400) from a random first seed,
printed in the report so a failing run can be replayed.

Tolerances: program_fuzz's value facts bound each output's f32 rounding error (first order, from
intervals: U = 2^-24 per rounding, 16 U per transcendental, n U per term of an n-term sum or
contraction); both jdisc and XLA are within that bound of the exact value, so they may differ by
twice it (2.5x with slack for second-order terms). The generator keeps values in [-1e4, 1e4] and
their bounds under 3e-4 of their magnitude (domains away from log/sqrt/divide singularities, exp
of bounded values), so the tolerances stay small: a wrong element is never within them.
Integers, bools and floats that both compute exactly (moves, selects, max/min, sorts of inputs,
compares of exact values) must match bit for bit. `test_error_bounds_hold_against_float64`
checks the bound itself, for XLA's f32 results against the same programs in float64.

The fast tests (no C compiler) check the generator (every program is valid at its sizes and jax
agrees with its shapes), the printer (the printed source traces to the interpreter's jaxpr) and
the shrinker (with a predicate that needs no compile).
"""

import os
import resource
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import program_fuzz as pf
from conftest import assert_compile_linear

SEED0 = 20261201
N_BATCHES = int(os.environ.get("JDISC_PROGRAM_FUZZ_BATCHES", "28"))
PER_BATCH = 8
SHRINK_S = float(os.environ.get("JDISC_PROGRAM_FUZZ_SHRINK_S", "240"))


# -- the generator, printer and shrinker (no C compiler) ----------------------------------------

def _all_values(prog):
    return pf.Program(prog.inputs, prog.nodes, list(range(prog.n_in + len(prog.nodes))))


@pytest.mark.parametrize("seed", range(12))
def test_programs_are_valid_and_jax_agrees_on_shapes(seed):
    """Every value of a generated program has, at each tested size, the shape jax.jit gives it."""
    prog, envs = pf.random_program(seed)
    full = _all_values(prog)
    typing = pf.infer(full, envs)
    for env in envs[:2]:
        args = pf.make_inputs(full, env, 0)
        got = jax.eval_shape(pf.make_fn(full), *args)
        for vid, (t, g) in enumerate(zip(typing.types, got)):
            want = tuple(pf.at(d, env) for d in t.shape)
            assert g.shape == want and g.dtype == t.dtype, f"value {vid} at {env}"


@pytest.mark.parametrize("seed", range(12))
def test_printed_source_is_the_interpreted_function(seed):
    prog, envs = pf.random_program(100 + seed)
    text = "\n".join(pf.function_source(prog, envs))
    ns = {}
    exec("import jax, jax.numpy as jnp, numpy as np\nfrom jax import lax\n" + text, ns)
    args = pf.make_inputs(prog, envs[0], 0)
    assert str(jax.make_jaxpr(ns["f"])(*args)) == str(jax.make_jaxpr(pf.make_fn(prog))(*args))


def test_generator_covers_every_op():
    """A few hundred programs use every op of the table, at least one body of each kind, and
    both dims."""
    seen, names = set(), set()

    def walk(prog):
        for node in prog.nodes:
            seen.add(node.op)
            for sub in node.subs:
                walk(sub)
    for seed in range(40):             # stops once everything has been seen
        progs, _ = pf.random_batch(seed, 8)
        for p in progs:
            walk(p)
            names.update(d for i in p.inputs for d in i.template if isinstance(d, str))
        if seen == set(pf.OPS) and names == set(pf.NAMES):
            break
    assert seen == set(pf.OPS), f"never generated: {set(pf.OPS) - seen}"
    assert names == set(pf.NAMES)


def test_shrinker_finds_a_minimal_program():
    """With a predicate that needs no compile ('some reduce reads a transpose'), a large program
    shrinks to the two ops and their input."""
    def bad(prog, envs):
        return any(n.op == "reduce" and prog.n_in <= n.args[0] and
                   prog.node(n.args[0]).op == "transpose" for n in prog.nodes)
    for seed in range(200):
        prog, envs = pf.random_program(seed, n_ops=50)
        if bad(prog, envs):
            break
    else:
        pytest.skip("no program with the pattern")
    small, small_envs, _ = pf.shrink(prog, envs, bad, budget_s=60)
    assert bad(small, small_envs)
    assert len(small.nodes) == 2 and small.n_in == 1, pf.source(small, small_envs[0])
    assert len(small_envs) == 1


def test_a_program_valid_at_its_sizes_is_valid_at_each_alone():
    """The harness checks a failure at its size alone (bisection, the shrinker's first step,
    the report's repro), so a program well defined at its sizes must be at each of them. A
    loop's carry range was only joined with the body's output three times: `clip(c - c, -52,
    52)` from `sum(x * x)` doubles it each time, `clip(c + a, -13000, 13000)` adds `a`; valid
    where the initial value spanned much, Invalid at a size where it spanned little, and the
    harness died with 'check raised Invalid' (batch seeds 1016, 1019, 1029, 2128; 5031's
    body also takes a cos of the carry, valid only up to its clip's bound)."""
    checked = 0
    for seed in (1016, 1019, 1029, 2128, 5031):
        progs, envs = pf.random_batch(seed, 8, weights=pf.FIRST_WEIGHTS)
        for prog in progs:
            for env in envs:
                pf.infer(prog, [env])
                checked += 1
    assert checked == 5 * 8 * 4


def test_a_finding_at_a_size_where_its_program_is_invalid_alone_is_reported():
    """Validity at one size alone cannot always follow from validity at all of them: an error
    bound carried into a value whose range is smaller at that size alone is ill conditioned
    there (batch 5111, program 7, at a = 13, b = 0). The report's repro types the program at
    every size it was checked at; the shrinker starts from them."""
    progs, envs = pf.random_batch(5111, 8, weights=pf.FIRST_WEIGHTS)
    with pytest.raises(pf.Invalid):
        pf.infer(progs[7], [envs[3]])
    fd = pf.Finding(5111, 7, pf.Failure("mismatch", "made up", envs[3]), progs[7], envs)
    assert "def f(" in fd.report()
    calls = []
    small, small_envs, _ = pf.shrink(progs[7], [envs[3]] + envs[:3],
                                     lambda p, e: calls.append(e) or False, budget_s=5)
    assert small is progs[7] and [envs[3]] not in calls


class _StubWorker:
    """check(progs, envs, seeds): an error for the whole batch, Invalid at any one size alone
    (as a program whose facts need every size was), and the error again for program 1 at the
    batch's sizes."""

    def __init__(self, envs):
        self.envs, self.calls = envs, []

    def check(self, progs, envs, seeds):
        self.calls.append((list(seeds), envs))
        if envs != self.envs:
            raise pf.Invalid("the body leaves the carry's range")
        return [[pf.Failure("CompileError", "boom", self.envs[1])] if s == 1 else []
                for s in seeds]


def test_bisection_checks_at_the_batch_sizes_where_one_size_alone_is_invalid():
    envs = [{"a": 1, "b": 2}, {"a": 7, "b": 3}]
    progs, _ = pf.random_batch(0, 4)
    worker = _StubWorker(envs)
    fails = pf.check_programs(worker, progs, envs, [0, 1, 2, 3])
    assert [len(f) for f in fails] == [0, 1, 0, 0], fails
    assert fails[1][0].kind == "CompileError"
    assert any(e == [envs[1]] for _, e in worker.calls)   # the failing size was tried first
    assert pf.still_fails_like(worker, fails[1][0], 1)(progs[1], [envs[1]]) is False


def test_repro_script_runs_standalone(tmp_path):
    """A report's repro is a script that compiles with jdisc and compares with jax.jit; its
    call runs jdisc's program, not jax.jit's (the bridge, on by default for users)."""
    import subprocess
    import sys
    prog, envs = pf.random_program(3, n_ops=6)
    script = tmp_path / "repro.py"
    script.write_text(pf.source(prog, envs[0], seed=7))
    env = dict(os.environ, JDISC_BRIDGE="1")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(out.stdout.splitlines()) == len(prog.outputs)


def test_the_check_runs_jdiscs_program_at_every_size_whatever_the_environment(monkeypatch):
    """The check (also run outside pytest, by program_fuzz.py) compares jdisc's own program with
    jax.jit from the first size on: with the bridge (the users' default) the first call ran
    jax.jit's program, compared with itself, and `compiles` could be read before the compile
    in the background was done (a batch of 8 "compiles" findings, seed 71250045)."""
    import jdisc
    made = []

    def jit(*a, **kw):
        made.append(jdisc_jit(*a, **kw))
        return made[-1]
    jdisc_jit = jdisc.jit
    monkeypatch.setenv("JDISC_BRIDGE", "1")
    monkeypatch.setattr(jdisc, "jit", jit)
    prog, envs = pf.random_program(3, n_ops=6)
    assert pf.check([prog], envs) == [[]]
    stats = made[0].stats()
    assert stats["compiles"] == 1 and not stats.get("bridged_calls"), stats


def test_error_bounds_hold_against_float64():
    """The f32 error bounds (the tolerances) hold for XLA's f32 results against the same
    programs evaluated in float64: |f32 - f64| <= err for every float output."""
    checked = 0
    for seed in range(60):
        prog, envs = pf.random_program(1000 + seed)
        typing = pf.infer(prog, envs)
        args = pf.make_inputs(prog, envs[0], 0)
        want32 = jax.jit(pf.make_fn(prog))(*args)
        try:
            with jax.enable_x64(True):
                args64 = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
                want64 = jax.jit(pf.make_fn(prog))(*args64)
        except Exception:          # some programs do not trace in 64 bits (int64 carries, ...)
            continue
        for o, g, w in zip(prog.outputs, want32, want64):
            g, w = np.asarray(g), np.asarray(w)
            if g.dtype != np.float32 or g.size == 0:
                continue
            err = float(np.max(np.abs(g.astype(np.float64) - w)))
            assert err <= typing.facts[o].err + 1e-30, (
                f"seed {1000 + seed} output {o}: |f32 - f64| = {err:.3g} > bound "
                f"{typing.facts[o].err:.3g}\n" + pf.source(prog, envs[0]))
            checked += 1
        if checked >= 40:
            break
    assert checked >= 20


# -- the default tier: fixed batches against jax.jit ----------------------------------------

def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the workers, their compilers)."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def _tier():
    t0, cpu0 = time.monotonic(), _cpu_s()
    results = pf.run_batches(list(range(SEED0, SEED0 + N_BATCHES)), PER_BATCH, workers=2,
                             shrink_budget_s=SHRINK_S)
    n_fail = sum(fd.failure.kind not in NOT_JDISCS for v in results.values() for fd in v)
    print(f"\nprogram fuzz: {N_BATCHES * PER_BATCH} programs in {time.monotonic() - t0:.0f} s "
          f"({_cpu_s() - cpu0:.0f} s of CPU), {n_fail} failing")
    return results


class SizeZeroRefusal(UserWarning):
    """At a size 0, jdisc refused a call with a ShapeError where jax.jit runs it (as in
    test_fuzz: recorded, not failed), or returned the shape of the exported program, whose
    static sizes jax.export computed assuming every dim >= 1 (x[:1] of a dim a is [1])."""


class XlaDisagrees(UserWarning):
    """jax.jit's result differed from the same program run by jax op by op, and jdisc's
    matched the latter (fuzzing.check._tie_break): XLA's bug, recorded, not failed."""


NOT_JDISCS = {"size0": SizeZeroRefusal, "xla": XlaDisagrees}


def _failures(findings):
    for fd in findings:
        if fd.failure.kind in NOT_JDISCS:
            warnings.warn(NOT_JDISCS[fd.failure.kind](fd.report()))
    return [fd for fd in findings if fd.failure.kind not in NOT_JDISCS]


def test_random_programs():
    """Every batch of the seeded tier, in one test: under pytest-xdist it is one item, so one
    xdist worker runs the tier (on its own two processes) while the other runs the rest of the
    suite, and no batch is run twice. A failure names its batch seed and carries its repro."""
    results = _tier()
    failing = {}
    for k in range(N_BATCHES):
        found = _failures(results[SEED0 + k])
        if found:
            failing[SEED0 + k] = found
    assert not failing, "\n\n".join(
        f"batch seed {seed} (python tests/program_fuzz.py --seed {seed} --n {PER_BATCH}):\n"
        + "\n\n".join(fd.report() for fd in fds) for seed, fds in failing.items())


# -- the slow tier: as many programs as asked, new seeds every run -----------------------------

@pytest.mark.slow
def test_random_programs_slow():
    n = int(os.environ.get("JDISC_PROGRAM_FUZZ_N", "400"))
    first = int.from_bytes(os.urandom(3), "little")
    seeds = list(range(first, first + -(-n // PER_BATCH)))
    results = pf.run_batches(seeds, PER_BATCH, workers=2, shrink_budget_s=10 * SHRINK_S)
    findings = _failures([fd for s in seeds for fd in results[s]])
    assert not findings, (f"{len(findings)} of {len(seeds) * PER_BATCH} programs fail (batch "
                          f"seeds {first}..{seeds[-1]}):\n\n"
                          + "\n\n".join(fd.report() for fd in findings))


# -- compile time in the depth of a DAG ----------------------------------------------------------

def _square_chain(depth):
    def f(x):
        for _ in range(depth):
            x = x * x + x
        return x
    return f


def _mixed_chains(depth):
    """Three live chains that read each other: every value has several consumers."""
    def f(x, y):
        u, v, w = x, y, x + y
        for i in range(depth // 2):                 # two ops deep per step
            u, v, w = (u * v + w, v - u * w, jax.numpy.maximum(w, u) * 0.5) if i % 3 else \
                (u + w * v, v * u - w, w - v * 0.5)
        return u, v, w
    return f


@pytest.mark.parametrize("make_fn,n_args", [(_square_chain, 1), (_mixed_chains, 2)])
def test_deep_dag_compiles_linear_in_depth(make_fn, n_args):
    """A fused DAG with shared subvalues, 50 and 200 deep: jdisc's own stages after jax.export
    (MLIR clean-up, import, passes with the verifier and plan checker on, C generation; not the
    C compiler) grow linearly (0.2-0.45 s at depth 200 on a quiet 2-core machine). Work
    exponential in the depth, the bug this guards against, takes minutes at depth 50."""
    x = np.linspace(0, 1, 15, dtype=np.float32).reshape(5, 3)
    assert_compile_linear(make_fn, [x] * n_args, ({0: "a"},) * n_args)


_XLA_WRONG = [   # (inputs, nodes, outputs): XLA:CPU's in-place update read from its operand
    ([pf.Input(pf.F32, (3, 1))],
     [pf.Node("dus", (0, 0), {"axis": 0, "k": 2, "start": -1}),
      pf.Node("transpose", (1,), {"perm": (1, 0)})], [2]),
    # batch seed 1780431: the tie-breaker had run the program on numpy inputs, where `.at` of
    # the scatter beside it fails, and so reported XLA's wrong answer as jdisc's
    ([pf.Input(pf.I32, (1,), ("int", 0, 40)), pf.Input(pf.F32, (3, 2, 1))],
     [pf.Node("transpose", (1,), {"perm": (0, 2, 1)}),
      pf.Node("dus", (2, 2), {"axis": 0, "k": 2, "start": 1}),
      pf.Node("scatter", (0, 0), {"f": "add", "c": 1})], [4, 3]),
]


@pytest.mark.parametrize("case", range(len(_XLA_WRONG)))
def test_a_disagreement_that_is_xlas_is_recorded_as_such(case):
    """Batch seeds 10955150 (program 4) and 1780431 (program 1), shrunk: jax.jit's in-place
    fusion of an update read from its own operand gave [0, 0, 0] for x = [0, 1, 2] where jax op
    by op (and jdisc) give [0, 0, 1]. The tie-breaker records it as XLA's ("xla"), not as
    jdisc's mismatch; were XLA fixed, nothing would be found at all."""
    prog = pf.Program(*_XLA_WRONG[case])
    args = pf.make_inputs(prog, {"a": 1, "b": 1}, 1780431001)
    xla_wrong = any(not np.array_equal(w, e) for w, e in zip(
        pf.reference(pf.make_fn(prog), args), pf.op_by_op(prog, args)))
    fails = pf.check([prog], [{"a": 1, "b": 1}], [1780431001])
    assert [f.kind for f in fails[0]] == (["xla"] if xla_wrong else []), fails
    assert not pf.is_error(fails)


def test_the_call_inside_a_jax_trace_is_checked_too():
    """Each size is also run as jax.jit(jf) (jdisc's program through XLA's FFI); a wrong
    output there is a 'traced' failure of its program, and an exception inside the trace is
    an error blamed on every program. A stand-in for jf that returns zeros shows both."""
    from fuzzing import check as fc
    prog, envs = pf.random_program(3, n_ops=6)
    typing = pf.infer(prog, envs)
    args = pf.make_inputs(prog, envs[0], 0)
    want = pf.reference(pf.make_fn(prog), args)
    if all(np.all(np.asarray(w) == 0) for w in want):
        pytest.skip("a program whose outputs are all zero")
    fails = [[]]
    fc._check_traced(lambda *xs: tuple(jnp.zeros_like(w) for w in want), [prog], [typing],
                     [args], want, envs[0], fails)
    assert fails[0] and {f.kind for f in fails[0]} == {"traced"}, fails
    assert not pf.is_error(fails)
    fails = [[]]

    def raises(*xs):
        raise ValueError("boom")
    fc._check_traced(raises, [prog], [typing], [args], want, envs[0], fails)
    assert [f.kind for f in fails[0]] == ["traced ValueError"] and pf.is_error(fails)
