"""Zoo: optax training steps (value_and_grad + optax update as one jdisc function) vs jax.jit.

Each step takes (params, opt_state, batch) and returns (loss, new params, new optimizer state):
the forward pass, its gradient and the optimizer update are one program, compiled once for every
batch size.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_STEP = 1e-4: gradients are f32 GEMMs of K = batch * seq terms, summed in another order
  (~sqrt(K) ulp ~ 5e-7 relative); Adam divides the first moment by sqrt(second moment), which
  for parameters whose gradient is ~0 turns that ulp-level difference into a relative one of
  up to ~1e-5 of the update (lr = 1e-2, so 1e-7 of the parameter). The loss and parameters are
  well within 1e-5; the moments of near-zero gradients need the 1e-4 (measured <= 3e-6).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

optax = pytest.importorskip("optax")
nn = pytest.importorskip("flax.linen")

from zoo_support import BATCH_ONLY, BATCH_SEQ, check_model, init_params, normal, to_numpy

TOL_STEP = 1e-4


class Classifier(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.gelu(nn.Dense(32)(x))
        x = nn.LayerNorm()(x)
        return nn.Dense(5)(x)


def test_optax_adamw_clip_train_step(rng):
    model = Classifier()
    params = init_params(model.init, np.zeros((2, 8), np.float32))
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=1e-3))
    opt_state = to_numpy(jax.jit(opt.init)(params))

    def loss_fn(params, x, labels):
        logits = model.apply(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    def train_step(params, opt_state, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        updates, opt_state = opt.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    check_model(train_step, (None, None, {0: "B"}, {0: "B"}),
                lambda B: (params, opt_state, normal(rng, B, 8),
                           rng.integers(0, 5, B).astype(np.int32)),
                BATCH_ONLY, TOL_STEP, what="optax adamw+clip step")


class SeqRegressor(nn.Module):
    """A 1-D convolution over a sequence, a GRU over time, a masked mean and a readout."""

    @nn.compact
    def __call__(self, x, mask):
        x = nn.relu(nn.Conv(8, (3,), padding="SAME")(x))
        x = nn.RNN(nn.GRUCell(8))(x)
        w = mask[..., None]
        return nn.Dense(1)((x * w).sum(1) / jnp.maximum(w.sum(1), 1.0))[:, 0]


@pytest.mark.slow     # ~3x the adamw step (conv + GRU backward); that one covers optax by default
def test_optax_sgd_momentum_schedule_seq_step(rng):
    # a learning-rate schedule reads the step count from the optimizer state
    model = SeqRegressor()
    x0, m0 = np.zeros((2, 5, 3), np.float32), np.ones((2, 5), np.float32)
    params = init_params(model.init, x0, m0)
    schedule = optax.warmup_cosine_decay_schedule(0.0, 0.1, 3, 20)
    opt = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(schedule, momentum=0.9,
                                                                 nesterov=True))
    opt_state = to_numpy(jax.jit(opt.init)(params))

    def train_step(params, opt_state, x, mask, y):
        def loss_fn(params):
            return optax.huber_loss(model.apply(params, x, mask), y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    def make_args(B, S):
        mask = (np.arange(S)[None] < rng.integers(1, S + 1, B)[:, None]).astype(np.float32)
        return params, opt_state, normal(rng, B, S, 3), mask, normal(rng, B)

    check_model(train_step, (None, None, {0: "B", 1: "S"}, {0: "B", 1: "S"}, {0: "B"}),
                make_args, BATCH_SEQ, TOL_STEP, what="optax sgd-nesterov seq step")
