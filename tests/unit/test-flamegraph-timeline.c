/*
 * Unit tests for the per-thread timeline and the chrome trace writer: a
 * crafted sequence of samples on two threads whose spans are worked out by
 * hand (a caller continuing while its callees change is one span, a gap
 * in the samples closes everything, the process and thread roots are
 * left out), runs stored per stack change rather than per sample, the
 * layout of a folded profile, and the writer's metadata events.
 *
 * With a directory argument the chrome files are saved there for
 * check-chrome.py, which checks their structure with a JSON parser.
 */
#include <stdlib.h>
#include <string.h>

#include "flamegraph/internal.h"
#include "tests/lib/check.h"

/* Read one folded line into p and count it on thread th at t seconds. */
static void sample(struct fg_profile *p, struct fg_timeline *tl, const struct fg_track *th,
		   const char *line, double t)
{
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, line, strlen(line), "line", &err), 0);
	fg_timeline_add(tl, p, th, t);
}

/* Spans as text, one "track B|E func depth microseconds" line each. */
struct spans {
	const struct fg_profile *p;
	struct spy_buf b;
};

static int record_span(void *ctx, size_t track, uint32_t frame, uint32_t depth, uint64_t ts_ns,
		       bool begin)
{
	struct spans *s = ctx;
	spy_buf_addf(&s->b, "%zu %c %s %u %llu\n", track, begin ? 'B' : 'E',
		     fg_profile_frame(s->p, frame)->func, depth, (unsigned long long)(ts_ns / 1000));
	return 0;
}

static void check_spans(const struct fg_timeline *tl, const struct fg_profile *p, const char *want)
{
	struct spans s = { p, SPY_BUF_INIT };
	CHECK_INT(fg_timeline_walk(tl, p, record_span, &s), 0);
	CHECK_STR(s.b.buf ? s.b.buf : "", want);
	spy_buf_release(&s.b);
}

static void save(const char *dir, const char *name, const struct fg_profile *p,
		 const struct fg_timeline *tl)
{
	if (!dir) {
		return;
	}
	struct spy_buf path = SPY_BUF_INIT;
	spy_buf_addf(&path, "%s/%s", dir, name);
	FILE *f = fopen(path.buf, "w");
	CHECK(f != NULL);
	if (f) {
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_profile_write_chrome(p, tl, f, &err), 0);
		fclose(f);
	}
	spy_buf_release(&path);
}

#define ROOT_A "process 7;thread 1;main (a.py:1)"
#define ROOT_B "process 7;thread 2;main (a.py:1)"

/*
 * 100 Hz, so a sample stands for 10 ms. Thread 1:
 *   0, 10 ms   main;work;compute
 *   20 ms      main;work;io       work continues, compute ends at 20
 *   30, 40 ms  main;idle          work and io end at 30
 *   (50..90 ms: no sample; the run before ends one period after 40)
 *   100, 110   main;work;compute  all new, ending at 120
 * Thread 2 (interleaved): 0, 10 ms main;work, ending at 20.
 */
