"""Text generation with a growing KV cache: a small GPT-style decoder (random weights) whose
step takes one token and the cache of the T tokens before it and returns the next-token
logits and the cache one longer. T is a dynamic axis, so one jdisc compile serves the whole
generation and each step's attention covers the real length; jax.jit compiles once per T
(the other common choice, a padded max-length cache with a mask, attends over the maximum
every step: see benchmarks/decode.py). Both sides are fed the same token sequence.

    python examples/generate.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from _compare import compare_loop

D, HEADS, LAYERS, VOCAB = 64, 4, 2, 128


def init(seed=0):
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    return {"embed": w(VOCAB, D) * np.float32(np.sqrt(D)), "out": w(D, VOCAB),
            "layers": [{"qkv": w(D, 3 * D), "o": w(D, D), "up": w(D, 4 * D), "down": w(4 * D, D)}
                       for _ in range(LAYERS)]}


def norm(h):
    return (h - h.mean(-1, keepdims=True)) * jax.lax.rsqrt(h.var(-1, keepdims=True) + 1e-5)


def step(params, token, keys, values):
    """token: int32[]; keys, values: f32[LAYERS, T, D] -> logits, caches [LAYERS, T + 1, D]."""
    h = params["embed"][token][None, :]
    new_k, new_v = [], []
    for i, layer in enumerate(params["layers"]):
        q, k, v = jnp.split(norm(h) @ layer["qkv"], 3, axis=-1)
        k_all = jnp.concatenate([keys[i], k])                  # [T + 1, D]
        v_all = jnp.concatenate([values[i], v])
        heads = lambda t: t.reshape(t.shape[0], HEADS, D // HEADS)  # noqa: E731
        scores = jnp.einsum("qhd,thd->hqt", heads(q), heads(k_all)) / np.sqrt(D // HEADS)
        att = jnp.einsum("hqt,thd->qhd", jax.nn.softmax(scores, -1), heads(v_all))
        h = h + att.reshape(1, D) @ layer["o"]
        h = h + jax.nn.gelu(norm(h) @ layer["up"]) @ layer["down"]
        new_k.append(k_all)
        new_v.append(v_all)
    return (norm(h) @ params["out"])[0], jnp.stack(new_k), jnp.stack(new_v)


def generate(f, params, tokens):
    keys = values = jnp.zeros((LAYERS, 0, D), jnp.float32)
    logits = []
    for token in tokens:
        out, keys, values = f(params, token, keys, values)
        logits.append(out)
    return logits


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="4 prompt + 8 new tokens (CI)")
    small = ap.parse_args().small
    n = 12 if small else 16 + 128
    params = init()
    tokens = [np.int32(t) for t in np.random.default_rng(1).integers(0, VOCAB, n)]
    compare_loop("generate (KV cache growing by one token per step)", step,
                 (None, None, {1: "T"}, {1: "T"}),
                 lambda f: generate(f, params, tokens), tol=1e-5, what=f"{n} steps")
