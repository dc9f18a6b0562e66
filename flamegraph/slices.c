/*
 * Time windows of a profile (record --slice) and the trend of each
 * function's share across them (report --trend): "which function gets
 * slower the longer the program runs".
 *
 * The decision a newcomer would question: a window stores (stack id,
 * count) pairs, not per-function numbers. Stacks are what the profile
 * already interns, so a sample costs one look-up in the current window
 * (a per-stack position array), and the windows can be written next to the
 * stacks they refer to and read back exactly; functions, and recursion
 * counted once, are worked out only when a trend is asked for. The other
 * choice a reader may question is the cap: past FG_MAX_SLICES windows
 * neighbours merge and the window doubles, rather than dropping samples or
 * growing without bound.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

/* Bytes of one metadata line's value before it continues in the next key. */
#define SLICE_LINE_MAX (FG_MAX_META_VALUE - 64)

struct slice_ent {
	uint32_t stack;
	uint64_t count;
};

struct window {
	struct slice_ent *v;
	size_t n, alloc;
};

struct fg_slices {
	double len_s;
	struct window *w;
	size_t nw, walloc;
	/* pos[stack] - 1: the stack's entry in window cur (0: none yet). */
	uint32_t *pos;
	size_t npos;
	size_t cur;
};

struct fg_slices *fg_slices_new(double slice_s)
{
	struct fg_slices *s = spy_xcalloc(1, sizeof(*s));
	s->len_s = slice_s > 0 ? slice_s : 1;
	s->cur = SIZE_MAX;
	return s;
}

void fg_slices_free(struct fg_slices *s)
{
	if (!s) {
		return;
	}
	for (size_t i = 0; i < s->nw; i++) {
		free(s->w[i].v);
	}
	free(s->w);
	free(s->pos);
	free(s);
}

size_t fg_slices_count(const struct fg_slices *s)
{
	return s->nw;
}

double fg_slices_len(const struct fg_slices *s)
{
	return s->len_s;
}

void fg_slices_each(const struct fg_slices *s, size_t wi, void (*fn)(void *ctx, uint32_t stack, uint64_t count),
		    void *ctx)
{
	if (wi >= s->nw) {
		return;
	}
	for (size_t i = 0; i < s->w[wi].n; i++) {
		fn(ctx, s->w[wi].v[i].stack, s->w[wi].v[i].count);
	}
}

static int cmp_ent(const void *a, const void *b)
{
	const struct slice_ent *x = a, *y = b;
	return x->stack == y->stack ? 0 : (x->stack < y->stack ? -1 : 1);
}

/* Sort a window's entries by stack and add up duplicates. */
static void squash(struct window *w)
{
	if (!w->n) {
		return; /* and w->v may be NULL, which qsort must not get */
	}
	qsort(w->v, w->n, sizeof(*w->v), cmp_ent);
	size_t k = 0;
	for (size_t i = 0; i < w->n; i++) {
		if (k && w->v[k - 1].stack == w->v[i].stack) {
			w->v[k - 1].count += w->v[i].count;
		} else {
			w->v[k++] = w->v[i];
		}
	}
	w->n = k;
}

/* Merge windows 2i and 2i+1 into i and double the window length. */
static void halve(struct fg_slices *s)
{
	size_t n = (s->nw + 1) / 2;
	for (size_t i = 0; i < n; i++) {
		struct window a = s->w[2 * i];
		if (2 * i + 1 < s->nw) {
			struct window *b = &s->w[2 * i + 1];
			SPY_GROW(a.v, a.alloc, a.n + b->n);
			/* An empty window has no array: memcpy from NULL is undefined. */
			if (b->n) {
				memcpy(a.v + a.n, b->v, b->n * sizeof(*b->v));
			}
			a.n += b->n;
			free(b->v);
			squash(&a);
		}
		s->w[i] = a;
	}
	s->nw = n;
	s->len_s *= 2;
	s->cur = SIZE_MAX;
}

/* Point pos[] at window wi's entries (clearing the old window's). */
static void select_window(struct fg_slices *s, size_t wi)
{
	if (s->cur < s->nw) {
		const struct window *o = &s->w[s->cur];
		for (size_t i = 0; i < o->n; i++) {
			s->pos[o->v[i].stack] = 0;
		}
	} else if (s->npos) {
		memset(s->pos, 0, s->npos * sizeof(*s->pos));
	}
	const struct window *w = &s->w[wi];
	for (size_t i = 0; i < w->n; i++) {
		s->pos[w->v[i].stack] = (uint32_t)i + 1;
	}
	s->cur = wi;
}

