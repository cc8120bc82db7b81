"""Fast tier: the plan checker (plan_check.py) accepts the plans jdisc makes and catches
deliberately broken ones: a bad kernel order, a merge that reorders a dependency, a slot shared
by live buffers, a buffer that overflows its slot, out-of-bounds index maps."""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jdisc
from jdisc.dynamic_passes import pipeline
from jdisc.dynamic_passes.passes import fusion
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.dynamic_passes.passes.plan_check import (check_index_maps, check_memory, check_plan,
                                                    check_schedule)
from jdisc.errors import CompileError
from conftest import to_ir
from shape_rule_programs import SHAPE_RULE_PROGRAMS


def _raises(prog, *words, recursive=False):
    with pytest.raises(CompileError) as info:
        check_plan(prog, recursive=recursive)
    msg = str(info.value)
    assert "internal compiler error" in msg and info.value.stage == "plan check"
    for w in words:
        assert w in msg, msg
    return msg


def _kernel_of(prog, op_name):
    return next(i for i, k in enumerate(prog.kernels) if any(o.name == op_name for o in k.ops
                                                              if not fusion.is_duplicable(o)))


# ---------------------------------------------------------------------------- bug 2

def _bug2(x, d):
    return jnp.sum(x - jnp.sum(x, 0, keepdims=True) / d, 0, keepdims=True) / d


def _bug2_prog():
    return to_ir(_bug2, ({0: "b"}, None), np.ones((4, 3), np.float32),
                 np.ones((1, 3), np.float32))


def test_bug2_plan_is_valid():
    """The sibling merge once put both divides in one kernel, run before the reduce between
    them (fixed in fusion.py: it now checks what a kernel reads through the broadcasts it
    recomputes)."""
    check_plan(_bug2_prog())
    f = jdisc.jit(_bug2, dynamic_axes=({0: "b"}, None))
    x, d = np.arange(12, dtype=np.float32).reshape(4, 3), np.full((1, 3), 2, np.float32)
    np.testing.assert_allclose(np.asarray(f(x, d)), np.asarray(_bug2(x, d)), rtol=1e-6)


@pytest.mark.fast
def test_bug2_merge_that_reorders_a_dependency_is_caught():
    prog = _bug2_prog()
    divides = [i for i, k in enumerate(prog.kernels) if k.root.name == "divide"]
    assert len(divides) == 2
    first, second = (prog.kernels[i] for i in divides)
    ops = sorted(first.ops + [o for o in second.ops if o not in first.ops],
                 key=[o for o in prog.body.ops].index)
    merged = Kernel("jd_k1_divide_divide", "loop", ops, first.outputs + second.outputs,
                    fusion.inputs_of(ops))
    prog.kernels = [k for i, k in enumerate(prog.kernels) if i not in divides]
    prog.kernels.insert(divides[0], merged)
    msg = _raises(prog, "jd_k1_divide_divide", "before", "not a valid schedule",
                  "stablehlo.reduce")
    assert "jd_k2_subtract_reduce" in msg


# ---------------------------------------------------------------------------- schedule

def _chain(x):
    return jnp.tanh(x).sum(-1, keepdims=True) * jnp.exp(x).max()


def _chain_prog():
    return to_ir(_chain, ({0: "n", 1: "m"},), np.ones((3, 4), np.float32))


@pytest.mark.fast
def test_real_plans_are_accepted():
    for prog in (_chain_prog(), _bug2_prog()):
        assert check_schedule(prog) == [] and check_memory(prog) == []
        assert check_index_maps(prog) == []


@pytest.mark.fast
def test_swapped_kernels_are_caught():
    prog = _chain_prog()
    assert len(prog.kernels) >= 2
    last = len(prog.kernels) - 1
    prog.kernels[0], prog.kernels[last] = prog.kernels[last], prog.kernels[0]
    _raises(prog, "before", "writes it", "not a valid schedule")


@pytest.mark.fast
def test_value_computed_but_never_written_is_caught():
    prog = _chain_prog()
    k = prog.kernels[0]
    prog.kernels[0] = dataclasses.replace(k, outputs=[])
    _raises(prog, "computes it but never writes it")


@pytest.mark.fast
def test_unwritten_program_output_is_caught():
    prog = _chain_prog()
    prog.kernels.pop()
    _raises(prog, "program output 0", "never written")


@pytest.mark.fast
def test_undeclared_input_is_caught():
    prog = _chain_prog()
    k = prog.kernels[-1]
    prog.kernels[-1] = dataclasses.replace(k, inputs=k.inputs[1:])
    _raises(prog, "neither computes nor takes as an input")


@pytest.mark.fast
def test_two_writers_are_caught():
    prog = _chain_prog()
    k = prog.kernels[0]
    prog.kernels.insert(1, dataclasses.replace(k, name="jd_copy_of_k0"))
    _raises(prog, "written by two kernels", "jd_copy_of_k0")


# ---------------------------------------------------------------------------- memory

