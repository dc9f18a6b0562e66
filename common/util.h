/*
 * Allocation wrappers and small helpers every module uses.
 *
 * spy_xmalloc and friends abort with a message when memory runs out, as git's
 * wrapper.c does: there are no untested out-of-memory paths. That is safe only
 * because every size read from a target is checked against a bound (bounds.h)
 * before it gets anywhere near an allocator.
 */
#ifndef SPY_COMMON_UTIL_H
#define SPY_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *spy_xmalloc(size_t n);
void *spy_xcalloc(size_t nmemb, size_t size);
void *spy_xrealloc(void *p, size_t n);
char *spy_xstrdup(const char *s);

/* Grow *v (an array of *alloc elements of elsize bytes) to hold at least need. */
void spy_grow(void **v, size_t *alloc, size_t need, size_t elsize);
/* The compare inline: a call per element appended costs a hot loop (a
 * frame pushed per sample) more than its work. need is evaluated twice. */
#define SPY_GROW(v, alloc, need)                                               \
	do {                                                                   \
		if ((need) > (alloc)) {                                        \
			spy_grow((void **)&(v), &(alloc), (need), sizeof(*(v))); \
		}                                                              \
	} while (0)

/* Whether s (NULL: no) ends with suffix: exactly, or (file names) ignoring ASCII case. */
bool spy_ends_with(const char *s, const char *suffix);
bool spy_ends_with_nocase(const char *s, const char *suffix);
/* The part of path after its last '/' (path itself without one). */
const char *spy_basename(const char *path);
/* Whether path names CPython's shared library (libpython3.11.so.1.0,
 * libpython2.7.so): the one rule of discovery and of finding the interpreter. */
bool spy_is_libpython(const char *path);
/*
 * The splitmix64 finaliser: every input bit reaches every output bit, so
 * masking the low bits of a pointer-derived key spreads well. Inline: it
 * runs per frame of every sample.
 */
static inline uint64_t spy_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

#define SPY_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Seconds as nanoseconds, saturating: NaN and s <= 0 give 0, anything from
 * SPY_NS_MAX up gives SPY_NS_MAX (146 years, so that adding it to a
 * monotonic clock reading cannot wrap). Converting an out-of-range double
 * to an integer is undefined behaviour, and the doubles come from options
 * and files: a --rate of 1e-300 is a period of 1e309 ns.
 */
#define SPY_NS_MAX ((uint64_t)1 << 62)
uint64_t spy_s_to_ns(double s);

/* CLOCK_MONOTONIC in ns: the one clock of deadlines, ticks and timeouts. */
uint64_t spy_now_ns(void);
/* The calling thread's CPU time in ns: what a piece of spy's work costs,
 * whatever else the machine runs (wall time would count that too). */
uint64_t spy_thread_cpu_ns(void);

/* Internal invariant broken: a bug in spy, never a property of the target. */
#define SPY_BUG(...) spy_bug(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void spy_bug(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#include "common/banned.h"

/*
 * FNV-1a over n bytes: for short keys whose collisions cost an adversary
 * nothing (tables bounded by what a target names, a file name compared).
 */
uint64_t spy_hash_bytes(const void *p, size_t n);

#endif
