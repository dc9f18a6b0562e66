/*
 * Unit tests for the process's resources over a recording (record --slice,
 * report --trend's [rss] [cpu] [threads] [ctxsw] [io] rows): readings
 * through a folded file and back, unknown fields, the trend's slopes worked
 * out by hand, the totals, the cap, and malformed readings.
 */
#include <stdlib.h>
#include <string.h>

#include "flamegraph/internal.h"
#include "tests/lib/check.h"

/* Reading i of a process whose RSS grows 1 MB/s, CPU at 50% (user 40, sys 10), io unknown. */
static struct fg_res_point reading(unsigned i)
{
	struct fg_res_point pt = {
		.t = i,
		.user_ns = 400000000ull * i,
		.sys_ns = 100000000ull * i,
		.rss = 10000000ull + 1000000ull * i,
		.threads = 2 + i / 2,
		.ctxsw = 100ull * i,
		.read_bytes = FG_RES_UNKNOWN,
		.write_bytes = FG_RES_UNKNOWN,
	};
	return pt;
}

static struct fg_resources *sample(unsigned n)
{
	struct fg_resources *r = fg_resources_new();
	for (unsigned i = 0; i < n; i++) {
		struct fg_res_point pt = reading(i);
		fg_resources_add(r, &pt);
	}
	return r;
}

static struct fg_profile *read_back(const struct fg_profile *p)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, b.buf, b.len, "rt", &err), 0);
	spy_buf_release(&b);
	return q;
}

static void test_round_trip(void)
{
	struct fg_resources *r = sample(5);
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, "main 1\n", 7, "p", &err), 0);
	fg_resources_store(r, p);
	fg_resources_store(r, p);   /* twice: replaced, not doubled */
	CHECK_STR(fg_profile_meta_get(p, "res-4"), "4.000 1600 400 13671 4 400 - -");
	CHECK(fg_profile_meta_get(p, "res-5") == NULL);
	struct fg_profile *q = read_back(p);
	struct fg_resources *r2 = NULL;
	CHECK_INT(fg_resources_load(&r2, q, "rt", &err), 0);
	CHECK(r2 != NULL);
	if (r2) {
		CHECK_INT(fg_resources_count(r2), 5);
		const struct fg_res_point *pt = fg_resources_at(r2, 4);
		CHECK_INT(pt->user_ns, 1600000000ull);
		CHECK_INT(pt->sys_ns, 400000000ull);
		CHECK_INT(pt->rss, 13671ull * 1024);   /* kept in KiB */
		CHECK_INT(pt->threads, 4);
		CHECK(pt->read_bytes == FG_RES_UNKNOWN && pt->write_bytes == FG_RES_UNKNOWN);

		struct spy_buf b = SPY_BUF_INIT;
		fg_resources_trend(r2, &b);
		/* RSS: 1.024 MB/s (KiB rounding of 1 MB steps: about 3600 MB/h), exact line. */
		CHECK(strstr(b.buf, "  [rss] (MB resident)\n") != NULL);
		CHECK(strstr(b.buf, "+3600") != NULL || strstr(b.buf, "+3599") != NULL);
		/* CPU: 50% of one CPU in every interval, flat. */
		CHECK(strstr(b.buf, "     +0.00     50.00     50.00     50.00  0.00  [cpu]") != NULL);
		CHECK(strstr(b.buf, "    100.00    100.00    100.00  0.00  [ctxsw]") != NULL);
		CHECK(strstr(b.buf, "[io] (unknown: io unreadable)") != NULL);
		spy_buf_release(&b);

		struct fg_res_point tot;
		fg_resources_totals(r2, &tot);
		CHECK_INT(tot.user_ns, 1600000000ull);
		CHECK_INT(tot.rss, 13671ull * 1024);
		CHECK(tot.read_bytes == FG_RES_UNKNOWN);
	}
	/* Removed with NULL; a profile without them loads as none. */
	fg_resources_store(NULL, p);
	CHECK(fg_profile_meta_get(p, "res-0") == NULL && fg_profile_meta_get(p, "resources") == NULL);
	struct fg_resources *none = (struct fg_resources *)1;
	CHECK_INT(fg_resources_load(&none, p, "p", &err), 0);
	CHECK(none == NULL);
	fg_resources_free(r2);
	fg_resources_free(r);
	fg_profile_free(q);
	fg_profile_free(p);
}

