/*
 * Unit tests for the pure pieces of `spy record`: the format a file name
 * implies, format names, and the ticker's deadline arithmetic (sampler/),
 * which is what makes 100 Hz for 60 s give 6000 samples.
 */
#include <stdbool.h>
#include <stdint.h>

#include "common/util.h"
#include "flamegraph/flamegraph.h"
#include "sampler/sampler.h"
#include "tests/lib/check.h"

static void test_formats(void)
{
	CHECK_INT(fg_format_from_path("out.svg"), FG_FORMAT_SVG);
	CHECK_INT(fg_format_from_path("OUT.SVG"), FG_FORMAT_SVG);
	CHECK_INT(fg_format_from_path("out.folded"), FG_FORMAT_FOLDED);
	CHECK_INT(fg_format_from_path("out.collapsed"), FG_FORMAT_FOLDED);
	CHECK_INT(fg_format_from_path("out.folded.gz"), FG_FORMAT_FOLDED);
	CHECK_INT(fg_format_from_path("dir.svg/out.gz"), FG_FORMAT_FOLDED);
	CHECK_INT(fg_format_from_path("out.txt"), FG_FORMAT_TABLE);
	CHECK_INT(fg_format_from_path("out.json"), FG_FORMAT_JSON);
	CHECK_INT(fg_format_from_path("out.speedscope.json"), FG_FORMAT_SPEEDSCOPE);
	CHECK_INT(fg_format_from_path("out.trace.json"), FG_FORMAT_CHROME);
	CHECK_INT(fg_format_from_path("out.pb.gz"), FG_FORMAT_PPROF);
	CHECK_INT(fg_format_from_path("out.pprof"), FG_FORMAT_PPROF);
	/* No or unknown extension: svg, as cli.md says. */
	CHECK_INT(fg_format_from_path("profile"), FG_FORMAT_SVG);
	CHECK_INT(fg_format_from_path("a.b/profile"), FG_FORMAT_SVG);
	CHECK_INT(fg_format_from_path(""), FG_FORMAT_SVG);

	enum fg_format f;
	CHECK(fg_format_parse("folded", &f) && f == FG_FORMAT_FOLDED);
	CHECK(fg_format_parse("table", &f) && f == FG_FORMAT_TABLE);
	CHECK(fg_format_parse("svg", &f) && f == FG_FORMAT_SVG);
	CHECK(fg_format_parse("pprof", &f) && f == FG_FORMAT_PPROF);
	CHECK(!fg_format_parse("SVG", &f));
	CHECK(!fg_format_parse("", &f));
	CHECK_STR(fg_format_name(FG_FORMAT_SPEEDSCOPE), "speedscope");
	/* A default name's extension must imply the format it was made for. */
	for (int i = FG_FORMAT_SVG; i <= FG_FORMAT_JSON; i++) {
		char name[64];
		snprintf(name, sizeof(name), "spy-42%s", fg_format_ext((enum fg_format)i));
		CHECK_INT(fg_format_from_path(name), i);
	}
	CHECK_INT(fg_format_from_path("out.pb.gz"), FG_FORMAT_PPROF);
}

static void test_ticker_on_time(void)
{
	struct ticker t;
	const uint64_t s = 1000000000ull;
	ticker_init(&t, 100, 5 * s);
	CHECK_INT(t.period_ns, 10000000);
	CHECK_INT(ticker_deadline(&t), 5 * s);
	/* A sampler that always keeps up: 60 s at 100 Hz is 6000 ticks, none missed. */
	uint64_t end = 5 * s + 60 * s;
	uint64_t n = 0;
	while (ticker_deadline(&t) < end) {
		ticker_take(&t, ticker_deadline(&t) + 3000000); /* 3 ms per sample */
		n++;
	}
	CHECK_INT(n, 6000);
	CHECK_INT(t.taken, 6000);
	CHECK_INT(t.missed, 0);
}

/* A rate of 1e-300 Hz is a period of 1e309 ns: saturated, not 0 (which
 * made ticker_take divide by zero: SIGFPE) nor undefined. */
static void test_ticker_tiny_rate(void)
{
	struct ticker t;
	const uint64_t s = 1000000000ull;
	ticker_init(&t, 1e-300, 5 * s);
	CHECK(t.period_ns >= 1);
	CHECK_INT(t.period_ns, SPY_NS_MAX);
	ticker_take(&t, 10 * s);
	CHECK(ticker_deadline(&t) > 5 * s);
	ticker_init(&t, 1e300, 0);
	CHECK_INT(t.period_ns, 1);
	CHECK_INT(spy_s_to_ns(0.0 / 0.0), 0);
	CHECK_INT(spy_s_to_ns(-1), 0);
	CHECK_INT(spy_s_to_ns(1e300), SPY_NS_MAX);
	CHECK_INT(spy_s_to_ns(1.5), 1500000000);
}

