"""Fast tier: the IR pipeline and C generation, without running a C compiler."""

import jax.numpy as jnp
import numpy as np
import pytest

from jdisc.bench import workloads as W
from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.program import walk
from jdisc.errors import UnsupportedOpError
from jdisc.lowering.codegen import generate
from conftest import to_ir

pytestmark = pytest.mark.fast   # compiles no jdisc program: IR, plans and algebra only

B, S, T = symbolic.var("B"), symbolic.var("S"), symbolic.var("T")


def test_bert_output_shape_and_no_dynamic_ops_left():
    wl = W.workloads()["W1"]
    prog = to_ir(wl.fn, wl.dynamic_axes, *wl.make_args(2, 3, np.random.default_rng(0)))
    assert prog.outputs[0].shape == (B, S, 768)
    names = {op.name for op in walk(prog.body)}
    assert not names & {"dynamic_broadcast_in_dim", "dynamic_reshape", "get_dimension_size",
                        "shape_assertion", "dynamic_iota", "real_dynamic_slice"}
    # six GEMMs projected, two attention batched GEMMs: eight dot kernels
    assert sum(k.kind == "dot" for k in prog.kernels) == 8
    # broadcasts are index arithmetic inside consumers, never kernels of their own
    assert not any(k.root.name == "broadcast_in_dim" for k in prog.kernels)


def test_reshape_product_is_symbolic():
    prog = to_ir(lambda x: x.reshape(-1, 8) * 2, ({0: "B", 1: "S"},),
                 np.ones((2, 3, 8), np.float32))
    assert prog.outputs[0].shape == (B * S, 8)
    assert symbolic.prove_eq(prog.outputs[0].shape[0], S * B)


def test_constraints_become_launcher_checks():
    prog = to_ir(lambda x: x + 1, ({0: "seq"},), np.ones(8, np.float32),
                 constraints=("seq % 8 == 0", "seq >= 5"))
    assert len(prog.checks) >= 2
    text = " ".join(c.message for c in prog.checks)
    assert "mod(seq, 8)" in text and "seq >= 5" in text


def test_dimension_size_used_as_data_is_materialised():
    prog = to_ir(lambda x: x.mean(axis=1), ({0: "B", 1: "S"},), np.ones((2, 3), np.float32))
    consts = [op for op in walk(prog.body) if op.name == "dim_constant"]
    assert consts and any(S in op.attrs["values"] for op in consts)


def test_unsupported_ops_listed_before_shape_work():
    def f(x):
        return (x + x.astype(jnp.int4).astype(jnp.float32)
                + x.astype(jnp.float8_e5m2).astype(jnp.float32))
    with pytest.raises(UnsupportedOpError) as info:
        to_ir(f, ({0: "N"},), np.ones(4, np.float32))
    assert info.value.args[0].count("stablehlo.") >= 2


def test_generated_c_is_deterministic_and_readable():
    wl = W.workloads()["W2"]
    args = wl.make_args(2, 3, np.random.default_rng(0))
    c1 = generate(to_ir(wl.fn, wl.dynamic_axes, *args)).source
    c2 = generate(to_ir(wl.fn, wl.dynamic_axes, *args)).source
    assert c1 == c2
    assert "int jd_prepare(" in c1 and "int jd_run(" in c1
    # a kernel loops over its own dims (units.py), which the launcher passes: d_B * d_S rows
    assert "n_rows = (jd_dim0 * jd_dim1), n_cols = ((int64_t)1024)" in c1
    assert "(d_B, d_S, " in c1
    assert "stablehlo.tanh at" in c1                          # provenance comments
    assert "restrict" in c1


def test_gemm_transposes_fold_into_blas_flags():
    def f(a, b):
        return jnp.einsum("bhqd,bhkd->bhqk", a, b)
    prog = to_ir(f, ({0: "B", 2: "S"}, {0: "B", 2: "S"}),
                 np.ones((2, 4, 3, 8), np.float32), np.ones((2, 4, 3, 8), np.float32))
    src = generate(prog).source
    # b transposed; the launcher calls the runtime's GEMM itself (no unit for the kernel)
    assert "jd_dot(JD_GEMM_F32, 0, 1, (4 * d_B), d_S, d_S, ((int64_t)8), " in src
    assert not any(k.root.name == "transpose" for k in prog.kernels)


@pytest.mark.parametrize("spec,shapes,axes,kept", [
    # a decoder's scores and context over a growing cache: keys, values [t, h, d] -> [h, t, d]
    ("hd,thd->ht", ((4, 8), (5, 4, 8)), (None, {0: "T"}), (1, 0, 2)),
    ("ht,thd->hd", ((4, 5), (5, 4, 8)), ({1: "T"}, {0: "T"}), (1, 0, 2)),
    # an lhs [k, b, m] -> [b, k, m], transposed in the GEMM
    ("kbm,bkn->bmn", ((5, 3, 4), (3, 5, 6)), ({0: "K"}, {1: "K"}), (1, 0, 2)),
])
def test_a_gemm_operand_is_transposed_keeping_its_last_dim_in_place(spec, shapes, axes, kept):
    """An operand that no GEMM layout fits is transposed to the one of its two layouts that
    keeps more trailing dims in place (the transpose copies runs of them): keys [t, h, d] go
    to [h, t, d] with the GEMM's b transposed, not to [h, d, t], which moved every element by
    itself (1.4-5x slower)."""
    import jdisc

    def f(a, b):
        return jnp.einsum(spec, a, b)
    args = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shapes]
    prog = to_ir(f, axes, *args)
    perms = [tuple(op.attrs["permutation"]) for op in walk(prog.body) if op.name == "transpose"]
    assert perms == [kept], perms
    got = jdisc.jit(f, dynamic_axes=axes, bridge=False)(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jnp.einsum(spec, *args)),
                               rtol=1e-5, atol=1e-5)


