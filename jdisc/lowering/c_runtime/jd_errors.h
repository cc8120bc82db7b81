/* StableHLO integer divide / remainder on the host (truncating; XLA's x/0 == -1, x%0 == x) */
static inline int64_t jd_tdiv(int64_t a, int64_t b) {
  return b == 0 ? -1 : (a == INT64_MIN && b == -1) ? a : a / b;
}
static inline int64_t jd_trem(int64_t a, int64_t b) {
  return b == 0 ? a : b == -1 ? 0 : a % b;
}
/* memcpy of whole buffers: an empty buffer may have a NULL address (XLA, numpy) */
static inline void jd_copy(void *dst, const void *src, size_t n) {
  if (n) memcpy(dst, src, n);
}
static int jd_error(char *err, int64_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && n > 0) vsnprintf(err, (size_t)n, fmt, ap);
  va_end(ap);
  return 1;
}
