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
};

#define SPY_STRTAB_INIT { SPY_HMAP_INIT, NULL }

/* Intern len bytes at s (need not be NUL-terminated; must not contain NUL). */
const char *spy_strtab_intern(struct spy_strtab *t, const char *s, size_t len);
const char *spy_strtab_interns(struct spy_strtab *t, const char *s);
size_t spy_strtab_count(const struct spy_strtab *t);
void spy_strtab_release(struct spy_strtab *t);

#endif
