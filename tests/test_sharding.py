"""jdisc under JAX's SPMD partitioner (sharding.py) and its sharding rule (parallel_axes.py).

The rule is tested on the IR (no C compiler): which dims are parallel, where they go, and that
every construct that reads across a dim, or reads it as a number, makes it not parallel. The
partitioned calls run in `sharding_cases.py`, in processes with 4 host devices: one per
partitioner (Shardy, GSPMD) and one with meshes of explicit axes.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jdisc

from conftest import to_ir

CASES_FILE = Path(__file__).with_name("sharding_cases.py")


def rule(fn, axes, *args):
    prog = to_ir(fn, axes, *args)
    return prog.parallel


def f32(*shape):
    return np.ones(shape, np.float32)


# --------------------------------------------------------------------------- the rule

@pytest.mark.fast
def test_an_mlp_is_parallel_in_its_batch_and_reductions_combine():
    def f(x, w, b):
        h = jnp.tanh(x @ w + b)
        return h, jnp.sum(h, axis=0), jnp.mean(h), h.reshape(h.shape[0], -1), jnp.max(h)
    par = rule(f, [{0: "B"}, None, None], f32(4, 3, 8), f32(8, 5), f32(5))
    assert par.dims == ("B",) and not par.refused
    assert par.inputs == (("B", None, None), (None, None), (None,))
    assert par.outputs == (("B", None, None), (None, None), (), ("B", None), ())
    assert par.combine == ((), (("B", "add", 0),), (("B", "add", 1),), (), (("B", "max", 0),))


@pytest.mark.fast
def test_the_gradient_of_a_mean_loss_is_a_rescaled_sum():
    def loss(w, x, y):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
    par = rule(jax.grad(loss), [None, {0: "B"}, {0: "B"}], f32(4, 2), f32(6, 4), f32(6, 2))
    assert par.dims == ("B",) and par.combine == ((("B", "add", 1),),)


@pytest.mark.fast
def test_batched_attention_conv_gather_and_scan():
    def attn(q, k):
        return jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k), -1)
    par = rule(attn, [{0: "B", 1: "S"}] * 2, f32(2, 5, 8), f32(2, 5, 8))
    assert par.dims == ("B",) and dict(par.refused)["S"].startswith("two axes of one value")

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    par = rule(conv, [{0: "B", 1: "H"}, None], f32(2, 8, 8, 3), f32(3, 3, 3, 4))
    assert par.dims == ("B",) and "convolution" in dict(par.refused)["H"]

    def emb(table, ids):
        return table[ids]
    par = rule(emb, [None, {0: "B", 1: "S"}], f32(10, 4), np.ones((3, 5), np.int32))
    assert par.dims == ("B", "S") and par.outputs == (("B", "S", None),)

    def rnn(x, w):
        return lax.scan(lambda h, xt: (jnp.tanh(h @ w + xt),) * 2, jnp.zeros(x.shape[1:]), x)
    par = rule(rnn, [{0: "T", 1: "B"}, None], f32(4, 3, 8), f32(8, 8))
    assert par.dims == ("B",) and par.outputs == (("B", None), (None, "B", None))


@pytest.mark.fast
def test_a_segment_sum_over_sharded_edges_is_a_partial_sum():
    def gnn(h, src, dst, w):
        return jax.ops.segment_sum(jnp.tanh(h[src] @ w), dst, num_segments=h.shape[0])
    i32 = np.zeros(7, np.int32)
    par = rule(gnn, [{0: "N"}, {0: "E"}, {0: "E"}, None], f32(5, 4), i32, i32, f32(4, 4))
    assert par.dims == ("E",) and par.combine == ((("E", "add", 0),),)
    assert "gather reads across it" in dict(par.refused)["N"] or "N" in dict(par.refused)

    def overwrite(x, i, u):
        return x.at[i].set(u)
    par = rule(overwrite, [None, {0: "E"}, {0: "E"}], f32(3), i32, f32(7))
    assert par.dims == () and "the scatter writes across it" in dict(par.refused)["E"]


@pytest.mark.fast
def test_cross_entropy_with_integer_labels_and_its_gradient():
    def xent(w, x, labels):         # take_along_axis: a batched gather and, in the gradient,
        logp = jax.nn.log_softmax(x @ w)      # a batched scatter-add; its bounds check reads
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))   # (B, 4)[1]
    args = (f32(8, 4), f32(6, 8), np.zeros(6, np.int32))
    for fn in (xent, jax.value_and_grad(xent)):
        par = rule(fn, [None, {0: "B"}, {0: "B"}], *args)
        assert par.dims == ("B",) and all(c == (("B", "add", 1),) for c in par.combine), par


@pytest.mark.parametrize("name, fn, why", [
    ("outer product", lambda x: x[:, None] * x[None, :], "two axes"),
    ("shifted slice", lambda x: x[1:] * 2, "an axis has the size"),
    ("reverse", lambda x: lax.rev(x, (0,)) * 2, "does not keep the whole axis"),
    ("iota", lambda x: x + jnp.arange(x.shape[0]), "an iota counts along it"),
    ("cumsum", lambda x: jnp.cumsum(x), "it is read as a number (stablehlo.reduce_window"),
    ("sort", lambda x: jnp.sort(x), "the sort is along it"),
    ("argmax", lambda x: jnp.argmax(x), ""),
    ("centring", lambda x: x - jnp.mean(x), "partial or rescaled"),
    ("a dim as data", lambda x: x * x.shape[0] + 1.0, ""),
    ("first element", lambda x: x * x[0], ""),
    ("sum then tanh", lambda x: jnp.tanh(jnp.sum(x)), "partial or rescaled"),
    ("sum plus one", lambda x: jnp.sum(x) + 1.0, "partial or rescaled"),
    ("log of a sum of exps", lambda x: jax.nn.logsumexp(x), ""),
    ("pairs", lambda x: jnp.concatenate([x, x]), ""),
    ("merged reshape", lambda x: jnp.stack([x, x], 1).reshape(-1), "an axis has the size 2*N"),
    ("while over it", lambda x: lax.fori_loop(0, x.shape[0], lambda i, c: c + x[i], 0.0), ""),
    ("random bits", lambda x: x + jax.random.uniform(jax.random.key(0), x.shape), ""),
])
@pytest.mark.fast
def test_what_reads_across_a_dim_makes_it_not_parallel(name, fn, why):
    par = rule(fn, [{0: "N"}], f32(6))
    assert par.dims == (), (name, par)
    refused = dict(par.refused)
    assert "N" in refused and why in refused["N"], (name, refused)


@pytest.mark.fast
def test_explain_names_the_rule():
    import jdisc

    def f(x, y):
        return x * 2, jnp.sort(y, axis=0)
    text = jdisc.jit(f, dynamic_axes=[{0: "B"}, {0: "N"}]).explain(f32(4, 3), f32(5, 2))
    assert "B: parallel: x axis 0 -> result[0] axis 0" in text, text
    assert "N: not parallel: the sort is along it (stablehlo.sort at" in text, text


# --------------------------------------------------------------------------- partitioned calls

def _case_names() -> list[str]:
    import re
    return re.findall(r"@case\ndef (\w+)\(", CASES_FILE.read_text())


@pytest.mark.parametrize("mode", ["shardy", "gspmd", "explicit"])
def test_partitioned_calls(mode, tmp_path):
    """Every case of sharding_cases.py, in one process per partitioner mode."""
    from subprocess_support import run_python
    out = tmp_path / "results.json"
    code = (f"import runpy, sys; sys.argv = [{str(CASES_FILE)!r}, {str(out)!r}, {mode!r}]; "
            f"runpy.run_path({str(CASES_FILE)!r}, run_name='__main__')")
    proc = run_python(code, timeout=900)
    results = json.loads(out.read_text()) if out.exists() else {}
    failed = {n: results.get(n, "did not run") for n in _case_names()
              if results.get(n) != "ok"}
    assert proc.returncode == 0 and not failed, (
        f"exit {proc.returncode}; failed: {sorted(failed)}\n"
        + "\n".join(f"--- {n}\n{why}" for n, why in failed.items())
        + f"\n--- stderr\n{proc.stderr[-3000:]}")


# --------------------------------------------------------------------------- the rule, fuzzed

def _halves(x: np.ndarray, axes: tuple) -> list[np.ndarray]:
    """x cut into two equal shards along every axis of `axes` (a list of axis indices)."""
    parts = [x, x]
    for k in axes:
        n = x.shape[k] // 2
        parts = [np.take(parts[0], range(n), axis=k), np.take(parts[1], range(n, 2 * n), axis=k)]
    return parts


def _combined(parts: list, kind: str, scale: int):
    a, b = (np.asarray(p) for p in parts)
    if kind == "add":
        out = a + b
    elif kind in ("max", "min"):
        out = np.maximum(a, b) if kind == "max" else np.minimum(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)   # the same on every shard
        out = a
    return out * 2.0 ** -scale if scale else out


def _reduced(fn):
    """fn's float outputs summed, averaged and maxed (and their magnitudes summed, the scale of
    the sums' rounding): partial results for the rule wherever fn is parallel."""
    def g(*xs):
        outs = []
        for o in fn(*xs):
            if jnp.issubdtype(o.dtype, jnp.floating):
                outs += [jnp.sum(o), jnp.mean(o), jnp.max(o, initial=-jnp.inf),
                         jnp.sum(jnp.abs(o))]
        return tuple(outs)
    return g


