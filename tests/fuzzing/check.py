"""The differential check: programs run by jdisc (one compile for a batch) and by jax.jit
at every tested size, outputs compared within their facts' tolerances (`check`)."""

from __future__ import annotations

import contextlib
import os

import jax
import numpy as np

from .facts import Facts, Failure, Program, at
from .infer import dynamic_axes, infer, input_type, make_fn
from .printer import make_inputs, split_pieces


def tolerance(facts: Facts, dtype) -> float:
    """Both sides are within facts.err of the exact value; 1.25: slack for the second-order
    terms the first-order bound leaves out."""
    return 0.0 if np.dtype(dtype).kind != "f" else 2.5 * facts.err


def compare(got, want, tol: float) -> str | None:
    """None, or what differs. Unlike the suite's `assert_close` (a bound relative to the output's
    scale), `tol` here is an absolute per-element bound derived from the program's error
    analysis (`facts.err`), and a mismatch is reported as text for the shrinker, not raised."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype} != {want.shape} {want.dtype}"
    if got.size == 0:
        return None
    if got.dtype.kind != "f":
        bad = got != want
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {got.size} differ; at {i}: {got[i]} != {want[i]}"
        return None
    same_ = (got == want) | (np.isnan(got) & np.isnan(want))
    diff = np.where(same_, 0.0, np.abs(got.astype(np.float64) - want.astype(np.float64)))
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > max(tol, 1e-30)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {got.size} differ by up to {diff.max():.3g} "
                f"(tolerance {tol:.3g}); at {i}: {got[i]} != {want[i]}")
    return None


# failures of one program's outputs, not errors that stop the batch's call
NOT_ERRORS = ("mismatch", "traced", "compiles", "size0", "xla")

REFERENCE_OPTIONS = {"xla_backend_optimization_level": 0}


def reference(fn, args):
    """jax.jit(fn)(*args), compiled with LLVM at -O0: the same HLO and the same arithmetic
    (no fast-math either way), in half the compile time, which dominates the fuzzer's."""
    return jax.jit(fn).lower(*args).compile(compiler_options=REFERENCE_OPTIONS)(*args)


def op_by_op(prog: Program, args):
    """The program run by jax one op at a time (no jit, so no fusion): the tie-breaker when
    jdisc and jax.jit disagree."""
    with jax.disable_jit():
        return make_fn(prog)(*[jax.numpy.asarray(a) for a in args])


def check(progs: list[Program], envs: list[dict], seeds=None) -> list[list[Failure]]:
    """Run the programs as the outputs of ONE jdisc function (one compile) and of jax.jit at
    every env (program i's inputs drawn with seeds[i]); per program, the failures found. A
    jdisc error is blamed on every program. Programs jax.export itself refuses (its lowering
    checks sizes that the generator's tracing does not) are dropped: they fail nothing."""
    seeds = list(range(len(progs))) if seeds is None else list(seeds)
    if not progs:
        return []
    fails = _check(progs, envs, seeds)
    if not any(f.kind in ("ShapeError", "JdiscError") and "jax.export could not trace" in
               f.message for fl in fails for f in fl):    # JdiscError: jax's own TypeError
        return fails
    ok = [i for i, p in enumerate(progs) if exportable(p)]
    if len(ok) == len(progs):
        return fails
    out: list[list[Failure]] = [[] for _ in progs]
    for i, fl in zip(ok, check([progs[i] for i in ok], envs, [seeds[i] for i in ok])):
        out[i] = fl
    return out


@contextlib.contextmanager
def _environment(pieces: int):
    """Donated buffers of any size are reused (jdisc's default starts at 1 MiB), so that the
    small fuzz programs run in place wherever the memory plan allows; with `pieces`, every
    kernel loop of more than one row runs in that many pieces (JDISC_SPLIT_PIECES)."""
    new = {"JDISC_DONATE_MIN_BYTES": "0", "JDISC_SPLIT_PIECES": str(pieces) if pieces else None}
    old = {k: os.environ.get(k) for k in new}
    try:
        for k, v in new.items():
            _set(k, v)
        yield
    finally:
        for k, v in old.items():
            _set(k, v)


