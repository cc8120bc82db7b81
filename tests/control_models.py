"""Control-flow workloads: recurrent networks over `lax.scan`, a greedy decoder and iterative
solvers over `lax.while_loop`, data-dependent `lax.cond` / `lax.switch`, nested loops, and tiny
loop edge cases (trip count from a dimension or from data, zero, one and thousands of trips).

Each model takes its parameters first (where it has any) and data after, and is meant for
`jdisc.jit(fn, dynamic_axes=...)`; `DYNAMIC_AXES` holds a suitable `dynamic_axes` per model.
Every loop carries values of loop-invariant (possibly symbolic) shape: buffers that a loop
fills are preallocated at their final size and written with `dynamic_update_slice`.
Parameters are float32 numpy arrays drawn from a fixed seed.

    jax op           StableHLO it exports to (see tests/test_control_flow.py)
    lax.scan         stablehlo.while (counter < T); xs read with (real_)dynamic_slice, ys
                     written with dynamic_update_slice into a preallocated [T, ...] buffer
    lax.fori_loop    stablehlo.while, the bounds carried as loop values (static or traced
                     alike; a static empty range is removed by jax while tracing)
    lax.while_loop   stablehlo.while
    lax.cond         stablehlo.case on a converted predicate (two branches)
    lax.switch       stablehlo.case on a clamped index
jax never emits stablehlo.if; the tests write it by hand.
"""

from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

from jdisc.bench.workloads import layer_norm

# ------------------------------------------------------------------------------- parameters


def _dense(rng, n_in, n_out, scale=1.0):
    return (scale * rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)


def _bias(rng, n, scale=0.1):
    return (scale * rng.standard_normal(n)).astype(np.float32)


def lstm_params(d: int = 32, hidden: int = 64, seed: int = 0) -> dict:
    """Gates stacked [input, forget, cell, output] along the last axis (4H)."""
    rng = np.random.default_rng(seed)
    b = _bias(rng, 4 * hidden)
    b[hidden:2 * hidden] += 1.0                  # the usual forget-gate bias: remember by default
    return {"wx": _dense(rng, d, 4 * hidden), "wh": _dense(rng, hidden, 4 * hidden), "b": b}


def gru_params(d: int = 32, hidden: int = 64, seed: int = 0) -> dict:
    """Gates stacked [update z, reset r, candidate n] along the last axis (3H)."""
    rng = np.random.default_rng(seed)
    return {"wx": _dense(rng, d, 3 * hidden), "wh": _dense(rng, hidden, 3 * hidden),
            "bx": _bias(rng, 3 * hidden), "bh": _bias(rng, 3 * hidden)}


PAD, END = 0, 1       # decoder token ids: PAD fills a finished sequence, END finishes it


def decoder_params(d: int = 32, vocab: int = 50, ffn: int = 128, logit_scale: float = 8.0,
                   end_gain: float = 3.0, seed: int = 0) -> dict:
    """A 1-layer pre-LN transformer decoder. `logit_scale` spreads the logits (std ~ its value)
    so that greedy choices are far from ties; `end_gain` is how fast a sequence whose stop
    signal is positive is pushed to END (see `greedy_decode`)."""
    rng = np.random.default_rng(seed)
    p = {"emb": rng.standard_normal((vocab, d)).astype(np.float32)}
    for n in ("q", "k", "v", "o"):
        p[f"w{n}"] = _dense(rng, d, d)
    p["w1"], p["b1"] = _dense(rng, d, ffn), _bias(rng, ffn)
    p["w2"], p["b2"] = _dense(rng, ffn, d), _bias(rng, d)
    for n in ("ln1", "ln2", "lnf"):
        p[f"{n}_g"] = (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)
        p[f"{n}_b"] = _bias(rng, d)
    p["w_out"], p["b_out"] = _dense(rng, d, vocab, logit_scale), _bias(rng, vocab)
    p["end_gain"] = np.float32(end_gain)
    return p


