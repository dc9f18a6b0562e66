/*
 * The per-thread timeline behind -f chrome, and its walk into nested spans.
 *
 * The decision a newcomer would question: samples are stored as runs of
 * one stack id, not one entry per sample, and spans are worked out only
 * when the file is written. A thread that sits in one function for a
 * minute at 1000 Hz is one run, so memory follows how often stacks change;
 * and the merging of a frame across runs (a caller that stays while its
 * callees change) needs only the previous run's frames, which the walk
 * keeps as its stack of open spans.
 *
 * Tracks are found by (pid, tid) with a search that starts just after the
 * last track hit: a tick samples the threads in the same order every
 * time, so the next thread is almost always the next track.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

struct tl_run {
	uint32_t stack;
	uint64_t n;               /* samples in the run */
	uint64_t first_ns, last_ns;
};

struct tl_track {
	struct fg_track id;
	struct tl_run *runs;
	size_t n, alloc;
};

struct fg_timeline {
	uint64_t period_ns;
	struct tl_track *tracks;
	size_t ntracks, alloc, last;
	size_t runs;
	uint64_t dropped;
};

static uint64_t period_of(double rate_hz)
{
	if (!(rate_hz > 0 && rate_hz < 1e9)) {
		rate_hz = FG_TIMELINE_RATE;
	}
	/* 1e-300 Hz passes the test above: the conversion saturates. */
	return spy_s_to_ns(1.0 / rate_hz);
}

struct fg_timeline *fg_timeline_new(double rate_hz)
{
	struct fg_timeline *tl = spy_xcalloc(1, sizeof(*tl));
	tl->period_ns = period_of(rate_hz);
	return tl;
}

void fg_timeline_free(struct fg_timeline *tl)
{
	if (!tl) {
		return;
	}
	for (size_t i = 0; i < tl->ntracks; i++) {
		free(tl->tracks[i].runs);
	}
	free(tl->tracks);
	free(tl);
}

static struct tl_track *track_of(struct fg_timeline *tl, const struct fg_track *th)
{
	for (size_t k = 0; k < tl->ntracks; k++) {
		size_t i = (tl->last + 1 + k) % tl->ntracks;
		if (tl->tracks[i].id.pid == th->pid && tl->tracks[i].id.tid == th->tid) {
			tl->last = i;
			return &tl->tracks[i];
		}
	}
	SPY_GROW(tl->tracks, tl->alloc, tl->ntracks + 1);
	struct tl_track *t = &tl->tracks[tl->ntracks];
	memset(t, 0, sizeof(*t));
	t->id = *th;
	tl->last = tl->ntracks++;
	return t;
}

/*
 * Whether a sample (or run) at t_ns follows the run r with none missing. A
 * missed tick leaves a gap of two periods; a busy machine delays single
 * ticks by a good part of one, which must not read as a gap.
 */
static bool contiguous(const struct fg_timeline *tl, const struct tl_run *r, uint64_t t_ns)
{
	return t_ns >= r->last_ns && t_ns - r->last_ns <= tl->period_ns * 7 / 4;
}

/* Append n samples of stack from first_ns to last_ns, or extend the last run. */
static void add_run(struct fg_timeline *tl, struct tl_track *t, uint32_t stack, uint64_t n,
		    uint64_t first_ns, uint64_t last_ns)
{
	struct tl_run *r = t->n ? &t->runs[t->n - 1] : NULL;
	if (r && r->stack == stack && contiguous(tl, r, first_ns)) {
		r->n += n;
		r->last_ns = last_ns;
		return;
	}
	if (tl->runs >= FG_MAX_TIMELINE_RUNS) {
		tl->dropped += n;
		return;
	}
	SPY_GROW(t->runs, t->alloc, t->n + 1);
	t->runs[t->n++] = (struct tl_run){ stack, n, first_ns, last_ns };
	tl->runs++;
}

void fg_timeline_add(struct fg_timeline *tl, const struct fg_profile *p, const struct fg_track *th,
		     double t)
{
	uint32_t stack = fg_profile_last_stack(p);
	if (stack == FG_NONE) {
		return;
	}
	/* Negative or absurd times (a clock going back) pin to 0. */
	uint64_t t_ns = t < 1e9 ? spy_s_to_ns(t) : 0;
	struct tl_track *tr = track_of(tl, th);
	if (tr->n && t_ns < tr->runs[tr->n - 1].last_ns) {
		t_ns = tr->runs[tr->n - 1].last_ns;
	}
	add_run(tl, tr, stack, 1, t_ns, t_ns);
}

size_t fg_timeline_tracks(const struct fg_timeline *tl)
{
	return tl->ntracks;
}

const struct fg_track *fg_timeline_track(const struct fg_timeline *tl, size_t i)
{
	return &tl->tracks[i].id;
}

size_t fg_timeline_runs(const struct fg_timeline *tl)
{
	return tl->runs;
}

uint64_t fg_timeline_dropped(const struct fg_timeline *tl)
{
	return tl->dropped;
}

/* The roots a stack's track stands for: leading process and thread frames. */
static size_t skip_roots(const struct fg_profile *p, const uint32_t *ids, size_t depth,
			 uint32_t *proc, uint32_t *thread)
{
	size_t i = 0;
	*proc = *thread = FG_NONE;
	if (i < depth && fg_frame_is_root(&p->frames[ids[i]], "process ")) {
		*proc = ids[i++];
	}
	if (i < depth && fg_frame_is_root(&p->frames[ids[i]], "thread ")) {
		*thread = ids[i++];
	}
	return i;
}

