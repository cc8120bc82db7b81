"""Errors: what jdisc cannot compile is an UnsupportedOpError naming every op, type and line; a
failure inside jdisc is a CompileError chaining the original exception; with fallback="xla"
both run the function with jax.jit; errors in the arguments never fall back."""

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc import cli, driver
from jdisc.custom_calls import runtime
from jdisc.dynamic_passes import pipeline
from jdisc.dynamic_passes.importer import mlir_import
from jdisc.errors import (ArgumentError, CompileError, DtypeError, JdiscError, ShapeError,
                          UnsupportedOpError)

HERE = os.path.basename(__file__)
N = ({0: "n"},)
X = np.arange(1, 4, dtype=np.float32)


# ----------------------------------------------------------------------- unsupported types

def test_int4_constant_is_unsupported_with_its_line():
    f = jdisc.jit(lambda x: x.astype(jnp.int4) * jnp.int4(3), dynamic_axes=N)
    with pytest.raises(UnsupportedOpError) as info:
        f(X)
    msg = str(info.value)
    assert "stablehlo.constant" in msg and "i4" in msg and "sub-byte integers" in msg
    assert "stablehlo.multiply" in msg and HERE in msg


def test_complex_python_scalar_for_a_float_input_is_a_dtype_error():
    f = jdisc.jit(lambda x, s: x * s, dynamic_axes=(N[0], None), strict=True)
    f(X, 2.0)
    with pytest.raises(DtypeError, match="complex"):
        f(X, 1 + 2j)


@pytest.mark.parametrize("dtype, shown", [(jnp.float8_e4m3fn, "f8E4M3FN"), (jnp.int4, "i4"),
                                          (jnp.float8_e5m2, "f8E5M2")])
def test_small_types_are_unsupported(dtype, shown):
    f = jdisc.jit(lambda x: x.astype(dtype).astype(jnp.float32), dynamic_axes=N)
    with pytest.raises(UnsupportedOpError, match=shown) as info:
        f(X)
    assert "stablehlo.convert" in str(info.value) and HERE in str(info.value)


# a tuple that leaves the function (its result) is refused; one taken apart inside it is not
TUPLE_MODULE = """
func.func @main(%arg0: tensor<2xf32>, %arg1: tensor<i64>) -> tuple<tensor<2xf32>, tensor<i64>> {
  %0 = stablehlo.tuple %arg0, %arg1 : tuple<tensor<2xf32>, tensor<i64>>
  %1 = stablehlo.get_tuple_element %0[0] : (tuple<tensor<2xf32>, tensor<i64>>) -> tensor<2xf32>
  %2 = stablehlo.tuple %1, %arg1 : tuple<tensor<2xf32>, tensor<i64>>
  return %2 : tuple<tensor<2xf32>, tensor<i64>>
}
"""

NESTED_TUPLES = """
func.func @main(%arg0: tensor<?xf64>, %arg1: tensor<i64>) -> (tensor<?xf64>, tensor<i64>) {
  %0 = stablehlo.tuple %arg1 : tuple<tensor<i64>>
  %1 = stablehlo.tuple %arg0, %0 : tuple<tensor<?xf64>, tuple<tensor<i64>>>
  %2 = stablehlo.get_tuple_element %1[0] : (tuple<tensor<?xf64>, tuple<tensor<i64>>>) -> tensor<?xf64>
  %3 = stablehlo.get_tuple_element %1[1] : (tuple<tensor<?xf64>, tuple<tensor<i64>>>) -> tuple<tensor<i64>>
  %4 = stablehlo.get_tuple_element %3[0] : (tuple<tensor<i64>>) -> tensor<i64>
  return %2, %4 : tensor<?xf64>, tensor<i64>
}
"""

TOKEN_MODULE = """
func.func @main(%arg0: tensor<2xf32>, %t: !stablehlo.token) -> (tensor<2xf32>, !stablehlo.token) {
  %0 = stablehlo.after_all %t : !stablehlo.token
  return %arg0, %0 : tensor<2xf32>, !stablehlo.token
}
"""

ATTRIBUTE_MODULE = """
func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %a, %a {jdisc.small = dense<1> : tensor<2xi4>} : tensor<2xf32>
  %1 = stablehlo.multiply %0, %0 {jdisc.c = dense<(1.0, 2.0)> : tensor<complex<f32>>} : tensor<2xf32>
  return %1 : tensor<2xf32>
}
"""


