"""The eager call path in C (custom_calls/eager.c): same answers and errors as the ctypes path."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from conftest import assert_close, in_threads
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


def test_a_program_called_while_the_extension_builds_takes_the_c_path_once_built(
        monkeypatch):
    # the build (a background thread) may end while a call is trying the C path: that call
    # takes the ctypes path, and a later one the C path. Before, the try's None was kept for
    # good whenever the build had ended by the time it was checked (40 us calls for ever,
    # instead of 4, for a user's first programs in a new environment)
    if not eager.enabled() or eager.module(wait=True) is None:
        pytest.skip("no C extension here")
    jf = jdisc.jit(lambda x: x * 3 + 1, dynamic_axes=({0: "n"},))
    x = jnp.arange(5, dtype=jnp.float32)
    ex = jf.compiled_for(x).executable
    ex.__dict__.pop("_fast", None)
    built = list(eager._MODULE)
    real = eager.program
    tries = []

    def program(*args, **kwargs):      # the first try: the build ends just after it
        tries.append(1)
        if len(tries) == 1:
            eager._MODULE[:] = built
            return None
        return real(*args, **kwargs)
    monkeypatch.setattr(eager, "program", program)
    eager._MODULE.clear()               # not built yet when the first try starts
    try:
        assert ex.fast_call is None     # that call: the ctypes path
        assert ex.fast_call is not None     # the next: the C path, and kept
        n = len(tries)
        assert ex.fast_call is ex.fast_call and len(tries) == n      # kept: no more tries
    finally:
        eager._MODULE[:] = built
    assert_close(jf(x), np.arange(5, dtype=np.float32) * 3 + 1, 0)


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

    def work(k):
        for n in range(1, 30):
            a, b = _args(k + 1, n)
            g = jf(jnp.asarray(a), jnp.asarray(b))
            w = jax.jit(_f)(a, b)
            np.testing.assert_allclose(np.asarray(g[0]), np.asarray(w[0]), rtol=2e-6,
                                       atol=1e-6)
    errors = in_threads(work, 4)
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


def test_pytree_calls_try_the_last_program_of_their_structure_but_not_blindly():
    # a call whose arguments are a pytree (a dict of parameters and an input) tries the
    # program that the last call of that structure and x64 mode ran, C checking each leaf's
    # dtype and rank; anything else (another dtype or rank, numpy float64 leaves without x64,
    # Python scalars, tracers) takes the general lookup, and every path gives jax.jit's answer
    def f(p, x):
        return {"y": jnp.tanh(x @ p["w"] + p["b"]), "n": x.shape[0] * p["s"]}
    jf, xf = jdisc.jit(f, dynamic_axes=(None, {0: "n"})), jax.jit(f)

    def params(dt, s=2.0):
        return {"w": np.linspace(-1, 1, 12, dtype=dt).reshape(3, 4), "b": np.ones(4, dt),
                "s": np.asarray(s, dt)}

    def check(p, x, tol=1e-6):
        got, want = jf(p, x), xf(p, x)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert isinstance(g, jax.Array) and g.dtype == w.dtype and g.shape == w.shape
            assert_close(g, w, tol)
    p32 = jax.tree_util.tree_map(jnp.asarray, params(np.float32))
    lookups = []
    entry = jf._entry
    jf._entry = lambda *a, **k: lookups.append(1) or entry(*a, **k)
    for n in (5, 0, 1, 7, 5):
        check(p32, jnp.linspace(-1, 1, 3 * n, dtype=jnp.float32).reshape(n, 3))
    assert jf.stats()["compiles"] == 1 and len(lookups) == 1    # then C's checks alone
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    check(params(np.float32), x)                                   # numpy leaves: the same
    check(params(np.float64), x.astype(np.float64))                # float64 without x64
    assert jf.stats()["compiles"] == 1
    check(dict(p32, s=3.0), x)         # a Python scalar leaf (weakly typed): its own program
    check(dict(p32, b=jnp.ones((1, 4), jnp.float32)), x)           # a new rank: a program
    check(p32, x)                                                  # the first again
    assert jf.stats()["compiles"] == 3
    with pytest.raises(ShapeError, match="axis 1"):
        jf(p32, np.ones((2, 5), np.float32))                       # the matmul's 3: in C
    check(p32, jax.jit(lambda x: x * 1)(x))
    got = jax.jit(lambda p, x: jf(p, x)["y"])(p32, x)              # traced: a custom call
    assert_close(got, xf(p32, x)["y"], 1e-6)
    with jax.enable_x64(True):
        p64 = jax.tree_util.tree_map(jnp.asarray, params(np.float64))
        check(p64, x.astype(np.float64), 1e-12)
        check(p64, x.astype(np.float64), 1e-12)
        assert jf.stats()["compiles"] == 4
    check(params(np.float64), x.astype(np.float64))                # x64 off again: float32
    assert jf.stats()["compiles"] == 4


# -- results made as jax.Arrays in C (eager.c's maker) ------------------------------------

def _ctypes_results(jf, *args):
    """jf's results through the ctypes path (to_jax in Python), the C path left as it was."""
    ex = jf.compiled_for(*args).executable
    fast = ex.__dict__.get("_fast")
    ex.__dict__["_fast"] = None
    try:
        return jf(*args)
    finally:
        ex.__dict__["_fast"] = fast


