/* The program's pool of threads: every parallel kernel loop and every large GEMM runs on it.

   Work is cut into pieces (a range of a kernel's rows, a block of a GEMM's result); the caller
   and the pool's workers claim pieces from one counter, and the caller waits only for pieces
   another thread has started: a worker that wakes after the last piece was claimed finds
   nothing and costs the caller nothing. With a team of threads that each own a share (an
   OpenMP parallel loop, OpenBLAS's threads) the work ends when its last thread does, so one
   thread waiting a scheduler tick behind a busy neighbour stalls the whole call; that is why
   there is one pool and no OpenMP team.

   The pool is this library's (one per loaded program, its workers started on first use; at
   most jd_pool_threads threads including the caller, set by the runtime from JDISC_NUM_THREADS
   or the affinity mask and cgroup quota; kernel loops use fewer on a busy machine, below). A second caller that finds it in use, and work
   issued from inside a piece, run their pieces on their own thread. After fork() the child
   starts new workers. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/types.h>

/* jd_piece_fn, jd_region and the declarations of what kernels call: jd_shared.h */

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
  jd_fp_state fp;              /* the caller's floating-point mode (subnormals: jd_fp.h) */
} jd_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
             0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

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

/* How long a worker polls for the next job before it sleeps: the next parallel loop or GEMM
   usually follows within microseconds, and waking a sleeping thread costs tens to hundreds of microseconds. */
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
    const jd_fp_state fp = jd_pool.fp;
    pthread_mutex_unlock(&jd_pool.lock);
    if (jd_fp_get() != fp) jd_fp_set(fp);     /* the job runs in its caller's mode */
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
      jd_pool.fp = jd_fp_get();
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


/* ---- parallel loops of kernels ---------------------------------------------------------- */

static int jd_pool_threads = 1, jd_threads_pinned = 0;
void jd_set_threads(int n, int pinned) {     /* called when the library is loaded */
  jd_pool_threads = n > 0 ? n : 1;
  jd_threads_pinned = pinned;                /* JDISC_NUM_THREADS set: never adapted */
  scipy_openblas_set_num_threads(1);         /* every BLAS call is one piece (jd_gemm.h) */
}
int jd_threads(void) { return jd_pool_threads; }    /* for tests */

/* Threads for a kernel's loop: no more than the CPUs that other runnable tasks leave free.
   A piece a worker has started must finish before the loop returns, and a worker preempted in
   the middle of one by a busy neighbour holds the caller for a scheduler tick: short, memory-
   bound kernel loops lost 5-15 % to that beside two busy processes (`jdisc bench --quick
   --busy 2`, W1-W3, against this count). GEMMs, whose pieces are long, use every thread.
   The runnable count is /proc/loadavg's, re-read at most every 20 ms, less the runnable threads
   of this process (/proc/self/task, read only when loadavg counts others): this pool's workers
   spinning for the next job, and XLA's and OpenBLAS's, which spin for a while after each of
   their calls. Counted as neighbours, they made a program that alternates jax.jit and jdisc
   calls run jdisc's loops on one thread for 20 ms after each XLA call (W2 at 6 GB/s instead of
   10), and halved W4's convolutions. */
static int jd_kernel_threads_now = 1, jd_kernel_threads_seen = 1 << 30;
static int64_t jd_threads_checked_ns = -1000000000LL;
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
static int jd_runnable_own(void) {       /* this process's runnable threads, the caller's too */
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return 1;
  int running = 0;
  char path[32 + sizeof ((struct dirent *)0)->d_name], buf[256];  /* any name fits */
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || strlen(e->d_name) > 20) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    const int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    const char *state = strrchr(buf, ')');    /* "tid (name) S ...": the name may hold ") " */
    if (state && state[1] == ' ' && state[2] == 'R') running++;
  }
  closedir(dir);
  return running > 0 ? running : 1;
}
static int jd_kernel_threads(void) {
  if (jd_pool_threads <= 1 || jd_threads_pinned) return jd_pool_threads;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  const int64_t now = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
  if (now - __atomic_load_n(&jd_threads_checked_ns, __ATOMIC_RELAXED) >= 20000000LL) {
    __atomic_store_n(&jd_threads_checked_ns, now, __ATOMIC_RELAXED);
    /* this process's runnable threads (the caller, this pool's spinning workers, XLA's and
       OpenBLAS's) are not a neighbour's load. The system's count is read again after this
       process's threads were counted, and the smaller is kept: a worker that stopped
       spinning during the count (it spins 100 us after a job) is then in neither. */
    int others = jd_runnable_others();
    if (others > 0) {
      const int own = jd_runnable_own();
      const int again = jd_runnable_others();
      if (again >= 0 && again < others) others = again;
      others -= own - 1;
    }
    if (others < 0) others = 0;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    int n = jd_pool_threads;
    if (others >= 0 && online > 0 && online - others < n) n = (int)(online - others);
    if (n < 1) n = 1;
    /* fewer threads only when two reads in a row say so: a task that is runnable for an
       instant (a short-lived process, one of this process's threads going to sleep between
       the two files' reads) otherwise cost 20 ms of one-thread loops; on an idle 2-core
       machine a softmax's loop ran on one thread after about one read in three */
    const int seen = __atomic_exchange_n(&jd_kernel_threads_seen, n, __ATOMIC_RELAXED);
    __atomic_store_n(&jd_kernel_threads_now, seen > n ? (seen < jd_pool_threads ? seen :
                     jd_pool_threads) : n, __ATOMIC_RELAXED);
  }
  return __atomic_load_n(&jd_kernel_threads_now, __ATOMIC_RELAXED);
}
int jd_current_threads(void) { return jd_kernel_threads(); }   /* for tests */
JD_RT int jd_parallel_threads(void) { return jd_kernel_threads(); }
int jd_own_runnable(void) { return jd_runnable_own(); }          /* for tests */

/* Pieces per thread: enough that a thread that starts late, or runs slowly beside a busy
   neighbour, leaves its share to the others; few enough that claiming one (an atomic
   compare-and-swap) and a piece's scratch memory cost nothing next to its work. */
#define JD_PIECES_PER_THREAD 8

/* Tests only (JDISC_SPLIT_PIECES, custom_calls/runtime.py): every loop of more than one item
   runs in this many pieces, whatever its size, so that small test shapes cross the piece
   boundaries that only large ones meet otherwise. 0: the pieces follow `go` and the threads. */
static int jd_split_pieces = 0;
void jd_set_split_pieces(int n) { jd_split_pieces = n > 0 ? n : 0; }

/* Run a kernel's loop over [0, count): on the pool when `go` (the kernel judged the work large
   enough to share), else as one piece on the calling thread. */
JD_RT void jd_parallel(jd_piece_fn fn, jd_region *r, int64_t count, int go) {
  const int split = jd_split_pieces > 0 && count > 1;
  const int threads = (go || split) && count > 1 ? jd_kernel_threads() : 1;
  int64_t pieces = split ? jd_split_pieces
                         : threads > 1 ? (int64_t)JD_PIECES_PER_THREAD * threads : 1;
  if (pieces > count) pieces = count;
  r->count = count;
  r->failed = 0;
  if (count <= 0) return;
  r->step = (count + pieces - 1) / pieces;
  jd_pool_run(fn, r, (count + r->step - 1) / r->step, threads);
}
