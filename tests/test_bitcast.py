"""stablehlo.bitcast_convert between bit widths (jax.lax.bitcast_convert_type): a trailing axis
added or removed, the bytes unchanged. Against jax.jit byte for byte, with a dynamic dim,
compiled once; i1 (one bit per element, the StableHLO rule jax has no API for) against numpy."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jdisc
from conftest import to_ir

BF16 = ml_dtypes.bfloat16
# (from, to, the operand's trailing dims beyond the dynamic one)
PAIRS = [(np.float32, np.uint8, ()), (np.uint8, np.float32, (4,)), (np.int64, np.int32, ()),
         (np.int32, np.int64, (2,)), (np.float16, np.float32, (2,)), (np.float32, np.float16, ()),
         (np.float64, np.uint8, ()), (np.uint8, np.float64, (8,)), (BF16, np.int8, ()),
         (np.uint16, np.float64, (4,)), (np.int8, np.int16, (2,)), (np.float64, BF16, ())]


def random_bits(rng, dtype, shape):
    """Any bit pattern (NaN payloads, subnormals, infinities included)."""
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return rng.integers(0, 256, size, dtype=np.uint8).view(dtype).reshape(shape)


def same_bytes(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=what)


@pytest.mark.parametrize("src,dst,tail", PAIRS,
                         ids=[f"{np.dtype(a).name}-{np.dtype(b).name}" for a, b, _ in PAIRS])
def test_bitcast_between_widths_with_a_dynamic_dim(src, dst, tail, rng):
    def fn(x):
        # alone (an alias of x's buffer), after an index op (a byte-copy kernel), and read by
        # an index op (from memory)
        y = jax.lax.bitcast_convert_type(x, dst)
        return y, jax.lax.bitcast_convert_type(jnp.flip(x, 0), dst), jnp.flip(y, 0)
    with jax.enable_x64(True):
        jf = jdisc.jit(fn, dynamic_axes=({0: "n"},))
        for n in (0, 1, 3, 17):
            x = random_bits(rng, src, (n, 3) + tail)
            for k, (g, w) in enumerate(zip(jf(x), jax.jit(fn)(x))):
                same_bytes(g, w, f"output {k}, n={n}")
        assert jf.stats()["compiles"] == 1


def test_bitcast_of_computed_and_constant_values():
    def fn(x):
        n = x.shape[0]
        return (jax.lax.bitcast_convert_type(x * 2 + 1, jnp.uint8),                 # fused
                jax.lax.bitcast_convert_type(jnp.full((n, 2), 1.5, jnp.float32), jnp.uint16),
                jax.lax.bitcast_convert_type(jnp.arange(n, dtype=jnp.int32), jnp.int8),
                jax.lax.bitcast_convert_type(
                    jax.lax.bitcast_convert_type(x, jnp.uint8).reshape(n, 2, 2), jnp.uint16))
    jf = jdisc.jit(fn, dynamic_axes=({0: "n"},))
    for n in (1, 4, 9):
        x = np.linspace(-3, 3, n).astype(np.float32)
        for k, (g, w) in enumerate(zip(jf(x), jax.jit(fn)(x))):
            same_bytes(g, w, f"output {k}, n={n}")
    assert jf.stats()["compiles"] == 1


def test_bitcast_of_a_buffer_is_an_alias():
    fn = lambda x: jax.lax.bitcast_convert_type(x, jnp.uint8) + 1
    prog = to_ir(fn, ({0: "n"},), np.zeros(3, np.float32))
    assert [k.kind for k in prog.kernels] == ["alias", "loop"]   # the add reads x's bytes
    fn = lambda x: jax.lax.bitcast_convert_type(jnp.exp(x), jnp.uint8)
    prog = to_ir(fn, ({0: "n"},), np.zeros(3, np.float32))
    assert [k.kind for k in prog.kernels] == ["bitcast"] and len(prog.kernels[0].ops) == 2


def _i1_module(dims: str, n_bits: int, to_bits: bool, t: str) -> str:
    a, b = (f"tensor<{dims}{t}>", f"tensor<{dims}{n_bits}xi1>")
    src, dst = (a, b) if to_bits else (b, a)
    return (f"func.func @main(%x: {src}) -> {dst} {{\n"
            f"  %y = stablehlo.bitcast_convert %x : ({src}) -> {dst}\n"
            f"  return %y : {dst}\n}}")


@pytest.mark.parametrize("t,np_t,n_bits", [("i8", np.int8, 8), ("ui16", np.uint16, 16),
                                           ("f32", np.float32, 32), ("i64", np.int64, 64)])
def test_bitcast_to_and_from_i1_packs_one_bit_per_element(t, np_t, n_bits, rng):
    x = random_bits(rng, np_t, (5,))
    bits = np.unpackbits(x.view(np.uint8), bitorder="little").reshape(5, n_bits).astype(bool)
    to_bits = jdisc.compile_stablehlo(_i1_module("?x", n_bits, True, t))
    from_bits = jdisc.compile_stablehlo(_i1_module("?x", n_bits, False, t))
    for n in (0, 1, 5):
        (got,) = to_bits(x[:n])
        np.testing.assert_array_equal(np.asarray(got), bits[:n])
        (back,) = from_bits(bits[:n])
        same_bytes(back, x[:n], f"n={n}")


def test_bitcast_with_a_wrong_dynamic_last_axis_is_refused_at_run_time():
    text = ("func.func @main(%x: tensor<?x?xui8>) -> tensor<?xf32> {\n"
            "  %y = stablehlo.bitcast_convert %x : (tensor<?x?xui8>) -> tensor<?xf32>\n"
            "  return %y : tensor<?xf32>\n}")
    f = jdisc.compile_stablehlo(text)
    x = np.arange(8, dtype=np.uint8).reshape(2, 4)
    same_bytes(f(x)[0], x.view(np.float32).reshape(2), "2x4")
    with pytest.raises(jdisc.ShapeError, match="last axis must have 4 elements"):
        f(np.zeros((2, 3), np.uint8))