static void test_ticker_late(void)
{
	struct ticker t;
	ticker_init(&t, 100, 0);
	/* Late by less than a period: the next tick is taken late, nothing skipped. */
	ticker_take(&t, 15000000);
	CHECK_INT(t.missed, 0);
	CHECK_INT(ticker_deadline(&t), 10000000);
	/* Tick 1 (10 ms) finished at 45 ms: ticks 2 and 3 passed whole, 4 is taken late. */
	ticker_take(&t, 45000000);
	CHECK_INT(t.missed, 2);
	CHECK_INT(t.taken, 2);
	CHECK_INT(ticker_deadline(&t), 40000000);
	/* The late sample takes deadline 4 (40 ms), and the schedule is intact. */
	ticker_take(&t, 41000000);
	CHECK_INT(ticker_deadline(&t), 50000000);
	CHECK_INT(t.taken + t.missed, 5);
	/* Finishing exactly on the next deadline is on time. */
	ticker_take(&t, 60000000);
	CHECK_INT(t.missed, 2);
	CHECK_INT(ticker_deadline(&t), 60000000);
	/* A whole period past the next deadline: that one is missed, never sampled in a burst. */
	ticker_take(&t, 80000000);
	CHECK_INT(t.missed, 3);
	CHECK_INT(ticker_deadline(&t), 80000000);
}

/* Above 100 Hz a period is shorter than the slack: a short hiccup is caught up. */
static void test_ticker_catch_up(void)
{
	struct ticker t;
	ticker_init(&t, 5000, 0);
	CHECK_INT(t.period_ns, 200000);
	/* Tick 0 finished 1 ms late: ticks 1-5 are all still due, none missed. */
	ticker_take(&t, 1200000);
	CHECK_INT(t.missed, 0);
	CHECK_INT(ticker_deadline(&t), 200000);
	for (int i = 0; i < 5; i++) {
		ticker_take(&t, 1210000 + 10000 * (uint64_t)i);
	}
	CHECK_INT(t.missed, 0);
	CHECK_INT(t.taken, 6);
	CHECK_INT(ticker_deadline(&t), 1200000);
	/* 10 ms (the slack) or more behind: skipped to the latest deadline, the rest missed. */
	ticker_take(&t, 1200000 + 200000 + TICKER_SLACK_NS);
	CHECK_INT(ticker_deadline(&t), 11400000);
	CHECK_INT(t.missed, 50);
	CHECK_INT(t.taken + t.missed, 57);
}

static void test_ticker_rates(void)
{
	struct ticker t;
	/* Rates that do not divide 1e9 round to the nearest nanosecond. */
	ticker_init(&t, 3, 0);
	CHECK_INT(t.period_ns, 333333333);
	ticker_init(&t, 7000, 0);
	CHECK_INT(t.period_ns, 142857);
	/* Absurd rates never give a zero period. */
	ticker_init(&t, 1e12, 0);
	CHECK_INT(t.period_ns, 1);
	/* Deadlines are start + k * period, so they do not drift over an hour. */
	ticker_init(&t, 3, 100);
	for (int i = 0; i < 3 * 3600; i++) {
		ticker_take(&t, ticker_deadline(&t));
	}
	CHECK_INT(ticker_deadline(&t), 100 + (uint64_t)3 * 3600 * 333333333);
}

static void test_ticker_wait(void)
{
	struct ticker t;
	/* 10 Hz: nothing below yields the CPU before the sleep it checks, but a
	 * loaded machine may still preempt the test for milliseconds. */
	ticker_init(&t, 10, spy_now_ns());
	/* The first deadline is now, and the clock read is handed back. */
	uint64_t seen = 0, at = spy_now_ns();
	CHECK_INT(ticker_wait(&t, 1000000, &seen), 1);
	CHECK(seen >= at && seen <= spy_now_ns());
	ticker_take(&t, spy_now_ns());
	/* The next is ~100 ms away: a 0 ns slice is a poll that runs out at
	 * once, without sleeping (the clock it read is handed back); a long
	 * slice reaches the deadline. */
	uint64_t before = spy_now_ns();
	seen = 0;
	CHECK_INT(ticker_wait(&t, 0, &seen), 0);
	CHECK(seen >= before);
	CHECK_INT(ticker_wait(&t, 1000000000ull, &seen), 1);
	CHECK_INT(seen, 0); /* slept */
	CHECK(spy_now_ns() >= ticker_deadline(&t));
	CHECK(spy_now_ns() - before < 500000000ull);
}

/* Short periods are spun for: the deadline is still met, and a stop request or max_ns ends the wait. */
static void test_ticker_spin(void)
{
	struct ticker t;
	ticker_init(&t, 20000, 0);
	CHECK(!t.spin);
	ticker_init(&t, 20001, 0);
	CHECK(t.spin);
	ticker_init(&t, 1e6, spy_now_ns());
	CHECK_INT(ticker_wait(&t, 1000000, NULL), 1);
	ticker_take(&t, spy_now_ns());
	uint64_t seen = 0;
	CHECK_INT(ticker_wait(&t, 1000000000ull, &seen), 1);
	/* Spun for: the read that found the deadline reached. */
	CHECK(seen >= ticker_deadline(&t) && seen <= spy_now_ns());
	/* A first deadline a minute away: neither wait may last that long. */
	uint64_t before = spy_now_ns();
	ticker_init(&t, 1e6, before + 60000000000ull);
	CHECK_INT(ticker_wait(&t, 2000000, NULL), 0);
	CHECK(spy_now_ns() - before >= 2000000);
	proc_stop_requested = SIGINT;
	CHECK_INT(ticker_wait(&t, 1000000000ull, NULL), -SPY_EINTR);
	proc_stop_requested = 0;
	CHECK(spy_now_ns() - before < 500000000ull);
}

int main(void)
{
	test_formats();
	test_ticker_on_time();
	test_ticker_late();
	test_ticker_tiny_rate();
	test_ticker_catch_up();
	test_ticker_rates();
	test_ticker_wait();
	test_ticker_spin();
	return check_done();
}
