/*
 * The lines view (-f lines): line_profiler's per-line listing, sampled.
 * For each of the top functions (by the table's order, tottime by
 * default), its header with self and total, then its lines: each sampled
 * line and up to `context` lines around it, plus the `def` line when the
 * source kept shows where it is, with the line's self and total samples
 * and shares of all samples beside its text.
 *
 * The decision a newcomer would question: the figures come from the
 * by-line table (fg_table with by_line), the same counting as the table's
 * rows, so a line's total counts a stack once however deep the recursion
 * and the view agrees with `spy top --lines`. A line without kept source
 * (a profile recorded without it, an unreadable file, a line past the
 * store's budget) still gets its figures; only the text is missing, and
 * the function's header says so.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/term.h"
#include "common/util.h"
#include "flamegraph/internal.h"

struct line_fig {
	uint32_t line;
	uint64_t self, total;
};

static int by_line(const void *a, const void *b)
{
	const struct line_fig *x = a, *y = b;
	return x->line < y->line ? -1 : x->line > y->line;
}

struct store_ctx {
	const struct fg_profile *p;
	const char *file;
};

static const char *store_line(void *ctx, uint32_t line, size_t *len)
{
	const struct store_ctx *c = ctx;
	const char *t = fg_profile_source(c->p, c->file, line);
	if (t) {
		*len = strlen(t);
	}
	return t;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static void add_pct(struct spy_buf *out, uint64_t n, uint64_t of)
{
	if (!n || !of) {
		spy_buf_addf(out, "%8s", "");
		return;
	}
	spy_buf_addf(out, "%7.2f%%", 100.0 * (double)n / (double)of);
}

static void add_count(struct spy_buf *out, uint64_t n, int width)
{
	if (!n) {
		spy_buf_addf(out, "%*s", width, "");
		return;
	}
	spy_buf_addf(out, "%*" PRIu64, width, n);
}

/* Whether the profile's "withheld" metadata names file (as a JSON string). */
static bool withheld(const struct fg_profile *p, const char *file)
{
	const char *w = fg_profile_meta_get(p, FG_META_WITHHELD);
	if (!w) {
		return false;
	}
	struct spy_buf q = SPY_BUF_INIT;
	spy_json_string(&q, file);
	bool found = strstr(w, q.buf) != NULL;
	spy_buf_release(&q);
	return found;
}

static void render_line(struct spy_buf *out, const struct fg_table *t, uint32_t line,
			const struct line_fig *fig, int width, const char *text)
{
	spy_buf_addf(out, "%8" PRIu32 "  ", line);
	add_count(out, fig ? fig->self : 0, width);
	spy_buf_addch(out, ' ');
	add_pct(out, fig ? fig->self : 0, t->samples);
	spy_buf_adds(out, "  ");
	add_count(out, fig ? fig->total : 0, width);
	spy_buf_addch(out, ' ');
	add_pct(out, fig ? fig->total : 0, t->samples);
	if (text) {
		spy_buf_adds(out, "  ");
		/* Kept text is escaped already; escaping again changes nothing and
		 * guards a store filled by a caller that skipped it. */
		spy_term_escape(out, text, strlen(text), FG_MAX_SOURCE_TEXT, NULL);
	}
	/* Blank figures and no text leave blanks: no trailing ones. */
	while (out->len && out->buf[out->len - 1] == ' ') {
		out->buf[--out->len] = '\0';
	}
	spy_buf_addch(out, '\n');
}

