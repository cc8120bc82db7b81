"""export/concrete.py: whether concrete sizes meet dimension expressions and constraints (what
the bridge asks before it serves a call with jax.jit instead of the program's own check)."""

import numpy as np
import pytest

from jdisc.export.concrete import refusal, sizes_meet
from jdisc.export.specs import LeafSpec


def _leaves(*arrays):
    """LeafSpecs from (shape, {axis: dim}) pairs."""
    return [LeafSpec(f"a{i}", np.dtype(np.float32), shape, axes)
            for i, (shape, axes) in enumerate(arrays)]


@pytest.mark.parametrize("arrays, constraints, want", [
    ((((3, 4), {0: "b"}),), (), True),
    ((((0,), {0: "n"}),), (), True),                           # empty arrays are sizes too
    ((((3,), {0: "n"}), ((4,), {0: "n"})), (), False),         # a name is one size
    ((((3,), {0: "b"}), ((4,), {0: "b + 1"})), (), True),
    ((((3,), {0: "b"}), ((5,), {0: "b + 1"})), (), False),
    ((((16,), {0: "8*k"}),), (), True),
    ((((12,), {0: "8*k"}),), (), False),
    ((((0,), {0: "8*k"}),), (), True),
    ((((7,), {0: "2*h + 1"}),), ("h <= 3",), True),
    ((((9,), {0: "2*h + 1"}),), ("h <= 3",), False),
    ((((1,), {0: "k + 2"}),), (), False),                      # k would be -1
    ((((5,), {0: "n"}),), ("n >= 4", "n <= 5"), True),
    ((((6,), {0: "n"}),), ("n >= 4", "n <= 5"), False),
    ((((24,), {0: "n"}),), ("n % 8 == 0",), True),
    ((((20,), {0: "n"}),), ("mod(n, 8) == 0",), False),
    ((((6,), {0: "n"}), ((2,), {0: "m"})), ("floordiv(n, 3) == m",), True),
    ((((6,), {0: "n"}), ((2,), {0: "m"})), ("max(n, m) == 6", "min(n, m) >= 2"), True),
    ((((6,), {0: "n"}),), ("non_negative(n - 7) == 0",), True),
    ((((6,), {0: "n"}),), ("mod(n, 0) == 0",), False),         # not evaluated: not served
    ((((6,), {0: "n"}),), ("n > 4",), False),                  # not jax's syntax
    ((((6,), {0: "n"}),), ("__import__('os') == 0",), False),
    ((((6,), {0: "max(n, 2)"}),), (), False),                  # nothing to solve n from
    ((((4,), {0: "n*n"}),), (), False),                        # not linear in n
])
def test_sizes_meet(arrays, constraints, want):
    assert sizes_meet(_leaves(*arrays), constraints) is want


@pytest.mark.parametrize("axes, constraints", [
    (({0: "n"}, {0: "n"}), ()),
    (({0: "b"}, {0: "b + 1"}), ()),
    (({0: "8*k"}, {0: "k"}), ()),
    (({0: "2*h + 1"}, {0: "h"}), ("h <= 5",)),
    (({0: "n"}, {0: "m"}), ("n >= 3", "n % 4 == 0")),
    (({0: "n"}, {0: "m"}), ("m <= n", "max(n, m) <= 9")),
])
def test_the_answer_is_the_programs(axes, constraints, tmp_path, monkeypatch):
    # differential: at every size pair, the compiled program accepts the call exactly when
    # sizes_meet says the sizes meet the dims and constraints (never more: the bridge would
    # serve a call the program refuses; and, for these expressions, never less)
    import jdisc
    from jdisc.export.specs import leaf_specs
    monkeypatch.setenv("JDISC_CACHE_DIR", str(tmp_path))
    f = jdisc.jit(lambda x, y: x.sum() + y.sum(), dynamic_axes=axes, constraints=constraints,
                  bridge=False)
    for n0 in range(0, 18):
        for n1 in range(0, 10):
            args = (np.ones(n0, np.float32), np.ones(n1, np.float32))
            leaves, _ = leaf_specs(args, axes, ["x", "y"])
            try:
                f(*args)
                accepted = True
            except jdisc.ShapeError:
                accepted = False
            assert sizes_meet(leaves, constraints) is accepted, (n0, n1)
            assert (refusal(leaves, constraints) is None) is accepted, (n0, n1)


@pytest.mark.parametrize("arrays, constraints, want", [
    ((((3,), {0: "n"}), ((4,), {0: "n"})), (),
     "argument 'a1' axis 0 ('n') is 4 but argument 'a0' axis 0 ('n') is 3"),
    ((((12,), {0: "8*k"}),), (), "argument 'a0' axis 0 is 12; expected 8*k for some k >= 0"),
    ((((1,), {0: "k + 2"}),), (), "expected k + 2 for some k >= 0"),
    ((((3,), {0: "b"}), ((5,), {0: "b + 1"})), (),
     "argument 'a1' axis 0 is 5; expected b + 1, which is 4 with b = 3"),
    ((((2,), {0: "n"}),), ("n >= 4",),
     "the sizes break the constraint 'n >= 4': n = 2 (argument 'a0' axis 0)"),
    ((((20,), {0: "n"}),), ("n % 8 == 0",), "the sizes break the constraint 'n % 8 == 0'"),
    ((((5,), {0: "n"}),), ("n >= 4",), None),                 # met
    ((((4,), {0: "n*n"}),), (), None),                        # n = 2 would do: not known
    ((((7,), {0: "max(k, 2)"}),), (), None),                  # not known
    ((((6,), {0: "n"}),), ("mod(n, 0) == 0",), None),         # not known
])
def test_refusal_says_what_is_certainly_broken(arrays, constraints, want):
    got = refusal(_leaves(*arrays), constraints)
    assert (got is None) if want is None else (got is not None and want in got), got
