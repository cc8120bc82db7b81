"""The programs of test_sharding.py, run in a process of their own with 4 host devices (jax
must see the flag before it starts): `python tests/sharding_cases.py OUT.json [gspmd]`.

Each case compares jdisc inside `jax.jit` with `jax.jit` of the same function under the same
input shardings, at several sizes of every dynamic dim and on meshes of 1, 2 and 4 devices:
values, result shardings, and the compiled HLO (no all-gather of a parallel operand; the jdisc
custom call's operands have the local shard's shape). Results go to OUT.json as
{case: "ok" | the traceback}.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=4").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jdisc  # noqa: E402

# "shardy" (jax's default partitioner), "gspmd", or "explicit" (Shardy, meshes of explicit axes)
MODE = sys.argv[2] if len(sys.argv) > 2 else "shardy"
if MODE == "gspmd":
    jax.config.update("jax_use_shardy_partitioner", False)

# f32 results: the sharded program sums partial results in another order than one reduction
# (psum of per-shard sums); every other op computes the same elements as without sharding.
TOL = 2e-5
DEVICES = jax.devices()
assert len(DEVICES) == 4, DEVICES
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def mesh_of(n: int, names=("data",), shape=None, explicit=None):
    kind = jax.sharding.AxisType.Explicit if (MODE == "explicit" if explicit is None
                                              else explicit) else jax.sharding.AxisType.Auto
    return jax.make_mesh(shape or (n,), names, devices=DEVICES[:n], axis_types=(kind,) * len(names))


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    inf = np.isinf(want)        # exactly, and out of the scale (an infinite one passes all)
    assert (np.isinf(got) == inf).all() and (got[inf] == want[inf]).all(), what
    got, want = np.where(inf, 0, got), np.where(inf, 0, want)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if \
        want.size else 0.0
    assert err <= TOL * scale, f"{what}: max error {err:.3g} > {TOL} * {scale:.3g}"


def _shapes(hlo: str) -> dict[str, str]:
    return dict(re.findall(r"%([\w.\-]+) = ([a-z0-9]+\[[0-9,]*\])", hlo))


def jdisc_operand_shapes(hlo: str) -> list[list[str]]:
    """For each jdisc custom call in the compiled HLO, its operands' shapes."""
    shapes = _shapes(hlo)
    out = []
    for line in hlo.splitlines():
        if 'custom_call_target="jdisc_' in line:
            args = re.search(r"custom-call\(([^)]*)\)", line).group(1)
            out.append([shapes.get(a.strip().lstrip("%").split(" ")[-1].lstrip("%"), "?")
                        for a in args.split(",") if a.strip()])
    return out


def run(jf, ref, args, specs, mesh, *, gathers=False, reduces=None, local=None,
        shardings=True):
    """jdisc inside jax.jit against jax.jit of `ref`; returns the compiled HLO text. Unless
    `gathers`, no all-gather; `reduces`: whether there is an all-reduce; `local`: the shapes of
    the custom call's first operands; `shardings`: the results' equal jax.jit's."""
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
    f = jax.jit(lambda *xs: jf(*xs))
    g = jax.jit(ref)
    got, want = f(*placed), g(*placed)
    got_l, want_l = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_l) == len(want_l)
    where = f"mesh {dict(mesh.shape)} shapes {[np.shape(a) for a in args]}"
    for k, (o, r) in enumerate(zip(got_l, want_l)):
        close(o, r, f"output {k} at {where}")
        assert not shardings or o.sharding.is_equivalent_to(r.sharding, o.ndim), \
            f"output {k} at {where}: sharding {o.sharding.spec} != jax.jit's {r.sharding.spec}"
    hlo = f.lower(*placed).compile().as_text()
    if mesh.size > 1:
        if not gathers:
            assert "all-gather" not in hlo, f"{where}: an all-gather:\n{hlo[:4000]}"
        if reduces is not None:
            assert ("all-reduce" in hlo) == reduces, f"{where}: all-reduce present: {not reduces}"
        if local is not None:
            ops = jdisc_operand_shapes(hlo)
            assert ops and ops[0][:len(local)] == local, f"{where}: custom call operands {ops}"
    return hlo


