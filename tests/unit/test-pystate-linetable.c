/*
 * Line-table decoders (pystate/linetable.c) against tables and answers
 * produced by the real interpreters (tests/unit/fixtures/linetables.h, made
 * by tools/gen-linetable-fixtures), plus hand-made edge cases and garbage.
 *
 * Every table is copied into a heap block of exactly its length before it is
 * decoded, so a sanitizer build catches any read past the end.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pystate/linetable.h"
#include "pystate/offsets.h"
#include "tests/lib/check.h"
#include "tests/unit/fixtures/linetables.h"

static int32_t lookup(int model, const uint8_t *tab, size_t len, int32_t first, int64_t addr)
{
	uint8_t *copy = spy_xmalloc(len ? len : 1);
	if (len) {
		memcpy(copy, tab, len);
	}
	int32_t line = pyline_addr2line(model, len ? copy : NULL, len, first, addr);
	free(copy);
	return line;
}

/* Every address of every code object the interpreters compiled. */
static void test_fixtures(void)
{
	size_t total = 0, bad = 0;
	for (size_t i = 0; i < SPY_ARRAY_SIZE(ltf_all); i++) {
		const struct ltf *f = &ltf_all[i];
		uint8_t *copy = spy_xmalloc(f->len ? f->len : 1);
		memcpy(copy, f->tab, f->len);
		for (size_t j = 0; j < f->nexp; j++) {
			int64_t addr = f->exp[2 * j];
			int32_t want = f->exp[2 * j + 1];
			int32_t got = pyline_addr2line(f->model, copy, f->len, f->firstlineno, addr);
			total++;
			if (got != want) {
				bad++;
				if (bad < 20) {
					fprintf(stderr, "%s %s: addr %lld: got %d, want %d\n", f->python,
						f->name, (long long)addr, got, want);
				}
			}
		}
		free(copy);
	}
	printf("fixtures: %zu code objects, %zu addresses, %zu mismatches\n",
	       SPY_ARRAY_SIZE(ltf_all), total, bad);
	CHECK(total > 4000);
	CHECK_INT(bad, 0);
}

/* The fixtures must cover what the decoders are supposed to handle. */
static void test_fixture_coverage(void)
{
	int models[8] = { 0 };
	int neg_s8 = 0, gap = 0, long_addr = 0, noloc = 0;
	for (size_t i = 0; i < SPY_ARRAY_SIZE(ltf_all); i++) {
		const struct ltf *f = &ltf_all[i];
		models[f->model & 7]++;
		for (size_t j = 0; j + 1 < f->len; j += 2) {
			if (f->model == PYLINE_LNOTAB_S8 && (int8_t)f->tab[j + 1] < 0) {
				neg_s8++;
			}
			if ((f->model == PYLINE_LNOTAB_S8 || f->model == PYLINE_LNOTAB_U8) &&
			    f->tab[j] == 255) {
				long_addr++;
			}
		}
		for (size_t j = 1; j < f->nexp; j++) {
			if (f->exp[2 * j + 1] - f->firstlineno > 300) {
				gap++;
				break;
			}
		}
		if (f->model == PYLINE_LOCATIONS) {
			for (size_t j = 0; j < f->len; j++) {
				if ((f->tab[j] & 0xf8) == 0xf8) {
					noloc++;
				}
			}
		}
	}
	CHECK(models[PYLINE_LNOTAB_U8] > 0);
	CHECK(models[PYLINE_LNOTAB_S8] > 0);
	CHECK(models[PYLINE_LINETABLE_310] > 0);
	CHECK(models[PYLINE_LOCATIONS] > 0);
	CHECK(neg_s8 > 0);     /* 3.8/3.9 emit backward line deltas */
	CHECK(gap > 0);        /* the 300-line gap */
	CHECK(long_addr > 0);  /* more than 255 bytes on one line */
	CHECK(noloc > 0);      /* 3.11+ no-location entries */
}