static void add_to(struct fg_slices *s, size_t wi, uint32_t stack, uint64_t count)
{
	if (stack >= s->npos) {
		size_t n = s->npos ? s->npos : 256;
		while (n <= stack) {
			n *= 2;
		}
		s->pos = spy_xrealloc(s->pos, n * sizeof(*s->pos));
		memset(s->pos + s->npos, 0, (n - s->npos) * sizeof(*s->pos));
		s->npos = n;
	}
	if (wi >= s->nw) {
		SPY_GROW(s->w, s->walloc, wi + 1);
		memset(s->w + s->nw, 0, (wi + 1 - s->nw) * sizeof(*s->w));
		s->nw = wi + 1;
	}
	if (wi != s->cur) {
		select_window(s, wi);
	}
	struct window *w = &s->w[wi];
	uint32_t at = s->pos[stack];
	if (at) {
		w->v[at - 1].count += count;
		return;
	}
	SPY_GROW(w->v, w->alloc, w->n + 1);
	w->v[w->n++] = (struct slice_ent){ stack, count };
	s->pos[stack] = (uint32_t)w->n;
}

void fg_slices_add(struct fg_slices *s, const struct fg_profile *p, double t, uint64_t count)
{
	uint32_t stack = p->last_stack;
	if (stack == FG_NONE || !count) {
		return;
	}
	/* NaN, negative or infinite times (a clock gone wrong) pin to 0: inf
	 * would halve for ever, and its cast is undefined. */
	if (!(t >= 0) || !(t < 1e12)) {
		t = 0;
	}
	while (t / s->len_s >= FG_MAX_SLICES) {
		halve(s);
	}
	add_to(s, (size_t)(t / s->len_s), stack, count);
}

/* ---- in a folded file ---------------------------------------------------- */

/* rank[stack index] = position of the stack among the written lines. */
static uint32_t *stack_ranks(const struct fg_profile *p)
{
	struct fg_order o;
	fg_order_init(&o, p);
	uint32_t *rank = spy_xmalloc((p->nstacks + 1) * sizeof(*rank));
	for (size_t i = 0; i < p->nstacks; i++) {
		rank[o.stack[i]] = (uint32_t)i;
	}
	fg_order_release(&o);
	return rank;
}

/* Remove every slice key; later entries shift down as keys go. */
void fg_slices_drop(struct fg_profile *p)
{
	for (size_t i = 0; i < fg_profile_meta_count(p);) {
		const char *key, *value;
		fg_profile_meta_at(p, i, &key, &value);
		if (!strncmp(key, "slice", 5)) {
			char *k = spy_xstrdup(key);
			fg_profile_meta_set(p, k, NULL);
			free(k);
		} else {
			i++;
		}
	}
}

/* Store one window's list under "slice-I", continuing in "slice-I.K". */
static void store_window(struct fg_profile *p, size_t i, const struct slice_ent *v, size_t n)
{
	struct spy_buf b = SPY_BUF_INIT;
	char key[FG_MAX_META_KEY + 1];
	size_t part = 0;
	for (size_t k = 0; k < n; k++) {
		spy_buf_addf(&b, "%s%" PRIu32 ":%" PRIu64, b.len ? " " : "", v[k].stack, v[k].count);
		if (b.len > SLICE_LINE_MAX || k + 1 == n) {
			if (part) {
				snprintf(key, sizeof(key), "slice-%zu.%zu", i, part);
			} else {
				snprintf(key, sizeof(key), "slice-%zu", i);
			}
			fg_profile_meta_set(p, key, b.buf);
			part++;
			spy_buf_reset(&b);
		}
	}
	spy_buf_release(&b);
}

void fg_slices_store(const struct fg_slices *s, struct fg_profile *p)
{
	fg_slices_drop(p);
	fg_profile_meta_setf(p, "slice-s", "%g", s->len_s);
	fg_profile_meta_setf(p, "slices", "%zu", s->nw);
	uint32_t *rank = stack_ranks(p);
	struct slice_ent *tmp = NULL;
	size_t alloc = 0;
	for (size_t i = 0; i < s->nw; i++) {
		const struct window *w = &s->w[i];
		size_t n = 0;
		SPY_GROW(tmp, alloc, w->n + 1);
		for (size_t k = 0; k < w->n; k++) {
			/* A stack of another profile would be a caller bug: skipped. */
			if (w->v[k].stack < p->nstacks) {
				tmp[n++] = (struct slice_ent){ rank[w->v[k].stack], w->v[k].count };
			}
		}
		/* In file order, so a profile writes the same bytes whatever
		 * order its samples came in. */
		qsort(tmp, n, sizeof(*tmp), cmp_ent);
		store_window(p, i, tmp, n);
	}
	free(tmp);
	free(rank);
}