/* A counter that falls (a thread's switches leave with it) gives no rate for that interval. */
static void test_falling_counter(void)
{
	struct fg_resources *r = fg_resources_new();
	for (unsigned i = 0; i < 4; i++) {
		struct fg_res_point pt = reading(i);
		pt.ctxsw = i == 2 ? 50 : 100ull * i;
		fg_resources_add(r, &pt);
	}
	struct spy_buf b = SPY_BUF_INIT;
	fg_resources_trend(r, &b);
	/* Intervals 0-1 (100/s) and 2-3 (250/s): the fall from 100 to 50 is skipped. */
	CHECK(strstr(b.buf, "    100.00    250.00    175.00") != NULL);
	spy_buf_release(&b);
	fg_resources_free(r);
}

/*
 * A flat gauge read at fractional times has no slope, and says so with the
 * same sign on every machine: summed raw, n*sum(xy) - sum(x)*sum(y) left
 * -2e-11 threads/h here (printed -0.00), and on aarch64, where the compiler
 * fuses the multiply-add, a different residue.
 */
static void test_flat(void)
{
	struct fg_resources *r = fg_resources_new();
	for (unsigned i = 0; i < 3; i++) {
		struct fg_res_point pt = reading(i);
		pt.t = 0.1 * i;
		pt.rss = 5000000;
		pt.threads = 3;
		fg_resources_add(r, &pt);
	}
	struct spy_buf b = SPY_BUF_INIT;
	fg_resources_trend(r, &b);
	CHECK(strstr(b.buf, "     +0.00      5.00      5.00      5.00  0.00  [rss]") != NULL);
	CHECK(strstr(b.buf, "     +0.00      3.00      3.00      3.00  0.00  [threads]") != NULL);
	spy_buf_release(&b);
	fg_resources_free(r);
}

static void test_cap(void)
{
	struct fg_resources *r = sample(FG_MAX_SLICES + 10);
	CHECK(fg_resources_count(r) <= FG_MAX_SLICES);
	CHECK(fg_resources_count(r) > FG_MAX_SLICES / 2);
	/* The first reading stays, the newest is kept. */
	CHECK(fg_resources_at(r, 0)->t == 0);
	CHECK(fg_resources_at(r, fg_resources_count(r) - 1)->t == FG_MAX_SLICES + 9);
	fg_resources_free(r);
}

static void test_malformed(void)
{
	static const char *const bad[] = {
		"1.0 1 2 3 4 5 6",            /* a field short */
		"1.0 1 2 3 4 5 6 7 8",        /* one too many */
		"x 1 2 3 4 5 6 7",
		"-1 1 2 3 4 5 6 7",
		"nan 1 2 3 4 5 6 7",
		"1.0 1 2 3 4 5 6 -7",
		"1.0 1 2 3 4 5 6 7x",
		"1.0  1 2 3 4 5 6 7",
		"1.0 99999999999999999999 2 3 4 5 6 7",
		"1.0 18446744073710 2 3 4 5 6 7",   /* ms past the ns range */
		"1.0 1 2 3 4 5 6 ",
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct fg_profile *p = fg_profile_new(NULL, 0);
		fg_profile_meta_set(p, "resources", "t-s user-ms sys-ms rss-kb threads ctxsw read-bytes write-bytes");
		fg_profile_meta_set(p, "res-0", "0.5 1 2 3 4 5 6 7");
		fg_profile_meta_set(p, "res-1", bad[i]);
		struct fg_resources *r = NULL;
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_resources_load(&r, p, "bad", &err), -SPY_EFORMAT);
		CHECK(r == NULL);
		CHECK(strstr(err.msg, "bad: # res-1: expected 8 fields") != NULL);
		spy_err_clear(&err);
		fg_profile_free(p);
	}
	/* Unknown columns (a later spy): ignored, not an error. */
	struct fg_profile *p = fg_profile_new(NULL, 0);
	fg_profile_meta_set(p, "resources", "t-s something-else");
	fg_profile_meta_set(p, "res-0", "what ever");
	struct fg_resources *r = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_resources_load(&r, p, "later", &err), 0);
	CHECK(r == NULL);
	fg_profile_free(p);
	/* Fewer than two readings: the trend says so. */
	struct spy_buf b = SPY_BUF_INIT;
	fg_resources_trend(NULL, &b);
	CHECK(strstr(b.buf, "fewer than 2 readings") != NULL);
	spy_buf_release(&b);
}

int main(void)
{
	test_round_trip();
	test_falling_counter();
	test_flat();
	test_cap();
	test_malformed();
	return check_done();
}
