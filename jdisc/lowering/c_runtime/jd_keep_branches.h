#if defined(__GNUC__) && !defined(__clang__)
#define JD_KEEP_BRANCHES __attribute__((optimize("no-tree-loop-if-convert")))
#else
#define JD_KEEP_BRANCHES
#endif