@pytest.mark.fast
@pytest.mark.parametrize("reduced", [False, True])
@pytest.mark.parametrize("seed", range(25))
def test_the_rule_is_sound_on_random_programs(seed, reduced):
    """A dim the rule calls parallel: the program (run by jax.jit) on the two halves of its
    axes gives the halves of the results, or partial results that combine as the rule says.
    The programs are the whole-program fuzzer's, and (`reduced`) reductions of their outputs."""
    from program_fuzz import Invalid, dynamic_axes, infer, make_fn, make_inputs, random_program
    prog, envs = random_program(7100 + seed)
    fn, axes = make_fn(prog), dynamic_axes(prog)
    if reduced:
        fn = _reduced(fn)
    half = {d: max(envs[0][d], 1) for d in envs[0]}
    for d in half:
        full = dict(half, **{d: 2 * half[d]})
        try:
            infer(prog, [half, full])
        except Invalid:
            continue
        xs = make_inputs(prog, full, seed)
        try:
            par = rule(fn, axes, *make_inputs(prog, half, seed))
        except jdisc.JdiscError as err:
            # a program jax.export itself refuses (its lowering checks sizes that the
            # generator's tracing does not): dropped, as the fuzzer drops it (fuzzing/check.py)
            if "jax.export could not trace" not in str(err):
                raise
            pytest.skip(f"jax.export refuses program {7100 + seed}")
        if d not in par.dims:
            continue
        shards = [[], []]
        for x, a in zip(xs, par.inputs):
            for k, part in enumerate(_halves(np.asarray(x), [i for i, n in enumerate(a)
                                                              if n == d])):
                shards[k].append(part)
        want = jax.jit(fn)(*xs)
        if not want:
            continue
        got = [jax.jit(fn)(*s) for s in shards]
        # f32: the halves' sums round differently from the whole's, by at most about
        # (terms) * 2**-24 * (their magnitudes): 1e-4 of the largest magnitude sum covers it
        sums = max([1.0] + [float(np.nan_to_num(np.asarray(w), posinf=0.0).max())
                            for w in want[3::4]]) if reduced else 1.0
        for j, (w, out_axes, comb) in enumerate(zip(want, par.outputs, par.combine)):
            w = np.asarray(w)
            parts = [np.asarray(g[j]) for g in got]
            if d in out_axes:
                g = np.concatenate(parts, axis=out_axes.index(d))
            else:
                kind, scale = next(((k, s) for dd, k, s in comb if dd == d), ("exact", 0))
                g = _combined(parts, kind, scale)
            g = g.astype(w.dtype)
            if w.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w, err_msg=f"seed {seed} dim {d} output {j}")
            else:
                finite = np.abs(w[np.isfinite(w)])
                scale = max(1.0, float(finite.max())) if finite.size else 1.0
                tol = 1e-4 * sums if reduced else 2e-4 * scale
                np.testing.assert_allclose(g, w, rtol=2e-4, atol=tol, equal_nan=True,
                                           err_msg=f"seed {seed} dim {d} output {j}")