def _assert_same_arrays(got, want, tol=0.0):
    """The same kind of jax.Arrays; values within `tol` of the largest (0: bit for bit)."""
    from jax._src.array import ArrayImpl
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is ArrayImpl and g.shape == w.shape and g.dtype == w.dtype
        assert g.devices() == w.devices()
        if g.nbytes < 1 << 20:      # DLPack's results (from 1 MiB) are committed
            assert g.committed == w.committed and g.sharding == w.sharding
        assert_close(g, w, tol)


@pytest.mark.parametrize("n", [0, 1, 7, 300000])
def test_c_made_arrays_agree_with_the_ctypes_path(n):
    # the results the C path makes (jax's batched put from C; DLPack from 1 MiB on: 300000 x
    # (f32 + i32 + f32) is over it) are the arrays the ctypes path makes, and each call's are
    # its own
    f = lambda x: (x * 2, (x > 0).astype(jnp.int32), jnp.sum(x))
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    x = jnp.asarray(np.linspace(-1, 2, n, dtype=np.float32))
    got = jf(x)
    fast = jf.compiled_for(x).executable.fast_call
    if fast is None:
        pytest.skip("no C extension here")
    assert fast((x,)) is not None         # the C path makes these results
    again = jf(x + 1)
    want = _ctypes_results(jf, x)
    _assert_same_arrays(got, want)
    _assert_same_arrays(got, jax.jit(f)(x), 1e-5)       # the sum: not in XLA's order
    _assert_same_arrays(again, jax.jit(f)(x + 1), 1e-5)
    assert jf.stats()["compiles"] == 1


@pytest.mark.parametrize("n", [1023, 1024, 300001])
def test_large_outputs_reach_jax_without_a_copy(n):
    # numpy's own large arrays start 16 bytes into a page, and XLA copied each one it was
    # handed (a 16 MiB result cost a 16 MiB memmove per call): outputs from 4 KiB on are
    # allocated 64-byte aligned on both paths, and DLPack then takes them over as they are
    f = lambda x: (x * 2, x[:, :1] + 1)
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    x = np.linspace(-1, 2, 4 * n, dtype=np.float32).reshape(n, 4)
    jf(x)
    ex = jf.compiled_for(x).executable
    outs = [ex.run([x])]
    if ex.fast_call is not None:
        outs.append(ex.fast_call.numpy((x,)))
    for big, small in outs:
        assert big.ctypes.data % 64 == 0 and big.flags.c_contiguous and big.flags.writeable
        np.testing.assert_array_equal(big, x * 2)
        np.testing.assert_array_equal(small, x[:, :1] + 1)
        if big.nbytes >= 1 << 20:
            assert jax.dlpack.from_dlpack(big).unsafe_buffer_pointer() == big.ctypes.data
    _assert_same_arrays(jf(x), jax.jit(f)(x))
    assert jf.stats()["compiles"] == 1


