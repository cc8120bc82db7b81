"""stablehlo.rng_bit_generator: counter-based random bits, bit-exact with XLA:CPU.

XLA expands the op (its RngBitGeneratorExpander) into a counter-based generator; jdisc computes
the same function of (state, element position) directly, so every element is independent, the
loops run in parallel and the size may be symbolic. The state is u64: state[0] is the key.

* PHILOX (also DEFAULT, XLA:CPU's default): Philox-4x32 with 10 rounds. The 128-bit counter is
  (state[1], state[2]) as (low, high) words for a u64[3] state and (state[1], state[0]) for a
  u64[2] state. Block j (counter + j) gives four 32-bit words: element e of a <= 32-bit result is
  word e % 4 of block e / 4 (truncated to the element width); element e of a 64-bit result is
  words (2c, 2c + 1), c = e % 2, of block e / 2, low word first. The new state is the key
  followed by counter + blocks (only its low word for a u64[2] state).
* THREE_FRY: Threefry-2x32 with 20 rounds; the 64-bit counter is state[1], the key's low and
  high words are the two key words. A 64-bit result takes element e from counter + e (low word
  first). A <= 32-bit result pairs up elements along a split axis: the first even-sized axis,
  else the first largest one. Elements 2h and 2h + 1 of that axis (other indices equal) take the
  two words of one counter, numbered row-major over the shape with that axis halved (rounded
  up); a rank-0 result is the first word of counter state[1]. The new state is the key and the
  counter advanced by the number of counters used.

Words become elements by truncation (u8/u16 and 16-bit floats keep the low bits); float results
hold the bits unchanged.
"""

from __future__ import annotations


from jdisc.dynamic_passes.ir.dtypes import bit_width
from jdisc.lowering import c_runtime
from jdisc.lowering.cdtype import ctype
from jdisc.lowering.cwriter import CWriter
from jdisc.lowering.loops import KernelContext, Renderer

# parallel loops only when there are this many blocks of work (a Philox block is ~20 ns)
_PARALLEL_MIN = 4096

C_HELPERS = c_runtime.source("jd_rng.h")


def emit_rng_bit_generator(ctx: KernelContext) -> None:
    w, kernel, inputs, outputs, dim, _ = ctx.unpack()
    op = kernel.root
    state, bits = op.operands[0], op.results[1]
    r = Renderer(w, inputs, dim)
    size = state.shape[0]
    words = [r.load(state, (str(i),)) for i in range(size)]
    algorithm = op.attrs["rng_algorithm"]
    w(f"/* stablehlo.rng_bit_generator, {algorithm}"
      f"{' (Philox on CPU)' if algorithm == 'DEFAULT' else ''}, {bits.dtype} bits */")
    w(f"const uint64_t rng_key = {words[0]};")
    w(f"const int64_t rng_n = {dim(bits.num_elements())};")
    store = _Store(outputs[1], bits.dtype)
    if algorithm == "THREE_FRY":
        w(f"const uint64_t rng_ctr = {words[1]};")
        if bit_width(bits.dtype) == 64:
            used = _threefry_64(w, store)
        else:
            used = _threefry_narrow(w, store, [dim(d) for d in bits.shape])
        w(f"{outputs[0]}[0] = rng_key;")
        w(f"{outputs[0]}[1] = rng_ctr + (uint64_t)({used});")
        return
    w(f"const uint64_t rng_lo = {words[1]}, rng_hi = {words[2] if size == 3 else words[0]};")
    per_block = 2 if bit_width(bits.dtype) == 64 else 4
    w(f"const int64_t rng_blocks = (rng_n + {per_block - 1}) / {per_block};")
    _philox(w, store, per_block)
    w(f"{outputs[0]}[0] = rng_key;")
    w(f"{outputs[0]}[1] = rng_lo + (uint64_t)rng_blocks;")
    if size == 3:
        w(f"{outputs[0]}[2] = rng_hi + ({outputs[0]}[1] < rng_lo);   /* carry */")


class _Store:
    """Writes a random word into the result: converted for integers and 16-bit floats (stored
    as their bits), copied bit for bit into f32/f64."""

    def __init__(self, out: str, dtype: str):
        self.out, self.dtype = out, dtype

    def __call__(self, w: CWriter, at: str, word: str) -> None:
        if self.dtype in ("f32", "f64"):
            u = f"uint{bit_width(self.dtype)}_t"
            with w.block(""):
                w(f"const {u} rng_bits = ({u})({word});")
                w(f"memcpy(&{self.out}[{at}], &rng_bits, sizeof rng_bits);")
        else:
            w(f"{self.out}[{at}] = ({ctype(self.dtype)})({word});")