def branch_params(d: int = 16, seed: int = 0) -> dict:
    """Five small sub-networks d -> d: two for `lax.cond`, three for `lax.switch`."""
    rng = np.random.default_rng(seed)
    return {f"w{i}": _dense(rng, d, d) for i in range(5)} | {
        f"b{i}": _bias(rng, d) for i in range(5)}


def nested_params(d: int = 16, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w": _dense(rng, d, d, 0.8), "u": _dense(rng, d, d, 0.8), "b": _bias(rng, d)}


def diagonally_dominant(n: int, rng: np.random.Generator, margin: float = 1.5,
                        symmetric: bool = False) -> np.ndarray:
    """A random [n, n] float32 matrix whose diagonal is `margin` times its row's off-diagonal
    absolute sum (plus 1): Jacobi contracts by at most 1/margin per sweep; symmetric -> SPD."""
    a = rng.standard_normal((n, n))
    if symmetric:
        a = (a + a.T) / 2
    np.fill_diagonal(a, 0.0)
    np.fill_diagonal(a, margin * np.abs(a).sum(axis=1) + 1.0)
    return a.astype(np.float32)


# ------------------------------------------------------------------------------- recurrences

def lstm_cell(params, carry, x_proj):
    """One LSTM step: carry (h, c) [B, H], x_proj = x @ wx + b [B, 4H]."""
    h, c = carry
    gates = x_proj + h @ params["wh"]
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return h, c


def lstm(params, xs):
    """LSTM over xs [T, B, D] from zero state: (hidden states [T, B, H], (h_T, c_T)).

    The input projection is one GEMM over all T*B rows before the scan, as cuDNN-style LSTMs do;
    the scan body is the recurrent GEMM and the gates."""
    hidden = params["wh"].shape[0]
    x_proj = jnp.einsum("tbd,dg->tbg", xs, params["wx"]) + params["b"]
    zeros = jnp.zeros((xs.shape[1], hidden), xs.dtype)

    def step(carry, xp):
        carry = lstm_cell(params, carry, xp)
        return carry, carry[0]

    (h, c), hs = lax.scan(step, (zeros, zeros), x_proj)
    return hs, (h, c)


def gru_cell(params, h, x):
    """One GRU step (PyTorch's formulation, reset applied after the recurrent GEMM)."""
    hidden = h.shape[-1]
    gx = x @ params["wx"] + params["bx"]
    gh = h @ params["wh"] + params["bh"]
    z = jax.nn.sigmoid(gx[:, :hidden] + gh[:, :hidden])
    r = jax.nn.sigmoid(gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
    n = jnp.tanh(gx[:, 2 * hidden:] + r * gh[:, 2 * hidden:])
    return (1 - z) * n + z * h


def gru(params, xs):
    """GRU over xs [T, B, D] from zero state: (hidden states [T, B, H], h_T). Both GEMMs are in
    the scan body."""
    h0 = jnp.zeros((xs.shape[1], params["wh"].shape[0]), xs.dtype)

    def step(h, x):
        h = gru_cell(params, h, x)
        return h, h

    h, hs = lax.scan(step, h0, xs)
    return hs, h


def reverse_cumulative(xs):
    """A reverse scan over xs [T, N]: y_t = x_t + 0.5 * y_{t+1}, and the running max of |y|."""
    def step(carry, x):
        y, m = carry
        y = x + 0.5 * y
        return (y, jnp.maximum(m, jnp.abs(y))), y

    zeros = jnp.zeros(xs.shape[1:], xs.dtype)
    (_, m), ys = lax.scan(step, (zeros, zeros), xs, reverse=True)
    return ys, m


# ------------------------------------------------------------------------------- greedy decoding

def positional_encoding(pos, d: int):
    """Sinusoidal encodings [..., d] of integer positions `pos` (any shape, traced or not)."""
    freqs = jnp.exp(-np.log(10000.0) * jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    angles = jnp.asarray(pos, jnp.float32)[..., None] * freqs
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def _attend(params, q, k_cache, v_cache, n_valid):
    """Single-query attention of q [B, d] over the first n_valid cached positions."""
    d = q.shape[-1]
    scores = jnp.einsum("bd,btd->bt", q, k_cache) / np.float32(np.sqrt(d))
    valid = jnp.arange(k_cache.shape[1])[None, :] < n_valid
    p = jax.nn.softmax(jnp.where(valid, scores, -1e30), axis=-1)
    return jnp.einsum("bt,btd->bd", p, v_cache) @ params["wo"]


def greedy_pick(logits):
    """argmax over the last axis (lowest index on ties) and the top-1 minus top-2 margin,
    written with single-operand reductions."""
    vocab = logits.shape[-1]
    ids = jnp.arange(vocab, dtype=jnp.int32)
    top = jnp.max(logits, axis=-1)
    tok = jnp.min(jnp.where(logits == top[:, None], ids, vocab), axis=-1)
    second = jnp.max(jnp.where(ids == tok[:, None], -jnp.inf, logits), axis=-1)
    return tok, top - second


def decoder_step(params, x_cur, k_cache, v_cache, n_valid, stop_bias):
    """Logits [B, V] for the next token after x_cur [B, d] (whose keys and values are cached
    at position n_valid - 1); stop_bias [B] is added to END's logit, and PAD is never chosen."""
    h = x_cur + _attend(params, layer_norm(x_cur, params["ln1_g"], params["ln1_b"]) @ params["wq"],
                        k_cache, v_cache, n_valid)
    f = layer_norm(h, params["ln2_g"], params["ln2_b"])
    h = h + jax.nn.gelu(f @ params["w1"] + params["b1"], approximate=True) @ params["w2"] \
        + params["b2"]
    logits = layer_norm(h, params["lnf_g"], params["lnf_b"]) @ params["w_out"] + params["b_out"]
    ids = jnp.arange(logits.shape[-1])
    logits = logits + jnp.where(ids == END, stop_bias[:, None], 0.0)
    return jnp.where(ids == PAD, -1e30, logits)


def _kv(params, x):
    h = layer_norm(x, params["ln1_g"], params["ln1_b"])
    return h @ params["wk"], h @ params["wv"]


def decode_state(params, prompt_emb, max_len: int):
    """The decoding loop's initial state for greedy_decode: (step, tokens [B, L], lengths [B],
    done [B], min margin [B], current input [B, d], key and value caches [B, P + L, d])."""
    b, p, d = prompt_emb.shape
    x = prompt_emb + positional_encoding(jnp.arange(p), d)
    k, v = _kv(params, x)
    pad = jnp.zeros((b, max_len, d), x.dtype)
    x_cur = lax.dynamic_index_in_dim(x, p - 1, axis=1, keepdims=False)
    return (jnp.int32(0), jnp.zeros((b, max_len), jnp.int32), jnp.zeros((b,), jnp.int32),
            jnp.zeros((b,), bool), jnp.full((b,), jnp.inf, jnp.float32), x_cur,
            jnp.concatenate([k, pad], axis=1), jnp.concatenate([v, pad], axis=1))


def decode_body(params, stop, state):
    """One greedy step on a decode_state: pick a token per sequence (PAD once finished), write it
    at column `step`, and cache the new token's key and value. stop [B] is END's logit bias per
    step (see greedy_decode)."""
    i, tokens, lengths, done, margin, x_cur, k_cache, v_cache = state
    d = x_cur.shape[-1]
    n_valid = k_cache.shape[1] - tokens.shape[1] + i    # positions 0 .. P - 1 + i are cached
    logits = decoder_step(params, x_cur, k_cache, v_cache, n_valid,
                          stop * (i + 1).astype(jnp.float32))
    tok, gap = greedy_pick(logits)
    margin = jnp.where(done, margin, jnp.minimum(margin, gap))
    tok = jnp.where(done, PAD, tok)
    tokens = lax.dynamic_update_slice(tokens, tok[:, None], (0, i))
    lengths = lengths + (~done).astype(jnp.int32)
    done = done | (tok == END)
    x_next = jnp.take(params["emb"], tok, axis=0) + positional_encoding(n_valid, d)
    k_new, v_new = _kv(params, x_next)
    k_cache = lax.dynamic_update_slice(k_cache, k_new[:, None, :], (0, n_valid, 0))
    v_cache = lax.dynamic_update_slice(v_cache, v_new[:, None, :], (0, n_valid, 0))
    return i + 1, tokens, lengths, done, margin, x_next, k_cache, v_cache


def greedy_decode(params, prompt_emb, max_len_marker):
    """Greedy decoding after prompt_emb [B, P, d] for at most L = max_len_marker.shape[0] tokens
    (the marker's values are unused: only its dynamic length matters).

    Stops when every sequence has emitted END, or after L steps. The stop signal of sequence b is
    tanh(prompt_emb[b, 0, 0]): END's logit gets end_gain * signal * (step + 1), so a clearly
    positive signal ends the sequence within a few steps and a negative one never does.
    Returns tokens [B, L] int32 (PAD after END), lengths [B] int32 (tokens emitted, END
    included), the number of loop steps (int32) and min_margin [B]: the smallest top-1 minus
    top-2 logit gap over the sequence's greedy choices, to show no choice was a near tie.
    The KV cache [B, P + L, d] is preallocated; each step writes one position."""
    max_len = max_len_marker.shape[0]
    stop = jnp.tanh(prompt_emb[:, 0, 0]) * params["end_gain"]
    n_max = jnp.asarray(max_len, jnp.int32)

    def cond(state):
        i, done = state[0], state[3]
        return (i < n_max) & ~jnp.all(done)

    steps, tokens, lengths, _, margin, *_ = lax.while_loop(
        cond, lambda state: decode_body(params, stop, state),
        decode_state(params, prompt_emb, max_len))
    return tokens, lengths, steps, margin


def decoder_prompt(b: int, p: int, rng: np.random.Generator, d: int = 32,
                   stop_signals=None) -> np.ndarray:
    """Prompt embeddings [b, p, d]; prompt[:, 0, 0] is the stop signal (see greedy_decode):
    by default alternating +3 (ends early) and -3 (runs to the maximum length)."""
    x = rng.standard_normal((b, p, d)).astype(np.float32)
    if stop_signals is None:
        stop_signals = [3.0 if i % 2 == 0 else -3.0 for i in range(b)]
    x[:, 0, 0] = np.asarray(stop_signals, np.float32)
    return x


# ------------------------------------------------------------------------------- solvers

def jacobi_split(a):
    """a [N, N] -> (its diagonal [N], a with a zero diagonal), with iota masks."""
    n = a.shape[0]
    eye = jnp.arange(n)[:, None] == jnp.arange(n)[None, :]
    return jnp.sum(jnp.where(eye, a, 0.0), axis=1), jnp.where(eye, 0.0, a)


def jacobi_sweep(a, diag, off, b, x):
    """One Jacobi sweep and the relative residual max|b - a x| / max|b| after it."""
    x = (b - off @ x) / diag
    return x, jnp.max(jnp.abs(b - a @ x)) / jnp.max(jnp.abs(b))


def solver(a, b, tol, max_iter: int = 1000):
    """Jacobi iteration for a x = b (a [N, N] diagonally dominant, b [N]) from x = 0 until the
    relative residual max|b - a x| / max|b| is <= tol, or max_iter sweeps.
    Returns (x [N], sweeps int32, relative residual)."""
    diag, off = jacobi_split(a)

    def cond(state):
        _, k, res = state
        return (res > tol) & (k < max_iter)

    def body(state):
        x, k, _ = state
        x, res = jacobi_sweep(a, diag, off, b, x)
        return x, k + 1, res

    return lax.while_loop(cond, body, (jnp.zeros_like(b), jnp.int32(0), jnp.float32(1.0)))


def cg_step(a, state):
    """One conjugate-gradient step on (x, r, p, r.r, k)."""
    x, r, p, rs, k = state
    ap = a @ p
    alpha = rs / (p @ ap)
    x = x + alpha * p
    r = r - alpha * ap
    rs_new = r @ r
    return x, r, r + (rs_new / rs) * p, rs_new, k + 1


def conjugate_gradient(a, b, tol):
    """Conjugate gradients for a x = b (a [N, N] symmetric positive definite) from x = 0 until
    |r| <= tol * |b|, or 2N + 10 iterations (N is the dynamic size, used as data).
    Returns (x [N], iterations int32, |r| / |b|)."""
    max_iter = 2 * jnp.asarray(a.shape[0], jnp.int32) + 10
    b_norm = jnp.sqrt(b @ b)

    def cond(state):
        _, r, _, rs, k = state
        return (jnp.sqrt(rs) > tol * b_norm) & (k < max_iter)

    x, r, _, rs, k = lax.while_loop(cond, lambda state: cg_step(a, state),
                                    (jnp.zeros_like(b), b, b, b @ b, jnp.int32(0)))
    return x, k, jnp.sqrt(rs) / b_norm


# ------------------------------------------------------------------------------- branches

def subnet(params, i, x):
    return jnp.tanh(x @ params[f"w{i}"] + params[f"b{i}"])


def switch_index(x):
    """The branch lax.switch takes in `cond_switch`: round(mean(x[:, 0])), any integer (switch
    clamps it to 0..2)."""
    return jnp.floor(jnp.mean(x[:, 0]) + 0.5).astype(jnp.int32)


def cond_switch(params, x):
    """x [B, d]: lax.cond on the sign of x.sum() between two sub-networks, then lax.switch
    between three on `switch_index(x)`; a third lax.cond on a dimension (B > 4) used as data.
    Returns (y [B, d], the switch index before clamping)."""
    h = lax.cond(x.sum() > 0, lambda v: subnet(params, 0, v), lambda v: -subnet(params, 1, v),
                 x)
    idx = switch_index(x)
    y = lax.switch(idx, [lambda v, i=i: subnet(params, 2 + i, v) + v for i in range(3)], h)
    y = lax.cond(jnp.asarray(x.shape[0]) > 4, lambda v: v * 2.0, lambda v: v - 1.0, y)
    return y, idx


# ------------------------------------------------------------------------------- nested loops

def nested_inner(params, h, xu):
    """The inner loop's body: h <- tanh(h w + xu)."""
    return jnp.tanh(h @ params["w"] + xu)


def _nested(params, xs, trips):
    """A scan over xs [T, B, d] whose body iterates h <- tanh(h w + x_t u + b) `trips(t, h)`
    times with lax.fori_loop; returns (the h after each step [T, B, d], final h)."""
    h0 = jnp.zeros(xs.shape[1:], xs.dtype)

    def step(carry, x):
        t, h = carry
        xu = x @ params["u"] + params["b"]
        h = lax.fori_loop(0, trips(t, x), lambda j, v: nested_inner(params, v, xu), h)
        return (t + 1, h), h

    (_, h), hs = lax.scan(step, (jnp.int32(0), h0), xs)
    return hs, h


def nested(params, xs):
    """Inner trip count a static 3."""
    return _nested(params, xs, lambda t, x: 3)


def nested_data_trips(params, xs):
    """Inner trip count from data: 1 + (t mod 3) + (1 if x_t[0, 0] > 0): 1..4, 0 never."""
    return _nested(params, xs, lambda t, x: 1 + t % 3 + (x[0, 0] > 0).astype(jnp.int32))


def nested_dim_trips(params, xs):
    """Inner trip count the batch size B (a dimension variable)."""
    return _nested(params, xs, lambda t, x: x.shape[0])


# ------------------------------------------------------------------------------- tiny loops

def fori_dim_trips(x):
    """x [N, M]: a fori_loop over its N rows (trip count = the dim N) accumulating
    sum_i (i + 1) * x[i] in a [M] carry, and writing a running max into a [N] buffer."""
    def body(i, carry):
        acc, buf = carry
        row = lax.dynamic_index_in_dim(x, i, keepdims=False)
        acc = acc + (i + 1).astype(x.dtype) * row
        return acc, buf.at[i].set(jnp.max(acc))

    return lax.fori_loop(0, x.shape[0], body,
                         (jnp.zeros(x.shape[1:], x.dtype), jnp.zeros(x.shape[:1], x.dtype)))


def contract(v):
    """A contraction (Lipschitz <= 0.75): iterating it cannot amplify rounding differences."""
    return 0.5 * v + 0.25 * jnp.cos(v)


def zero_trip(x):
    """fori_loop(N, N) on x [N]: zero trips, known only at run time (a static fori_loop(0, 0)
    is removed by jax while tracing, so it would test nothing)."""
    n = x.shape[0]
    return lax.fori_loop(n, n, lambda i, v: contract(v) + 1.0, x)


def zero_trip_while(x):
    """A while_loop whose condition is false on entry (a constant counter; MLIR's canonicalizer
    keeps the loop)."""
    return lax.while_loop(lambda s: s[0] < 0, lambda s: (s[0] + 1, contract(s[1])),
                          (jnp.int32(0), x))


def one_trip(x):
    """fori_loop(0, 1): the body runs once."""
    return lax.fori_loop(0, 1, lambda i, v: contract(v) + 1.0, x)


def many_trips(x, trips: int = 5000):
    """A static 5000 iterations of a tiny elementwise body on x [N]."""
    return lax.fori_loop(0, trips, lambda i, v: contract(v) + 1e-3 * i.astype(v.dtype), x)


def count_loop(x, n):
    """lax.while_loop run n times (n an int32 scalar: data; 0, 1, thousands): x <- contract(x),
    and the trip count actually made."""
    def body(state):
        k, v = state
        return k + 1, contract(v)

    k, v = lax.while_loop(lambda s: s[0] < n, body, (jnp.int32(0), x))
    return v, k


def halve_until_small(x):
    """while max|x| > 1: x <- x / 2, on x [B, S] (a carry of symbolic shape): exact in floating
    point. Returns (x, halvings)."""
    def body(state):
        v, k = state
        return v * 0.5, k + 1

    return lax.while_loop(lambda s: jnp.max(jnp.abs(s[0])) > 1.0, body, (x, jnp.int32(0)))


def collatz_odd_move(v):
    """3v + 1 where v > 1 is odd; and 1 (an odd move was made)."""
    return jnp.where((v > 1) & (v % 2 == 1), 3 * v + 1, v), jnp.int32(1)


def collatz_even_move(v):
    """v / 2 where v > 1; and 0."""
    return jnp.where(v > 1, v // 2, v), jnp.int32(0)


def cond_in_while(v):
    """Collatz on an int32 vector v [N] of positive values, one kind of move per step chosen by
    lax.cond inside lax.while_loop: while any v > 1: if some v > 1 is odd, v <- 3v + 1 where so,
    else v <- v / 2 where v > 1. Returns (v, steps, odd steps)."""
    def body(state):
        v, k, n_odd = state
        v, odd = lax.cond(jnp.any((v > 1) & (v % 2 == 1)), collatz_odd_move, collatz_even_move,
                          v)
        return v, k + 1, n_odd + odd

    return lax.while_loop(lambda s: jnp.any(s[0] > 1) & (s[1] < 10000), body,
                          (v, jnp.int32(0), jnp.int32(0)))


def while_in_cond(x):
    """lax.cond on the sign of x.sum() (x [B, S]) between a while loop (halve_until_small) and
    a plain branch (x * 2, 0)."""
    return lax.cond(x.sum() > 0, halve_until_small, lambda v: (v * 2.0, jnp.int32(0)), x)


# ------------------------------------------------------------------------------- tree search

def tree_search(prior, leaf_value, n_sims):
    """A search over B trees of N nodes (as in MCTS libraries, in plain jax): node 0 is the
    root, simulation s adds node s + 1. Each of n_sims <= N - 1 simulations walks from the root
    by PUCT (the best child by mean value plus a prior bonus) until the chosen action has no
    child, adds the child there, and backs its value up to the root. prior [B, N, A] and
    leaf_value [B, N]; the trees are vmapped, so the walks are batched while loops whose steps
    gather and scatter at data-dependent nodes. Returns the root's visits and value sum and
    the root's children."""
    b, n, a = prior.shape
    children = jnp.full((b, n, a), -1, jnp.int32)
    parents = jnp.full((b, n), -1, jnp.int32)
    visits = jnp.zeros((b, n), jnp.float32)
    value_sum = jnp.zeros((b, n), jnp.float32)

    def one_tree(children, parents, visits, value_sum, prior, leaf_value, sim):
        def best_action(node):
            kids = children[node]
            seen = kids >= 0
            kv = jnp.where(seen, visits[jnp.maximum(kids, 0)], 0.0)
            kq = jnp.where(seen, value_sum[jnp.maximum(kids, 0)] / jnp.maximum(kv, 1.0), 0.0)
            u = prior[node] * jnp.sqrt(visits[node] + 1.0) / (1.0 + kv)
            return jnp.argmax(kq + 1.25 * u).astype(jnp.int32)

        def descend(c):
            child = children[c[0], c[1]]
            return child, best_action(child)
        node, act = lax.while_loop(lambda c: children[c[0], c[1]] >= 0, descend,
                                   (jnp.int32(0), best_action(0)))
        new = sim + 1
        children = children.at[node, act].set(new)
        parents = parents.at[new].set(node)
        v = leaf_value[new]

        def back_up(c):
            k, visits, value_sum = c
            return parents[k], visits.at[k].add(1.0), value_sum.at[k].add(v)
        _, visits, value_sum = lax.while_loop(lambda c: c[0] >= 0, back_up,
                                              (new, visits, value_sum))
        return children, parents, visits, value_sum

    step = jax.vmap(one_tree, in_axes=(0, 0, 0, 0, 0, 0, None))
    children, parents, visits, value_sum = lax.fori_loop(
        0, n_sims, lambda s, st: step(*st, prior, leaf_value, s),
        (children, parents, visits, value_sum))
    return visits[:, 0], value_sum[:, 0], children[:, 0]


def tree_search_inputs(b: int, n: int, rng: np.random.Generator, a: int = 8, sims=None):
    """(prior, leaf_value, n_sims) for B trees of N nodes and A actions: n_sims = N - 1 (every
    node added) unless given."""
    logits = rng.standard_normal((b, n, a))
    prior = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return (prior.astype(np.float32), rng.uniform(-1, 1, (b, n)).astype(np.float32),
            np.int32(max(n - 1, 0) if sims is None else sims))


# ------------------------------------------------------------------------------- registry

DYNAMIC_AXES = {
    "lstm": (None, {0: "T", 1: "B"}),
    "gru": (None, {0: "T", 1: "B"}),
    "reverse_cumulative": ({0: "T", 1: "N"},),
    "greedy_decode": (None, {0: "B", 1: "P"}, {0: "L"}),
    "solver": ({0: "N", 1: "N"}, {0: "N"}, None),
    "conjugate_gradient": ({0: "N", 1: "N"}, {0: "N"}, None),
    "cond_switch": (None, {0: "B"}),
    "nested": (None, {0: "T", 1: "B"}),
    "nested_data_trips": (None, {0: "T", 1: "B"}),
    "nested_dim_trips": (None, {0: "T", 1: "B"}),
    "fori_dim_trips": ({0: "N", 1: "M"},),
    "zero_trip": ({0: "N"},),
    "zero_trip_while": ({0: "N"},),
    "one_trip": ({0: "N"},),
    "many_trips": ({0: "N"},),
    "count_loop": ({0: "N"}, None),
    "halve_until_small": ({0: "B", 1: "S"},),
    "cond_in_while": ({0: "N"},),
    "while_in_cond": ({0: "B", 1: "S"},),
    "tree_search": ({0: "B", 1: "N"}, {0: "B", 1: "N"}, None),
}

MODELS = {name: globals()[name] for name in DYNAMIC_AXES}
