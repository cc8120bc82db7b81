"""Whole-program fuzzing for jdisc: random JAX programs over symbolic dims, run by jdisc and by
jax.jit, shrunk to a few-line standalone repro when they disagree.

A program is a DAG of nodes (`Node`: an op of the `OPS` table, operand value ids, parameters;
loop and branch bodies are programs of their own) over inputs whose shapes mix the symbolic dims
`a`, `b` and small static sizes. This module re-exports the fuzzer's public names; the pieces
live in the package `fuzzing` next to it, top to bottom:

* `facts`: dims, value facts (`Facts`: an interval and a bound on the f32 rounding error, so a
  program's outputs carry a small, sound tolerance) and the program representation (`Input`,
  `Node`, `Program`, `Failure`: the classes pickled between processes, in one module);
* `elementwise`, `ops`, `control_ops`: the op table (`OPS`): per op, how the interpreter runs
  it, how the printer prints it and how its facts follow from its operands';
* `infer` (shapes, facts, validity at every tested size; `make_fn`, the interpreter),
  `printer` (`source`: a standalone script), `check` (jdisc vs jax.jit, one compile for a
  batch), `generator` and `generator_shapes` (`Generator`, `random_batch`);
* `worker` (`Worker`: checks in a subprocess, so that a crash fails a check, not the caller),
  `shrink`, `batches` (`check_programs` finds the culprit of an error by bisection;
  `run_batches`);
* a command line for long runs (here): `python tests/program_fuzz.py --n 2000 --findings FILE`.
"""

from __future__ import annotations

import json
import os
import time

from fuzzing.batches import Finding, check_programs, run_batches, shrink_finding, still_fails_like
from fuzzing.check import (check, compare, exportable, is_error, op_by_op, reference,
                            tolerance)
from fuzzing.control_ops import CONTROL, OPS
from fuzzing.facts import (BOOL, F32, I32, NAMES, SIZES, SYM, Facts, Failure, Input, Invalid, Node,
                           Program, Typing, at, deps, same)
from fuzzing.generator import (FIRST_WEIGHTS, GEN_WEIGHTS, OPS_RANGES, Generator, batch_seeds,
                               draw_envs, random_batch, random_program)
from fuzzing.infer import dynamic_axes, infer, input_facts, input_type, make_fn, run_program
from fuzzing.ops import Ctx, Op
from fuzzing.printer import function_source, input_code, make_inputs, source
from fuzzing.shrink import dce, same_failure, shrink, signature
from fuzzing.worker import Crash, Worker, serve

__all__ = [
    "BOOL", "CONTROL", "F32", "FIRST_WEIGHTS", "GEN_WEIGHTS", "I32", "NAMES", "OPS", "OPS_RANGES",
    "SIZES", "SYM", "at", "batch_seeds", "check", "check_programs", "compare", "Crash", "Ctx",
    "dce", "deps", "draw_envs", "dynamic_axes", "exportable", "Facts", "Failure", "Finding",
    "function_source", "Generator", "infer", "Input", "input_code", "input_facts", "input_type",
    "Invalid", "is_error", "main", "make_fn", "make_inputs", "Node", "Op", "op_by_op", "Program",
    "random_batch", "random_program", "reference", "run_batches", "run_program", "same",
    "same_failure", "serve", "shrink", "shrink_finding", "signature", "source",
    "still_fails_like", "tolerance", "Typing", "Worker",
]


def main(argv=None):
    """Long runs: python tests/program_fuzz.py --n 2000 [--seed S] [--findings FILE]."""
    import argparse
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--n", type=int, default=200, help="programs")
    ap.add_argument("--batch", type=int, default=8, help="programs per jdisc compile")
    ap.add_argument("--seed", type=int, default=None, help="first batch seed (default random)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--shrink-s", type=float, default=90, help="per failing program")
    ap.add_argument("--findings", default=None, help="append each finding here (markdown)")
    ap.add_argument("--log", default=None, help="append one JSON line per batch here")
    ap.add_argument("--ops", choices=("all", "first"), default="all",
                    help="first: the op table up to 2026-12-07, to regenerate a batch seed "
                         "recorded before then")
    args = ap.parse_args(argv)
    first = args.seed if args.seed is not None else int.from_bytes(os.urandom(3), "little")
    t0, done, failed = time.time(), 0, 0
    shrunk_per_signature: dict[str, int] = {}

    def want_shrink(fd):            # a long run shrinks a few of each kind of failure
        sig = signature(fd.failure)
        shrunk_per_signature[sig] = shrunk_per_signature.get(sig, 0) + 1
        return shrunk_per_signature[sig] <= (12 if fd.failure.kind == "mismatch" else 3)
    chunk = 4 * max(1, args.workers)
    for start in range(first, first + -(-args.n // args.batch), chunk):
        seeds = list(range(start, min(start + chunk, first + -(-args.n // args.batch))))

        def log(seed, fds):
            nonlocal done, failed
            done += args.batch
            failed += len(fds)
            print(f"[{time.time() - t0:.0f}s] batch {seed}: {done} programs, {failed} failing",
                  flush=True)
            if args.log:
                with open(args.log, "a") as fh:
                    fh.write(json.dumps({"seed": seed, "n": args.batch, "failing": [
                        (fd.index, fd.failure.kind, fd.failure.message[:300]) for fd in fds]})
                             + "\n")
        results = run_batches(seeds, args.batch, workers=args.workers, log=log,
                              shrink_budget_s=1e9, shrink_each_s=args.shrink_s,
                              want_shrink=want_shrink, shrink_refusals=True,
                              weights=FIRST_WEIGHTS if args.ops == "first" else None)
        for seed in seeds:
            for fd in results[seed]:
                text = (f"\n## batch seed {seed}, program {fd.index}: {signature(fd.failure)}"
                        f"\n\n```\n{fd.report()}```\n")
                print(text, flush=True)
                if args.findings:
                    with open(args.findings, "a") as fh:
                        fh.write(text)


if __name__ == "__main__":
    # run as a script, tests/ is sys.path[0], so `fuzzing` imports as it does in the workers:
    # the pickled programs and failures name their classes (fuzzing.facts) the same way in both
    main()
