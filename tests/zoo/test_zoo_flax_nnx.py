"""Zoo: flax.nnx models (random weights, tiny sizes) under jdisc vs jax.jit.

A module becomes a pure function through nnx.split / nnx.merge: `fn(state, *inputs)` merges the
graph definition with the state, calls the module and, for stateful layers (BatchNorm in train
mode), returns the updated state as well.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_GEMM = 2e-5: a few f32 GEMMs/convolutions of K <= 72 terms in another summation order
  (~sqrt(K) ulp ~ 5e-7), jdisc's own exp/logistic/rsqrt (<= 2 ulp), RMSNorm/BatchNorm rescaling
  by a few x; 2e-5 leaves ~10x margin (as tests/test_models.py).
* TOL_RECURRENT = 2e-5: a GRU scan; its gates are contractive, so rounding does not compound
  (measured in tests/test_control_flow.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

nnx = pytest.importorskip("flax.nnx")

from zoo_support import BATCH_HW, BATCH_SEQ, check_model, cheap_random, lengths, normal, to_numpy

TOL_GEMM = 2e-5
TOL_RECURRENT = 2e-5
VOCAB, D, HEADS, KV_HEADS = 32, 16, 4, 2
HEAD_DIM = D // HEADS


def rope(x, positions, base=10000.0):
    """Rotary position embedding over the last axis of x [B, S, H, Dh] (halves rotated)."""
    half = x.shape[-1] // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = positions[:, :, None, None].astype(jnp.float32) * freq      # [B, S, 1, half]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class LlamaBlock(nnx.Module):
    """RMSNorm, rotary embeddings, grouped-query causal attention (4 query heads sharing 2
    key/value heads) with per-row key lengths, SwiGLU MLP."""

    def __init__(self, rngs):
        self.norm1, self.norm2 = nnx.RMSNorm(D, rngs=rngs), nnx.RMSNorm(D, rngs=rngs)
        self.q = nnx.Linear(D, HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.kv = nnx.Linear(D, 2 * KV_HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.o = nnx.Linear(HEADS * HEAD_DIM, D, use_bias=False, rngs=rngs)
        self.gate = nnx.Linear(D, 2 * D, use_bias=False, rngs=rngs)
        self.up = nnx.Linear(D, 2 * D, use_bias=False, rngs=rngs)
        self.down = nnx.Linear(2 * D, D, use_bias=False, rngs=rngs)

    def __call__(self, x, lens):
        B, S = x.shape[:2]
        pos = jnp.broadcast_to(jnp.arange(S)[None], (B, S))
        h = self.norm1(x)
        q = rope(self.q(h).reshape(B, S, HEADS, HEAD_DIM), pos)
        k, v = jnp.split(self.kv(h).reshape(B, S, 2 * KV_HEADS, HEAD_DIM), 2, axis=2)
        a = jax.nn.dot_product_attention(q, rope(k, pos), v, is_causal=True,
                                         key_value_seq_lengths=lens)
        x = x + self.o(a.reshape(B, S, D))
        h = self.norm2(x)
        return x + self.down(nnx.silu(self.gate(h)) * self.up(h))


class Llama(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.blocks = nnx.List([LlamaBlock(rngs)])
        self.norm = nnx.RMSNorm(D, rngs=rngs)

    def __call__(self, tokens, lens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, lens)
        return self.embed.attend(self.norm(x))          # tied output embedding


def pure(module_type):
    """(graphdef, state) of a module built under nnx.jit (one XLA compile instead of one per
    initialiser op) with cheap random numbers."""
    with cheap_random():
        model = nnx.jit(lambda: module_type(nnx.Rngs(0)))()
    graphdef, state = nnx.split(model)
    return graphdef, to_numpy(state)


def test_nnx_llama_rope_gqa(rng):
    graphdef, state = pure(Llama)

    def fn(state, tokens, lens):
        return nnx.merge(graphdef, state)(tokens, lens)

    def make_args(B, S):
        return (state, rng.integers(0, VOCAB, (B, S)).astype(np.int32),
                lengths(rng, B, S).astype(np.int32))

    check_model(fn, (None, {0: "B", 1: "S"}, {0: "B"}), make_args, BATCH_SEQ, TOL_GEMM,
                what="nnx Llama")


class CNN(nnx.Module):
    """Strided convolution with explicit padding, BatchNorm in train mode (statistics over dynamic B, H, W),
    max pooling, a SAME convolution, average pooling, global mean and a classifier."""

    def __init__(self, rngs):
        self.conv1 = nnx.Conv(3, 8, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)),
                              rngs=rngs)
        self.bn = nnx.BatchNorm(8, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(8, 8, (3, 3), padding="SAME", rngs=rngs)
        self.head = nnx.Linear(8, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv1(x)))
        x = nnx.max_pool(x, (2, 2), strides=(1, 1), padding="SAME")
        x = nnx.avg_pool(self.conv2(x), (2, 2), strides=(1, 1), padding="SAME")
        return self.head(x.mean(axis=(1, 2)))


def test_nnx_cnn_batchnorm_train(rng):
    graphdef, state = pure(CNN)

    def train_forward(state, x):
        model = nnx.merge(graphdef, state)
        return model(x), nnx.state(model, nnx.BatchStat)     # logits, new running stats

    check_model(train_forward, (None, {0: "B", 1: "H", 2: "W"}),
                lambda B, H, W: (state, normal(rng, B, H, W, 3)), BATCH_HW, TOL_GEMM,
                what="nnx CNN (train)")


class GRUModel(nnx.Module):
    def __init__(self, rngs):
        self.rnn = nnx.RNN(nnx.GRUCell(6, 12, rngs=rngs), rngs=False)
        self.head = nnx.Linear(12, 4, rngs=rngs)

    def __call__(self, x, seq_lengths):
        carry = jnp.zeros((x.shape[0], 12), x.dtype)
        return self.head(self.rnn(x, initial_carry=carry, seq_lengths=seq_lengths))


def test_nnx_gru(rng):
    graphdef, state = pure(GRUModel)

    def fn(state, x, seq_lengths):
        return nnx.merge(graphdef, state)(x, seq_lengths)

    def make_args(B, S):
        return state, normal(rng, B, S, 6), lengths(rng, B, S).astype(np.int32)

    check_model(fn, (None, {0: "B", 1: "S"}, {0: "B"}), make_args, BATCH_SEQ, TOL_RECURRENT,
                what="nnx RNN(GRUCell)")
