"""jdisc inside JAX programs: a jdisc function under jax.jit, lax.scan, vmap, grad and
shard_map is an XLA FFI custom call of its compiled launcher (jdisc/interop.py). Differential
against the plain function under the same transformation, at several shapes, compiles counted.

Tolerances: the programs are small MLPs (K <= 16 dot products, tanh); 2e-6 relative to the
output scale covers the different summation order of OpenBLAS and XLA's dot (a few ulp).
"""

import gc
import os
import subprocess
import sys
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import assert_close, in_threads

TOL = 2e-6


def mlp(w1, b1, w2, b2, x):
    return jnp.tanh(x @ w1 + b1) @ w2 + b2


@pytest.fixture
def params(rng):
    return [rng.standard_normal(s).astype(np.float32) * 0.3
            for s in [(8, 16), (16,), (16, 4), (4,)]]


def jmlp():
    return jdisc.jit(mlp, dynamic_axes=(None, None, None, None, {0: "N"}))


def count_xla_compiles():
    """XLA backend compiles, through jax.monitoring (as tests/test_compile_once.py does)."""
    seen = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, _secs, **kw: seen.append(name)
        if name == "/jax/core/compile/backend_compile_duration" else None)
    return seen


def test_inside_jax_jit_and_scan_one_jdisc_compile(rng, params):
    f = jmlp()
    outer = jax.jit(lambda x: jnp.sin(f(*params, x)).sum(axis=1))
    ref = jax.jit(lambda x: jnp.sin(mlp(*params, x)).sum(axis=1))
    for n in (1, 2, 7, 64):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        assert_close(outer(x), ref(x), TOL, f"n={n}")

    def scanned(xs):   # the custom call inside a loop body compiled by XLA
        return jax.lax.scan(lambda c, x: (c + f(*params, x).sum(), None), 0.0, xs)[0]
    xs = rng.standard_normal((5, 3, 8)).astype(np.float32)
    assert_close(jax.jit(scanned)(xs),
                 jax.jit(lambda xs: jax.lax.scan(
                     lambda c, x: (c + mlp(*params, x).sum(), None), 0.0, xs)[0])(xs), 1e-5)
    assert f.stats()["compiles"] == 1


def test_vmap_compiles_once_for_every_batch_size(rng, params):
    f = jmlp()
    for b in (1, 2, 5, 33):
        xb = rng.standard_normal((b, 3, 8)).astype(np.float32)
        assert_close(jax.vmap(lambda x: f(*params, x))(xb),
                     jax.vmap(lambda x: mlp(*params, x))(xb), TOL, f"batch {b}")
        # a batched weight too (in_axes over two arguments)
        w1b = np.stack([params[0]] * b) * (1 + np.arange(b)[:, None, None] / 10)
        got = jax.vmap(lambda w, x: f(w, *params[1:], x))(w1b.astype(np.float32), xb)
        want = jax.vmap(lambda w, x: mlp(w, *params[1:], x))(w1b.astype(np.float32), xb)
        assert_close(got, want, TOL, f"batch {b}, batched weight")
    stats = f.stats()
    assert stats["compiles"] == 1
    assert stats["vmap_compiles"] == 2    # one per batching pattern, none per batch size


def test_grad_backward_pass_is_a_jdisc_program(rng, params):
    f = jmlp()

    def loss(fn, w1, b2, x):
        return jnp.mean(fn(w1, params[1], params[2], b2, x) ** 2)
    g = jax.grad(lambda w1, b2, x: loss(f, w1, b2, x), argnums=(0, 1))
    g_ref = jax.grad(lambda w1, b2, x: loss(mlp, w1, b2, x), argnums=(0, 1))
    for n in (1, 3, 17, 100):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        for a, b in zip(g(params[0], params[3], x), g_ref(params[0], params[3], x)):
            assert_close(a, b, 1e-5, f"n={n}")
        v, gj = jax.jit(jax.value_and_grad(lambda w1, x: loss(f, w1, params[3], x)))(params[0], x)
        vr, gr = jax.value_and_grad(lambda w1, x: loss(mlp, w1, params[3], x))(params[0], x)
        assert_close(v, vr, 1e-5)
        assert_close(gj, gr, 1e-5)
    stats = f.stats()
    assert stats["compiles"] == 1 and stats["vjp_compiles"] == 1


def test_vjp_with_integer_arguments_and_pytrees(rng):
    f = jdisc.jit(lambda p, ids: (p["emb"][ids] * p["scale"]).sum(-1),
                  dynamic_axes=(None, {0: "B"}))
    ref = lambda p, ids: (p["emb"][ids] * p["scale"]).sum(-1)
    p = {"emb": rng.standard_normal((10, 4)).astype(np.float32), "scale": np.float32(1.5)}
    for b in (1, 6):
        ids = rng.integers(0, 10, size=b).astype(np.int32)
        out, pull = jax.vjp(lambda p: f(p, ids), p)
        out_r, pull_r = jax.vjp(lambda p: ref(p, ids), p)
        assert_close(out, out_r, TOL)
        ct = rng.standard_normal(b).astype(np.float32)
        jax.tree_util.tree_map(lambda a, b: assert_close(a, b, 1e-5), pull(ct), pull_r(ct))


