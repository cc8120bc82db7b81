"""Zoo: equinox models (random weights, tiny sizes) under jdisc vs jax.jit.

Equinox layers act on one example; the models jax.vmap them over the batch. A model becomes a
pure function through eqx.partition / eqx.combine: `fn(params, *inputs)`.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_GEMM = 2e-5: f32 GEMMs/convolutions of K <= 72 terms in another summation order
  (~sqrt(K) ulp ~ 5e-7), jdisc's own exp (softmax), LayerNorm/GroupNorm rescaling by a few x;
  2e-5 leaves ~10x margin (as tests/test_models.py).
* TOL_RECURRENT = 2e-5: an LSTM scan; contractive gates, so rounding does not compound
  (measured in tests/test_control_flow.py).
"""

import jax
import jax.numpy as jnp
import pytest

eqx = pytest.importorskip("equinox")

from zoo_support import (BATCH_HW, BATCH_ONLY, BATCH_SEQ, check_model, cheap_random, normal,
                         padding_mask, to_numpy)

TOL_GEMM = 2e-5
TOL_RECURRENT = 2e-5
D, HEADS = 16, 2


def pure(make):
    """(params, static) of a model built under eqx.filter_jit (one XLA compile), with cheap
    random numbers."""
    with cheap_random():
        model = eqx.filter_jit(make)()
    params, static = eqx.partition(model, eqx.is_array)
    return to_numpy(params), static


class RopeEncoderLayer(eqx.Module):
    """eqx.nn.MultiheadAttention with eqx.nn.RotaryPositionalEmbedding applied to the query and
    key heads (process_heads), a key-padding mask, pre-LayerNorm and an eqx.nn.MLP."""
    attn: eqx.nn.MultiheadAttention
    rope: eqx.nn.RotaryPositionalEmbedding
    ln1: eqx.nn.LayerNorm
    ln2: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.attn = eqx.nn.MultiheadAttention(HEADS, D, key=k1)
        self.rope = eqx.nn.RotaryPositionalEmbedding(D // HEADS)
        self.ln1, self.ln2 = eqx.nn.LayerNorm(D), eqx.nn.LayerNorm(D)
        self.mlp = eqx.nn.MLP(D, D, 2 * D, depth=1, activation=jax.nn.gelu, key=k2)

    def __call__(self, x, pad):                        # x [S, D], pad [S]
        def process_heads(q, k, v):                     # [S, heads, D/heads]
            per_head = jax.vmap(self.rope, in_axes=1, out_axes=1)
            return per_head(q), per_head(k), v

        mask = jnp.broadcast_to(pad[None, :] > 0, (x.shape[0], x.shape[0]))   # keys only
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h, mask=mask, process_heads=process_heads)
        return x + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x))


def test_equinox_rope_encoder(rng):
    params, static = pure(lambda: RopeEncoderLayer(jax.random.PRNGKey(0)))

    def fn(params, x, pad):
        return jax.vmap(eqx.combine(params, static))(x, pad)

    # S static: eqx.nn.RotaryPositionalEmbedding builds its sin/cos table from float(seq_len)
    # (a Python float of the length), which jax.export cannot trace with a symbolic S.
    S = 9
    check_model(fn, (None, {0: "B"}, {0: "B"}),
                lambda B: (params, normal(rng, B, S, D), padding_mask(rng, B, S)),
                BATCH_ONLY, TOL_GEMM, what="eqx RoPE encoder", trace_first=True)


class CNN(eqx.Module):
    """Conv2d (padding 1), GroupNorm, strided MaxPool2d with padding, a strided Conv2d with
    padding, AvgPool2d, global mean and a Linear head (NCHW, one example)."""
    conv1: eqx.nn.Conv2d
    norm: eqx.nn.GroupNorm
    pool: eqx.nn.MaxPool2d
    conv2: eqx.nn.Conv2d
    avg: eqx.nn.AvgPool2d
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(3, 8, 3, padding=1, key=k1)
        self.norm = eqx.nn.GroupNorm(2, 8)
        self.pool = eqx.nn.MaxPool2d(3, stride=2, padding=1)
        self.conv2 = eqx.nn.Conv2d(8, 8, 3, stride=2, padding=1, key=k2)
        self.avg = eqx.nn.AvgPool2d(2, stride=1, padding=((0, 1), (0, 1)))
        self.head = eqx.nn.Linear(8, 10, key=k3)

    def __call__(self, x):                             # [3, H, W]
        x = self.pool(jax.nn.relu(self.norm(self.conv1(x))))
        x = self.avg(jax.nn.relu(self.conv2(x)))
        return self.head(x.mean(axis=(1, 2)))


def test_equinox_cnn_groupnorm_pools(rng):
    params, static = pure(lambda: CNN(jax.random.PRNGKey(1)))

    def fn(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    check_model(fn, (None, {0: "B", 2: "H", 3: "W"}),
                lambda B, H, W: (params, normal(rng, B, 3, H, W)), BATCH_HW, TOL_GEMM,
                what="eqx CNN")


class LSTMTagger(eqx.Module):
    """eqx.nn.LSTMCell over time with lax.scan (one example), then a Linear per step."""
    cell: eqx.nn.LSTMCell
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.cell = eqx.nn.LSTMCell(6, 12, key=k1)
        self.head = eqx.nn.Linear(12, 4, key=k2)

    def __call__(self, xs):                            # [S, 6]
        def step(carry, x):
            carry = self.cell(x, carry)
            return carry, carry[0]

        init = (jnp.zeros(12, xs.dtype), jnp.zeros(12, xs.dtype))
        _, hs = jax.lax.scan(step, init, xs)
        return jax.vmap(self.head)(hs)


def test_equinox_lstm_scan(rng):
    params, static = pure(lambda: LSTMTagger(jax.random.PRNGKey(2)))

    def fn(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    check_model(fn, (None, {0: "B", 1: "S"}), lambda B, S: (params, normal(rng, B, S, 6)),
                BATCH_SEQ, TOL_RECURRENT, what="eqx LSTM")
