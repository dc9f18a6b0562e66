/*
 * The per-function table: for each (func, file) the samples it was running
 * in (self, ~tottime) and the samples it was anywhere on the stack (total,
 * ~cumtime), the numbers cProfile + pstats sorted by cumtime would give.
 *
 * The decision a newcomer would question: total is counted per distinct
 * stack, not per trie node. A function recursing three deep appears three
 * times on one stack but ran for that stack's samples once, so each stack
 * adds its count to a function at most once (a per-function "last stack
 * seen" mark makes that O(1)); summing trie nodes would count it thrice.
 * The cost is O(frames stored), the same as building the trie.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

struct func_acc {
	const char *func, *file;
	uint32_t line;    /* lowest nonzero line seen */
	uint32_t mark;    /* 1 + the last stack that added to total */
	uint64_t self, total;
	uint64_t kind[FG_KINDS];
};

struct func_index {
	struct func_acc *v;
	size_t n, alloc;
	struct spy_hmap index;  /* func_key -> id */
};

static uint64_t func_key(const char *func, const char *file, uint32_t line)
{
	uint64_t h = (uint64_t)(uintptr_t)func * 0x9e3779b97f4a7c15ULL;
	return ((h ^ (uint64_t)(uintptr_t)file) * 0xff51afd7ed558ccdULL) ^ line;
}

/* Function id of (func, file, line); both interned, so pointers identify them. line is 0 unless by line. */
static uint32_t func_id(struct func_index *fi, const char *func, const char *file, uint32_t line)
{
	uint64_t k = func_key(func, file, line);
	struct spy_hmap_it it;
	for (uint64_t v = spy_hmap_find(&fi->index, k, &it); v != SPY_HMAP_NONE;
	     v = spy_hmap_next(&fi->index, k, &it)) {
		if (fi->v[v].func == func && fi->v[v].file == file && fi->v[v].line == line) {
			return (uint32_t)v;
		}
	}
	SPY_GROW(fi->v, fi->alloc, fi->n + 1);
	uint32_t id = (uint32_t)fi->n++;
	fi->v[id] = (struct func_acc){ func, file, line, 0, 0, 0, { 0 } };
	spy_hmap_add(&fi->index, k, id);
	return id;
}

static double profile_rate(const struct fg_profile *p)
{
	const char *v = fg_profile_meta_get(p, FG_META_RATE_HZ);
	if (!v || !*v) {
		return 0;
	}
	char *end;
	double r = strtod(v, &end);
	if (*end || !isfinite(r) || r <= 0) {
		return 0;
	}
	return r;
}

static int cmp_str(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "");
}

static int cmp_desc(uint64_t a, uint64_t b)
{
	return a == b ? 0 : (a > b ? -1 : 1);
}

static int cmp_rows(const void *x, const void *y, void *arg)
{
	const struct fg_row *a = x, *b = y;
	enum fg_sort sort = *(const enum fg_sort *)arg;
	int c = 0;
	switch (sort) {
	case FG_SORT_CUMTIME:
		c = cmp_desc(a->total, b->total);
		break;
	case FG_SORT_TOTTIME:
		c = cmp_desc(a->self, b->self);
		break;
	case FG_SORT_NAME:
		c = cmp_str(a->func, b->func);
		if (!c) {
			c = cmp_str(a->file, b->file);
		}
		break;
	}
	if (!c) {
		c = cmp_desc(a->total, b->total);
	}
	if (!c) {
		c = cmp_desc(a->self, b->self);
	}
	if (!c) {
		c = cmp_str(a->func, b->func);
	}
	if (!c) {
		c = cmp_str(a->file, b->file);
	}
	if (!c) {
		c = a->line < b->line ? -1 : (a->line > b->line);
	}
	return c;
}

bool fg_sort_parse(const char *name, enum fg_sort *out)
{
	static const struct {
		const char *name;
		enum fg_sort sort;
	} names[] = {
		{ "cumtime", FG_SORT_CUMTIME },
		{ "tottime", FG_SORT_TOTTIME },
		{ "name", FG_SORT_NAME },
	};
	for (size_t i = 0; i < SPY_ARRAY_SIZE(names); i++) {
		if (!strcmp(name, names[i].name)) {
			*out = names[i].sort;
			return true;
		}
	}
	return false;
}

static const char *sort_name(enum fg_sort s)
{
	switch (s) {
	case FG_SORT_CUMTIME:
		return "cumtime";
	case FG_SORT_TOTTIME:
		return "tottime";
	case FG_SORT_NAME:
		return "name";
	}
	return "?";
}

