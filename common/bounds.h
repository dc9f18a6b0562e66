/*
 * Every bound on data read from a target, in one place, each with its reason.
 * Hitting a bound truncates what is being read and marks it; it never loops
 * on and never allocates more.
 */
#ifndef SPY_COMMON_BOUNDS_H
#define SPY_COMMON_BOUNDS_H

/* Python frames per stack: CPython's default recursion limit is 1000, and
 * people raise it; 4096 keeps deep-but-real stacks whole. */
#define SPY_MAX_PY_DEPTH 4096
/* Native frames per stack (eu-stack's default is 256). */
#define SPY_MAX_NATIVE_DEPTH 512
/* Threads per interpreter and OS threads per process we look at. */
#define SPY_MAX_THREADS 4096
/* Interpreters per process (sub-interpreters are rare; a chain longer than
 * this is a cycle or garbage). */
#define SPY_MAX_INTERPS 256
/* Bytes of one decoded string (function or file name), as in austin. */
#define SPY_MAX_STR 4096
/* Bytes of one line table. The largest in the 3.13 stdlib is ~40 KB. */
#define SPY_MAX_LINETABLE (1u << 20)
/* Bytes of a /proc text file we read whole (maps of a big process). */
#define SPY_MAX_PROCFILE (64u << 20)
/* Mappings per process. */
#define SPY_MAX_MAPS 1000000

#endif
