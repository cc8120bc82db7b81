"""jnp.linalg, jax.scipy.linalg and lax.linalg with dynamic batch and matrix dims, differential
against jax.jit (jax's LAPACK custom calls; jdisc calls the same routines through LAPACKE).

Each group compiles once per dtype a function that returns every listed function's results on
the same inputs, and compares them at several dim values (0 and 1 included). Outputs that
LAPACK defines only up to a sign or phase (eigenvectors, singular vectors, Schur vectors) are
compared through what is unique: their elementwise magnitudes where the eigenvalues are
distinct (random matrices), or the matrix they reconstruct. Tolerance: 2e-4 of the output's
scale for f32/c64 on well-conditioned inputs (positive definite, diagonally dominant, or
random n <= 6): both sides run LAPACK in single precision, in different builds, so they round
differently, and conditioning amplifies that.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

from conftest import differential

TOL = 2e-4
DTYPES = [np.float32, np.complex64]


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def conj_t(a):
    return jnp.swapaxes(a, -1, -2).conj()


def dominant(a):
    """A diagonally dominant (so well-conditioned, nonsingular) matrix from a."""
    return a + 3 * a.shape[-1] * jnp.eye(a.shape[-1], dtype=a.dtype)


def posdef(a):
    return a @ conj_t(a) + a.shape[-1] * jnp.eye(a.shape[-1], dtype=a.dtype)


def hermitian(a):
    return a + conj_t(a)


def recon(u, s, vh):
    return (u * s[..., None, :].astype(u.dtype)) @ vh


def run_group(rng, dtype, fns, shapes, dynamic_axes, sizes, constraints=()):
    """differential() of `lambda *args: {name: fn(*args)}` over `sizes` (dicts of dims);
    `shapes` gives each argument's shape from the dims."""
    group = lambda *args: {name: fn(*args) for name, fn in fns.items()}
    arg_sets = {str(d): tuple(rand(rng, shape(d), dtype) for shape in shapes) for d in sizes}
    differential(group, dynamic_axes, arg_sets, TOL, constraints=constraints,
                 what=f"{'/'.join(fns)} {np.dtype(dtype).name}")


BATCHED_SQUARE = (lambda d: (d["b"], d["n"], d["n"]),)
SQUARE_AXES = ({0: "b", 1: "n", 2: "n"},)
SQUARE_SIZES = [{"b": 1, "n": 1}, {"b": 3, "n": 5}, {"b": 2, "n": 2}, {"b": 0, "n": 3},
                {"b": 2, "n": 0}]


@pytest.mark.parametrize("dtype", DTYPES)
def test_factorisations_and_solves(rng, dtype):
    fns = {
        "cholesky": lambda a: jnp.linalg.cholesky(posdef(a)),
        "lax.cholesky": lambda a: lax.linalg.cholesky(posdef(a)),
        "jsl.cholesky": lambda a: jsl.cholesky(posdef(a)),
        "cho_factor": lambda a: jsl.cho_factor(posdef(a))[0],
        "inv": lambda a: jnp.linalg.inv(dominant(a)),
        "jsl.inv": lambda a: jsl.inv(dominant(a)),
        "det": lambda a: jnp.linalg.det(dominant(a)),
        "jsl.det": lambda a: jsl.det(dominant(a)),
        "slogdet": lambda a: jnp.linalg.slogdet(dominant(a)),
        "solve": lambda a: jnp.linalg.solve(dominant(a), a),
        "jsl.solve.pos": lambda a: jsl.solve(posdef(a), a, assume_a="pos"),
        "cho_solve": lambda a: jsl.cho_solve(jsl.cho_factor(posdef(a)), a),
        "lu": lambda a: lax.linalg.lu(dominant(a)),
        "lu_factor": lambda a: jsl.lu_factor(dominant(a)),
        "lu_solve": lambda a: jsl.lu_solve(jsl.lu_factor(dominant(a)), a),
        "matrix_power": lambda a: jnp.linalg.matrix_power(dominant(a), -2),
        "solve_triangular": lambda a: jsl.solve_triangular(dominant(a), a, lower=True),
        "solve_triangular.T": lambda a: jsl.solve_triangular(dominant(a), a, trans=1,
                                                             unit_diagonal=True),
        "triangular_solve.conj": lambda a: lax.linalg.triangular_solve(
            dominant(a), a, left_side=True, lower=False, transpose_a=True, conjugate_a=True),
        "triangular_solve.right": lambda a: lax.linalg.triangular_solve(
            dominant(a), a, left_side=False, lower=True),
        "expm": lambda a: jsl.expm(a * 0.3),
    }
    run_group(rng, dtype, fns, BATCHED_SQUARE, SQUARE_AXES, SQUARE_SIZES)


