/*
 * Unit tests for the differential profile (spy diff): shares, deltas and
 * order worked out by hand from two small folded profiles, one with line
 * numbers and one by function (as -F writes it), recursion counted once,
 * a function on one side only, the gate with its thresholds and
 * --min-samples, the colour scale, and the text and JSON renderings.
 *
 * With a directory argument it also saves a differential SVG there (with
 * hostile names) for check-diff-svg.py to parse.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flamegraph/internal.h"
#include "tests/lib/check.h"

#define CHECK_NEAR(a, b) CHECK(fabs((double)(a) - (double)(b)) < 1e-9)

/*
 * BASE, line-level, 20 samples:
 *   main   total 20 (100%), self 6 (30%)
 *   work   total 6 + 4 = 10 (50%), self 4 (20%)
 *   helper total 6 (30%), self 6 (30%)
 *   fib    two frames on one stack, counted once: total 4 (20%), self 4 (20%)
 */
static const char base_text[] =
	"# rate-hz: 100\n"
	"process;main (app.py:10);work (app.py:20);helper (lib.py:5) 6\n"
	"process;main (app.py:10);work (app.py:22) 4\n"
	"process;main (app.py:11);fib (app.py:30);fib (app.py:31) 4\n"
	"process;main (app.py:10) 6\n";

/*
 * NEW, by function (no lines), 40 samples:
 *   main   total 40 (100%), self 10 (25%)  -> total +0,  self -5
 *   work   total 24 + 4 = 28 (70%), self 4 (10%) -> total +20, self -10
 *   helper total 24 (60%), self 24 (60%)   -> total +30, self +30
 *   newf   total 2 (5%), self 2 (5%), not in BASE -> +5, +5
 *   fib    not in NEW                      -> total -20, self -20
 * Order by max(|total|, |self|) change: helper 30; work 20 and fib 20 tie,
 * and tie again on |total| 20, so the growth (work) comes first; then
 * newf and main at 5, newf first by its larger |total| change (5 vs 0).
 */
static const char new_text[] =
	"process;main (app.py);work (app.py);helper (lib.py) 24\n"
	"process;main (app.py);work (app.py) 4\n"
	"process;main (app.py);newf (new.py) 2\n"
	"process;main (app.py) 10\n";

static struct fg_profile *load(struct spy_strtab *st, const char *text)
{
	struct fg_profile *p = fg_profile_new(st, 0);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fg_profile_read_folded(p, text, strlen(text), "diff", &err);
	CHECK_INT(rc, 0);
	if (rc) {
		fprintf(stderr, "  %s\n", err.msg);
	}
	return p;
}

static void check_row(const struct fg_diff_row *r, const char *func, const char *file,
		      double base_total, double base_self, double new_total, double new_self)
{
	CHECK_STR(r->func, func);
	CHECK_STR(r->file, file);
	CHECK_NEAR(r->base.total_pct, base_total);
	CHECK_NEAR(r->base.self_pct, base_self);
	CHECK_NEAR(r->cur.total_pct, new_total);
	CHECK_NEAR(r->cur.self_pct, new_self);
	CHECK_NEAR(r->total_delta, new_total - base_total);
	CHECK_NEAR(r->self_delta, new_self - base_self);
}

static unsigned failing(const struct fg_diff *d, double total, double self, uint64_t min,
			const char **names, size_t max)
{
	struct fg_diff_gate g = { total, self, min, false };
	unsigned n = 0;
	for (size_t i = 0; i < d->n; i++) {
		if (fg_diff_row_fails(&d->rows[i], &g) && n < max) {
			names[n++] = d->rows[i].func;
		}
	}
	return n;
}

static void test_rows(const struct fg_diff *d)
{
	CHECK_INT(d->base_samples, 20);
	CHECK_INT(d->cur_samples, 40);
	CHECK_INT(d->n, 5);
	if (d->n != 5) {
		return;
	}
	check_row(&d->rows[0], "helper", "lib.py", 30, 30, 60, 60);
	check_row(&d->rows[1], "work", "app.py", 50, 20, 70, 10);
	check_row(&d->rows[2], "fib", "app.py", 20, 20, 0, 0);
	check_row(&d->rows[3], "newf", "new.py", 0, 0, 5, 5);
	check_row(&d->rows[4], "main", "app.py", 100, 30, 100, 25);
	CHECK_INT(d->rows[0].cur.total, 24);
	CHECK_INT(d->rows[2].base.total, 4);
	CHECK_INT(d->rows[2].cur.total, 0);
}