def test_tuple_results_come_back_as_tuples():
    f = jdisc.compile_stablehlo(TUPLE_MODULE)
    (out,) = f(np.array([1.5, 2.5], np.float32), np.int64(3))
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_array_equal(out[0], [1.5, 2.5])
    assert int(out[1]) == 3


TUPLE_ARGUMENTS = """
func.func @main(%t: tuple<tensor<?xf32>, tuple<tensor<i64>>>, %x: tensor<?xf32>)
    -> (tuple<tensor<?xf32>, tensor<i64>>, tensor<?xf32>) {
  %0 = stablehlo.get_tuple_element %t[0] : (tuple<tensor<?xf32>, tuple<tensor<i64>>>) -> tensor<?xf32>
  %1 = stablehlo.get_tuple_element %t[1] : (tuple<tensor<?xf32>, tuple<tensor<i64>>>) -> tuple<tensor<i64>>
  %2 = stablehlo.get_tuple_element %1[0] : (tuple<tensor<i64>>) -> tensor<i64>
  %3 = stablehlo.add %0, %x : tensor<?xf32>
  %4 = stablehlo.tuple %3, %2 : tuple<tensor<?xf32>, tensor<i64>>
  return %4, %0 : tuple<tensor<?xf32>, tensor<i64>>, tensor<?xf32>
}
"""


def test_tuple_arguments_take_python_tuples():
    f = jdisc.compile_stablehlo(TUPLE_ARGUMENTS)
    assert [s.name for s in f.cprog.inputs] == ["args[0][0]", "args[0][1][0]", "args[1]"]
    for n in (0, 1, 4):
        x = np.arange(n, dtype=np.float32)
        (s, k), y = f((x, (np.int64(7),)), 2 * x)
        np.testing.assert_array_equal(s, 3 * x)
        np.testing.assert_array_equal(y, x)
        assert int(k) == 7
    with pytest.raises(ArgumentError, match=r"args\[0\] is a tuple of 2"):
        f(np.ones(2, np.float32), np.ones(2, np.float32))
    with pytest.raises(ArgumentError, match="expected 2 argument"):
        f((np.ones(2, np.float32), (np.int64(1),)))


def test_tuples_taken_apart_in_the_function_compile():
    f = jdisc.compile_stablehlo(NESTED_TUPLES)
    for n in (0, 1, 5):
        got = f(np.arange(n, dtype=np.float64), np.int64(7))
        np.testing.assert_array_equal(got[0], np.arange(n, dtype=np.float64))
        assert int(got[1]) == 7


def test_token_types_are_unsupported():
    with pytest.raises(UnsupportedOpError) as info:
        jdisc.compile_stablehlo(TOKEN_MODULE)
    msg = str(info.value)
    assert "argument 'args[1]'" in msg and "stablehlo.after_all" in msg and "token" in msg


def test_attributes_of_unsupported_types_are_reported_not_crashed_on():
    with pytest.raises(UnsupportedOpError) as info:
        jdisc.compile_stablehlo(ATTRIBUTE_MODULE)
    msg = str(info.value)
    assert "stablehlo.add" in msg and "attribute 'jdisc.small'" in msg and "i4" in msg
    assert "stablehlo.multiply" in msg and "attribute 'jdisc.c'" in msg


def test_every_problem_in_one_error():
    def f(x):
        a = x.astype(jnp.int4).astype(jnp.float32)
        b = x.astype(jnp.float8_e4m3fn).astype(jnp.float32)
        return a + b
    with pytest.raises(UnsupportedOpError) as info:
        jdisc.jit(f, dynamic_axes=N)(X)
    msg = str(info.value)
    assert "i4" in msg and "f8E4M3FN" in msg and "4 op(s)" in msg


def test_invalid_module_text_is_an_argument_error():
    with pytest.raises(ArgumentError, match="not a valid StableHLO module"):
        jdisc.compile_stablehlo("func.func @main( this is not mlir")


@pytest.mark.parametrize("fn", [lambda x: x.astype(jnp.float8_e5m2).astype(jnp.float32),
                                lambda x: x.astype(jnp.int4).astype(jnp.float32) * 2])
def test_fallback_runs_unsupported_types_with_jax(fn):
    f = jdisc.jit(fn, dynamic_axes=N, fallback="xla")
    with pytest.warns(UserWarning, match="does not support"):
        got = f(X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(fn)(X)))
    assert f.stats()["fallbacks"] == 1
    assert "jax.jit" in f.explain(X)


