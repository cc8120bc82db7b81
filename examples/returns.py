"""Generalised advantage estimation (GAE) and discounted returns over trajectories of
variable length T, a reverse `lax.scan` as reinforcement-learning code writes it, with a
value-function loss and its gradient. T is a dynamic axis: one jdisc compile for every
episode length, jax.jit one per T.

    python examples/returns.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from _compare import compare, sizes

GAMMA, LAMBDA, OBS = 0.99, 0.95, 8


def gae(rewards, values, last_value, dones):
    next_values = jnp.concatenate([values[1:], last_value[None]])
    deltas = rewards + GAMMA * next_values * (1 - dones) - values

    def back(carry, xs):
        delta, done = xs
        carry = delta + GAMMA * LAMBDA * (1 - done) * carry
        return carry, carry
    _, adv = jax.lax.scan(back, jnp.zeros((), rewards.dtype), (deltas, dones), reverse=True)
    return adv, adv + values


def value_loss(w, obs, rewards, dones, last_obs):
    values, last_value = jnp.tanh(obs @ w)[:, 0], jnp.tanh(last_obs @ w)[0]
    adv, returns = gae(rewards, values, last_value, dones)
    targets = jax.lax.stop_gradient(returns)
    return jnp.mean((values - targets) ** 2), adv


def update(w, obs, rewards, dones, last_obs):
    (loss, adv), grad = jax.value_and_grad(value_loss, has_aux=True)(w, obs, rewards, dones,
                                                                     last_obs)
    return loss, adv, w - 0.1 * grad


def episode(rng, t):
    return (rng.standard_normal((t, OBS)).astype(np.float32),
            rng.standard_normal(t).astype(np.float32),
            (rng.random(t) < 0.05).astype(np.float32),
            rng.standard_normal(OBS).astype(np.float32))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="a few short episodes (CI)")
    small = ap.parse_args().small
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((OBS, 1)) / np.sqrt(OBS)).astype(np.float32)
    stream = [(w, *episode(rng, t)) for t in sizes(small, [1, 2, 13],
                                                   [1, 2, 13, 100, 257, 500, 1000, 2048])]
    compare("returns (GAE + value loss and gradient over episodes of T steps)", update,
            (None, {0: "T"}, {0: "T"}, {0: "T"}, None), stream, tol=1e-5)
