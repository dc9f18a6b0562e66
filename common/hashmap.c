/*
 * spy_hmap's changes: growing, inserting and backward-shift deletion. The
 * invariants are in hashmap.h.
 */
#include <stdlib.h>
#include <string.h>

#include "common/hashmap.h"

static void rehash(struct spy_hmap *m, size_t cap)
{
	struct spy_hmap_slot *old = m->slots;
	size_t nold = m->cap;
	m->slots = spy_xcalloc(cap, sizeof(*m->slots));
	m->cap = cap;
	size_t mask = cap - 1;
	for (size_t i = 0; i < nold; i++) {
		if (!old[i].val1) {
			continue;
		}
		size_t j = spy_hmap_home(m, old[i].key);
		while (m->slots[j].val1) {
			j = (j + 1) & mask;
		}
		m->slots[j] = old[i];
	}
	free(old);
}

void spy_hmap_reserve(struct spy_hmap *m, size_t n)
{
	size_t cap = m->cap ? m->cap : SPY_HMAP_MIN_CAP;
	while (cap / 2 < n) {
		if (cap > SIZE_MAX / 4 / sizeof(struct spy_hmap_slot)) {
			SPY_BUG("hash map of %zu entries", n);
		}
		cap *= 2;
	}
	if (cap != m->cap) {
		rehash(m, cap);
	}
}

void spy_hmap_add(struct spy_hmap *m, uint64_t key, uint64_t val)
{
	if (val == SPY_HMAP_NONE) {
		SPY_BUG("hash map value SPY_HMAP_NONE");
	}
	spy_hmap_reserve(m, m->count + 1);
	for (;;) {
		size_t mask = m->cap - 1, j = spy_hmap_home(m, key), dist = 0;
		while (m->slots[j].val1) {
			j = (j + 1) & mask;
			dist++;
		}
		if (dist > SPY_HMAP_PROBE_MAX && m->count >= m->cap / 8) {
			rehash(m, m->cap * 2);
			continue;
		}
		m->slots[j] = (struct spy_hmap_slot){ key, val + 1 };
		m->count++;
		return;
	}
}

bool spy_hmap_put(struct spy_hmap *m, uint64_t key, uint64_t val)
{
	struct spy_hmap_it it;
	if (spy_hmap_find(m, key, &it) != SPY_HMAP_NONE) {
		if (val == SPY_HMAP_NONE) {
			SPY_BUG("hash map value SPY_HMAP_NONE");
		}
		m->slots[it.i].val1 = val + 1;
		return false;
	}
	spy_hmap_add(m, key, val);
	return true;
}

void spy_hmap_del_at(struct spy_hmap *m, struct spy_hmap_it *it)
{
	size_t mask = m->cap - 1, hole = it->i;
	/* Pull back each later entry of the cluster that may sit at the hole:
	 * one whose home is not in (hole, j], cyclically. */
	for (size_t j = (hole + 1) & mask; m->slots[j].val1; j = (j + 1) & mask) {
		size_t home = spy_hmap_home(m, m->slots[j].key);
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			m->slots[hole] = m->slots[j];
			hole = j;
		}
	}
	m->slots[hole] = (struct spy_hmap_slot){ 0, 0 };
	m->count--;
	it->i = (it->i - 1) & mask;
}

bool spy_hmap_del(struct spy_hmap *m, uint64_t key)
{
	struct spy_hmap_it it;
	if (spy_hmap_find(m, key, &it) == SPY_HMAP_NONE) {
		return false;
	}
	spy_hmap_del_at(m, &it);
	return true;
}

void spy_hmap_clear(struct spy_hmap *m)
{
	if (m->slots) {
		memset(m->slots, 0, m->cap * sizeof(*m->slots));
	}
	m->count = 0;
}

void spy_hmap_release(struct spy_hmap *m)
{
	free(m->slots);
	*m = (struct spy_hmap)SPY_HMAP_INIT;
}

bool spy_hmap_each(const struct spy_hmap *m, size_t *pos, uint64_t *key, uint64_t *val)
{
	for (size_t i = *pos; i < m->cap; i++) {
		if (m->slots[i].val1) {
			if (key) {
				*key = m->slots[i].key;
			}
			if (val) {
				*val = m->slots[i].val1 - 1;
			}
			*pos = i + 1;
			return true;
		}
	}
	*pos = m->cap;
	return false;
}