/* Accumulate self, total and its kinds per function (see the top of the file), and t's kinds. */
static void accumulate(struct func_index *fi, const struct fg_profile *p, const uint32_t *fmap,
		       struct fg_table *t)
{
	for (size_t i = 0; i < p->nstacks; i++) {
		const struct fg_stack_ent *e = &p->stacks[i];
		const uint32_t *ids = p->pool + e->off;
		enum fg_kind kind = fg_stack_kind(p, ids, e->depth);
		t->kind[kind] += e->count;
		for (uint32_t k = 0; k < e->depth; k++) {
			uint32_t fid = fmap[ids[k]];
			if (fid == FG_NONE) {
				continue;
			}
			struct func_acc *fa = &fi->v[fid];
			if (fa->mark != i + 1) {
				fa->mark = (uint32_t)i + 1;
				fa->total += e->count;
				fa->kind[kind] += e->count;
			}
			if (k + 1 == e->depth) {
				fa->self += e->count;
			}
			uint32_t line = p->frames[ids[k]].line;
			if (line && (!fa->line || line < fa->line)) {
				fa->line = line;
			}
		}
	}
}

/*
 * Index p's functions (by_line: their lines) in fi; returns frame id ->
 * function id (FG_NONE: synthetic).
 */
static uint32_t *map_functions(struct func_index *fi, const struct fg_profile *p, bool by_line)
{
	memset(fi, 0, sizeof(*fi));
	spy_hmap_reserve(&fi->index, p->nframes);
	uint32_t *fmap = spy_xmalloc((p->nframes + 1) * sizeof(*fmap));
	for (size_t f = 0; f < p->nframes; f++) {
		const struct fg_frame *fr = &p->frames[f];
		fmap[f] = fr->kind == SPY_FRAME_SYNTHETIC ? FG_NONE
			  : func_id(fi, fr->func, fr->file, by_line ? fr->line : 0);
	}
	return fmap;
}

void fg_funcs_init(struct fg_funcs *fs, const struct fg_profile *p)
{
	struct func_index fi;
	fs->fmap = map_functions(&fi, p, false);
	fs->n = fi.n;
	fs->func = spy_xmalloc((fi.n + 1) * sizeof(*fs->func));
	fs->file = spy_xmalloc((fi.n + 1) * sizeof(*fs->file));
	for (size_t i = 0; i < fi.n; i++) {
		fs->func[i] = fi.v[i].func;
		fs->file[i] = fi.v[i].file;
	}
	spy_hmap_release(&fi.index);
	free(fi.v);
}

void fg_funcs_release(struct fg_funcs *fs)
{
	free(fs->fmap);
	free(fs->func);
	free(fs->file);
	memset(fs, 0, sizeof(*fs));
}

void fg_table_init(struct fg_table *t, const struct fg_profile *p, const struct fg_table_opts *o)
{
	struct fg_table_opts dflt = FG_TABLE_OPTS_INIT;
	if (!o) {
		o = &dflt;
	}
	memset(t, 0, sizeof(*t));
	t->sort = o->sort;
	t->samples = p->samples;
	t->rate_hz = o->rate_hz > 0 ? o->rate_hz : profile_rate(p);

	struct func_index fi;
	uint32_t *fmap = map_functions(&fi, p, o->by_line);
	accumulate(&fi, p, fmap, t);
	for (int k = 0; k < FG_KINDS; k++) {
		t->kind_pct[k] = t->samples ? 100.0 * (double)t->kind[k] / (double)t->samples : 0;
	}

	t->rows = spy_xmalloc((fi.n + 1) * sizeof(*t->rows));
	for (size_t i = 0; i < fi.n; i++) {
		const struct func_acc *fa = &fi.v[i];
		if (!fa->total) {
			continue; /* interned but never sampled */
		}
		struct fg_row *r = &t->rows[t->nfuncs++];
		r->func = fa->func;
		r->file = fa->file;
		r->line = fa->line;
		r->self = fa->self;
		r->total = fa->total;
		r->self_pct = t->samples ? 100.0 * (double)fa->self / (double)t->samples : 0;
		r->total_pct = t->samples ? 100.0 * (double)fa->total / (double)t->samples : 0;
		r->tottime = t->rate_hz > 0 ? (double)fa->self / t->rate_hz : 0;
		r->cumtime = t->rate_hz > 0 ? (double)fa->total / t->rate_hz : 0;
		for (int k = 0; k < FG_KINDS; k++) {
			r->kind[k] = fa->kind[k];
			r->kind_pct[k] = 100.0 * (double)fa->kind[k] / (double)fa->total;
		}
	}
	enum fg_sort sort = o->sort;
	qsort_r(t->rows, t->nfuncs, sizeof(*t->rows), cmp_rows, &sort);
	t->n = o->top && o->top < t->nfuncs ? o->top : t->nfuncs;

	free(fmap);
	spy_hmap_release(&fi.index);
	free(fi.v);
}

