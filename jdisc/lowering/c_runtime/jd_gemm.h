/* GEMMs on a pool of threads that degrades gracefully on a busy machine.

   A large GEMM is cut into pieces (blocks of rows or of columns of each result matrix); each
   piece is one single-threaded BLAS call. The caller and the pool's workers claim pieces from
   one counter, and the caller waits only for pieces another thread has started: a worker that
   wakes after the last piece was claimed finds nothing and costs the caller nothing. With a
   team of threads that each own a share (OpenBLAS's threads, an OpenMP barrier) the GEMM ends
   when its last thread does, so one thread waiting a scheduler tick behind a busy neighbour
   stalls the whole call. Below JD_GEMM_SPLIT_WORK multiply-adds a GEMM is one call on the
   caller's thread: waking a worker costs more than it saves.

   The pool is this library's (one per loaded program, its workers started on first use); a
   second caller that finds it in use, and a GEMM issued from inside a piece, run their pieces
   on their own thread. After fork() the child starts new workers. */
#include <pthread.h>
#include <sys/types.h>

typedef void (*jd_piece_fn)(const void *ctx, int64_t piece);

static struct {
  pthread_mutex_t lock;        /* guards gen, fn, ctx, n and the condition variables */
  pthread_cond_t wake, finished;
  uint64_t gen;                /* the current job's number; workers wait for it to change */
  jd_piece_fn fn;
  const void *ctx;
  int64_t n;
  uint64_t next;               /* (gen << 32) | next unclaimed piece: a claim is per job */
  int64_t done;                /* pieces of the current job finished */
  int workers, in_use, atfork;
  pid_t pid;                   /* the process that started the workers */
} jd_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
             0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static int64_t jd_pool_claim(uint64_t gen, int64_t n) {
  uint64_t v = __atomic_load_n(&jd_pool.next, __ATOMIC_ACQUIRE);
  for (;;) {
    if ((v >> 32) != (gen & 0xffffffffu) || (int64_t)(v & 0xffffffffu) >= n) return -1;
    if (__atomic_compare_exchange_n(&jd_pool.next, &v, v + 1, 1, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      return (int64_t)(v & 0xffffffffu);
  }
}

static void jd_pool_finish_piece(int64_t n) {
  if (__atomic_add_fetch(&jd_pool.done, 1, __ATOMIC_ACQ_REL) == n) {
    pthread_mutex_lock(&jd_pool.lock);
    pthread_cond_signal(&jd_pool.finished);
    pthread_mutex_unlock(&jd_pool.lock);
  }
}

/* How long a worker polls for the next job before it sleeps: a GEMM usually follows within
   a kernel or two, and waking a sleeping thread costs tens to hundreds of microseconds. */
#define JD_POOL_SPIN_NS 100000

static int64_t jd_pool_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *jd_pool_worker(void *unused) {
  (void)unused;
  pthread_mutex_lock(&jd_pool.lock);
  uint64_t seen = jd_pool.gen;
  for (;;) {
    pthread_mutex_unlock(&jd_pool.lock);
    const int64_t until = jd_pool_now_ns() + JD_POOL_SPIN_NS;
    for (int spins = 1; __atomic_load_n(&jd_pool.gen, __ATOMIC_ACQUIRE) == seen; spins++) {
      if (spins % 64 == 0 && jd_pool_now_ns() > until) break;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&jd_pool.lock);
    while (jd_pool.gen == seen) pthread_cond_wait(&jd_pool.wake, &jd_pool.lock);
    seen = jd_pool.gen;
    const jd_piece_fn fn = jd_pool.fn;
    const void *ctx = jd_pool.ctx;
    const int64_t n = jd_pool.n;
    pthread_mutex_unlock(&jd_pool.lock);
    for (int64_t i; (i = jd_pool_claim(seen, n)) >= 0;) {
      fn(ctx, i);
      jd_pool_finish_piece(n);
    }
    pthread_mutex_lock(&jd_pool.lock);
  }
  return NULL;
}

/* fork(): the pool's lock is held across it, so no worker is inside it when the child is made;
   the child has none of the parent's workers and starts its own on first use. */
static void jd_pool_before_fork(void) { pthread_mutex_lock(&jd_pool.lock); }
static void jd_pool_after_fork_parent(void) { pthread_mutex_unlock(&jd_pool.lock); }
static void jd_pool_after_fork_child(void) {   /* fresh objects: the parent's workers, still
                                                  counted as waiters in the copies, are gone */
  pthread_mutex_init(&jd_pool.lock, NULL);
  pthread_cond_init(&jd_pool.wake, NULL);
  pthread_cond_init(&jd_pool.finished, NULL);
  jd_pool.workers = 0;
  jd_pool.pid = 0;
  __atomic_store_n(&jd_pool.in_use, 0, __ATOMIC_RELEASE);
}

/* Start workers up to `want` (called with the pool owned); returns how many run. */
static int jd_pool_start(int want) {
  const pid_t pid = getpid();
  if (jd_pool.pid != pid) {     /* first use, or a child after fork(): no workers here */
    if (!jd_pool.atfork)          /* once per process image: a child inherits them */
      jd_pool.atfork = !pthread_atfork(jd_pool_before_fork, jd_pool_after_fork_parent,
                                       jd_pool_after_fork_child);
    jd_pool.workers = 0;
    jd_pool.pid = pid;
  }
  while (jd_pool.workers < want) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&t, &attr, jd_pool_worker, NULL);
    pthread_attr_destroy(&attr);
    if (failed) break;
    jd_pool.workers++;
  }
  return jd_pool.workers;
}

