"""stablehlo.scatter: copy the operand into the result, then apply the update computation for
every update element whose target lies inside the operand (others are skipped, as the spec
says). Sequential in update order, so repeated indices combine deterministically. A masked
scatter (a fourth operand, of the operand's shape or a scalar: passes/simplify.py) applies an
update only where the mask, at the element it targets, is `mask_when`. A scatter of a loop's
carried buffer that the loop updates in place (control_flow.py) finds the operand in the
result's buffer: no copy."""

from __future__ import annotations


from jdisc.lowering.cdtype import ctype
from jdisc.lowering.loops import KernelContext, Renderer, loop_nest, operand_index, render_body


def emit_scatter(ctx: KernelContext) -> None:
    w, kernel, inputs, outputs, dim, _ = ctx.unpack()
    op = kernel.root
    x, indices, upd = op.operands[:3]
    mask = op.operands[3] if len(op.operands) == 4 else None     # simplify.py's masked scatter
    out = op.results[0]
    dn = op.attrs["scatter_dimension_numbers"]
    ivd = dn["index_vector_dim"]
    r = Renderer(w, inputs, dim)
    t = ctype(out.dtype)
    if op.attrs.get("in_place"):     # a loop's carried buffer (control_flow.py)
        w("/* in place: the result's buffer holds the operand already */")
    else:
        w(f"jd_copy({outputs[0]}, {inputs[x.id]}, sizeof({t}) * (size_t)"
          f"({dim(x.num_elements())}));")
    uidx, close = loop_nest(w, upd.shape, dim, prefix="u")
    scatter_dims = [d for d in range(upd.rank) if d not in dn["update_window_dims"]]
    sidx = [uidx[d] for d in scatter_dims]
    full = operand_index(
        r, x.rank, indices, ivd, sidx, uidx, dn["scatter_dims_to_operand_dims"],
        zip(dn["input_batching_dims"], dn["scatter_indices_batching_dims"]),
        set(dn["inserted_window_dims"]) | set(dn["input_batching_dims"]),
        dn["update_window_dims"], lambda dim_k, where, s: f"(int64_t){s}")
    for d in range(x.rank):
        w(f"const int64_t p{d} = {full[d]};")
    inside = " && ".join(f"p{d} >= 0 && p{d} < {dim(x.shape[d])}" for d in range(x.rank))
    with w.block(f"if ({inside or '1'})"):
        lin = "0"
        for d in range(x.rank):
            lin = f"({lin}) * {dim(x.shape[d])} + p{d}" if d else f"p{d}"
        w(f"const int64_t at = {lin};")
        if mask is not None:         # the update goes through where the mask says so
            m = f"{inputs[mask.id]}[{'at' if mask.rank else '0'}]"
            w.open(f"if ({m if op.attrs['mask_when'] else '!' + m})")
        val = r.load(upd, uidx)
        (new,) = render_body(w, r, op.regions[0], [f"{outputs[0]}[at]", val])
        w(f"{outputs[0]}[at] = {new};")
        if mask is not None:
            w.close()
    close()


def emit_select_and_scatter(ctx: KernelContext) -> None:
    """For each window of the operand, the element the select region prefers receives the
    window's source value through the scatter region; everything else keeps the init value."""
    w, kernel, inputs, outputs, dim, _ = ctx.unpack()
    op = kernel.root
    x, source, init = op.operands
    out = op.results[0]
    a = op.attrs
    r = Renderer(w, inputs, dim)
    t = ctype(out.dtype)
    strides = a.get("window_strides") or (1,) * x.rank
    pad = a.get("padding") or (0,) * (2 * x.rank)
    w(f"const {t} init = {r.load(init, ())};")
    w(f"for (int64_t i = 0; i < {dim(x.num_elements())}; i++) {outputs[0]}[i] = init;")
    sidx, close = loop_nest(w, source.shape, dim, prefix="s")
    w("int64_t best = -1;")
    w(f"{ctype(x.dtype)} best_val = 0;")
    widx, close_w = loop_nest(w, a["window_dimensions"], dim, prefix="w")
    # strides and padding may be symbolic (SAME pooling of a dynamic dim)
    pos = [f"({sidx[d]} * {dim(strides[d])} + {widx[d]} - {dim(pad[2 * d])})"
           for d in range(x.rank)]
    inside = " && ".join(f"{p} >= 0 && {p} < {dim(x.shape[d])}" for d, p in enumerate(pos))
    with w.block(f"if ({inside or '1'})"):
        lin = pos[0] if pos else "0"
        for d in range(1, x.rank):
            lin = f"({lin}) * {dim(x.shape[d])} + {pos[d]}"
        w(f"const int64_t at = {lin};")
        w(f"const {ctype(x.dtype)} v = {inputs[x.id]}[at];")
        (keep,) = render_body(w, r, op.regions[0], ["best_val", "v"])
        with w.block(f"if (best < 0 || !({keep}))"):
            w("best = at; best_val = v;")
    close_w()
    with w.block("if (best >= 0)"):
        val = r.load(source, sidx)
        (new,) = render_body(w, r, op.regions[1], [f"{outputs[0]}[best]", val])
        w(f"{outputs[0]}[best] = {new};")
    close()
