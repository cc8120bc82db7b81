/* Threefry-2x32, 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
   SC 2011): encrypts the counter (c[0], c[1]) under the key (k0, k1), in place. */
static inline uint32_t jd_rotl32(uint32_t v, int d) { return (v << d) | (v >> (32 - d)); }
static inline void jd_threefry2x32(uint32_t k0, uint32_t k1, uint32_t c[2]) {
  static const int rotation[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  uint32_t x0 = c[0] + ks[0], x1 = c[1] + ks[1];
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 4; j++) {
      x0 += x1;
      x1 = jd_rotl32(x1, rotation[4 * (i % 2) + j]) ^ x0;
    }
    x0 += ks[(i + 1) % 3];
    x1 += ks[(i + 2) % 3] + (uint32_t)(i + 1);
  }
  c[0] = x0;
  c[1] = x1;
}

/* Philox-4x32, 10 rounds (same paper): encrypts the counter c[0..3] under (k0, k1), in place. */
static inline void jd_philox4x32(uint32_t k0, uint32_t k1, uint32_t c[4]) {
  for (int round = 0; round < 10; round++) {
    const uint64_t p0 = (uint64_t)c[0] * 0xD2511F53u, p1 = (uint64_t)c[2] * 0xCD9E8D57u;
    const uint32_t y0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, y2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
    c[0] = y0;
    c[1] = (uint32_t)p1;
    c[2] = y2;
    c[3] = (uint32_t)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}