# --------------------------------------------------------------------------- cases

@case
def mlp_over_a_sharded_batch():
    rng = np.random.default_rng(0)

    def mlp(x, w1, b1, w2):
        return jnp.tanh(x @ w1 + b1) @ w2
    jf = jdisc.jit(mlp, dynamic_axes=[{0: "B"}, None, None, None])
    w1, b1, w2 = rand(rng, 16, 32), rand(rng, 32), rand(rng, 32, 8)
    for n in (4, 2, 1):
        for b in (4, 12, 40):
            run(jf, mlp, [rand(rng, b, 16), w1, b1, w2], [P("data"), P(), P(), P()],
                mesh_of(n), reduces=False, local=[f"f32[{b // n},16]"])
    assert jf.stats()["compiles"] == 1, jf.stats()
    assert "B: parallel: x axis 0 -> result axis 0" in jf.explain(rand(rng, 4, 16), w1, b1, w2)


@case
def attention_over_a_sharded_batch():
    rng = np.random.default_rng(1)

    def attention(x, wq, wk, wv):
        b, s, _ = x.shape
        q, k, v = ((x @ w).reshape(b, s, 2, 8) for w in (wq, wk, wv))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(8))
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v).reshape(b, s, 16)
    jf = jdisc.jit(attention, dynamic_axes=[{0: "B", 1: "S"}, None, None, None])
    ws = [rand(rng, 16, 16) for _ in range(3)]
    for b, s in ((4, 1), (8, 7), (4, 13)):
        run(jf, attention, [rand(rng, b, s, 16), *ws], [P("data"), P(), P(), P()], mesh_of(4),
            reduces=False, local=[f"f32[{b // 4},{s},16]"])
    assert jf.stats()["compiles"] == 1, jf.stats()


@case
def conv_net_over_a_sharded_batch():
    rng = np.random.default_rng(2)

    def net(x, k1, k2, w):
        dn = ("NHWC", "HWIO", "NHWC")
        h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn))
        h = jax.nn.relu(lax.conv_general_dilated(h, k2, (2, 2), "SAME", dimension_numbers=dn))
        return jnp.mean(h, axis=(1, 2)) @ w
    jf = jdisc.jit(net, dynamic_axes=[{0: "B", 1: "H", 2: "W"}, None, None, None])
    params = [rand(rng, 3, 3, 3, 4), rand(rng, 3, 3, 4, 8), rand(rng, 8, 5)]
    for b, h, w in ((4, 8, 8), (8, 5, 9)):
        run(jf, net, [rand(rng, b, h, w, 3), *params], [P("data"), P(), P(), P()], mesh_of(4),
            reduces=False, local=[f"f32[{b // 4},{h},{w},3]"])
    assert jf.stats()["compiles"] == 1, jf.stats()


@case
def scan_over_time_with_a_sharded_batch():
    rng = np.random.default_rng(3)

    def rnn(x, wx, wh):
        def step(h, xt):
            h = jnp.tanh(xt @ wx + h @ wh)
            return h, h.sum(-1)
        return lax.scan(step, jnp.zeros((x.shape[1], wh.shape[0]), x.dtype), x)
    jf = jdisc.jit(rnn, dynamic_axes=[{0: "T", 1: "B"}, None, None])
    wx, wh = rand(rng, 6, 8) * 0.5, rand(rng, 8, 8) * 0.5
    for t, b in ((1, 4), (9, 8)):
        run(jf, rnn, [rand(rng, t, b, 6), wx, wh], [P(None, "data"), P(), P()], mesh_of(4),
            reduces=False, local=[f"f32[{t},{b // 4},6]"])

    def count(x):           # a while loop whose carried value has the batch axis
        return lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0),
                              (0, x))[1]
    jc = jdisc.jit(count, dynamic_axes=[{0: "B"}])
    run(jc, count, [rand(rng, 8, 3)], [P("data")], mesh_of(4), reduces=False,
        local=["f32[2,3]"])
    assert jf.stats()["compiles"] == 1 and jc.stats()["compiles"] == 1


