"""What every example prints: jdisc.jit against jax.jit over a stream of shapes, in one line.

`compare(name, fn, dynamic_axes, stream, tol)` runs `fn` on each argument tuple of `stream`
with `jdisc.jit` (one compile for every shape) and with `jax.jit` (a compile per new shape),
each from cold, and prints the largest difference between them (relative to the result's
scale; jdisc's results from a second pass, after its compile, so that the first call's are
its own program's and not the bridge's `jax.jit`), the compile counts and the wall time of
the whole stream. It exits with status 1 when
the difference is over `tol` or jdisc compiled more than once, so that CI notices.
"""

from __future__ import annotations

import sys
import time

import jax
import numpy as np

import jdisc


def _run_loop(fn, loop):
    t0 = time.perf_counter()
    outs = jax.block_until_ready(loop(fn))
    return outs, time.perf_counter() - t0


def max_difference(got, want) -> float:
    """max |got - want| / max(1, max |want|) over the leaves of two results."""
    worst = 0.0
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return float("inf")
        if g.size:
            worst = max(worst, float(np.max(np.abs(g - w))) / max(1.0, float(np.max(np.abs(w)))))
    return worst


def compare(name: str, fn, dynamic_axes, stream: list[tuple], tol: float) -> None:
    compare_loop(name, fn, dynamic_axes, lambda f: [f(*args) for args in stream], tol,
                 what=f"{len(stream)} shapes")


def compare_loop(name: str, fn, dynamic_axes, loop, tol: float, what: str) -> None:
    """`loop(f)` runs the whole job with `f` (jdisc's or jax.jit's `fn`) and returns its
    results, one per call; as `compare` otherwise."""
    jf, xf = jdisc.jit(fn, dynamic_axes=dynamic_axes), jax.jit(fn)
    _, t_jdisc = _run_loop(jf, loop)
    want, t_xla = _run_loop(xf, loop)
    # the timed pass is as users get it: its first call runs with jax.jit while jdisc compiles
    # (the bridge); the results compared come from a second pass, every call jdisc's program
    got = jax.block_until_ready(loop(jf))
    err = max(max_difference(g, w) for g, w in zip(got, want))
    compiles = jf.stats()["compiles"]
    xla_compiles = xf._cache_size() if hasattr(xf, "_cache_size") else "?"
    print(f"{name}: {what}, max difference {err:.1e} (tolerance {tol:g}); "
          f"compiles jdisc {compiles}, jax.jit {xla_compiles}; "
          f"stream jdisc {t_jdisc:.2f} s, jax.jit {t_xla:.2f} s")
    if not err <= tol or compiles != 1:
        sys.exit(1)


def sizes(small: bool, few: list[int], many: list[int]) -> list[int]:
    """The sizes a run visits: `few` for CI (--small), `many` otherwise."""
    return few if small else many