def test_constraint_violated_inside_jit_raises_the_jdisc_message(rng, params):
    f = jdisc.jit(lambda x: x * 2, dynamic_axes=({0: "N"},), constraints=("N % 4 == 0",))
    outer = jax.jit(lambda x: f(x) + 1)
    assert_close(outer(np.ones(8, np.float32)), np.full(8, 3, np.float32), 0)
    with pytest.raises(jdisc.ShapeError, match="N"):
        outer(np.ones(6, np.float32))


def test_handler_errors_come_back_as_python_exceptions(params):
    # a custom call whose result XLA allocates with the wrong shape: the handler's own check
    f = jmlp()
    x = np.ones((3, 8), np.float32)
    f(*params, x)
    entry = f.compiled_for(*params, x)
    from jdisc.custom_calls.ffi import target_name
    target = target_name(entry.executable)
    bad = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct((5, 4), np.float32))
    with pytest.raises(Exception, match="jdisc: result 0 was allocated with another shape"):
        jax.block_until_ready(jax.jit(lambda *a: bad(*a))(*params, x))


def test_eight_threads_with_different_shapes(rng, params):
    f = jmlp()      # not called before: the threads race to compile it and register it
    outer = jax.jit(lambda x: f(*params, x) * 2)

    def work(t):
        local = np.random.default_rng(t)
        for i in range(20):
            n = 1 + (t * 7 + i * 3) % 41
            x = local.standard_normal((n, 8)).astype(np.float32)
            assert_close(f(*params, x), mlp(*params, x), TOL, f"thread {t} n={n}")
            assert_close(outer(x), 2 * mlp(*params, x), TOL, f"thread {t} jit n={n}")
    errors = in_threads(work, 8)
    assert not errors, errors[0]
    assert f.stats()["compiles"] == 1


SHARD_MAP = r"""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np, jdisc
from jax.sharding import NamedSharding, PartitionSpec as P
assert jax.device_count() == 4
mesh = jax.make_mesh((4,), ("d",))
f = jdisc.jit(lambda w, x: jnp.tanh(x @ w), dynamic_axes=(None, {0: "N"}))
w = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
g = jax.jit(jax.shard_map(lambda x: f(w, x), mesh=mesh, in_specs=P("d"), out_specs=P("d")))
for n in (4, 12, 40):
    x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("d")))   # rows split over the 4 devices
    got, want = np.asarray(g(xs)), np.tanh(x @ w)
    assert np.abs(got - want).max() <= 2e-6, (n, np.abs(got - want).max())
assert f.stats()["compiles"] == 1, f.stats()
print("ok")
"""


def test_shard_map_over_four_cpu_devices(tmp_path):
    env = dict(os.environ, JDISC_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", SHARD_MAP], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_a_function_used_inside_jax_jit_is_freed_with_its_closure():
    """jax.jit(jf) caches the jaxpr it traces under a weak reference to jf; that jaxpr holds
    the custom_vjp/custom_vmap closures, which held jf: every jdisc function ever called inside
    a trace stayed alive, with what its Python function closes over (here a 4 MiB weight) and
    what jax compiled for it (found by the whole-program fuzzer: its workers ran out of memory
    mappings). Grad of a jdisc function made inside the differentiated function still works:
    the closures keep the program. (jax 0.8's own cache of backward passes, keyed by a
    module-level function, keeps a grad's jaxpr, and with it the program, for good: there the
    grad is left out of the check.)"""
    class Weight(np.ndarray):          # an ndarray that takes a weak reference
        pass
    grad_freed = jax.__version_info__ >= (0, 10)

    def make():
        w = np.ones(1 << 20, np.float32).view(Weight)

        def fn(x):
            return (jnp.sin(x) * w[0],)
        jf = jdisc.jit(fn, dynamic_axes=({0: "a"},))
        jf(jnp.ones(3))
        jax.jit(jf)(jnp.ones(4))
        jax.vmap(jf)(jnp.ones((2, 5)))
        if grad_freed:
            jax.grad(lambda x: jax.jit(jf)(x)[0].sum())(jnp.ones(5))
        return weakref.ref(jf), weakref.ref(w)
    refs = make()
    gc.collect()
    assert [r() is None for r in refs] == [True, True]

    g = lambda x: jnp.sin(x) * 2           # noqa: E731
    loss = lambda x: jdisc.jit(g, dynamic_axes=({0: "a"},))(x).sum()   # noqa: E731
    np.testing.assert_allclose(np.asarray(jax.grad(loss)(jnp.ones(5))), 2 * np.cos(1.0),
                               rtol=1e-6)
