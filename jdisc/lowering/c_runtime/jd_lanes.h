/* A block of 16 rows of 4-byte values laid out column by column (`lanes[c * 16 + l]` is row
   l's column c) and back: a stitch kernel runs short rows 16 at a time, one vector lane per
   row (lowering/stitch_loops.py), and copies its inputs into that layout and its output out of
   it. Copied one value at a time those copies were half of a softmax's time over rows of 100
   columns; here each 16 x 16 tile is 16 vector loads, a transpose in registers and 16 vector
   stores. The values are moved, never computed (float vectors carry int32 bits unchanged). GCC's
   vector extensions (`vector_size`, `__builtin_shuffle`) are lowered to whatever vectors the
   target has. */

typedef float jd_v16f __attribute__((vector_size(64)));
typedef int32_t jd_v16i __attribute__((vector_size(64)));

/* One step of the transpose: rows a and b (b = a + k) trade the halves that bit k of the
   column index picks, so that bit k of the row index and that of the column index swap. */
#define JD_SWAP(a, b, LO, HI) do { \
    const jd_v16f jd_t = (a); \
    (a) = __builtin_shuffle(jd_t, (b), LO); \
    (b) = __builtin_shuffle(jd_t, (b), HI); } while (0)
#define JD_LO8 ((jd_v16i){0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23})
#define JD_HI8 ((jd_v16i){8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31})
#define JD_LO4 ((jd_v16i){0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27})
#define JD_HI4 ((jd_v16i){4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31})
#define JD_LO2 ((jd_v16i){0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29})
#define JD_HI2 ((jd_v16i){2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31})
#define JD_LO1 ((jd_v16i){0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30})
#define JD_HI1 ((jd_v16i){1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31})
#define JD_EACH16(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) \
    M(13) M(14) M(15)
#define JD_DECLARE(i) jd_v16f r##i;
#define JD_LOAD(i) memcpy(&r##i, in[i], sizeof r##i);
#define JD_STORE(i) memcpy(out[i], &r##i, sizeof r##i);

/* out[j][i] = in[i][j] for i, j < 16: 16 loads, 4 steps of 8 swaps (64 two-source
   shuffles) and 16 stores, written out (the runtime unit compiles at -O1, which unrolls
   nothing), every vector in a register */
static void jd_tile16(float *const out[16], const float *const in[16]) {
  JD_EACH16(JD_DECLARE)
  JD_EACH16(JD_LOAD)
  JD_SWAP(r0, r8, JD_LO8, JD_HI8); JD_SWAP(r1, r9, JD_LO8, JD_HI8);
  JD_SWAP(r2, r10, JD_LO8, JD_HI8); JD_SWAP(r3, r11, JD_LO8, JD_HI8);
  JD_SWAP(r4, r12, JD_LO8, JD_HI8); JD_SWAP(r5, r13, JD_LO8, JD_HI8);
  JD_SWAP(r6, r14, JD_LO8, JD_HI8); JD_SWAP(r7, r15, JD_LO8, JD_HI8);
  JD_SWAP(r0, r4, JD_LO4, JD_HI4); JD_SWAP(r1, r5, JD_LO4, JD_HI4);
  JD_SWAP(r2, r6, JD_LO4, JD_HI4); JD_SWAP(r3, r7, JD_LO4, JD_HI4);
  JD_SWAP(r8, r12, JD_LO4, JD_HI4); JD_SWAP(r9, r13, JD_LO4, JD_HI4);
  JD_SWAP(r10, r14, JD_LO4, JD_HI4); JD_SWAP(r11, r15, JD_LO4, JD_HI4);
  JD_SWAP(r0, r2, JD_LO2, JD_HI2); JD_SWAP(r1, r3, JD_LO2, JD_HI2);
  JD_SWAP(r4, r6, JD_LO2, JD_HI2); JD_SWAP(r5, r7, JD_LO2, JD_HI2);
  JD_SWAP(r8, r10, JD_LO2, JD_HI2); JD_SWAP(r9, r11, JD_LO2, JD_HI2);
  JD_SWAP(r12, r14, JD_LO2, JD_HI2); JD_SWAP(r13, r15, JD_LO2, JD_HI2);
  JD_SWAP(r0, r1, JD_LO1, JD_HI1); JD_SWAP(r2, r3, JD_LO1, JD_HI1);
  JD_SWAP(r4, r5, JD_LO1, JD_HI1); JD_SWAP(r6, r7, JD_LO1, JD_HI1);
  JD_SWAP(r8, r9, JD_LO1, JD_HI1); JD_SWAP(r10, r11, JD_LO1, JD_HI1);
  JD_SWAP(r12, r13, JD_LO1, JD_HI1); JD_SWAP(r14, r15, JD_LO1, JD_HI1);
  JD_EACH16(JD_STORE)
}

/* The tile of columns [c, c + 16) of a block: c runs in steps of 16, the last tile ending at
   column n (over columns the tile before it moved already: the same values again), n >= 16. */
#define JD_TILE_START(c0, n) ((c0) + 16 <= (n) ? (c0) : (n) - 16)

/* lanes[c * 16 + l] = rows[l][c] for c < n, l < 16 */
JD_RT void jd_to_lanes32(void *restrict lanes, const void *const rows[16], int64_t n) {
  float *const d = (float *)lanes;
  if (n < 16) {
    for (int64_t c = 0; c < n; c++)
      for (int l = 0; l < 16; l++) memcpy(d + c * 16 + l, (const float *)rows[l] + c, 4);
    return;
  }
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    const int64_t c = JD_TILE_START(c0, n);
    const float *in[16];
    float *out[16];
    for (int l = 0; l < 16; l++) {
      in[l] = (const float *)rows[l] + c;
      out[l] = d + (c + l) * 16;
    }
    jd_tile16(out, in);
  }
}

/* rows[l][c] = lanes[c * 16 + l] for c < n, l < nb (the block's real rows) */
JD_RT void jd_from_lanes32(void *const rows[16], const void *restrict lanes, int64_t n,
                           int64_t nb) {
  const float *const s = (const float *)lanes;
  if (n < 16) {
    for (int64_t l = 0; l < nb; l++)
      for (int64_t c = 0; c < n; c++) memcpy((float *)rows[l] + c, s + c * 16 + l, 4);
    return;
  }
  float sink[16];       /* where the rows past the block's last go */
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    const int64_t c = JD_TILE_START(c0, n);
    const float *in[16];
    float *out[16];
    for (int l = 0; l < 16; l++) {
      in[l] = s + (c + l) * 16;
      out[l] = l < nb ? (float *)rows[l] + c : sink;
    }
    jd_tile16(out, in);
  }
}
