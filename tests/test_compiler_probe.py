"""The C compiler probes (custom_calls/probe.py): a miscompiling compiler gets its workaround
flag, a correct one gets none, and the verdict is cached on disk."""

import os

from jdisc.custom_calls import compiler, probe
from jdisc.lowering import units

_WRONG = '#include <stdio.h>\nint main(void) { printf("wrong\\n"); return 0; }\n'
_RIGHT = '#include <stdio.h>\nint main(void) { printf("ok\\n"); return 0; }\n'


def test_probe_verdicts_and_cache(tmp_path, monkeypatch):
    cc = compiler.compiler_command()
    monkeypatch.setattr(probe, "_verdicts", {})
    # (name, program, the program as jdisc's kernels avoid the bug, global flags otherwise)
    monkeypatch.setattr(probe, "PROBES", [("bad", _WRONG, _WRONG, ["-fno-fix-me"]),
                                          ("avoided", _WRONG, _RIGHT, ["-fnot-needed"]),
                                          ("good", _RIGHT, _WRONG, ["-fnever"])])
    flags = probe.workaround_flags(cc, [["-O2"]], "id", "host", str(tmp_path))
    assert flags == ["-fno-fix-me"]
    (entry,) = os.listdir(tmp_path / "probes")
    # a second process reads the verdict instead of probing again
    monkeypatch.setattr(probe, "_verdicts", {})
    monkeypatch.setattr(probe, "PROBES", [])
    assert probe.workaround_flags(cc, [["-O2"]], "id", "host", str(tmp_path)) == ["-fno-fix-me"]
    # another compiler identity is probed afresh
    assert probe.workaround_flags(cc, [["-O2"]], "id2", "host", str(tmp_path)) == []


def test_real_lane_loop_probe_passes_with_the_flags_jdisc_uses(tmp_path):
    # whatever this machine's compiler is, the flags jdisc compiles with, and the attribute its
    # at-risk kernels carry, make the probe right
    cc = compiler.compiler_command()
    cflags, _ = compiler._flag_parts(False)
    levels = [compiler._level_flags(cflags, level)
              for level in (units.KERNEL_OPT, units.STITCH_OPT)]
    assert probe._run_probes(cc, levels) == []
    tmp = str(tmp_path)
    (only,) = probe.PROBES               # the lane loop at 64 and at 16 lanes, one program
    assert "lanes_64(" in only[1] and "lanes_16(" in only[1]
    for flags in levels:
        flags = [f for f in flags if f not in ("-shared", "-fPIC")]
        for name, _, kept, _ in probe.PROBES:
            assert probe._probe_ok(cc, flags, tmp, name + "-kept", kept)


def test_every_level_is_probed(tmp_path, monkeypatch):
    # a program that is wrong only at one level's flags gets its workaround
    cc = compiler.compiler_command()
    only_o1 = '#include <stdio.h>\nint main(void) {\n#ifdef __OPTIMIZE__\nputs("ok");\n' \
        '#else\nputs("wrong");\n#endif\nreturn 0; }\n'
    monkeypatch.setattr(probe, "PROBES", [("at-O0", only_o1, only_o1, ["-fix"])])
    assert probe._run_probes(cc, [["-O2"]]) == []
    assert probe._run_probes(cc, [["-O2"], ["-O0"]]) == ["-fix"]


