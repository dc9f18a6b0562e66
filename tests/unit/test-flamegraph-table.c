/*
 * Unit tests for the cumtime table: a hand-built profile whose expected
 * numbers are worked out by hand in the comments, recursion counted once per
 * stack, the three sort orders and their tie-breaks, top N, -F, an unknown
 * rate, the rendered text, and agreement with a re-read folded file.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"

#define CHECK_NEAR(a, b) CHECK(fabs((double)(a) - (double)(b)) < 1e-9)

/*
 * The profile, read from folded text so the test states it plainly
 * (rate 100 Hz, 20 samples):
 *
 *   process;main (app.py:10);work (app.py:20);helper (lib.py:5)        6
 *   process;main (app.py:10);work (app.py:22)                          3
 *   process;main (app.py:11);fib (app.py:30);fib (app.py:31);fib (app.py:31)  4
 *   process;main (app.py:10)                                           2
 *   process;main (app.py:10);sleep (libc.so.6)                         5
 *                                                             total   20
 *
 * By hand, per function (process is synthetic and has no row):
 *   main   (app.py): on every stack         total 20; innermost in the
 *                    "main" line only       self 2;   lowest line 10
 *                    total% 100, self% 10, cumtime 0.20 s, tottime 0.02 s
 *   work   (app.py): 6 + 3                  total 9;  self 3 (the :22 line)
 *                    line min(20, 22) = 20; 45% / 15%; 0.09 s / 0.03 s
 *   helper (lib.py): total 6, self 6, line 5; 30% / 30%; 0.06 s / 0.06 s
 *   sleep  (libc.so.6): native, total 5, self 5, no line; 25% / 25%
 *   fib    (app.py): three frames on one stack, counted once: total 4,
 *                    self 4, line 30; 20% / 20%; 0.04 s / 0.04 s
 *
 * cumtime order: main 20, work 9, helper 6, sleep 5, fib 4
 * tottime order: helper 6, sleep 5, fib 4, work 3, main 2
 * name order:    fib, helper, main, sleep, work
 */
static const char profile_text[] =
	"# rate-hz: 100\n"
	"process;main (app.py:10);work (app.py:20);helper (lib.py:5) 6\n"
	"process;main (app.py:10);work (app.py:22) 3\n"
	"process;main (app.py:11);fib (app.py:30);fib (app.py:31);fib (app.py:31) 4\n"
	"process;main (app.py:10) 2\n"
	"process;main (app.py:10);sleep (libc.so.6) 5\n";

static struct fg_profile *load(const char *text, unsigned flags)
{
	struct fg_profile *p = fg_profile_new(NULL, flags);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fg_profile_read_folded(p, text, strlen(text), "table", &err);
	CHECK_INT(rc, 0);
	if (rc) {
		fprintf(stderr, "  %s\n", err.msg);
	}
	return p;
}

static void check_row(const struct fg_row *r, const char *func, const char *file, uint32_t line,
		      uint64_t self, uint64_t total, double self_pct, double total_pct,
		      double tottime, double cumtime)
{
	CHECK_STR(r->func, func);
	CHECK_STR(r->file, file);
	CHECK_INT(r->line, line);
	CHECK_INT(r->self, self);
	CHECK_INT(r->total, total);
	CHECK_NEAR(r->self_pct, self_pct);
	CHECK_NEAR(r->total_pct, total_pct);
	CHECK_NEAR(r->tottime, tottime);
	CHECK_NEAR(r->cumtime, cumtime);
}

