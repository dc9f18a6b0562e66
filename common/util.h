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

#include <stddef.h>

void *spy_xmalloc(size_t n);
void *spy_xcalloc(size_t nmemb, size_t size);
void *spy_xrealloc(void *p, size_t n);
char *spy_xstrdup(const char *s);

/* Grow *v (an array of *alloc elements of elsize bytes) to hold at least need. */
void spy_grow(void **v, size_t *alloc, size_t need, size_t elsize);
#define SPY_GROW(v, alloc, need) spy_grow((void **)&(v), &(alloc), (need), sizeof(*(v)))

#define SPY_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Internal invariant broken: a bug in spy, never a property of the target. */
#define SPY_BUG(...) spy_bug(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void spy_bug(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#include "common/banned.h"

#endif
