"""Batches: check, isolate, shrink, report. `run_batches` generates and checks batches in
worker processes, finds the culprit of an error by bisection (`check_programs`) and shrinks the
failing programs (`Finding`: one failing program and its repro)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from typing import Callable

from .check import NOT_ERRORS, is_error
from .facts import Failure, Invalid, Program
from .generator import OPS_RANGES, batch_seeds
from .printer import source
from .shrink import same_failure, shrink
from .worker import Crash, Worker


@dataclasses.dataclass
class Finding:
    seed: int                  # the batch's seed
    index: int                 # the program's index in its batch
    failure: Failure
    program: Program
    envs: list
    shrunk: Program | None = None
    shrunk_envs: list | None = None
    repro: str = ""

    def report(self) -> str:
        prog = self.shrunk or self.program
        envs = self.shrunk_envs or ([self.failure.env] if self.failure.env else self.envs)
        head = (f"program {self.index} of batch seed {self.seed}: {self.failure.kind}: "
                f"{self.failure.message[:600]}")
        note = "" if self.shrunk else " (not shrunk)"
        # typed at every size it was checked at: at the failing size alone, a program the
        # generator made may not be well defined (Invalid), as its facts depend on the sizes
        repro = self.repro or source(prog, envs[0], self.input_seed,
                                     typing_envs=self.shrunk_envs or self.envs)
        return f"{head}\n--- repro{note} ({prog.size()} ops):\n{repro}"

    @property
    def input_seed(self) -> int:
        return self.seed * 1000 + self.index


def _run_alone(worker, progs, seeds, idx, envs):
    try:
        return worker.check([progs[i] for i in idx], envs, [seeds[i] for i in idx])
    except Crash as err:
        return [[Failure("crash", str(err))] for _ in idx]


def _blame_refusals(run, i, fails):
    """A size-0 refusal stops the batch's call at that size, so it is recorded for every
    program: check each such program alone at that size."""
    refused = [f for f in fails if f.kind == "size0"]
    if not refused:
        return fails
    rest = [f for f in fails if f.kind != "size0"]
    return rest + run([i], [refused[0].env])[0]     # at that size, alone: refused or compared


def check_programs(worker: Worker, progs: list[Program], envs: list[dict], seeds: list[int]
                   ) -> list[list[Failure]]:
    """Failures per program, from one check of them all when nothing raises. A jdisc error or
    a crash stops a check, so its culprit is found by bisection (checks of halves at the size
    where it happened), and the rest checked again."""
    result: list[list[Failure]] = [[] for _ in progs]

    def run(idx, at_envs):
        try:
            return worker.check([progs[i] for i in idx], at_envs, [seeds[i] for i in idx])
        except Crash as err:
            return [[Failure("crash", str(err))] for _ in idx]
        except Invalid:
            if at_envs is envs:
                raise
            # not well defined at that size alone (the facts of a program depend on every
            # size it is checked at): at the batch's sizes, which the generator checked
            return run(idx, envs)

    todo = list(range(len(progs)))
    while todo:
        fails = run(todo, envs)
        if not is_error(fails):
            for i, fl in zip(todo, fails):
                result[i] = _blame_refusals(run, i, fl)
            return result
        first = next(f for fl in fails for f in fl
                     if f.kind not in NOT_ERRORS)
        at_envs = [first.env] if first.env else envs
        idx = todo
        while len(idx) > 1:
            half = idx[:len(idx) // 2]
            part = run(half, at_envs)
            if is_error(part):
                idx, fails = half, part
            else:
                idx = idx[len(idx) // 2:]
                fails = None
        culprit = idx[0]
        fails = fails or run([culprit], at_envs)
        # a program that fails only with others is reported with what the batch raised
        result[culprit] = fails[0] if is_error(fails) else [first]
        todo.remove(culprit)
    return result


def still_fails_like(worker: Worker, failure: Failure, input_seed: int) -> Callable:
    def pred(prog, envs):
        try:
            fails = worker.check([prog], envs, [input_seed])[0]
        except Crash:
            return failure.kind == "crash"
        except Invalid:             # a candidate not well defined at these sizes
            return False
        return any(same_failure(f, failure) for f in fails)
    return pred


def run_batches(seeds, n_programs: int, ranges=OPS_RANGES, workers: int = 2,
                shrink_budget_s: float = 240, shrink_each_s: float = 90, log=None,
                want_shrink=lambda fd: True, shrink_refusals=False, weights: dict | None = None
                ) -> dict[int, list[Finding]]:
    """Findings per batch seed. Batches are generated and checked by `workers` worker
    processes in parallel; failing programs are then isolated and shrunk (at most
    shrink_each_s each, shrink_budget_s in all, those want_shrink accepts; the rest are
    reported unshrunk)."""
    pool = [Worker() for _ in range(max(1, workers))]
    free = list(pool)
    lock = threading.Lock()

    def one(seed):
        with lock:
            w = free.pop()
        try:
            progs, envs, fails = w.batch(seed, n_programs, ranges, weights)
            seeds_ = batch_seeds(seed, n_programs)
            if fails is None:                    # an error or crash: find the culprits
                fails = check_programs(w, progs, envs, seeds_)
            else:
                fails = [_blame_refusals(lambda idx, e: _run_alone(w, progs, seeds_, idx, e),
                                         i, fl) for i, fl in enumerate(fails)]
            return seed, progs, envs, fails
        finally:
            with lock:
                free.append(w)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(len(pool)) as ex:
        for seed, progs, envs, fails in ex.map(one, seeds):
            results[seed] = [Finding(seed, i, sorted(fl, key=lambda f: f.kind in ("size0", "xla"))[0],
                                     progs[i], envs) for i, fl in enumerate(fails) if fl]
            if log:
                log(seed, results[seed])
    deadline = time.monotonic() + shrink_budget_s
    todo = [fd for seed in seeds for fd in results[seed] if want_shrink(fd)
            and (fd.failure.kind != "size0" or shrink_refusals)]

    def shrink_one(fd):
        left = deadline - time.monotonic()
        if left > 0:
            with lock:
                w = free.pop()
            try:
                shrink_finding(w, fd, min(left, shrink_each_s))
            finally:
                with lock:
                    free.append(w)
    with concurrent.futures.ThreadPoolExecutor(len(pool)) as ex:
        list(ex.map(shrink_one, todo))
    for w in pool:
        w.close()
    return results


def shrink_finding(worker: Worker, fd: Finding, budget_s: float) -> Finding:
    f = fd.failure
    first = [f.env] + [e for e in fd.envs if e != f.env] if f.env in fd.envs else fd.envs
    fd.shrunk, fd.shrunk_envs, _ = shrink(fd.program, first, still_fails_like(
        worker, f, fd.input_seed), budget_s)
    return fd
