"""Helpers for the model zoo: run a real model under jdisc at several shapes, check that one jdisc
compile serves them all and that no XLA compile happens during the jdisc calls, then compare
every output leaf with jax.jit of the same function at the same shapes.

Each test builds its model with random weights from a tiny config (nothing is downloaded), turns
it into a pure function `fn(params, *inputs)` and calls `check_model`.
"""

from __future__ import annotations

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
    return differential(fn, dynamic_axes, arg_sets, tol, constraints=constraints,
                        what=what or getattr(fn, "__name__", "model"))


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