static void render_func(struct spy_buf *out, const struct fg_profile *p, const struct fg_table *ft,
			const struct fg_row *fr, const struct fg_table *lt, unsigned context)
{
	/* This function's sampled lines, by number. */
	struct line_fig *v = NULL;
	size_t n = 0, alloc = 0;
	uint64_t maxc = 1;
	for (size_t i = 0; i < lt->n; i++) {
		const struct fg_row *r = &lt->rows[i];
		if (r->func != fr->func || r->file != fr->file || !r->line) {
			continue;
		}
		SPY_GROW(v, alloc, n + 1);
		v[n++] = (struct line_fig){ r->line, r->self, r->total };
		if (r->total > maxc) {
			maxc = r->total;
		}
	}
	qsort(v, n, sizeof(*v), by_line);
	int width = 5;
	for (uint64_t m = maxc; m >= 100000; m /= 10) {
		width++;
	}

	struct store_ctx sc = { p, fr->file };
	size_t known = 0;
	for (size_t i = 0; i < n; i++) {
		known += fg_profile_source(p, fr->file, v[i].line) != NULL;
	}
	uint32_t def = n && known ? fg_source_def_line(fr->func, v[0].line, store_line, &sc) : 0;

	fg_escape(out, fr->func);
	spy_buf_adds(out, " (");
	fg_escape(out, fr->file);
	spy_buf_addf(out, "): self %" PRIu64 " (%.2f%%), total %" PRIu64 " (%.2f%%)", fr->self,
		     fr->self_pct, fr->total, fr->total_pct);
	if (ft->rate_hz > 0) {
		spy_buf_addf(out, ", tottime %.2f s, cumtime %.2f s", fr->tottime, fr->cumtime);
	}
	spy_buf_addch(out, '\n');
	if (fr->file[0] == '<') {
		spy_buf_adds(out, "  (no source: the code is not from a file)\n");
	} else if (!known && withheld(p, fr->file)) {
		spy_buf_adds(out, "  (source withheld: the program could not read this file)\n");
	} else if (!known) {
		spy_buf_adds(out, "  (source unavailable: not kept in the profile)\n");
	} else if (known < n) {
		spy_buf_addf(out, "  (source of %zu of its %zu sampled lines unavailable)\n", n - known, n);
	}
	spy_buf_addf(out, "%8s  %*s %8s  %*s %8s%s\n", "line", width, "self", "self%", width, "total",
		     "total%", known ? "  source" : "");

	/*
	 * The lines shown, in order: the def, each sampled line, and the
	 * context lines around it that the store has; "..." where lines are
	 * skipped.
	 */
	size_t span = 2 * (size_t)context + 1;
	uint32_t *show = spy_xmalloc((n * span + 1) * sizeof(*show));
	size_t ns = 0;
	if (def) {
		show[ns++] = def;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t lo = v[i].line > context ? v[i].line - context : 1;
		for (uint32_t l = lo; l - lo < span && l >= lo; l++) {
			if (l == v[i].line || fg_profile_source(p, fr->file, l)) {
				show[ns++] = l;
			}
		}
	}
	qsort(show, ns, sizeof(*show), cmp_u32);
	size_t k = 0;
	for (size_t i = 0; i < ns; i++) {
		if (i && show[i] == show[i - 1]) {
			continue;
		}
		if (i && show[i] > show[i - 1] + 1) {
			spy_buf_adds(out, "     ...\n");
		}
		while (k < n && v[k].line < show[i]) {
			k++;
		}
		const struct line_fig *fig = k < n && v[k].line == show[i] ? &v[k] : NULL;
		render_line(out, ft, show[i], fig, width, fg_profile_source(p, fr->file, show[i]));
	}
	free(show);
	spy_buf_addch(out, '\n');
	free(v);
}

void fg_lines_render(const struct fg_profile *p, const struct fg_lines_opts *o, struct spy_buf *out)
{
	struct fg_lines_opts d = FG_LINES_OPTS_INIT;
	if (!o) {
		o = &d;
	}
	size_t top = o->top ? o->top : FG_LINES_TOP;
	struct fg_table_opts to = FG_TABLE_OPTS_INIT;
	to.sort = o->sort;
	struct fg_table ft, lt;
	fg_table_init(&ft, p, &to);
	to.by_line = true;
	to.sort = FG_SORT_CUMTIME;
	fg_table_init(&lt, p, &to);

	size_t shown = 0, with_lines = 0;
	for (size_t i = 0; i < ft.n; i++) {
		with_lines += ft.rows[i].line != 0;
	}
	spy_buf_addf(out, "spy lines: %" PRIu64 " samples; ", ft.samples);
	if (!with_lines) {
		spy_buf_adds(out, "no function has line numbers (recorded with -F, or native frames only)\n");
	} else {
		spy_buf_addf(out, "the first %zu of %zu functions by %s; source %s\n",
			     top < with_lines ? top : with_lines, with_lines,
			     o->sort == FG_SORT_CUMTIME ? "total samples (cumtime)" :
			     o->sort == FG_SORT_NAME ? "name" : "self samples (tottime)",
			     fg_profile_source_count(p) ? "kept at record time" : "not in this profile");
		spy_buf_addch(out, '\n');
	}
	const char *w = fg_profile_meta_get(p, FG_META_WITHHELD);
	if (w) {
		spy_buf_addf(out, "withheld: %s\n\n", w);
	}
	for (size_t i = 0; i < ft.n && shown < top; i++) {
		if (!ft.rows[i].line) {
			continue;  /* native and -F rows have no lines to show */
		}
		/* More context than the store keeps would show nothing more. */
		render_func(out, p, &ft, &ft.rows[i], &lt,
			    o->context < FG_SOURCE_CONTEXT ? o->context : FG_SOURCE_CONTEXT);
		shown++;
	}
	fg_table_release(&ft);
	fg_table_release(&lt);
}
