"""jnp.fft with a dynamic batch, differential against jax.jit (XLA:CPU runs DUCC's FFT; jdisc
its own, c_runtime/jd_fft.h, in single precision for complex64 / float32 as XLA's, in double
for complex128 / float64).

jax.export fixes every transformed length at trace time, so the lengths here are static and
the batch dims dynamic (0, 1, several). Lengths cover 1, powers of two, small primes (a DFT
pass), large primes (Rader's and Bluestein's algorithms) and composites; large batches run in
pieces on the pool; batches of 9 and 17 cross jdisc's chunks of batch elements transformed
side by side (lowering/fft.py VECTOR). Tolerance: 1e-5 of the output's scale for f32/c64 (both
sides round in f32 in every pass: a few ulps times log n) and 1e-12 for f64/c128; and the
single-precision error against a double-precision reference within a small factor of XLA's.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import differential

F = jnp.fft


def rand(rng, shape, complex_):
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if complex_ else x


def run(rng, fns, shape, complex_, x64, dyn=({0: "b"},), batches=(0, 1, 3)):
    dtype = (np.complex128 if x64 else np.complex64) if complex_ else \
        (np.float64 if x64 else np.float32)
    group = lambda x: {name: fn(x) for name, fn in fns.items()}
    arg_sets = {f"b={b}": (rand(rng, (b,) + shape, complex_).astype(dtype),) for b in batches}
    with jax.enable_x64(x64):
        differential(group, dyn, arg_sets, 1e-12 if x64 else 1e-5,
                     what=f"{'/'.join(fns)} {shape} {np.dtype(dtype).name}")


# every kind of pass: radix 4 and 2 (16, 96), 3 and 5 (30, 45, 96), a DFT pass (7, 17);
# Rader's algorithm for a prime with smooth p - 1 (1009, and 37 as the half length of 74's real
# transform); Bluestein's for a prime factor without (83, and inside 166)
LENGTHS = [1, 2, 7, 16, 17, 30, 45, 74, 83, 96, 166, 1009]


def run_lengths(rng, fns, lengths, complex_, x64):
    """One program for every function at every length (the inputs share the batch dim)."""
    dtype = (np.complex128 if x64 else np.complex64) if complex_ else \
        (np.float64 if x64 else np.float32)
    group = lambda *xs: [{name: fn(x) for name, fn in fns.items()} for x in xs]
    # batches of 0, of 1 (a part of one chunk of 8 transforms side by side: lowering/fft.py)
    # and of 9 (a whole chunk and a remainder)
    arg_sets = {f"b={b}": tuple(rand(rng, (b, n), complex_).astype(dtype) for n in lengths)
                for b in (0, 1, 9)}
    with jax.enable_x64(x64):
        differential(group, ({0: "b"},) * len(lengths), arg_sets, 1e-12 if x64 else 1e-5,
                     what=f"{'/'.join(fns)} {np.dtype(dtype).name}")


@pytest.mark.parametrize("x64", [False, True])
def test_one_axis(rng, x64):
    run_lengths(rng, {"fft": F.fft, "ifft": F.ifft, "fft.ortho": lambda x: F.fft(x, norm="ortho"),
                      "ifft.forward": lambda x: F.ifft(x, norm="forward"),
                      "hfft": lambda x: F.hfft(x, n=2 * x.shape[-1]),
                      "fft.padded": lambda x: F.fft(x, n=x.shape[-1] + 3)},
                LENGTHS, True, x64)
    run_lengths(rng, {"rfft": F.rfft, "ihfft": F.ihfft,
                      "rfft.ortho": lambda x: F.rfft(x, norm="ortho"), "fft.real": F.fft},
                LENGTHS, False, x64)
    # irfft's input has n // 2 + 1 entries for an even or odd output length n
    run_lengths(rng, {"irfft.even": lambda x: F.irfft(x, n=2 * (x.shape[-1] - 1) or 1),
                      "irfft.odd": lambda x: F.irfft(x, n=2 * x.shape[-1] - 1)},
                [n // 2 + 1 for n in LENGTHS], True, x64)


@pytest.mark.parametrize("shape", [(4, 6), (5, 7), (1, 9), (3, 4, 5), (2, 3, 8)])
def test_two_and_three_axes(rng, shape):
    axes = tuple(range(-len(shape), 0))
    run(rng, {"fftn": lambda x: F.fftn(x, axes=axes), "ifftn": lambda x: F.ifftn(x, axes=axes),
              "fft2": lambda x: F.fft2(x), "ifft2": lambda x: F.ifft2(x, norm="ortho")},
        shape, True, False)
    run(rng, {"rfftn": lambda x: F.rfftn(x, axes=axes), "rfft2": lambda x: F.rfft2(x)},
        shape, False, False)
    run(rng, {"irfftn": lambda x: F.irfftn(x, axes=axes), "irfft2": F.irfft2,
              "irfftn.odd": lambda x: F.irfftn(
                  x, s=shape[:-1] + (2 * shape[-1] - 1,), axes=axes)},
        shape, True, False)


def test_batch_in_the_middle_and_helpers(rng):
    # the transformed axis need not be last: jax transposes around the op
    run(rng, {"fft.axis0": lambda x: F.fft(x, axis=1), "shift": lambda x: F.fftshift(x, axes=1),
              "ishift": lambda x: F.ifftshift(F.fft(x, axis=1), axes=1),
              "freq": lambda x: x[..., :1] * F.fftfreq(8)[None, :, None].astype(x.dtype),
              "rfreq": lambda x: F.rfftfreq(8, d=0.5)},
        (8, 3), True, False, dyn=({0: "b", 2: "c"},))


def test_large_batches_split_over_the_pool(rng):
    # from 4096 values per call the batch runs in pieces on the pool, each piece with its own
    # scratch (plans are shared) and whole chunks of batch elements side by side: 8 per chunk,
    # or fewer so that every thread has one (4 on 2 threads: chunks of 2). Odd piece and chunk
    # boundaries, every kind, a Bluestein length, 2-D
    run(rng, {"fft": F.fft, "ifft": F.ifft}, (257,), True, False, batches=(1, 17, 61))
    run(rng, {"rfft": F.rfft, "rfft2": F.rfft2}, (12, 74), False, False, batches=(1, 7, 23))
    run(rng, {"irfft": lambda x: F.irfft(x, n=300), "fft2": F.fft2}, (9, 151), True, False,
        batches=(1, 4, 5, 31))


@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft", "irfft"])
def test_single_precision_is_as_accurate_as_xla(rng, kind):
    # complex64 / float32 transforms compute in float, as XLA's: the error against numpy's
    # double-precision transform of the same input stays within 2.5x XLA's (measured: 0.7x to
    # 1.9x over these lengths) and under 1e-6 of the output's scale. Lengths: radix 4 (4096),
    # mixed 2/5 (1000), Rader (1009), Bluestein (83, 1019, and 166 inside a real transform).
    import jdisc
    fn = getattr(F, kind)
    lengths = (64, 83, 166, 1000, 1009, 1019, 4096)
    dtype = np.float32 if kind == "rfft" else np.complex64
    xs = [rand(rng, (9, n), kind != "rfft").astype(dtype) for n in lengths]
    many = lambda *xs: [fn(x) for x in xs]
    got = jdisc.jit(many, dynamic_axes=({0: "b"},) * len(xs))(*xs)
    want = jax.jit(many)(*xs)
    for n, x, g, w in zip(lengths, xs, got, want):
        ref = getattr(np.fft, kind)(x.astype(np.float64 if kind == "rfft" else np.complex128))
        assert np.asarray(g).dtype == np.asarray(w).dtype
        err = lambda y: float(np.max(np.abs(np.asarray(y) - ref)) / np.max(np.abs(ref)))
        e_jdisc, e_xla = err(g), err(w)
        assert e_jdisc <= max(2.5 * e_xla, 1e-7) and e_jdisc < 1e-6, (kind, n, e_jdisc, e_xla)
