"""Bad input raises a jdisc error naming the argument, axis, expected and actual values."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc.errors import (ArgumentError, DtypeError, JdiscError, ShapeError,
                          UnsupportedOpError)


def _layer(x, mask):
    return (x * mask[..., None]).sum(axis=1)


@pytest.fixture(scope="module")
def fn():
    # strict: a new dtype or rank is an error here, not another program (test_jit_like.py)
    f = jdisc.jit(_layer, dynamic_axes=({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}),
                  strict=True)
    f(np.ones((2, 3, 4), np.float32), np.ones((2, 3), np.float32))
    return f


def test_wrong_argument_count(fn):
    with pytest.raises(ArgumentError, match="argument"):
        fn(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ArgumentError):
        fn(np.ones((2, 3, 4), np.float32), np.ones((2, 3), np.float32), 1)


def test_wrong_rank(fn):
    with pytest.raises(ShapeError, match=r"argument 'x' has rank 2 .* rank 3"):
        fn(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))


def test_wrong_dtype(fn):
    with pytest.raises(DtypeError, match=r"argument 'mask' has dtype int32 .* float32"):
        fn(np.ones((2, 3, 4), np.float32), np.ones((2, 3), np.int32))


def test_static_dim_differs(fn):
    with pytest.raises(ShapeError, match=r"argument 'x' axis 2 is 5; expected 4"):
        fn(np.ones((2, 3, 5), np.float32), np.ones((2, 3), np.float32))


def test_shared_name_mismatch(fn):
    msg = (r"argument 'mask' axis 1 \('seq'\) is 9 but argument 'x' axis 1 \('seq'\) is 7; "
           r"axes that share a dimension name must be equal")
    with pytest.raises(ShapeError, match=msg):
        fn(np.ones((2, 7, 4), np.float32), np.ones((2, 9), np.float32))


def test_shared_name_mismatch_on_first_call():
    f = jdisc.jit(_layer, dynamic_axes=({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}))
    with pytest.raises(ShapeError, match=r"'seq'\) is 9 .*'seq'\) is 7"):
        f(np.ones((2, 7, 4), np.float32), np.ones((2, 9), np.float32))


def test_violated_constraint():
    f = jdisc.jit(lambda x: x * 2, dynamic_axes=({0: "seq"},), constraints=("seq % 8 == 0",))
    np.testing.assert_array_equal(np.asarray(f(np.ones(16, np.float32))), 2)
    with pytest.raises(ShapeError, match=r"seq.*8"):
        f(np.ones(12, np.float32))
    f2 = jdisc.jit(lambda x: x + 1, dynamic_axes=({0: "V"},), constraints=("V >= 5",))
    f2(np.ones(5, np.float32))
    with pytest.raises(ShapeError, match=r"V"):
        f2(np.ones(4, np.float32))


def test_a_broken_constraint_is_reported_before_the_op_checks_that_rely_on_it():
    # the slice of 8 needs n >= 8 too; the constraint is the user's words for it
    f = jdisc.jit(lambda x: x[:8] * 2, dynamic_axes=({0: "n"},), constraints=("n >= 8",))
    np.testing.assert_array_equal(np.asarray(f(np.ones(9, np.float32))), 2)
    with pytest.raises(ShapeError, match=r"constraint n >= 8.*'n' is argument 'x' axis 0, of "
                                         r"size 5") as info:
        f(np.ones(5, np.float32))
    assert "gather" not in str(info.value)


def test_unsupported_ops_are_all_listed():
    def f(x):
        y = x.astype(jnp.int4).astype(jnp.float32)          # element types jdisc lacks
        z = x.astype(jnp.float8_e5m2).astype(jnp.float32)
        return x + y + z

    with pytest.raises(UnsupportedOpError) as info:
        jdisc.jit(f, dynamic_axes=({0: "N"},))(np.ones(4, np.float32))
    msg = str(info.value)
    assert "i4" in msg and "f8E5M2" in msg, msg
    assert re.search(r"test_bad_input\.py:\d+", msg), msg   # source location of each op


def test_bad_dynamic_axes_specs():
    with pytest.raises(ShapeError, match="axis 3.*rank 2"):
        jdisc.jit(lambda x: x, dynamic_axes=({3: "N"},))(np.ones((2, 2), np.float32))
    with pytest.raises(ArgumentError, match="dynamic_axes has 2 entries"):
        jdisc.jit(lambda x: x, dynamic_axes=({0: "N"}, None))(np.ones(2, np.float32))
    with pytest.raises(ArgumentError, match="unknown parameter"):
        jdisc.jit(lambda x: x, dynamic_axes={"y": {0: "N"}})(np.ones(2, np.float32))
    with pytest.raises(ArgumentError, match="cannot read the dimension expression 'not a name'"):
        jdisc.jit(lambda x: x, dynamic_axes=({0: "not a name"},))(np.ones(2, np.float32))


def test_non_array_argument_needs_static():
    with pytest.raises(ArgumentError, match="static_argnums"):
        jdisc.jit(lambda x, s: x, dynamic_axes=({0: "N"}, None))(np.ones(2, np.float32), "s")


def test_all_errors_are_jdisc_errors(fn):
    for call in (lambda: fn(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)),
                 lambda: fn(np.ones((2, 3, 5), np.float32), np.ones((2, 3), np.float32))):
        with pytest.raises(JdiscError):
            call()


def test_size_zero_and_one_work(fn):
    for b, s in ((0, 3), (2, 0), (1, 1), (0, 0)):
        x = np.ones((b, s, 4), np.float32)
        m = np.ones((b, s), np.float32)
        np.testing.assert_array_equal(np.asarray(fn(x, m)), _layer(x, m))


def test_sizes_that_would_overflow_are_refused_before_any_allocation():
    # an outer product of two huge vectors: B*S*4 bytes overflows int64 arithmetic
    f = jdisc.jit(lambda x, y: x[:, None] * y[None, :], dynamic_axes=({0: "B"}, {0: "S"}))
    f(np.ones(2, np.float32), np.ones(3, np.float32))
    exe = f.compiled_for(np.ones(2, np.float32), np.ones(3, np.float32)).executable
    with pytest.raises(ShapeError, match="too large"):
        exe.prepare([(2**40,), (2**40,)])   # shapes only: nothing is allocated
    dims, out_shapes = exe.prepare([(5,), (7,)])
    assert out_shapes == [(5, 7)]


def test_fallback_to_xla_warns_once_and_runs():
    def f(x):   # an i4 round trip (of zeros): an element type jdisc does not compile
        return jnp.cumsum(x) * 2 + (x[:2] * 0).astype(jnp.int4).astype(jnp.float32).sum()
    jf = jdisc.jit(f, dynamic_axes=({0: "N"},), fallback="xla")
    x = np.array([3, 1, 2], np.float32)
    with pytest.warns(UserWarning, match="i4"):
        np.testing.assert_array_equal(np.asarray(jf(x)), [6, 8, 12])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no second warning
        np.testing.assert_array_equal(np.asarray(jf(np.ones(5, np.float32))), [2, 4, 6, 8, 10])
    assert jf.stats()["fallbacks"] == 1
    with pytest.raises(jdisc.ArgumentError, match="fallback"):
        jdisc.jit(f, fallback="numpy")


# ---------------------------------------------------------------------------- shape-rule checks
# Each program of shape_rule_programs.SHAPE_RULE_PROGRAMS, called with dims that agree (the right
# answer) and with dims that disagree (a ShapeError naming what disagrees, before any kernel
# reads out of bounds).

def _f32(*shape):
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def _i32(rows):
    return np.array(rows, np.int32)


def _gather_pairs(x, starts):
    return x[starts[:, 0], starts[:, 1]].reshape(-1, 1, 1)


def _gather_batched(x, starts):
    return x[np.arange(len(x)), starts[:, 0]]


def _conv_batch_groups(x, k):
    return jax.lax.conv_general_dilated(x, k, (1, 1), "VALID", batch_group_count=4,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _ones(*shapes):
    return tuple(np.ones(s, np.float32) for s in shapes)


_EVENS = np.arange(6) % 2 == 0

# name -> (op, agreeing args, reference, [(disagreeing args, words in the error), ...])
_SHAPE_RULE_CASES = {
    "clamp_bounds": (
        "stablehlo.clamp", (np.ones(6, np.float32), _f32(6), np.full(6, 4, np.float32)),
        lambda lo, x, hi: np.clip(x, lo, hi),
        [((np.zeros(1, np.float32), _f32(6), np.full(6, 4, np.float32)),
          ("min against the operand", "d0_0 = 1", "d1_0 = 6")),
         ((np.zeros(6, np.float32), _f32(6), np.full(7, 4, np.float32)),
          ("max against the operand", "d2_0 = 7", "d1_0 = 6"))]),
    "select_predicate": (
        "stablehlo.select", (_EVENS, _f32(6), -_f32(6)), np.where,
        [((np.ones(1, bool), _f32(6), -_f32(6)),
          ("the predicate against on_true", "d0_0 = 1", "d1_0 = 6")),
         ((np.ones(6, bool), _f32(6), -_f32(5)),
          ("on_true against on_false", "d1_0 = 6", "d2_0 = 5"))]),
    "reshape_to_static": (
        "stablehlo.reshape", (_f32(6),), lambda x: x.reshape(2, 3),
        [((_f32(2),), ("element counts", "d0_0 == 6", "d0_0 = 2")),
         ((_f32(7),), ("element counts", "d0_0 == 6", "d0_0 = 7"))]),
    "gather_index_vector": (
        "stablehlo.gather", (_f32(4, 4), _i32([[1, 2], [3, 0], [0, 3]])), _gather_pairs,
        [((_f32(4, 4), _i32([[1], [2]])),
          ("the index vector", "start_index_map", "d1_1 == 2", "d1_1 = 1"))]),
    "gather_batching_dims": (
        "stablehlo.gather", (_f32(2, 4, 3), _i32([[3], [1]])), _gather_batched,
        [((_f32(2, 4, 3), _i32([[3], [1], [2]])),
          ("operand batching axis 0 against start_indices batching axis 0", "d0_0 = 2",
           "d1_0 = 3"))]),
    "conv_batch_groups": (
        "stablehlo.convolution", (_f32(8, 3, 3, 2) / 100, _f32(2, 2, 2, 8) / 100),
        _conv_batch_groups,
        [(_ones((4, 2, 2, 1), (1, 1, 1, 6)),
          ("kernel's output features", "4 batch groups", "d1_3 % 4 == 0", "d1_3 = 6")),
         (_ones((6, 2, 2, 1), (1, 1, 1, 8)),
          ("input batch", "4 batch groups", "d0_0 % 4 == 0", "d0_0 = 6"))]),
}


@pytest.mark.parametrize("name", sorted(_SHAPE_RULE_CASES))
def test_shape_rule_checks_reject_disagreeing_dims(name):
    from shape_rule_programs import SHAPE_RULE_PROGRAMS
    op, good, reference, bad = _SHAPE_RULE_CASES[name]
    f = jdisc.compile_stablehlo(SHAPE_RULE_PROGRAMS[name])
    for args, words in bad:
        with pytest.raises(ShapeError) as info:
            f(*args)
        for w in (op,) + words:
            assert w in str(info.value), str(info.value)
    (got,) = f(*good)
    np.testing.assert_allclose(np.asarray(got), np.asarray(reference(*good)), rtol=1e-5)


def test_a_check_that_fails_at_size_0_says_what_jax_export_assumed():
    # x[:, :1] of a dynamic axis: jax.export simplifies min(1, n) to 1 (it assumes n >= 1)
    f = jdisc.jit(lambda x: x[:, :1] * 2, dynamic_axes=({0: "b", 1: "n"},))
    np.testing.assert_array_equal(np.asarray(f(np.ones((2, 3), np.float32))), 2)
    with pytest.raises(ShapeError, match=r"stablehlo.dynamic_gather .*n = 0.* jax.export assumes "
                                         r"every symbolic dimension is >= 1.*'n' \(argument 'x' "
                                         r"axis 1\) is 0.*\{1: 'n1 - 1'\}"):
        f(np.ones((2, 0), np.float32))
    np.testing.assert_array_equal(np.asarray(f(np.ones((0, 3), np.float32))).shape, (0, 1))
    # the advice works: an axis written as an expression that may be 0, one compile for all
    g = jdisc.jit(lambda x: x[:, :1] * 2, dynamic_axes=({0: "b", 1: "n1 - 1"},))
    for n in (0, 1, 3):
        x = np.ones((2, n), np.float32)
        assert np.asarray(g(x)).shape == jax.jit(lambda x: x[:, :1] * 2)(x).shape
    assert g.stats()["compiles"] == 1


def test_a_loop_bodys_check_that_fails_at_size_0_is_a_shape_error_too():
    # found by the fuzzer (slow tier, batch seed 15337814): the same check inside a loop body
    # runs when the body does, and its failure was a bare RuntimeCheckError, without the note
    def f(x, c):
        b = x.shape[1]
        body = lambda i, c: jnp.clip(-c, 0, 40) + (c[:, :1] * 0).sum() + b
        return jax.lax.fori_loop(0, 1, body, c)
    f_jd = jdisc.jit(f, dynamic_axes=({1: "n"}, {1: "n"}))
    x, c = np.ones((2, 3), np.float32), np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(f_jd(x, c)), np.asarray(jax.jit(f)(x, c)))
    with pytest.raises(ShapeError, match=r"stablehlo\.(dynamic_)?gather .*n = 0.* jax.export "
                                         r"assumes every symbolic dimension is >= 1.*'n' "
                                         r"\(argument"):
        f_jd(np.ones((2, 0), np.float32), np.ones((2, 0), np.int32))