def test_kernels_with_conditional_loads_keep_their_branches():
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    from jdisc.lowering.codegen import needs_branches

    def kernels(f, *args):
        return jdisc.jit(f, dynamic_axes=({0: "n"},) * len(args)).compiled_for(*args) \
            .program.kernels
    x = np.ones((4, 16), np.float32)
    # softmax-like math reads every operand: if-converted (vectorised), unless its rows are
    # short and static (GCC unrolls them under the row loop's test)
    softmax = lambda x: jnp.exp(x - x.max(1, keepdims=True)) / jnp.tanh(x).sum(1, keepdims=True)
    assert not any(needs_branches(k) for k in kernels(softmax, np.ones((4, 128), np.float32)))
    assert any(needs_branches(k) for k in kernels(softmax, x) if k.kind == "stitch")
    # a select blends both operands (no conditional load), so the masked sum that GCC 12
    # miscompiled is if-converted now, and must still be right (every 16-lane row)
    masked = lambda x, m: jnp.where(m, x, 0).sum(1)
    assert not any(needs_branches(k) for k in kernels(masked, np.ones((4, 128), np.float32),
                                                      np.eye(4, 128, dtype=bool)))
    for n in (16, 48, 128):
        a = np.arange(n * n, dtype=np.float32).reshape(n, n)
        got = jdisc.jit(masked, dynamic_axes=({0: "n"}, {0: "n"}))(a, np.eye(n, dtype=bool))
        np.testing.assert_array_equal(np.asarray(got), np.diag(a))
    # a pad's source, an integer division: conditional loads
    assert any(needs_branches(k) for k in kernels(lambda x: jnp.pad(x, 1) * 2, x))
    assert any(needs_branches(k) for k in kernels(lambda i: (i // 3).sum(1), x.astype(np.int32)))


def test_pooling_keeps_its_branches_only_where_it_tests_bounds():
    import jax
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    from jdisc.lowering.codegen import needs_branches

    def window_kernels(padding):
        f = lambda x: jax.lax.reduce_window(jax.nn.relu(x), -jnp.inf, jax.lax.max,
                                            (1, 2, 2, 1), (1, 2, 2, 1), padding)
        x = np.ones((2, 8, 8, 32), np.float32)
        prog = jdisc.jit(f, dynamic_axes=({0: "b", 1: "h", 2: "w"},)).compiled_for(x).program
        return [k for k in prog.kernels if k.kind == "window"]
    # VALID: every window position is inside, no test, so GCC may if-convert the NaN-aware max
    # and vectorise the channel loop (W4's ReLU + max-pool)
    assert window_kernels("VALID") and not any(map(needs_branches, window_kernels("VALID")))
    # SAME over dynamic H/W: padding, hence a bounds test around the lane loop
    assert all(map(needs_branches, window_kernels("SAME")))


def test_parallel_loops_keep_their_kernels_branches():
    # a kernel's loops live in the functions of its parallel loops (cwriter.parallel): those
    # carry JD_KEEP_BRANCHES too (until 2026-12-07 only the kernel's own function did, and
    # GCC 12 miscompiled a shift's lanes: test_bug_classes.py)
    import re
    import jax
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    for f, x in [(lambda x: jnp.pad(x, 1) * 2, np.ones((4, 16), np.float32)),
                 (lambda i: jax.lax.shift_left(i, i - 2), np.ones((4, 4, 2), np.int32))]:
        c = jdisc.jit(f, dynamic_axes=({0: "n"},)).compiled_for(x).c_source
        kept = re.findall(r"JD_KERNEL JD_KEEP_BRANCHES int (\w+)\(", c)
        pieces = re.findall(r"^(.*)static void (\w+)_p\d+\(", c, re.M)
        assert kept and pieces
        for attrs, owner in pieces:
            assert (owner in kept) == ("JD_KEEP_BRANCHES" in attrs), (owner, attrs)


def test_logic_iota_and_exact_converts_are_branch_free():
    # an attention mask (iota >= iota, a padding mask, AND, bool -> f32 and back) fused with a
    # softmax: nothing in it reads conditionally, so GCC may if-convert its exp and max. Until
    # 2026-12-07 and, or, xor, not, iota, slice, reverse and every convert counted as
    # branching, and such a kernel ran scalar (flax's causal decoder at B = 29, S = 59: 5x
    # slower than jax.jit; haiku's TCN 1.5x)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import jdisc
    from jdisc.lowering.codegen import needs_branches

    def masked_softmax(x, pad):
        s = x.shape[1]
        causal = jax.lax.broadcasted_iota(jnp.int32, (s, s), 0) >= \
            jax.lax.broadcasted_iota(jnp.int32, (s, s), 1)
        keep = (pad[:, :, None] > 0) & (pad[:, None, :] > 0) & ~(~causal[None])
        m = keep.astype(jnp.float32).astype(bool)
        return jax.nn.softmax(jnp.where(m, x, -1e30), axis=-1)

    axes = ({0: "b", 1: "s", 2: "s"}, {0: "b", 1: "s"})
    f = jdisc.jit(masked_softmax, dynamic_axes=axes)
    x = np.ones((2, 200, 200), np.float32)
    pad = np.ones((2, 200), np.int32)
    stitch = [k for k in f.compiled_for(x, pad).program.kernels if k.kind == "stitch"]
    assert stitch and not any(map(needs_branches, stitch))
    rng = np.random.default_rng(5)
    ref = jax.jit(masked_softmax)
    for b, s in [(1, 1), (2, 3), (3, 17), (2, 131)]:
        x = rng.standard_normal((b, s, s)).astype(np.float32)
        pad = (np.arange(s)[None] < rng.integers(1, s + 1, (b, 1))).astype(np.int32)
        np.testing.assert_allclose(np.asarray(f(x, pad)), np.asarray(ref(x, pad)),
                                   rtol=2e-6, atol=1e-7)
    assert f.stats()["compiles"] == 1
    # a gated activation of a TCN (haiku's): slices and a reverse only move the index
    gate = lambda x: jnp.tanh(jax.lax.slice_in_dim(x, 0, 8, axis=1)) * jax.nn.sigmoid(
        jax.lax.rev(jax.lax.slice_in_dim(x, 8, 16, axis=1), (1,)))
    h = jdisc.jit(gate, dynamic_axes=({0: "n"},))
    assert not any(map(needs_branches,
                       h.compiled_for(np.ones((4, 16), np.float32)).program.kernels))
    for n in (1, 3, 37):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(h(x)), np.asarray(jax.jit(gate)(x)), rtol=4e-7,
                                   atol=1e-7)
    # a float -> int convert saturates (a test on the value): it still counts as branching
    g = jdisc.jit(lambda x: (x * 3).astype(jnp.int32), dynamic_axes=({0: "n"},))
    assert any(map(needs_branches, g.compiled_for(np.ones((4, 8), np.float32)).program.kernels))


def test_kernels_that_keep_their_branches_take_max_and_min_as_bit_selects():
    # a SAME max-pool over a ReLU keeps its branches (bounds tests); its max is then the bit
    # select form, which GCC vectorises without if-conversion (the ?: form ran as scalar
    # branches: a BatchNorm + ReLU + pool kernel took 34 ms where XLA's whole CNN took 7).
    # Both forms give the same bits: NaN wins, max(-0, +0) = +0 and min(-0, +0) = -0.
    import jax
    import jax.numpy as jnp
    import numpy as np
    import jdisc

    def pools(x):
        y = jax.nn.relu(x * 0.5 - 0.25)
        hi = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
        lo = jax.lax.reduce_window(x, jnp.inf, jax.lax.min, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")
        return hi, lo, jnp.minimum(x, 0.0)
    axes = ({0: "b", 1: "h", 2: "w"},)
    f = jdisc.jit(pools, dynamic_axes=axes)
    c = f.compiled_for(np.ones((1, 4, 4, 8), np.float32)).c_source
    assert "#define jd_fmax_f32 jd_fmax_sel_f32" in c and "JD_KEEP_BRANCHES" in c
    rng = np.random.default_rng(11)
    # finite values and infinities: XLA:CPU's min and max pools follow the machine's min and
    # max instructions for NaN, -0 and subnormals, where jdisc follows StableHLO (NaN wins,
    # min(-0, +0) = -0) in both forms; that the two forms give the same bits for those is
    # tests/test_c_runtime.py's
    specials = np.array([np.inf, -np.inf, 0.5, -0.5], np.float32)
    ref = jax.jit(pools)
    for b, h, w in [(1, 1, 1), (2, 3, 5), (1, 7, 13), (3, 17, 11)]:
        x = rng.standard_normal((b, h, w, 8)).astype(np.float32)
        x.flat[rng.integers(0, x.size, x.size // 3)] = rng.choice(specials, x.size // 3)
        for got, want in zip(f(x), ref(x)):
            got, want = np.asarray(got), np.asarray(want)
            np.testing.assert_array_equal(got, want)       # NaN where jax has NaN
            same = ~np.isnan(want)
            np.testing.assert_array_equal(np.signbit(got[same]), np.signbit(want[same]))
    assert f.stats()["compiles"] == 1