def _two_live(x):
    a = jnp.exp(x).sum(0)           # a reduce: a buffer ...
    b = jnp.tanh(x).max(0)          # ... and another one, both read by the last kernel
    return jnp.concatenate([a, b]) * (a + b).sum()


def _two_live_prog():
    prog = to_ir(_two_live, ({0: "n", 1: "m"},), np.ones((3, 4), np.float32))
    assert len(prog.memory.slots) >= 2 and check_memory(prog) == []
    return prog


def _with_memory(prog, **changes):
    prog.memory = dataclasses.replace(prog.memory, **changes)
    return prog


@pytest.mark.fast
def test_slot_shared_by_live_buffers_is_caught():
    prog = _two_live_prog()
    one_slot = {vid: 0 for vid in prog.memory.assignment}
    _raises(_with_memory(prog, assignment=one_slot), "slot 0", "shared by", "both live")


@pytest.mark.fast
def test_buffer_larger_than_its_slot_is_caught():
    prog = _two_live_prog()
    slots = list(prog.memory.slots)
    slots[0] = dataclasses.replace(slots[0], size=8, raw=8)
    _raises(_with_memory(prog, slots=tuple(slots)), "not provably enough")


@pytest.mark.fast
def test_overlapping_slots_are_caught():
    prog = _two_live_prog()
    slots = list(prog.memory.slots)
    slots[1] = dataclasses.replace(slots[1], offset=slots[0].offset)
    _raises(_with_memory(prog, slots=tuple(slots)), "slot 1", "may overlap")


@pytest.mark.fast
def test_buffer_without_a_slot_is_caught():
    prog = _two_live_prog()
    assignment = dict(prog.memory.assignment)
    assignment.popitem()
    _raises(_with_memory(prog, assignment=assignment), "has no arena slot")


# ---------------------------------------------------------------------------- index maps

def _op(prog, name):
    return next(op for k in prog.kernels for op in k.ops if op.name == name)


@pytest.mark.fast
def test_out_of_bounds_slice_is_caught():
    prog = to_ir(lambda x: jax.lax.slice(x, (1,), (x.shape[0],)) * 2, ({0: "n"},),
                 np.ones(5, np.float32))
    check_plan(prog)
    sl = _op(prog, "slice")
    sl.attrs["start_indices"] = (2,)      # reads x[2 : n + 1]: one past the end
    _raises(prog, "stablehlo.slice", "the last index read", "unproven")


@pytest.mark.fast
def test_slice_past_a_static_dim_is_disproven():
    prog = to_ir(lambda x: jax.lax.slice(x, (0, 1), (2, 3)) * 2, None,
                 np.ones((2, 4), np.float32))
    check_plan(prog)
    sl = _op(prog, "slice")
    sl.attrs["start_indices"] = (0, 3)
    sl.attrs["limit_indices"] = (sl.attrs["limit_indices"][0], 5)
    _raises(prog, "stablehlo.slice", "axis 1", "disproven")


@pytest.mark.fast
def test_dynamic_slice_larger_than_its_operand_is_caught():
    prog = to_ir(lambda x, i: jax.lax.dynamic_slice(x, (i,), (2,)) + 1, ({0: "n"}, None),
                 np.ones(5, np.float32), np.int32(1), constraints=("n >= 2",))
    check_plan(prog)
    ds = _op(prog, "dynamic_slice")
    ds.attrs["slice_sizes"] = (3,)
    _raises(prog, "stablehlo.dynamic_slice", "slice size", "3 <= n")


@pytest.mark.fast
def test_broadcast_without_its_check_is_caught():
    # an operand dim broadcast to a bigger result dim must be 1 (or checked to be 1 or equal)
    prog = to_ir(lambda x, y: x[None, :] + y[:, None], ({0: "n"}, {0: "m"}),
                 np.ones(3, np.float32), np.ones(4, np.float32))
    check_plan(prog)
    bc = next(op for k in prog.kernels for op in k.ops if op.name == "broadcast_in_dim"
              and op.operands[0].rank == 1 and op.attrs["broadcast_dimensions"] == (1,))
    x = bc.operands[0]
    x.shape = (x.shape[0] - 1,)       # now [n - 1] read at indices up to n - 1
    _raises(prog, "stablehlo.broadcast_in_dim", "unproven")


@pytest.mark.fast
def test_transpose_of_the_wrong_shape_is_caught():
    prog = to_ir(lambda x: x.T * 2, ({0: "n"},), np.ones((3, 4), np.float32))
    check_plan(prog)
    tr = _op(prog, "transpose")
    tr.results[0].shape = (tr.results[0].shape[0] + 1, tr.results[0].shape[1])
    _raises(prog, "stablehlo.transpose")


# ---------------------------------------------------------------------------- regions, hook

def _loop(x):
    def body(i, c):
        return jnp.tanh(jnp.sort(c)) * 2      # a sort kernel, then a loop kernel reading it
    return jax.lax.fori_loop(0, 3, body, x)


