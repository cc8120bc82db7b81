"""GEMM epilogues (dynamic_passes/passes/gemm_epilogue.py, c_runtime/jd_gemm.h jd_epilogue): a
bias along the rows and a ReLU after a GEMM, done by the GEMM's pieces. Which programs get one
and which keep their loop kernel, and, for every way jd_gemm cuts a GEMM (rows, columns,
matrices, matrix-vector pieces, the skinny loops, k of 0 and 1), the same bits as the GEMM
alone followed by the bias and ReLU in numpy."""

import shutil
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import to_ir
from subprocess_support import run_python


def _epilogues(fn, *shapes, dtype=np.float32, axes=None):
    args = [np.ones(s, dtype) for s in shapes]
    axes = axes or ({0: "N"},) + (None,) * (len(shapes) - 1)
    prog = to_ir(fn, axes, *args)
    return [(k.epilogue.bias is not None, k.epilogue.relu) for k in prog.kernels
            if k.epilogue is not None], prog


@pytest.mark.parametrize("fn, want", [
    (lambda x, w, b: x @ w + b, [(True, False)]),
    (lambda x, w, b: b + x @ w, [(True, False)]),
    (lambda x, w, b: jax.nn.relu(x @ w + b), [(True, True)]),
    (lambda x, w, b: jnp.maximum(0.0, b + x @ w), [(True, True)]),
    (lambda x, w, b: jax.nn.relu(x @ w), [(False, True)]),
    # flax's Dense: the bias reshaped to [1, n] first
    (lambda x, w, b: jax.nn.relu(x @ w + b.reshape(1, -1)), [(True, True)]),
    (lambda x, w, b: x @ w + b.reshape(1, 1, -1)[0], [(True, False)]),
    # two dense layers: each GEMM takes its own
    (lambda x, w, b: jax.nn.relu(x @ w + b) @ jnp.ones((6, 6), np.float32) + b,
     [(True, True), (True, False)]),
])
def test_these_take_an_epilogue(fn, want):
    got, _ = _epilogues(fn, (5, 4), (4, 6), (6,))
    assert got == want


@pytest.mark.parametrize("fn, why", [
    (lambda x, w, b: jnp.tanh(x @ w + b), "another activation"),
    (lambda x, w, b: jnp.maximum(x @ w + b, 1.0), "a maximum with 1"),
    (lambda x, w, b: jnp.maximum(x @ w + b, -0.0), "a maximum with -0"),
    (lambda x, w, b: (x @ w + b, x @ w), "the product read again"),
    (lambda x, w, b: x @ w + x[:, :1], "a bias along the columns"),
    (lambda x, w, b: x @ w + b[None, :] * 2, "a scaled bias"),
    (lambda x, w, b: x @ w + jnp.tile(b[:3], 2), "a bias tiled from a slice"),
    (lambda x, w, b: x @ w + b.reshape(2, 3).T.reshape(6), "a bias reordered"),
    (lambda x, w, b: (x @ w).astype(jnp.float16).astype(jnp.float32) + b, "another dtype"),
    (lambda x, w, b: x @ w + (x @ w)[0], "a bias that is the product's own row"),
])
def test_these_keep_their_loop_kernel(fn, why):
    got, _ = _epilogues(fn, (5, 4), (4, 6), (6,))
    assert got == [], why


def test_complex_and_integer_products_keep_their_loop_kernel():
    got, _ = _epilogues(lambda x, w, b: x @ w + b, (5, 4), (4, 6), (6,), dtype=np.complex64)
    assert got == []
    got, _ = _epilogues(lambda x, w, b: jnp.maximum(x @ w + b, 0), (5, 4), (4, 6), (6,),
                        dtype=np.int32)
    assert got == []


def test_a_batched_product_and_a_bias_computed_after_it():
    # the bias is a reduction that runs after the GEMM: the merged kernel runs where the loop
    # kernel did, after it
    def f(x, w):
        p = jnp.einsum("bmk,bkn->bmn", x, w)
        return jax.nn.relu(p + w.sum((0, 1)))
    got, prog = _epilogues(f, (2, 5, 4), (2, 4, 6), axes=({1: "N"}, None))
    assert got == [(True, True)]
    assert [k.kind for k in prog.kernels] == ["reduce", "dot"]
    import jdisc
    g = jdisc.jit(f, dynamic_axes=({1: "N"}, None), bridge=False)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 4, 6)).astype(np.float32)
    for n in (0, 1, 3, 17):
        x = rng.standard_normal((2, n, 4)).astype(np.float32)
        np.testing.assert_allclose(g(x, w), jax.jit(f)(x, w), rtol=1e-5, atol=1e-5)
    assert g.stats()["compiles"] == 1


SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp, jdisc

    def epilogue(p, bias, relu):
        # the loop kernel's operations in numpy: an add of the dtype, stablehlo.maximum's ReLU
        y = p + bias if bias is not None else p
        if relu:
            y = np.where((y > 0) | np.isnan(y), y, np.zeros_like(y))
        return y

    def same_bits(got, want, what):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape, what
        assert (got.view(np.uint8) == want.view(np.uint8)).all(), what

    rng = np.random.default_rng(0)
    gemm = jdisc.jit(lambda a, w: a @ w, dynamic_axes=({0: "m", 1: "k"}, {0: "k", 1: "n"}))
    dense = {(bias, relu): jdisc.jit(
        (lambda a, w, b: jax.nn.relu(a @ w + b)) if bias and relu else
        (lambda a, w, b: a @ w + b) if bias else (lambda a, w, b: jax.nn.relu(a @ w)),
        dynamic_axes=({0: "m", 1: "k"}, {0: "k", 1: "n"}, {0: "n"}))
        for bias, relu in [(True, True), (True, False), (False, True)]}
    # (m, k, n): one below the pool's threshold, rows split, columns split (the bias read from
    # each piece's first column), matrix-vector pieces of one row and of one column, the
    # skinny loops in column pieces, k of 0 (no products) and 1 (jd_outer)
    for m, k, n in [(0, 8, 5), (7, 5, 3), (1000, 64, 70), (24, 300, 2000), (1, 64, 70001),
                    (70001, 64, 1), (33, 256, 1000), (5, 0, 7), (6, 1, 9), (333, 129, 257)]:
        for dt in (np.float32, np.float64):
            with jax.enable_x64(dt == np.float64):
                a = rng.standard_normal((m, k)).astype(dt)
                w = rng.standard_normal((k, n)).astype(dt)
                b = rng.standard_normal(n).astype(dt)
                # NaN, infinities and zeros of either sign reach the epilogue (a product of
                # one term, k = 1, is 0 * w = -0 where w < 0, and -0 + -0 is -0)
                if m >= 2 and n >= 3:
                    a[0, :] = 0.0
                    w[:, 0] = -np.abs(w[:, 0])
                    b[:3] = [-0.0, np.nan, np.inf]
                    a[1, :1] = np.nan
                p = np.asarray(gemm(a, w))
                for (bias, relu), f in dense.items():
                    same_bits(f(a, w, b), epilogue(p, b if bias else None, relu),
                              (m, k, n, dt.__name__, bias, relu))
    # matrices of a batch, each cut into pieces
    bmm = jdisc.jit(lambda a, w, b: jax.nn.relu(jnp.einsum("bmk,bkn->bmn", a, w) + b),
                    dynamic_axes=({0: "b", 1: "m"}, {0: "b"}, None))
    bgemm = jdisc.jit(lambda a, w: jnp.einsum("bmk,bkn->bmn", a, w),
                      dynamic_axes=({0: "b", 1: "m"}, {0: "b"}))
    for nb, m in [(3, 700), (5, 1), (1, 0), (2, 40)]:
        a = rng.standard_normal((nb, m, 96)).astype(np.float32)
        w = rng.standard_normal((nb, 96, 130)).astype(np.float32)
        b = rng.standard_normal(130).astype(np.float32)
        same_bits(bmm(a, w, b), epilogue(np.asarray(bgemm(a, w)), b, True), (nb, m))
    jobs = gemm.compiled_for(a[0], w[0]).executable.library.handle.jd_pool_jobs()
    assert jobs > 0, "the pool was never used"
    print("ok", *(f.stats()["compiles"] for f in dense.values()), bmm.stats()["compiles"])
""")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_same_bits_as_the_gemm_then_the_loop_kernel():
    proc = run_python(SCRIPT, JDISC_NUM_THREADS="3", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # one compile per element type for every size
    assert proc.stdout.split() == ["ok", "2", "2", "2", "1"]


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 257])
def test_a_dense_layer_against_jax_jit(n):
    rng = np.random.default_rng(n)
    w1 = (rng.standard_normal((48, 96)) / 7).astype(np.float32)
    w2 = (rng.standard_normal((96, 10)) / 10).astype(np.float32)
    b1, b2 = rng.standard_normal(96).astype(np.float32), rng.standard_normal(10).astype(np.float32)

    def mlp(x):
        return jax.nn.relu(x @ w1 + b1) @ w2 + b2

    import jdisc
    f = jdisc.jit(mlp, dynamic_axes=({0: "N"},), bridge=False)
    x = rng.standard_normal((n, 48)).astype(np.float32)
    np.testing.assert_allclose(f(x), jax.jit(mlp)(x), rtol=2e-5, atol=2e-5)
