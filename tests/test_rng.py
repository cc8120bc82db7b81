"""stablehlo.rng_bit_generator against XLA:CPU, bit for bit: the random bits and the new state,
for every algorithm, element width and rank, compiled once for a dynamic size and run at many
(0, 1, odd, even, primes, a million). Element types jax cannot request (signed, float) and the
u64[3] Philox state are checked against XLA compiling the same StableHLO text."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import xla_bridge
from jax._src.lib import xla_client

import jdisc
from conftest import check_against_jax, to_ir

A = jax.lax.RandomAlgorithm
ALGORITHMS = [A.RNG_DEFAULT, A.RNG_PHILOX, A.RNG_THREE_FRY]
# the counter's low word is about to wrap: Philox's 128-bit carry is exercised
KEY64 = np.array([0x123456789ABCDEF0, 0xFFFFFFFFFFFFFFFE], np.uint64)
KEY32 = np.array([7, 0xFFFFFFFF, 0xFFFFFFFD, 3], np.uint32)   # jax's u32[4] key form


def check(fn, dynamic_axes, args_for, sizes, tol=0.0):
    """jdisc (compiled once) against jax.jit at every size; exact unless tol is given."""
    return check_against_jax(fn, dynamic_axes, args_for, sizes, tol)[0]


def xla_run(module: str, *args) -> list[np.ndarray]:
    """XLA:CPU compiling and running StableHLO text directly (the oracle for what jax's API
    cannot express)."""
    backend = xla_bridge.get_backend("cpu")
    exe = backend.compile_and_load(module, xla_client.DeviceList(tuple(backend.devices()[:1])),
                                   xla_client.CompileOptions())
    return [np.asarray(o) for o in exe.execute([jax.device_put(a) for a in args])]


def bits_of(a: np.ndarray) -> np.ndarray:
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# (element type, shapes) per algorithm. ThreeFry's <= 32-bit results pair elements along the
# first even axis (else the first largest), which changes with the dynamic size at run time;
# Philox's layout is flat, so fewer shapes cover it. XLA compiles slowly: each op costs.
DYNAMIC_CASES = {
    A.RNG_THREE_FRY: [(np.uint8, "n52"), (np.uint16, "5n3"), (np.uint32, "3n"),
                      (np.uint32, "n17"), (np.uint64, "n5")],
    A.RNG_PHILOX: [(np.uint8, "5n"), (np.uint32, "n3"), (np.uint64, "3n")],
    A.RNG_DEFAULT: [(np.uint32, "n")],
}


def _shape(code: str, n) -> tuple:
    return tuple(n if c == "n" else int(c) for c in code)


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=str)
def test_rng_bit_generator_bit_exact_for_dynamic_shapes(algorithm):
    def fn(key32, key64, x):
        outs = []
        for dtype, code in DYNAMIC_CASES[algorithm]:
            key = key64 if dtype == np.uint64 else key32
            outs += jax.lax.rng_bit_generator(key, _shape(code, x.shape[0]), dtype,
                                              algorithm=algorithm)
        return outs
    with jax.enable_x64(True):
        check(fn, (None, None, {0: "n"}), lambda n: (KEY32, KEY64, np.zeros(n, np.float32)),
              [0, 1, 2, 7, 13])


def test_rng_bit_generator_a_million_elements():
    def fn(key, x):
        return (jax.lax.rng_bit_generator(key, x.shape, jnp.uint32, algorithm=A.RNG_THREE_FRY)
                + jax.lax.rng_bit_generator(key, (x.shape[0], 2), jnp.uint8,
                                            algorithm=A.RNG_PHILOX))
    check(fn, (None, {0: "n"}), lambda n: (KEY32, np.zeros(n, np.int8)), [1000003])


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_jax_random_with_rbg_keys_and_a_dynamic_dim(impl):
    def fn(key_data, x):
        key = jax.random.wrap_key_data(key_data, impl=impl)
        return jax.random.uniform(key, x.shape) + x, jax.random.bits(key, x.shape, jnp.uint8)
    key_data = jax.random.key_data(jax.random.key(42, impl=impl))
    check(fn, (None, {0: "B"}), lambda n: (key_data, np.zeros((n, 3), np.float32)), [1, 7, 64])

    def normal(x):   # a key made inside the function: a constant state
        return jax.random.normal(jax.random.key(0, impl=impl), x.shape)
    # jax's erf_inv in f32: jdisc's log/sqrt differ from XLA's by an ulp or two
    check(normal, ({0: "B"},), lambda n: (np.zeros(n, np.float32),), [1, 5, 100], tol=1e-6)


def test_unsafe_rbg_split():
    def fn(key_data, x):
        key = jax.random.wrap_key_data(key_data, impl="unsafe_rbg")
        keys = jax.random.split(key, 3)
        return jax.random.key_data(keys), jax.random.uniform(keys[1], x.shape)
    key_data = jax.random.key_data(jax.random.key(7, impl="unsafe_rbg"))
    check(fn, (None, {0: "n"}), lambda n: (key_data, np.zeros(n, np.float32)), [1, 33])


# every element type at one shape; a few at the edge shapes (scalar, empty, odd)
_TYPED = ([("3x5x", t) for t in ("i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64", "ui8",
                                 "ui64")]
          + [(s, t) for s in ("", "2x0x", "7x") for t in ("i16", "f32", "f64")])


def _module(algorithm: str, state: int) -> str:
    """One rng_bit_generator per (shape, element type) of _TYPED, each from the same state."""
    st = f"tensor<{state}xui64>"
    types = [f"tensor<{shape}{t}>" for shape, t in _TYPED]
    result_types = ", ".join([st] * len(types) + types)
    lines = [f"func.func @main(%s: {st}) -> ({result_types}) {{"]
    for i, t in enumerate(types):
        lines.append(f"  %k{i}, %b{i} = stablehlo.rng_bit_generator %s, algorithm = {algorithm}"
                     f" : ({st}) -> ({st}, {t})")
    results = [f"%k{i}" for i in range(len(types))] + [f"%b{i}" for i in range(len(types))]
    lines.append(f"  return {', '.join(results)} : {result_types}")
    return "\n".join(lines + ["}"])


@pytest.mark.parametrize("algorithm,state", [("THREE_FRY", 2), ("PHILOX", 3), ("DEFAULT", 2)])
def test_rng_bit_generator_any_element_type_from_stablehlo(algorithm, state):
    text = _module(algorithm, state)
    key = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF][:state],
                   np.uint64)
    with jax.enable_x64(True):
        want = xla_run(text, key)
        got = jdisc.compile_stablehlo(text)(key)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype.itemsize == w.dtype.itemsize, k
        np.testing.assert_array_equal(bits_of(g), bits_of(w), err_msg=f"result {k}")


@pytest.mark.parametrize("algorithm,state", [("THREE_FRY", 3), ("PHILOX", 4)])
def test_rng_state_sizes_xla_refuses_are_reported(algorithm, state):
    text = (f"func.func @main(%s: tensor<{state}xui64>) -> (tensor<{state}xui64>, tensor<4xui32>)"
            f" {{\n  %k, %b = stablehlo.rng_bit_generator %s, algorithm = {algorithm} : "
            f"(tensor<{state}xui64>) -> (tensor<{state}xui64>, tensor<4xui32>)\n"
            f"  return %k, %b : tensor<{state}xui64>, tensor<4xui32>\n}}")
    with pytest.raises(jdisc.UnsupportedOpError, match=f"{algorithm} state must be u64"):
        jdisc.compile_stablehlo(text)


def test_rng_is_one_kernel_of_its_own():
    fn = lambda key, x: jax.lax.rng_bit_generator(key, x.shape, jnp.uint32)[1] >> 9
    prog = to_ir(fn, (None, {0: "n"}), KEY32, np.zeros(5, np.float32))
    kinds = [k.kind for k in prog.kernels]
    assert "rng" in kinds and kinds[-1] == "loop"    # the shift reads the bits from memory
