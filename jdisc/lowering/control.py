"""Host control flow in the launcher: `while`, `if`, `case` as C around region functions.

Each region of a control op is a compiled sub-program with its own C function

    static int jd_<region>(const int64_t *dims, void *const *ins, void *const *outs,
                           char *arena, char *err, int64_t errlen)

(the same shape as `jd_run`, with the caller's arena). The control op itself is emitted inline
in its parent's run function: a C loop or switch that reads the condition / branch index from
memory on the host and calls the region functions. Nothing is interpreted between iterations.

A `while` keeps two buffers per carried value: the body reads one and writes the other, and the
two are swapped (pointers, not bytes) after every iteration. Carried values the body changes
in place have one buffer, which the body updates where it lies: through a
`dynamic_update_slice` (jax's `scan` outputs; an `update` kernel), a scatter (no copy of its
operand), or an inner loop that starts on the buffer (control_flow.py).
"""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.algebra.symbolic import Dim
from jdisc.dynamic_passes.passes.control_flow import scratch_layout
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.launcher import buffer_bytes
from jdisc.lowering.loops import KernelContext
from jdisc.lowering.names import c_comment

CONTROL_KINDS = ("while", "if", "case")
REGION_PARAMS = ("const int64_t *restrict dims, void *const *restrict ins, "
                 "void *const *restrict outs, char *restrict arena, char *err, int64_t errlen")


def region_function(name: str) -> str:
    return f"jd_{name}"


def _call(sub, ins: str, outs: str, arena: str) -> str:
    return f"{region_function(sub.name)}(dims, {ins}, {outs}, {arena}, err, errlen)"


def emit_control(w: CWriter, k: Kernel, buffers: dict[int, str],
                 dim: Callable[[Dim], str]) -> None:
    """The control op of kernel `k`, inline in its parent's run function."""
    op = k.root
    regions = ", ".join(sub.name for sub in op.programs)
    w(f"/* stablehlo.{op.name} at {c_comment(op.loc)}: regions {regions} */")
    with w.block(""):
        scratch = buffers[op.results[-1].id]
        offsets, arena_at, _ = scratch_layout(op)
        w(f"char *const scratch = (char *)({scratch});")
        w(f"char *const region_arena = scratch + {dim(arena_at)};")
        if op.name == "while":
            _emit_while(w, op, buffers, dim, offsets)
        else:
            _emit_branches(w, op, buffers)


def _emit_while(w: CWriter, op, buffers, dim, offsets: dict[int, Dim]) -> None:
    cond, body = op.programs
    results = op.results[:-1]
    n = len(results)
    captures = op.operands[n:]
    nin = max(n + len(captures), 1)
    w(f"void *cur[{max(n, 1)}], *nxt[{max(n, 1)}], *rin[{nin}];")
    for i, (r, init) in enumerate(zip(results, op.operands)):
        mine = buffers[r.id]
        nxt = f"scratch + {dim(offsets[i])}" if i in offsets else mine
        how = "swapped each iteration" if i in offsets else "updated in place"
        w(f"cur[{i}] = (void *)({mine}); nxt[{i}] = (void *)({nxt});   /* carried {i}: {how} */")
        # an inner loop of a body that updates the buffer in place starts on it (control_flow.py)
        w(f"if (cur[{i}] != (void *)({buffers[init.id]})) "
          f"jd_copy(cur[{i}], {buffers[init.id]}, {buffer_bytes(r, dim)});")
    for j, c in enumerate(captures):
        w(f"rin[{n + j}] = (void *)({buffers[c.id]});")
    with w.block("for (;;)"):
        for i in range(n):
            w(f"rin[{i}] = cur[{i}];")
        w(f"{ctype('i1')} go = 0;")
        w("void *go_out[1] = {&go};")
        with w.block(f"if ({_call(cond, 'rin', 'go_out', 'region_arena')})"):
            w("status = 1;")
            w("goto done;")
        w("if (!go) break;")
        with w.block(f"if ({_call(body, 'rin', 'nxt', 'region_arena')})"):
            w("status = 1;")
            w("goto done;")
        for i in offsets:
            w(f"{{ void *t = cur[{i}]; cur[{i}] = nxt[{i}]; nxt[{i}] = t; }}")
    for i, r in enumerate(results):
        if i in offsets:
            w(f"if (cur[{i}] != (void *)({buffers[r.id]})) "
              f"jd_copy({buffers[r.id]}, cur[{i}], {buffer_bytes(r, dim)});")


def _emit_branches(w: CWriter, op, buffers) -> None:
    results = op.results[:-1]
    selector = op.operands[0]
    captures = op.operands[1:]
    nb = len(op.programs)
    if op.name == "if":   # regions: then, else
        w(f"const int64_t branch = *(const {ctype(selector.dtype)} *)({buffers[selector.id]}) "
          f"? 0 : 1;")
    else:                 # case: an index out of range takes the last branch
        w(f"int64_t branch = (int64_t)*(const {ctype(selector.dtype)} *)"
          f"({buffers[selector.id]});")
        w(f"if (branch < 0 || branch >= {nb}) branch = {nb - 1};")
    w(f"void *rin[{max(len(captures), 1)}] = {{"
      + (", ".join(f"(void *)({buffers[c.id]})" for c in captures) or "0") + "};")
    w(f"void *rout[{max(len(results), 1)}] = {{"
      + (", ".join(f"(void *)({buffers[r.id]})" for r in results) or "0") + "};")
    with w.block("switch (branch)"):
        for b, sub in enumerate(op.programs):
            w(f"case {b}: status = {_call(sub, 'rin', 'rout', 'region_arena')}; break;")
    w("if (status) goto done;")


def emit_update(ctx: KernelContext) -> None:
    """In-place dynamic_update_slice: copy the update into the window of the carried buffer
    (`out`, which is also the operand); start indices clamped as StableHLO specifies."""
    w, k, inputs, out, dim = ctx.w, ctx.kernel, ctx.inputs, ctx.outputs[0], ctx.dim
    op = k.root
    x, upd, starts = op.operands[0], op.operands[1], op.operands[2:]
    r = x.rank
    if r == 0:
        w(f"{out}[0] = {inputs[upd.id]}[0];")
        return
    for j, (s, d, u) in enumerate(zip(starts, x.shape, upd.shape)):
        w(f"int64_t s{j} = (int64_t){inputs[s.id]}[0];")
        w(f"const int64_t hi{j} = (int64_t)({dim(d)}) - (int64_t)({dim(u)});")
        w(f"s{j} = s{j} > hi{j} ? hi{j} : s{j}; s{j} = s{j} < 0 ? 0 : s{j};")
    row = dim(upd.shape[-1])
    rows = " * ".join(f"(int64_t)({dim(u)})" for u in upd.shape[:-1]) or "1"
    w(f"const int64_t nrows = {rows};")
    with w.block("for (int64_t row = 0; row < nrows; row++)"):
        w("int64_t rest = row, at = 0, stride = 1;")
        w(f"at += s{r - 1};")
        w(f"stride *= (int64_t)({dim(x.shape[-1])});")
        for j in range(r - 2, -1, -1):
            w(f"at += (s{j} + rest % (int64_t)({dim(upd.shape[j])})) * stride; "
              f"rest /= (int64_t)({dim(upd.shape[j])}); stride *= (int64_t)({dim(x.shape[j])});")
        w(f"jd_copy({out} + at, {inputs[upd.id]} + row * (int64_t)({row}), "
          f"(size_t)({row}) * sizeof(*{out}));")
