"""Differential tests: each model under jdisc.jit vs jax.jit at several shapes, one compile each.

Tolerances (bound on max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* 2e-6 for elementwise chains and row reductions: libm's tanhf/expf and XLA's vectorised
  approximations differ by a few ulp (f32 ulp ~ 6e-8 at 1.0), and sums of up to 1024 terms
  are added in a different order (error grows ~ sqrt(n) ulp).
* 2e-5 for GEMM models: each f32 dot of K terms (K up to 3072) differs by ~sqrt(K) ulp ~ 3e-6
  relative with a different BLAS blocking; the BERT layer chains 6 GEMMs and two LayerNorms,
  which rescale errors by up to ~3x.
"""

import jax
import numpy as np
import pytest

import jdisc
from jdisc.bench import workloads as W
from conftest import assert_close

# dims of 1, primes, and a few hundred
SHAPES_BS = [(1, 1), (1, 7), (2, 13), (3, 31), (1, 257), (2, 384)]


def run_differential(fn, dynamic_axes, make_args, shapes, tol, rng):
    jf = jdisc.jit(fn, dynamic_axes=dynamic_axes)
    ref = jax.jit(fn)
    for shape in shapes:
        args = make_args(*shape, rng)
        got, want = jf(*args), ref(*args)
        jax.tree_util.tree_map(
            lambda g, w: assert_close(g, w, tol, f"{fn.__name__} at {shape}"), got, want)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        assert all(isinstance(g, jax.Array) for g in jax.tree_util.tree_leaves(got))
    assert jf.stats()["compiles"] == 1
    return jf


def test_bert_layer(rng):
    wl = W.workloads()["W1"]
    run_differential(wl.fn, wl.dynamic_axes, wl.make_args,
                     [(1, 1), (2, 7), (3, 13), (1, 31), (2, 128), (1, 257)], 2e-5, rng)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_mlp(activation, rng):
    params = W.mlp_params()

    def fn(p, x):
        return W.mlp(p, x, activation)

    run_differential(fn, (None, {0: "N"}),
                     lambda b, s, r: (params, r.standard_normal((b * s, 512)).astype(np.float32)),
                     SHAPES_BS, 2e-5, rng)


def test_ln_gelu_residual_softmax(rng):
    wl = W.workloads()["W2"]
    run_differential(wl.fn, wl.dynamic_axes, wl.make_args, SHAPES_BS, 2e-6, rng)


def test_layer_norm(rng):
    p = W.ln_params(96)
    run_differential(lambda x, g, b: W.layer_norm(x, g, b), ({0: "B", 1: "S"}, None, None),
                     lambda b, s, r: (r.standard_normal((b, s, 96)).astype(np.float32) * 3 + 1,
                                      p["gamma"], p["beta"]),
                     SHAPES_BS, 2e-6, rng)


def test_softmax_dynamic_last_axis(rng):
    # the reduced axis itself is symbolic
    run_differential(W.softmax, ({0: "B", 1: "S"},),
                     lambda b, s, r: (r.standard_normal((b, s)).astype(np.float32) * 4,),
                     SHAPES_BS, 2e-6, rng)


def test_masked_mean(rng):
    def make(b, s, r):
        x = r.standard_normal((b, s, 64)).astype(np.float32)
        mask = (r.random((b, s)) < 0.6).astype(np.int32)
        return x, mask
    run_differential(W.masked_mean, ({0: "B", 1: "S"}, {0: "B", 1: "S"}), make,
                     SHAPES_BS, 2e-6, rng)


def test_mean_divides_by_dynamic_size(rng):
    # jnp.mean over a dynamic axis divides by the dimension variable: a dim used as data
    run_differential(lambda x: (x.mean(axis=1), x.reshape(-1).sum() / x.size),
                     ({0: "B", 1: "S"},),
                     lambda b, s, r: (r.standard_normal((b, s, 3)).astype(np.float32),),
                     SHAPES_BS, 2e-6, rng)