static void test_spans(const char *dir)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_timeline *tl = fg_timeline_new(100);
	struct spy_strtab *st = fg_profile_strtab(p);
	struct fg_track a = { 7, 1, spy_strtab_interns(st, "process 7"),
			      spy_strtab_interns(st, "thread 1 \"main\"") };
	struct fg_track b = { 7, 2, a.pname, spy_strtab_interns(st, "thread 2 \"worker\"") };

	sample(p, tl, &a, ROOT_A ";work (a.py:5);compute (a.py:9) 1", 0.00);
	sample(p, tl, &b, ROOT_B ";work (a.py:5) 1", 0.00);
	sample(p, tl, &a, ROOT_A ";work (a.py:5);compute (a.py:9) 1", 0.01);
	sample(p, tl, &b, ROOT_B ";work (a.py:5) 1", 0.01);
	sample(p, tl, &a, ROOT_A ";work (a.py:5);io (a.py:12) 1", 0.02);
	sample(p, tl, &a, ROOT_A ";idle (a.py:20) 1", 0.03);
	sample(p, tl, &a, ROOT_A ";idle (a.py:20) 1", 0.04);
	sample(p, tl, &a, ROOT_A ";work (a.py:5);compute (a.py:9) 1", 0.10);
	sample(p, tl, &a, ROOT_A ";work (a.py:5);compute (a.py:9) 1", 0.11);

	CHECK_INT(fg_timeline_tracks(tl), 2);
	/* Thread 1: compute x2, io, idle x2, compute x2 after the gap. */
	CHECK_INT(fg_timeline_runs(tl), 5);
	CHECK_INT(fg_timeline_dropped(tl), 0);
	CHECK_INT(fg_timeline_track(tl, 1)->tid, 2);
	check_spans(tl, p,
		    "0 B main 0 0\n0 B work 1 0\n0 B compute 2 0\n"
		    "0 E compute 2 20000\n0 B io 2 20000\n"
		    "0 E io 2 30000\n0 E work 1 30000\n0 B idle 1 30000\n"
		    "0 E idle 1 50000\n0 E main 0 50000\n"
		    "0 B main 0 100000\n0 B work 1 100000\n0 B compute 2 100000\n"
		    "0 E compute 2 120000\n0 E work 1 120000\n0 E main 0 120000\n"
		    "1 B main 0 0\n1 B work 1 0\n1 E work 1 20000\n1 E main 0 20000\n");
	/* Three resource readings 0.05 s apart: counter tracks, the rates written at each interval's start. */
	struct fg_resources *res = fg_resources_new();
	for (unsigned i = 0; i < 3; i++) {
		struct fg_res_point pt = { 0.05 * i, 20000000ull * i, 5000000ull * i, 10000000ull + 1000000ull * i,
					   2, 10ull * i, 0, 4096ull * i };
		fg_resources_add(res, &pt);
	}
	fg_resources_store(res, p);
	fg_resources_free(res);
	save(dir, "recorded.trace.json", p, tl);

	struct spy_buf out = SPY_BUF_INIT;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_write_chrome(p, tl, f, &err), 0);
	fclose(f);
	CHECK(strstr(text, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":7,\"tid\":2,"
			   "\"args\":{\"name\":\"thread 2 \\\"worker\\\"\"}}") != NULL);
	CHECK(strstr(text, "\"name\":\"process_name\",\"pid\":7,\"tid\":0,"
			   "\"args\":{\"name\":\"process 7\"}}") != NULL);
	/* CPU 40% user and 10% sys over the first 0.05 s; RSS 11 MB at the second reading. */
	CHECK(strstr(text, "{\"ph\":\"C\",\"name\":\"cpu\",\"cat\":\"resources\",\"ts\":0.000,\"pid\":7,"
			   "\"tid\":0,\"args\":{\"user %\":40.000,\"sys %\":10.000}}") != NULL);
	CHECK(strstr(text, "{\"ph\":\"C\",\"name\":\"rss\",\"cat\":\"resources\",\"ts\":50000.000,\"pid\":7,"
			   "\"tid\":0,\"args\":{\"MB\":11.000}}") != NULL);
	CHECK(strstr(text, "\"io\",\"cat\":\"resources\",\"ts\":50000.000,\"pid\":7,\"tid\":0,"
			   "\"args\":{\"read KB/s\":0.000,\"write KB/s\":81.920}}") != NULL);
	CHECK(strstr(text, "\"res-0\"") == NULL);
	CHECK(strstr(text, "{\"ph\":\"B\",\"name\":\"io\",\"cat\":\"python\",\"ts\":20000.000,"
			   "\"pid\":7,\"tid\":1,\"args\":{\"file\":\"a.py\",\"line\":12}}") != NULL);
	/* The roots are the tracks, not slices. */
	CHECK(strstr(text, "\"name\":\"thread 1 \\\"main\\\"\",\"cat\"") == NULL);
	free(text);
	spy_buf_release(&out);
	fg_timeline_free(tl);
	fg_profile_free(p);
}

