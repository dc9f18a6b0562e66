/*
 * Unit tests for time windows and the trend (record --slice, report
 * --trend): shares per window and their least-squares slope worked out by
 * hand, recursion counted once, the round trip through a folded file
 * (including a window too long for one metadata line), the cap on windows,
 * and malformed window metadata.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flamegraph/internal.h"
#include "tests/lib/check.h"

#define CHECK_NEAR(a, b) CHECK(fabs((double)(a) - (double)(b)) < 1e-9)

/* Read one folded line into p and count it in window time t. */
static void add(struct fg_profile *p, struct fg_slices *s, const char *line, double t)
{
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, line, strlen(line), "line", &err), 0);
	const char *sp = strrchr(line, ' ');
	fg_slices_add(s, p, t, strtoull(sp + 1, NULL, 10));
}

/*
 * Three windows of 1 s:
 *   window 0 (t 0.1): steady 6, lookup 2 -> lookup 25%, steady 75%
 *   window 1 (t 1.5): steady 4, lookup 4 -> 50%, 50%
 *   window 2 (t 2.2): steady 2, lookup 6 -> 75%, 25%
 * main is on every stack: 100% in each.
 * lookup: x = 0, 1, 2; y = 25, 50, 75: slope +25 points per window, exactly
 * a line so r2 = 1, first 25, last 75, mean 50. steady: slope -25, r2 1.
 * main: slope 0, and no variance so r2 = 0. Order: lookup, main, steady.
 */
static void fill(struct fg_profile *p, struct fg_slices *s)
{
	add(p, s, "main (a.py:1);steady (a.py:5) 6", 0.1);
	add(p, s, "main (a.py:1);lookup (a.py:9) 2", 0.1);
	add(p, s, "main (a.py:1);steady (a.py:5) 4", 1.5);
	add(p, s, "main (a.py:1);lookup (a.py:9) 4", 1.5);
	add(p, s, "main (a.py:1);steady (a.py:5) 2", 2.2);
	add(p, s, "main (a.py:1);lookup (a.py:9) 6", 2.2);
}

static void check_trend(const struct fg_trend *t)
{
	CHECK_INT(t->windows, 3);
	CHECK_INT(t->samples, 24);
	CHECK_INT(t->nfuncs, 3);
	if (t->nfuncs != 3) {
		return;
	}
	CHECK_STR(t->rows[0].func, "lookup");
	CHECK_NEAR(t->rows[0].slope, 25);
	CHECK_NEAR(t->rows[0].first_pct, 25);
	CHECK_NEAR(t->rows[0].last_pct, 75);
	CHECK_NEAR(t->rows[0].mean_pct, 50);
	CHECK_NEAR(t->rows[0].r2, 1);
	CHECK_STR(t->rows[1].func, "main");
	CHECK_NEAR(t->rows[1].slope, 0);
	CHECK_NEAR(t->rows[1].r2, 0);
	CHECK_NEAR(t->rows[1].mean_pct, 100);
	CHECK_STR(t->rows[2].func, "steady");
	CHECK_NEAR(t->rows[2].slope, -25);
	CHECK_NEAR(t->rows[2].r2, 1);
}

static void test_trend_and_round_trip(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(1.0);
	fill(p, s);
	CHECK_INT(fg_slices_count(s), 3);
	struct fg_trend t;
	fg_trend_init(&t, s, p, 0);
	check_trend(&t);
	struct spy_buf b = SPY_BUF_INIT;
	fg_trend_render(&t, &b);
	CHECK(strstr(b.buf, " +25.000    25.00    75.00    50.00  1.00  lookup (a.py)\n") != NULL);
	fg_trend_release(&t);
	fg_trend_init(&t, s, p, 1);
	CHECK_INT(t.n, 1);
	fg_trend_release(&t);

	/* Written and read back, the windows give the same trend. */
	fg_slices_store(s, p);
	spy_buf_reset(&b);
	fg_profile_format_folded(p, &b);
	CHECK(strstr(b.buf, "# slice-s: 1\n# slices: 3\n") != NULL);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, b.buf, b.len, "rt", &err), 0);
	struct fg_slices *s2 = NULL;
	CHECK_INT(fg_slices_load(&s2, q, "rt", &err), 0);
	CHECK(s2 != NULL);
	if (s2) {
		fg_trend_init(&t, s2, q, 0);
		check_trend(&t);
		fg_trend_release(&t);
	}
	/* Storing twice replaces, never duplicates. */
	fg_slices_store(s, p);
	CHECK_STR(fg_profile_meta_get(p, "slices"), "3");
	fg_profile_meta_set(p, "other", "kept");
	fg_slices_drop(p);
	CHECK(fg_profile_meta_get(p, "slice-s") == NULL);
	CHECK(fg_profile_meta_get(p, "slices") == NULL);
	CHECK(fg_profile_meta_get(p, "slice-0") == NULL);
	CHECK(fg_profile_meta_get(p, "slice-2") == NULL);
	CHECK_STR(fg_profile_meta_get(p, "other"), "kept");
	fg_slices_free(s2);
	fg_profile_free(q);
	spy_buf_release(&b);
	fg_slices_free(s);
	fg_profile_free(p);
}