@pytest.mark.parametrize("dtype", DTYPES)
def test_symmetric_eigen_and_tridiagonal(rng, dtype):
    fns = {
        "eigh": lambda a: (lambda w, v: (w, jnp.abs(v)))(*jnp.linalg.eigh(hermitian(a))),
        "eigvalsh": lambda a: jnp.linalg.eigvalsh(hermitian(a)),
        "lax.eigh.upper": lambda a: (lambda v, w: (w, jnp.abs(v)))(
            *lax.linalg.eigh(hermitian(a), lower=False)),
        "jsl.eigh": lambda a: jsl.eigh(hermitian(a), eigvals_only=True),
        "tridiagonal": lambda a: lax.linalg.tridiagonal(hermitian(a))[1:3],
        "tridiagonal.upper": lambda a: lax.linalg.tridiagonal(hermitian(a), lower=False)[1:3],
        "tridiagonal_solve": lambda a: lax.linalg.tridiagonal_solve(
            a[..., 0] * 0.5, a[..., -1] + 4, a[..., 0] * 0.25, a),
    }
    run_group(rng, dtype, fns, BATCHED_SQUARE, SQUARE_AXES, SQUARE_SIZES[:4])


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_and_norms(rng, dtype):
    fns = {
        "svd": lambda a: (lambda u, s, vh: (s, jnp.abs(u), jnp.abs(vh), recon(u, s, vh)))(
            *jnp.linalg.svd(a, full_matrices=False)),
        "svd.full": lambda a: (lambda u, s, vh: (s, jnp.abs(u), jnp.abs(vh)))(
            *jnp.linalg.svd(a)),
        "svd.values": lambda a: jnp.linalg.svd(a, compute_uv=False),
        "svdvals": jnp.linalg.svdvals,
        "lax.svd": lambda a: lax.linalg.svd(a, compute_uv=False),
        "jsl.svd": lambda a: jsl.svd(a, compute_uv=False),
        "norm.2": lambda a: jnp.linalg.norm(a, ord=2, axis=(-2, -1)),
        "norm.nuc": lambda a: jnp.linalg.norm(a, ord="nuc", axis=(-2, -1)),
        "norm.fro": lambda a: jnp.linalg.norm(a, ord="fro", axis=(-2, -1)),
        "cond": jnp.linalg.cond,
    }
    sizes = [{"b": 1, "m": 1, "n": 1}, {"b": 2, "m": 5, "n": 3}, {"b": 3, "m": 2, "n": 6},
             {"b": 0, "m": 2, "n": 2}]
    run_group(rng, dtype, fns, (lambda d: (d["b"], d["m"], d["n"]),),
              ({0: "b", 1: "m", 2: "n"},), sizes)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qr_of_square_matrices(rng, dtype):
    # jax's QR lowering compares m and n in Python: with symbolic dims it exports only for
    # square matrices (or under a constraint that decides m >= n)
    fns = {
        "qr": lambda a: jnp.linalg.qr(a),
        "qr.complete": lambda a: jnp.linalg.qr(a, mode="complete"),
        "qr.r": lambda a: jnp.linalg.qr(a, mode="r"),
        "jsl.qr": lambda a: jsl.qr(a),
        "lax.qr": lambda a: lax.linalg.qr(a, full_matrices=False),
        "householder_product": lambda a: lax.linalg.householder_product(
            a, a[..., 0, :] * 0.3),
        # (jax 0.8's polar takes one matrix)
        "polar.qdwh": jax.vmap(lambda a: jsl.polar(dominant(a), method="qdwh")[0]),
        "polar.svd": jax.vmap(lambda a: jsl.polar(dominant(a), method="svd")[1]),
    }
    run_group(rng, dtype, fns, BATCHED_SQUARE, SQUARE_AXES, SQUARE_SIZES[:4])