@pytest.mark.fast
def test_region_programs_are_checked():
    prog = to_ir(_loop, ({0: "n"},), np.ones(4, np.float32))
    check_plan(prog, recursive=True)
    op = next(k.root for k in prog.kernels if k.kind == "while")
    body = op.programs[1]
    at = next(i for i, k in enumerate(body.kernels) if k.kind == "sort")
    body.kernels.append(body.kernels.pop(at))
    _raises(prog, "before", recursive=True)
    check_plan(prog)      # the top level alone is fine


@pytest.mark.fast
def test_pipeline_runs_the_checker_when_asked(monkeypatch):
    at = [p.__name__ for p in pipeline.PASSES].index("plan_memory")
    original = pipeline.PASSES[at]

    def reuse_everything(prog):   # a memory planner that puts every buffer in slot 0
        prog = original(prog)
        prog.memory = dataclasses.replace(
            prog.memory, assignment={vid: 0 for vid in prog.memory.assignment})
        return prog

    reuse_everything.__name__ = "plan_memory"
    pipeline.PASSES[at] = reuse_everything
    try:
        monkeypatch.setenv("JDISC_CHECK_PLAN", "1")
        with pytest.raises(CompileError, match="shared by"):
            to_ir(_two_live, ({0: "n", 1: "m"},), np.ones((3, 4), np.float32))
        f = jdisc.jit(_two_live, dynamic_axes=({0: "n", 1: "m"},), fallback="xla")
        x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
        with pytest.warns(UserWarning, match="CompileError"):
            np.testing.assert_allclose(np.asarray(f(x)), np.asarray(_two_live(x)), rtol=1e-5)
        monkeypatch.setenv("JDISC_CHECK_PLAN", "0")
        to_ir(_two_live, ({0: "n", 1: "m"},), np.ones((3, 4), np.float32))   # not checked
    finally:
        pipeline.PASSES[at] = original


@pytest.mark.fast
def test_checker_is_fast_on_a_long_program():
    def long_chain(x):
        for i in range(300):
            x = jnp.tanh(x * 1.01 + i).sum(-1, keepdims=True) * x if i % 3 == 0 else \
                jnp.sin(x) + x[::-1]
        return x
    prog = to_ir(long_chain, ({0: "n", 1: "m"},), np.ones((3, 4), np.float32))
    t0 = time.perf_counter()
    check_plan(prog)
    assert time.perf_counter() - t0 < 5.0


@pytest.mark.fast
def test_division_facts_are_proven():
    from jdisc.dynamic_passes.algebra import symbolic
    from jdisc.dynamic_passes.algebra.constraints import ShapeConstraints
    from jdisc.dynamic_passes.passes.plan_check import division_proves_nonneg
    sc = ShapeConstraints(["h"])
    h = symbolic.var("h")
    for k in (1, 2, 3, 4):      # k*floordiv(h, 4) <= h: the slices of a batch-group split
        assert sc.prove_ge(h, k * symbolic.floordiv(h, 4)) is True     # nonneg_relaxed
        assert division_proves_nonneg(sc, h - k * symbolic.floordiv(h, 4))
    assert sc.prove_ge(h, 5 * symbolic.floordiv(h, 4)) is None
    assert not division_proves_nonneg(sc, h - 5 * symbolic.floordiv(h, 4))
    assert division_proves_nonneg(sc, 3 - symbolic.mod(h, 4))


@pytest.mark.parametrize("name", sorted(SHAPE_RULE_PROGRAMS))
@pytest.mark.fast
def test_shape_rules_check_what_their_kernels_read(name, monkeypatch):
    from jdisc import driver
    monkeypatch.setenv("JDISC_CHECK_PLAN", "1")
    check_plan(driver.compile(SHAPE_RULE_PROGRAMS[name], until="passes").program, recursive=True)


@pytest.mark.fast
def test_in_place_write_over_a_reversed_read_is_caught():
    # a kernel reading the dying buffer reversed must not share its slot, even if it reads
    # that buffer through its output pointer
    prog = to_ir(lambda x, w: (jnp.tanh(x @ w)[::-1] * 2) @ w, ({0: "n"}, None),
                 np.ones((3, 3), np.float32), np.ones((3, 3), np.float32))
    assert check_memory(prog) == []
    dot = _kernel_of(prog, "dot_general")
    k = prog.kernels[dot + 1]
    x, v = prog.kernels[dot].outputs[0], k.outputs[0]
    assert k.kind == "loop" and x in k.inputs and v.id in prog.memory.assignment
    k.writes_over = frozenset({x.id})
    assignment = dict(prog.memory.assignment)
    assignment[v.id] = assignment[x.id]
    _raises(_with_memory(prog, assignment=assignment), "shared by", "both live")


@pytest.mark.fast
def test_in_place_plans_are_accepted():
    prog = to_ir(lambda x, w: jax.nn.relu(x @ w + 1.0) @ w, ({0: "n"}, None),
                 np.ones((3, 3), np.float32), np.ones((3, 3), np.float32))
    assert any(k.writes_over for k in prog.kernels) and check_memory(prog) == []