/*
 * A recording that ends just into a new window (3 samples there, none in
 * lookup) and started late in its first (2 samples): first% and last% are
 * the full windows' shares, 12% each, not 0%; each window weighs by its
 * samples, so the stubs hardly move the slope.
 */
static void test_partial_windows(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(1.0);
	add(p, s, "main (a.py:1);steady (a.py:5) 2", 0.9);
	for (int w = 1; w <= 3; w++) {
		add(p, s, "main (a.py:1);steady (a.py:5) 88", w + 0.5);
		add(p, s, "main (a.py:1);lookup (a.py:9) 12", w + 0.5);
	}
	add(p, s, "main (a.py:1);steady (a.py:5) 3", 4.03);
	struct fg_trend t;
	fg_trend_init(&t, s, p, 0);
	CHECK_INT(t.windows, 5);
	for (size_t i = 0; i < t.nfuncs; i++) {
		if (!strcmp(t.rows[i].func, "lookup")) {
			CHECK_NEAR(t.rows[i].first_pct, 12);
			CHECK_NEAR(t.rows[i].last_pct, 12);
			CHECK(fabs(t.rows[i].slope) < 0.5);
		}
	}
	fg_trend_release(&t);
	fg_slices_free(s);
	fg_profile_free(p);
}

/* fib;fib is one stack: fib's share of the window is 4 of 8, not 8 of 8. */
static void test_recursion(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(1.0);
	add(p, s, "fib (a.py:1);fib (a.py:2) 4", 0);
	add(p, s, "other (a.py:7) 4", 0);
	add(p, s, "other (a.py:7) 8", 1.2);
	struct fg_trend t;
	fg_trend_init(&t, s, p, 0);
	CHECK_INT(t.nfuncs, 2);
	if (t.nfuncs == 2) {
		CHECK_STR(t.rows[1].func, "fib");
		CHECK_NEAR(t.rows[1].first_pct, 50);
		CHECK_NEAR(t.rows[1].last_pct, 0);
		CHECK_NEAR(t.rows[1].slope, -50);
	}
	fg_trend_release(&t);
	fg_slices_free(s);
	fg_profile_free(p);
}

/* Past FG_MAX_SLICES windows, neighbours merge: nothing is lost. */
static void test_cap(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(1.0);
	add(p, s, "a (a.py:1) 1", 0);
	add(p, s, "a (a.py:1) 2", 0.5 + FG_MAX_SLICES);
	add(p, s, "b (a.py:2) 3", 3.5 * FG_MAX_SLICES);
	CHECK(fg_slices_count(s) <= FG_MAX_SLICES);
	CHECK_NEAR(fg_slices_len(s), 4);
	struct fg_trend t;
	fg_trend_init(&t, s, p, 0);
	CHECK_INT(t.samples, 6);
	CHECK_INT(t.windows, 3);
	fg_trend_release(&t);
	fg_slices_free(s);
	fg_profile_free(p);
}