def _set(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _check(progs, envs, seeds) -> list[list[Failure]]:
    import jdisc
    typings = [infer(p, envs) for p in progs]
    offsets, fns, k = [], [], 0
    for p in progs:
        offsets.append(k)
        k += p.n_in
        fns.append(make_fn(p))

    def fn(*xs):
        out = []
        for p, off, f in zip(progs, offsets, fns):
            out += f(*xs[off:off + p.n_in])
        return tuple(out)

    axes = sum((dynamic_axes(p) for p in progs), ())
    # every input donated and passed as a jax.Array: where the memory plan lets a result take
    # an input's buffer, the program runs in place, and any wrong aliasing shows as a mismatch.
    # No bridge, whatever the environment (program_fuzz.py runs outside pytest's conftest):
    # the first size is jdisc's program too, and the compile is done when `compiles` is read.
    jf = jdisc.jit(fn, dynamic_axes=axes, donate_argnums=tuple(range(len(axes))), bridge=False)
    fails: list[list[Failure]] = [[] for _ in progs]
    for env in envs:
        per_prog = [make_inputs(p, env, s) for p, s in zip(progs, seeds)]
        args = sum(per_prog, [])
        try:
            want = reference(fn, args)
        except Exception:                         # jax refuses this size: nothing to compare
            continue
        try:
            with _environment(split_pieces(seeds[0])):      # read when the library loads
                got = jf(*[jax.numpy.asarray(a) for a in args])
        except Exception as err:
            if type(err).__name__ == "ShapeError" and 0 in env.values() and jf.stats()["compiles"]:
                # a clear refusal of a size-0 call that jax.jit runs: recorded, as in
                # fuzz_support (SizeZeroRefusal), not failed; the other sizes still count
                for fl in fails:
                    fl.append(Failure("size0", f"ShapeError: {err}"[:2000], env))
                continue
            for fl in fails:
                fl.append(Failure(type(err).__name__, f"{err}"[:2000], env))
            return fails
        _compare_outputs(progs, typings, per_prog, got, want, env, fails, "mismatch", "")
        _check_traced(jf, progs, typings, per_prog, want, env, fails)
    if jf.stats()["compiles"] != 1:
        for fl in fails:
            fl.append(Failure("compiles", f"{jf.stats()}"))
    return fails


def _check_traced(jf, progs, typings, per_prog, want, env, fails) -> None:
    """The same jdisc function called inside a jax trace (`jax.jit(jf)`: its program embedded
    through XLA's FFI, its results in XLA's buffers, nothing donated), against the same
    reference; an output already found wrong in the eager call is not reported again."""
    try:
        got = jax.jit(jf)(*[jax.numpy.asarray(a) for p in per_prog for a in p])
    except Exception as err:                          # noqa: BLE001 - blamed on every program
        for fl in fails:
            fl.append(Failure(f"traced {type(err).__name__}", f"inside jax.jit: {err}"[:2000],
                              env))
        return
    _compare_outputs(progs, typings, per_prog, got, want, env, fails, "traced",
                     " inside jax.jit")


def _compare_outputs(progs, typings, per_prog, got, want, env, fails, kind: str,
                     where: str) -> None:
    """Each program's outputs in `got` (the batch's, in order) against `want`: a difference is
    `kind`, unless it is jax.export's size at a size 0 ("size0") or jax.jit's own ("xla", the
    tie-breaker); an output already found wrong is not reported again."""
    j = 0
    for i, (p, t) in enumerate(zip(progs, typings)):
        for n, o in enumerate(p.outputs):
            tol = tolerance(t.facts[o], t.types[o].dtype)
            msg, found = compare(got[j], want[j], tol), kind
            if msg and np.shape(got[j]) != np.shape(want[j]) and 0 in env.values() and \
                    np.shape(got[j]) == tuple(at(d, env) for d in t.types[o].shape):
                # the exported program's own size at this env: jax.export simplified it
                # assuming every dim >= 1 (x[:1] of a dim a has the static size 1)
                found, msg = "size0", f"jax.export's size {t.types[o].shape}: {msg}"
            elif msg:
                found, msg = _tie_break(p, per_prog[i], n, got[j], want[j], tol, msg)
                found = kind if found == "mismatch" else found
            if msg and not any(f.output == n for f in fails[i]):
                fails[i].append(Failure(found, f"output {n} at {env}{where}: {msg}", env, n))
            j += 1


def _tie_break(prog, args, n, got, want, tol, msg):
    """("xla", ...) where jax.jit's output n disagrees with the same program run op by op and
    jdisc's agrees (XLA:CPU's fusions have been wrong: an in-place dynamic_update_slice whose
    update is a slice of its own operand, CHANGELOG.md 2026-12-07); else ("mismatch", msg)."""
    try:
        eager = op_by_op(prog, args)[n]
    except Exception:                                 # noqa: BLE001 - no tie-breaker, then
        return "mismatch", msg
    if compare(got, eager, tol) is None and compare(want, eager, tol) is not None:
        return "xla", f"jax.jit disagrees with jax op by op, which jdisc matches: {msg}"
    return "mismatch", msg


def exportable(prog: Program) -> bool:
    """jax.export takes it (jdisc's front end): lowering checks some symbolic sizes that
    tracing alone (the generator's eval_shape) does not."""
    try:
        jax.export.export(jax.jit(make_fn(prog)), platforms=("cpu",))(
            *[input_type(i) for i in prog.inputs])
        return True
    except Exception:
        return False


def is_error(fails) -> bool:
    return any(f.kind not in NOT_ERRORS for fl in fails for f in fl)
