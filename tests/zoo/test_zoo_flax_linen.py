"""Zoo: flax.linen models (random weights, tiny sizes) under jdisc vs jax.jit.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_GEMM = 2e-5: every model here is a few f32 GEMMs/convolutions of K <= 72 terms summed in
  another order (~sqrt(K) ulp ~ 5e-7) plus jdisc's own exp/tanh (<= 2 ulp), rescaled by up to
  two LayerNorms/BatchNorms (x ~3 each); 2e-5 leaves ~10x margin, as tests/test_models.py.
* TOL_RECURRENT = 2e-5: LSTM/GRU scans; the gates are contractive, so per-step rounding
  differences do not compound (see tests/test_control_flow.py, where this is measured).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

nn = pytest.importorskip("flax.linen")

from zoo_support import (BATCH_HW, BATCH_ONLY, BATCH_SEQ, check_model, init_params, normal,
                         padding_mask)

TOL_GEMM = 2e-5
TOL_RECURRENT = 2e-5
VOCAB, D = 32, 16


class Block(nn.Module):
    """A pre-LN transformer block: attention under `mask`, then an MLP."""

    @nn.compact
    def __call__(self, x, mask):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=D)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(D)(nn.gelu(nn.Dense(2 * D)(h)))


class Decoder(nn.Module):
    """GPT-style causal decoder over padded token batches."""

    @nn.compact
    def __call__(self, tokens, pad):
        mask = nn.combine_masks(nn.make_causal_mask(tokens),
                                nn.make_attention_mask(pad > 0, pad > 0))
        x = nn.Embed(VOCAB, D)(tokens)
        x = Block()(x, mask)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


class Encoder(nn.Module):
    """BERT-style bidirectional encoder with a padding mask; pooled by a masked mean."""

    @nn.compact
    def __call__(self, tokens, pad):
        mask = nn.make_attention_mask(pad > 0, pad > 0)
        x = nn.Embed(VOCAB, D)(tokens)
        x = Block()(Block()(x, mask), mask)
        w = pad[..., None].astype(x.dtype)
        return (x * w).sum(1) / w.sum(1)


def token_args(rng, params, B, S):
    return (params, rng.integers(0, VOCAB, (B, S)).astype(np.int32), padding_mask(rng, B, S))


TOKEN_AXES = (None, {0: "B", 1: "S"}, {0: "B", 1: "S"})


@pytest.fixture(scope="module")
def decoder_params():
    tokens = np.zeros((2, 5), np.int32)
    return init_params(Decoder().init, tokens, tokens)


def test_linen_causal_decoder(rng, decoder_params):
    model, params = Decoder(), decoder_params
    check_model(model.apply, TOKEN_AXES, lambda B, S: token_args(rng, params, B, S),
                BATCH_SEQ, TOL_GEMM, what="linen Decoder")


def test_linen_padded_encoder(rng):
    model = Encoder()
    tokens = np.zeros((2, 5), np.int32)
    params = init_params(model.init, tokens, tokens)
    check_model(model.apply, TOKEN_AXES, lambda B, S: token_args(rng, params, B, S),
                BATCH_SEQ, TOL_GEMM, what="linen Encoder")


def test_linen_decoder_top_k_sampling(rng, decoder_params):
    # one decoding step: logits at each row's last real token, top-k, then a categorical draw
    # among the k best (jax.random with a raw uint32 key passed in)
    model, params = Decoder(), decoder_params

    def sample(params, tokens, pad, key):
        logits = model.apply(params, tokens, pad)                       # [B, S, V]
        last = pad.sum(1) - 1
        step = jnp.take_along_axis(logits, last[:, None, None], axis=1)[:, 0]
        top_vals, top_ids = jax.lax.top_k(step, 5)
        choice = jax.random.categorical(key, top_vals / 0.7, axis=-1)
        return jnp.take_along_axis(top_ids, choice[:, None], axis=1)[:, 0], top_vals

    def make_args(B, S):
        return token_args(rng, params, B, S) + (np.asarray(jax.random.PRNGKey(B * 10 + S)),)

    check_model(sample, TOKEN_AXES + (None,), make_args, BATCH_SEQ, TOL_GEMM,
                what="linen Decoder top-k sampling")


class StridedCNN(nn.Module):
    """Strided SAME convolutions, BatchNorm (train mode: batch statistics over dynamic B, H, W),
    max and average pooling over dynamic H/W, global mean, classifier."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(8, (3, 3), strides=(2, 2), padding="SAME")(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
        x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = nn.Conv(8, (3, 3), strides=(2, 2), padding="SAME")(x)
        x = nn.avg_pool(x, (3, 3), strides=(1, 1), padding="SAME")
        return nn.Dense(10)(x.mean(axis=(1, 2)))


class ResBlock(nn.Module):
    """A ResNet basic block (3x3 SAME conv, BatchNorm, ReLU, twice, plus the identity)."""

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(8, (3, 3), padding="SAME")(x)))
        h = nn.BatchNorm(use_running_average=True)(nn.Conv(8, (3, 3), padding="SAME")(h))
        return nn.relu(x + h)


class ResNetTiny(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (3, 3), padding="SAME")(x)
        x = ResBlock()(ResBlock()(x))
        x = nn.max_pool(x, (3, 3), strides=(1, 1), padding="SAME")
        return nn.Dense(10)(x.mean(axis=(1, 2)))


IMAGE_AXES = (None, {0: "B", 1: "H", 2: "W"})


def image_args(rng, params, B, H, W):
    return params, normal(rng, B, H, W, 3)


