"""Large constants are data, not C (lowering/data.py): a weight captured by the function is kept
in the library's data section (`data.bin` in the cache entry, a member of packages), the C holds
a pointer to it, and results are those of jax.jit at every shape."""

import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jdisc
from conftest import assert_close

RNG = np.random.default_rng(7)
W = RNG.standard_normal((256, 64)).astype(np.float32)       # 64 KiB


def _entry(f) -> str:
    (compiled,) = f._compiled.values()
    return os.path.dirname(compiled.executable.library.path)


def test_captured_weight_is_data(cache):
    g = lambda x: jnp.tanh(x @ W) + W[0]
    f = jdisc.jit(g, dynamic_axes=({0: "b"},))
    for n in (0, 1, 2, 7, 31):
        x = RNG.standard_normal((n, 256)).astype(np.float32)
        assert_close(f(x), jax.jit(g)(x), 2e-6, f"b={n}")    # 256-term f32 dot products
    assert f.stats()["compiles"] == 1
    entry = _entry(f)
    source = open(os.path.join(entry, "kernel.c")).read()
    assert len(source) < 200_000                        # an initializer list would be ~600 KB
    assert "in the data section" in source and "jd_bind_data" in source
    assert os.path.getsize(os.path.join(entry, "data.bin")) >= W.nbytes


def test_small_constants_stay_in_the_c(cache):
    k = np.arange(16, dtype=np.float32)
    f = jdisc.jit(lambda x: x * k, dynamic_axes=({0: "b"},))
    assert_close(f(np.ones((3, 16), np.float32)), np.ones((3, 16), np.float32) * k, 0)
    assert not os.path.exists(os.path.join(_entry(f), "data.bin"))


def test_same_code_different_weights(cache, counting_cc):
    # the two programs have the same C (only pointers); each library gets its own data
    w2 = W[::-1].copy()
    f1 = jdisc.jit(lambda x: x @ W, dynamic_axes=({0: "b"},))
    f2 = jdisc.jit(lambda x: x @ w2, dynamic_axes=({0: "b"},))
    x = RNG.standard_normal((5, 256)).astype(np.float32)
    for _ in range(2):
        assert_close(f1(x), x @ W, 2e-5)
        assert_close(f2(x), x @ w2, 2e-5)
    assert _entry(f1) != _entry(f2)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.bool_, np.float16, ml_dtypes.bfloat16,
                                   np.float64])
def test_data_constants_of_every_dtype(cache, dtype):
    c = (RNG.standard_normal((40, 64)) * 50).astype(dtype)       # > 1 KiB for every dtype
    g = lambda x: (x + c, c[1:])
    f = jdisc.jit(g, dynamic_axes=({0: "b"},))
    for n in (1, 40):
        x = np.ones((n, 40, 64), dtype)
        jax.tree_util.tree_map(lambda a, b: assert_close(a, b, 0, f"{dtype} b={n}"),
                               f(x), jax.jit(g)(x))


def test_data_constant_inside_a_loop_body(cache):
    # The step is scaled so that it does not amplify rounding: with w[:64] itself (entries of
    # N(0, 1), 64 terms) two f32 summation orders' last-bit differences grew by up to ~8x an
    # iteration, and five iterations reached 1.4e-5 of the values at some inputs. The inputs
    # come from a generator of the test's own, not the module's (whose draws depend on which
    # tests ran before in the same worker).
    rng = np.random.default_rng(70)

    def g(x):
        def body(i, c):           # the constant is made inside the loop's region
            w = jnp.asarray(W)
            return jnp.tanh(c @ w[:64] * 0.125) + w[i % 3, :]
        return jax.lax.fori_loop(0, x.shape[0], body, x[0])
    f = jdisc.jit(g, dynamic_axes=({0: "n"},))
    for n in (1, 2, 5):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        assert_close(f(x), jax.jit(g)(x), 1e-5, f"n={n}")


def test_warm_cache_hit_maps_the_data(cache, counting_cc):
    g = lambda x: x @ W
    x = RNG.standard_normal((3, 256)).astype(np.float32)
    jdisc.jit(g, dynamic_axes=({0: "b"},))(x)
    from jdisc.custom_calls import compiler
    compiler._memory.clear()              # as in a new process: the entry is on disk only
    f = jdisc.jit(g, dynamic_axes=({0: "b"},))
    assert_close(f(x), x @ W, 2e-5)
    assert counting_cc() == 1


def test_damaged_data_is_rewritten(cache):
    g = lambda x: x @ W
    x = RNG.standard_normal((3, 256)).astype(np.float32)
    f = jdisc.jit(g, dynamic_axes=({0: "b"},))
    f(x)
    path = os.path.join(_entry(f), "data.bin")
    with open(path, "r+b") as fh:
        fh.write(b"\xff" * 64)
    from jdisc.custom_calls import compiler
    compiler._memory.clear()
    assert_close(jdisc.jit(g, dynamic_axes=({0: "b"},))(x), x @ W, 2e-5)


def test_package_carries_its_data(tmp_path, cache):
    w2 = W * 2
    pkgs = []
    for i, w in enumerate((W, w2)):
        pkg = jdisc.export_package(lambda x, w=w: x @ w, np.ones((2, 256), np.float32),
                           dynamic_axes=({0: "b"},))
        path = tmp_path / f"m{i}.jdisc"
        pkg.save(str(path))
        pkgs.append(jdisc.load(str(path)))
    x = RNG.standard_normal((4, 256)).astype(np.float32)
    for pkg, w in zip(pkgs, (W, w2)):      # one library, two data sections: two instances
        assert pkg.library_origin == "package"
        assert_close(pkg(x), x @ w, 2e-5)


def test_data_constant_in_a_while_region(cache):
    # a constant inside a loop body (as other producers write it; jax hoists them): the
    # body reads it from the data section
    c = np.arange(512, dtype=np.float32) / 512
    body_const = "dense<[" + ", ".join(f"{v:.9e}" for v in c) + "]> : tensor<512xf32>"
    text = f"""
func.func @main(%x: tensor<512xf32>, %n: tensor<i32>) -> tensor<512xf32> {{
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<512xf32>
    cond {{
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %k = stablehlo.constant {body_const}
      %one = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %one : tensor<i32>
      %a = stablehlo.add %acc, %k : tensor<512xf32>
      stablehlo.return %j, %a : tensor<i32>, tensor<512xf32>
    }}
  return %r#1 : tensor<512xf32>
}}"""
    f = jdisc.compile_stablehlo(text)
    x = RNG.standard_normal(512).astype(np.float32)
    for n in (0, 1, 3):
        want = x.copy()
        for _ in range(n):
            want = want + c
        (got,) = f(x, np.int32(n))
        assert_close(got, want, 0, f"n={n}")
