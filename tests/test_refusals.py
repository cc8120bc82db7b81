"""Programs jax.jit runs that jdisc used to refuse: variadic reduce_window with a symbolic
window, and gathers / slices whose slice sizes exceed a zero-sized operand dim while the result
is empty. Each is compiled once and compared with jax.jit at several values of every dim."""

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from jax import lax

import jdisc
from conftest import check_against_jax

NONZERO = (1, 2, 3, 7, 30)          # jax.jit refuses a window of size 0
WITH_ZERO = (0, 1, 2, 5, 11)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _i32(rng, hi, *shape):
    return rng.integers(0, max(hi, 1), shape).astype(np.int32)


def _sum_and_max(x, window, padding="VALID"):
    return lax.reduce_window((x, x), (0.0, -jnp.inf),
                             lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])),
                             window, (1, 1), padding)


def _argmax_window(x, window):
    # (value, index) pairs: the variadic form jax uses for an argmax over windows
    idx = lax.broadcasted_iota(jnp.int32, x.shape, 1)

    def better(a, b):   # (lax.select: jnp.where's call cannot be lowered in this region)
        take_b = (b[0] > a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))
        return lax.select(take_b, b[0], a[0]), lax.select(take_b, b[1], a[1])
    return lax.reduce_window((x, idx), (-jnp.inf, jnp.int32(2**31 - 1)), better, window,
                             (1, 1), "VALID")


VARIADIC = [
    ("sum_and_max_whole_row", lambda x: _sum_and_max(x, (2, x.shape[1])), {1: "n"}),
    ("sum_and_max_same", lambda x: _sum_and_max(x, (2, x.shape[1]), "SAME"), {1: "n"}),
    ("sum_and_max_half_row", lambda x: _sum_and_max(x, (1, (x.shape[1] + 1) // 2)), {1: "n"}),
    ("argmax_window", lambda x: _argmax_window(x, (3, x.shape[1])), {1: "n"}),
    ("two_dims", lambda x: _sum_and_max(x, (x.shape[0], x.shape[1])), {0: "m", 1: "n"}),
]


@pytest.mark.parametrize("name, fn, axes", VARIADIC, ids=[v[0] for v in VARIADIC])
def test_variadic_reduce_window_with_a_symbolic_window(rng, name, fn, axes):
    check_against_jax(fn, (axes,), lambda n: (_f32(rng, 4 if 0 not in axes else n + 1, n),),
                      NONZERO, tol=1e-5)


def test_one_operand_reduce_window_with_a_symbolic_window_still_works(rng):
    f = lambda x: lax.reduce_window(x, 0.0, lax.add, (2, x.shape[1]), (1, 1), "VALID")
    check_against_jax(f, ({1: "n"},), lambda n: (_f32(rng, 4, n),), NONZERO, tol=1e-5)


EMPTY = [
    # jnp.take_along_axis: a gather with batching dims, slice size 1 on the batch dim b
    ("take_along_axis_2", lambda x, i: jnp.take_along_axis(x, i, axis=2),
     ({0: "b"}, {0: "b"}), lambda rng, b: (_f32(rng, b, 3, 4), _i32(rng, 4, b, 3, 2))),
    ("take_along_axis_1", lambda x, i: jnp.take_along_axis(x, i, axis=1),
     ({0: "b"}, {0: "b"}), lambda rng, b: (_f32(rng, b, 3, 4), _i32(rng, 3, b, 2, 4))),
    ("take_along_axis_trailing_batch", lambda x, i: jnp.take_along_axis(x, i, axis=0),
     ({1: "b"}, {1: "b"}), lambda rng, b: (_f32(rng, 3, b), _i32(rng, 3, 2, b))),
    ("take_along_axis_two_dims", lambda x, i: jnp.take_along_axis(x, i, axis=1),
     ({0: "b", 1: "n"}, {0: "b"}), lambda rng, b: (_f32(rng, b, b + 1), _i32(rng, b + 1, b, 3))),
    ("argmax_then_take", lambda x: jnp.take_along_axis(x, jnp.argmax(x, 1, keepdims=True), 1),
     ({0: "b"},), lambda rng, b: (_f32(rng, b, 6),)),
    ("reverse_by_gather", lambda x: x[::-1], ({0: "b"},), lambda rng, b: (_f32(rng, b, 7),)),
    ("fancy_indexing", lambda x, i: x[jnp.arange(x.shape[0]), i], ({0: "b"}, {0: "b"}),
     lambda rng, b: (_f32(rng, b, 4, 3), _i32(rng, 4, b))),
    ("vmap_dynamic_slice", jax.vmap(lambda r, i: lax.dynamic_slice(r, (i,), (2,))),
     ({0: "b"}, {0: "b"}), lambda rng, b: (_f32(rng, b, 5), _i32(rng, 5, b))),
    ("vmap_dynamic_update_slice",
     jax.vmap(lambda r, u, i: lax.dynamic_update_slice(r, u, (i,))),
     ({0: "b"}, {0: "b"}, {0: "b"}), lambda rng, b: (_f32(rng, b, 5), _f32(rng, b, 2),
                                                     _i32(rng, 5, b))),
    ("scatter_add_rows", lambda x, i, u: x.at[jnp.arange(x.shape[0]), i].add(u),
     ({0: "b"}, {0: "b"}, {0: "b"}), lambda rng, b: (_f32(rng, b, 4), _i32(rng, 4, b),
                                                     _f32(rng, b))),
    ("in_a_loop", lambda x, i: lax.fori_loop(0, 2, lambda k, c: c + jnp.take_along_axis(
        x, i, axis=2).sum(), jnp.zeros((), x.dtype)),
     ({0: "b"}, {0: "b"}), lambda rng, b: (_f32(rng, b, 3, 4), _i32(rng, 4, b, 3, 2))),
]


@pytest.mark.parametrize("name, fn, axes, make", EMPTY, ids=[e[0] for e in EMPTY])
def test_reads_that_exceed_an_empty_operand_are_legal_when_the_result_is_empty(
        rng, name, fn, axes, make):
    check_against_jax(fn, axes, lambda b: make(rng, b), WITH_ZERO, tol=1e-5)


def test_a_slice_size_that_exceeds_the_operand_is_still_an_error_when_reading(rng):
    # a non-empty result still needs slice sizes within the operand: a clear ShapeError
    f = jdisc.jit(lambda x, i: lax.dynamic_slice(x, (i, 0), (2, x.shape[1])),
                  dynamic_axes=({0: "b", 1: "n"}, None), constraints=("b >= 2",))
    assert f(_f32(rng, 3, 4), np.int32(1)).shape == (2, 4)
    prog = f.compiled_for(_f32(rng, 3, 4), np.int32(1)).program
    assert any("unless the result is empty" in c.shown for c in prog.checks)
    g = jdisc.jit(lambda x: x[jnp.arange(3), 0], dynamic_axes=({0: "b"},))
    assert g(_f32(rng, 5, 2)).shape == (3,)
    with pytest.raises(jdisc.ShapeError, match="slice size of axis 0 exceeds the operand"):
        g(_f32(rng, 0, 2))      # three rows of an empty operand: a non-empty result
