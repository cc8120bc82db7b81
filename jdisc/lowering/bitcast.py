"""stablehlo.bitcast_convert between bit widths, when it is not an alias of its operand's buffer.

The result's bytes are the operand's bytes in row-major order (little-endian, as on every
target jdisc runs on): f32[n] -> u8[n, 4] splits each float into its bytes, u8[n, 4] -> f32[n]
joins them. The operand may be computed in the kernel (fused producers), so each operand
element is rendered and copied byte for byte.

i1 counts as one bit (the StableHLO spec; the reference interpreter agrees): i1[..., N] -> an
N-bit type takes bit k from element k along the last axis, and the reverse spreads the bits.
jax has no bool bitcasts; XLA treats a PRED as a byte and refuses or differs there.
"""

from __future__ import annotations


from jdisc.dynamic_passes.ir.dtypes import bit_width
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext, Renderer, parallel_loop_nest


def emit_bitcast(ctx: KernelContext) -> None:
    w, kernel, inputs, outputs, dim, _ = ctx.unpack()
    op = kernel.root
    x, out = op.operands[0], op.results[0]
    r = Renderer(w, inputs, dim)
    if x.dtype == "i1":
        _pack_bits(w, r, x, out, outputs[0], dim)
    elif out.dtype == "i1":
        _unpack_bits(w, r, x, outputs[0], dim)
    else:
        _copy_bytes(w, r, x, outputs[0], dim)


def _copy_bytes(w: CWriter, r: Renderer, x, output: str, dim) -> None:
    size = bit_width(x.dtype) // 8
    w(f"unsigned char *restrict bc_dst = (unsigned char *){output};")
    idx, close = parallel_loop_nest(w, x.shape, dim, shares=[("unsigned char *", "bc_dst",
                                                             f"(unsigned char *){output}")])
    w(f"const {ctype(x.dtype)} bc_val = {r.load(x, idx)};")
    w(f"memcpy(bc_dst + (size_t){size} * ({r.linear(idx, x.shape)}), &bc_val, {size});")
    close()


def _unpack_bits(w: CWriter, r: Renderer, x, output: str, dim) -> None:
    """Each operand element becomes bit_width(x) i1 elements, lowest bit first."""
    n = bit_width(x.dtype)
    u = f"uint{n}_t"
    idx, close = parallel_loop_nest(w, x.shape, dim)
    w(f"const {ctype(x.dtype)} bc_val = {r.load(x, idx)};")
    w(f"{u} bc_bits;")
    w("memcpy(&bc_bits, &bc_val, sizeof bc_bits);")
    w(f"uint8_t *restrict bc_dst = {output} + (size_t){n} * ({r.linear(idx, x.shape)});")
    w(f"for (int k = 0; k < {n}; k++) bc_dst[k] = (uint8_t)((bc_bits >> k) & 1u);")
    close()


def _pack_bits(w: CWriter, r: Renderer, x, out, output: str, dim) -> None:
    """The last operand axis (one i1 per bit, lowest first) becomes one result element."""
    n = bit_width(out.dtype)
    u = f"uint{n}_t"
    idx, close = parallel_loop_nest(w, out.shape, dim)
    w(f"{u} bc_bits = 0;")
    with w.block(f"for (int64_t k = 0; k < {n}; k++)"):
        r.push()
        w(f"bc_bits |= ({u})({r.load(x, idx + ('k',))} != 0) << k;")
        r.pop()
    w(f"memcpy(&{output}[{r.linear(idx, out.shape)}], &bc_bits, sizeof bc_bits);")
    close()
