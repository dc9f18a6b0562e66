/*
 * The speedscope.app file format
 * (https://www.speedscope.app/file-format-schema.json): shared.frames, then
 * "sampled" profiles whose samples are lists of frame indices, root first,
 * with one weight each.
 *
 * The profile keeps aggregated stacks, not a timeline, so each distinct
 * stack is one sample weighted by its count; speedscope's left-heavy and
 * sandwich views are exact, its time-order view shows stacks in folded
 * order rather than in time.
 *
 * A stack recorded with -t starts with the synthetic roots "process ..."
 * and "thread ...". Speedscope has a profile selector made for exactly
 * that, so stacks are split into one profile per (process, thread) and
 * those roots are stripped into the profile's name; without thread roots
 * there is one profile, named after the process root when there is one.
 * shared.frames is indexed by frame id, so the stripped roots are listed
 * but never referenced: it keeps ids equal to the other formats'.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

/* One distinct stack, its roots stripped, and the profile it belongs to. */
struct ss_stack {
	uint32_t proc, thread;  /* root frame ids, or FG_NONE */
	uint32_t seq;           /* folded order, to keep it within a profile */
	uint32_t rank;          /* seq of its profile's first stack */
	uint32_t depth;
	size_t off;             /* into ss.pool */
	uint64_t count;
};

struct ss {
	const struct fg_profile *p;
	struct ss_stack *v;
	size_t n, alloc;
	uint32_t *pool;
	size_t npool, pool_alloc;
};

static int collect(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	struct ss *s = ctx;
	struct ss_stack e = { FG_NONE, FG_NONE, (uint32_t)s->n, 0, 0, s->npool, count };
	size_t i = 0;
	if (i < depth && fg_frame_is_root(fg_profile_frame(s->p, frames[i]), "process ")) {
		e.proc = frames[i++];
	}
	if (i < depth && fg_frame_is_root(fg_profile_frame(s->p, frames[i]), "thread ")) {
		e.thread = frames[i++];
	}
	e.depth = (uint32_t)(depth - i);
	/* A stack of roots alone adds nothing, and the pool may still be NULL. */
	if (e.depth) {
		SPY_GROW(s->pool, s->pool_alloc, s->npool + e.depth);
		memcpy(s->pool + s->npool, frames + i, e.depth * sizeof(*frames));
		s->npool += e.depth;
	}
	SPY_GROW(s->v, s->alloc, s->n + 1);
	s->v[s->n++] = e;
	return 0;
}

