"""Molecular dynamics of N particles in a periodic box: a Lennard-Jones energy over all
pairs, forces from `jax.grad`, and velocity-Verlet steps in a `lax.fori_loop`. The particle
count N is a dynamic axis: one jdisc compile for every N, jax.jit one per N.

    python examples/particles.py [--small]
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from _compare import compare, sizes

BOX, DT, STEPS, CUTOFF = 10.0, 1e-3, 10, 2.5


def displacement(ri, rj):
    d = ri - rj
    return d - BOX * jnp.round(d / BOX)          # the nearest periodic image


def energy(r):
    n = r.shape[0]
    d = displacement(r[:, None, :], r[None, :, :])
    r2 = jnp.sum(d * d, axis=-1) + jnp.eye(n, dtype=r.dtype)     # no self-pair: r2 = 1 there
    inv6 = (1.0 / r2) ** 3
    pair = 4.0 * (inv6 * inv6 - inv6)
    keep = (r2 < CUTOFF ** 2) & ~jnp.eye(n, dtype=bool)
    return 0.5 * jnp.sum(jnp.where(keep, pair, 0.0))


def simulate(r, v):
    force = lambda r: -jax.grad(energy)(r)       # noqa: E731

    def step(_, state):
        r, v, f = state
        v_half = v + 0.5 * DT * f
        r = jnp.mod(r + DT * v_half, BOX)
        f = force(r)
        return r, v_half + 0.5 * DT * f, f
    r, v, _ = jax.lax.fori_loop(0, STEPS, step, (r, v, force(r)))
    return energy(r), r, v


def lattice(n, rng):
    """n particles on a jittered cubic lattice (no two too close), small random velocities."""
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    r = (grid + 0.5) * (BOX / side) + 0.05 * rng.standard_normal((n, 3))
    return np.mod(r, BOX).astype(np.float32), (0.1 * rng.standard_normal((n, 3))).astype(np.float32)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="a few small systems (CI)")
    small = ap.parse_args().small
    rng = np.random.default_rng(0)
    stream = [lattice(n, rng) for n in sizes(small, [2, 9, 27], [2, 27, 64, 101, 216, 343])]
    # f32 forces over ten steps: both sides sum the same pairs in different orders and the
    # steps carry the rounding on (measured 3e-7 of the result's scale; 1e-5 leaves room)
    compare(f"particles (Lennard-Jones in a periodic box, {STEPS} Verlet steps)", simulate,
            ({0: "N"}, {0: "N"}), stream, tol=1e-5)
