"""Entropic optimal transport (Sinkhorn iterations in log space) between two point clouds of
changing sizes N and M: the cost matrix, 50 iterations in a `lax.fori_loop`, the transport
plan's cost. N and M are dynamic axes: one jdisc compile, jax.jit one per (N, M).

    python examples/sinkhorn.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from _compare import compare, sizes

EPS, ITERS = 0.05, 50


def sinkhorn(x, y):
    n, m = x.shape[0], y.shape[0]
    cost = jnp.sum((x[:, None, :] - y[None, :, :]) ** 2, axis=-1)
    log_a = jnp.full((n,), -jnp.log(n), x.dtype)          # uniform weights
    log_b = jnp.full((m,), -jnp.log(m), x.dtype)

    def step(_, fg):
        f, g = fg
        f = -EPS * logsumexp((g[None, :] - cost) / EPS + log_b[None, :], axis=1)
        g = -EPS * logsumexp((f[:, None] - cost) / EPS + log_a[:, None], axis=0)
        return f, g
    f, g = jax.lax.fori_loop(0, ITERS, step, (jnp.zeros(n, x.dtype), jnp.zeros(m, x.dtype)))
    plan = jnp.exp((f[:, None] + g[None, :] - cost) / EPS + log_a[:, None] + log_b[None, :])
    return jnp.sum(plan * cost), plan.sum(axis=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="a few small clouds (CI)")
    small = ap.parse_args().small
    rng = np.random.default_rng(0)
    pairs = sizes(small, [(1, 3), (5, 8), (17, 11)],
                  [(1, 3), (17, 11), (64, 64), (100, 257), (313, 200), (500, 499)])
    stream = [(rng.standard_normal((n, 2)).astype(np.float32),
               (rng.standard_normal((m, 2)) + 1).astype(np.float32)) for n, m in pairs]
    # the exponents (f + g - cost) / EPS reach max(cost) / EPS, a few hundred here, so an f32
    # rounding in them (6e-8 relative) moves a plan entry by ~3e-5 of itself: 1e-4
    compare(f"sinkhorn ({ITERS} log-domain iterations between clouds of N and M points)",
            sinkhorn, ({0: "N"}, {0: "M"}), stream, tol=1e-4)