def _parallel_for(w: CWriter, var: str, count: str, shares: list[str]) -> None:
    """A loop over [0, count) in pieces on the pool; `shares`: the rng_ locals it reads."""
    types = {"rng_key": "uint64_t", "rng_lo": "uint64_t", "rng_hi": "uint64_t",
             "rng_ctr": "uint64_t"}
    w.parallel(count, f"{count} >= {_PARALLEL_MIN}",
               [(types.get(name, "int64_t"), name) for name in ["rng_key", "rng_n"] + shares])
    w.open(f"for (int64_t {var} = jd_lo; {var} < jd_hi; {var}++)")


def close_rows(w: CWriter) -> None:
    w.close()


def _philox(w: CWriter, store: _Store, per_block: int) -> None:
    w("/* block j: Philox-4x32-10 of the 128-bit counter (rng_lo, rng_hi) + j */")
    _parallel_for(w, "j", "rng_blocks", ["rng_lo", "rng_hi"])
    w("const uint64_t rng_c_lo = rng_lo + (uint64_t)j, rng_c_hi = rng_hi + (rng_c_lo < rng_lo);")
    w("uint32_t rng_c[4] = {(uint32_t)rng_c_lo, (uint32_t)(rng_c_lo >> 32), (uint32_t)rng_c_hi, "
      "(uint32_t)(rng_c_hi >> 32)};")
    w("jd_philox4x32((uint32_t)rng_key, (uint32_t)(rng_key >> 32), rng_c);")
    with w.block(f"for (int k = 0; k < {per_block} && {per_block} * j + k < rng_n; k++)"):
        word = "rng_c[k]" if per_block == 4 else "rng_c[2 * k] | (uint64_t)rng_c[2 * k + 1] << 32"
        store(w, f"{per_block} * j + k", word)
    close_rows(w)


def _threefry_64(w: CWriter, store: _Store) -> str:
    w("/* element e: Threefry-2x32-20 of the counter rng_ctr + e, low word first */")
    _parallel_for(w, "rng_e", "rng_n", ["rng_ctr"])
    w("const uint64_t rng_c_e = rng_ctr + (uint64_t)rng_e;")
    w("uint32_t rng_c[2] = {(uint32_t)rng_c_e, (uint32_t)(rng_c_e >> 32)};")
    w("jd_threefry2x32((uint32_t)rng_key, (uint32_t)(rng_key >> 32), rng_c);")
    store(w, "rng_e", "rng_c[0] | (uint64_t)rng_c[1] << 32")
    close_rows(w)
    return "rng_n"


def _threefry_narrow(w: CWriter, store: _Store, dims: list[str]) -> str:
    dims = dims or ["1"]   # a scalar is generated as shape [1]
    w(f"const int64_t rng_dims[{len(dims)}] = {{{', '.join(dims)}}};")
    w("/* the split axis (XLA's choice): the first even-sized one, else the first largest */")
    w("int rng_split = -1;")
    w(f"for (int i = 0; i < {len(dims)} && rng_split < 0; i++) "
      "if (rng_dims[i] % 2 == 0) rng_split = i;")
    with w.block("if (rng_split < 0)"):
        w("rng_split = 0;")
        w(f"for (int i = 1; i < {len(dims)}; i++) "
          "if (rng_dims[i] > rng_dims[rng_split]) rng_split = i;")
    w("int64_t rng_outer = 1, rng_inner = 1;")
    w("for (int i = 0; i < rng_split; i++) rng_outer *= rng_dims[i];")
    w(f"for (int i = rng_split + 1; i < {len(dims)}; i++) rng_inner *= rng_dims[i];")
    w("const int64_t rng_len = rng_dims[rng_split], rng_half = (rng_len + 1) / 2;")
    w("const int64_t rng_pairs = rng_outer * rng_half * rng_inner;")
    w("/* counter rng_ctr + rng_p (rng_p row-major over the shape with the split axis halved) "
      "-> elements 2h, 2h + 1 of that axis */")
    _parallel_for(w, "rng_p", "rng_pairs",
                  ["rng_ctr", "rng_len", "rng_half", "rng_inner"])
    w("const int64_t rng_o = rng_p / (rng_half * rng_inner), rng_h = rng_p / rng_inner % rng_half, "
      "rng_t = rng_p % rng_inner;")
    w("const uint64_t rng_c_p = rng_ctr + (uint64_t)rng_p;")
    w("uint32_t rng_c[2] = {(uint32_t)rng_c_p, (uint32_t)(rng_c_p >> 32)};")
    w("jd_threefry2x32((uint32_t)rng_key, (uint32_t)(rng_key >> 32), rng_c);")
    w("const int64_t rng_at = (rng_o * rng_len + 2 * rng_h) * rng_inner + rng_t;")
    store(w, "rng_at", "rng_c[0]")
    with w.block("if (2 * rng_h + 1 < rng_len)"):
        store(w, "rng_at + rng_inner", "rng_c[1]")
    close_rows(w)
    return "rng_pairs"
