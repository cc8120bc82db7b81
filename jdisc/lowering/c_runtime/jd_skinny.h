/* Skinny f32 GEMMs: C[m, n] = op(A)[m, k] @ B[k, n] for a few rows (2 <= m <= 64), B not
   transposed, as jd_gemm's pieces run them (jd_gemm.h). A unit of its own, in the programs
   with float32 GEMMs (lowering/units.py skinny_unit): jd_skinny_f32 below.

   BLAS's sgemm packs op(B) before it multiplies; with a few rows of A that copy is most of the
   time. These loops read B once for each 8 rows instead, with the rows' products in
   registers (GCC's vector extension: a vector of JD_SKINNY_LANES floats, one register). One
   thread, OpenBLAS's sgemm against these (`python benchmarks/skinny_gemm.py`, two runs in
   benchmarks/results/skinny-gemm-run*.txt): [m, 512] @ [512, 2048] in L3, 315 against 58-60
   us at m = 2, 341 against 96 at m = 8, 385 against 175-176 at m = 16; [m, 3072] @ [3072, 768]
   from memory, 760-776 against 278-281, 860-863 against 423-424 and 944-948 against 679-682.
   The sums run in another order than BLAS's, as two BLAS libraries' do: within f32's bound
   for any order (tests/test_gemm_pool.py). */

/* at most this many rows, a multiple of 8 (jd_gemm.h chooses 16, 32 or 64 by B's shape) */
#ifndef JD_SKINNY_ROWS
#define JD_SKINNY_ROWS 64
#endif

#if defined(__AVX512F__)
#define JD_SKINNY_LANES 16
#else
#define JD_SKINNY_LANES 8
#endif

typedef float jd_vf __attribute__((vector_size(4 * JD_SKINNY_LANES)));
/* unaligned loads and stores; macros, as a function taking or returning a vector wider than
   the target's registers changes the ABI (GCC's -Wpsabi) */
#define JD_VF_LOAD(v, p) memcpy(&(v), (p), sizeof(jd_vf))
#define JD_VF_STORE(p, v) memcpy((p), &(v), sizeof(jd_vf))

/* A's rows r0 .. r0 + 7 (a row past m repeats row m - 1: computed, never stored); element p of
   row r is a[r * sa_row + p * sa_col] */
static void jd_skinny_rows(const float *a, int64_t sa_row, int64_t r0, int64_t m,
                           const float *rows[8]) {
  for (int i = 0; i < 8; i++) rows[i] = a + (r0 + i < m ? r0 + i : m - 1) * sa_row;
}

/* C's rows r0 .. min(m, r0 + 8) - 1, `width` (<= JD_SKINNY_LANES) columns from j0: the first
   lanes of the 8 accumulators */
static void jd_skinny_store(float *c, int64_t ldc, int64_t rows, int64_t j0, int64_t width,
                            const jd_vf acc[8]) {
  for (int64_t i = 0; i < rows && i < 8; i++) {
    float lanes[JD_SKINNY_LANES];
    JD_VF_STORE(lanes, acc[i]);
    memcpy(c + i * ldc + j0, lanes, sizeof(float) * (size_t)width);
  }
}

/* The tiles are loops over constant row and vector counts. GCC compiles them at -O3 through
   its per-function attribute (kernels' JD_KEEP_BRANCHES uses one too), which unrolls them and
   keeps the 16 accumulators in registers; the unit itself is -O1. Other compilers build them
   at the unit's level. */
#if defined(__GNUC__) && !defined(__clang__)
#define JD_SKINNY_OPT __attribute__((optimize("O3")))
#else
#define JD_SKINNY_OPT
#endif

/* Columns j0 .. j0 + V * JD_SKINNY_LANES - 1 of C's rows 0 .. min(m, R) - 1, B [k, n] with row
   stride ldb: each row of B's tile is multiplied into the R rows at once (R * V = 16
   accumulators). With `ahead` > 0 it also prefetches, 8 rows ahead, the next `ahead` columns
   of each row (see jd_skinny_nn). A row past m repeats row m - 1 (r: jd_skinny_rows). */
JD_SKINNY_OPT __attribute__((always_inline)) static inline void jd_skinny_tile(
    const int R, const int V, const float *const *r, int64_t m, int64_t k, int64_t sa_col,
    const float *b, int64_t ldb, float *c, int64_t ldc, int64_t j0, int64_t ahead) {
  const int64_t L = JD_SKINNY_LANES;
  jd_vf acc[8][8];
  for (int i = 0; i < R; i++)
    for (int v = 0; v < V; v++) acc[i][v] = (jd_vf){0};
  const float *bp = b + j0;
  for (int64_t p = 0, q = 0; p < k; p++, q += sa_col, bp += ldb) {
    if (ahead && p + 8 < k)
      for (int64_t l = V * L; l < V * L + ahead; l += 64 / (int64_t)sizeof(float))
        __builtin_prefetch(bp + 8 * ldb + l);
    jd_vf bv[8];
    for (int v = 0; v < V; v++) JD_VF_LOAD(bv[v], bp + v * L);
    for (int i = 0; i < R; i++) {
      const float ai = r[i][q];
      for (int v = 0; v < V; v++) acc[i][v] += ai * bv[v];
    }
  }
  for (int i = 0; i < R && i < m; i++)
    for (int v = 0; v < V; v++) JD_VF_STORE(c + i * ldc + j0 + v * L, acc[i][v]);
}