void fg_table_release(struct fg_table *t)
{
	free(t->rows);
	memset(t, 0, sizeof(*t));
}

/* ---- rendering ----------------------------------------------------------- */

enum { COL_TOTAL_PCT, COL_SELF_PCT, COL_CUMTIME, COL_TOTTIME, COL_PYTHON, COL_NATIVE, COL_IDLE,
       NCOLS };

static const char *const col_names[NCOLS] = { "total%", "self%", "cumtime", "tottime",
					      "python%", "native%", "idle%" };

const char *const fg_kind_names[FG_KINDS] = { "python", "native", "idle" };

static void cell(char *dst, size_t size, int col, const struct fg_row *r, bool have_rate)
{
	switch (col) {
	case COL_TOTAL_PCT:
		snprintf(dst, size, "%.2f", r->total_pct);
		break;
	case COL_SELF_PCT:
		snprintf(dst, size, "%.2f", r->self_pct);
		break;
	case COL_CUMTIME:
	case COL_TOTTIME:
		if (have_rate) {
			snprintf(dst, size, "%.3f", col == COL_CUMTIME ? r->cumtime : r->tottime);
		} else {
			snprintf(dst, size, "-");
		}
		break;
	case COL_PYTHON:
	case COL_NATIVE:
	case COL_IDLE:
		snprintf(dst, size, "%.1f", r->kind_pct[col - COL_PYTHON]);
		break;
	}
}

static void pad_left(struct spy_buf *out, const char *s, size_t width)
{
	size_t n = strlen(s);
	spy_buf_add(out, "  ", 2);
	for (; n < width; n++) {
		spy_buf_addch(out, ' ');
	}
	spy_buf_adds(out, s);
}

void fg_table_render(const struct fg_table *t, struct spy_buf *out)
{
	bool have_rate = t->rate_hz > 0;
	char c[64];
	size_t width[NCOLS];

	spy_buf_addf(out, "%" PRIu64 " samples", t->samples);
	if (have_rate) {
		spy_buf_addf(out, " (~%.2f s at %g Hz)", (double)t->samples / t->rate_hz, t->rate_hz);
	}
	spy_buf_addf(out, ", sorted by %s, ", sort_name(t->sort));
	if (t->n < t->nfuncs) {
		spy_buf_addf(out, "top %zu of %zu functions\n", t->n, t->nfuncs);
	} else {
		spy_buf_addf(out, "%zu functions\n", t->nfuncs);
	}
	/* The whole profile's split: the one line a reader wants first (see fg_kind). */
	spy_buf_addf(out, "by kind: %.1f%% python, %.1f%% native, %.1f%% idle\n",
		     t->kind_pct[FG_KIND_PYTHON], t->kind_pct[FG_KIND_NATIVE], t->kind_pct[FG_KIND_IDLE]);

	for (int k = 0; k < NCOLS; k++) {
		width[k] = strlen(col_names[k]);
		for (size_t i = 0; i < t->n; i++) {
			cell(c, sizeof(c), k, &t->rows[i], have_rate);
			size_t n = strlen(c);
			width[k] = n > width[k] ? n : width[k];
		}
	}
	for (int k = 0; k < NCOLS; k++) {
		pad_left(out, col_names[k], width[k]);
	}
	spy_buf_adds(out, "  function (file:line)\n");
	for (size_t i = 0; i < t->n; i++) {
		const struct fg_row *r = &t->rows[i];
		for (int k = 0; k < NCOLS; k++) {
			cell(c, sizeof(c), k, r, have_rate);
			pad_left(out, c, width[k]);
		}
		spy_buf_add(out, "  ", 2);
		struct fg_frame f = { r->func, r->file, r->line, SPY_FRAME_PYTHON };
		fg_frame_format(&f, out);
		spy_buf_addch(out, '\n');
	}
}
