/*
 * Unit tests for common/hashmap: the basic operations, repeated keys, keys
 * that share a home, deletion inside clusters, and a long random run checked
 * operation by operation against a plain array holding the same entries.
 */
#include <stdlib.h>
#include <string.h>

#include "common/hashmap.h"
#include "tests/lib/check.h"

/* Every probe ends at an empty slot and every entry is reachable from its
 * home without crossing one: the invariants hashmap.h promises. */
static bool invariants_hold(const struct spy_hmap *m)
{
	if (!m->cap) {
		return m->count == 0;
	}
	if ((m->cap & (m->cap - 1)) || m->count > m->cap / 2) {
		return false;
	}
	size_t n = 0, mask = m->cap - 1;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].val1) {
			continue;
		}
		n++;
		for (size_t j = spy_hmap_home(m, m->slots[i].key); j != i; j = (j + 1) & mask) {
			if (!m->slots[j].val1) {
				return false;
			}
		}
	}
	return n == m->count;
}

static void test_basic(void)
{
	struct spy_hmap m = SPY_HMAP_INIT;
	CHECK_INT(spy_hmap_get(&m, 1), SPY_HMAP_NONE);
	CHECK(!spy_hmap_del(&m, 1));
	CHECK(spy_hmap_put(&m, 1, 10));
	CHECK(spy_hmap_put(&m, 0, 0));
	CHECK(!spy_hmap_put(&m, 1, 11));
	CHECK_INT(spy_hmap_get(&m, 1), 11);
	CHECK_INT(spy_hmap_get(&m, 0), 0);
	CHECK(spy_hmap_has(&m, 0));
	CHECK_INT(spy_hmap_count(&m), 2);
	CHECK(spy_hmap_put(&m, UINT64_MAX, SPY_HMAP_NONE - 1));
	CHECK_INT(spy_hmap_get(&m, UINT64_MAX), SPY_HMAP_NONE - 1);
	CHECK(spy_hmap_del(&m, 1));
	CHECK_INT(spy_hmap_get(&m, 1), SPY_HMAP_NONE);
	CHECK_INT(spy_hmap_count(&m), 2);

	size_t pos = 0, seen = 0;
	uint64_t k, v;
	while (spy_hmap_each(&m, &pos, &k, &v)) {
		CHECK(k == 0 || k == UINT64_MAX);
		seen++;
	}
	CHECK_INT(seen, 2);

	spy_hmap_clear(&m);
	CHECK_INT(spy_hmap_count(&m), 0);
	CHECK_INT(spy_hmap_get(&m, 0), SPY_HMAP_NONE);
	CHECK(invariants_hold(&m));
	spy_hmap_release(&m);
	spy_hmap_release(&m);
}

/* An index: one key, several values; find/next visit all, del_at removes
 * one and the walk goes on. */
static void test_repeated_keys(void)
{
	struct spy_hmap m = SPY_HMAP_INIT;
	for (uint64_t v = 0; v < 5; v++) {
		spy_hmap_add(&m, 42, v);
		spy_hmap_add(&m, 43, v + 100);
	}
	struct spy_hmap_it it;
	unsigned mask = 0;
	for (uint64_t v = spy_hmap_find(&m, 42, &it); v != SPY_HMAP_NONE; v = spy_hmap_next(&m, 42, &it)) {
		CHECK(v < 5);
		mask |= 1u << v;
	}
	CHECK_INT(mask, 0x1f);

	/* Delete the odd values while walking. */
	for (uint64_t v = spy_hmap_find(&m, 42, &it); v != SPY_HMAP_NONE; v = spy_hmap_next(&m, 42, &it)) {
		if (v & 1) {
			spy_hmap_del_at(&m, &it);
		}
	}
	mask = 0;
	for (uint64_t v = spy_hmap_find(&m, 42, &it); v != SPY_HMAP_NONE; v = spy_hmap_next(&m, 42, &it)) {
		mask |= 1u << v;
	}
	CHECK_INT(mask, 0x15);
	CHECK_INT(spy_hmap_count(&m), 8);
	CHECK(invariants_hold(&m));
	spy_hmap_release(&m);
}

/* Keys whose mixes share the low bits: a long cluster that deletion must
 * keep reachable, and the bounded probe that grows the table. */
