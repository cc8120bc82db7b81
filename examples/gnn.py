"""A graph network over graphs of changing size: two rounds of message passing with
`jax.ops.segment_sum`, then a mean readout. Nodes N and edges E are dynamic axes, so one jdisc
compile serves every graph; jax.jit compiles once per (N, E).

    python examples/gnn.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from _compare import compare, sizes

F = 32


def init(seed=0):
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    return {"msg": [w(F, F), w(F, F)], "upd": [w(2 * F, F), w(2 * F, F)], "out": w(F, 4)}


def gnn(params, x, senders, receivers):
    n = x.shape[0]
    for w_msg, w_upd in zip(params["msg"], params["upd"]):
        messages = jax.nn.relu(x[senders] @ w_msg)
        incoming = jax.ops.segment_sum(messages, receivers, num_segments=n)
        degree = jax.ops.segment_sum(jnp.ones_like(receivers, x.dtype), receivers, num_segments=n)
        x = jnp.tanh(jnp.concatenate([x, incoming / jnp.maximum(degree, 1)[:, None]], 1) @ w_upd)
    return jnp.mean(x, axis=0) @ params["out"]


def graph(rng, n, e):
    return (rng.standard_normal((n, F)).astype(np.float32),
            rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="a few small graphs (CI)")
    small = ap.parse_args().small
    rng, params = np.random.default_rng(1), init()
    stream = [(params, *graph(rng, n, 3 * n + n % 5))
              for n in sizes(small, [1, 7, 30], [1, 7, 30, 97, 256, 511, 1000, 2003])]
    compare("gnn (segment_sum over graphs of N nodes, ~3N edges)", gnn,
            (None, {0: "N"}, {0: "E"}, {0: "E"}), stream, tol=1e-5)
