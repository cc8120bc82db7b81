"""Keras on the JAX backend for the zoo: import keras with KERAS_BACKEND=jax, and turn a built
model into a pure function of its variables through `stateless_call`."""

import os

import numpy as np
import pytest

os.environ["KERAS_BACKEND"] = "jax"     # before keras is first imported
keras = pytest.importorskip("keras")
if keras.backend.backend() != "jax":
    pytest.skip(f"keras was imported with the {keras.backend.backend()!r} backend",
                allow_module_level=True)


def pure(model, training=False):
    """(fn, variables): fn(variables, *inputs) -> (outputs, new non-trainable variables)."""
    def fn(variables, *inputs):
        trainable, non_trainable = variables
        return model.stateless_call(trainable, non_trainable, *inputs, training=training)

    variables = ([np.asarray(v.value) for v in model.trainable_variables],
                 [np.asarray(v.value) for v in model.non_trainable_variables])
    return fn, variables
