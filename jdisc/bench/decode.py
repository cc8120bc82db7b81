"""W7: a small GPT-style decoder's generation loop with a growing KV cache.

One step takes the current token's embedding and the KV cache of the tokens before it and
returns the next-token logits and the cache one longer. Three ways to run the loop (prompt
tokens go through the same steps, then the new ones; every side is fed the same fixed token
sequence, so their logits can be compared step by step):

* jdisc: `jdisc.jit(step)` with the cache length T a dynamic axis: one compile, and each step's
  work follows the real length (attention over T + 1 positions, the cache copied once);
* padded jax.jit: what users do today, a cache of the maximum length with the new entry
  written by `lax.dynamic_update_slice` (donated) and a mask over the unused positions: one
  compile, every step attends over the maximum length;
* jax.jit per length: `jax.jit(step)`, one XLA compile per cache length.

End to end from a fresh function (compiles included; jdisc's in an empty cache directory, as
users get it: its first step served by jax.jit while it compiles, the bridge), then a second
pass over the same loop (steady state, compiles done); medians over the repeats; ratio = side
/ padded jax.jit. The model: d = 128, 4 heads, 2 layers, FFN 512, vocabulary 256, f32, random
weights (seed 0). `jdisc bench --workloads W7` and `benchmarks/decode.py` run it.
"""

from __future__ import annotations

import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jdisc

SIDES = ("jdisc", "padded", "per_length")

D, HEADS, LAYERS, FFN, VOCAB = 128, 4, 2, 512, 256


def params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)

    def dense(n_in, n_out):
        return (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
    layers = [{"wq": dense(D, D), "wk": dense(D, D), "wv": dense(D, D), "wo": dense(D, D),
               "w1": dense(D, FFN), "w2": dense(FFN, D)} for _ in range(LAYERS)]
    return {"layers": layers, "embed": dense(VOCAB, D) * np.float32(np.sqrt(D)),
            "out": dense(D, VOCAB)}


def _norm(h):
    mean = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(h - mean), axis=-1, keepdims=True)
    return (h - mean) * jax.lax.rsqrt(var + 1e-5)


def _attend(q, keys, values, mask=None):
    """One query [1, D] over keys/values [T, D], per head."""
    hd = D // HEADS
    qh, kh, vh = q.reshape(HEADS, hd), keys.reshape(-1, HEADS, hd), values.reshape(-1, HEADS, hd)
    s = jnp.einsum("hd,thd->ht", qh, kh) / np.float32(np.sqrt(hd))
    if mask is not None:
        s = jnp.where(mask[None, :], s, -jnp.inf)
    return jnp.einsum("ht,thd->hd", jax.nn.softmax(s, axis=-1), vh).reshape(1, D)


def step(p, x, k_cache, v_cache):
    """x [D]: the current token's embedding; caches [LAYERS, T, D] -> logits [VOCAB], caches
    [LAYERS, T + 1, D]."""
    h, ks, vs = x[None, :], [], []
    for layer, w in enumerate(p["layers"]):
        a = _norm(h)
        keys = jnp.concatenate([k_cache[layer], a @ w["wk"]], axis=0)
        values = jnp.concatenate([v_cache[layer], a @ w["wv"]], axis=0)
        h = h + _attend(a @ w["wq"], keys, values) @ w["wo"]
        h = h + jax.nn.gelu(_norm(h) @ w["w1"], approximate=True) @ w["w2"]
        ks.append(keys)
        vs.append(values)
    return (_norm(h) @ p["out"])[0], jnp.stack(ks), jnp.stack(vs)


def step_padded(p, x, k_cache, v_cache, pos):
    """The same step on caches of the maximum length M, the new entry written at `pos`."""
    h, ks, vs = x[None, :], [], []
    mask = jnp.arange(k_cache.shape[1]) <= pos
    for layer, w in enumerate(p["layers"]):
        a = _norm(h)
        keys = jax.lax.dynamic_update_slice(k_cache[layer], a @ w["wk"], (pos, 0))
        values = jax.lax.dynamic_update_slice(v_cache[layer], a @ w["wv"], (pos, 0))
        h = h + _attend(a @ w["wq"], keys, values, mask) @ w["wo"]
        h = h + jax.nn.gelu(_norm(h) @ w["w1"], approximate=True) @ w["w2"]
        ks.append(keys)
        vs.append(values)
    return (_norm(h) @ p["out"])[0], jnp.stack(ks), jnp.stack(vs)