/* Parse a decimal number of at most 20 digits into *out; false if not one. */
static bool parse_u64(const char **sp, uint64_t max, uint64_t *out)
{
	const char *s = *sp;
	uint64_t v = 0;
	size_t n = 0;
	while (*s >= '0' && *s <= '9') {
		if (v > (max - (uint64_t)(*s - '0')) / 10) {
			return false;
		}
		v = v * 10 + (uint64_t)(*s - '0');
		s++;
		n++;
	}
	*sp = s;
	*out = v;
	return n > 0;
}

/* Window index of a "slice-I" or "slice-I.K" key; false for other keys. */
static bool slice_key(const char *key, size_t *wi)
{
	if (strncmp(key, "slice-", 6)) {
		return false;
	}
	const char *s = key + 6;
	uint64_t i, part;
	if (!parse_u64(&s, FG_MAX_SLICES - 1, &i)) {
		return false;
	}
	if (*s == '.' && (s++, !parse_u64(&s, UINT32_MAX, &part))) {
		return false;
	}
	*wi = (size_t)i;
	return *s == '\0';
}

static int load_window(struct fg_slices *s, size_t wi, const char *value, const uint32_t *by_rank,
		       size_t nstacks, const char *where, struct spy_err *err)
{
	const char *v = value;
	while (*v) {
		uint64_t r, c;
		if (!parse_u64(&v, UINT32_MAX, &r) || *v++ != ':' || !parse_u64(&v, FG_MAX_COUNT, &c) ||
		    (*v && *v++ != ' ')) {
			return spy_err_set(err, SPY_EFORMAT, "%s: expected STACK:COUNT pairs", where);
		}
		if (r >= nstacks) {
			return spy_err_set(err, SPY_EFORMAT, "%s: stack %" PRIu64 " of %zu", where, r, nstacks);
		}
		if (c) {
			add_to(s, wi, by_rank[r], c);
		}
	}
	return 0;
}

int fg_slices_load(struct fg_slices **out, const struct fg_profile *p, const char *name,
		   struct spy_err *err)
{
	*out = NULL;
	const char *len = fg_profile_meta_get(p, "slice-s");
	if (!len) {
		return 0;
	}
	char *end;
	errno = 0;
	double l = strtod(len, &end);
	if (errno || end == len || *end || !(l > 0) || l > 1e9) {
		return spy_err_set(err, SPY_EFORMAT, "%s: # slice-s: not a positive number: %s", name, len);
	}
	struct fg_slices *s = fg_slices_new(l);
	struct fg_order o;
	fg_order_init(&o, p);
	struct spy_buf where = SPY_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < fg_profile_meta_count(p) && !rc; i++) {
		const char *key, *value;
		size_t wi;
		fg_profile_meta_at(p, i, &key, &value);
		if (!slice_key(key, &wi)) {
			continue;
		}
		spy_buf_reset(&where);
		spy_buf_addf(&where, "%s: # %s", name, key);
		rc = load_window(s, wi, value, o.stack, p->nstacks, where.buf, err);
	}
	spy_buf_release(&where);
	fg_order_release(&o);
	if (rc) {
		fg_slices_free(s);
		return rc;
	}
	/* Windows are added out of order (parts, any key order): tidy them. */
	for (size_t i = 0; i < s->nw; i++) {
		squash(&s->w[i]);
	}
	s->cur = SIZE_MAX;
	*out = s;
	return 0;
}

/* ---- the trend ----------------------------------------------------------- */

/*
 * The weighted least squares are kept as running means and co-moments
 * about them (West's weighted form of Welford's updates), not raw sums:
 * sw*sum(wxy) - sum(wx)*sum(wy) cancels two equal, large terms, and the
 * sign of what is left of a steady share depended on the machine (gcc
 * fuses the multiply-add on aarch64). About the mean, a steady share adds
 * exact zeros.
 */
