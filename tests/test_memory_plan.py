"""Fast tier: the memory plan (slots of one arena, reuse by liveness and provable fit)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jdisc.bench import workloads as W
from jdisc.dynamic_passes.algebra import symbolic
from jdisc.dynamic_passes.ir.program import Block, Op, Program, Value
from jdisc.dynamic_passes.passes.memory_plan import alias_roots, buffer_bytes, plan_memory
from conftest import to_ir

pytestmark = pytest.mark.fast   # compiles no jdisc program: IR, plans and algebra only

B, S = symbolic.var("B"), symbolic.var("S")


# ---- programs through the real pipeline --------------------------------------------------------

def _chain(x, w):
    h = jnp.tanh(x @ w)
    p = jax.nn.softmax(h, axis=-1)
    return p.sum(-1) + (p * h).max(-1) + jnp.exp(h).mean(-1)


def _alternating(x):
    """Buffers of B*S*4 and B*S*S*4 bytes, alternating (outer products are dots: materialised)."""
    a = jnp.tanh(x)
    m = jnp.einsum("bs,bt->bst", a, x)
    r = jnp.exp(m).sum(-1)
    t = jnp.tanh(r) * x
    m2 = jnp.einsum("bs,bt->bst", t, a)
    r2 = jnp.sin(m2).max(-1)
    return r2 + t


def _reshaped(x):
    """Aliases (reshapes) of intermediates, read later and returned."""
    y = jnp.tanh(x).reshape(x.shape[0], -1)
    z = (y * 2.0).sum(-1)
    return y.reshape(x.shape), z + 1.0


@functools.lru_cache(maxsize=None)
def program(name: str) -> Program:
    rng = np.random.default_rng(0)
    if name in W.workloads():
        wl = W.workloads()[name]
        return to_ir(wl.fn, wl.dynamic_axes, *wl.make_args(2, 3, rng))
    if name == "W3-gelu":   # W3 with a tanh GELU: a bias and GELU, no GEMM epilogue
        wl = W.workloads()["W3"]
        return to_ir(functools.partial(W.mlp, activation="gelu"), wl.dynamic_axes,
                     *wl.make_args(2, 3, rng))
    if name == "chain":
        return to_ir(_chain, ({0: "B"}, None), np.ones((4, 64), np.float32),
                     np.ones((64, 64), np.float32))
    if name == "alternating":
        return to_ir(_alternating, ({0: "B", 1: "S"},), np.ones((2, 3), np.float32))
    if name == "reshaped":
        return to_ir(_reshaped, ({0: "B", 1: "S"},), np.ones((2, 3, 4), np.float32))
    raise KeyError(name)


ALL = ["chain", "alternating", "reshaped", "W1", "W2", "W3"]


def planned(name: str):
    prog = plan_memory(program(name))
    return prog, prog.memory


def intermediates(prog):
    """Outputs of non-alias kernels that are not program results, id -> (value, kernel index)."""
    results = {v.id for v in prog.body.results}
    return {v.id: (v, i) for i, k in enumerate(prog.kernels) if k.kind != "alias"
            for v in k.outputs if v.id not in results}


def in_place_pairs(prog):
    """(input id, output id) of each kernel that writes its output over a dying input: a
    single-output loop kernel that reads that input through its output pointer."""
    return {(x.id, k.outputs[0].id) for k in prog.kernels
            if k.kind == "loop" and len(k.outputs) == 1
            for x in k.inputs if x.id in k.writes_over and x.id in prog.memory.assignment
            and prog.memory.assignment[x.id] == prog.memory.assignment[k.outputs[0].id]}


def random_envs(prog, n=25, seed=0):
    names = set()
    for v, _ in intermediates(prog).values():
        names |= symbolic.variables(buffer_bytes(v))
    rng = np.random.default_rng(seed)
    envs = [{v: int(x) for v, x in zip(sorted(names), row)}
            for row in rng.integers(0, 300, size=(n, len(names)))]
    return envs + [dict.fromkeys(names, 0), dict.fromkeys(names, 1), dict.fromkeys(names, 65)]


def ev(d, env):
    return symbolic.evaluate(d, env)


# ---- (1) reuse happens ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["chain", "W1"])
def test_later_buffers_reuse_freed_slots(name):
    prog, plan = planned(name)
    bufs = intermediates(prog)
    assert set(plan.assignment) == set(bufs)
    assert len(plan.slots) < len(bufs)
    assert any(len(s.buffers) > 1 for s in plan.slots)
    env = {"B": 8, "S": 128}
    total = sum(ev(buffer_bytes(v), env) for v, _ in bufs.values())
    assert ev(plan.arena_bytes, env) < total


# ---- (2) sizes are never confused -------------------------------------------------------------

def test_alternating_sizes_never_share_unsoundly():
    prog, plan = planned("alternating")
    bufs = intermediates(prog)
    square = [v for v, _ in bufs.values() if v.shape == (B, S, S)]
    flat = [v for v, _ in bufs.values() if v.shape == (B, S)]
    assert square and flat
    slot_of = plan.assignment
    for v, _ in bufs.values():
        assert plan.slots[slot_of[v.id]].fits(v)
    # 4*B*S*S >= 4*B*S holds, but interval bounds cannot prove it: the two never share
    assert not {slot_of[v.id] for v in square} & {slot_of[v.id] for v in flat}
    for env in random_envs(prog):
        for v, _ in bufs.values():
            assert ev(buffer_bytes(v), env) <= ev(plan.slots[slot_of[v.id]].size, env)


# ---- hand-built programs: exact decisions, independent of the kernel planner ---------------------

@dataclasses.dataclass(eq=False)
class FakeKernel:
    name: str
    kind: str
    ops: list
    outputs: list
    inputs: list

    @property
    def root(self):
        return self.ops[-1]


def fake_program(kernels, results):
    prog = Program("fake", Block([], [], results), [], [])
    prog.kernels = kernels
    return prog


def kernel(name, out, *ins, kind="loop"):
    return FakeKernel(name, kind, [], [out], list(ins))


def alias(name, out, src):
    return FakeKernel(name, "alias", [Op("reshape", [src], [out])], [out], [src])


def f32(*shape):
    return Value("f32", tuple(shape))


def test_fit_is_proven_not_guessed():
    x = f32(B, S)
    a, b, c, d, e = f32(B, S), f32(B, S, S), f32(B, S), f32(B, S, S), f32(B)
    out = f32(B)
    ks = [kernel("a", a, x), kernel("b", b, a), kernel("c", c, b), kernel("d", d, c),
          kernel("e", e, d), kernel("out", out, e)]
    plan = plan_memory(fake_program(ks, [out])).memory
    slot = {name: plan.assignment[v.id] for name, v in zip("abcde", (a, b, c, d, e))}
    assert slot["c"] == slot["a"] and slot["d"] == slot["b"]   # same sizes, once freed
    assert slot["b"] != slot["a"]        # B*S*S never proven to fit in B*S
    assert slot["e"] not in (slot["a"], slot["b"])  # 4*B > 4*B*S when S == 0: no proof
    assert len(plan.slots) == 3


def test_smallest_fitting_slot_is_preferred():
    x = f32(B, S)
    a, b = Value("f64", (B, S)), f32(B, S)
    c, d = f32(B), f32(B, S)
    out = f32(B, S)
    ks = [kernel("a", a, x), kernel("b", b, x), kernel("c", c, a, b), kernel("d", d, c),
          kernel("out", out, d)]
    plan = plan_memory(fake_program(ks, [out])).memory
    assert plan.assignment[d.id] == plan.assignment[b.id]    # 4*B*S, not the 8*B*S slot
    assert plan.assignment[c.id] not in (plan.assignment[a.id], plan.assignment[b.id])


def test_kernel_never_writes_the_slot_it_reads():
    x = f32(64)
    a, b, c, out = f32(64), f32(64), f32(64), f32(64)
    ks = [kernel("a", a, x), kernel("b", b, a), kernel("c", c, b), kernel("out", out, c)]
    plan = plan_memory(fake_program(ks, [out])).memory
    assert plan.assignment[a.id] != plan.assignment[b.id]
    assert plan.assignment[c.id] == plan.assignment[a.id]
    assert plan.slots[0].size == 256 and plan.arena_bytes == 512


def test_aliases_extend_their_root_and_results_keep_it_to_the_end():
    x = f32(B, 8)
    a, r1, r2 = f32(B, 8), f32(B, 2, 4), f32(B * 8)
    b, c, d, out = f32(B, 8), f32(B, 8), f32(B, 8), f32(B)
    ks = [kernel("a", a, x), alias("r1", r1, a), alias("r2", r2, r1), kernel("b", b, x),
          kernel("c", c, b, r2), kernel("d", d, c), kernel("out", out, d)]
    prog = plan_memory(fake_program(ks, [out, r1]))
    plan = prog.memory
    assert set(plan.assignment) == {a.id, b.id, c.id, d.id}    # aliases have no buffer
    assert alias_roots(prog)[r2.id] is a
    assert plan.live[a.id] == (0, len(ks))                    # returned through r1
    assert plan.assignment[a.id] not in {plan.assignment[v.id] for v in (b, c, d)}
    assert plan.assignment[d.id] == plan.assignment[b.id]
    assert plan.slots[0].size == buffer_bytes(a)


def test_rounding_to_64_bytes():
    x = f32(B)
    a, b, out = f32(B, 16), f32(B, 3), f32(B)
    ks = [kernel("a", a, x), kernel("b", b, a), kernel("out", out, b)]
    plan = plan_memory(fake_program(ks, [out])).memory
    assert plan.slots[0].size == 64 * B                    # already a multiple: exact
    for n in (0, 1, 5, 16, 17):
        size = ev(plan.slots[1].size, {"B": n})
        assert size % 64 == 0 and 12 * n <= size < 12 * n + 64
    assert plan.slots[1].offset == 64 * B


# ---- (3) properties over real programs --------------------------------------------------------

@pytest.mark.parametrize("name", ALL)
def test_plan_is_sound(name):
    prog, plan = planned(name)
    bufs = intermediates(prog)
    assert set(plan.assignment) == set(bufs)
    # slots tile the arena in order
    offset = 0
    for i, s in enumerate(plan.slots):
        assert s.index == i and s.offset == offset
        offset = offset + s.size
    assert plan.arena_bytes == offset
    # buffers sharing a slot have disjoint live ranges, and each provably fits
    by_slot = {}
    for vid, slot in plan.assignment.items():
        by_slot.setdefault(slot, []).append(vid)
        assert plan.slots[slot].fits(bufs[vid][0])
    pairs = in_place_pairs(prog)
    for vids in by_slot.values():
        spans = sorted((plan.live[v], v) for v in vids)
        for (prev, a), (nxt, b) in zip(spans, spans[1:]):
            assert prev[1] < nxt[0] or (prev[1] == nxt[0] and (a, b) in pairs), spans
    for env in random_envs(prog):
        for vid, slot in plan.assignment.items():
            assert ev(buffer_bytes(bufs[vid][0]), env) <= ev(plan.slots[slot].size, env)
            assert ev(plan.slots[slot].size, env) % 64 == 0


@pytest.mark.parametrize("name", ALL)
def test_simulated_run_reads_what_was_written(name):
    """Replay the kernels with slot owners: every read finds its own buffer still in its slot."""
    prog, plan = planned(name)
    roots = alias_roots(prog)
    owner = {}
    for k in prog.kernels:
        if k.kind == "alias":
            continue
        read = {plan.assignment[r.id] for r in (roots.get(v.id, v) for v in k.inputs)
                if r.id in plan.assignment}
        for v in k.inputs:
            r = roots.get(v.id, v)
            if r.id in plan.assignment:
                assert owner[plan.assignment[r.id]] == r.id, (k.name, r)
        written = [plan.assignment[v.id] for v in k.outputs if v.id in plan.assignment]
        over = {plan.assignment[x] for x, v in in_place_pairs(prog) if v in
                {o.id for o in k.outputs}}     # written in place over an input that dies here
        assert len(set(written)) == len(written) and set(written) & read <= over, k.name
        for v in k.outputs:
            if v.id in plan.assignment:
                owner[plan.assignment[v.id]] = v.id
    for v in prog.body.results:   # copied out by the launcher after the last kernel
        r = roots.get(v.id, v)
        if r.id in plan.assignment:
            assert owner[plan.assignment[r.id]] == r.id


def test_reshaped_results_keep_their_root_alive():
    prog, plan = planned("reshaped")
    roots = alias_roots(prog)
    kept = [roots[v.id] for v in prog.body.results if v.id in roots]
    kept = [r for r in kept if r.id in plan.assignment]
    assert kept and all(plan.live[r.id][1] == len(prog.kernels) for r in kept)


def test_plan_is_deterministic_and_described():
    wl = W.workloads()["W1"]
    args = wl.make_args(2, 3, np.random.default_rng(0))
    one = plan_memory(to_ir(wl.fn, wl.dynamic_axes, *args)).memory
    two = plan_memory(to_ir(wl.fn, wl.dynamic_axes, *args)).memory
    assert one.describe() == two.describe()
    assert list(one.assignment.values()) == list(two.assignment.values())
    lines = one.describe()
    assert len(lines) == len(one.slots) + 1
    assert lines[0].startswith("slot 0: size ") and "jd_k" in lines[0]
    assert lines[-1].startswith(f"arena: {one.arena_bytes} bytes")


# ---- (4) in place: an elementwise kernel writes over the input that dies at it -----------------

def _ir(fn, *shapes):
    return to_ir(fn, tuple({0: "N"} if i == 0 else None for i in range(len(shapes))),
                 *(np.ones(s, np.float32) for s in shapes))


def _in_place_kernels(prog):
    written = {v for _, v in in_place_pairs(prog)}
    return {k.name for k in prog.kernels if k.outputs and k.outputs[0].id in written}


def test_bias_and_gelu_after_a_gemm_write_over_its_output():
    prog, plan = planned("W3-gelu")
    (x, v), = in_place_pairs(prog)
    k = next(k for k in prog.kernels if k.outputs[0].id == v)
    assert k.kind == "loop" and "tanh" in k.name and k.writes_over == {x}
    # [N, 2048] once, the GELU in place; the second bias is its GEMM's epilogue, which writes
    # the result
    assert plan.arena_bytes == 8192 * symbolic.var("N")
    assert any(name.endswith("(in place)") for s in plan.slots for name in s.buffers)


def test_an_input_written_over_is_passed_as_null(tmp_path):
    """The kernel reads an input it writes over through its output pointer: the launcher
    passes NULL for the input's own parameter, so no two `restrict` parameters get one array
    (GCC's -Wrestrict warned at each such call), and a read through it could not go unseen."""
    import subprocess
    from jdisc.custom_calls import compiler
    from jdisc.lowering import units
    from jdisc.lowering.codegen import generate
    source = generate(program("W3-gelu")).source
    assert "(d_N, ((float *)ins[0]), NULL, ((float *)(arena + ((int64_t)0))))" in source
    (_, _, text), = [u for u in units.split(source) if u[0] == "launcher"]
    path = tmp_path / "launcher.c"
    path.write_text(text)
    flags = [f for f in compiler.compile_flags() if f not in ("-shared",)]
    run = subprocess.run([*compiler.compiler_command(), *flags, "-Werror=restrict", "-c",
                          str(path), "-o", str(tmp_path / "launcher.o")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("fn, why", [
    (lambda x, w: jnp.tanh(x @ w) @ w, None),      # the control: in place
    (lambda x, w: (jax.nn.relu(x @ w) @ w) * (x @ w), "read again later"),
    (lambda x, w: jnp.tanh(x @ w)[::-1] @ w, "read reversed"),
    (lambda x, w: (jnp.tanh(x @ w) * (x @ w)[:1]) @ w, "also read broadcast"),
    (lambda x, w: ((x @ w) * 2).astype(jnp.float16) @ w.astype(jnp.float16), "another dtype"),
    (lambda x, w: (jnp.tanh(x @ w) - jnp.tanh(x @ w).sum(-1, keepdims=True)) @ w, "reduced"),
])
def test_a_kernel_writes_over_only_what_it_reads_at_the_index_it_writes(fn, why):
    # each candidate's output is an intermediate (another GEMM reads it), so only how the
    # kernel reads the GEMM's output decides
    prog = plan_memory(_ir(fn, (5, 4), (4, 4)))
    assert bool(_in_place_kernels(prog)) == (why is None), why


def test_results_and_inputs_are_never_written_over():
    # the first elementwise kernel reads the program's input and the second writes a result:
    # neither buffer is in the arena
    prog = plan_memory(_ir(lambda x, w: jnp.tanh(x * 2) @ w + 1, (5, 4), (4, 4)))
    assert not in_place_pairs(prog)
