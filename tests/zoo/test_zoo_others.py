"""Zoo: models from other JAX libraries installed with the zoo's, and model patterns written
with jax itself: jmp mixed precision (haiku MLP computing in bfloat16), an optimistix
deep-equilibrium layer (a fixed point found by a data-dependent while loop), a graph network
layer (jax.ops.segment_sum over a dynamic number of nodes and edges) and a mixture-of-experts
layer with top-2 routing (flax linen).

Tolerances (max |jdisc - jax| relative to the output's scale, see conftest.assert_close):
* TOL_BF16 = 2e-2: the MLP computes in bfloat16 (8 significant bits: one ulp is 2^-8 = 3.9e-3
  relative). jdisc computes bf16 ops in f32 and rounds each result like XLA, but a GEMM's f32
  accumulation order differs, so an intermediate that lies near a rounding boundary may round
  the other way: one bf16 ulp per layer, three layers, ~1.2e-2 at worst.
* TOL_GEMM = 2e-5: GEMMs of K <= 64 terms in another summation order (~sqrt(K) ulp ~ 5e-7)
  and sums of up to 12 messages per node; 2e-5 leaves ~10x margin (as tests/test_models.py).
* TOL_FIXED_POINT = 1e-4: both sides iterate z = tanh(W z + U x + b) (a contraction: W is scaled
  to spectral norm < 0.5) until the change is below rtol = atol = 1e-5; if both stop at the same
  iteration (the test compares the step counts exactly) they differ by f32 rounding (~1e-6);
  1e-4 stays below the solver's own tolerance x the contraction factor's 1/(1 - 0.5).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo_support import BATCH_ONLY, BATCH_SEQ, check_model, init_params, normal

TOL_BF16 = 2e-2
TOL_GEMM = 2e-5
TOL_FIXED_POINT = 1e-4


def test_jmp_haiku_mixed_precision_mlp(rng):
    jmp = pytest.importorskip("jmp")
    hk = pytest.importorskip("haiku")
    policy = jmp.get_policy("params=float32,compute=bfloat16,output=float32")

    def mlp(x):
        hk.mixed_precision.set_policy(hk.nets.MLP, policy)
        try:
            return hk.nets.MLP([32, 32, 4], activation=jax.nn.gelu)(x)
        finally:
            hk.mixed_precision.clear_policy(hk.nets.MLP)

    model = hk.without_apply_rng(hk.transform(mlp))
    params = init_params(model.init, np.zeros((2, 5, 8), np.float32))
    check_model(model.apply, (None, {0: "B", 1: "S"}),
                lambda B, S: (params, normal(rng, B, S, 8)), BATCH_SEQ, TOL_BF16,
                what="jmp bf16 haiku MLP")


@pytest.fixture
def no_host_callbacks():
    """optimistix checks a failed solve with equinox's error_if (a host callback jax.export
    cannot serialise); throw=False and EQX_ON_ERROR "off" (read at import, hence patched)."""
    errors = pytest.importorskip("equinox._errors")
    before, errors.EQX_ON_ERROR = errors.EQX_ON_ERROR, "off"
    yield
    errors.EQX_ON_ERROR = before


def test_optimistix_deep_equilibrium_layer(rng, no_host_callbacks):
    optx = pytest.importorskip("optimistix")
    D, H = 6, 12
    w = normal(rng, H, H)
    params = {"W": (0.45 * w / np.linalg.norm(w, 2)).astype(np.float32),
              "U": normal(rng, D, H, scale=0.5), "b": normal(rng, H, scale=0.1),
              "V": normal(rng, H, 3)}

    def deq(params, x):                                  # x [B, D]
        inject = x @ params["U"] + params["b"]

        def layer(z, inject):
            return jnp.tanh(z @ params["W"] + inject)

        sol = optx.fixed_point(layer, optx.FixedPointIteration(rtol=1e-5, atol=1e-5),
                               jnp.zeros_like(inject), args=inject, max_steps=200, throw=False)
        return sol.value @ params["V"], sol.stats["num_steps"]

    check_model(deq, (None, {0: "B"}), lambda B: (params, normal(rng, B, D)), BATCH_ONLY,
                TOL_FIXED_POINT, what="optimistix DEQ")


def test_graph_network_segment_sum(rng):
    # one message-passing layer: messages from senders, mean-aggregated at receivers
    params = {"Wm": normal(rng, 6, 6), "Ws": normal(rng, 6, 6)}

    def gnn_layer(params, nodes, senders, receivers):
        messages = nodes[senders] @ params["Wm"]
        total = jax.ops.segment_sum(messages, receivers, num_segments=nodes.shape[0])
        degree = jax.ops.segment_sum(jnp.ones(receivers.shape, jnp.float32), receivers,
                                     num_segments=nodes.shape[0])
        return jax.nn.relu(nodes @ params["Ws"] + total / jnp.maximum(degree, 1.0)[:, None])

    def make_args(N, E):
        edges = rng.integers(0, N, (2, E)).astype(np.int32)
        return params, normal(rng, N, 6), edges[0], edges[1]

    check_model(gnn_layer, (None, {0: "N"}, {0: "E"}, {0: "E"}), make_args,
                [dict(N=1, E=7), dict(N=5, E=1), dict(N=3, E=12)], TOL_GEMM, what="GNN layer")


def test_mixture_of_experts_top2(rng):
    nn = pytest.importorskip("flax.linen")

    class MoE(nn.Module):
        """Softmax router, top-2 experts per token (lax.top_k), 4 GELU experts, outputs gathered
        with take_along_axis and mixed by the router weights."""

        @nn.compact
        def __call__(self, x):                                   # [T, D]
            weights, chosen = jax.lax.top_k(jax.nn.softmax(nn.Dense(4)(x)), 2)
            hidden = nn.gelu(nn.Dense(4 * 16)(x).reshape(x.shape[0], 4, 16))
            out = nn.DenseGeneral(8)(hidden)                     # [T, 4 experts, 8]
            picked = jnp.take_along_axis(out, chosen[:, :, None], axis=1)
            return (picked * weights[..., None]).sum(1), chosen

    model = MoE()
    params = init_params(model.init, np.zeros((5, 8), np.float32))
    check_model(model.apply, (None, {0: "T"}), lambda T: (params, normal(rng, T, 8)),
                [dict(T=1), dict(T=3), dict(T=8)], TOL_GEMM, what="MoE top-2")