/* A window with more stacks than one metadata line holds. */
static void test_long_window(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(0.5);
	char line[64];
	for (int i = 0; i < 3000; i++) {
		snprintf(line, sizeof(line), "f%d (a.py:1) %d", i, 1 + i % 7);
		add(p, s, line, 0.2);
	}
	add(p, s, "f1 (a.py:1) 5", 0.7);
	fg_slices_store(s, p);
	CHECK(fg_profile_meta_get(p, "slice-0.1") != NULL);
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, b.buf, b.len, "long", &err), 0);
	struct fg_slices *s2 = NULL;
	CHECK_INT(fg_slices_load(&s2, q, "long", &err), 0);
	if (s2) {
		struct fg_trend t1, t2;
		fg_trend_init(&t1, s, p, 0);
		fg_trend_init(&t2, s2, q, 0);
		CHECK_INT(t2.nfuncs, 3000);
		CHECK_INT(t2.samples, t1.samples);
		CHECK_STR(t2.rows[0].func, "f1");
		CHECK_NEAR(t2.rows[0].slope, t1.rows[0].slope);
		fg_trend_release(&t1);
		fg_trend_release(&t2);
	}
	fg_slices_free(s2);
	fg_profile_free(q);
	spy_buf_release(&b);
	fg_slices_free(s);
	fg_profile_free(p);
}

/* The same samples in another order write the same bytes. */
static void test_deterministic(void)
{
	static const char *const lines[] = { "b (a.py:2) 1", "a (a.py:1) 2", "c (a.py:3) 3" };
	struct spy_buf out[2] = { SPY_BUF_INIT, SPY_BUF_INIT };
	for (int k = 0; k < 2; k++) {
		struct fg_profile *p = fg_profile_new(NULL, 0);
		struct fg_slices *s = fg_slices_new(1.0);
		for (int i = 0; i < 3; i++) {
			add(p, s, lines[k ? 2 - i : i], 0.5);
		}
		fg_slices_store(s, p);
		fg_profile_format_folded(p, &out[k]);
		fg_slices_free(s);
		fg_profile_free(p);
	}
	CHECK_STR(out[0].buf, out[1].buf);
	CHECK(strstr(out[0].buf, "# slice-0: 0:2 1:1 2:3\n") != NULL);
	spy_buf_release(&out[0]);
	spy_buf_release(&out[1]);
}

static void expect_load(const char *text, int rc, const char *msg)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, text, strlen(text), "bad", &err), 0);
	struct fg_slices *s = (struct fg_slices *)1;
	CHECK_INT(fg_slices_load(&s, p, "bad.folded", &err), rc);
	if (rc) {
		CHECK(s == NULL);
		CHECK(strstr(err.msg, msg) != NULL);
		if (!strstr(err.msg, msg)) {
			fprintf(stderr, "  message: %s\n", err.msg);
		}
	}
	fg_slices_free(s);
	fg_profile_free(p);
}

static void test_malformed(void)
{
	expect_load("main (a.py:1) 1\n", 0, NULL);
	expect_load("# slice-s: 1\n# slice-0: 0:1\nmain (a.py:1) 1\n", 0, NULL);
	expect_load("# slice-s: 1\n# slice-0: 1:1\nmain (a.py:1) 1\n", -SPY_EFORMAT,
		    "bad.folded: # slice-0: stack 1 of 1");
	expect_load("# slice-s: 1\n# slice-2: 0:x\nmain (a.py:1) 1\n", -SPY_EFORMAT,
		    "bad.folded: # slice-2: expected STACK:COUNT");
	expect_load("# slice-s: 1\n# slice-0: 0:1  0:1\nmain (a.py:1) 1\n", -SPY_EFORMAT, "STACK:COUNT");
	expect_load("# slice-s: -1\nmain (a.py:1) 1\n", -SPY_EFORMAT, "slice-s");
	expect_load("# slice-s: 1\n# slice-0: 0:99999999999999999999\nmain (a.py:1) 1\n",
		    -SPY_EFORMAT, "STACK:COUNT");
}

/*
 * The collector's row: [gc] is the share of each window's samples whose
 * stack holds <GC>. Windows of 1 s, 10 samples each: <GC> under alloc 1,
 * 3, 5 of them -> 10%, 30%, 50%: slope +20 points per window, r2 1, mean
 * 30. It survives the folded round trip with the windows. A profile that
 * sampled the state (# gc: sampled) and saw no collection has a [gc] row
 * at 0; one that did not sample it (no # gc:, no <GC>) has none.
 */
static const struct fg_trend_row *find_row(const struct fg_trend *t, const char *func)
{
	for (size_t i = 0; i < t->nfuncs; i++) {
		if (!strcmp(t->rows[i].func, func)) {
			return &t->rows[i];
		}
	}
	return NULL;
}

