"""stablehlo.sort: a stable bottom-up merge sort per slice, O(n log n), any comparator.

The comparator region is rendered as a C function of two element positions; a permutation of
each slice is sorted with it, then applied to every operand. Slices are independent and run in
parallel when there are many.
"""

from __future__ import annotations

from typing import Callable

from jdisc.dynamic_passes.algebra.symbolic import Dim, prod
from jdisc.dynamic_passes.passes.fusion import Kernel
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext, Renderer, loop_nest, render_body


def emit_comparator(w: CWriter, kernel: Kernel, inputs: dict[int, str], params: list[str],
                    dim: Callable[[Dim], str]) -> str:
    """`static int <kernel>_less(..., a, b)`: the comparator applied to positions a and b."""
    op = kernel.root
    name = f"{kernel.name}_less"
    args = [f"const {ctype(x.dtype)} *restrict p{m}" for m, x in enumerate(op.operands)]
    with w.block(f"static inline int {name}({', '.join(args)}, int64_t a, int64_t b)"):
        r = Renderer(w, {}, dim)
        values = []
        for m in range(len(op.operands)):
            values += [f"p{m}[a]", f"p{m}[b]"]
        (result,) = render_body(w, r, op.regions[0], values)
        w(f"return {result} != 0;")
    return name


def emit_sort(ctx: KernelContext) -> None:
    (w, kernel, inputs, outputs, dim, _), less = ctx.unpack(), ctx.less
    op = kernel.root
    d = op.attrs["dimension"]
    shape = op.operands[0].shape
    ins = []
    # operands computed inside the kernel (e.g. the iota of an argsort) are filled first
    computed = [x for x in op.operands if x.id not in inputs]
    for m, x in enumerate(computed):
        w(f"{ctype(x.dtype)} *opnd{m} = ({ctype(x.dtype)} *)malloc(sizeof({ctype(x.dtype)}) * "
          f"(size_t)({dim(x.num_elements())}) + 1);")
    if computed:
        with w.block(f"if ({' || '.join(f'!opnd{m}' for m in range(len(computed)))})"):
            for m in range(len(computed)):
                w(f"free(opnd{m});")
            w("return 1;")
    r = Renderer(w, inputs, dim)
    for m, x in enumerate(computed):
        idx, close = loop_nest(w, x.shape, dim)
        w(f"opnd{m}[{r.linear(idx, x.shape)}] = {r.load(x, idx)};")
        close()
    names = {x.id: f"opnd{m}" for m, x in enumerate(computed)}
    ins = [inputs.get(x.id) or names[x.id] for x in op.operands]
    w(f"const int64_t n_outer = {dim(prod(shape[:d]))}, len = {dim(shape[d])}, "
      f"n_inner = {dim(prod(shape[d + 1:]))};")
    w("int failed = 0;")
    shares = [("int64_t", "n_outer", dim(prod(shape[:d]))), ("int64_t", "len", dim(shape[d])),
              ("int64_t", "n_inner", dim(prod(shape[d + 1:])))]
    shares += [(f"{ctype(x.dtype)} *", f"opnd{m}") for m, x in enumerate(computed)]
    w.parallel("n_outer * n_inner", "n_outer * n_inner > 64 && n_outer * n_inner * len >= 262144",
               shares, failed="failed")
    with w.block(""):
        w("int64_t *perm = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * len) + 1);")
        w("if (!perm) failed = 1;")
        with w.block("for (int64_t s = jd_lo; s < (perm ? jd_hi : jd_lo); s++)"):
            w("const int64_t base = (s / n_inner) * len * n_inner + s % n_inner;")
            w("int64_t *src = perm, *dst = perm + len;")
            w("for (int64_t k = 0; k < len; k++) src[k] = base + k * n_inner;")
            with w.block("for (int64_t width = 1; width < len; width *= 2)"):
                with w.block("for (int64_t lo = 0; lo < len; lo += 2 * width)"):
                    w("int64_t mid = lo + width < len ? lo + width : len;")
                    w("int64_t hi = lo + 2 * width < len ? lo + 2 * width : len;")
                    w("int64_t i = lo, j = mid, k = lo;")
                    w("/* stable: take from the right run only when it is strictly less */")
                    w(f"while (i < mid && j < hi) dst[k++] = {less}({', '.join(ins)}, src[j], "
                      f"src[i]) ? src[j++] : src[i++];")
                    w("while (i < mid) dst[k++] = src[i++];")
                    w("while (j < hi) dst[k++] = src[j++];")
                w("int64_t *t = src; src = dst; dst = t;")
            with w.block("for (int64_t k = 0; k < len; k++)"):
                for x_in, out in zip(ins, outputs):
                    w(f"{out}[base + k * n_inner] = {x_in}[src[k]];")
        w("free(perm);")
    for m in range(len(computed)):
        w(f"free(opnd{m});")
    w("return failed;")