/* the tile shapes: more columns for fewer rows, so that each row of B gives 16 products */
#define JD_SKINNY_TILE_ARGS \
  const float *const *r, int64_t m, int64_t k, int64_t sa_col, const float *b, int64_t ldb, \
  float *c, int64_t ldc, int64_t j0, int64_t ahead
JD_SKINNY_OPT static void jd_skinny_tile2(JD_SKINNY_TILE_ARGS) {
  jd_skinny_tile(2, 8, r, m, k, sa_col, b, ldb, c, ldc, j0, ahead);
}
JD_SKINNY_OPT static void jd_skinny_tile4(JD_SKINNY_TILE_ARGS) {
  jd_skinny_tile(4, 4, r, m, k, sa_col, b, ldb, c, ldc, j0, ahead);
}
JD_SKINNY_OPT static void jd_skinny_tile8(JD_SKINNY_TILE_ARGS) {
  jd_skinny_tile(8, 2, r, m, k, sa_col, b, ldb, c, ldc, j0, ahead);
}

/* Columns j0 .. j0 + width - 1 of C's rows 0 .. m - 1 (m <= 8), B [k, n]: tiles, then the
   last columns a vector's worth at a time, zero-padded; with `prefetch`, the first tile
   prefetches the others' columns (jd_skinny_nn) */
static void jd_skinny_cols8(const float *const r[8], int64_t m, int64_t k, int64_t sa_col,
                            const float *b, int64_t ldb, float *c, int64_t ldc, int64_t j0,
                            int64_t width, int prefetch) {
  const int64_t L = JD_SKINNY_LANES, end = j0 + width;
  const int64_t T = (m <= 2 ? 8 : m <= 4 ? 4 : 2) * L;       /* the tile's columns */
  int64_t ahead = prefetch && width > T ? width - T : 0;
  for (; j0 + T <= end; j0 += T, ahead = 0) {
    if (m <= 2) jd_skinny_tile2(r, m, k, sa_col, b, ldb, c, ldc, j0, ahead);
    else if (m <= 4) jd_skinny_tile4(r, m, k, sa_col, b, ldb, c, ldc, j0, ahead);
    else jd_skinny_tile8(r, m, k, sa_col, b, ldb, c, ldc, j0, ahead);
  }
  for (; j0 + 2 * L <= end; j0 += 2 * L)          /* then the narrowest tiles */
    jd_skinny_tile8(r, m, k, sa_col, b, ldb, c, ldc, j0, 0);
  for (; j0 < end; j0 += L) {
    const int64_t w = end - j0 < L ? end - j0 : L;
    jd_vf x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0}, x4 = {0}, x5 = {0}, x6 = {0}, x7 = {0};
    const float *bp = b + j0;
    for (int64_t p = 0, q = 0; p < k; p++, q += sa_col, bp += ldb) {
      float lanes[JD_SKINNY_LANES] = {0};
      memcpy(lanes, bp, sizeof(float) * (size_t)w);
      jd_vf b0;
      JD_VF_LOAD(b0, lanes);
      x0 += r[0][q] * b0; x1 += r[1][q] * b0; x2 += r[2][q] * b0; x3 += r[3][q] * b0;
      x4 += r[4][q] * b0; x5 += r[5][q] * b0; x6 += r[6][q] * b0; x7 += r[7][q] * b0;
    }
    const jd_vf xs[8] = {x0, x1, x2, x3, x4, x5, x6, x7};
    jd_skinny_store(c, ldc, m, j0, w, xs);
  }
}

/* B is [k, n]. A tile walks down B's rows reading a few vectors of each, which from memory
   ran at a third of the speed of reading the rows in order; so the columns go in chunks of
   JD_SKINNY_CHUNK, whose first tile prefetches the rest of each row's chunk for the other
   tiles, which find it in L2 (one thread, [m, 768] @ [768, 3072] from memory, m = 2, 4, 8,
   8-row tiles: 914-985 us without, 328-373 with). The rows go 8 at a time (16 row pointers
   and their accumulators do not stay in x86-64's registers: 16 rows at once ran 2x slower),
   every group over a chunk before the next chunk, so that the later ones find it in cache. */
#define JD_SKINNY_CHUNK 256
static void jd_skinny_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t sa_row,
                         int64_t sa_col, const float *b, int64_t ldb, float *c, int64_t ldc) {
  const float *r[JD_SKINNY_ROWS / 8][8];
  for (int64_t g = 0; g * 8 < m; g++) jd_skinny_rows(a, sa_row, g * 8, m, r[g]);
  for (int64_t j0 = 0; j0 < n; j0 += JD_SKINNY_CHUNK) {
    const int64_t width = n - j0 < JD_SKINNY_CHUNK ? n - j0 : JD_SKINNY_CHUNK;
    for (int64_t g = 0; g * 8 < m; g++)
      jd_skinny_cols8((const float *const *)r[g], m - g * 8 < 8 ? m - g * 8 : 8, k, sa_col, b,
                      ldb, c + g * 8 * ldc, ldc, j0, width, g == 0);
  }
}

/* the unit's entry (declared weak in jd_gemm.h: a program without it runs sgemm) */
JD_RT void jd_skinny_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t sa_row,
                         int64_t sa_col, const float *b, int64_t ldb, float *c, int64_t ldc) {
  jd_skinny_nn(m, n, k, a, sa_row, sa_col, b, ldb, c, ldc);
}