/* Samples out of order or stacks not counted must not break the runs. */
static void test_odd_input(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct fg_timeline *tl = fg_timeline_new(0); /* unknown rate: FG_TIMELINE_RATE */
	struct fg_track a = { 1, 1, NULL, NULL };
	sample(p, tl, &a, "main (a.py:1) 1", 0.5);
	/* A clock going back pins to the last time: same run. */
	sample(p, tl, &a, "main (a.py:1) 1", 0.2);
	/* An empty stack counts in no stack: nothing added. */
	struct spy_stack empty;
	memset(&empty, 0, sizeof(empty));
	CHECK_INT(fg_profile_add(p, &empty, 1), 0);
	fg_timeline_add(tl, p, &a, 0.51);
	CHECK_INT(fg_timeline_runs(tl), 1);
	check_spans(tl, p, "0 B main 0 500000\n0 E main 0 510000\n");
	fg_timeline_free(tl);
	fg_profile_free(p);
}

/*
 * A folded profile laid out: thread 1 has main;a x3 then main;b x2 (folded
 * order), thread 2 main x4; 10 ms a sample at 100 Hz.
 */
static void test_layout(const char *dir)
{
	static const char folded[] = "# rate-hz: 100\n"
				     "process 7;thread 2;main (x.py:1) 4\n"
				     "process 7;thread 1;main (x.py:1);b (x.py:3) 2\n"
				     "process 7;thread 1;main (x.py:1);a (x.py:2) 3\n";
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, folded, strlen(folded), "f", &err), 0);
	struct fg_timeline *tl = fg_timeline_layout(p);
	CHECK_INT(fg_timeline_tracks(tl), 2);
	CHECK_INT(fg_timeline_runs(tl), 3);
	if (fg_timeline_tracks(tl) == 2) {
		CHECK_INT(fg_timeline_track(tl, 0)->pid, 1);
		CHECK_INT(fg_timeline_track(tl, 1)->pid, 1);
		CHECK_INT(fg_timeline_track(tl, 1)->tid, 2);
		CHECK_STR(fg_timeline_track(tl, 0)->tname, "thread 1");
		CHECK_STR(fg_timeline_track(tl, 1)->pname, "process 7");
	}
	check_spans(tl, p,
		    "0 B main 0 0\n0 B a 1 0\n0 E a 1 30000\n0 B b 1 30000\n"
		    "0 E b 1 50000\n0 E main 0 50000\n"
		    "1 B main 0 0\n1 E main 0 40000\n");
	save(dir, "layout.trace.json", p, NULL);
	fg_timeline_free(tl);

	/* No roots at all: one track for the whole profile. */
	struct fg_profile *q = fg_profile_new(NULL, 0);
	static const char plain[] = "main (x.py:1);a (x.py:2) 2\nmain (x.py:1) 1\n";
	CHECK_INT(fg_profile_read_folded(q, plain, strlen(plain), "g", &err), 0);
	tl = fg_timeline_layout(q);
	CHECK_INT(fg_timeline_tracks(tl), 1);
	CHECK(fg_timeline_track(tl, 0)->tname == NULL);
	/* main alone comes first in folded order, then main;a: main goes on. */
	check_spans(tl, q, "0 B main 0 0\n0 B a 1 10000\n0 E a 1 30000\n0 E main 0 30000\n");
	save(dir, "plain.trace.json", q, NULL);
	fg_timeline_free(tl);
	fg_profile_free(q);
	fg_profile_free(p);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : NULL;
	test_spans(dir);
	test_odd_input();
	test_layout(dir);
	return check_done();
}
