/*
 * pyrt_seen, the set every linked walk (frames, thread states) checks each
 * address against, and pyrt_round, the memo's clock, on their own.
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

/*
 * The memo's clock (pyrt_round) counts rounds over the threads: walked in
 * turn, 150 threads (a pool, more than PYFRAME_MEMO_TTL) move it once a
 * round, not once a walk; one thread walked over and over moves it every
 * walk, as before; a round of more threads than half the slots ends early.
 */
static void test_round(void)
{
	struct pyrt *rt = calloc(1, sizeof(*rt));
	CHECK(rt != NULL);
	if (!rt) {
		return;
	}
	const spy_addr_t heap = 0x55d000001000ull;
	pyrt_round(rt, heap);
	uint64_t first = rt->clock;
	CHECK(first > 0);
	for (int r = 0; r < 3; r++) {
		for (size_t i = 0; i < 150; i++) {
			pyrt_round(rt, heap + 0x4000 * i);
		}
	}
	/* The first round's walk of thread 0 came before; each pass begins a round. */
	CHECK_INT(rt->clock - first, 3);
	CHECK_INT(rt->walks, 451);
	uint64_t c = rt->clock;
	for (int i = 0; i < 10; i++) {
		pyrt_round(rt, heap);
	}
	CHECK_INT(rt->clock - c, 10);
	c = rt->clock;
	for (size_t i = 1; i <= PYRT_ROUND_SLOTS; i++) {
		pyrt_round(rt, heap + 64 * i);
	}
	CHECK_INT(rt->clock - c, 2);
	free(rt);
}

int main(void)
{
	test_seen();
	test_noted();
	test_round();
	return check_done();
}
