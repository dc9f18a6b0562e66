/*
 * Continuous mode's one pipeline (cmd/stream.h): the push options' rules,
 * as record and the agent share them; a process's labels, in the order
 * the backends show them; the agent's whole-period windows
 * (cmd/session.h) beside record's; and the rows themselves, which
 * record's and the agent's --help must carry alike (caught as
 * tools/options-dump catches them, through cmd_help_hook).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/session.h"
#include "cmd/stream.h"
#include "common/util.h"
#include "tests/lib/check.h"

static int check_with(struct stream_sink *k, const char *url, unsigned every, const char *label)
{
	static const char *labels[1];
	stream_sink_init(k, "record");
	k->o.url = url;
	k->o.every_s = every;
	if (label) {
		labels[0] = label;
		k->o.labels.v = labels;
		k->o.labels.n = 1;
	}
	int rc = stream_sink_check(k);
	k->o.labels.v = NULL; /* not the sink's to free here */
	return rc;
}

static void test_check(void)
{
	struct stream_sink k;
	/* No --push, nothing that needs it: no stream. */
	CHECK_INT(check_with(&k, NULL, UINT_MAX, NULL), 0);
	CHECK(k.push == NULL);
	/* --push-every or --label without --push: a usage error. */
	CHECK_INT(check_with(&k, NULL, 5, NULL), 2);
	CHECK_INT(check_with(&k, NULL, UINT_MAX, "team=a"), 2);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", UINT_MAX, NULL), 0);
	CHECK(k.push != NULL);
	CHECK_INT((int)k.o.every_s, STREAM_EVERY_S);
	CHECK_INT((int)k.push->every_s, STREAM_EVERY_S);
	CHECK(k.host[0] != 0);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", 0, NULL), 2);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", STREAM_EVERY_MAX_S + 1, NULL), 2);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", STREAM_EVERY_MAX_S, NULL), 0);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", 10, "novalue"), 2);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", 10, "__name__=x"), 2);
	stream_sink_release(&k);
	CHECK_INT(check_with(&k, "http://127.0.0.1:4040", 10, "team=a b"), 2);
	stream_sink_release(&k);
}

static void test_open(void)
{
	struct stream_sink k;
	static const char *labels[] = { "team=core", "host=mine" };
	stream_sink_init(&k, "record");
	snprintf(k.host, sizeof(k.host), "node1");
	k.o.labels.v = labels;
	k.o.labels.n = 2;
	struct stream s;
	CHECK_INT(stream_open(&s, &k, NULL, "/usr/bin/python3 /srv/app/worker.py --secret x", 42, "3.12.1"), 0);
	CHECK_STR(s.series.app, "worker");
	CHECK_INT((int)s.series.nlabels, 4);
	CHECK_STR(s.series.labels[0].key, "host");
	/* --label host=... replaces spy's own, in its place. */
	CHECK_STR(s.series.labels[0].value, "mine");
	CHECK_STR(s.series.labels[1].key, "pid");
	CHECK_STR(s.series.labels[1].value, "42");
	CHECK_STR(s.series.labels[2].key, "python");
	CHECK_STR(s.series.labels[2].value, "3.12.1");
	CHECK_STR(s.series.labels[3].key, "team");
	/* No Python known yet (-s watching a shell): no python label, and a given app wins. */
	k.o.labels.n = 0;
	CHECK_INT(stream_open(&s, &k, "svc", "bash -c x", 7, ""), 0);
	CHECK_STR(s.series.app, "svc");
	CHECK_INT((int)s.series.nlabels, 2);
	CHECK(stream_label(&s, "pod_uid", "u1"));
	CHECK_INT((int)s.series.nlabels, 3);
	k.o.labels.v = NULL;
	stream_sink_release(&k);
}

static struct cmd_window closed[4];
static size_t nclosed;

static void on_closed(void *ctx, const struct cmd_window *w)
{
	(void)ctx;
	if (nclosed < 4) {
		closed[nclosed++] = *w;
	}
}

