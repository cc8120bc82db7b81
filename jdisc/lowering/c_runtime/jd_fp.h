/* Subnormal floats as XLA:CPU has them: while a program runs, arithmetic flushes subnormal
   results to zero (FTZ) and reads subnormal operands as zero (DAZ), on the calling thread and
   on the pool's workers (which take the caller's mode with each job). JDISC_SUBNORMALS=keep
   keeps IEEE gradual underflow instead. The thread's own mode is restored when the call
   returns, so neither the Python caller nor XLA's thread (inside a custom call) is changed.
   Loads, stores and bit casts never change a value: a copy of a subnormal stays one. */
#ifndef JD_FP_H
#define JD_FP_H
#ifndef JD_LIBC_H   /* else jd_libc.h declared what this uses */
#include <stdlib.h>
#include <string.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
typedef unsigned int jd_fp_state;
#define JD_FP_FLUSH 0x8040u          /* MXCSR: FTZ (bit 15) and DAZ (bit 6) */
/* the two instructions themselves, not <xmmintrin.h>'s wrappers: that header costs each unit
   that includes it 8-9 ms of the compiler's time */
static inline jd_fp_state jd_fp_get(void) {
  jd_fp_state s;
  __asm__ __volatile__("stmxcsr %0" : "=m"(s));
  return s;
}
static inline void jd_fp_set(jd_fp_state s) { __asm__ __volatile__("ldmxcsr %0" : : "m"(s)); }
#elif defined(__aarch64__)
typedef unsigned long jd_fp_state;
#define JD_FP_FLUSH (1ul << 24)      /* FPCR.FZ: flushes inputs and outputs */
static inline jd_fp_state jd_fp_get(void) {
  jd_fp_state s;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(s));
  return s;
}
static inline void jd_fp_set(jd_fp_state s) { __asm__ __volatile__("msr fpcr, %0" : : "r"(s)); }
#else
typedef unsigned int jd_fp_state;    /* another machine: subnormals as its default has them */
#define JD_FP_FLUSH 0u
static inline jd_fp_state jd_fp_get(void) { return 0; }
static inline void jd_fp_set(jd_fp_state s) { (void)s; }
#endif

/* The mode a call runs in: the caller's, with the flush bits as JDISC_SUBNORMALS says (read
   once; a race between two first calls writes the same value). */
static inline jd_fp_state jd_fp_mode(jd_fp_state now) {
  static int flush = -1;
  if (flush < 0) {
    const char *v = getenv("JDISC_SUBNORMALS");
    flush = !(v && strcmp(v, "keep") == 0);
  }
  return flush ? (now | JD_FP_FLUSH) : (now & ~(jd_fp_state)JD_FP_FLUSH);
}

/* Enter the call's mode; returns the thread's mode, for jd_fp_leave. */
static inline jd_fp_state jd_fp_enter(void) {
  const jd_fp_state old = jd_fp_get(), want = jd_fp_mode(old);
  if (want != old) jd_fp_set(want);
  return old;
}

static inline void jd_fp_leave(jd_fp_state old) {
  if (jd_fp_get() != old) jd_fp_set(old);
}
#endif
