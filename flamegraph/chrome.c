/*
 * The Trace Event Format ("JSON Array Format" inside a "JSON Object
 * Format" document) that chrome://tracing and Perfetto open: metadata
 * events naming every process and thread, then the timeline's spans as
 * B/E pairs.
 *
 * Why B/E pairs rather than X (complete) events: the walk knows a span's
 * end only after everything nested in it, so X events would come out in
 * order of their ends; B/E events come out in time order per thread, which
 * is what a streaming reader (and our own checker) expects, and need no
 * buffering of open spans here.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

#define WHAT "chrome trace"

struct chrome {
	const struct fg_profile *p;
	const struct fg_timeline *tl;
	struct spy_buf b;
	FILE *f;
	struct spy_err *err;
	bool first;   /* no event written yet */
};

/* Start an event: a separating comma before all but the first. */
static void open_event(struct chrome *c, const char *ph)
{
	spy_buf_addf(&c->b, "%s{\"ph\":\"%s\",\"name\":", c->first ? "\n" : ",\n", ph);
	c->first = false;
}

static void add_ts(struct spy_buf *b, uint64_t ns)
{
	spy_buf_addf(b, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static void add_ids(struct spy_buf *b, const struct fg_track *t, bool thread)
{
	spy_buf_addf(b, ",\"pid\":%" PRId32 ",\"tid\":%" PRId32, t->pid, thread ? t->tid : 0);
}

static int span(void *ctx, size_t track, uint32_t frame, uint32_t depth, uint64_t ts_ns, bool begin)
{
	struct chrome *c = ctx;
	const struct fg_frame *fr = fg_profile_frame(c->p, frame);
	(void)depth;
	open_event(c, begin ? "B" : "E");
	fg_json_string(&c->b, fr->func);
	spy_buf_addf(&c->b, ",\"cat\":\"%s\",\"ts\":", fg_kind_name(fr->kind));
	add_ts(&c->b, ts_ns);
	add_ids(&c->b, fg_timeline_track(c->tl, track), true);
	if (begin && fr->file) {
		spy_buf_adds(&c->b, ",\"args\":{\"file\":");
		fg_json_string(&c->b, fr->file);
		spy_buf_addf(&c->b, ",\"line\":%" PRIu32 "}", fr->line);
	}
	spy_buf_addch(&c->b, '}');
	return fg_flush(&c->b, c->f, false, WHAT, c->err);
}

static void name_event(struct chrome *c, const struct fg_track *t, bool thread, const char *name)
{
	open_event(c, "M");
	spy_buf_adds(&c->b, thread ? "\"thread_name\"" : "\"process_name\"");
	add_ids(&c->b, t, thread);
	spy_buf_adds(&c->b, ",\"args\":{\"name\":");
	fg_json_string(&c->b, name);
	spy_buf_adds(&c->b, "}}");
}

/* A process_name for each pid's first track, a thread_name for every track. */
static void name_tracks(struct chrome *c)
{
	size_t n = fg_timeline_tracks(c->tl);
	for (size_t i = 0; i < n; i++) {
		const struct fg_track *t = fg_timeline_track(c->tl, i);
		bool first = true;
		for (size_t j = 0; j < i && first; j++) {
			first = fg_timeline_track(c->tl, j)->pid != t->pid;
		}
		if (first) {
			name_event(c, t, false, t->pname ? t->pname : "spy");
		}
		name_event(c, t, true, t->tname ? t->tname : "all threads");
	}
}

/* One counter event: name, then n series "label":value. */
static void counter(struct chrome *c, int32_t pid, const char *name, double t_s, size_t n,
		    const char *const *label, const double *v)
{
	open_event(c, "C");
	fg_json_string(&c->b, name);
	spy_buf_adds(&c->b, ",\"cat\":\"resources\",\"ts\":");
	add_ts(&c->b, t_s > 0 ? spy_s_to_ns(t_s) : 0);
	spy_buf_addf(&c->b, ",\"pid\":%" PRId32 ",\"tid\":0,\"args\":{", pid);
	for (size_t i = 0; i < n; i++) {
		spy_buf_addf(&c->b, "%s\"%s\":%.3f", i ? "," : "", label[i], v[i]);
	}
	spy_buf_adds(&c->b, "}}");
}

static bool known2(uint64_t a, uint64_t b)
{
	return a != FG_RES_UNKNOWN && b != FG_RES_UNKNOWN && b >= a;
}

/* The resource readings kept in the profile, as counters of the first process. */
static int counters(struct chrome *c)
{
	struct fg_resources *r = NULL;
	struct spy_err ignored = SPY_ERR_INIT;
	/* A malformed reading was already refused when the profile was read for report; none here. */
	if (fg_resources_load(&r, c->p, "profile", &ignored) < 0 || !r || !fg_timeline_tracks(c->tl)) {
		fg_resources_free(r);
		return 0;
	}
	int32_t pid = fg_timeline_track(c->tl, 0)->pid;
	static const char *const cpu[] = { "user %", "sys %" }, *const io[] = { "read KB/s", "write KB/s" };
	static const char *const rss[] = { "MB" }, *const th[] = { "threads" }, *const cs[] = { "per s" };
	size_t n = fg_resources_count(r);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		const struct fg_res_point *a = fg_resources_at(r, i);
		const struct fg_res_point *b = i + 1 < n ? fg_resources_at(r, i + 1) : NULL;
		double dt = b ? b->t - a->t : 0, v[2];
		if (a->rss != FG_RES_UNKNOWN) {
			v[0] = (double)a->rss / 1e6;
			counter(c, pid, "rss", a->t, 1, rss, v);
		}
		if (a->threads != FG_RES_UNKNOWN) {
			v[0] = (double)a->threads;
			counter(c, pid, "threads", a->t, 1, th, v);
		}
		if (dt > 0.001 && known2(a->user_ns, b->user_ns) && known2(a->sys_ns, b->sys_ns)) {
			v[0] = (double)(b->user_ns - a->user_ns) / 1e7 / dt;
			v[1] = (double)(b->sys_ns - a->sys_ns) / 1e7 / dt;
			counter(c, pid, "cpu", a->t, 2, cpu, v);
		}
		if (dt > 0.001 && known2(a->ctxsw, b->ctxsw)) {
			v[0] = (double)(b->ctxsw - a->ctxsw) / dt;
			counter(c, pid, "context switches", a->t, 1, cs, v);
		}
		if (dt > 0.001 && known2(a->read_bytes, b->read_bytes) && known2(a->write_bytes, b->write_bytes)) {
			v[0] = (double)(b->read_bytes - a->read_bytes) / 1e3 / dt;
			v[1] = (double)(b->write_bytes - a->write_bytes) / 1e3 / dt;
			counter(c, pid, "io", a->t, 2, io, v);
		}
		rc = fg_flush(&c->b, c->f, false, WHAT, c->err);
	}
	fg_resources_free(r);
	return rc;
}

static void other_data(struct chrome *c)
{
	size_t n = fg_profile_meta_count(c->p);
	spy_buf_adds(&c->b, "],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{");
	for (size_t i = 0; i < n; i++) {
		const char *key, *value;
		fg_profile_meta_at(c->p, i, &key, &value);
		/* The readings are the counter tracks already. */
		if (!strncmp(key, "res-", 4)) {
			continue;
		}
		if (c->b.buf[c->b.len - 1] != '{') {
			spy_buf_addch(&c->b, ',');
		}
		fg_json_string(&c->b, key);
		spy_buf_addch(&c->b, ':');
		fg_json_string(&c->b, value);
	}
	/* Past FG_MAX_TIMELINE_RUNS the trace stops short: say so. */
	if (fg_timeline_dropped(c->tl)) {
		spy_buf_addf(&c->b, "%s\"timeline-dropped-samples\":\"%" PRIu64 "\"", c->b.buf[c->b.len - 1] != '{' ? "," : "",
			     fg_timeline_dropped(c->tl));
	}
	spy_buf_adds(&c->b, "}}\n");
}

int fg_profile_write_chrome(const struct fg_profile *p, const struct fg_timeline *tl, FILE *f,
			    struct spy_err *err)
{
	struct fg_timeline *own = tl ? NULL : fg_timeline_layout(p);
	struct chrome c = { p, tl ? tl : own, SPY_BUF_INIT, f, err, true };
	spy_buf_adds(&c.b, "{\"traceEvents\":[");
	name_tracks(&c);
	int rc = fg_timeline_walk(c.tl, p, span, &c);
	if (!rc) {
		rc = counters(&c);
	}
	if (!rc) {
		other_data(&c);
		rc = fg_flush(&c.b, f, true, WHAT, err);
	}
	spy_buf_release(&c.b);
	fg_timeline_free(own);
	return rc;
}
