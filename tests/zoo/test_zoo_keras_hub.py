"""Zoo: keras-hub backbones built from tiny configs (random weights; no preset, nothing
downloaded) on the JAX backend, under jdisc vs jax.jit through `stateless_call`.

keras-hub imports tensorflow (and tensorflow-text) at import time for its preprocessing layers;
the backbones themselves run on JAX only.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_GEMM = 2e-5: a transformer layer of f32 GEMMs with K <= 32 in another summation order
  (~sqrt(K) ulp ~ 4e-7), jdisc's own exp (softmax) and GELU/SiLU, LayerNorm/RMSNorm rescaling by a
  few x; 2e-5 leaves ~10x margin (as tests/test_models.py).
"""

import numpy as np
import pytest

from keras_support import keras, pure

keras_hub = pytest.importorskip("keras_hub")

from zoo_support import BATCH_SEQ, check_model, padding_mask


@pytest.fixture(autouse=True)
def seeded():
    # keras draws its initial weights eagerly from its own seed generator (threefry keys of
    # shape [2]: zoo_support.cheap_random() does not apply)
    keras.utils.set_random_seed(0)

TOL_GEMM = 2e-5
VOCAB = 40
INPUT_AXES = (None, {"token_ids": {0: "B", 1: "S"}, "padding_mask": {0: "B", 1: "S"}})


def backbone_args(rng, variables, B, S, **extra):
    inputs = {"token_ids": rng.integers(0, VOCAB, (B, S)).astype(np.int32),
              "padding_mask": padding_mask(rng, B, S)}
    return variables, dict(inputs, **extra)


def run_backbone(backbone, rng, what, extra_axes=None, extra=lambda B, S: {}, constraints=()):
    fn, variables = pure(backbone)
    axes = INPUT_AXES if extra_axes is None else (None, dict(INPUT_AXES[1], **extra_axes))
    check_model(lambda v, inputs: fn(v, inputs)[0], axes,
                lambda B, S: backbone_args(rng, variables, B, S, **extra(B, S)),
                BATCH_SEQ, TOL_GEMM, constraints=constraints, what=what)


def test_keras_hub_gpt2_causal_padded(rng):
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=VOCAB, num_layers=1, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32, dropout=0.0,
                                             max_sequence_length=16)
    # learned position embeddings are a table of max_sequence_length rows, sliced to S
    run_backbone(backbone, rng, "keras-hub GPT2Backbone", constraints=("S <= 16",))


def test_keras_hub_llama_rope_gqa(rng):
    backbone = keras_hub.models.LlamaBackbone(vocabulary_size=VOCAB, num_layers=1,
                                              num_query_heads=4, num_key_value_heads=2,
                                              hidden_dim=16, intermediate_dim=32)
    run_backbone(backbone, rng, "keras-hub LlamaBackbone")


def test_keras_hub_bert_encoder_padded(rng):
    backbone = keras_hub.models.BertBackbone(vocabulary_size=VOCAB, num_layers=1, num_heads=2,
                                             hidden_dim=16, intermediate_dim=32, dropout=0.0,
                                             max_sequence_length=16)
    run_backbone(backbone, rng, "keras-hub BertBackbone",
                 extra_axes={"segment_ids": {0: "B", 1: "S"}},
                 extra=lambda B, S: {"segment_ids": (np.arange(S)[None] >= S // 2).repeat(
                     B, 0).astype(np.int32)},
                 constraints=("S <= 16",))
