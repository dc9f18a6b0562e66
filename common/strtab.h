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

struct spy_strtab {
	/* private */
	struct spy_strtab_ent **slots;
	size_t nslots, count;
	struct spy_strtab_chunk *chunks;
};

#define SPY_STRTAB_INIT { NULL, 0, 0, NULL }

/* Intern len bytes at s (need not be NUL-terminated; must not contain NUL). */
const char *spy_strtab_intern(struct spy_strtab *t, const char *s, size_t len);
const char *spy_strtab_interns(struct spy_strtab *t, const char *s);
size_t spy_strtab_count(const struct spy_strtab *t);
void spy_strtab_release(struct spy_strtab *t);

#endif