def test_int_and_bool_ops(rng):
    def fn(x, y):
        a = (x * 3 - y) // 2 + jax.numpy.arange(x.shape[1], dtype=x.dtype)
        b = jax.numpy.where(x > y, a, -a)
        return b, (x > 0) & (y < 2), jax.numpy.max(b, axis=1), b % 7

    def make(b, s, r):
        return (r.integers(-50, 50, (b, s)).astype(np.int32),
                r.integers(-3, 3, (b, s)).astype(np.int32))
    run_differential(fn, ({0: "B", 1: "S"}, {0: "B", 1: "S"}), make, SHAPES_BS, 0, rng)


def test_concat_slice_transpose_iota(rng):
    def fn(x):
        # lax.slice: numpy-style indexing of dynamic dims lowers to gather (not in this issue)
        first = jax.lax.slice(x, (0, 0), (x.shape[0], 1))
        evens = jax.lax.slice(x, (0, 0), x.shape, (1, 2))
        y = jax.numpy.concatenate([x, 2 * first, evens], axis=1)
        return y.T, jax.lax.slice_in_dim(y, 1, y.shape[1], axis=1) * 1.5, x * jax.numpy.arange(x.shape[1], dtype=x.dtype)

    run_differential(fn, ({0: "B", 1: "S"},),
                     lambda b, s, r: (r.standard_normal((b, s)).astype(np.float32),),
                     [(1, 1), (2, 7), (3, 13), (5, 2), (1, 300)], 0, rng)


def test_f64_where_x64_is_enabled(rng):
    # f64 goes through dgemm and the double libm; with x64 off jax canonicalises to f32
    with jax.enable_x64(True):
        def fn(x, w):
            return jax.numpy.tanh(x @ w).sum(axis=0)
        run_differential(fn, ({0: "N"}, None),
                         lambda b, s, r: (r.standard_normal((b * s, 8)),
                                          r.standard_normal((8, 5))),
                         SHAPES_BS[:4], 1e-12, rng)


def test_size_zero_and_one(rng):
    wl = W.workloads()["W1"]
    run_differential(wl.fn, wl.dynamic_axes, wl.make_args, [(0, 5), (1, 1), (3, 0)], 2e-5, rng)


def test_cnn_dynamic_batch_and_spatial_dims(rng):
    # direct conv + ReLU + max-pool + conv + global average; sums of <= 288 products
    p = W.cnn_params()
    run_differential(W.cnn, (None, {0: "B", 1: "H", 2: "W"}),
                     lambda b, s, r: (p, r.standard_normal((b, s, s + 3, 3)).astype(np.float32)),
                     [(1, 2), (2, 7), (3, 16), (1, 33)], 2e-5, rng)


def test_pairwise_energy_and_forces_in_a_periodic_box(rng):
    # W5: the energy sums N^2 pair terms (N <= 401: ~sqrt(1.6e5) ulp ~ 2.4e-5 relative at
    # worst in a different order), each force N terms
    wl = W.workloads()["W5"]

    def make(n, _, r):
        side = np.float32((n / 1.2) ** (1 / 3))
        return (r.random((n, 3)) * side).astype(np.float32), np.full(3, side, np.float32)
    run_differential(wl.fn, wl.dynamic_axes, make, [(1, 0), (2, 0), (3, 0), (37, 0), (401, 0)],
                     5e-5, rng)


def test_log_density_and_gradient_with_gathered_group_parameters(rng):
    # W6: sums over N <= 5000 points, and per group in the gradient
    wl = W.workloads()["W6"]
    run_differential(wl.fn, wl.dynamic_axes, wl.make_args, [(1, 1), (1, 2), (7, 1), (97, 1),
                                                            (5000, 1)], 2e-5, rng)


def test_decoder_step_with_a_growing_kv_cache(rng):
    # W7 (jdisc/bench/decode.py): the cache length T is the dynamic axis, from 0 (the first
    # token) up; GEMMs of K = 128..512 terms and a softmax over T + 1 positions
    from jdisc.bench import decode
    p = decode.params()

    def make(t, _, r):
        caches = r.standard_normal((2, decode.LAYERS, t, decode.D)).astype(np.float32)
        return p, p["embed"][int(r.integers(0, decode.VOCAB))], caches[0], caches[1]
    run_differential(decode.step, (None, None, {1: "T"}, {1: "T"}), make,
                     [(0, 0), (1, 0), (2, 0), (7, 0), (131, 0)], 2e-5, rng)
