/*
 * String interning. Every string that crosses a module boundary (function
 * and file names decoded from the target, native symbols) is interned once
 * per session: equal strings get the same pointer, so aggregation can hash
 * and compare pointers, and nothing is freed until spy_strtab_release().
 */
#ifndef SPY_COMMON_STRTAB_H
#define SPY_COMMON_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "common/hashmap.h"

struct spy_strtab {
	/* private */
	struct spy_hmap index; /* hash of the bytes -> struct spy_strtab_ent * */
	struct spy_strtab_chunk *chunks;
	size_t bytes;          /* held for the strings: their entries and index slots */
	size_t max_bytes;      /* 0: no bound */
	uint64_t over;         /* strings refused for the bound */
	const char *over_s;    /* what is returned for them */
};

#define SPY_STRTAB_INIT { SPY_HMAP_INIT, NULL, 0, 0, 0, NULL }

/*
 * The strings a target names are a target's to choose: a table that one
 * process fills (an agent's worker keeps one as long as its process
 * lives) takes at most max bytes. Past it, a new string is not kept:
 * interning it returns SPY_STRTAB_OVER (interned once, outside the bound)
 * and is counted (spy_strtab_over). Strings interned already still match.
 */
#define SPY_STRTAB_OVER "<names over spy's memory budget>"
void spy_strtab_set_budget(struct spy_strtab *t, size_t max);
uint64_t spy_strtab_over(const struct spy_strtab *t);
size_t spy_strtab_bytes(const struct spy_strtab *t);

/* Intern len bytes at s (need not be NUL-terminated; must not contain NUL). */
const char *spy_strtab_intern(struct spy_strtab *t, const char *s, size_t len);
const char *spy_strtab_interns(struct spy_strtab *t, const char *s);
size_t spy_strtab_count(const struct spy_strtab *t);
void spy_strtab_release(struct spy_strtab *t);

#endif