/*
 * A function at 13 of every 18 samples, in windows of 108, 54 and 18, has
 * no trend, and says so with the same sign on every machine: summed raw,
 * sw*sum(wxy) - sum(wx)*sum(wy) left -1.6e-14 here (printed -0.000), and
 * on aarch64, where the compiler fuses the multiply-add, another residue.
 */
static void test_steady_share(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(1.0);
	static const int mult[] = { 6, 3, 1 };
	for (int w = 0; w < 3; w++) {
		char line[64];
		snprintf(line, sizeof(line), "main (a.py:1);steady (a.py:5) %d", 13 * mult[w]);
		add(p, s, line, w + 0.5);
		snprintf(line, sizeof(line), "main (a.py:1);rest (a.py:9) %d", 5 * mult[w]);
		add(p, s, line, w + 0.5);
	}
	struct fg_trend t;
	fg_trend_init(&t, s, p, 0);
	const struct fg_trend_row *r = find_row(&t, "steady");
	CHECK(r != NULL);
	if (r) {
		CHECK(r->slope == 0 && !signbit(r->slope));
		CHECK_NEAR(r->mean_pct, 1300.0 / 18);
	}
	struct spy_buf b = SPY_BUF_INIT;
	fg_trend_render(&t, &b);
	CHECK(strstr(b.buf, "-0.000") == NULL);
	spy_buf_release(&b);
	fg_trend_release(&t);
	fg_slices_free(s);
	fg_profile_free(p);
}

static void test_gc_row(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_slices *s = fg_slices_new(1.0);
	static const int gc[] = { 1, 3, 5 };
	for (int w = 0; w < 3; w++) {
		char line[128];
		snprintf(line, sizeof(line), "process;main (a.py:1);alloc (a.py:7);<GC> %d", gc[w]);
		add(p, s, line, w + 0.5);
		snprintf(line, sizeof(line), "process;main (a.py:1);work (a.py:3) %d", 10 - gc[w]);
		add(p, s, line, w + 0.5);
	}
	fg_profile_meta_set(p, FG_META_GC, "sampled");
	fg_slices_store(s, p);
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	CHECK(strstr(b.buf, "# gc: sampled\n") != NULL);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_read_folded(q, b.buf, b.len, "gc", NULL), 0);
	struct fg_slices *r = NULL;
	CHECK_INT(fg_slices_load(&r, q, "gc", NULL), 0);
	CHECK(r != NULL);
	for (int k = 0; k < 2 && r; k++) {
		struct fg_trend t;
		fg_trend_init(&t, k ? r : s, k ? q : p, 0);
		const struct fg_trend_row *g = find_row(&t, "[gc]");
		CHECK(g != NULL);
		if (g) {
			CHECK(g->file == NULL);
			CHECK_NEAR(g->slope, 20);
			CHECK_NEAR(g->first_pct, 10);
			CHECK_NEAR(g->last_pct, 50);
			CHECK_NEAR(g->mean_pct, 30);
			CHECK_NEAR(g->r2, 1);
		}
		struct spy_buf out = SPY_BUF_INIT;
		fg_trend_render(&t, &out);
		CHECK(strstr(out.buf, "+20.000    10.00    50.00    30.00  1.00  [gc]\n") != NULL);
		spy_buf_release(&out);
		fg_trend_release(&t);
	}
	fg_slices_free(r);
	fg_profile_free(q);
	spy_buf_release(&b);
	fg_slices_free(s);
	fg_profile_free(p);

	/* Sampled, no collection: a row at 0. Not sampled: no row. */
	for (int sampled = 0; sampled < 2; sampled++) {
		p = fg_profile_new(NULL, 0);
		s = fg_slices_new(1.0);
		add(p, s, "process;main (a.py:1) 4", 0.5);
		add(p, s, "process;main (a.py:1) 4", 1.5);
		if (sampled) {
			fg_profile_meta_set(p, FG_META_GC, "sampled");
		}
		struct fg_trend t;
		fg_trend_init(&t, s, p, 0);
		const struct fg_trend_row *g = find_row(&t, "[gc]");
		CHECK(sampled ? g != NULL && g->mean_pct == 0 : g == NULL);
		fg_trend_release(&t);
		fg_slices_free(s);
		fg_profile_free(p);
	}
}

int main(void)
{
	test_gc_row();
	test_trend_and_round_trip();
	test_partial_windows();
	test_steady_share();
	test_recursion();
	test_cap();
	test_long_window();
	test_deterministic();
	test_malformed();
	return check_done();
}