@case
def masked_scatter_over_a_sharded_batch():
    # select(m, scatter(x, ...), x) is one scatter masked by m (passes/simplify.py): batched
    # along B, it partitions there as the scatter does, with the mask exact along B
    rng = np.random.default_rng(11)

    def f(x, i, u, m):
        return jax.vmap(lambda x, i, u, m: jnp.where(m, x.at[i].add(u), x))(x, i, u, m)
    jf = jdisc.jit(f, dynamic_axes=[{0: "B"}] * 4)
    for n in (2, 4):
        for b in (4, 8):
            args = [rand(rng, b, 5), rng.integers(0, 5, (b, 3)).astype(np.int32),
                    rand(rng, b, 3), rng.random((b, 5)) < 0.5]
            run(jf, f, args, [P("data")] * 4, mesh_of(n), reduces=False,
                local=[f"f32[{b // n},5]"])
    assert jf.stats()["compiles"] == 1, jf.stats()


@case
def reductions_over_the_sharded_axis():
    rng = np.random.default_rng(4)

    def losses(x, y):
        d = x - y
        return jnp.sum(d * d), jnp.mean(jnp.abs(d)), jnp.max(d), jnp.min(d, axis=0), \
            jnp.mean(d, axis=0)
    jf = jdisc.jit(losses, dynamic_axes=[{0: "B"}, {0: "B"}])
    for n in (4, 2):
        for b in (4, 16, 36):
            run(jf, losses, [rand(rng, b, 5), rand(rng, b, 5)], [P("data")] * 2, mesh_of(n),
                reduces=True, local=[f"f32[{b // n},5]"] * 2)
    assert jf.stats()["compiles"] == 1, jf.stats()
    text = jf.explain(rand(rng, 4, 5), rand(rng, 4, 5))
    assert "(sum over shards)" in text and "(max over shards)" in text, text


@case
def two_dimensional_mesh():
    rng = np.random.default_rng(5)

    def f(x, w):
        return jax.nn.gelu(x @ w) * 2.0
    jf = jdisc.jit(f, dynamic_axes=[{0: "B", 1: "S"}, None])
    w = rand(rng, 8, 8)
    mesh = mesh_of(4, ("data", "model"), (2, 2))
    for b, s in ((2, 3), (6, 4)):     # "model" unused
        run(jf, f, [rand(rng, b, s, 8), w], [P("data"), P()], mesh, reduces=False,
            local=[f"f32[{b // 2},{s},8]"])
    for b, s in ((2, 4), (4, 6)):     # both axes of the mesh, on two parallel dims
        run(jf, f, [rand(rng, b, s, 8), w], [P("data", "model"), P()], mesh, reduces=False,
            local=[f"f32[{b // 2},{s // 2},8]"])
    assert jf.stats()["compiles"] == 1, jf.stats()


@case
def uneven_and_non_parallel_axes_are_resharded():
    rng = np.random.default_rng(6)
    mesh = mesh_of(4, explicit=False)   # (jax.jit refuses cumsum along an explicit axis)

    def inner(x):
        return jnp.cumsum(x, axis=0) * 2.0, jnp.sort(x, axis=0)
    jf = jdisc.jit(inner, dynamic_axes=[{0: "B"}])
    for b in (4, 12):       # the batch is not parallel here: the partitioner gathers it
        run(jf, inner, [rand(rng, b, 3)], [P("data")], mesh, gathers=True, shardings=False)
    try:                    # and an eager call keeps the clear error
        jf(jax.device_put(rand(rng, 8, 3), NamedSharding(mesh, P("data"))))
    except jdisc.ArgumentError as err:
        assert "axis 0 is sharded and is not parallel" in str(err) and \
            "stablehlo.reduce_window" in str(err), err
    else:
        raise AssertionError("no error for an eager call sharded along a non-parallel axis")

    def scaled(x):
        return jnp.tanh(x) + 1.0, jnp.sum(x)
    js = jdisc.jit(scaled, dynamic_axes=[{0: "B"}])
    for b in (8, 12):       # 6 and 10 rows do not split evenly over 4 devices
        x = rand(rng, b, 3)

        def uneven(x, fn):
            y = jax.lax.with_sharding_constraint(x[: b - 2], NamedSharding(mesh, P("data")))
            return fn(y)
        xs = jax.device_put(x, NamedSharding(mesh, P("data")))
        got = jax.jit(lambda v: uneven(v, js))(xs)
        want = jax.jit(lambda v: uneven(v, scaled))(xs)
        for o, r in zip(got, want):
            close(o, r, f"uneven b={b}")
    assert jf.stats()["compiles"] == 1 and js.stats()["compiles"] == 1