static void test_numbers(void)
{
	struct fg_profile *p = load(profile_text, 0);
	struct fg_table t;
	struct fg_table_opts o = FG_TABLE_OPTS_INIT;

	fg_table_init(&t, p, &o);
	CHECK_INT(t.samples, 20);
	CHECK_INT(t.nfuncs, 5);
	CHECK_INT(t.n, 5);
	CHECK_NEAR(t.rate_hz, 100);
	if (t.n == 5) {
		check_row(&t.rows[0], "main", "app.py", 10, 2, 20, 10, 100, 0.02, 0.20);
		check_row(&t.rows[1], "work", "app.py", 20, 3, 9, 15, 45, 0.03, 0.09);
		check_row(&t.rows[2], "helper", "lib.py", 5, 6, 6, 30, 30, 0.06, 0.06);
		check_row(&t.rows[3], "sleep", "libc.so.6", 0, 5, 5, 25, 25, 0.05, 0.05);
		check_row(&t.rows[4], "fib", "app.py", 30, 4, 4, 20, 20, 0.04, 0.04);
	}
	fg_table_release(&t);

	o.sort = FG_SORT_TOTTIME;
	fg_table_init(&t, p, &o);
	const char *by_self[] = { "helper", "sleep", "fib", "work", "main" };
	for (size_t i = 0; i < t.n && i < 5; i++) {
		CHECK_STR(t.rows[i].func, by_self[i]);
	}
	fg_table_release(&t);

	o.sort = FG_SORT_NAME;
	o.top = 2;
	fg_table_init(&t, p, &o);
	CHECK_INT(t.n, 2);
	CHECK_INT(t.nfuncs, 5);
	CHECK_STR(t.rows[0].func, "fib");
	CHECK_STR(t.rows[1].func, "helper");
	fg_table_release(&t);

	/* An explicit rate wins over the file's: 50 Hz doubles the times. */
	o = (struct fg_table_opts)FG_TABLE_OPTS_INIT;
	o.rate_hz = 50;
	fg_table_init(&t, p, &o);
	CHECK_NEAR(t.rows[0].cumtime, 0.40);
	CHECK_NEAR(t.rows[0].tottime, 0.04);
	fg_table_release(&t);

	/* NULL options are the defaults. */
	fg_table_init(&t, p, NULL);
	CHECK_INT(t.sort, FG_SORT_CUMTIME);
	CHECK_STR(t.rows[0].func, "main");
	fg_table_release(&t);
	fg_profile_free(p);
}

/*
 * Recursion through another function: a;b;a;b;a 3 and a 1.
 * a: on both stacks -> total 3 + 1 = 4 (not 3*3 + 1); innermost in both -> self 4.
 * b: on the first stack only -> total 3 (not 6); never innermost -> self 0.
 */
static void test_recursion(void)
{
	struct fg_profile *p = load("a (r.py:1);b (r.py:5);a (r.py:2);b (r.py:6);a (r.py:3) 3\n"
				    "a (r.py:1) 1\n", 0);
	struct fg_table t;
	fg_table_init(&t, p, NULL);
	CHECK_INT(t.nfuncs, 2);
	CHECK_STR(t.rows[0].func, "a");
	CHECK_INT(t.rows[0].total, 4);
	CHECK_INT(t.rows[0].self, 4);
	CHECK_INT(t.rows[0].line, 1);
	CHECK_STR(t.rows[1].func, "b");
	CHECK_INT(t.rows[1].total, 3);
	CHECK_INT(t.rows[1].self, 0);
	CHECK_INT(t.rows[1].line, 5);
	CHECK(t.rows[0].total_pct <= 100.0);
	fg_table_release(&t);
	fg_profile_free(p);
}

/*
 * Ties: zeta, alpha (two files) and mid all total 2 self 2. cumtime order
 * falls back to total, self, func, file: alpha (a.py), alpha (b.py), mid,
 * zeta, whatever order they were added in.
 */
static void test_ties(void)
{
	const char *orders[2] = {
		"zeta (z.py:1) 2\nalpha (b.py:1) 2\nmid (m.py:1) 2\nalpha (a.py:1) 2\n",
		"alpha (a.py:1) 2\nmid (m.py:1) 2\nalpha (b.py:1) 2\nzeta (z.py:1) 2\n",
	};
	for (int k = 0; k < 2; k++) {
		struct fg_profile *p = load(orders[k], 0);
		for (int s = 0; s < 3; s++) {
			struct fg_table_opts o = { (enum fg_sort)s, 0, 0, false };
			struct fg_table t;
			fg_table_init(&t, p, &o);
			CHECK_INT(t.n, 4);
			CHECK_STR(t.rows[0].func, "alpha");
			CHECK_STR(t.rows[0].file, "a.py");
			CHECK_STR(t.rows[1].func, "alpha");
			CHECK_STR(t.rows[1].file, "b.py");
			CHECK_STR(t.rows[2].func, "mid");
			CHECK_STR(t.rows[3].func, "zeta");
			/* No rate in these files: times are 0. */
			CHECK_NEAR(t.rate_hz, 0);
			CHECK_NEAR(t.rows[0].cumtime, 0);
			fg_table_release(&t);
		}
		fg_profile_free(p);
	}
}

