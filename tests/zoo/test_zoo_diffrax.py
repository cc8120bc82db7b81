"""Zoo: diffrax ODE solves (a neural ODE vector field, random weights) under jdisc vs jax.jit.

The adaptive solve is a data-dependent while loop (diffrax's step-size controller accepts or
rejects each step from an error estimate); the batch of initial states is dynamic.

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_ADAPTIVE = 1e-4: both sides solve to rtol = atol = 1e-5. When their step sequences agree
  (the test also compares the accepted/rejected step counts exactly) the results differ by
  f32 rounding through ~100 Runge-Kutta stages of small GEMMs (measured ~1e-6); 1e-4 stays
  below the solver's own error bound, so a wrong step or stage cannot hide in it.
* TOL_FIXED = 2e-5: a fixed-step Heun solve, 40 steps of GEMMs of K <= 16 and tanh, contractive
  vector field: rounding does not compound (measured ~5e-7).
"""

import jax
import jax.numpy as jnp
import pytest

diffrax = pytest.importorskip("diffrax")
eqx = pytest.importorskip("equinox")

from zoo_support import BATCH_ONLY, check_model, cheap_random, normal, to_numpy

TOL_ADAPTIVE = 1e-4
TOL_FIXED = 2e-5
D = 4


class Field(eqx.Module):
    """dy/dt = MLP(y, t): a neural ODE vector field on one state."""
    mlp: eqx.nn.MLP

    def __init__(self, key):
        self.mlp = eqx.nn.MLP(D + 1, D, 16, depth=2, activation=jnp.tanh, key=key)

    def __call__(self, t, y, args):
        return self.mlp(jnp.concatenate([y, t[None]])) - 0.5 * y


def rms_norm(y):
    # diffrax's default norm (lineax's rms_norm) divides by float(y.size), which jax.export
    # cannot trace with a symbolic batch; jnp.mean computes the same RMS from the symbolic size.
    return jnp.sqrt(jnp.mean(jnp.square(y)))


@pytest.fixture(scope="module", autouse=True)
def no_host_callbacks():
    """Run-time checks off. diffrax checks a solve (throw=True) and its controller's inputs with
    equinox's error_if, a host callback, which jax.export refuses ("serialization of
    host_callbacks is not yet implemented"; under symbolic shapes "std::bad_cast"). The solves
    pass throw=False and equinox's EQX_ON_ERROR (read at import, hence patched here) is "off";
    the adaptive test returns the step counts instead, so a solve that hit max_steps shows."""
    errors = pytest.importorskip("equinox._errors")
    before, errors.EQX_ON_ERROR = errors.EQX_ON_ERROR, "off"
    yield
    errors.EQX_ON_ERROR = before


@pytest.fixture(scope="module")
def field():
    with cheap_random():
        model = eqx.filter_jit(lambda: Field(jax.random.PRNGKey(0)))()
    params, static = eqx.partition(model, eqx.is_array)
    return to_numpy(params), static


def test_diffrax_adaptive_tsit5(rng, field):
    params, static = field

    def solve(params, y0):
        vf = eqx.combine(params, static)
        term = diffrax.ODETerm(lambda t, y, args: jax.vmap(vf, (None, 0, None))(t, y, args))
        sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 2.0, 0.1, y0,
                                  saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 2.0, 5)),
                                  stepsize_controller=diffrax.PIDController(
                                      rtol=1e-5, atol=1e-5, norm=rms_norm),
                                  max_steps=256, throw=False)
        return sol.ys, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"]

    # trace_first: tracing diffeqsolve runs two small XLA computations eagerly (constants it
    # caches); they are the model's trace-time work, not the jdisc calls'
    check_model(solve, (None, {0: "B"}), lambda B: (params, normal(rng, B, D)), BATCH_ONLY,
                TOL_ADAPTIVE, what="diffrax Tsit5 + PIDController", trace_first=True)


@pytest.mark.slow     # the adaptive solve above covers diffrax in the default run
def test_diffrax_fixed_step_heun(rng, field):
    params, static = field

    def solve(params, y0):
        vf = eqx.combine(params, static)
        term = diffrax.ODETerm(lambda t, y, args: jax.vmap(vf, (None, 0, None))(t, y, args))
        sol = diffrax.diffeqsolve(term, diffrax.Heun(), 0.0, 2.0, 0.05, y0,
                                  saveat=diffrax.SaveAt(t1=True), throw=False)
        return sol.ys[0]

    check_model(solve, (None, {0: "B"}), lambda B: (params, normal(rng, B, D)), BATCH_ONLY,
                TOL_FIXED, what="diffrax Heun", trace_first=True)