@case
def constraints_and_shared_names_hold_per_shard():
    rng = np.random.default_rng(7)
    mesh = mesh_of(4)

    def f(x, mask):
        return jnp.where(mask[:, None] > 0, x, 0.0) * 3.0
    jf = jdisc.jit(f, dynamic_axes=[{0: "B"}, {0: "B"}], constraints=["B % 8 == 0"])
    for b in (8, 32):   # 8 rows: 2 per shard breaks B % 8 == 0, so the call is not split
        hlo = run(jf, f, [rand(rng, b, 3), rand(rng, b)], [P("data"), P("data")], mesh,
                  gathers=True, shardings=b == 32)
        split = "all-gather" not in hlo
        assert split == (b == 32), (b, split)
    try:                # the global shape must hold the constraint, as without shardings
        run(jf, f, [rand(rng, 12, 3), rand(rng, 12)], [P("data"), P("data")], mesh)
    except jdisc.ShapeError as err:
        assert "symbolic shape constraint" in str(err), err
    else:
        raise AssertionError("no error for B = 12")
    # one operand sharded, the other replicated: the partitioner shards the second one
    run(jf, f, [rand(rng, 32, 3), rand(rng, 32)], [P("data"), P()], mesh)
    assert jf.stats()["compiles"] == 1, jf.stats()


@case
def grad_of_a_data_parallel_loss():
    rng = np.random.default_rng(8)

    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)
    jf = jdisc.jit(loss, dynamic_axes=[None, {0: "B"}, {0: "B"}])
    params = (rand(rng, 6, 16), rand(rng, 16, 3))

    def step(lossf):
        def s(w1, w2, x, y):
            value, grads = jax.value_and_grad(lossf)((w1, w2), x, y)
            return value, grads
        return s
    for n in (4, 2):
        for b in (4, 20):
            hlo = run(step(jf), step(loss), [*params, rand(rng, b, 6), rand(rng, b, 3)],
                      [P(), P(), P("data"), P("data")], mesh_of(n), reduces=True)
            shapes = jdisc_operand_shapes(hlo)
            assert len(shapes) == 2 and all(f"f32[{b // n},6]" in s for s in shapes), shapes
    st = jf.stats()
    assert st["compiles"] == 1 and st.get("vjp_compiles") == 1, st


@case
def classifier_training_step():
    rng = np.random.default_rng(12)

    def xent(params, x, labels):
        w, b = params
        logp = jax.nn.log_softmax(jnp.tanh(x @ w) + b)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
    jf = jdisc.jit(xent, dynamic_axes=[None, {0: "B"}, {0: "B"}])
    w, b = rand(rng, 6, 5), rand(rng, 5)
    mesh = mesh_of(4, explicit=False)    # (jax.jit's gather wants an out_sharding on explicit)
    for n_rows in (4, 36):
        labels = rng.integers(0, 5, n_rows).astype(np.int32)

        def step(lossf):
            return lambda w, b, x, y: jax.value_and_grad(lossf)((w, b), x, y)
        hlo = run(step(jf), step(xent), [w, b, rand(rng, n_rows, 6), labels],
                  [P(), P(), P("data"), P("data")], mesh, reduces=True)
        shapes = jdisc_operand_shapes(hlo)
        assert len(shapes) == 2 and all(f"f32[{n_rows // 4},6]" in s for s in shapes), shapes
    st = jf.stats()
    assert st["compiles"] == 1 and st.get("vjp_compiles") == 1, st


