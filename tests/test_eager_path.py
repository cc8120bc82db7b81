"""The eager call path in C (custom_calls/eager.c): same answers and errors as the ctypes path."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc.custom_calls import eager
from jdisc.errors import DtypeError, ShapeError


@pytest.fixture(autouse=True)
def _built():
    eager.module(wait=True)     # the extension builds in the background on first use


def _f(x, y):
    return jnp.tanh(x) * y[None, :] + 1, jnp.sum(x, axis=1)


def _jf():
    return jdisc.jit(_f, dynamic_axes=({0: "b", 1: "n"}, {0: "n"}))


def _args(b, n):
    x = np.linspace(-2, 2, b * n, dtype=np.float32).reshape(b, n)
    return x, np.arange(n, dtype=np.float32)


def test_the_extension_builds_here():
    # CI machines have Python's headers and a C compiler, so the C path must be taken there
    if not eager.enabled():
        pytest.skip("JDISC_EAGER_C=0")
    assert eager.module(wait=True) is not None
    jf = _jf()
    x, y = _args(2, 3)
    jf(x, y)
    assert jf.compiled_for(x, y).executable.fast_call is not None


@pytest.mark.parametrize("b, n", [(0, 3), (1, 1), (2, 5), (7, 13), (64, 257)])
def test_c_path_and_ctypes_path_agree(b, n):
    jf = _jf()
    x, y = _args(b, n)
    got_c = jf(jnp.asarray(x), jnp.asarray(y))           # jax.Arrays: the C path
    assert jf.compiled_for(x, y).executable.fast_call is not None or not eager.enabled()
    got_np = jf(x, y)                                    # numpy arrays: the C path too
    entry = jf.compiled_for(x, y)
    entry.executable.__dict__["_fast"] = None            # force the ctypes path
    got_ctypes = jf(jnp.asarray(x), jnp.asarray(y))
    want = jax.jit(_f)(x, y)
    for outs in (got_c, got_np, got_ctypes):
        for g, w in zip(outs, want):
            assert isinstance(g, jax.Array) and g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=1e-6)
    assert jf.stats()["compiles"] == 1


def test_inputs_the_c_path_hands_to_the_general_path():
    jf = _jf()
    x, y = _args(3, 4)
    want = jax.jit(_f)(x, np.arange(0, 8, 2, dtype=np.float32))
    y = np.arange(0, 8, 2, dtype=np.float32)
    cases = [(x.T.copy().T, y),                      # Fortran-ordered numpy: copied
             (x, np.arange(8, dtype=np.float32)[::2]),   # strided numpy: copied
             (x.astype(np.float64), y)]              # float64 numpy: cast as jax would
    for a, b in cases:
        for g, w in zip(jf(a, b), want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=1e-6)


def test_errors_are_the_same_on_the_c_path():
    jf = _jf()
    x, y = _args(3, 4)
    jf(x, y)
    with pytest.raises(ShapeError, match="'n'"):
        jf(jnp.asarray(x), jnp.ones((5,), jnp.float32))     # n is 4 in x, 5 in y
    strict = jdisc.jit(_f, dynamic_axes=({0: "b", 1: "n"}, {0: "n"}), strict=True)
    strict(x, y)
    with pytest.raises(DtypeError, match="'x'"):
        strict(jnp.asarray(x, jnp.int32), jnp.asarray(y))
    gone = jnp.asarray(y)
    gone.delete()
    with pytest.raises(Exception, match="deleted"):
        jf(jnp.asarray(x), gone)


def test_threads_share_one_program():
    jf = _jf()
    x, y = _args(2, 3)
    jf(x, y)
    errors = []

    def work(k):
        try:
            for n in range(1, 30):
                a, b = _args(k + 1, n)
                g = jf(jnp.asarray(a), jnp.asarray(b))
                w = jax.jit(_f)(a, b)
                np.testing.assert_allclose(np.asarray(g[0]), np.asarray(w[0]), rtol=2e-6,
                                           atol=1e-6)
        except Exception as err:    # noqa: BLE001 - reported below
            errors.append(err)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and jf.stats()["compiles"] == 1


def test_calls_of_jax_arrays_skip_the_lookup_but_not_the_dtype():
    # jdisc.jit remembers the program for (x64 mode, dtype and rank of each jax.Array
    # argument): a new dtype, rank or x64 mode still selects (or compiles) its own program,
    # other arguments (numpy, pytrees, keywords) take the general lookup, and every path
    # gives jax.jit's answer
    f = lambda x, y: (x * 2 + y, x.sum())
    jf, xf = jdisc.jit(f, dynamic_axes=({0: "n"}, {0: "n"})), jax.jit(f)

    def check(*args):
        got, want = jf(*args), xf(*args)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            assert isinstance(g, jax.Array) and g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    a = jnp.arange(5, dtype=jnp.float32)
    for n in (5, 0, 1, 7):
        check(jnp.arange(n, dtype=jnp.float32), jnp.ones(n, jnp.float32))
    assert jf.stats()["compiles"] == 1
    check(jnp.arange(3, dtype=jnp.int32), jnp.ones(3, jnp.int32))      # a new dtype
    check(a, jnp.ones(5, jnp.float32))                                   # the first again
    check(np.arange(4, dtype=np.float32), jnp.ones(4, jnp.float32))     # numpy: the same one
    assert jf.stats()["compiles"] == 2
    with pytest.raises(ShapeError, match="axis 0"):
        jf(a, jnp.ones(4, jnp.float32))          # the shared dim disagrees: checked in C
    with jax.enable_x64(True):
        check(jnp.arange(3, dtype=jnp.float64), jnp.ones(3, jnp.float64))
        assert jf.stats()["compiles"] == 3
    single = jdisc.jit(lambda x: x + 1, dynamic_axes=({0: "n"},))
    out = single(a)
    assert isinstance(out, jax.Array) and out.shape == (5,)
    assert isinstance(jdisc.jit(lambda x: [x], dynamic_axes=({0: "n"},))(a), list)