@pytest.mark.parametrize("dtype", DTYPES)
def test_general_eigen_schur_hessenberg(rng, dtype):
    def eig_invariants(a):
        w, v = jnp.linalg.eig(a)
        order = jnp.argsort(w.real + 1e-3 * w.imag, axis=-1)   # distinct for random a
        w = jnp.take_along_axis(w, order, -1)
        return w, jnp.take_along_axis(jnp.abs(v), order[..., None, :], -1)
    fns = {
        "eig": eig_invariants,
        "eigvals": lambda a: jnp.sort(jnp.abs(jnp.linalg.eigvals(a)), axis=-1),
        "lax.eig.left": lambda a: jnp.sort(jnp.abs(lax.linalg.eig(a)[0]), axis=-1),
        # Schur vectors are unique up to a phase per column: Z T Z^H rebuilds a, and |T| is
        # the same for every choice
        "schur": lambda a: (lambda t, z: (z @ t @ conj_t(z), jnp.abs(t)))(*jsl.schur(a)),
        "lax.schur": lambda a: jnp.abs(lax.linalg.schur(a, compute_schur_vectors=False)[0]),
    }
    run_group(rng, dtype, fns, BATCHED_SQUARE, SQUARE_AXES, SQUARE_SIZES[:4])


@pytest.mark.parametrize("dtype", DTYPES)
def test_hessenberg_with_a_static_size(rng, dtype):
    # jax's lowering of gehrd needs n static; the batch stays dynamic
    fns = {"hessenberg": lambda a: lax.linalg.hessenberg(a),
           "jsl.hessenberg": lambda a: jax.vmap(jsl.hessenberg)(a)}
    run_group(rng, dtype, fns, (lambda d: (d["b"], 5, 5),), ({0: "b"},),
              [{"b": 1}, {"b": 3}, {"b": 0}])


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_functions_and_structure(rng, dtype):
    fns = {
        "sqrtm": lambda a: jsl.sqrtm(posdef(a)),
        "funm": lambda a: jsl.funm(a * 0.2, jnp.sin),
        "expm_frechet": lambda a: jsl.expm_frechet(a * 0.2, a),
        "solve_sylvester": lambda a: jsl.solve_sylvester(dominant(a), dominant(a), a),
        "block_diag": lambda a: jsl.block_diag(a, a[:1, :1]),
        "toeplitz": lambda a: jsl.toeplitz(a[0], a[1]),
        "multi_dot": lambda a: jnp.linalg.multi_dot([a, a, a]),
        "tensorinv": lambda a: jnp.linalg.tensorinv(dominant(a), ind=1),
        "cond.fro": lambda a: jnp.linalg.cond(dominant(a), p="fro"),   # refuses n = 0
    }
    run_group(rng, dtype, fns, (lambda d: (d["n"], d["n"]),), ({0: "n", 1: "n"},),
              [{"n": 2}, {"n": 3}, {"n": 6}], constraints=("n >= 2",))


@pytest.mark.parametrize("dtype", DTYPES)
def test_failed_and_singular_factorisations_give_jaxs_outputs(rng, dtype):
    # jax turns LAPACK's info into NaN results in StableHLO (cholesky of a matrix that is not
    # positive definite, eigh / svd of NaN input); a singular LU is no failure (info > 0 is
    # kept: det 0, inf in the inverse)
    def fns(a):
        singular = a.at[..., 0, :].set(0)
        return {"cholesky.not_pd": jnp.linalg.cholesky(-posdef(a)),
                "eigh.nan": jnp.linalg.eigvalsh(hermitian(a) * jnp.nan),
                "svd.nan": jnp.linalg.svd(a * jnp.nan, compute_uv=False),
                "eig.nan": jnp.linalg.eigvals(a * jnp.nan),
                "lu.singular": lax.linalg.lu(singular),
                "det.singular": jnp.linalg.det(singular)}
    arg_sets = {str(d): (rand(rng, (d["b"], d["n"], d["n"]), dtype),) for d in SQUARE_SIZES[:3]}
    differential(fns, SQUARE_AXES, arg_sets, TOL, what=f"failures {np.dtype(dtype).name}")