static void test_function_mode(void)
{
	struct fg_profile *p = load(profile_text, FG_FUNCTION);
	struct fg_table t;
	fg_table_init(&t, p, NULL);
	CHECK_INT(t.nfuncs, 5);
	CHECK_STR(t.rows[0].func, "main");
	CHECK_INT(t.rows[0].line, 0);
	CHECK_INT(t.rows[0].total, 20);
	CHECK_STR(t.rows[4].func, "fib");
	CHECK_INT(t.rows[4].total, 4);
	struct spy_buf b = SPY_BUF_INIT;
	fg_table_render(&t, &b);
	CHECK(strstr(b.buf, "  main (app.py)\n") != NULL);
	spy_buf_release(&b);
	fg_table_release(&t);
	fg_profile_free(p);
}

static void test_render(void)
{
	struct fg_profile *p = load(profile_text, 0);
	struct fg_table_opts o = FG_TABLE_OPTS_INIT;
	o.top = 3;
	struct fg_table t;
	fg_table_init(&t, p, &o);
	struct spy_buf b = SPY_BUF_INIT;
	fg_table_render(&t, &b);
	/* Widths: total% 6 ("total%", "100.00"), self% 5 ("self%", "30.00"),
	 * cumtime and tottime 7 (the header beats "0.200"), the kinds their
	 * headers; two spaces between. By kind: sleep's 5 samples are native,
	 * the other 15 Python, so main (on every stack) is 75 / 25. */
	CHECK_STR(b.buf,
		  "20 samples (~0.20 s at 100 Hz), sorted by cumtime, top 3 of 5 functions\n"
		  "by kind: 75.0% python, 25.0% native, 0.0% idle\n"
		  "  total%  self%  cumtime  tottime  python%  native%  idle%  function (file:line)\n"
		  "  100.00  10.00    0.200    0.020     75.0     25.0    0.0  main (app.py:10)\n"
		  "   45.00  15.00    0.090    0.030    100.0      0.0    0.0  work (app.py:20)\n"
		  "   30.00  30.00    0.060    0.060    100.0      0.0    0.0  helper (lib.py:5)\n");
	spy_buf_release(&b);
	fg_table_release(&t);

	/* Unknown rate: dashes; hostile names escaped like folded text. */
	fg_profile_meta_set(p, FG_META_RATE_HZ, "not-a-number");
	struct spy_strtab *st = fg_profile_strtab(p);
	struct spy_stack s = SPY_STACK_INIT;
	struct spy_frame *f = spy_stack_push(&s);
	f->func = spy_strtab_interns(st, "evil\x1b[2J;x");
	f->file = spy_strtab_interns(st, "e.py");
	f->line = 1;
	f->kind = SPY_FRAME_PYTHON;
	fg_profile_add(p, &s, 20);
	o.top = 1;
	fg_table_init(&t, p, &o);
	fg_table_render(&t, &b);
	CHECK_STR(b.buf,
		  "40 samples, sorted by cumtime, top 1 of 6 functions\n"
		  "by kind: 87.5% python, 12.5% native, 0.0% idle\n"
		  "  total%  self%  cumtime  tottime  python%  native%  idle%  function (file:line)\n"
		  "   50.00  50.00        -        -    100.0      0.0    0.0  evil\\x1b[2J?x (e.py:1)\n");
	spy_buf_release(&b);
	fg_table_release(&t);
	spy_stack_release(&s);

	/* An empty profile renders a header and no rows. */
	struct fg_profile *e = fg_profile_new(NULL, 0);
	fg_table_init(&t, e, NULL);
	CHECK_INT(t.n, 0);
	fg_table_render(&t, &b);
	CHECK_STR(b.buf,
		  "0 samples, sorted by cumtime, 0 functions\n"
		  "by kind: 0.0% python, 0.0% native, 0.0% idle\n"
		  "  total%  self%  cumtime  tottime  python%  native%  idle%  function (file:line)\n");
	spy_buf_release(&b);
	fg_table_release(&t);
	fg_profile_free(e);
	fg_profile_free(p);
}