struct layout {
	struct fg_timeline *tl;
	const struct fg_profile *p;
	const struct fg_order *o;
	size_t k;            /* position in the folded order */
	uint64_t *cursor;    /* per track: where its next stack starts */
	size_t ncursor;
	int32_t npids;
};

static struct tl_track *layout_track(struct layout *l, uint32_t proc, uint32_t thread)
{
	const char *pname = proc == FG_NONE ? NULL : l->p->frames[proc].func;
	const char *tname = thread == FG_NONE ? NULL : l->p->frames[thread].func;
	int32_t pid = 0;
	for (size_t i = 0; i < l->tl->ntracks; i++) {
		struct tl_track *t = &l->tl->tracks[i];
		if (t->id.pname == pname) {
			if (t->id.tname == tname) {
				return t;
			}
			pid = t->id.pid;
		}
	}
	struct fg_track id = { pid ? pid : ++l->npids, (int32_t)l->tl->ntracks + 1, pname, tname };
	size_t before = l->tl->ntracks;
	struct tl_track *t = track_of(l->tl, &id);
	SPY_GROW(l->cursor, l->ncursor, before + 1);
	l->cursor[before] = 0;
	return t;
}

static int layout_stack(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	struct layout *l = ctx;
	uint32_t proc, thread;
	if (!count) {
		l->k++;
		return 0;
	}
	skip_roots(l->p, frames, depth, &proc, &thread);
	struct tl_track *t = layout_track(l, proc, thread);
	uint64_t *at = &l->cursor[t - l->tl->tracks];
	uint64_t period = l->tl->period_ns;
	/* Counts are bounded by FG_MAX_TOTAL; time past 2^64 ns would wrap. */
	uint64_t len = count <= UINT64_MAX / period ? count * period : UINT64_MAX;
	add_run(l->tl, t, l->o->stack[l->k++], count, *at, *at + len - period);
	*at = *at + len < *at ? UINT64_MAX : *at + len;
	return 0;
}

struct fg_timeline *fg_timeline_layout(const struct fg_profile *p)
{
	const char *rate_s = fg_profile_meta_get(p, FG_META_RATE_HZ);
	struct fg_timeline *tl = fg_timeline_new(rate_s ? strtod(rate_s, NULL) : 0);
	struct fg_order o;
	fg_order_init(&o, p);
	struct layout l = { tl, p, &o, 0, NULL, 0, 0 };
	fg_order_foreach_stack(&o, p, layout_stack, &l);
	fg_order_release(&o);
	free(l.cursor);
	return tl;
}

/* The frames open on one track while walking it, outermost first. */
struct walk {
	const struct fg_timeline *tl;
	const struct fg_profile *p;
	fg_span_fn fn;
	void *ctx;
	size_t track;
	uint32_t *open;
	size_t nopen, alloc;
};

/* End the open spans deeper than keep, innermost first, at ts. */
static int close_to(struct walk *w, size_t keep, uint64_t ts)
{
	while (w->nopen > keep) {
		w->nopen--;
		int rc = w->fn(w->ctx, w->track, w->open[w->nopen], (uint32_t)w->nopen, ts, false);
		if (rc) {
			return rc;
		}
	}
	return 0;
}

static int walk_run(struct walk *w, const struct tl_run *r, bool follows)
{
	const struct fg_stack_ent *s = &w->p->stacks[r->stack];
	const uint32_t *ids = w->p->pool + s->off;
	uint32_t proc, thread;
	size_t lo = skip_roots(w->p, ids, s->depth, &proc, &thread);
	size_t same = 0;
	while (follows && same < w->nopen && lo + same < s->depth && w->open[same] == ids[lo + same]) {
		same++;
	}
	int rc = close_to(w, same, r->first_ns);
	SPY_GROW(w->open, w->alloc, s->depth - lo);
	for (size_t i = lo + same; i < s->depth && !rc; i++) {
		w->open[w->nopen] = ids[i];
		rc = w->fn(w->ctx, w->track, ids[i], (uint32_t)w->nopen, r->first_ns, true);
		w->nopen++;
	}
	return rc;
}

static int walk_track(struct walk *w, const struct tl_track *t)
{
	int rc = 0;
	w->nopen = 0;
	for (size_t i = 0; i < t->n && !rc; i++) {
		const struct tl_run *prev = i ? &t->runs[i - 1] : NULL;
		bool follows = prev && contiguous(w->tl, prev, t->runs[i].first_ns);
		if (prev && !follows) {
			rc = close_to(w, 0, prev->last_ns + w->tl->period_ns);
		}
		if (!rc) {
			rc = walk_run(w, &t->runs[i], follows);
		}
	}
	if (!rc && t->n) {
		rc = close_to(w, 0, t->runs[t->n - 1].last_ns + w->tl->period_ns);
	}
	return rc;
}

int fg_timeline_walk(const struct fg_timeline *tl, const struct fg_profile *p, fg_span_fn fn,
		     void *ctx)
{
	struct walk w = { tl, p, fn, ctx, 0, NULL, 0, 0 };
	int rc = 0;
	for (size_t i = 0; i < tl->ntracks && !rc; i++) {
		w.track = i;
		rc = walk_track(&w, &tl->tracks[i]);
	}
	free(w.open);
	return rc;
}
