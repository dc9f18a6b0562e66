/*
 * pyrt_seen, the set every linked walk (frames, thread states) checks each
 * address against, on its own.
 */
#include <stdlib.h>

#include "common/hashmap.h"
#include "pystate/internal.h"
#include "tests/lib/check.h"

/*
 * pyrt_seen on its own: a walk's first PYRT_SEEN_SCAN addresses go through
 * the filter and the log, the rest through the map; a repeat from either
 * part is caught in either, and a reset forgets both. Addresses 64 apart
 * and many: filter collisions happen, and must not count as repeats.
 */
static void test_seen(void)
{
	struct pyrt *rt = calloc(1, sizeof(*rt));
	CHECK(rt != NULL);
	if (!rt) {
		return;
	}
	for (int round = 0; round < 2; round++) {
		pyrt_seen_reset(rt);
		size_t n = round ? 100 : 3 * PYRT_SEEN_SCAN, fresh = 0;
		for (size_t i = 0; i < n; i++) {
			fresh += !pyrt_seen(rt, 0x7f0000000000ull + 64 * i);
		}
		CHECK_INT(fresh, n);
		CHECK_INT(rt->seen_map, n > PYRT_SEEN_SCAN);
		CHECK(pyrt_seen(rt, 0x7f0000000000ull));               /* from the log's part */
		CHECK(pyrt_seen(rt, 0x7f0000000000ull + 64 * (n - 1))); /* the last */
		CHECK(!pyrt_seen(rt, 0x7f0000000000ull + 64 * n));
		CHECK(!pyrt_seen(rt, 8));
		CHECK(pyrt_seen(rt, 8));
	}
	pyrt_seen_reset(rt);
	CHECK(!pyrt_seen(rt, 8));
	CHECK_INT(rt->seen_n, 1);
	spy_hmap_release(&rt->seen);
	free(rt);
}

/*
 * A walk that descends notes its frames unasked (pyrt_seen_note); once it
 * steps up, pyrt_seen must find every noted address, from the filter or,
 * past PYRT_SEEN_SCAN of them, from the map.
 */
static void test_noted(void)
{
	struct pyrt *rt = calloc(1, sizeof(*rt));
	CHECK(rt != NULL);
	if (!rt) {
		return;
	}
	const spy_addr_t top = 0x7f0000100000ull;
	for (int round = 0; round < 2; round++) {
		pyrt_seen_reset(rt);
		size_t n = round ? 3 * PYRT_SEEN_SCAN : 10;
		for (size_t i = 0; i < n; i++) {
			pyrt_seen_note(rt, top - 64 * i);
		}
		CHECK(!pyrt_seen(rt, top + 64));            /* a step up, to a new frame */
		CHECK_INT(rt->seen_map, n + 1 > PYRT_SEEN_SCAN);
		CHECK(pyrt_seen(rt, top - 64 * (n / 2)));   /* then down into a noted one */
		CHECK(pyrt_seen(rt, top));
		CHECK(pyrt_seen(rt, top - 64 * (n - 1)));
		CHECK(pyrt_seen(rt, top + 64));
		CHECK(!pyrt_seen(rt, top - 64 * n));
		CHECK_INT(rt->seen_n, n + 2);
	}
	spy_hmap_release(&rt->seen);
	free(rt);
}

int main(void)
{
	test_seen();
	test_noted();
	return check_done();
}
