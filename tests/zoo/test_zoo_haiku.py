"""Zoo: dm-haiku models (random weights, tiny sizes) under jdisc vs jax.jit.

hk.transform(_with_state) gives pure `apply(params[, state], rng, *inputs)` functions; rng is
None (no dropout), so the jdisc function is `lambda params, x: apply(params, None, x)`.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_GEMM = 2e-5: f32 GEMMs/convolutions of K <= 200 terms in another summation order
  (~sqrt(K) ulp ~ 1e-6), jdisc's own exp/tanh (<= 2 ulp), rescaled by LayerNorm/BatchNorm by a
  few x; 2e-5 leaves ~5-10x margin (as tests/test_models.py).
* TOL_RECURRENT = 2e-5: LSTM and GRU scans; the gates are contractive, so rounding does not
  compound over time (measured in tests/test_control_flow.py).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

hk = pytest.importorskip("haiku")

from zoo_support import BATCH_HW, BATCH_ONLY, BATCH_SEQ, check_model, init_params, normal, padding_mask

TOL_GEMM = 2e-5
TOL_RECURRENT = 2e-5
D = 16
# hk.BatchNorm computes var = E[x^2] - E[x]^2; in the last ResNet stage (1x1 spatial) with B = 2
# that is two values, whose cancellation loses up to ~10 bits: f32 rounding differences of
# ~1e-7 upstream become ~1e-4 in the running statistics (measured 3.5e-4 at B = 2).
TOL_BN_TRAIN = 1e-3


def init(transformed, *example):
    """Parameters (and state) from one jitted init (one XLA compile, not one per op)."""
    return init_params(transformed.init, *example)


# ------------------------------------------------------------------ ResNet (hk.nets.ResNet)

def resnet_train(x):
    net = hk.nets.ResNet(blocks_per_group=(1, 1, 1, 1), num_classes=10, bottleneck=False,
                         channels_per_group=(4, 8, 8, 8), use_projection=(True,) * 4)
    return net(x, is_training=True)


@pytest.mark.slow     # ~3x a small model's compile; test_haiku_batchnorm_train_cnn runs by default
def test_haiku_resnet_train(rng):
    model = hk.transform_with_state(resnet_train)
    params, state = init(model, np.zeros((2, 16, 16, 3), np.float32))

    def train_forward(params, state, x):
        return model.apply(params, state, None, x)           # logits, new BatchNorm state

    # H and W static: jax.export cannot trace hk.nets.ResNet with symbolic H/W (the projection
    # shortcut's SAME stride-2 size ceil(H/2) and the main path's floor((H-1)/2)+1 are equal,
    # but jax's symbolic algebra cannot prove it: "add got incompatible shapes").
    check_model(train_forward, (None, None, {0: "B"}),
                lambda B: (params, state, normal(rng, B, 16, 16, 3)), BATCH_ONLY, TOL_BN_TRAIN,
                what="hk.nets.ResNet (train)")


def bn_cnn_train(x):
    """hk.Conv2D, hk.BatchNorm in train mode (batch statistics over dynamic B, H, W, and its
    moving averages: the pattern whose EMA once read a scalar before it was written),
    hk.max_pool and hk.avg_pool over dynamic H/W."""
    x = hk.Conv2D(8, 3, padding="SAME")(x)
    x = jax.nn.relu(hk.BatchNorm(True, True, 0.9)(x, is_training=True))
    x = hk.max_pool(x, window_shape=(1, 3, 3, 1), strides=1, padding="SAME")
    x = hk.avg_pool(x, window_shape=(1, 2, 2, 1), strides=1, padding="SAME")
    return hk.Linear(10)(x.mean(axis=(1, 2)))


def test_haiku_batchnorm_train_cnn(rng):
    model = hk.transform_with_state(bn_cnn_train)
    params, state = init(model, np.zeros((2, 8, 8, 3), np.float32))

    def train_forward(params, state, x):
        return model.apply(params, state, None, x)           # logits, new BatchNorm state

    check_model(train_forward, (None, None, {0: "B", 1: "H", 2: "W"}),
                lambda B, H, W: (params, state, normal(rng, B, H, W, 3)), BATCH_HW, TOL_GEMM,
                what="haiku BatchNorm CNN (train)")


# ------------------------------------------------------- transformer (hk.MultiHeadAttention)

def decoder(tokens, pad):
    """Causal decoder: hk.MultiHeadAttention under causal & key-padding masks, hk.LayerNorm,
    hk.nets.MLP, hk.Embed with a tied readout."""
    S = tokens.shape[1]
    causal = jnp.tril(jnp.ones((S, S), bool))
    mask = causal[None, None] & (pad[:, None, None, :] > 0)         # [B, 1, S, S]
    embed = hk.Embed(vocab_size=32, embed_dim=D)
    x = embed(tokens)
    for _ in range(1):
        h = hk.LayerNorm(-1, True, True)(x)
        x = x + hk.MultiHeadAttention(num_heads=2, key_size=8, model_size=D,
                                      w_init=hk.initializers.VarianceScaling(1.0))(h, h, h, mask)
        h = hk.LayerNorm(-1, True, True)(x)
        x = x + hk.nets.MLP([2 * D, D], activation=jax.nn.gelu)(h)
    return hk.LayerNorm(-1, True, True)(x) @ embed.embeddings.T


def test_haiku_causal_decoder(rng):
    model = hk.transform(decoder)
    params = init(model, np.zeros((2, 5), np.int32), np.ones((2, 5), np.int32))

    def fn(params, tokens, pad):
        return model.apply(params, None, tokens, pad)

    check_model(fn, (None, {0: "B", 1: "S"}, {0: "B", 1: "S"}),
                lambda B, S: (params, rng.integers(0, 32, (B, S)).astype(np.int32),
                              padding_mask(rng, B, S)),
                BATCH_SEQ, TOL_GEMM, what="haiku decoder")


# ------------------------------------------------ temporal CNN (hk.Conv1D, causal, dilated)

def tcn(x):
    """WaveNet-style stack: causal dilated Conv1D with gated activations and residuals."""
    x = hk.Conv1D(8, 1)(x)
    for rate in (1, 2, 4):
        h = hk.Conv1D(16, 2, rate=rate, padding=[(rate, 0)])(x)     # causal: pad left only
        a, b = jnp.split(h, 2, axis=-1)
        x = x + hk.Conv1D(8, 1)(jnp.tanh(a) * jax.nn.sigmoid(b))
    return hk.Conv1D(3, 1)(jax.nn.relu(x))


def test_haiku_causal_dilated_conv1d(rng):
    model = hk.transform(tcn)
    params = init(model, np.zeros((2, 9, 4), np.float32))

    def fn(params, x):
        return model.apply(params, None, x)

    check_model(fn, (None, {0: "B", 1: "S"}), lambda B, S: (params, normal(rng, B, S, 4)),
                BATCH_SEQ, TOL_GEMM, what="haiku TCN")


# ------------------------------------------- recurrent (hk.DeepRNN of LSTM and GRU, unrolled)

def deep_rnn(x):
    """hk.DeepRNN([LSTM, GRU]) over time with hk.dynamic_unroll (a lax.scan), batch-major."""
    core = hk.DeepRNN([hk.LSTM(12), jax.nn.relu, hk.GRU(8)])
    ys, _ = hk.dynamic_unroll(core, x, core.initial_state(x.shape[0]), time_major=False)
    return hk.Linear(4)(ys)


def test_haiku_deep_rnn_lstm_gru(rng):
    model = hk.transform(deep_rnn)
    params = init(model, np.zeros((2, 5, 6), np.float32))

    def fn(params, x):
        return model.apply(params, None, x)

    # S static: hk.dynamic_unroll calls hk.scan, which passes `length=` to lax.scan, and
    # lax.scan does int(length): jax.export refuses a symbolic time axis there
    # (InconclusiveDimensionOperation), before jdisc sees anything.
    check_model(fn, (None, {0: "B"}), lambda B: (params, normal(rng, B, 5, 6)),
                BATCH_ONLY, TOL_RECURRENT, what="haiku DeepRNN")