def test_c_made_arrays_for_many_outputs_of_every_kind():
    # rank 0 to 3, bool, integer, float and complex outputs, some of size 0
    def f(x, m):
        outs = [x, x * 2, x.sum(), x[None], x[:, None] * x[None, :], (x > 0),
                x.astype(jnp.int8), x.astype(jnp.complex64) * 1j, m.astype(jnp.uint8),
                jnp.zeros((0,), jnp.float32) + x[:0], x.reshape(1, -1, 1)]
        return tuple(outs * 3)
    jf = jdisc.jit(f, dynamic_axes=({0: "n"}, {0: "n"}))
    for n in (1, 4, 0):
        x = jnp.asarray(np.arange(n, dtype=np.float32) - 1)
        m = jnp.asarray(np.arange(n) % 2 == 0)
        got = jf(x, m)
        fast = jf.compiled_for(x, m).executable.fast_call
        assert (fast is not None and fast((x, m)) is not None) or not eager.enabled()
        _assert_same_arrays(got, jax.jit(f)(x, m), 1e-6)
        _assert_same_arrays(got, _ctypes_results(jf, x, m))
    assert jf.stats()["compiles"] == 1


def test_a_model_of_many_leaves_takes_the_c_path():
    # a parameter pytree of 150 leaves in, 140 results out (a haiku ResNet's training step
    # has 120 in, 79 out): the C path takes up to 256 of each (64 until 2026-12-07); past
    # that, or past 1024 dims in all, the ctypes path serves the call, with the same results
    def f(params, x):
        outs = [x @ w + b for w, b in params]
        return outs, [w * 0.5 for w, _ in params[:65]]

    def make(count):
        rng = np.random.default_rng(count)
        return [(jnp.asarray(rng.standard_normal((3, 2)).astype(np.float32)),
                 jnp.asarray(rng.standard_normal(2).astype(np.float32))) for _ in range(count)]
    for count, fast_ok in ((75, True), (260, False)):
        params = make(count)
        jf = jdisc.jit(f, dynamic_axes=(None, {0: "n"}))
        for n in (1, 5):
            x = jnp.asarray(np.arange(3 * n, dtype=np.float32).reshape(n, 3))
            got = jf(params, x)
            fast = jf.compiled_for(params, x).executable.fast_call
            if eager.enabled():
                assert (fast is not None) == fast_ok, count
            _assert_same_arrays(tuple(jax.tree_util.tree_leaves(got)),
                                tuple(jax.tree_util.tree_leaves(jax.jit(f)(params, x))), 1e-6)
        assert jf.stats()["compiles"] == 1


def test_committed_and_numpy_inputs_around_the_c_made_arrays():
    # a committed input: results committed to its device, as jax.jit gives them (the C path
    # hands the call to Python); numpy inputs and mixes: uncommitted on the default device
    f = lambda x, y: x * y + 1
    jf, xf = jdisc.jit(f, dynamic_axes=({0: "n"}, {0: "n"})), jax.jit(f)
    a = np.arange(5, dtype=np.float32)
    d = jax.devices()[0]
    cases = [(jax.device_put(a, d), jnp.asarray(a)), (jnp.asarray(a), a), (a, a),
             (jax.device_put(a, d), a), [jnp.asarray(a), jnp.asarray(a)]]
    for args in cases:
        _assert_same_arrays([jf(*args)], [xf(*args)])
    with jax.default_device(d):        # a default device set: placed by Python, uncommitted
        _assert_same_arrays([jf(jnp.asarray(a), a)], [xf(jnp.asarray(a), a)])
    assert jf.stats()["compiles"] == 1


def test_numpy_scalar_arguments_take_the_c_path():
    # a rank-0 leaf given as a numpy scalar of its dtype (a trip count, a scale) is read by the
    # C path; one of another dtype goes to the general path, which casts it as jax.jit does
    def f(x, n, s):
        return jax.lax.fori_loop(0, n, lambda i, v: v * s + i, x)
    jf, xf = jdisc.jit(f, dynamic_axes=({0: "b"}, None, None)), jax.jit(f)
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    cases = [(x, np.int32(3), np.float32(0.5)), (x[:2], np.int32(0), np.float32(2)),
             (x, np.int64(4), np.float32(0.5)), (x, np.int32(2), np.float64(1.5))]
    for args in cases:
        _assert_same_arrays([jf(*args)], [xf(*args)])
    fast = jf.compiled_for(*cases[0]).executable.fast_call
    if fast is not None:
        got = fast.numpy(cases[0])
        assert got is not None
        np.testing.assert_allclose(got[0], np.asarray(xf(*cases[0])), rtol=1e-6)
        assert fast.numpy((x, np.int64(3), np.float32(0.5))) is None    # another dtype
        assert fast.numpy((x, 3, np.float32(0.5))) is None               # a Python int
    assert jf.stats()["compiles"] == 1


