/* The per-call arena. One cached block is reused by whichever call takes it first (fresh
   pages would cost a page fault per 4 KiB on every call); a concurrent call gets its own. */
static char *jd_arena_cache = NULL;
static size_t jd_arena_cache_bytes = 0;
static int jd_arena_busy = 0;
static char *jd_arena_get(size_t n, int *cached) {
  char *p = NULL;
  *cached = 0;
  if (!__atomic_exchange_n(&jd_arena_busy, 1, __ATOMIC_ACQUIRE)) {
    if (jd_arena_cache_bytes < n) {
      free(jd_arena_cache);
      jd_arena_cache = NULL;
      jd_arena_cache_bytes = 0;
      if (posix_memalign((void **)&jd_arena_cache, 64, n) == 0) jd_arena_cache_bytes = n;
      else jd_arena_cache = NULL;
    }
    if (jd_arena_cache) { *cached = 1; return jd_arena_cache; }
    __atomic_store_n(&jd_arena_busy, 0, __ATOMIC_RELEASE);
    return NULL;
  }
  return posix_memalign((void **)&p, 64, n) == 0 ? p : NULL;
}
static void jd_arena_put(char *p, int cached) {
  if (cached) __atomic_store_n(&jd_arena_busy, 0, __ATOMIC_RELEASE);
  else free(p);
}
/* gives the cached block back to the system */
void jd_release_memory(void) {
  if (!__atomic_exchange_n(&jd_arena_busy, 1, __ATOMIC_ACQUIRE)) {
    free(jd_arena_cache);
    jd_arena_cache = NULL;
    jd_arena_cache_bytes = 0;
    __atomic_store_n(&jd_arena_busy, 0, __ATOMIC_RELEASE);
  }
}
