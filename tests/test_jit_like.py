"""A jdisc function behaves like jax.jit where a JAX user expects it to: shapes written as
jax.export writes them, a new dtype or rank compiles a program of its own (as jax.jit
retraces), strict=True keeps one program, and misuse gets a short message naming the argument.
Each result is compared with jax.jit at several sizes (0, 1, primes) and compiles are counted."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc.errors import ArgumentError, DtypeError, ShapeError


def _arange(shape, dtype=np.float32):
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) % 7 - 3


def _same_as_jax(f, jf, *args):
    got, want = jf(*args), jax.jit(f)(*args)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# -- dims written as jax.export expressions and shape strings -----------------------------

@pytest.mark.parametrize("axes, f, sizes", [
    # a multiple of 8: the reshape that a plain name cannot prove
    (({0: "8*k"},), lambda x: x.reshape(-1, 8).sum(1), [0, 8, 56, 8 * 13]),
    # one more than a name: x[1:] has size b
    (({0: "b + 1"},), lambda x: x[1:] * 2 + x[:-1], [1, 2, 14]),
])
def test_dimension_expressions(axes, f, sizes):
    jf = jdisc.jit(f, dynamic_axes=axes)
    for n in sizes:
        _same_as_jax(f, jf, _arange((n,)))
    assert jf.stats()["compiles"] == 1


def test_expression_over_a_name_bound_by_another_axis():
    f = lambda x, y: x + y[:, ::2]        # noqa: E731
    jf = jdisc.jit(f, dynamic_axes=({0: "b", 1: "b"}, {0: "b", 1: "2*b"}))
    for b in (0, 1, 3, 7):
        _same_as_jax(f, jf, _arange((b, b)), _arange((b, 2 * b)))
    assert jf.stats()["compiles"] == 1
    with pytest.raises(ShapeError, match=r"argument 'y' axis 1 is 7; expected 2\*b \(b = 3\)"):
        jf(_arange((3, 3)), _arange((3, 7)))


@pytest.mark.parametrize("size, want", [(12, r"axis 0 is 12; expected 8\*k for some k >= 0")])
def test_size_that_no_value_of_the_name_gives(size, want):
    jf = jdisc.jit(lambda x: x.reshape(-1, 8).sum(1), dynamic_axes=({0: "8*k"},))
    jf(_arange((16,)))
    with pytest.raises(ShapeError, match=r"argument 'x' " + want):
        jf(_arange((size,)))
    jg = jdisc.jit(lambda x: x[1:], dynamic_axes=({0: "b + 1"},))
    jg(_arange((3,)))
    with pytest.raises(ShapeError, match=r"argument 'x' axis 0 is 0; expected b \+ 1 for some "
                                         r"b >= 0"):
        jg(_arange((0,)))


def test_whole_argument_shape_strings():
    f = lambda x, y: (x.sum(1), y.sum(0))      # noqa: E731
    jf = jdisc.jit(f, dynamic_axes=("b, s, 4", "b, ..."))
    for b, s in ((1, 1), (3, 5), (7, 2)):
        _same_as_jax(f, jf, _arange((b, s, 4)), _arange((b, 2, 3)))
    assert jf.stats()["compiles"] == 1
    with pytest.raises(ShapeError, match=r"argument 'y' axis 1 is 5; expected 2"):
        jf(_arange((3, 5, 4)), _arange((3, 5, 3)))     # ... keeps the example's sizes static


@pytest.mark.parametrize("axes, error, match", [
    (("b, s, 4",), ShapeError, r"argument 'x' axis 2 is 5, but its shape 'b, s, 4' says 4"),
    (("b, s",), ShapeError, r"shape 'b, s' has 2 dimension\(s\), but the argument has shape"),
    (("b, ..., 3",), ArgumentError, r"'\.\.\.' may only end a shape string"),
    (({0: "b, s"},), ArgumentError, r"names several dimensions; give the whole argument's"),
    (({0: "8 k"},), ArgumentError, r"axis 0: jax.export cannot read the dimension expression"),
    (({0: "mod"},), ArgumentError, r"a dimension is a name or a jax.export dimension expr"),
    (({0: 3},), ArgumentError, r"a dimension is a name or"),
])
def test_bad_shape_specs_name_the_argument(axes, error, match):
    with pytest.raises(error, match=match):
        jdisc.jit(lambda x: x * 2, dynamic_axes=axes)(_arange((2, 3, 5)))


def test_violated_constraint_names_the_argument_and_axis():
    jf = jdisc.jit(lambda x, y: x * 2 + y, dynamic_axes=({0: "b"}, {0: "b"}),
                   constraints=("b >= 4",))
    jf(_arange((5,)), _arange((5,)))
    with pytest.raises(ShapeError, match=r"constraint b >= 4.*\('b' is argument 'x' axis 0, "
                                         r"of size 2\)"):
        jf(_arange((2,)), _arange((2,)))


# -- signatures: a new dtype or rank is a new program, as jax.jit retraces -----------------

def test_new_dtype_or_rank_compiles_a_program_of_its_own():
    f = lambda x: x * 2 + 1      # noqa: E731
    jf = jdisc.jit(f, dynamic_axes=({0: "b"},))
    for x in (_arange((3,)), _arange((1,)), _arange((4,), np.int32), _arange((0,), np.int32),
              _arange((2, 5)), _arange((7, 5)), 3.0, _arange((4,))):
        _same_as_jax(f, jf, x) if np.ndim(x) else _same_as_jax(f, jdisc.jit(f), x)
    st = jf.stats()
    assert st["compiles"] == 3 and st["calls"] == 7, st    # f32 rank 1, i32 rank 1, f32 rank 2


def test_new_pytree_structure_compiles_a_program_of_its_own():
    f = lambda p: jax.tree_util.tree_reduce(jnp.add, jax.tree_util.tree_map(jnp.sum, p))  # noqa
    jf = jdisc.jit(f, dynamic_axes=({0: "b"},))
    _same_as_jax(f, jf, {"a": _arange((3,))})
    _same_as_jax(f, jf, {"a": _arange((4,)), "c": _arange((4,))})
    _same_as_jax(f, jf, {"a": _arange((7,))})
    assert jf.stats()["compiles"] == 2


def test_parameters_passed_by_keyword_have_no_dynamic_axes_in_the_tuple_form():
    # the tuple covers the arguments passed positionally; `scale=3.0` as jax.jit takes it (it
    # was refused: "compiled for 1 positional argument(s), got 2", or "dynamic_axes has 1
    # entries" on a first call); each signature is a program of its own, for every n
    f = lambda x, scale=2.0: x * scale      # noqa: E731
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    for n in (0, 1, 7):
        x = _arange((n,))
        _same_as_jax(f, jf, x)
        got, want = jf(x, scale=3.0), jax.jit(f)(x, scale=3.0)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert jf.stats()["compiles"] == 2
    g = lambda x, y=None: x if y is None else x - y      # noqa: E731
    jg = jdisc.jit(g, dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})   # by name: y's axes too
    for n in (2, 5):
        got = jg(_arange((n,)), y=_arange((n,)) * 2)
        np.testing.assert_array_equal(np.asarray(got), -np.asarray(_arange((n,))))
    assert jg.stats()["compiles"] == 1


def test_results_are_weakly_typed_where_jax_jits_are():
    # `x * 2.5` of an int32 x is a weak float32 in jax.jit: added to a bfloat16 array it gives
    # bfloat16; jdisc's results were plain float32 and promoted it (found by an adversarial
    # sweep). Eagerly, at several sizes, and inside jax.jit (the FFI call's result types)
    f = lambda x: (x * 2.5, x + 1, jnp.float32(3) * x)      # noqa: E731
    jf = jdisc.jit(f, dynamic_axes=({0: "n"},))
    for n in (0, 1, 5):
        x = _arange((n,), np.int32)
        for g, w in zip(jf(x), jax.jit(f)(x)):
            assert (g.dtype, g.weak_type) == (w.dtype, w.weak_type)
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    x = _arange((4,), np.int32)
    half = jnp.ones(4, jnp.bfloat16)
    assert (jf(x)[0] + half).dtype == jnp.bfloat16
    assert jax.jit(lambda x: jf(x)[0] + half)(x).dtype == jnp.bfloat16
    assert jf.stats()["compiles"] == 1


def test_strict_keeps_one_program():
    jf = jdisc.jit(lambda x: x * 2, dynamic_axes=({0: "b"},), strict=True)
    jf(_arange((3,)))
    with pytest.raises(DtypeError, match=r"argument 'x' has dtype int32 but the function was "
                                         r"compiled for float32"):
        jf(_arange((3,), np.int32))
    with pytest.raises(ShapeError, match=r"argument 'x' has rank 2"):
        jf(_arange((3, 2)))
    with pytest.raises(ArgumentError, match=r"argument 'x' is a list \(wrap it with "
                                            r"jnp.asarray\), but the function was compiled "
                                            r"with an array there$"):
        jf([1.0, 2.0])
    assert jf.stats()["compiles"] == 1


def test_a_python_list_for_an_array_gets_a_short_message():
    jf = jdisc.jit(lambda x: x * 2, dynamic_axes=({0: "b"},))
    with pytest.raises(ArgumentError) as info:
        jf([1.0, 2.0, 3.0])
    msg = str(info.value)
    assert msg == ("argument 'x' is a Python list, but its dynamic_axes entry {0: 'b'} "
                   "describes an array: pass an array (jnp.asarray(x))")
    assert "PyTreeDef" not in msg


# -- AOT staging: lower / compile, as jax.jit ---------------------------------------------

def _mlp(x, w):
    return jnp.tanh(x @ w).sum(1)


def test_lower_compile_with_symbolic_shape_dtype_structs():
    from jax import export
    jf = jdisc.jit(_mlp, dynamic_axes=({0: "b"}, None))
    b, = export.symbolic_shape("b")
    lowered = jf.lower(jax.ShapeDtypeStruct((b, 8), jnp.float32),
                       jax.ShapeDtypeStruct((8, 4), jnp.float32))
    text = lowered.as_text()
    assert "func.func public @main" in text and "tensor<?x8xf32>" in text
    assert repr(lowered) == "<jdisc Lowered '_mlp' (x: float32[b, 8], w: float32[8, 4])>"
    exe = lowered.compile()
    assert "Generated by jdisc" in exe.as_text() and "jd_prepare" in exe.as_text()
    w = _arange((8, 4)) / 10
    for n in (0, 1, 5, 31):
        x = _arange((n, 8)) / 10
        np.testing.assert_allclose(np.asarray(exe(x, w)), np.asarray(jax.jit(_mlp)(x, w)),
                                   rtol=2e-6, atol=2e-6)   # tanh: jdisc's and XLA's differ by ulps
    # the executable is one program for every shape, and also runs inside jax.jit
    got = jax.jit(lambda x: exe(x, w) * 2)(_arange((3, 8)) / 10)
    np.testing.assert_allclose(np.asarray(got), 2 * np.asarray(_mlp(_arange((3, 8)) / 10, w)),
                               rtol=2e-6, atol=2e-6)
    assert jf.stats()["compiles"] == 1


def test_memory_and_cost_analyses_are_symbolic_and_evaluate():
    jf = jdisc.jit(_mlp, dynamic_axes=({0: "b"}, None))
    exe = jf.lower(_arange((3, 8)), _arange((8, 4))).compile()
    mem = exe.memory_analysis()
    assert str(mem.argument_size_in_bytes) == "32*b + 128"     # 4 bytes * (8b + 32)
    assert str(mem.output_size_in_bytes) == "4*b"
    at16 = exe.memory_analysis(b=16)
    assert (at16.argument_size_in_bytes, at16.output_size_in_bytes) == (640, 64)
    assert at16.temp_size_in_bytes >= 16 * 4 * 4        # the [b, 4] product at least
    cost = exe.cost_analysis()
    # dot: 2*b*4*8 flops; tanh: 4b; the sum: 4b
    assert str(cost["flops"]) == "72*b"
    assert exe.cost_analysis(b=10)["flops"] == 720
    assert exe.cost_analysis(b=10)["bytes accessed"] > 4 * (10 * 8 + 32)


def test_repr_and_explain_at_a_repl():
    jf = jdisc.jit(_mlp, dynamic_axes=({0: "b"}, None))
    assert repr(jf) == ("<jdisc.jit of _mlp: dynamic_axes=({0: 'b'}, None); 0 program(s), "
                        "0 compile(s), 0 call(s)>")
    jf(_arange((3, 8)), _arange((8, 4)))
    assert "1 program(s), 1 compile(s), 1 call(s)" in repr(jf)
    text = jf.explain(_arange((3, 8)), _arange((8, 4)))
    assert isinstance(text, str) and text.startswith("jdisc program '_mlp'")
    assert repr(text) == text         # a REPL shows the text, not a quoted one-line string


# -- small things people hit ---------------------------------------------------------------

def test_every_environment_variable_jdisc_reads_is_documented():
    import pathlib
    import re
    root = pathlib.Path(jdisc.__file__).parent
    read = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        read |= set(re.findall(r"environ(?:\.get)?\(?\[?\"([A-Z][A-Z0-9_]+)\"", text))
        read |= {v for group in re.findall(r"for var in \(([^)]*)\)", text)
                 for v in re.findall(r"\"([A-Z][A-Z0-9_]+)\"", group)}
    for pattern in ("*.h", "*.c"):     # the fixed C (lowering/c_runtime, the eager extension)
        for path in root.rglob(pattern):
            read |= set(re.findall(r"getenv\(\"([A-Z][A-Z0-9_]+)\"\)", path.read_text()))
    assert {"JDISC_NUM_THREADS", "OMP_NUM_THREADS", "JDISC_CACHE_DIR"} <= read
    page = (root.parent / "docs" / "how-it-works.md").read_text()
    table = page[page.index("## Configuration"):]
    table = table[:table.index("\n\n", table.index("| variable"))]
    missing = sorted(v for v in read if f"`{v}" not in table)
    assert not missing, f"read by jdisc but not in the configuration table of docs/how-it-works.md: {missing}"


def test_dump_dir_gives_each_program_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("JDISC_DUMP_DIR", str(tmp_path))
    f, g = (lambda x: x + 1), (lambda x: x * 3)
    for fn in (f, g):
        jdisc.jit(fn, dynamic_axes=({0: "n"},))(_arange((4,)))
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert len(folders) == 2 and all(n.startswith("<lambda>-") for n in folders), folders
    texts = [(tmp_path / n / "00_stablehlo.mlir").read_text() for n in folders]
    assert any("stablehlo.add" in t for t in texts) and any("stablehlo.multiply" in t
                                                           for t in texts)
    assert all((tmp_path / n / "kernels.c").exists() for n in folders)


# -- devices (a subprocess: the two CPU devices must exist before jax starts) ---------------

_DEVICES = r"""
import jax, numpy as np, jdisc
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
d = jax.devices()
assert len(d) == 2, d
f = jdisc.jit(lambda x, y: x * 2 + y, dynamic_axes=({0: "n"}, {0: "n"}))
a = np.arange(5, dtype=np.float32)
x1 = jax.device_put(a, d[1])
for args, want in (((x1, x1), d[1]), ((x1, a), d[1]), ((a, a), d[0])):
    r = f(*args)
    assert r.devices() == {want} and r._committed == (want == d[1]), (r.devices(), want)
    np.testing.assert_array_equal(np.asarray(r), 3 * a)
