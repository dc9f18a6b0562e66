/*
 * spy_hmap: the one hash map, uint64_t keys to uint64_t values, open
 * addressing with linear probing. Every table in spy that hashes uses it.
 *
 * Two ways to use it:
 *  - a map: the key is the thing itself (an address, a pointer, a tid) and
 *    spy_hmap_get/spy_hmap_put/spy_hmap_del treat keys as unique;
 *  - an index over the caller's own array: the key is a hash of an entry
 *    (a string, a stack), the value its index, and the caller compares
 *    entries itself, walking every slot that holds the key with
 *    spy_hmap_find/spy_hmap_next and inserting with spy_hmap_add, which
 *    allows a key to repeat (two entries whose hashes collide).
 *
 * Invariants, true between calls:
 *  - cap is 0 or a power of two >= SPY_HMAP_MIN_CAP, and count <= cap / 2:
 *    at least half the slots are empty, so every probe ends at an empty slot
 *    after at most count steps, and is short on average.
 *  - An entry's home slot is spy_mix64(key) & (cap - 1) and it sits at its
 *    home or after it, with no empty slot between: deletion shifts the rest
 *    of the cluster back instead of leaving tombstones, so lookups never
 *    walk over slots that were emptied.
 *  - An insert that lands more than SPY_HMAP_PROBE_MAX slots past its home
 *    doubles the table while it is at least 1/8 full. Keys are mixed by a
 *    fixed bijection (so iteration order, and what spy writes, is the same
 *    run to run), so only keys whose mixes share their low bits or repeat
 *    make long runs, and growing stops at 8 slots per entry.
 *  - A slot stores value + 1, so a zeroed slot is empty and calloc makes an
 *    empty table; SPY_HMAP_NONE (UINT64_MAX) is the one value that cannot be
 *    stored, and is what look-ups return for "absent".
 *  - Adding or deleting moves entries: a cursor (struct spy_hmap_it) is
 *    valid only until the next change, except spy_hmap_del_at's own.
 *
 * The look-ups are inline: aggregation calls them per frame of every sample.
 */
#ifndef SPY_COMMON_HASHMAP_H
#define SPY_COMMON_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

#define SPY_HMAP_NONE UINT64_MAX
#define SPY_HMAP_MIN_CAP 16
#define SPY_HMAP_PROBE_MAX 32

struct spy_hmap_slot {
	uint64_t key;
	uint64_t val1; /* value + 1; 0: empty */
};

struct spy_hmap {
	/* private */
	struct spy_hmap_slot *slots;
	size_t cap, count;
};

#define SPY_HMAP_INIT { NULL, 0, 0 }

/* Where a look-up stands: the slot it last looked at. */
struct spy_hmap_it {
	size_t i;
};

static inline size_t spy_hmap_count(const struct spy_hmap *m)
{
	return m->count;
}

/* What the slots take, for memory accounting. */
static inline size_t spy_hmap_bytes(const struct spy_hmap *m)
{
	return m->cap * sizeof(struct spy_hmap_slot);
}

static inline size_t spy_hmap_home(const struct spy_hmap *m, uint64_t key)
{
	return (size_t)spy_mix64(key) & (m->cap - 1);
}

/* From it->i on, the first slot holding key; its value or SPY_HMAP_NONE. */
static inline uint64_t spy_hmap_scan_(const struct spy_hmap *m, uint64_t key, struct spy_hmap_it *it)
{
	size_t mask = m->cap - 1;
	for (size_t i = it->i;; i = (i + 1) & mask) {
		const struct spy_hmap_slot *s = &m->slots[i];
		if (!s->val1) {
			it->i = i;
			return SPY_HMAP_NONE;
		}
		if (s->key == key) {
			it->i = i;
			return s->val1 - 1;
		}
	}
}

/* The value of the first entry with key, or SPY_HMAP_NONE; it marks it. */
static inline uint64_t spy_hmap_find(const struct spy_hmap *m, uint64_t key, struct spy_hmap_it *it)
{
	if (!m->count) {
		return SPY_HMAP_NONE;
	}
	it->i = spy_hmap_home(m, key);
	return spy_hmap_scan_(m, key, it);
}

/* After find or next returned a value: the next entry with the same key. */
static inline uint64_t spy_hmap_next(const struct spy_hmap *m, uint64_t key, struct spy_hmap_it *it)
{
	it->i = (it->i + 1) & (m->cap - 1);
	return spy_hmap_scan_(m, key, it);
}

static inline uint64_t spy_hmap_get(const struct spy_hmap *m, uint64_t key)
{
	struct spy_hmap_it it;
	return spy_hmap_find(m, key, &it);
}

static inline bool spy_hmap_has(const struct spy_hmap *m, uint64_t key)
{
	return spy_hmap_get(m, key) != SPY_HMAP_NONE;
}

/* Insert key -> val even if key is there (an index's colliding hashes). */
void spy_hmap_add(struct spy_hmap *m, uint64_t key, uint64_t val);
/* Set key's value, adding it if absent. Returns whether it was added. */
bool spy_hmap_put(struct spy_hmap *m, uint64_t key, uint64_t val);
/* Remove the first entry with key. Returns whether there was one. */
bool spy_hmap_del(struct spy_hmap *m, uint64_t key);
/* Remove the entry find/next last returned; it then stands so that
 * spy_hmap_next continues with the entries after the removed one. */
void spy_hmap_del_at(struct spy_hmap *m, struct spy_hmap_it *it);
/* Room for n entries without growing. */
void spy_hmap_reserve(struct spy_hmap *m, size_t n);
/* Forget every entry, keeping the slots. */
void spy_hmap_clear(struct spy_hmap *m);
void spy_hmap_release(struct spy_hmap *m);

/*
 * Every entry once, in slot order, while nothing is added or deleted:
 *	size_t pos = 0; uint64_t k, v;
 *	while (spy_hmap_each(m, &pos, &k, &v)) { ... }
 * key or val may be NULL.
 */
bool spy_hmap_each(const struct spy_hmap *m, size_t *pos, uint64_t *key, uint64_t *val);

#endif