static void test_find(struct spy_strtab *st, const struct fg_diff *d)
{
	const char *work = spy_strtab_interns(st, "work"), *app = spy_strtab_interns(st, "app.py");
	const struct fg_diff_row *r = fg_diff_find(d, work, app);
	CHECK(r == &d->rows[1]);
	CHECK(fg_diff_find(d, work, spy_strtab_interns(st, "lib.py")) == NULL);
	for (size_t i = 0; i < d->n; i++) {
		CHECK(fg_diff_find(d, d->rows[i].func, d->rows[i].file) == &d->rows[i]);
	}
}

static void test_gate(const struct fg_diff *d)
{
	const char *names[8];
	/* Only helper grew by more than 25 total points. */
	CHECK_INT(failing(d, 25, -1, 0, names, 8), 1);
	CHECK_STR(names[0], "helper");
	/* work grew by exactly 20: not "more than" 20. */
	CHECK_INT(failing(d, 20, -1, 0, names, 8), 1);
	CHECK_INT(failing(d, 19.5, -1, 0, names, 8), 2);
	CHECK_STR(names[1], "work");
	/* helper has 24 samples in NEW: a minimum of 25 silences it. */
	CHECK_INT(failing(d, 19.5, -1, 25, names, 8), 1);
	CHECK_STR(names[0], "work");
	CHECK_INT(failing(d, 19.5, -1, 29, names, 8), 0);
	/* Self: helper +30 and newf +5 are over 4; main's -5 and work's -10 are not. */
	CHECK_INT(failing(d, -1, 4, 0, names, 8), 2);
	CHECK_STR(names[0], "helper");
	CHECK_STR(names[1], "newf");
	/* newf has 2 samples: --min-samples 3 lets it through. */
	CHECK_INT(failing(d, -1, 4, 3, names, 8), 1);
	/* Both off: nothing fails; a shrink never fails. */
	CHECK_INT(failing(d, -1, -1, 0, names, 8), 0);
	CHECK_INT(failing(d, 0, -1, 0, names, 8), 3);
	struct fg_diff_gate g = { 25, -1, 0, false };
	CHECK_INT(fg_diff_row_fails(&d->rows[0], &g), 1);
	g = (struct fg_diff_gate){ 25, 25, 0, false };
	CHECK_INT(fg_diff_row_fails(&d->rows[0], &g), 3);
}

/*
 * The two-proportion test against values worked out by hand: 60 of 100
 * against 40 of 100, pooled share 0.5, se = sqrt(0.25 * 0.02) = 0.0707,
 * z = 2.828, two-sided p = erfc(2.828 / sqrt 2) = 0.004678.
 */
static void test_pvalue(void)
{
	CHECK(fabs(fg_diff_pvalue(60, 100, 40, 100, 1) - 0.0046777) < 1e-6);
	CHECK(fabs(fg_diff_pvalue(40, 100, 60, 100, 1) - 0.0046777) < 1e-6);
	CHECK_NEAR(fg_diff_pvalue(50, 100, 50, 100, 1), 1);
	CHECK_NEAR(fg_diff_pvalue(0, 100, 0, 100, 1), 1);
	CHECK_NEAR(fg_diff_pvalue(100, 100, 100, 100, 1), 1);
	CHECK_NEAR(fg_diff_pvalue(5, 0, 5, 10, 1), 1);
	/* Dispersion 2: the same shares from half as many independent samples. */
	CHECK_NEAR(fg_diff_pvalue(60, 100, 40, 100, 2), fg_diff_pvalue(30, 50, 20, 50, 1));
}

static const struct fg_diff_row *row_of(struct spy_strtab *st, const struct fg_diff *d, const char *func)
{
	return fg_diff_find(d, spy_strtab_interns(st, func), spy_strtab_interns(st, "x.py"));
}

/*
 * Holm over three functions, dispersion 1, self shares of 1000 samples a
 * side: a 300 -> 360, b 200 -> 150, c 500 -> 490. b has the smallest
 * p-value, then a, then c: b's is tripled, a's doubled but raised to b's
 * (the step-down keeps the running maximum), c's kept. a and b are
 * significant, c is not; the gate wants the threshold and the test both.
 */