def test_fallback_takes_inputs_of_unsupported_dtypes():
    f = jdisc.jit(lambda x: jnp.abs(x).astype(jnp.float32), dynamic_axes=N, fallback="xla")
    z = np.array([-3, 1.5], jnp.float8_e4m3fn)
    with pytest.warns(UserWarning, match="f8E4M3FN|float8"):
        np.testing.assert_allclose(np.asarray(f(z)), [3, 1.5])


def test_package_export_of_unsupported_types():
    with pytest.raises(UnsupportedOpError, match="sub-byte"):
        jdisc.export_package(lambda x: x.astype(jnp.int4) * 2, X, dynamic_axes=N)


# ----------------------------------------------------------------------- internal errors

def _fn(x):
    return jnp.tanh(x) * 2 + 1


def _expect_internal(call, stage_words, cause_type=RuntimeError, cause_text="boom"):
    with pytest.raises(CompileError) as info:
        call()
    err = info.value
    assert isinstance(err.__cause__, cause_type) and cause_text in str(err.__cause__)
    assert err.__cause__.__traceback__ is not None
    msg = str(err)
    assert "internal compiler error" in msg and stage_words in msg
    assert f"{cause_type.__name__}: {cause_text}" in msg
    return err


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


def test_internal_error_in_a_pass_names_the_op_and_chains():
    at = [p.__name__ for p in pipeline.PASSES].index("plan_kernels")
    original = pipeline.PASSES[at]

    def broken_plan_kernels(prog):
        for op in prog.body.ops:
            if op.name == "tanh":
                raise RuntimeError("boom")
        return original(prog)

    broken_plan_kernels.__name__ = "plan_kernels"
    pipeline.PASSES[at] = broken_plan_kernels     # the list run_passes reads (in place)
    try:
        err = _expect_internal(lambda: jdisc.jit(_fn, dynamic_axes=N)(X), "plan_kernels")
    finally:
        pipeline.PASSES[at] = original
    assert err.op == "stablehlo.tanh" and HERE in err.location and err.stage
    assert "stablehlo.tanh" in str(err)


def test_internal_error_in_the_import_names_the_op(monkeypatch):
    monkeypatch.setattr(mlir_import, "dense_value", _boom)
    err = _expect_internal(lambda: jdisc.jit(lambda x: x + np.array([1, 5, 2], np.float32),
                                                    dynamic_axes=None)(X),
                           "MLIR import")
    assert err.op == "stablehlo.constant"


def test_internal_errors_in_later_stages(monkeypatch):
    monkeypatch.setattr(driver, "generate", _boom)
    _expect_internal(lambda: jdisc.jit(_fn, dynamic_axes=N)(X), "C generation")
    monkeypatch.undo()
    monkeypatch.setattr(runtime, "load", _boom)
    _expect_internal(lambda: jdisc.jit(_fn, dynamic_axes=N)(X), "C compiler driver")
    monkeypatch.undo()
    monkeypatch.setattr(driver, "export_function", _boom)
    _expect_internal(lambda: jdisc.jit(_fn, dynamic_axes=N)(X), "export")


def test_internal_error_in_package_export(monkeypatch):
    monkeypatch.setattr(driver, "generate", _boom)
    _expect_internal(lambda: jdisc.export_package(_fn, X, dynamic_axes=N), "C generation")


def test_internal_error_in_compile_stablehlo(monkeypatch):
    monkeypatch.setattr(runtime, "load", _boom)
    _expect_internal(lambda: jdisc.compile_stablehlo(
        "func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
        "  %0 = stablehlo.add %a, %a : tensor<?xf32>\n  return %0 : tensor<?xf32>\n}"),
        "C compiler driver")