static void test_lnotab_sign(void)
{
	/* The probe from cpython-internals.md: 2.7 reads 0xfe as +254, 3.6+ as -2. */
	const uint8_t t[] = { 2, 0xfe };
	CHECK_INT(lookup(PYLINE_LNOTAB_U8, t, 2, 100, 2), 354);
	CHECK_INT(lookup(PYLINE_LNOTAB_S8, t, 2, 100, 2), 98);
	CHECK_INT(lookup(PYLINE_LNOTAB_S8, t, 2, 100, 1), 100);
	CHECK_INT(lookup(PYLINE_LNOTAB_S8, t, 2, 100, -1), 100);
	/* Odd trailing byte is ignored, like CPython's size / 2. */
	const uint8_t odd[] = { 0, 5, 7 };
	CHECK_INT(lookup(PYLINE_LNOTAB_S8, odd, 3, 10, 100), 15);
	CHECK_INT(lookup(PYLINE_LNOTAB_U8, NULL, 0, 10, 100), 10);
}

static void test_linetable310(void)
{
	/* [0,4) line+1, [4,6) no line, zero-length +10, [6,8) +2 */
	const uint8_t t[] = { 4, 1, 2, 0x80, 0, 10, 2, 2 };
	CHECK_INT(lookup(PYLINE_LINETABLE_310, t, sizeof(t), 10, 0), 11);
	CHECK_INT(lookup(PYLINE_LINETABLE_310, t, sizeof(t), 10, 3), 11);
	CHECK_INT(lookup(PYLINE_LINETABLE_310, t, sizeof(t), 10, 4), -1);
	CHECK_INT(lookup(PYLINE_LINETABLE_310, t, sizeof(t), 10, 6), 23);
	CHECK_INT(lookup(PYLINE_LINETABLE_310, t, sizeof(t), 10, 8), -1);
	CHECK_INT(lookup(PYLINE_LINETABLE_310, t, sizeof(t), 10, -1), 10);
}

static void test_locations(void)
{
	const uint8_t t[] = {
		0x80 | (13 << 3) | 1, 0x04,       /* 2 units, no columns, line += 2 */
		0x80 | (15 << 3) | 0,             /* 1 unit, no location */
		0x80 | (14 << 3) | 2, 0x05, 0, 1, 1, /* 3 units, long form, line -= 2 */
		0x80 | (11 << 3) | 0, 3, 4,       /* 1 unit, one-line form, line += 1 */
		0x80 | (0 << 3) | 7, 0x12,        /* 8 units, short form */
		0x80 | (13 << 3) | 0, 0x40 | 0x02, 0x01, /* 2-byte varint: 66 -> +33 */
	};
	int32_t first = 50;
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, -2), 50);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 0), 52);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 2), 52);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 4), -1);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 6), 50);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 11), 50); /* odd addr: same unit */
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 12), 51);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 14), 51);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 28), 51);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 30), 84);
	CHECK_INT(lookup(PYLINE_LOCATIONS, t, sizeof(t), first, 32), -1);
	/* A varint whose continuation runs off the end stops at the end. */
	const uint8_t trunc[] = { 0x80 | (13 << 3) | 0, 0x40 | 0x04 };
	CHECK_INT(lookup(PYLINE_LOCATIONS, trunc, sizeof(trunc), 10, 0), 12);
	/* A runaway varint of continuation bytes stays bounded. */
	uint8_t runaway[64];
	runaway[0] = 0x80 | (13 << 3);
	memset(runaway + 1, 0x7f, sizeof(runaway) - 1);
	int32_t l = lookup(PYLINE_LOCATIONS, runaway, sizeof(runaway), 10, 0);
	CHECK(l != 0 || l == 0); /* any answer; must not crash */
}

static void test_unknown_model(void)
{
	const uint8_t t[] = { 1, 1 };
	CHECK_INT(lookup(0, t, 2, 1, 0), -1);
	CHECK_INT(lookup(99, t, 2, 1, 0), -1);
}