/* The table of a profile and of its folded file agree (lowest line, not first seen). */
static void test_same_after_reread(void)
{
	const char *text =
		"main (m.py:9);f (m.py:40) 1\n"
		"main (m.py:3);f (m.py:12) 1\n";
	struct fg_profile *p = load(text, 0);
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	struct fg_profile *q = load(b.buf, 0);
	struct fg_table t1, t2;
	fg_table_init(&t1, p, NULL);
	fg_table_init(&t2, q, NULL);
	CHECK_INT(t1.n, t2.n);
	for (size_t i = 0; i < t1.n && i < t2.n; i++) {
		CHECK_STR(t1.rows[i].func, t2.rows[i].func);
		CHECK_INT(t1.rows[i].line, t2.rows[i].line);
		CHECK_INT(t1.rows[i].total, t2.rows[i].total);
	}
	/* Both total 2; f is first on self (2 vs 0). Lowest lines: f 12, main 3. */
	CHECK_STR(t1.rows[0].func, "f");
	CHECK_INT(t1.rows[0].line, 12);
	CHECK_STR(t1.rows[1].func, "main");
	CHECK_INT(t1.rows[1].line, 3);
	fg_table_release(&t1);
	fg_table_release(&t2);
	spy_buf_release(&b);
	fg_profile_free(p);
	fg_profile_free(q);
}

static void test_sort_parse(void)
{
	enum fg_sort s = FG_SORT_NAME;
	CHECK(fg_sort_parse("cumtime", &s) && s == FG_SORT_CUMTIME);
	CHECK(fg_sort_parse("tottime", &s) && s == FG_SORT_TOTTIME);
	CHECK(fg_sort_parse("name", &s) && s == FG_SORT_NAME);
	CHECK(!fg_sort_parse("calls", &s));
	CHECK(!fg_sort_parse("", &s));
}

/*
 * by_line (spy top --lines): a row per (func, file, line). By hand from
 * profile_text: main:10 is on every stack but the fib one (16, self 2),
 * main:11 on that one (4); work:20 6, work:22 3 (self 3); fib:31 twice on
 * one stack, counted once (4, self 4), fib:30 4; helper:5 6; sleep 5.
 */
static void test_by_line(void)
{
	struct fg_profile *p = load(profile_text, 0);
	struct fg_table t;
	struct fg_table_opts o = FG_TABLE_OPTS_INIT;
	o.by_line = true;
	fg_table_init(&t, p, &o);
	CHECK_INT(t.n, 8);
	static const struct {
		const char *func;
		uint32_t line;
		uint64_t self, total;
	} want[] = {
		{ "main", 10, 2, 16 }, { "helper", 5, 6, 6 }, { "work", 20, 0, 6 }, { "sleep", 0, 5, 5 },
		{ "fib", 31, 4, 4 }, { "fib", 30, 0, 4 }, { "main", 11, 0, 4 }, { "work", 22, 3, 3 },
	};
	for (size_t i = 0; i < t.n && i < sizeof(want) / sizeof(want[0]); i++) {
		CHECK_STR(t.rows[i].func, want[i].func);
		CHECK_INT(t.rows[i].line, want[i].line);
		CHECK_INT(t.rows[i].self, want[i].self);
		CHECK_INT(t.rows[i].total, want[i].total);
	}
	fg_table_release(&t);
	fg_profile_free(p);
}