/* The agent's windows: whole periods on the grid, the first from before its start, the last past its stop. */
static void test_whole(void)
{
	struct cmd_windows w;
	struct prof_stats st;
	memset(&st, 0, sizeof(st));
	uint64_t now = spy_now_ns();
	cmd_windows_start_whole(&w, 7, now, on_closed, NULL);
	CHECK_INT((int)(w.win.from_s % 7), 0);
	/* Two periods and a bit later, with no tick between: each period closed, contiguous. */
	cmd_windows_check(&w, &st, w.end_ns + 7000000000ull + 1);
	CHECK_INT((int)nclosed, 2);
	cmd_windows_end(&w, &st, w.end_ns - 3000000000ull);
	CHECK_INT((int)nclosed, 3);
	for (size_t i = 0; i < nclosed; i++) {
		CHECK_INT((int)(closed[i].from_s % 7), 0);
		CHECK_INT((int)(closed[i].until_s - closed[i].from_s), 7);
		CHECK(i == 0 || closed[i].from_s == closed[i - 1].until_s);
	}
	CHECK(closed[2].last);
	/* record's: the first and last are the parts sampled. */
	nclosed = 0;
	cmd_windows_start(&w, 7, now, on_closed, NULL);
	int64_t from = w.win.from_s;
	cmd_windows_end(&w, &st, now + 1);
	CHECK_INT((int)nclosed, 1);
	CHECK(closed[0].from_s == from && closed[0].until_s <= (from / 7 + 1) * 7);
}

/* The rows --help prints, by command. */
#define MAX_ROWS 64
static struct {
	const char *cmd;
	struct opt rows[MAX_ROWS];
	size_t n;
} caught[2];
static size_t ncaught;

static void catch_help(const char *cmd, const char *const *usage, const struct opt *opts)
{
	(void)usage;
	if (ncaught >= 2) {
		return;
	}
	caught[ncaught].cmd = cmd;
	for (const struct opt *o = opts; o->type != OPT_END && caught[ncaught].n < MAX_ROWS; o++) {
		caught[ncaught].rows[caught[ncaught].n++] = *o;
	}
	ncaught++;
}

static const struct opt *row(size_t c, const char *name)
{
	for (size_t i = 0; i < caught[c].n; i++) {
		if (caught[c].rows[i].long_name && !strcmp(caught[c].rows[i].long_name, name)) {
			return &caught[c].rows[i];
		}
	}
	return NULL;
}

static void test_rows(void)
{
	char *rec[] = { "record", "--help", NULL }, *agent[] = { "agent", "--help", NULL };
	cmd_help_hook = catch_help;
	CHECK_INT(cmd_record(2, rec), 0);
	CHECK_INT(cmd_agent(2, agent), 0);
	cmd_help_hook = NULL;
	CHECK_INT((int)ncaught, 2);
	static const char *const shared[] = { "push-every", "push-api", "push-ca", "push-cert", "push-key",
					      "tenant", "token-file", "basic-auth-file", "push-insecure" };
	for (size_t i = 0; ncaught == 2 && i < sizeof(shared) / sizeof(shared[0]); i++) {
		const struct opt *r = row(0, shared[i]), *a = row(1, shared[i]);
		CHECK(r && a);
		if (!r || !a) {
			continue;
		}
		/* The same row, record's help saying the --push it needs where the agent's requires it. */
		const char *rh = r->help;
		if (!strncmp(rh, "with --push: ", 13) && strncmp(a->help, "with --push: ", 13)) {
			rh += 13;
		}
		CHECK_STR(rh, a->help);
		CHECK(r->type == a->type);
		CHECK_STR(r->argh ? r->argh : "", a->argh ? a->argh : "");
	}
	/* record's own: the agent names and labels each process itself. */
	CHECK(row(0, "label") && !row(1, "label"));
	CHECK(row(0, "app") && !row(1, "app"));
}

int main(void)
{
	test_check();
	test_open();
	test_whole();
	test_rows();
	return check_done();
}