def test_linen_strided_cnn_batchnorm_train(rng):
    model = StridedCNN()
    variables = init_params(model.init, np.zeros((2, 8, 8, 3), np.float32))

    def train_forward(variables, x):
        # logits and the updated running statistics (batch mean/var over B, H, W)
        return model.apply(variables, x, mutable=["batch_stats"])

    check_model(train_forward, IMAGE_AXES, lambda **s: image_args(rng, variables, **s),
                BATCH_HW, TOL_GEMM, what="linen StridedCNN (train)")


def test_linen_resnet_blocks(rng):
    model = ResNetTiny()
    variables = init_params(model.init, np.zeros((2, 8, 8, 3), np.float32))
    # non-trivial running statistics, so that eval-mode BatchNorm is not the identity
    variables = jax.tree_util.tree_map(
        lambda v: np.asarray(v) + normal(rng, *v.shape, scale=0.1) ** 2, variables)
    check_model(model.apply, IMAGE_AXES, lambda **s: image_args(rng, variables, **s),
                BATCH_HW, TOL_GEMM, what="linen ResNetTiny")


class Recurrent(nn.Module):
    """An RNN layer (nn.RNN: a flax scan over time) with per-row lengths, then a readout."""
    cell: str

    @nn.compact
    def __call__(self, x, seq_lengths):
        cell = {"lstm": nn.LSTMCell, "gru": nn.GRUCell}[self.cell](features=12)
        carry, ys = nn.RNN(cell, return_carry=True)(x, seq_lengths=seq_lengths)
        return nn.Dense(4)(ys), carry


@pytest.mark.parametrize("cell", ["lstm", pytest.param("gru", marks=pytest.mark.slow)])
def test_linen_rnn(cell, rng):
    model = Recurrent(cell)
    params = init_params(model.init, np.zeros((2, 5, 6), np.float32), np.array([5, 3], np.int32))

    def make_args(B, S):
        lens = rng.integers(1, S + 1, B).astype(np.int32)
        return params, normal(rng, B, S, 6), lens

    check_model(model.apply, (None, {0: "B", 1: "S"}, {0: "B"}), make_args, BATCH_SEQ,
                TOL_RECURRENT, what=f"linen RNN({cell})")


class BiLSTM(nn.Module):
    """nn.Bidirectional: a forward LSTM and a backward one (reverse scan over each row's own
    length: flax flips the valid prefix of every row with a gather), concatenated."""

    @nn.compact
    def __call__(self, x, seq_lengths):
        y = nn.Bidirectional(nn.RNN(nn.LSTMCell(8)), nn.RNN(nn.LSTMCell(8)))(
            x, seq_lengths=seq_lengths)
        return nn.Dense(3)(y)


def test_linen_bidirectional_lstm(rng):
    model = BiLSTM()
    params = init_params(model.init, np.zeros((2, 5, 4), np.float32), np.array([5, 2], np.int32))

    def make_args(B, S):
        return params, normal(rng, B, S, 4), rng.integers(1, S + 1, B).astype(np.int32)

    check_model(model.apply, (None, {0: "B", 1: "S"}, {0: "B"}), make_args, BATCH_SEQ,
                TOL_RECURRENT, what="linen Bidirectional LSTM")


class UNet(nn.Module):
    """A one-level U-Net: SAME conv, a stride-2 conv with explicit padding down, a stride-2
    ConvTranspose up (cropped back to H x W), a skip connection and a 1x1 conv."""

    @nn.compact
    def __call__(self, x):
        e = nn.relu(nn.Conv(8, (3, 3), padding="SAME")(x))
        d = nn.relu(nn.Conv(8, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))(e))
        u = nn.ConvTranspose(8, (2, 2), strides=(2, 2), padding="VALID")(d)
        u = u[:, :x.shape[1], :x.shape[2]]
        return nn.Conv(2, (1, 1))(jnp.concatenate([u, e], axis=-1))


def test_linen_unet_conv_transpose(rng):
    model = UNet()
    params = init_params(model.init, np.zeros((1, 8, 8, 3), np.float32))
    check_model(model.apply, IMAGE_AXES, lambda **s: image_args(rng, params, **s), BATCH_HW,
                TOL_GEMM, what="linen U-Net")


class CachedAttention(nn.Module):
    """Self-attention in decode mode: each call appends one token's key/value to the cache at
    cache_index (dynamic_update_slice) and attends over the cache up to it."""

    @nn.compact
    def __call__(self, x):
        return nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8, decode=True)(x, x)


def test_linen_kv_cache_decode_step(rng):
    model = CachedAttention()
    variables = init_params(model.init, np.zeros((2, 6, 8), np.float32))   # cache length 6
    params = {"params": variables["params"]}
    layer = "MultiHeadDotProductAttention_0"

    def step(params, cache, x):                       # x [B, 1, 8]: the next token
        y, updated = model.apply({**params, "cache": cache}, x, mutable=["cache"])
        return y, updated["cache"]

    def make_args(B):
        cache = {name: normal(rng, B, *v.shape[1:]) for name, v in variables["cache"][layer].items()
                 if name != "cache_index"}
        cache["cache_index"] = np.array(3, np.int32)      # three tokens already cached
        return params, {layer: cache}, normal(rng, B, 1, 8)

    # batch dynamic; the cache length is the model's static max length
    axes = (None, {layer: {"cached_key": {0: "B"}, "cached_value": {0: "B"}, "cache_index": None}},
            {0: "B"})
    check_model(step, axes, make_args, BATCH_ONLY, TOL_GEMM, what="linen KV-cache decode step")
