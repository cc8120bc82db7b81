"""GEMMs split into single-threaded BLAS calls on the program's pool (c_runtime/jd_gemm.h):
right for every way a GEMM is cut (rows, columns, batches, transposed operands), from two
Python threads at once, and in a child after fork(). Each case runs in a fresh process with
JDISC_NUM_THREADS=3, so the pool is used whatever the load on the test machine."""

import shutil
import textwrap

import pytest

from subprocess_support import run_python

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

SCRIPT = textwrap.dedent("""
    import os, sys, threading, warnings
    import numpy as np, jax.numpy as jnp, jdisc

    def check(got, a, b):
        # |got - a@b| <= gamma_k * (|a| @ |b|) elementwise, gamma_k = k*u/(1 - k*u), u = 2^-24:
        # the deterministic bound of any f32 summation order (the reference is f64).
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        k, u = a.shape[-1], 2.0 ** -24
        bound = k * u / (1 - k * u) * (np.abs(a64) @ np.abs(b64)) + 1e-30
        err = np.abs(np.asarray(got, np.float64) - a64 @ b64)
        assert (err <= bound).all(), (a.shape, b.shape, float((err / bound).max()))

    rng = np.random.default_rng(0)
    mm = jdisc.jit(lambda a, b: a @ b, dynamic_axes=({0: "m", 1: "k"}, {0: "k", 1: "n"}))
    ta = jdisc.jit(lambda a, b: a.T @ b, dynamic_axes=({0: "k", 1: "m"}, {0: "k", 1: "n"}))
    tb = jdisc.jit(lambda a, b: a @ b.T, dynamic_axes=({0: "m", 1: "k"}, {0: "n", 1: "k"}))
    # B's rows contracted as stored ([n, k]: the GEMM's transposed B), and both transposed
    nt = jdisc.jit(lambda a, b: jnp.einsum("mk,nk->mn", a, b),
                   dynamic_axes=({0: "m", 1: "k"}, {0: "n", 1: "k"}))
    tt = jdisc.jit(lambda a, b: jnp.einsum("km,nk->mn", a, b),
                   dynamic_axes=({0: "k", 1: "m"}, {0: "n", 1: "k"}))
    bmm = jdisc.jit(lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b),
                    dynamic_axes=({0: "b", 1: "m", 2: "k"}, {0: "b", 1: "k", 2: "n"}))
    # (m, k, n): rows split (m >= n), columns split (n > m), ragged last pieces, and one below
    # the split threshold
    # one row or one column (matrix-vector products, jd_gemv_piece), split over the pool too
    for m, k, n in [(1000, 64, 70), (24, 300, 2000), (333, 129, 257), (37, 1031, 401),
                    (4099, 8, 129), (7, 5, 3), (1, 128, 512), (1, 64, 70001), (513, 37, 1),
                    (70001, 64, 1), (1, 1, 9), (1, 300, 1),
                    # 2 to 32 rows and a large B (jd_skinny.h): whole and in column pieces,
                    # ragged columns and k, one to four groups of 8 rows
                    (2, 64, 2000), (3, 256, 300), (4, 1031, 97), (4, 512, 4096),
                    (13, 301, 400), (16, 129, 1000), (29, 300, 1000), (24, 1000, 1000),
                    (40, 3000, 39),         # rows split 24 + 16: the second piece is skinny
                    # 33 to 64 rows where k <= 768: five to eight groups of 8 rows, whole, in
                    # column pieces, and pieces of 40 rows of a row split
                    (33, 256, 1000), (57, 768, 700), (64, 512, 2048), (63, 700, 129),
                    (130, 700, 110), (45, 769, 300)]:   # k = 769: sgemm
        a = rng.standard_normal((m, k), np.float32)
        b = rng.standard_normal((k, n), np.float32)
        check(mm(a, b), a, b)
        check(ta(np.ascontiguousarray(a.T), b), a, b)
        check(tb(a, np.ascontiguousarray(b.T)), a, b)
        check(nt(a, np.ascontiguousarray(b.T)), a, b)
        check(tt(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)), a, b)
    for nb, m, k, n in [(5, 200, 64, 90), (1, 900, 70, 71), (64, 33, 40, 35), (3, 17, 600, 999),
                        (4, 1, 32, 147), (3, 129, 32, 1), (600, 1, 64, 300), (2, 3, 300, 257)]:
        a = rng.standard_normal((nb, m, k), np.float32)
        b = rng.standard_normal((nb, k, n), np.float32)
        check(bmm(a, b), a, b)
    jobs = mm.compiled_for(a[0], b[0]).executable.library.handle.jd_pool_jobs()
    assert jobs > 0, "the pool was never used"

    # the same products in float64 (dgemv), with every operand layout
    import jax
    with jax.enable_x64(True):
        for m, k, n in [(1, 128, 512), (1, 64, 70001), (513, 37, 1), (70001, 64, 1), (6, 9, 4),
                        (3, 300, 257)]:
            a = rng.standard_normal((m, k))
            b = rng.standard_normal((k, n))
            want = a @ b
            for got in (mm(a, b), ta(np.ascontiguousarray(a.T), b),
                        tb(a, np.ascontiguousarray(b.T))):
                assert np.asarray(got).dtype == np.float64
                bound = k * 2.0 ** -53 * 1.01 * (np.abs(a) @ np.abs(b)) + 1e-300
                assert (np.abs(np.asarray(got) - want) <= 2 * bound).all(), (m, k, n)

    # two Python threads at once: one of them finds the pool busy and runs its pieces alone
    a = rng.standard_normal((800, 96), np.float32)
    b = rng.standard_normal((96, 300), np.float32)
    errors = []
    def work():
        try:
            for _ in range(20):
                check(mm(a, b), a, b)
        except Exception as err:
            errors.append(err)
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert not errors, errors

    # a child after fork(): the parent's workers do not exist there; it starts its own. The
    # child calls the library directly (Executable.run, numpy in and out): JAX itself is not
    # safe to use after fork().
    exe = mm.compiled_for(a, b).executable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # JAX's warning about fork()
        pid = os.fork()
    if pid == 0:
        try:
            check(exe.run([a, b])[0], a, b)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    print("ok", mm.stats()["compiles"], bmm.stats()["compiles"], ta.stats()["compiles"])
""")


def test_gemm_pieces_on_the_pool():
    proc = run_python(SCRIPT, JDISC_NUM_THREADS="3", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ok", "2", "1", "2"]     # float32 and float64 programs