def test_programs_whose_maker_is_missing_or_wrong_fall_back():
    # jax internals other than expected: no maker (results made by to_jax), or a maker the
    # probe refuses (it makes something else): the same answers
    from jdisc.custom_calls import runtime
    from jdisc.errors import RuntimeCheckError
    f = lambda x: x[1:] * 3
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    x = jnp.arange(6, dtype=jnp.float32)
    want = jf(x)
    ex = jf.compiled_for(x).executable
    maker = runtime.array_maker()
    if ex.fast_call is None or maker is None:
        pytest.skip("no C extension or no maker here")
    assert runtime._makes_arrays(ex.fast_call, maker, ex._out_dtypes, ex._out_ranks)

    def program(maker):
        from jax._src.array import ArrayImpl
        return eager.program(ex.library.handle, ex._n_dims, [np.float32], [1], ex._out_dtypes,
                             ex._out_ranks, ArrayImpl, ShapeError, RuntimeCheckError, maker)
    wrong = maker[:5] + (lambda shape, dtype: jax.core.ShapedArray(shape, np.int32),) + \
        maker[6:]
    assert not runtime._makes_arrays(program(wrong), wrong, ex._out_dtypes, ex._out_ranks)
    plain = program(None)
    assert plain((x,)) is None and plain.numpy((x,)) is not None
    ex.__dict__["_fast"] = plain
    try:
        _assert_same_arrays([jf(x), jf(np.asarray(x))], [want, want])
    finally:
        del ex.__dict__["_fast"]


def test_c_made_arrays_leak_no_references_or_memory():
    # 100k calls: the inputs' and results' reference counts as before, RSS flat
    import gc
    import sys
    jf = jdisc.jit(lambda x, y: (x[4] + 1, x * y), dynamic_axes=({0: "n"}, {0: "n"}))
    x, y = jnp.arange(8, dtype=jnp.float32), np.ones(8, np.float32)
    out = jf(x, y)
    if jf.compiled_for(x, y).executable.fast_call is None:
        pytest.skip("no C extension here")
    gc.collect()    # the compile's garbage cycles may still hold the arguments: not a leak
    refs = sys.getrefcount(x), sys.getrefcount(y)
    out_refs = [sys.getrefcount(o) for o in out]

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    for _ in range(5000):
        out = jf(x, y)
    gc.collect()
    before = rss()
    for _ in range(100000):
        out = jf(x, y)
    gc.collect()
    grown = rss() - before
    assert (sys.getrefcount(x), sys.getrefcount(y)) == refs
    assert [sys.getrefcount(o) for o in out] == out_refs
    assert grown < 4 << 20, f"RSS grew by {grown} bytes over 100k calls"


_DEFAULT_DEVICE = r"""
import jax, jax.numpy as jnp, numpy as np, jdisc
from jdisc.custom_calls import eager
eager.module(wait=True)
d = jax.devices()
assert len(d) == 2, d
f = lambda x: (x + 1, x.sum())
jf, xf = jdisc.jit(f, dynamic_axes=({0: "n"},)), jax.jit(f)
a = np.arange(5, dtype=np.float32)
for ctx, x in ((jax.default_device(d[1]), jnp.asarray(a)), (jax.default_device(d[1]), a),
               (jax.default_device(d[0]), jax.device_put(a, d[1]))):
    with ctx:
        for g, w in zip(jf(x), xf(x)):
            assert g.devices() == w.devices() and g.committed == w.committed, (g.devices(),
                                                                             w.devices())
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
r = jf(jnp.asarray(a))[0]              # no default device set: the first device, as jax.jit
assert r.devices() == {d[0]} and not r.committed
assert jf.stats()["compiles"] == 1
print("ok")
"""


def test_c_made_arrays_follow_jax_default_device():
    from subprocess_support import run_python
    proc = run_python(_DEFAULT_DEVICE, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_dtype_of_a_numpy_argument_follows_the_x64_mode_of_each_call():
    # regression: the canonical dtype was remembered per dtype, not per (dtype, x64 mode), so
    # a float64 numpy array seen without x64 (float32) selected the float32 program under x64
    f = lambda x: x * 2
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    x = np.arange(3, dtype=np.float64)
    assert jf(x).dtype == jnp.float32
    with jax.enable_x64(True):
        got = jf(x)
        assert got.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(got), x * 2)
    assert jf(x).dtype == jnp.float32