/* Run fn(ctx, 0 .. n-1), on up to `threads` threads including the caller's. */
static void jd_pool_run(jd_piece_fn fn, const void *ctx, int64_t n, int threads) {
  if (n > 1 && threads > 1 && !__atomic_exchange_n(&jd_pool.in_use, 1, __ATOMIC_ACQUIRE)) {
    if (jd_pool_start(threads - 1) > 0) {
      pthread_mutex_lock(&jd_pool.lock);
      const uint64_t gen = jd_pool.gen + 1;
      jd_pool.fn = fn;
      jd_pool.ctx = ctx;
      jd_pool.n = n;
      __atomic_store_n(&jd_pool.done, 0, __ATOMIC_RELEASE);
      __atomic_store_n(&jd_pool.next, (gen & 0xffffffffu) << 32, __ATOMIC_RELEASE);
      __atomic_store_n(&jd_pool.gen, gen, __ATOMIC_RELEASE);   /* spinning workers see it */
      pthread_cond_broadcast(&jd_pool.wake);
      pthread_mutex_unlock(&jd_pool.lock);
      for (int64_t i; (i = jd_pool_claim(gen, n)) >= 0;) {
        fn(ctx, i);
        jd_pool_finish_piece(n);
      }
      if (__atomic_load_n(&jd_pool.done, __ATOMIC_ACQUIRE) < n) {  /* pieces still running */
        pthread_mutex_lock(&jd_pool.lock);
        while (__atomic_load_n(&jd_pool.done, __ATOMIC_ACQUIRE) < n)
          pthread_cond_wait(&jd_pool.finished, &jd_pool.lock);
        pthread_mutex_unlock(&jd_pool.lock);
      }
      __atomic_store_n(&jd_pool.in_use, 0, __ATOMIC_RELEASE);
      return;
    }
    __atomic_store_n(&jd_pool.in_use, 0, __ATOMIC_RELEASE);
  }
  for (int64_t i = 0; i < n; i++) fn(ctx, i);
}

int64_t jd_pool_jobs(void) { return (int64_t)jd_pool.gen; }   /* jobs the workers saw; tests */

/* ---- GEMMs ------------------------------------------------------------------------------ */

/* Called when the library is loaded: every BLAS call runs on one OpenBLAS thread (the pool, or
   the kernel that calls it, does the splitting), GEMMs on up to n threads. The count is
   process-wide: jd_gemm sets it back should other code in the process change it. */