/*
 * The split by kind (fg_stack_kind), by hand (27 samples):
 *   spin: Python leaf                                   10 python
 *   call -> memset (libc.so.6): native leaf              6 native
 *   wait -> idle leaf                                    3 idle
 *   wait -> futex_wait (native) -> idle: the leaf wins   1 idle
 *   alloc -> <GC>: looked through, alloc is Python       4 python
 *   a thread root with a "[waiting for the GIL]" leaf    2 idle (no function)
 *   a root alone (only a hand-made file has one)         1 python
 * Whole profile: python 15, native 6, idle 6. main (24): 14 / 6 / 4;
 * wait 4 idle; call 6 native; futex_wait 1 idle; alloc 4 python.
 */
static void test_kinds(void)
{
	static const char text[] =
		"process;main (k.py:1);spin (k.py:5) 10\n"
		"process;main (k.py:1);call (k.py:9);memset (libc.so.6) 6\n"
		"process;main (k.py:1);wait (k.py:12);idle 3\n"
		"process;main (k.py:1);wait (k.py:12);futex_wait (libc.so.6);idle 1\n"
		"process;main (k.py:1);alloc (k.py:20);<GC> 4\n"
		"process;thread 5 \"w\";[waiting for the GIL] 2\n"
		"process 1\n";
	struct fg_profile *p = load(text, 0);
	struct fg_table t;
	struct fg_table_opts o = FG_TABLE_OPTS_INIT;
	o.sort = FG_SORT_NAME;
	fg_table_init(&t, p, &o);
	CHECK_INT(t.samples, 27);
	CHECK_INT(t.kind[FG_KIND_PYTHON], 15);
	CHECK_INT(t.kind[FG_KIND_NATIVE], 6);
	CHECK_INT(t.kind[FG_KIND_IDLE], 6);
	CHECK_NEAR(t.kind_pct[FG_KIND_NATIVE], 100.0 * 6 / 27);
	static const struct {
		const char *func;
		uint64_t py, nat, idle;
	} want[] = {
		{ "alloc", 4, 0, 0 }, { "call", 0, 6, 0 }, { "futex_wait", 0, 0, 1 },
		{ "main", 14, 6, 4 }, { "memset", 0, 6, 0 }, { "spin", 10, 0, 0 }, { "wait", 0, 0, 4 },
	};
	CHECK_INT(t.n, SPY_ARRAY_SIZE(want));
	for (size_t i = 0; i < t.n && i < SPY_ARRAY_SIZE(want); i++) {
		const struct fg_row *r = &t.rows[i];
		CHECK_STR(r->func, want[i].func);
		CHECK_INT(r->kind[FG_KIND_PYTHON], want[i].py);
		CHECK_INT(r->kind[FG_KIND_NATIVE], want[i].nat);
		CHECK_INT(r->kind[FG_KIND_IDLE], want[i].idle);
		CHECK_INT(r->kind[0] + r->kind[1] + r->kind[2], r->total);
		CHECK_NEAR(r->kind_pct[0] + r->kind_pct[1] + r->kind_pct[2], 100.0);
	}
	struct spy_buf b = SPY_BUF_INIT;
	fg_table_render(&t, &b);
	CHECK(strstr(b.buf, "\nby kind: 55.6% python, 22.2% native, 22.2% idle\n") != NULL);
	CHECK(strstr(b.buf, "     58.3     25.0   16.7  main (k.py:1)\n") != NULL);
	spy_buf_release(&b);
	fg_table_release(&t);

	/* The thread-state names the SVG colours are the ones counted idle. */
	struct fg_frame f = { "idle", NULL, 0, SPY_FRAME_SYNTHETIC };
	CHECK(fg_frame_is_state(&f));
	f.func = "Waiting for the GIL";
	CHECK(fg_frame_is_state(&f));
	f.func = "<gil>";
	CHECK(fg_frame_is_state(&f));
	f.func = "<GC>";
	CHECK(!fg_frame_is_state(&f));
	f.func = "process 1 \"idle\"";
	CHECK(!fg_frame_is_state(&f));
	f.func = "idle";
	f.kind = SPY_FRAME_PYTHON;
	CHECK(!fg_frame_is_state(&f));
	fg_profile_free(p);
}

int main(void)
{
	test_by_line();
	test_numbers();
	test_recursion();
	test_ties();
	test_function_mode();
	test_render();
	test_same_after_reread();
	test_sort_parse();
	test_kinds();
	return check_done();
}
