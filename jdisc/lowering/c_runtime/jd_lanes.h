/* A block of 16 rows of 4-byte values laid out column by column (`lanes[c * 16 + l]` is row
   l's column c) and back: a stitch kernel runs short rows 16 at a time, one vector lane per
   row (lowering/stitch_loops.py), and copies its inputs into that layout and its output out of
   it. Copied one value at a time those copies were half of a softmax's time over rows of 100
   columns; here each 16 x 16 tile is 16 vector loads, a transpose in registers and 16 vector
   stores. The values are moved, never computed (float vectors carry int32 bits unchanged). GCC's
   vector extensions (`vector_size`, `__builtin_shuffle`) are lowered to whatever vectors the
   target has. */

/* The transposes work on vectors as wide as the target's own (JD_TW floats: 16 with AVX-512,
   8 with AVX, 4 otherwise): a generic two-source shuffle of vectors wider than the target's
   registers is lowered one element at a time (16 x 16 tiles of 64-byte vectors on an AVX2
   machine took 650 cycles each, a third of a masked softmax's time, where the 8 x 8 blocks
   below take under 100). */
#if defined(__AVX512F__)
#define JD_TW 16
#elif defined(__AVX__)
#define JD_TW 8
#else
#define JD_TW 4
#endif
typedef float jd_vtf __attribute__((vector_size(4 * JD_TW)));
typedef int32_t jd_vti __attribute__((vector_size(4 * JD_TW)));

/* One step of the transpose: rows a and b (b = a + k) trade the halves that bit k of the
   column index picks, so that bit k of the row index and that of the column index swap.
   Within each group of 2k elements, LO takes a's lower k then b's lower k, HI their upper k
   (element JD_TW + j of a shuffle's pair is b's j). */
#define JD_SWAP(a, b, k) do { \
    const jd_vtf jd_t = (a); \
    (a) = __builtin_shuffle(jd_t, (b), JD_MASK(JD_LO, k)); \
    (b) = __builtin_shuffle(jd_t, (b), JD_MASK(JD_HI, k)); } while (0)
#define JD_R(k, i) ((i) % (2 * (k)))
#define JD_LO(k, i) ((i) - JD_R(k, i) + (JD_R(k, i) < (k) ? JD_R(k, i) : JD_TW + JD_R(k, i) - (k)))
#define JD_HI(k, i) (JD_LO(k, i) + (k))
#define JD_M4(F, k) F(k, 0), F(k, 1), F(k, 2), F(k, 3)
#define JD_M8(F, k) JD_M4(F, k), F(k, 4), F(k, 5), F(k, 6), F(k, 7)
#define JD_M16(F, k) JD_M8(F, k), F(k, 8), F(k, 9), F(k, 10), F(k, 11), F(k, 12), F(k, 13), \
    F(k, 14), F(k, 15)
#if JD_TW == 16
#define JD_MASK(F, k) ((jd_vti){JD_M16(F, k)})
#define JD_EACH(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) \
    M(13) M(14) M(15)
#elif JD_TW == 8
#define JD_MASK(F, k) ((jd_vti){JD_M8(F, k)})
#define JD_EACH(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#define JD_MASK(F, k) ((jd_vti){JD_M4(F, k)})
#define JD_EACH(M) M(0) M(1) M(2) M(3)
#endif
#define JD_DECLARE(i) jd_vtf r##i;
#define JD_LOAD(i) memcpy(&r##i, in[bi + i] + bj, sizeof r##i);
#define JD_STORE(i) memcpy(out[bj + i] + bi, &r##i, sizeof r##i);

/* out[j][i] = in[i][j] for i, j < 16, by JD_TW x JD_TW blocks: JD_TW loads, log2(JD_TW) steps
   of JD_TW / 2 swaps (two-source shuffles) and JD_TW stores each, written out (the runtime
   unit compiles at -O1, which unrolls nothing), every vector in a register */
static void jd_tile16(float *const out[16], const float *const in[16]) {
  for (int bi = 0; bi < 16; bi += JD_TW) {
    for (int bj = 0; bj < 16; bj += JD_TW) {
      JD_EACH(JD_DECLARE)
      JD_EACH(JD_LOAD)
#if JD_TW == 16
      JD_SWAP(r0, r8, 8); JD_SWAP(r1, r9, 8); JD_SWAP(r2, r10, 8); JD_SWAP(r3, r11, 8);
      JD_SWAP(r4, r12, 8); JD_SWAP(r5, r13, 8); JD_SWAP(r6, r14, 8); JD_SWAP(r7, r15, 8);
      JD_SWAP(r0, r4, 4); JD_SWAP(r1, r5, 4); JD_SWAP(r2, r6, 4); JD_SWAP(r3, r7, 4);
      JD_SWAP(r8, r12, 4); JD_SWAP(r9, r13, 4); JD_SWAP(r10, r14, 4); JD_SWAP(r11, r15, 4);
      JD_SWAP(r0, r2, 2); JD_SWAP(r1, r3, 2); JD_SWAP(r4, r6, 2); JD_SWAP(r5, r7, 2);
      JD_SWAP(r8, r10, 2); JD_SWAP(r9, r11, 2); JD_SWAP(r12, r14, 2); JD_SWAP(r13, r15, 2);
      JD_SWAP(r0, r1, 1); JD_SWAP(r2, r3, 1); JD_SWAP(r4, r5, 1); JD_SWAP(r6, r7, 1);
      JD_SWAP(r8, r9, 1); JD_SWAP(r10, r11, 1); JD_SWAP(r12, r13, 1); JD_SWAP(r14, r15, 1);
#elif JD_TW == 8
      JD_SWAP(r0, r4, 4); JD_SWAP(r1, r5, 4); JD_SWAP(r2, r6, 4); JD_SWAP(r3, r7, 4);
      JD_SWAP(r0, r2, 2); JD_SWAP(r1, r3, 2); JD_SWAP(r4, r6, 2); JD_SWAP(r5, r7, 2);
      JD_SWAP(r0, r1, 1); JD_SWAP(r2, r3, 1); JD_SWAP(r4, r5, 1); JD_SWAP(r6, r7, 1);
#else
      JD_SWAP(r0, r2, 2); JD_SWAP(r1, r3, 2);
      JD_SWAP(r0, r1, 1); JD_SWAP(r2, r3, 1);
#endif
      JD_EACH(JD_STORE)
    }
  }
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