big = np.ones(1 << 20, np.float32)                    # the zero-copy size class too
r = f(jax.device_put(big, d[1]), big)
assert r.devices() == {d[1]} and float(r[-1]) == 3.0
sharded = jax.device_put(np.arange(4, dtype=np.float32), NamedSharding(Mesh(np.array(d), ("a",)), P("a")))
r = f(sharded, sharded)                               # parallel in n: once per shard
assert r.sharding == sharded.sharding, r.sharding
np.testing.assert_array_equal(np.asarray(r), 3 * np.arange(4, dtype=np.float32))
for bad, match in (((x1, jax.device_put(a, d[0])), f"committed to {d[1]} but argument 'y' to {d[0]}"),):
    try:
        f(*bad)
    except jdisc.ArgumentError as err:
        assert match in str(err), err
    else:
        raise AssertionError("no error for " + match)
assert f.stats()["compiles"] == 1
print("ok")
"""


def test_results_live_on_the_inputs_device_and_sharded_inputs_run_per_shard():
    from subprocess_support import run_python
    proc = run_python(_DEVICES, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# jax < 0.10 frees a deleted array's memory under a live numpy view: jdisc reuses nothing there
_REUSES = __import__("jdisc.custom_calls.runtime", fromlist=["x"]).donate_min_bytes() is not None


def _sgd(p, g):
    return p - 0.25 * g, jnp.sum(g * g)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 262147, 1000003])
def test_donated_buffer_takes_the_result(n):
    # the training-step shape of donation: the new parameters are written into the old ones
    # (from 1 MiB on: a smaller donated buffer costs more to hand back to jax than a copy)
    jf = jdisc.jit(_sgd, dynamic_axes=({0: "n"}, {0: "n"}), donate_argnums=0)
    g = jnp.asarray(_arange((n,)))
    want = jax.jit(_sgd)(jnp.asarray(_arange((n,)) + 1), g)
    p = jnp.asarray(_arange((n,)) + 1)
    address = p.unsafe_buffer_pointer()
    new_p, loss = jf(p, g)
    np.testing.assert_array_equal(np.asarray(new_p), np.asarray(want[0]))
    np.testing.assert_array_equal(np.asarray(loss), np.asarray(want[1]))
    assert not g.is_deleted()
    if not _REUSES:      # jax < 0.10: left alone, and still valid
        assert not p.is_deleted()
        np.testing.assert_array_equal(np.asarray(p), _arange((n,)) + 1)
        return
    assert p.is_deleted()                      # as jax.jit deletes it, whatever its size
    with pytest.raises(RuntimeError, match="deleted"):
        p + 1
    if 4 * n < (1 << 20):       # a fresh result: a smaller buffer costs more to hand back
        assert new_p.unsafe_buffer_pointer() != address
        return
    assert new_p.unsafe_buffer_pointer() == address
    with pytest.raises(RuntimeError, match="deleted"):
        p + 1
    # the reused buffer outlives the deleted array: fresh allocations do not overwrite it
    junk = [jnp.full((n,), 9.0) for _ in range(4)]
    np.testing.assert_array_equal(np.asarray(new_p), np.asarray(want[0]))
    del junk


def test_donation_in_a_loop_compiles_once():
    jf = jdisc.jit(_sgd, dynamic_axes=({0: "n"}, {0: "n"}), donate_argnames="p")
    for n in (5, 11, 5, 300007):
        p, g = jnp.zeros((n,)), jnp.ones((n,))
        for _ in range(3):
            p, _ = jf(p, g)
        np.testing.assert_allclose(np.asarray(p), -0.75)
    assert jf.stats()["compiles"] == 1
    assert "donation: result" in jf.explain(p, g)


_BIG = 300007     # float32 elements: above the 1 MiB from which donated buffers are reused


@pytest.mark.parametrize("f, shape, why", [
    (lambda x: x * 2 + 1, (_BIG,), None),       # the control: this one is reused
    (lambda x: x * 2 + 1, (7,), "under 1 MiB: a fresh result costs less"),
    (lambda x: x.T + x, (600, 600), "reads x at the transposed element"),
    (lambda x: (x * 2, jnp.cumsum(x)), (_BIG,), "a later kernel reads x"),
    (lambda x: (x, x + 1), (_BIG,), "x itself is a result"),
    (lambda x: x[1:] * 2, (_BIG,), "no result of x's shape"),
    (lambda x: x.astype(jnp.int32), (_BIG,), "no result of x's dtype"),
    (lambda x: x.astype(jnp.float16), (_BIG,), "no result of x's size"),
    (lambda x: jnp.sort(x) + 1, (_BIG,), "the writer is not an elementwise loop"),
    (lambda x: x.sum(), (_BIG,), "a scalar result"),
])
def test_donated_arrays_are_deleted_as_jax_jit_deletes_them(f, shape, why):
    # whether jdisc reuses the buffer is its own choice (the memory plan, the size); whether
    # the donated array is deleted afterwards is jax.jit's: XLA takes a donated buffer for any
    # result of its size in bytes
    axes = {i: "n" for i in range(len(shape))}
    jf = jdisc.jit(f, dynamic_axes=(axes,), donate_argnums=0)
    x, twin = jnp.asarray(_arange(shape)), jnp.asarray(_arange(shape))
    address = x.unsafe_buffer_pointer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # jax's "Some donated buffers were not usable"
        want = jax.jit(f, donate_argnums=0)(twin)
    got = jf(x)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    if not _REUSES:
        assert not x.is_deleted()
        return
    assert x.is_deleted() == twin.is_deleted(), why
    reused = any(g.unsafe_buffer_pointer() == address
                 for g in jax.tree_util.tree_leaves(got) if g.size)
    assert reused == (why is None), why
    if not x.is_deleted():
        np.testing.assert_array_equal(np.asarray(x), _arange(shape))


def test_donation_is_left_alone_for_numpy_shared_and_traced_arguments():
    jf = jdisc.jit(lambda x, y: x * 2 + y, dynamic_axes=({0: "n"}, {0: "n"}),
                   donate_argnums=(0, 1))
    base = _arange((_BIG,))
    x = jnp.asarray(base)
    np.testing.assert_array_equal(np.asarray(jf(x, x)), base * 3)
    assert not x.is_deleted()        # one buffer passed twice: not given away
    a = base.copy()
    np.testing.assert_array_equal(np.asarray(jf(a, a)), base * 3)
    np.testing.assert_array_equal(a, base)               # numpy: never written
    view = np.asarray(x)                                 # a numpy view of x's buffer
    np.testing.assert_array_equal(np.asarray(jf(x, view[::-1].copy())), base * 2 + base[::-1])
    assert x.is_deleted() == _REUSES                     # a copy shares nothing: reused
    x = jnp.asarray(base)
    np.testing.assert_array_equal(np.asarray(jf(x, np.asarray(x))), base * 3)
    assert not x.is_deleted()                            # the view shares x's memory
    out = jax.jit(lambda v: jf(v, v + 1))(x)             # inside a trace: the outer jit's call
    np.testing.assert_array_equal(np.asarray(out), base * 3 + 1)
    assert not x.is_deleted()


def test_donation_arguments_are_checked():
    f = lambda x, y: x * 2 + y      # noqa: E731
    with pytest.raises(ArgumentError, match=r"donate_argnames names \['z'\]"):
        jdisc.jit(f, donate_argnames="z")
    with pytest.raises(ArgumentError, match="donate_argnums must be ints"):
        jdisc.jit(f, donate_argnums=("x",))
    with pytest.raises(ArgumentError, match="both static and donated"):
        jdisc.jit(f, static_argnums=1, donate_argnums=1)