def run_growing(fn, p, tokens):
    k = v = jnp.zeros((LAYERS, 0, D), jnp.float32)
    logits = []
    for t in tokens:
        out, k, v = fn(p, p["embed"][t], k, v)
        logits.append(out)
    return jax.block_until_ready(logits)


def run_padded(fn, p, tokens):
    k, v = (jnp.zeros((LAYERS, len(tokens), D), jnp.float32) for _ in range(2))  # donated
    logits = []
    for i, t in enumerate(tokens):
        out, k, v = fn(p, p["embed"][t], k, v, jnp.int32(i))
        logits.append(out)
    return jax.block_until_ready(logits)


def measure(side: str, p, tokens, cache_dir) -> dict:
    """One cold run of the loop on one side, then a second (steady) pass; `cache_dir()` makes
    the empty cache directory jdisc compiles into. jax's in-memory caches are cleared first:
    until 2026-12-07 a repeat after the first found every XLA compile of the one before in
    them (the padded loop's end to end 0.03 s instead of about 0.2)."""
    jax.clear_caches()
    if side == "jdisc":      # a cold compile: an empty cache directory for each repeat
        os.environ["JDISC_CACHE_DIR"] = cache_dir()
        fn = jdisc.jit(step, dynamic_axes=(None, None, {1: "T"}, {1: "T"}))
        loop = run_growing
    elif side == "padded":
        fn = jax.jit(step_padded, donate_argnums=(2, 3))
        loop = run_padded
    else:
        fn = jax.jit(step)
        loop = run_growing
    t0 = time.perf_counter()
    logits = loop(fn, p, tokens)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    loop(fn, p, tokens)
    return {"end_to_end": first, "steady": time.perf_counter() - t0,
            "logits": np.stack([np.asarray(x) for x in logits])}


def run_decode(prompt: int, new: int, repeats: int, cache_dir, log=lambda msg: None) -> dict:
    """W7's numbers: per side, the medians of `repeats` cold and steady passes over the loop,
    and the largest difference of its logits from the per-length jax.jit side's."""
    p = jax.tree.map(jnp.asarray, params())
    tokens = [int(t) for t in np.random.default_rng(1).integers(0, VOCAB, prompt + new)]
    runs: dict[str, list] = {side: [] for side in SIDES}
    for k in range(repeats):
        for side in SIDES:
            log(f"[W7 {k + 1}/{repeats}] {side}: {prompt} + {new} steps, cold then steady")
            runs[side].append(measure(side, p, tokens, cache_dir))
    ref = runs["per_length"][0]["logits"]
    rows = {}
    for side, rs in runs.items():
        rows[side] = {key: statistics.median(r[key] for r in rs)
                      for key in ("end_to_end", "steady")}
        rows[side]["max_abs_diff"] = float(np.max(np.abs(rs[0]["logits"] - ref)))
    return {"description": f"GPT-style decoder (d {D}, {HEADS} heads, {LAYERS} layers), "
                           f"{prompt} prompt + {new} new tokens, KV cache growing by one per step",
            "prompt": prompt, "new": new, "repeats": repeats, "rows": rows}


def print_decode(res: dict) -> None:
    """W7's table: end to end and steady seconds per side, and their ratios to padded jax.jit."""
    rows, base = res["rows"], res["rows"]["padded"]
    print(f"W7: {res['description']}; medians of {res['repeats']}; ratio = side / padded jax.jit")
    print("| side | end to end s | ratio | steady s | ratio | steady ms/step | "
          "max abs diff of logits |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    steps = res["prompt"] + res["new"]
    for side, r in rows.items():
        print(f"| {side} | {r['end_to_end']:.3f} | {r['end_to_end'] / base['end_to_end']:.2f} | "
              f"{r['steady']:.3f} | {r['steady'] / base['steady']:.2f} | "
              f"{1e3 * r['steady'] / steps:.3f} | {r['max_abs_diff']:.1e} |")