static int jd_blas_max = 1;
void jd_set_blas_threads(int n) {
  jd_blas_max = n > 0 ? n : 1;
  scipy_openblas_set_num_threads(1);
}

#define JD_GEMM_SPLIT_WORK 4194304.0   /* multiply-adds (2^22, about 0.1 ms on two cores) */
#define JD_GEMM_MIN_ROWS 32            /* a piece's rows or columns, at least */

typedef struct {
  int f64, trans_a, trans_b;
  int64_t m, n, k, lda, ldb, stride_a, stride_b, stride_c;
  const void *a, *b;
  void *c;
  int64_t parts, step;         /* pieces per matrix, and each one's rows (split_n: columns) */
  int split_n;
} jd_gemm_job;

static void jd_gemm_piece(const void *ctx, int64_t piece) {
  const jd_gemm_job *g = (const jd_gemm_job *)ctx;
  const int64_t mat = piece / g->parts, lo = piece % g->parts * g->step;
  const int64_t extent = g->split_n ? g->n : g->m;
  const int64_t len = extent - lo < g->step ? extent - lo : g->step;
  /* offsets, in elements, of the piece's first A, B and C entries */
  int64_t oa = mat * g->stride_a, ob = mat * g->stride_b, oc = mat * g->stride_c;
  int64_t m = g->m, n = g->n;
  if (g->split_n) {
    ob += g->trans_b ? lo * g->ldb : lo;
    oc += lo;
    n = len;
  } else {
    oa += g->trans_a ? lo : lo * g->lda;
    oc += lo * g->n;
    m = len;
  }
  const enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  if (g->f64)
    scipy_cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, 1,
                      (const double *)g->a + oa, (blasint)g->lda, (const double *)g->b + ob,
                      (blasint)g->ldb, 0, (double *)g->c + oc, (blasint)g->n);
  else
    scipy_cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, 1,
                      (const float *)g->a + oa, (blasint)g->lda, (const float *)g->b + ob,
                      (blasint)g->ldb, 0, (float *)g->c + oc, (blasint)g->n);
}

/* C[b] = op(A[b]) @ op(B[b]) for b < nb, row-major, C packed (ldc = n); the callers checked
   that every size fits blasint. */
static void jd_gemm(int f64, int trans_a, int trans_b, int64_t nb, int64_t m, int64_t n,
                    int64_t k, const void *a, const void *b, void *c) {
  if (scipy_openblas_get_num_threads() != 1) scipy_openblas_set_num_threads(1);  /* if reset */
  jd_gemm_job g = {f64, trans_a, trans_b, m, n, k, trans_a ? m : k, trans_b ? k : n,
                   m * k, k * n, m * n, a, b, c, 1, 0, 0};
  const double work = (double)nb * m * n * k;
  /* All jd_blas_max threads, busy machine or not: a late worker costs nothing, and fewer
     threads would only give up CPU share to the neighbours (measured: `jdisc bench --busy 2`,
     W1 and W3, against the load-adapted count of jd_threads.h). */
  const int threads = work < JD_GEMM_SPLIT_WORK ? 1 : jd_blas_max;
  /* Split the larger of m and n (each piece re-packs the whole of the other operand), into
     about four pieces per thread over all matrices, each at least JD_GEMM_MIN_ROWS wide. */
  g.split_n = n > m;
  const int64_t extent = g.split_n ? n : m;
  int64_t parts = threads > 1 ? (4 * threads + nb - 1) / nb : 1;
  const int64_t widest = (extent + JD_GEMM_MIN_ROWS - 1) / JD_GEMM_MIN_ROWS;
  if (parts > widest) parts = widest;
  if (parts < 1) parts = 1;
  g.step = (extent + parts - 1) / parts;
  g.step = (g.step + 7) / 8 * 8;                  /* whole register blocks where possible */
  g.parts = (extent + g.step - 1) / g.step;
  jd_pool_run(jd_gemm_piece, &g, nb * g.parts, threads);
}
