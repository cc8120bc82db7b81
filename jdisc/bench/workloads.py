"""Built-in workloads: the models the tests, the benchmark and the README's main job run.

W1 BERT-base encoder layer x[B, S, 768]; W2 LayerNorm + GELU + residual + softmax x[B, S, 1024];
W3 MLP 512 -> 2048 -> 512 x[N, 512]; W4 a small CNN; W5 pairwise soft-sphere energy and forces
of N particles in a periodic box (what molecular-dynamics libraries emit: every pair, the
nearest periodic image, `jax.grad` for the forces); W6 a hierarchical model's log density and
its gradient over N data points, each point's group parameter gathered by index; plus small
building blocks (LayerNorm, softmax, masked mean). Parameters are numpy arrays drawn from a
fixed seed.
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


def soft_sphere_energy(R, box):
    """Soft spheres (sigma 1, epsilon 1, alpha 2) in a periodic box: the sum over pairs."""
    n = R.shape[0]
    dR = R[:, None, :] - R[None, :, :]
    dR = dR - box * jnp.round(dR / box)                   # the nearest periodic image
    eye = jnp.eye(n, dtype=R.dtype)
    r = jnp.sqrt(jnp.sum(dR * dR, axis=-1) + eye)         # 1 on the diagonal: no sqrt(0)
    e = jnp.where(r < 1.0, 0.5 * (1.0 - r) ** 2, 0.0) * (1.0 - eye)
    return 0.5 * jnp.sum(e)


def pair_energy_force(R, box):
    """W5: the energy and the forces (minus its gradient) of N particles R[N, 3]."""
    e, g = jax.value_and_grad(soft_sphere_energy)(R, box)
    return e, -g


def hierarchical_log_density(params, y, group):
    """A normal hierarchical model ("eight schools" with G groups): mu, log tau, theta[G]."""
    mu, log_tau, theta = params["mu"], params["log_tau"], params["theta"]

    def normal(x, m, s):
        return -0.5 * ((x - m) / s) ** 2 - jnp.log(s) - np.float32(0.5 * np.log(2 * np.pi))
    lp = normal(mu, 0.0, 5.0) + normal(log_tau, 0.0, 1.0) + \
        jnp.sum(normal(theta, mu, jnp.exp(log_tau)))
    return lp + jnp.sum(normal(y, theta[group], params["sigma"]))


def log_density_and_grad(params, y, group):
    """W6: the log density and its gradient in the parameters, over N points y[N], group[N]."""
    return jax.value_and_grad(hierarchical_log_density)(params, y, group)


def particles(b: int, s: int) -> int:
    """W5's particle count for a benchmark shape (B, S): 17..425 for B*S in 16..4096."""
    return 16 + b * s // 10


def _particle_args(b, s, rng):
    n = particles(b, s)
    side = np.float32((n / 1.2) ** (1 / 3))               # density 1.2: every particle has
    return (rng.random((n, 3)) * side).astype(np.float32), np.full(3, side, np.float32)


def _log_density_args(params):
    def make(b, s, rng):
        n = b * s
        return (params, rng.standard_normal(n).astype(np.float32),
                rng.integers(0, params["theta"].shape[0], n).astype(np.int32))
    return make


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


def hierarchical_params(groups: int = 64, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"mu": np.float32(0.3), "log_tau": np.float32(0.1), "sigma": np.float32(1.0),
            "theta": rng.standard_normal(groups).astype(np.float32)}


def workloads() -> dict[str, Workload]:
    bp, mp, lp, cp = bert_params(), mlp_params(), ln_params(), cnn_params()
    hp = hierarchical_params()
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
        "W5": Workload(
            "W5", "soft-sphere energy + forces (jax.grad), N^2 pairs in a periodic box, "
                  "R[N,3], N=16+B*S/10", pair_energy_force, ({0: "N"}, None), _particle_args,
            lambda b, s: 0.0),
        "W6": Workload(
            "W6", "hierarchical log density + gradient over N points, 64 groups gathered by "
                  "index, N=B*S", log_density_and_grad, (None, {0: "N"}, {0: "N"}),
            _log_density_args(hp), lambda b, s: 0.0),
    }


def shape_label(name: str, b: int, s: int) -> str:
    """How the tables (and the plot) name a shape of workload `name`."""
    if name in ("W3", "W6"):
        return f"N={b * s}"
    if name == "W5":
        return f"N={particles(b, s)}"
    if name == "W4":
        return f"{b}x{cnn_side(s)}x{cnn_side(s)}"
    return f"{b}x{s}"


class BenchError(Exception):
    """Bad options: the command's one-line reason."""