/* Every prefix of every real table, at every address: never out of bounds. */
static void test_truncated(void)
{
	size_t calls = 0;
	for (size_t i = 0; i < SPY_ARRAY_SIZE(ltf_all); i++) {
		const struct ltf *f = &ltf_all[i];
		for (size_t len = 0; len <= f->len; len += 1 + len / 16) {
			uint8_t *copy = spy_xmalloc(len ? len : 1);
			memcpy(copy, f->tab, len);
			for (size_t j = 0; j < f->nexp; j += 3) {
				(void)pyline_addr2line(f->model, copy, len, f->firstlineno, f->exp[2 * j]);
				calls++;
			}
			free(copy);
		}
	}
	CHECK(calls > 1000);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/*
 * Every address in the span pyline_addr2line_span gives for addr has
 * addr's line (checked across the span, clipped to the table's reach),
 * and the span holds addr: on the real tables at each address the
 * interpreters answered for (test_span), and on garbage of every model
 * (test_garbage).
 */
static int span_holds(int model, const uint8_t *t, size_t len, int32_t first, int64_t addr)
{
	struct pyline_span sp;
	int32_t line = pyline_addr2line_span(model, t, len, first, addr, &sp);
	if (line != pyline_addr2line(model, t, len, first, addr)) {
		return 0;
	}
	if (addr == INT64_MAX) {
		return sp.lo == sp.hi;
	}
	if (!(sp.lo <= addr && addr < sp.hi)) {
		return 0;
	}
	/* Past 8 * len + 64 every model is past its table's end. */
	int64_t reach = 8 * (int64_t)len + 64;
	int64_t lo = sp.lo < -4 ? -4 : sp.lo, hi = sp.hi > reach ? reach : sp.hi;
	for (int64_t a = lo; a < hi; a++) {
		if (pyline_addr2line(model, t, len, first, a) != line) {
			return 0;
		}
	}
	return 1;
}

/*
 * Random garbage of every model (and unknown ones), including extreme
 * first lines and addrs; every fourth also has its span checked.
 */
static void test_garbage(void)
{
	static const int32_t firsts[] = { 1, 0, -5, INT32_MAX, INT32_MIN + 1 };
	int ok = 1, spans_ok = 1;
	for (int iter = 0; iter < 20000; iter++) {
		size_t len = rnd() % 96;
		uint8_t *t = spy_xmalloc(len ? len : 1);
		for (size_t k = 0; k < len; k++) {
			t[k] = (uint8_t)rnd();
		}
		int model = (int)(rnd() % 6);
		int64_t addr = (int64_t)(rnd() % 512) - 2;
		if (iter % 97 == 0) {
			addr = INT64_MAX - (int64_t)(rnd() % 4);
		}
		int32_t first = firsts[rnd() % SPY_ARRAY_SIZE(firsts)];
		int32_t line = pyline_addr2line(model, t, len, first, addr);
		if (line < INT32_MIN + 1 && line != -1) {
			ok = 0;
		}
		if (iter % 4 == 0) {
			spans_ok &= span_holds(model, len ? t : NULL, len, first, addr);
		}
		free(t);
	}
	CHECK(ok);
	CHECK(spans_ok);
}

static void test_span(void)
{
	size_t bad = 0, total = 0, narrow = 0;
	for (size_t i = 0; i < SPY_ARRAY_SIZE(ltf_all); i++) {
		const struct ltf *f = &ltf_all[i];
		uint8_t *copy = spy_xmalloc(f->len ? f->len : 1);
		memcpy(copy, f->tab, f->len);
		for (size_t j = 0; j < f->nexp && j < 64; j++) {
			int64_t addr = f->exp[2 * j];
			struct pyline_span sp;
			(void)pyline_addr2line_span(f->model, copy, f->len, f->firstlineno, addr, &sp);
			/* Bounded both ends (an unbounded end is INT64_MIN or INT64_MAX). */
			narrow += sp.lo > INT64_MIN && sp.hi < INT64_MAX && sp.hi - sp.lo > 1 &&
				  sp.hi - sp.lo < 1000;
			total++;
			if (!span_holds(f->model, copy, f->len, f->firstlineno, addr)) {
				if (bad++ < 10) {
					fprintf(stderr, "%s %s: addr %lld: span [%lld, %lld) wrong\n", f->python,
						f->name, (long long)addr, (long long)sp.lo, (long long)sp.hi);
				}
			}
		}
		free(copy);
	}
	printf("spans: %zu addresses, %zu bounded spans of several addresses, %zu wrong\n", total, narrow,
	       bad);
	CHECK_INT(bad, 0);
	/* Spans do more than hold their own address. */
	CHECK(narrow > total / 4);
}

int main(void)
{
	test_fixtures();
	test_fixture_coverage();
	test_lnotab_sign();
	test_linetable310();
	test_locations();
	test_unknown_model();
	test_truncated();
	test_garbage();
	test_span();
	return check_done();
}
