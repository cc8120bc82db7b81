"""Helpers for the model zoo: run a real model under jdisc at several shapes, check that one jdisc
compile serves them all and that no XLA compile happens during the jdisc calls, then compare
every output leaf with jax.jit of the same function at the same shapes.

Each test builds its model with random weights from a tiny config (nothing is downloaded), turns
it into a pure function `fn(params, *inputs)` and calls `check_model`.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import jax
import jax.monitoring
import numpy as np

from conftest import differential


def cheap_random():
    """Context for building models: jax's random numbers come from the "unsafe_rbg" generator
    (XLA's RngBitGenerator). Weights only need to be random; threefry, the default, costs XLA
    3-4 s of CPU to compile per initialiser program on this machine, unsafe_rbg ~0.3 s."""
    return jax.default_prng_impl("unsafe_rbg")


def init_params(init, *example):
    """`init(key, *example)` of a flax/haiku-style model, jitted (one XLA compile instead of one
    per initialiser op) under cheap_random(), as host arrays."""
    with cheap_random():
        return to_numpy(jax.jit(init)(jax.random.key(0), *example))


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % k for k in range(2, int(n ** 0.5) + 1))


def check_shape_plan(shapes: list[dict]) -> None:
    """Every dynamic dim takes three or more values, among them 1 and a prime."""
    for name in shapes[0]:
        values = {s[name] for s in shapes}
        assert len(values) >= 3 and 1 in values and any(map(_is_prime, values)), \
            f"dim {name!r} takes {sorted(values)}: want >= 3 values including 1 and a prime"


def to_numpy(tree):
    """Host copies of every leaf, so that the calls under test start from plain arrays."""
    return jax.tree_util.tree_map(np.asarray, tree)


def check_model(fn, dynamic_axes, make_args, shapes, tol, *, constraints=(), what=None,
                trace_first=False):
    """jdisc.jit(fn) against jax.jit(fn) at each shape in `shapes` (dicts of dim values, passed to
    `make_args(**shape)`), with exactly one jdisc compile and no XLA compile during the jdisc calls.

    All arguments are made before counting starts (making them may run XLA). `trace_first`:
    trace fn once before counting, for models that compute constants eagerly at trace time and
    cache them (eqx.nn.RotaryPositionalEmbedding's sin/cos table): that is XLA work of the
    model's, not of the jdisc calls. Returns the jdisc function for further inspection."""
    check_shape_plan(shapes)
    arg_sets = {str(s): make_args(**s) for s in shapes}
    if trace_first:
        jax.eval_shape(fn, *next(iter(arg_sets.values())))
    what = what or getattr(fn, "__name__", "model")
    jf = differential(fn, dynamic_axes, arg_sets, tol, constraints=constraints, what=what)
    if os.environ.get(TIMES_ENV):
        record_times(jf, fn, make_args, shapes, what, os.environ[TIMES_ENV])
    return jf


# benchmarks/zoo_speed.py sets this to a file: check_model then also times each model (after
# its checks, which stay the same), jdisc against jax.jit, one JSON line per shape. Timing
# only: nothing is asserted about speed.
TIMES_ENV = "JDISC_ZOO_TIMES"


def _next_prime(n: int) -> int:
    while not _is_prime(n):
        n += 1
    return n


def _prev_prime(n: int) -> int:
    while n > 2 and not _is_prime(n):
        n -= 1
    return n


def timing_shapes(shapes: list[dict]) -> list[tuple[str, list[dict]]]:
    """The shapes record_times tries: the plan's largest ("tiny", the test's own sizes), and
    "large", every dim at a prime near 8x its largest value, else 4x or 2x, else the prime
    below 2x (the first the model takes: a model may bound a dim)."""
    top = {name: max(s[name] for s in shapes) for name in shapes[0]}
    tiny = max(shapes, key=lambda s: (sum(s.values()), str(s)))
    large = [{name: _next_prime(f * v) for name, v in top.items()} for f in (8, 4, 2)]
    large.append({name: _prev_prime(2 * v) for name, v in top.items()})
    return [("tiny", [tiny]), ("large", large)]


def _per_call(f, args, budget: float) -> tuple[float, int]:
    """Seconds per call of f(*args), results ready, over calls taking about `budget`, and the
    number of calls."""
    n, t0 = 0, time.perf_counter()
    while True:
        jax.block_until_ready(f(*args))
        n += 1
        took = time.perf_counter() - t0
        if took >= budget:
            return took / n, n


def record_times(jf, fn, make_args, shapes, what: str, path: str, rounds: int = 5) -> None:
    """Append jdisc's and jax.jit's time per call of each timing shape to `path` (JSON lines):
    both warmed at the shape first (jax.jit's compile is not timed, nor jdisc's, already done),
    then `rounds` alternated rounds of about 40 ms each; medians. A shape that either side
    refuses is recorded as refused, with the error's first line."""
    ref = jax.jit(fn)
    for kind, candidates in timing_shapes(shapes):
        row = {"model": what, "kind": kind}
        for shape in candidates:
            try:
                args = jax.device_put(make_args(**shape))
                jax.block_until_ready((ref(*args), jf(*args)))     # both warmed at the shape
            except Exception as e:      # noqa: BLE001 - recorded; the next candidate is tried
                row["refused"] = f"{shape}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                continue
            mine, theirs = [], []
            profiled = os.environ.get("JDISC_PROFILE", "") not in ("", "0")
            before = jf.profile(*args) if profiled else {}
            calls = 0
            for _ in range(rounds):
                t, n = _per_call(jf, args, 0.04)
                mine.append(t)
                calls += n
                theirs.append(_per_call(ref, args, 0.04)[0])
            if profiled:    # the five kernels that took longest, seconds per call (roughly)
                after = jf.profile(*args)
                top = sorted(after, key=lambda k: before[k] - after[k])[:5]
                row["kernels"] = {k: (after[k] - before[k]) / calls for k in top}
            row.pop("refused", None)
            row.update(shape=shape, jdisc_s=statistics.median(mine),
                       xla_s=statistics.median(theirs),
                       compiles=jf.stats()["compiles"])
            row["ratio"] = row["jdisc_s"] / row["xla_s"]
            break
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")


def normal(rng, *shape, scale=1.0, dtype=np.float32):
    return (scale * rng.standard_normal(shape)).astype(dtype)


def lengths(rng, batch: int, seq: int) -> np.ndarray:
    """Valid lengths per row for a padding mask: row 0 is full, the others random in [1, seq]."""
    out = rng.integers(1, seq + 1, size=batch)
    out[0] = seq
    return out


def padding_mask(rng, batch: int, seq: int) -> np.ndarray:
    """[batch, seq] int32 mask, 1 for real tokens then 0 for padding (each row >= 1 real)."""
    return (np.arange(seq)[None, :] < lengths(rng, batch, seq)[:, None]).astype(np.int32)


# Standard shape plans: every dim takes 1, a prime and one more value.
BATCH_ONLY = [dict(B=1), dict(B=3), dict(B=7)]
BATCH_SEQ = [dict(B=1, S=7), dict(B=2, S=1), dict(B=3, S=5)]
BATCH_HW = [dict(B=1, H=7, W=5), dict(B=2, H=1, W=1), dict(B=3, H=5, W=11)]