@case
def vmap_under_shardings():
    rng = np.random.default_rng(9)

    def row(x, w):
        return jnp.tanh(x @ w)
    jf = jdisc.jit(row, dynamic_axes=[{0: "S"}, None])
    w = rand(rng, 4, 4)
    for n_batch, s in ((4, 3), (8, 5)):
        run(jax.vmap(jf, in_axes=(0, None)), jax.vmap(row, in_axes=(0, None)),
            [rand(rng, n_batch, s, 4), w], [P("data"), P()], mesh_of(4), reduces=False,
            local=[f"f32[{n_batch // 4},{s},4]"])
    assert jf.stats().get("vmap_compiles") == 1, jf.stats()


@case
def eager_calls_run_per_shard():
    rng = np.random.default_rng(10)

    def f(x, w):
        return jnp.tanh(x @ w), jnp.sum(x, axis=1)
    jf = jdisc.jit(f, dynamic_axes=[{0: "B"}, None])
    w = rand(rng, 5, 3)
    for n in (4, 2):
        mesh = mesh_of(n)
        for b in (4, 12):
            x = rand(rng, b, 5)
            xs = jax.device_put(x, NamedSharding(mesh, P("data")))
            got, want = jf(xs, w), jax.jit(f)(xs, w)
            for o, r in zip(got, want):
                close(o, r, f"eager n={n} b={b}")
                assert o.sharding.is_equivalent_to(r.sharding, o.ndim), (o.sharding, r.sharding)
    mesh = mesh_of(4)

    def total(x):
        return jnp.sum(x) / 2.0
    jt = jdisc.jit(total, dynamic_axes=[{0: "B"}])    # a reduction over the shards
    xs = jax.device_put(rand(rng, 8, 5), NamedSharding(mesh, P("data")))
    close(jt(xs), jax.jit(total)(xs), "eager sum over shards")
    assert jf.stats()["compiles"] == 1 and jt.stats()["compiles"] == 1


@case
def graph_network_over_sharded_edges():
    rng = np.random.default_rng(11)

    def gnn(h, src, dst, w):
        msg = jnp.tanh(h[src] @ w)
        return jax.ops.segment_sum(msg, dst, num_segments=h.shape[0])
    jf = jdisc.jit(gnn, dynamic_axes=[{0: "N"}, {0: "E"}, {0: "E"}, None])
    w = rand(rng, 4, 4)
    mesh = mesh_of(4, explicit=False)    # (jax.jit's gather wants an out_sharding on explicit)
    for n_nodes, n_edges in ((3, 4), (9, 28)):
        src = rng.integers(0, n_nodes, n_edges).astype(np.int32)
        dst = rng.integers(0, n_nodes, n_edges).astype(np.int32)
        run(jf, gnn, [rand(rng, n_nodes, 4), src, dst, w], [P(), P("data"), P("data"), P()],
            mesh, reduces=True, local=[f"f32[{n_nodes},4]", f"s32[{n_edges // 4}]"])
    assert jf.stats()["compiles"] == 1, jf.stats()


@case
def the_docs_example_runs():
    from pathlib import Path
    page = (Path(__file__).resolve().parent.parent / "docs" / "jax-programs.md").read_text()
    section = page.split("## Sharding and several processes", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    env: dict = {}
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/jax-programs.md", "exec"), env)
    text = out.getvalue()
    assert "B: parallel: x axis 0, y axis 0 -> result (sum over shards, times n**-1)" in text, \
        text
    stats = env["f"].stats()
    assert stats["compiles"] == 1 and stats.get("vjp_compiles") == 1, stats
    hlo = env["step"].lower(env["params"], env["x"], env["y"]).compile().as_text()
    assert "all-gather" not in hlo and "all-reduce" in hlo


def main() -> None:
    out = sys.argv[1]
    names = [n for n in CASES if len(sys.argv) <= 3 or n in sys.argv[3:]]
    results = {}
    for name in names:
        try:
            CASES[name]()
            results[name] = "ok"
        except Exception:           # noqa: BLE001 - reported per case by test_sharding.py
            results[name] = traceback.format_exc()
        with open(out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