static void test_significance(void)
{
	struct spy_strtab st = SPY_STRTAB_INIT;
	struct fg_profile *b = load(&st, "a (x.py:1) 300\nb (x.py:2) 200\nc (x.py:3) 500\n");
	struct fg_profile *c = load(&st, "a (x.py:1) 360\nb (x.py:2) 150\nc (x.py:3) 490\n");
	struct fg_diff d;
	fg_diff_init(&d, b, c);
	fg_diff_set_dispersion(&d, 1);
	CHECK_INT(d.n, 3);
	const struct fg_diff_row *ra = row_of(&st, &d, "a"), *rb = row_of(&st, &d, "b"), *rc = row_of(&st, &d, "c");
	CHECK(ra && rb && rc);
	if (ra && rb && rc) {
		double pa = fg_diff_pvalue(300, 1000, 360, 1000, 1), pb = fg_diff_pvalue(200, 1000, 150, 1000, 1);
		double pc = fg_diff_pvalue(500, 1000, 490, 1000, 1);
		CHECK(pb < pa && pa < pc && 2 * pa < 3 * pb);
		CHECK_NEAR(rb->self_p, 3 * pb);
		CHECK_NEAR(ra->self_p, 3 * pb);
		CHECK_NEAR(rc->self_p, pc);
		CHECK_NEAR(ra->total_p, ra->self_p);
		CHECK(fg_diff_self_significant(ra) && fg_diff_self_significant(rb));
		CHECK(!fg_diff_self_significant(rc));
		struct fg_diff_gate g = { 5, -1, 0, true };
		CHECK_INT(fg_diff_row_fails(ra, &g), 1);
		CHECK_INT(fg_diff_row_fails(rc, &g), 0);
		/* Dispersion 10: a's 6 points on 100 effective samples a side are noise. */
		fg_diff_set_dispersion(&d, 10);
		CHECK(!fg_diff_total_significant(ra));
		CHECK_INT(fg_diff_row_fails(ra, &g), 0);
	}
	fg_diff_release(&d);
	fg_profile_free(b);
	fg_profile_free(c);

	/* 200 samples: a 6-point growth (30 -> 36%) is over --fail-over 2 but not significant. */
	b = load(&st, "a (x.py:1) 60\nb (x.py:2) 140\n");
	c = load(&st, "a (x.py:1) 72\nb (x.py:2) 128\n");
	fg_diff_init(&d, b, c);
	fg_diff_set_dispersion(&d, 1);
	const struct fg_diff_row *r = row_of(&st, &d, "a");
	CHECK(r != NULL);
	if (r) {
		struct fg_diff_gate g = { 2, -1, 0, true };
		CHECK(!fg_diff_total_significant(r));
		CHECK_INT(fg_diff_row_fails(r, &g), 0);
		g.significance = false;
		CHECK_INT(fg_diff_row_fails(r, &g), 1);
	}
	fg_diff_release(&d);
	fg_profile_free(b);
	fg_profile_free(c);
	spy_strtab_release(&st);
}

static void test_colour(void)
{
	CHECK_INT(fg_diff_colour(0, 10), 0xeeeeee);
	CHECK_INT(fg_diff_colour(3, 0), 0xeeeeee);
	CHECK_INT(fg_diff_colour(10, 10), 0xd62020);
	CHECK_INT(fg_diff_colour(20, 10), 0xd62020);
	CHECK_INT(fg_diff_colour(-10, 10), 0x2060d6);
	/* Half the largest change: t = 0.15 + 0.85 / 2 = 0.575 of the way. */
	uint32_t c = fg_diff_colour(5, 10);
	CHECK_INT(c >> 16, (uint32_t)(0xee + (0xd6 - 0xee) * 0.575 + 0.5));
	CHECK_INT((c >> 8) & 0xff, (uint32_t)(0xee + (0x20 - 0xee) * 0.575 + 0.5));
	/* Bigger changes are redder: green falls as the delta grows. */
	CHECK(((fg_diff_colour(2, 10) >> 8) & 0xff) > ((fg_diff_colour(8, 10) >> 8) & 0xff));
}

