"""User names never reach generated C raw: dimension names that are C keywords, libc functions,
jdisc's own locals or not ASCII; argument, function and scope names with comment and string
delimiters. Each program is compiled once and compared with jax.jit at several sizes."""

import os

import numpy as np
import jax
import jax.numpy as jnp
import pytest
from jax import lax

import jdisc
from conftest import assert_close, check_against_jax
from jdisc.lowering.names import c_comment, dim_ident
from jdisc.lowering.cwriter import c_string

HOSTILE = [
    "status", "arena", "m", "len", "int", "for", "return", "restrict", "_Bool", "NULL",
    "INFINITY", "malloc", "exp", "printf", "main", "jd_run", "err", "errlen", "dims", "in0",
    "out0", "row", "i", "x", "batch", "_h0", "d_B", "dx_q", "__x", "lambda", "True",
    "séq", "π", "Größe",
]
NHWC = ("NHWC", "HWIO", "NHWC")


def _many_op_kinds(x, a, img, k):
    """One program through every kind of kernel and host code, all on the dim of x's axis 0."""
    loop = jnp.tanh(x) * 2 + x[::-1]
    stitch = jax.nn.softmax(x.T, axis=-1) + x.T.sum(-1, keepdims=True)
    reduce = jnp.abs(x).max(0, initial=0.0)   # (initial: jax refuses an empty max)
    values, order = jnp.sort(x, axis=0), jnp.argsort(x[:, 0])
    solve = lax.linalg.triangular_solve(a, x, left_side=True, lower=True)
    dot = x.T @ x + (a @ x).sum(0)
    conv = lax.conv_general_dilated(img, k, (2, 2), "SAME", dimension_numbers=NHWC)
    pool = lax.reduce_window(img, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    scatter = x.at[jnp.array([0, 2, 2])].add(1.0)
    gather = jnp.take_along_axis(x, jnp.argmax(x, axis=1, keepdims=True), axis=1)
    loop_carried = lax.fori_loop(0, 3, lambda i, c: c * 0.5 + jnp.sin(c), x)
    branch = lax.cond(x.sum() > 0, lambda y: y + 1, lambda y: y * 2, x)
    return (loop, stitch, reduce, values, order, solve, dot, conv, pool, scatter, gather,
            loop_carried, branch)


def _args(rng, n):
    a = np.tril(rng.standard_normal((n, n))) + 4 * np.eye(n)
    return (rng.standard_normal((n, 4)).astype(np.float32), a.astype(np.float32),
            rng.standard_normal((2, n, 5, 2)).astype(np.float32),
            rng.standard_normal((3, 3, 2, 3)).astype(np.float32))


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_dimension_names_through_every_op_kind(rng, name):
    axes = ({0: name}, {0: name, 1: name}, {1: name}, None)
    jf, args = check_against_jax(_many_op_kinds, axes, lambda n: _args(rng, n), (0, 1, 2, 5),
                                 tol=1e-4)
    src = jf.compiled_for(*args).c_source
    assert f"const int64_t {dim_ident(name)} = in_dims[0];" in src


def test_two_hostile_names_in_one_program(rng):
    f = lambda x, y: (jnp.sort(x, axis=1) @ y, lax.linalg.triangular_solve(
        y.T @ y + 9 * jnp.eye(y.shape[1]), y.T, left_side=True, lower=True))
    check_against_jax(f, ({0: "for", 1: "len"}, {0: "len", 1: "m"}),
                      lambda n: (rng.standard_normal((n + 1, n)).astype(np.float32),
                                 rng.standard_normal((n, n + 2)).astype(np.float32)),
                      (1, 2, 3, 7), tol=1e-3)


def test_a_wrong_size_is_reported_with_the_exact_names(rng):
    f = jdisc.jit(lambda x, y: x + y, dynamic_axes=({0: "Größe"}, {0: "Größe"}))
    x = np.ones((3, 2), np.float32)
    assert_close(f(x, x), x + x, 0)
    with pytest.raises(jdisc.ShapeError) as info:
        f(x, np.ones((4, 2), np.float32))
    assert "argument 'y' axis 0 ('Größe') is 4 but argument 'x' axis 0 ('Größe') is 3" in \
        str(info.value)


def test_hostile_argument_function_and_scope_names(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("JDISC_DUMP_DIR", str(tmp_path / "dump"))
    keys = ["a*/b", 'q"%s??/é\\\n', "/* x"]

    def body(d):
        with jax.named_scope("scope */ ??/ é \\"):
            return jnp.tanh(d[keys[0]]) + d[keys[1]] * 2 - d[keys[2]]
    body.__name__ = "../../fn */ ??/ \\ é"
    check_against_jax(body, ({k: {0: "séq"} for k in keys},),
                      lambda n: ({k: rng.standard_normal((n, 3)).astype(np.float32)
                                  for k in keys},), (0, 1, 4), tol=1e-6)
    dumped = os.listdir(tmp_path / "dump")
    assert len(dumped) == 1 and "/" not in dumped[0] and not dumped[0].startswith(".")
    f = jdisc.jit(body, dynamic_axes=({k: {0: "séq"} for k in keys},))
    bad = {keys[0]: np.ones((2, 3), np.float32), keys[1]: np.ones((2, 3), np.float32),
           keys[2]: np.ones((5, 3), np.float32)}
    with pytest.raises(jdisc.ShapeError, match=r"argument 'd\['/\* x'\]' axis 0 \('séq'\) is 5"):
        f(bad)


@pytest.mark.parametrize("name", ["my-dim", "seq.len", "a b", "1st", "", "mod", "max", "_"])
def test_names_jax_cannot_parse_are_a_clear_argument_error(name):
    f = jdisc.jit(lambda x, y: x + y, dynamic_axes=(None, {0: name}))
    with pytest.raises(jdisc.ArgumentError, match=r"argument 'y' axis 0"):
        f(np.ones(3, np.float32), np.ones(3, np.float32))


def test_package_round_trip_with_a_hostile_name(rng, tmp_path):
    f = lambda x: jnp.cumsum(jnp.sort(x, axis=0), axis=0)
    x = rng.standard_normal((5, 2)).astype(np.float32)
    path = str(tmp_path / "m.jdisc")
    jdisc.export_package(f, x, dynamic_axes=({0: "len"},)).save(path)
    pkg = jdisc.load(path)
    for n in (0, 1, 6):
        y = rng.standard_normal((n, 2)).astype(np.float32)
        assert_close(pkg(y), jax.jit(f)(y), 1e-5)


def test_the_naming_functions_by_construction():
    names = HOSTILE + ["my-dim", "my_dim", "a.b", "a_b", "a_2e_b", "é", "e\u0301", "_"]
    idents = [dim_ident(n) for n in names]
    assert len(set(idents)) == len(names)                    # injective
    assert all(i.isascii() and i.replace("_", "a").isalnum() for i in idents)
    assert all(i.startswith(("d_", "dx_")) for i in idents)
    for text in ["*/", "a*/b", "/*", "??/", "*??/\n/", "é\\", "**//"]:
        out = c_comment(text)
        assert "*/" not in out and "/*" not in out and "??" not in out and "\\" not in out
        assert out.isascii() and "\n" not in out
    lit = c_string('é"\\%?\n\x01')
    assert lit == '"\\303\\251\\"\\\\%%\\?\\n\\001"'


def test_hostile_names_inside_a_jax_trace(rng):
    # the XLA FFI handler and jax.vmap's extra symbolic batch run the same launcher
    f = jdisc.jit(lambda x: jnp.sort(x, axis=0) * 2, dynamic_axes=({0: "len"},))
    for n in (1, 4):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        assert_close(jax.jit(f)(x), jnp.sort(x, axis=0) * 2, 0)
        xs = np.stack([x, -x])
        assert_close(jax.vmap(f)(xs), jax.vmap(lambda y: jnp.sort(y, axis=0) * 2)(xs), 0)