static void test_clusters(void)
{
	struct spy_hmap m = SPY_HMAP_INIT;
	spy_hmap_reserve(&m, 4096);
	size_t cap = m.cap;
	uint64_t keys[200];
	size_t n = 0;
	uint64_t home0 = spy_mix64(0) & (cap - 1);
	for (uint64_t k = 0; n < SPY_ARRAY_SIZE(keys); k++) {
		if ((spy_mix64(k) & (cap - 1)) == home0) {
			keys[n++] = k;
		}
	}
	for (size_t i = 0; i < 20; i++) {
		spy_hmap_put(&m, keys[i], i);
	}
	CHECK_INT(m.cap, cap);
	for (size_t i = 0; i < 20; i += 3) {
		CHECK(spy_hmap_del(&m, keys[i]));
		CHECK(invariants_hold(&m));
	}
	for (size_t i = 0; i < 20; i++) {
		CHECK_INT(spy_hmap_get(&m, keys[i]), i % 3 ? (uint64_t)i : SPY_HMAP_NONE);
	}
	/* Past SPY_HMAP_PROBE_MAX the table grows once it is 1/8 full, and
	 * not before: 200 colliding keys in 8192 slots stay put. */
	for (size_t i = 0; i < n; i++) {
		spy_hmap_put(&m, keys[i], i);
	}
	CHECK_INT(m.cap, cap);
	CHECK(invariants_hold(&m));
	spy_hmap_release(&m);

	struct spy_hmap g = SPY_HMAP_INIT;
	for (size_t i = 0; i < 200; i++) {
		spy_hmap_add(&g, 7, i); /* one key: no growth can spread it */
	}
	CHECK(g.cap <= 8 * 200 * 2);
	CHECK(invariants_hold(&g));
	spy_hmap_release(&g);
}

/* The reference: a plain array of (key, value), searched linearly. */
struct ref {
	uint64_t k[4096], v[4096];
	size_t n;
};

static size_t ref_find(const struct ref *r, uint64_t k)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->k[i] == k) {
			return i;
		}
	}
	return r->n;
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return spy_mix64(*s);
}

static void test_random(void)
{
	struct spy_hmap m = SPY_HMAP_INIT;
	static struct ref r;
	uint64_t seed = 12345;
	size_t bad = 0;
	for (int round = 0; round < 200000; round++) {
		uint64_t x = rng_next(&seed);
		/* Small key spaces so puts hit existing keys and deletes find
		 * them; the space widens and narrows so the table grows, drains
		 * and refills. Some keys are raw small integers, some share
		 * low bits (addresses 16 bytes apart). */
		uint64_t space = round % 50000 < 25000 ? 3000 : 300;
		uint64_t k = (x >> 8) % space;
		if (x & 0x10) {
			k = 0x7f0000000000ULL + k * 16;
		}
		size_t i = ref_find(&r, k);
		switch (x % 4) {
		case 0:
		case 1: {
			uint64_t v = x >> 20;
			bool added = spy_hmap_put(&m, k, v);
			bad += added != (i == r.n);
			if (i == r.n && r.n < SPY_ARRAY_SIZE(r.k)) {
				r.k[r.n++] = k;
			}
			r.v[i] = v;
			break;
		}
		case 2: {
			bool had = spy_hmap_del(&m, k);
			bad += had != (i < r.n);
			if (i < r.n) {
				r.n--;
				r.k[i] = r.k[r.n];
				r.v[i] = r.v[r.n];
			}
			break;
		}
		default:
			bad += spy_hmap_get(&m, k) != (i < r.n ? r.v[i] : SPY_HMAP_NONE);
			break;
		}
		bad += spy_hmap_count(&m) != r.n;
		if (round % 10000 == 0) {
			bad += !invariants_hold(&m);
		}
	}
	/* Every entry the reference holds, and nothing else. */
	size_t pos = 0, n = 0;
	uint64_t k, v;
	while (spy_hmap_each(&m, &pos, &k, &v)) {
		size_t i = ref_find(&r, k);
		bad += i == r.n || r.v[i] != v;
		n++;
	}
	CHECK_INT(n, r.n);
	CHECK_INT(bad, 0);
	CHECK(invariants_hold(&m));
	spy_hmap_release(&m);
}

int main(void)
{
	test_basic();
	test_repeated_keys();
	test_clusters();
	test_random();
	return check_done();
}