def test_internal_error_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(driver, "generate", _boom)
    f = jdisc.jit(_fn, dynamic_axes=N, fallback="xla")
    with pytest.warns(UserWarning, match=r"CompileError.*RuntimeError: boom"):
        got = f(X)
    np.testing.assert_allclose(np.asarray(got), np.asarray(_fn(X)), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(np.asarray(f(np.ones(5, np.float32))),
                                   np.asarray(_fn(np.ones(5, np.float32))), rtol=1e-6)
    assert f.stats()["fallbacks"] == 1


def test_cli_compile_reports_internal_errors_in_one_line(monkeypatch, tmp_path, capsys):
    src = tmp_path / "m.mlir"
    src.write_text(TOKEN_MODULE)
    assert cli.main(["compile", str(src), "-o", str(tmp_path / "m.jdisc")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("jdisc compile: error: jdisc cannot compile") and "\n" not in err
    src.write_text("func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
                   "  return %a : tensor<?xf32>\n}")
    monkeypatch.setattr(driver, "generate", _boom)
    assert cli.main(["compile", str(src), "-o", str(tmp_path / "m.jdisc")]) == 1
    err = capsys.readouterr().err.strip()
    assert "internal compiler error" in err and "RuntimeError: boom" in err and "\n" not in err


# ----------------------------------------------------------------------- user errors

def test_argument_errors_never_fall_back():
    f = jdisc.jit(lambda x, y: x + y, dynamic_axes=({0: "n"}, {0: "n"}), fallback="xla",
                  strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no fallback warning for any of these
        with pytest.raises(ShapeError):        # shared name, unequal sizes: the first call
            f(X, np.ones(4, np.float32))
        np.testing.assert_array_equal(np.asarray(f(X, X)), 2 * X)
        with pytest.raises(DtypeError):
            f(X, np.ones(3, np.int32))
        with pytest.raises(ShapeError):
            f(np.ones((3, 1), np.float32), X)
        with pytest.raises(ArgumentError):
            f(X)
    assert "fallbacks" not in f.stats()


@pytest.mark.parametrize("axes, constraints, good, bad, match", [
    (({0: "n"}, {0: "n"}), (), (3, 3), (3, 1), "axes that share a dimension name"),
    (({0: "n"}, {0: "m"}), ("n >= 4",), (5, 1), (2, 1), "the constraint 'n >= 4': n = 2"),
    (({0: "8*k"}, {0: "k"}), (), (16, 2), (9, 1), "expected 8\\*k, which is 8 with k = 1"),
    (({0: "8*k"}, None), (), (16, 2), (9, 1), "expected 8\\*k for some k >= 0"),
    (({0: "b"}, {0: "b + 1"}), (), (3, 4), (3, 5), "expected b \\+ 1, which is 4"),
])
def test_argument_errors_never_fall_back_at_any_call(axes, constraints, good, bad, match):
    # regression: once a function fell back to jax.jit (an op jdisc cannot compile), its calls
    # ran whatever their sizes: an axis shared by name broadcast from 1 to 3, a constraint or
    # an axis expression went unchecked. They are the arguments' errors, as without the
    # fallback (export/concrete.py refusal), at the first call and every later one.
    def g(x, y):
        return (x.astype(jnp.int4) * 2).astype(jnp.float32).sum() + y.sum()
    for bridge in (False, True):
        f = jdisc.jit(g, dynamic_axes=axes, constraints=constraints, fallback="xla",
                      bridge=bridge)
        args = [np.ones(n, np.float32) for n in bad]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # the fallback's warning
            with pytest.raises(ShapeError, match=match):
                f(*args)
            ok = [np.ones(n, np.float32) for n in good]
            np.testing.assert_allclose(np.asarray(f(*ok)), np.asarray(jax.jit(g)(*ok)))
            with pytest.raises(ShapeError, match=match):
                f(*args)
            np.testing.assert_allclose(np.asarray(f(*ok)), np.asarray(jax.jit(g)(*ok)))
        assert f.stats()["fallbacks"] == 1


def test_user_errors_are_not_wrapped(monkeypatch):
    f = jdisc.jit(lambda x, y: x + y, dynamic_axes=({0: "n"}, {0: "n"}))
    with pytest.raises(ShapeError) as info:
        f(X, np.ones(4, np.float32))
    assert not isinstance(info.value, CompileError)
    assert isinstance(info.value, JdiscError)


def test_a_fallback_checks_each_set_of_shapes_once(monkeypatch):
    # the check parses the dims' expressions (about 30 us, more than the jax.jit call): a
    # shape that passed once is not checked again; a refused one is, every time
    import jdisc.api as api
    seen = []
    real = api.refusal
    monkeypatch.setattr(api, "refusal", lambda *a: seen.append(1) or real(*a))

    def g(x, y):
        return (x.astype(jnp.int4) * 2).astype(jnp.float32).sum() + y.sum()
    f = jdisc.jit(g, dynamic_axes=({0: "n"}, {0: "n"}), fallback="xla", bridge=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            f(np.ones(3, np.float32), np.ones(3, np.float32))
        assert len(seen) == 1
        f(np.ones(5, np.float32), np.ones(5, np.float32))
        assert len(seen) == 2
        for _ in range(2):
            with pytest.raises(ShapeError):
                f(np.ones(5, np.float32), np.ones(4, np.float32))
        assert len(seen) == 4
