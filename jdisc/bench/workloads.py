"""Built-in workloads: the models the tests, the benchmark and the README's main job run.

W1 BERT-base encoder layer x[B, S, 768]; W2 LayerNorm + GELU + residual + softmax x[B, S, 1024];
W3 MLP 512 -> 2048 -> 512 x[N, 512]; plus small building blocks (LayerNorm, softmax, masked
mean). Parameters are numpy arrays drawn from a fixed seed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


def softmax(x):
    return jax.nn.softmax(x, axis=-1)


def masked_mean(x, mask):
    """Mean over axis 1 of x[B, S, D] where mask[B, S] is 1."""
    m = mask[..., None].astype(x.dtype)
    return jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)


def mlp(params, x, activation: str = "relu"):
    act = jax.nn.relu if activation == "relu" else (lambda h: jax.nn.gelu(h, approximate=True))
    h = act(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def ln_gelu_residual_softmax(params, x):
    """W2: a memory- and transcendental-bound chain."""
    h = layer_norm(x, params["gamma"], params["beta"])
    h = jax.nn.gelu(h, approximate=True) + x
    return softmax(h)


def bert_layer(params, x, mask, num_heads: int = 12):
    """A BERT-base encoder layer: separate Q/K/V projections, additive mask, tanh GELU."""
    b, s, d = x.shape
    hd = d // num_heads

    def heads(t):
        return t.reshape(b, s, num_heads, hd).transpose(0, 2, 1, 3)

    q = heads(x @ params["wq"] + params["bq"])
    k = heads(x @ params["wk"] + params["bk"])
    v = heads(x @ params["wv"] + params["bv"])
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(hd).astype(np.float32)
    scores = scores + mask[:, None, None, :]
    attn = jnp.einsum("bhqk,bhkd->bhqd", softmax(scores), v)
    attn = attn.transpose(0, 2, 1, 3).reshape(b, s, d) @ params["wo"] + params["bo"]
    h = layer_norm(x + attn, params["ln1_g"], params["ln1_b"])
    f = jax.nn.gelu(h @ params["w1"] + params["b1"], approximate=True) @ params["w2"] + params["b2"]
    return layer_norm(h + f, params["ln2_g"], params["ln2_b"])


def cnn(params, x):
    """W4: conv3x3 + ReLU + max-pool 2x2 + conv3x3 + ReLU + global average, NHWC."""
    dn = ("NHWC", "HWIO", "NHWC")
    y = jax.lax.conv_general_dilated(x, params["w1"], (1, 1), "SAME", dimension_numbers=dn)
    y = jax.nn.relu(y + params["b1"])
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = jax.lax.conv_general_dilated(y, params["w2"], (1, 1), "SAME", dimension_numbers=dn)
    y = jax.nn.relu(y + params["b2"])
    return y.mean(axis=(1, 2))


def cnn_side(s: int) -> int:
    """The image side W4 uses for a benchmark shape (B, S): 10..72 pixels for S in 16..512."""
    return 8 + s // 8


# ------------------------------------------------------------------------------- parameters

def _dense(rng, n_in, n_out):
    return (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)


def bert_params(d: int = 768, ffn: int = 3072, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    p = {}
    for n in ("q", "k", "v", "o"):
        p[f"w{n}"] = _dense(rng, d, d)
        p[f"b{n}"] = (0.02 * rng.standard_normal(d)).astype(np.float32)
    p["w1"], p["b1"] = _dense(rng, d, ffn), (0.02 * rng.standard_normal(ffn)).astype(np.float32)
    p["w2"], p["b2"] = _dense(rng, ffn, d), (0.02 * rng.standard_normal(d)).astype(np.float32)
    for n in ("ln1", "ln2"):
        p[f"{n}_g"] = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        p[f"{n}_b"] = (0.1 * rng.standard_normal(d)).astype(np.float32)
    return p


def mlp_params(d_in: int = 512, hidden: int = 2048, d_out: int = 512, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": _dense(rng, d_in, hidden), "b1": (0.1 * rng.standard_normal(hidden)).astype(np.float32),
            "w2": _dense(rng, hidden, d_out), "b2": (0.1 * rng.standard_normal(d_out)).astype(np.float32)}


def ln_params(d: int = 1024, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"gamma": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            "beta": (0.1 * rng.standard_normal(d)).astype(np.float32)}


# ------------------------------------------------------------------------------- workloads

@dataclasses.dataclass(frozen=True)
class Workload:
    """A function, its jdisc dynamic_axes, and a maker of arguments for (B, S)."""
    name: str
    description: str
    fn: Callable
    dynamic_axes: Any
    make_args: Callable[[int, int, np.random.Generator], tuple]
    flops: Callable[[int, int], float]      # GEMM flops at (B, S), for GFLOP/s reports


def _bert_args(params):
    def make(b, s, rng):
        x = rng.standard_normal((b, s, 768)).astype(np.float32)
        lengths = rng.integers(1, max(s, 1) + 1, size=b)
        mask = np.where(np.arange(s)[None, :] < lengths[:, None], 0.0, -1e9).astype(np.float32)
        return params, x, mask
    return make


def cnn_params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((3, 3, 3, 32)) / np.sqrt(27)).astype(np.float32),
            "b1": (0.1 * rng.standard_normal(32)).astype(np.float32),
            "w2": (rng.standard_normal((3, 3, 32, 64)) / np.sqrt(288)).astype(np.float32),
            "b2": (0.1 * rng.standard_normal(64)).astype(np.float32)}


def workloads() -> dict[str, Workload]:
    bp, mp, lp, cp = bert_params(), mlp_params(), ln_params(), cnn_params()
    return {
        "W1": Workload(
            "W1", "BERT-base encoder layer x[B,S,768]", bert_layer,
            (None, {0: "B", 1: "S"}, {0: "B", 1: "S"}), _bert_args(bp),
            lambda b, s: 2.0 * b * s * 768 * (4 * 768 + 2 * 3072) + 4.0 * b * s * s * 768),
        "W2": Workload(
            "W2", "LayerNorm+GELU+residual+softmax x[B,S,1024]", ln_gelu_residual_softmax,
            (None, {0: "B", 1: "S"}),
            lambda b, s, rng: (lp, rng.standard_normal((b, s, 1024)).astype(np.float32)),
            lambda b, s: 0.0),
        "W3": Workload(
            "W3", "MLP 512->2048->512 x[N,512], N=B*S", mlp, (None, {0: "N"}),
            lambda b, s, rng: (mp, rng.standard_normal((b * s, 512)).astype(np.float32)),
            lambda b, s: 2.0 * b * s * (512 * 2048 * 2)),
        "W4": Workload(
            "W4", "CNN conv3x3(3->32)+ReLU+maxpool+conv3x3(32->64)+ReLU+mean, x[B,H,W,3], "
                  "H=W=8+S/8", cnn, (None, {0: "B", 1: "H", 2: "W"}),
            lambda b, s, rng: (cp, rng.standard_normal(
                (b, cnn_side(s), cnn_side(s), 3)).astype(np.float32)),
            lambda b, s: 2.0 * b * (cnn_side(s) ** 2 * 27 * 32 + (cnn_side(s) // 2) ** 2 * 288 * 64)),
    }


def shape_label(name: str, b: int, s: int) -> str:
    """How the tables (and the plot) name a shape of workload `name`."""
    if name == "W3":
        return f"N={b * s}"
    if name == "W4":
        return f"{b}x{cnn_side(s)}x{cnn_side(s)}"
    return f"{b}x{s}"


class BenchError(Exception):
    """Bad options: the command's one-line reason."""