def test_shared_names_bind_once_and_check_the_rest():
    prog = to_ir(lambda x, m: x * m, ({0: "B"}, {0: "B"}), np.ones(3, np.float32),
                 np.ones(3, np.float32))
    src = generate(prog).source
    assert src.count("const int64_t d_B = in_dims[0];") == 1
    assert "axes that share a dimension name must be equal" in src


def test_scan_becomes_a_host_loop_with_in_place_outputs():
    from jax import lax

    def rnn(w, xs):
        def step(h, x):
            h = jnp.tanh(x @ w + h)
            return h, h
        return lax.scan(step, jnp.zeros((xs.shape[1], w.shape[1]), xs.dtype), xs)

    prog = to_ir(rnn, (None, {0: "T", 1: "B"}), np.ones((4, 4), np.float32),
                 np.ones((3, 2, 4), np.float32))
    (loop,) = [k for k in prog.kernels if k.kind == "while"]
    op = loop.root
    # carried: counter, h, stacked ys (w, xs and the trip count are read as captures)
    carried = op.results[:-1]
    assert [v.shape for v in carried] == [(), (B, 4), (T, B, 4)]
    assert op.attrs["in_place"] == (2,)                 # ys written in place
    cond, body = op.programs
    assert [k.kind for k in body.kernels].count("update") == 1
    assert [k.kind for k in body.kernels].count("dot") == 1
    assert not any(o.name in ("while", "if", "case") for o in prog.body.ops if o is not op)


def test_loop_invariant_carried_values_are_forwarded():
    from jax import lax
    f = lambda x: lax.fori_loop(0, x.shape[0], lambda i, c: c + x[i], jnp.zeros(x.shape[1:]))
    prog = to_ir(f, ({0: "T"},), np.ones((3, 4), np.float32))
    (op,) = [o for o in prog.body.ops if o.name == "while"]
    # x and the upper bound were carried unchanged by jax; now only (i, c) are
    assert [v.dtype for v in op.results[:-1]] == ["i32", "f32"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("spec", ["ik,kj->ij", "ki,kj->ij", "ik,jk->ij", "bki,bjk->bij"])
def test_gemms_run_in_the_runtime_for_every_contraction_size(dtype, spec):
    """A dot of a BLAS element type is a call of the runtime's jd_dot from the launcher, with no
    unit of its own: empty results, a contraction of size 0 (zeros), of size 1 (a product per
    element, XLA's sign of zero: 0 * -1 is -0) and GEMMs, each layout's flags, complex values
    by XLA's four-product formula. Small integers, so that every product and sum is exact
    whatever the order or the fused multiply-adds."""
    import jax
    from jdisc.lowering import units
    from conftest import check_against_jax

    def f(a, b):
        return jnp.einsum(spec, a, b)
    lhs, rhs = spec.split("->")[0].split(",")

    def make(n):
        sizes = {"i": 3, "j": 4, "b": 2, "k": n}
        rng = np.random.default_rng(n)

        def arr(sub):
            shape = tuple(sizes[c] for c in sub)
            x = rng.integers(-3, 4, shape).astype(dtype)
            if np.iscomplexobj(x):
                x = x + 1j * rng.integers(-3, 4, shape)
            return x.astype(dtype)
        a, b = arr(lhs), arr(rhs)
        a.reshape(-1)[::2] = 0                       # zeros times negatives
        return a, -np.abs(b) if not np.iscomplexobj(b) else b
    axes = ({lhs.index("k"): "k"}, {rhs.index("k"): "k"})
    with jax.enable_x64(dtype in (np.float64, np.complex128)):
        jf, args = check_against_jax(f, axes, make, (0, 1, 2, 5, 67), tol=0)
        got, want = jf(*make(1)), jax.jit(f)(*make(1))
        np.testing.assert_array_equal(np.signbit(np.real(got)), np.signbit(np.real(want)))
        source = jf.compiled_for(*args).c_source
    assert "jd_dot(" in source and "dot kernel, a call of the runtime's jd_dot" in source
    assert not any("gemm" in text for name, _, text in units.split(source)
                   if name.startswith("jd_u"))


def test_reshape_groups_split_around_size_1_dims():
    # a mask [B, S, S] read as [1, B, 1, S, S] (a chain of moves folded to one reshape,
    # passes/layout.py): one group over everything made the kernel split a flat index with
    # a division per element, 5x slower (keras's attention mask)
    from jdisc.lowering.loops import reshape_groups
    assert reshape_groups((1, B, 1, S, S), (B, S, S)) == [([0, 1], [0]), ([2, 3], [1]),
                                                          ([4], [2])]
    assert reshape_groups((B, S, S), (1, B, 1, S, S)) == [([0], [0, 1]), ([1], [2, 3]),
                                                          ([2], [4])]
    assert reshape_groups((B, S, 1), (B, S)) == [([0], [0]), ([1], [1]), ([2], [])]
    assert reshape_groups((B * S, 8), (B, S, 8)) == [([0], [0, 1]), ([1], [2])]
    assert reshape_groups((), (1, 1)) == [([], [0, 1])]
    assert reshape_groups((B, 3), (3, B)) == [([0, 1], [0, 1])]    # no finer split provable
