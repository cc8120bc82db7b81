/* Threads for parallel (OpenMP) kernels: at most jd_max_threads (set once by the runtime:
   JDISC_NUM_THREADS / OMP_NUM_THREADS, else the affinity mask capped by the cgroup quota), and
   no more than the CPUs that other runnable tasks leave free (GEMMs use jd_gemm.h's pool, which
   needs no such limit). A parallel region ends when its last thread does, so a thread that waits a scheduler tick behind a busy neighbour makes every
   kernel wait for it: on a loaded machine kernels run on fewer threads (down to the caller
   alone). The runnable count is /proc/loadavg's, re-read at most every 20 ms (jd_adapt_threads,
   called at the start of every jd_run); JDISC_NUM_THREADS set by the user pins the count. */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
static int jd_max_threads = 1, jd_num_threads = 1, jd_threads_pinned = 0;
static int64_t jd_threads_checked_ns = -1000000000LL;
void jd_set_num_threads(int n, int pinned) {
  jd_max_threads = jd_num_threads = n > 0 ? n : 1;
  jd_threads_pinned = pinned;
}
static int jd_runnable_others(void) {    /* runnable tasks besides the caller, or -1 */
  char buf[128];
  const int fd = open("/proc/loadavg", O_RDONLY);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *p = buf;
  for (int field = 0; field < 3; field++) {      /* "0.52 0.58 0.59 3/312 4567" */
    while (*p && *p != ' ') p++;
    while (*p == ' ') p++;
  }
  int running = 0;
  while (*p >= '0' && *p <= '9') running = running * 10 + (*p++ - '0');
  return *p == '/' && running > 0 ? running - 1 : -1;
}
static void jd_adapt_threads(void) {
  if (jd_max_threads <= 1 || jd_threads_pinned) return;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  const int64_t now = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
  if (now - __atomic_load_n(&jd_threads_checked_ns, __ATOMIC_RELAXED) < 20000000LL) return;
  __atomic_store_n(&jd_threads_checked_ns, now, __ATOMIC_RELAXED);
  const int others = jd_runnable_others();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  int n = jd_max_threads;
  if (others >= 0 && online > 0 && online - others < n) n = (int)(online - others);
  __atomic_store_n(&jd_num_threads, n < 1 ? 1 : n, __ATOMIC_RELAXED);
}
int jd_current_threads(void) { jd_adapt_threads(); return jd_num_threads; }   /* for tests */