/* Stacks grouped by roots; profiles in the order of their first stack. */
static int by_rank(const void *a, const void *b)
{
	const struct ss_stack *x = a, *y = b;
	if (x->rank != y->rank) {
		return x->rank < y->rank ? -1 : 1;
	}
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_profile(const void *a, const void *b)
{
	const struct ss_stack *x = a, *y = b;
	if (x->proc != y->proc) {
		return x->proc < y->proc ? -1 : 1;
	}
	if (x->thread != y->thread) {
		return x->thread < y->thread ? -1 : 1;
	}
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A number of seconds or samples, exactly enough digits to read back. */
static void add_weight(struct spy_buf *b, uint64_t count, double rate)
{
	if (rate > 0) {
		spy_buf_addf(b, "%.17g", (double)count / rate);
	} else {
		spy_buf_addf(b, "%" PRIu64, count);
	}
}

/* Profile [lo, hi) of s->v, all with the same roots. */
static void write_profile(struct ss *s, size_t lo, size_t hi, double rate, struct spy_buf *b)
{
	const struct ss_stack *first = &s->v[lo];
	struct spy_buf name = SPY_BUF_INIT;
	if (first->proc != FG_NONE) {
		spy_buf_adds(&name, fg_profile_frame(s->p, first->proc)->func);
	}
	if (first->thread != FG_NONE) {
		if (name.len) {
			spy_buf_adds(&name, " / ");
		}
		spy_buf_adds(&name, fg_profile_frame(s->p, first->thread)->func);
	}
	uint64_t total = 0;
	for (size_t i = lo; i < hi; i++) {
		total += s->v[i].count;
	}
	spy_buf_adds(b, "{\"type\":\"sampled\",\"name\":");
	fg_json_string(b, name.len ? name.buf : "spy");
	spy_buf_addf(b, ",\"unit\":\"%s\",\"startValue\":0,\"endValue\":", rate > 0 ? "seconds" : "none");
	add_weight(b, total, rate);
	spy_buf_adds(b, ",\n\"samples\":[");
	for (size_t i = lo; i < hi; i++) {
		spy_buf_adds(b, i > lo ? ",[" : "[");
		/* Roots alone: no frames, and the pool may be NULL. */
		const uint32_t *ids = s->v[i].depth ? s->pool + s->v[i].off : NULL;
		for (uint32_t j = 0; j < s->v[i].depth; j++) {
			spy_buf_addf(b, j ? ",%" PRIu32 : "%" PRIu32, ids[j]);
		}
		spy_buf_addch(b, ']');
	}
	spy_buf_adds(b, "],\n\"weights\":[");
	for (size_t i = lo; i < hi; i++) {
		if (i > lo) {
			spy_buf_addch(b, ',');
		}
		add_weight(b, s->v[i].count, rate);
	}
	spy_buf_adds(b, "]}");
	spy_buf_release(&name);
}

int fg_profile_write_speedscope(const struct fg_profile *p, FILE *f, struct spy_err *err)
{
	struct ss s;
	memset(&s, 0, sizeof(s));
	s.p = p;
	fg_profile_foreach_stack(p, collect, &s);
	/*
	 * Group by roots, then order the groups by their first stack in folded
	 * order: frame ids depend on the order samples came in, the folded
	 * order does not, so the file is the same whatever that order was.
	 */
	if (s.n) {
		qsort(s.v, s.n, sizeof(*s.v), by_profile);
	}
	for (size_t i = 0; i < s.n; i++) {
		bool same = i && s.v[i].proc == s.v[i - 1].proc && s.v[i].thread == s.v[i - 1].thread;
		s.v[i].rank = same ? s.v[i - 1].rank : s.v[i].seq;
	}
	if (s.n) {
		qsort(s.v, s.n, sizeof(*s.v), by_rank);
	}

	const char *rate_s = fg_profile_meta_get(p, FG_META_RATE_HZ);
	double rate = rate_s ? strtod(rate_s, NULL) : 0;
	/* Anything but a plain positive rate (garbage, inf, nan) means samples. */
	if (!(rate > 0 && rate < 1e9)) {
		rate = 0;
	}

	struct spy_buf b = SPY_BUF_INIT, tmp = SPY_BUF_INIT;
	int rc = 0;
	spy_buf_adds(&b, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\n");
	const char *version = fg_profile_meta_get(p, FG_META_SPY_VERSION);
	spy_buf_adds(&b, "\"exporter\":");
	spy_buf_adds(&tmp, "spy");
	if (version) {
		spy_buf_addf(&tmp, " %s", version);
	}
	fg_json_string(&b, tmp.buf);
	spy_buf_adds(&b, ",\"name\":");
	const char *cmd = fg_profile_meta_get(p, FG_META_COMMAND);
	fg_json_string(&b, cmd && *cmd ? cmd : "spy profile");
	spy_buf_adds(&b, ",\"activeProfileIndex\":0,\n\"shared\":{\"frames\":[");
	size_t nframes = fg_profile_frame_count(p);
	for (uint32_t id = 0; id < nframes && !rc; id++) {
		const struct fg_frame *fr = fg_profile_frame(p, id);
		spy_buf_adds(&b, id ? ",\n{\"name\":" : "\n{\"name\":");
		fg_json_string(&b, fr->func);
		if (fr->file) {
			spy_buf_adds(&b, ",\"file\":");
			fg_json_string(&b, fr->file);
		}
		if (fr->line) {
			spy_buf_addf(&b, ",\"line\":%" PRIu32, fr->line);
		}
		spy_buf_addch(&b, '}');
		rc = fg_flush(&b, f, false, "speedscope profile", err);
	}
	spy_buf_adds(&b, "]},\n\"profiles\":[");
	if (s.n == 0) {
		/* speedscope wants at least one profile to open the file. */
		spy_buf_adds(&b, "{\"type\":\"sampled\",\"name\":\"spy\",\"unit\":\"none\","
			     "\"startValue\":0,\"endValue\":0,\"samples\":[],\"weights\":[]}");
	}
	for (size_t lo = 0; lo < s.n && !rc;) {
		size_t hi = lo + 1;
		while (hi < s.n && s.v[hi].proc == s.v[lo].proc && s.v[hi].thread == s.v[lo].thread) {
			hi++;
		}
		if (lo) {
			spy_buf_adds(&b, ",\n");
		}
		write_profile(&s, lo, hi, rate, &b);
		rc = fg_flush(&b, f, false, "speedscope profile", err);
		lo = hi;
	}
	spy_buf_adds(&b, "]}\n");
	if (!rc) {
		rc = fg_flush(&b, f, true, "speedscope profile", err);
	}
	spy_buf_release(&b);
	spy_buf_release(&tmp);
	free(s.v);
	free(s.pool);
	return rc;
}
