"""One compile serves every shape: no second jdisc compile and no XLA compile, ever."""

import jax
import jax.monitoring
import numpy as np

import jdisc
from jdisc.bench import workloads as W
from conftest import XLA_COMPILES as _counter, assert_close


def test_counter_sees_xla_compiles():
    # the instrument itself works: a new jax.jit shape is one backend compile
    _counter.enabled, before = True, _counter.count
    try:
        jax.jit(lambda x: x * 3 + 1)(np.ones(11, np.float32)).block_until_ready()
    finally:
        _counter.enabled = False
    assert _counter.count == before + 1


def test_bert_layer_many_shapes_one_compile(rng):
    wl = W.workloads()["W1"]
    jf = jdisc.jit(wl.fn, dynamic_axes=wl.dynamic_axes)
    shapes = [(1, 1), (2, 5), (1, 17), (3, 8), (2, 29), (4, 3)]
    args = [wl.make_args(b, s, rng) for b, s in shapes]
    outs = []
    _counter.enabled, before = True, _counter.count
    try:
        for a in args:
            outs.append(np.asarray(jf(*a)))
    finally:
        _counter.enabled = False
    assert _counter.count == before, "an eager jdisc call triggered an XLA compile"
    st = jf.stats()
    assert st["compiles"] == 1 and st["calls"] == len(shapes)
    ref = jax.jit(wl.fn)
    for a, got in zip(args, outs):
        assert_close(got, ref(*a), 2e-5)


def test_static_argnums_compile_per_static_value(rng):
    def fn(x, scale):
        return x * scale

    jf = jdisc.jit(fn, dynamic_axes=({0: "N"}, None), static_argnums=1)
    for n in (1, 5, 9):
        x = rng.standard_normal(n).astype(np.float32)
        assert_close(jf(x, 2.0), x * 2, 0)
    assert jf.stats()["compiles"] == 1
    assert_close(jf(np.ones(3, np.float32), 3.0), np.full(3, 3, np.float32), 0)
    assert jf.stats()["compiles"] == 2


def test_decorator_forms_and_pytrees(rng):
    @jdisc.jit(dynamic_axes={"tree": {"a": {0: "N"}, "b": [None, {1: "N"}]}})
    def f(tree):
        return {"sum": tree["a"] + tree["b"][1].sum(0), "w": tree["b"][0] * 2}

    for n in (1, 4, 7):
        tree = {"a": rng.standard_normal(n).astype(np.float32),
                "b": [np.ones(3, np.float32), rng.standard_normal((2, n)).astype(np.float32)]}
        got = f(tree)
        assert set(got) == {"sum", "w"}
        assert_close(got["sum"], tree["a"] + tree["b"][1].sum(0), 1e-6)
        assert_close(got["w"], np.full(3, 2, np.float32), 0)
    assert f.stats()["compiles"] == 1


def test_negative_axes_and_jax_array_inputs(rng):
    jf = jdisc.jit(lambda x: jax.numpy.tanh(x).sum(-1), dynamic_axes=({-1: "L", 0: "B"},))
    for b, l in ((1, 1), (3, 10)):
        x = jax.numpy.asarray(rng.standard_normal((b, 2, l)).astype(np.float32))
        assert_close(jf(x), np.tanh(np.asarray(x)).sum(-1), 2e-6)
    assert jf.stats()["compiles"] == 1


def test_results_are_arrays_like_device_put_gives(rng):
    # small results go through jax's internal batched put (uncommitted, as device_put gives),
    # large ones through DLPack: arrays on the default device, usable by jax.jit, and
    # independent of later calls
    jf = jdisc.jit(lambda x: x * 2, dynamic_axes=({0: "N"},))
    for n in (0, 3, 300000):
        x = rng.standard_normal((n, 2)).astype(np.float32)
        got, again = jf(x), jf(x + 1)
        ref = jax.device_put(x * 2)
        assert isinstance(got, jax.Array) and got.devices() == ref.devices()
        assert got.aval == ref.aval
        if n < 1000:
            assert got.committed == ref.committed and got.sharding == ref.sharding
        assert_close(jax.jit(lambda v: v + 1)(got), x * 2 + 1, 0)
        assert_close(got, x * 2, 0)
        assert_close(again, (x + 1) * 2, 0)


def test_disk_cache_hit_in_a_new_function(rng):
    def g(x):
        return x * 2 + 1

    a = jdisc.jit(g, dynamic_axes=({0: "N"},))
    a(np.ones(3, np.float32))
    b = jdisc.jit(g, dynamic_axes=({0: "N"},))
    b(np.ones(5, np.float32))
    assert b.stats()["compiles"] == 1 and b.stats()["cache_hits"] == 1


def test_static_argname_first_and_dynamic_axes_by_name(rng):
    def fn(mode, x, y):
        return x * y if mode == "mul" else x + y

    jf = jdisc.jit(fn, dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, static_argnames="mode")
    for n in (1, 6):
        x, y = rng.standard_normal((2, n)).astype(np.float32)
        assert_close(jf("mul", x, y), x * y, 0)
        assert_close(jf(mode="add", x=x, y=y), x + y, 0)
    assert jf.stats()["compiles"] == 2