static void test_render(const struct fg_diff *d)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_diff_render(d, 2, &b);
	CHECK(strstr(b.buf, "base 20 samples, new 40 samples") != NULL);
	CHECK(strstr(b.buf, "top 2 of 5 functions") != NULL);
	/* helper 6/20 -> 24/40: not significant at dispersion 3 over 5 functions: no mark. */
	CHECK(strstr(b.buf, "   30.00    60.00   +30.00      30.00    60.00   +30.00   helper (lib.py)\n") != NULL);
	CHECK(strstr(b.buf, "*: a significant change at 5% (two-proportion test, dispersion 3, "
			    "Holm-adjusted over 5 functions)\n") != NULL);
	CHECK(strstr(b.buf, "work (app.py)") != NULL);
	CHECK(strstr(b.buf, "fib") == NULL);
	spy_buf_release(&b);
}

static void test_json(const struct fg_diff *d)
{
	FILE *f = tmpfile();
	CHECK(f != NULL);
	if (!f) {
		return;
	}
	struct fg_diff_gate g = { 25, -1, 0, false };
	CHECK_INT(fg_diff_write_json(d, 1, &g, "b\"ase", "new", f, NULL), 0);
	rewind(f);
	char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	CHECK(strstr(buf, "\"name\": \"b\\\"ase\"") != NULL);
	CHECK(strstr(buf, "\"fail_over\": 25.0000, \"fail_over_self\": null") != NULL);
	CHECK(strstr(buf, "\"functions_total\": 5") != NULL);
	CHECK(strstr(buf, "\"total_delta\": 30.0000, \"self_p\": ") != NULL);
	CHECK(strstr(buf, "\"total_significant\": false, \"over\": [\"total\"]") != NULL);
	CHECK(strstr(buf, "\"min_samples\": 0, \"significance\": false, \"level\": 0.05, "
			  "\"dispersion\": 3}") != NULL);
	CHECK(strstr(buf, "\"work\"") == NULL); /* top 1, and work is under the gate */
}

/*
 * The split by kind compared: BASE 8 Python and 2 idle samples (80 / 0 /
 * 20), NEW 5 Python, 10 native (--native) and 5 idle (25 / 50 / 25); work
 * goes from 100% Python to a third Python, two thirds native.
 */
static void test_kinds(void)
{
	struct spy_strtab st = SPY_STRTAB_INIT;
	struct fg_profile *b = load(&st, "process;main (app.py:1);work (app.py:5) 8\n"
				       "process;main (app.py:1);idle 2\n");
	struct fg_profile *c = load(&st, "process;main (app.py:1);work (app.py:5) 5\n"
				       "process;main (app.py:1);work (app.py:5);crc (z.so) 10\n"
				       "process;main (app.py:1);idle 5\n");
	struct fg_diff d;
	fg_diff_init(&d, b, c);
	CHECK_NEAR(d.base_kind_pct[FG_KIND_PYTHON], 80);
	CHECK_NEAR(d.base_kind_pct[FG_KIND_IDLE], 20);
	CHECK_NEAR(d.cur_kind_pct[FG_KIND_NATIVE], 50);
	const struct fg_diff_row *r = fg_diff_find(&d, spy_strtab_interns(&st, "work"),
						   spy_strtab_interns(&st, "app.py"));
	CHECK(r != NULL);
	if (r) {
		CHECK_NEAR(r->base.kind_pct[FG_KIND_PYTHON], 100);
		CHECK_NEAR(r->cur.kind_pct[FG_KIND_NATIVE], 100.0 * 10 / 15);
	}
	struct spy_buf out = SPY_BUF_INIT;
	fg_diff_render(&d, 0, &out);
	CHECK(strstr(out.buf, "\nby kind: python 80.0% -> 25.0% (-55.0), native 0.0% -> 50.0% (+50.0), "
			      "idle 20.0% -> 25.0% (+5.0)\n") != NULL);
	spy_buf_release(&out);
	FILE *f = tmpfile();
	CHECK(f != NULL);
	if (f) {
		struct fg_diff_gate g = FG_DIFF_GATE_OFF;
		CHECK_INT(fg_diff_write_json(&d, 0, &g, "b", "n", f, NULL), 0);
		rewind(f);
		char buf[4096];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = '\0';
		fclose(f);
		CHECK(strstr(buf, "\"samples\": 10, \"python_pct\": 80.0000, \"native_pct\": 0.0000, "
				  "\"idle_pct\": 20.0000}") != NULL);
		CHECK(strstr(buf, "\"new\": {\"self\": 5, \"total\": 15, \"self_pct\": 25.0000, "
				  "\"total_pct\": 75.0000, \"python_pct\": 33.3333, \"native_pct\": 66.6667, "
				  "\"idle_pct\": 0.0000}") != NULL);
	}
	fg_diff_release(&d);
	fg_profile_free(b);
	fg_profile_free(c);
	spy_strtab_release(&st);
}