struct func_fit {
	double my, cxy, cyy;   /* mean share; weighted co-moments with x and itself */
	double first, last;
	uint32_t mark;         /* 1 + last stack counted, recursion once */
	uint64_t in_window;    /* samples in the current window */
};

static int cmp_trend(const void *x, const void *y)
{
	const struct fg_trend_row *a = x, *b = y;
	if (a->slope != b->slope) {
		return a->slope > b->slope ? -1 : 1;
	}
	int c = strcmp(a->func, b->func);
	return c ? c : strcmp(a->file ? a->file : "", b->file ? b->file : "");
}

/*
 * Samples of each function in window w, and in fit[fs->n] those of the
 * stacks in_gc marks (NULL: none); returns the window's samples.
 */
static uint64_t window_counts(const struct window *w, const struct fg_profile *p,
			      const struct fg_funcs *fs, const bool *in_gc, struct func_fit *fit,
			      uint32_t *touched, size_t *ntouched)
{
	uint64_t total = 0;
	for (size_t i = 0; i < w->n; i++) {
		const struct fg_stack_ent *e = &p->stacks[w->v[i].stack];
		const uint32_t *ids = p->pool + e->off;
		total += w->v[i].count;
		if (in_gc && in_gc[w->v[i].stack]) {
			if (!fit[fs->n].in_window) {
				touched[(*ntouched)++] = (uint32_t)fs->n;
			}
			fit[fs->n].in_window += w->v[i].count;
		}
		for (uint32_t k = 0; k < e->depth; k++) {
			uint32_t f = fs->fmap[ids[k]];
			if (f == FG_NONE || fit[f].mark == w->v[i].stack + 1) {
				continue;
			}
			fit[f].mark = w->v[i].stack + 1;
			if (!fit[f].in_window) {
				touched[(*ntouched)++] = f;
			}
			fit[f].in_window += w->v[i].count;
		}
	}
	return total;
}

/*
 * Which stacks hold the collector's frame (record's <GC>), or NULL when the
 * profile has no [gc] row: neither sampled the collector's state (# gc:
 * sampled) nor holds such a frame.
 */
static bool *gc_stacks(const struct fg_profile *p)
{
	const char *gc = fg_profile_meta_get(p, FG_META_GC);
	bool sampled = gc && !strcmp(gc, "sampled"), any = false;
	bool *is_gc = spy_xcalloc(p->nframes + 1, sizeof(*is_gc));
	for (size_t f = 0; f < p->nframes; f++) {
		const struct fg_frame *fr = &p->frames[f];
		is_gc[f] = fr->kind == SPY_FRAME_SYNTHETIC && !strcmp(fr->func, FG_GC_FRAME);
		any |= is_gc[f];
	}
	bool *in_gc = NULL;
	if (sampled || any) {
		in_gc = spy_xcalloc(p->nstacks + 1, sizeof(*in_gc));
		for (size_t i = 0; i < p->nstacks && any; i++) {
			const struct fg_stack_ent *e = &p->stacks[i];
			for (uint32_t k = 0; k < e->depth && !in_gc[i]; k++) {
				in_gc[i] = is_gc[p->pool[e->off + k]];
			}
		}
	}
	free(is_gc);
	return in_gc;
}

