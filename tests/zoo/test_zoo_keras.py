"""Zoo: keras 3 models on the JAX backend (random weights, tiny sizes) under jdisc vs jax.jit,
as pure functions through `stateless_call` (see keras_support.py).

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_GEMM = 2e-5: f32 GEMMs/convolutions of K <= 72 terms in another summation order
  (~sqrt(K) ulp ~ 5e-7), jdisc's own exp (softmax), BatchNorm/LayerNorm rescaling by a few x;
  2e-5 leaves ~10x margin (as tests/test_models.py).
* TOL_RECURRENT = 2e-5: LSTM and GRU scans; contractive gates, so rounding does not compound
  (measured in tests/test_control_flow.py).
"""

import numpy as np
import pytest

from keras_support import keras, pure
from zoo_support import BATCH_HW, BATCH_SEQ, check_model, normal, padding_mask

layers = keras.layers
TOL_GEMM = 2e-5
TOL_RECURRENT = 2e-5


@pytest.fixture(autouse=True)
def seeded():
    # keras draws its initial weights eagerly from its own seed generator (threefry keys of
    # shape [2]: zoo_support.cheap_random() does not apply)
    keras.utils.set_random_seed(0)


def test_keras_cnn_batchnorm_train(rng):
    model = keras.Sequential([
        keras.Input((None, None, 3)),
        layers.Conv2D(8, 3, strides=2, padding="same"),
        layers.BatchNormalization(),
        layers.ReLU(),
        layers.MaxPooling2D(2, strides=2, padding="same"),
        layers.Conv2D(8, 3, padding="same", activation="relu"),
        layers.AveragePooling2D(3, strides=1, padding="same"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(10),
    ])
    fn, variables = pure(model, training=True)      # returns the updated moving statistics
    check_model(fn, (None, {0: "B", 1: "H", 2: "W"}),
                lambda B, H, W: (variables, normal(rng, B, H, W, 3)), BATCH_HW, TOL_GEMM,
                what="keras CNN (train)")


def test_keras_resnet_block_eval(rng):
    inputs = keras.Input((None, None, 3))
    x = layers.Conv2D(8, 3, padding="same")(inputs)
    h = layers.ReLU()(layers.BatchNormalization()(layers.Conv2D(8, 3, padding="same")(x)))
    h = layers.BatchNormalization()(layers.Conv2D(8, 3, padding="same")(h))
    x = layers.ReLU()(layers.Add()([x, h]))
    x = layers.MaxPooling2D(3, strides=1, padding="same")(x)
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs, outputs)
    fn, variables = pure(model)
    # non-trivial moving statistics, so that eval-mode BatchNorm is not the identity
    variables = (variables[0], [v + normal(rng, *v.shape, scale=0.1) ** 2 for v in variables[1]])
    check_model(lambda v, x: fn(v, x)[0], (None, {0: "B", 1: "H", 2: "W"}),
                lambda B, H, W: (variables, normal(rng, B, H, W, 3)), BATCH_HW, TOL_GEMM,
                what="keras ResNet block")


def test_keras_lstm_gru_stack(rng):
    model = keras.Sequential([
        keras.Input((None, 6)),
        layers.LSTM(12, return_sequences=True),
        layers.GRU(8, return_sequences=True),
        layers.Dense(4),
    ])
    fn, variables = pure(model)
    check_model(lambda v, x: fn(v, x)[0], (None, {0: "B", 1: "S"}),
                lambda B, S: (variables, normal(rng, B, S, 6)), BATCH_SEQ, TOL_RECURRENT,
                what="keras LSTM+GRU")


def test_keras_transformer_encoder_padding_mask(rng):
    tokens = keras.Input((None,), dtype="int32")
    pad = keras.Input((None,), dtype="int32")
    x = layers.Embedding(32, 16)(tokens)
    mask = keras.ops.logical_and(keras.ops.expand_dims(pad > 0, 1),
                                 keras.ops.expand_dims(pad > 0, 2))      # [B, S, S]
    h = layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x, attention_mask=mask)
    x = layers.LayerNormalization()(layers.Add()([x, h]))
    h = layers.Dense(16)(layers.Dense(32, activation="gelu")(x))
    outputs = layers.LayerNormalization()(layers.Add()([x, h]))
    model = keras.Model([tokens, pad], outputs)
    fn, variables = pure(model)

    def encode(variables, tokens, pad):
        return fn(variables, [tokens, pad])[0]

    check_model(encode, (None, {0: "B", 1: "S"}, {0: "B", 1: "S"}),
                lambda B, S: (variables, rng.integers(0, 32, (B, S)).astype(np.int32),
                              padding_mask(rng, B, S)),
                BATCH_SEQ, TOL_GEMM, what="keras transformer encoder")