/* Hostile names in NEW, to show the diff SVG escapes what it adds. */
static const char hostile_text[] =
	"process;main (app.py);</text><script>alert(1)</script> (x.py) 5\n"
	"process;main (app.py);]]><![CDATA[ (\"'&.py) 3\n"
	"process;main (app.py);helper (lib.py) 12\n";

static void save_svg(const char *dir)
{
	struct spy_strtab st = SPY_STRTAB_INIT;
	struct fg_profile *b = load(&st, base_text), *c = load(&st, hostile_text);
	struct fg_diff d;
	fg_diff_init(&d, b, c);
	char path[4096];
	snprintf(path, sizeof(path), "%s/diff-hostile.svg", dir);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		struct fg_svg_opts o = { "diff <&> \"title\"", false };
		CHECK_INT(fg_diff_write_svg(&d, c, f, &o, NULL), 0);
		fclose(f);
	}
	fg_diff_release(&d);
	fg_profile_free(b);
	fg_profile_free(c);
	spy_strtab_release(&st);
}

/*
 * 2.7 records "meth", 3.11 "Klass.meth": the same function, paired, with
 * 10 of 20 samples on both sides (delta 0). "A.run" (BASE only) and
 * "B.run" (NEW only) are two functions: neither is bare, so no pairing.
 * "solo" (BASE only, bare) has no qualified partner either.
 */
static void test_qualified(void)
{
	struct spy_strtab st = SPY_STRTAB_INIT;
	struct fg_profile *b = load(&st, "main (k.py:1);meth (k.py:3) 10\n"
					 "main (k.py:1);A.run (k.py:9) 5\n"
					 "main (k.py:1);solo (k.py:12) 5\n");
	struct fg_profile *c = load(&st, "main (k.py);Klass.meth (k.py) 10\n"
					 "main (k.py);B.run (k.py) 10\n");
	struct fg_diff d;
	fg_diff_init(&d, b, c);
	/* main, Klass.meth, A.run, B.run, solo */
	CHECK_INT(d.n, 5);
	const struct fg_diff_row *m = fg_diff_find(&d, spy_strtab_interns(&st, "Klass.meth"),
						   spy_strtab_interns(&st, "k.py"));
	CHECK(m != NULL);
	CHECK(fg_diff_find(&d, spy_strtab_interns(&st, "meth"), spy_strtab_interns(&st, "k.py")) == NULL);
	if (m) {
		CHECK_INT(m->base.total, 10);
		CHECK_INT(m->cur.total, 10);
		CHECK_NEAR(m->total_delta, 0);
	}
	const struct fg_diff_row *r = fg_diff_find(&d, spy_strtab_interns(&st, "B.run"),
						   spy_strtab_interns(&st, "k.py"));
	CHECK(r != NULL && r->base.total == 0 && r->cur.total == 10);
	fg_diff_release(&d);
	fg_profile_free(b);
	fg_profile_free(c);
	spy_strtab_release(&st);
}

int main(int argc, char **argv)
{
	test_qualified();
	test_kinds();
	test_pvalue();
	test_significance();
	struct spy_strtab st = SPY_STRTAB_INIT;
	struct fg_profile *b = load(&st, base_text), *c = load(&st, new_text);
	struct fg_diff d;
	fg_diff_init(&d, b, c);
	test_rows(&d);
	test_find(&st, &d);
	test_gate(&d);
	test_colour();
	test_render(&d);
	test_json(&d);
	fg_diff_release(&d);
	fg_profile_free(b);
	fg_profile_free(c);
	spy_strtab_release(&st);
	if (argc > 1) {
		save_svg(argv[1]);
	}
	return check_done();
}