void fg_trend_init(struct fg_trend *t, const struct fg_slices *s, const struct fg_profile *p,
		   size_t top)
{
	struct fg_funcs fs;
	fg_funcs_init(&fs, p);
	memset(t, 0, sizeof(*t));
	t->slice_s = s->len_s;
	/* Rows 0 .. fs.n - 1 are functions, row fs.n the collector's [gc]. */
	bool *in_gc = gc_stacks(p);
	size_t nrows = fs.n + (in_gc != NULL);
	struct func_fit *fit = spy_xcalloc(fs.n + 2, sizeof(*fit));
	uint32_t *touched = spy_xmalloc((fs.n + 2) * sizeof(*touched));
	bool *seen = spy_xcalloc(fs.n + 2, sizeof(*seen));
	/*
	 * Least squares weighted by each window's samples: the last window is
	 * usually cut short by the end of the recording, and a window of three
	 * samples must not weigh as much as one of three hundred.
	 */
	double n = 0, sw = 0, mx = 0, cxx = 0;
	/*
	 * First and last shares come from full windows: a recording that ends
	 * 30 ms into a new window leaves three samples there, and a function
	 * at 12% of every window would show last% 0. A window is full when it
	 * has at least half the samples of the fullest one.
	 */
	uint64_t most = 0;
	for (size_t wi = 0; wi < s->nw; wi++) {
		uint64_t sum = 0;
		for (size_t i = 0; i < s->w[wi].n; i++) {
			sum += s->w[wi].v[i].count;
		}
		most = sum > most ? sum : most;
	}
	bool had_full = false;
	for (size_t wi = 0; wi < s->nw; wi++) {
		size_t nt = 0;
		uint64_t total = window_counts(&s->w[wi], p, &fs, in_gc, fit, touched, &nt);
		for (size_t k = 0; k < nt; k++) {
			fit[touched[k]].mark = 0;
		}
		if (!total) {
			continue;
		}
		/* x is the window's index among non-empty ones: a pause in
		 * sampling (no Python thread running) is not a trend. */
		double x = n, w = (double)total;
		bool full = 2 * total >= most;
		sw += w;
		double dx = x - mx;
		mx += dx * (w / sw);
		cxx += w * dx * (x - mx);
		for (size_t f = 0; f < nrows; f++) {
			double y = 100.0 * (double)fit[f].in_window / w;
			if (full && !had_full) {
				fit[f].first = y;
			}
			if (full) {
				fit[f].last = y;
			}
			double dy = y - fit[f].my;
			fit[f].my += dy * (w / sw);
			fit[f].cxy += w * dx * (y - fit[f].my);
			fit[f].cyy += w * dy * (y - fit[f].my);
			seen[f] = seen[f] || fit[f].in_window;
			fit[f].in_window = 0;
		}
		had_full = had_full || full;
		n += 1;
		t->samples += total;
	}
	t->windows = (size_t)n;
	t->rows = spy_xmalloc((fs.n + 2) * sizeof(*t->rows));
	/* The variances and covariance scaled by sw, as the thresholds were set for. */
	double vx = sw * cxx;
	for (size_t f = 0; f < nrows; f++) {
		/* [gc] stays at 0 when the collector never ran: that is a finding too. */
		if (!seen[f] && f < fs.n) {
			continue;
		}
		const struct func_fit *ff = &fit[f];
		double cov = sw * ff->cxy, vy = sw * ff->cyy;
		struct fg_trend_row *r = &t->rows[t->nfuncs++];
		r->func = f < fs.n ? fs.func[f] : "[gc]";
		r->file = f < fs.n ? fs.file[f] : NULL;
		/* Tiny variances are rounding, not a trend. */
		r->slope = vx > 1e-9 ? cov / vx : 0;
		r->first_pct = ff->first;
		r->last_pct = ff->last;
		r->mean_pct = ff->my;
		/* r squared needs no square root (the module has no libm). */
		r->r2 = vx > 1e-9 && vy > 1e-9 ? cov * cov / (vx * vy) : 0;
	}
	qsort(t->rows, t->nfuncs, sizeof(*t->rows), cmp_trend);
	t->n = top && top < t->nfuncs ? top : t->nfuncs;
	free(seen);
	free(touched);
	free(fit);
	free(in_gc);
	fg_funcs_release(&fs);
}

void fg_trend_release(struct fg_trend *t)
{
	free(t->rows);
	memset(t, 0, sizeof(*t));
}

void fg_trend_render(const struct fg_trend *t, struct spy_buf *out)
{
	spy_buf_addf(out, "%zu windows of %g s, %" PRIu64 " samples; total share of each window, "
		     "slope in points per window, r2: how steadily (1: a straight line); ", t->windows, t->slice_s, t->samples);
	if (t->n < t->nfuncs) {
		spy_buf_addf(out, "top %zu of %zu functions\n", t->n, t->nfuncs);
	} else {
		spy_buf_addf(out, "%zu functions\n", t->nfuncs);
	}
	spy_buf_addf(out, "%8s %8s %8s %8s %5s  %s\n", "slope", "first%", "last%", "mean%", "r2",
		     "function (file)");
	for (size_t i = 0; i < t->n; i++) {
		const struct fg_trend_row *r = &t->rows[i];
		spy_buf_addf(out, "%+8.3f %8.2f %8.2f %8.2f %5.2f  ", r->slope, r->first_pct,
			     r->last_pct, r->mean_pct, r->r2);
		/* A row without a file is a resource ([gc]): its name alone. */
		struct fg_frame f = { r->func, r->file, 0,
				      r->file ? SPY_FRAME_PYTHON : SPY_FRAME_SYNTHETIC };
		fg_frame_format(&f, out);
		spy_buf_addch(out, '\n');
	}
}
