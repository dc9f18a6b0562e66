/*
 * The HTML report (-f html): one self-contained page holding the flame
 * graph (flame and icicle, search, zoom, a thread filter) beside the
 * per-function table (sortable, with the python/native/idle split; a row
 * click highlights the function in the graph), the hot functions' source
 * with a per-line heat column, and, for a profile with windows (--slice),
 * resources, GC and the rising functions over time as small charts.
 *
 * The decision a newcomer would question: the page carries the profile's
 * distinct stacks, not the pruned trie the SVG carries. The thread filter
 * and the table's row highlight need the whole profile; stacks written in
 * the folded order share their prefix with the previous one, so each is
 * coded as (frames shared, new frames, the new frame ids, count), which
 * costs about what the trie's nodes would, and the script rebuilds the
 * trie in one pass (for 50k stacks, milliseconds; bench/fg-html).
 *
 * Target strings are hostile, and reach the page in two contexts, each
 * with one escaper writing pure ASCII: html_text (the title, as text) and
 * html_json_string (everything else, in a JSON block inside
 * <script type="application/json">: '<', '>', '&' and every non-ASCII code
 * point as \u escapes, so neither "</script" nor "<!--" can appear and
 * U+2028/U+2029 never reach a parser raw). The script shows strings only
 * through textContent. A Content-Security-Policy in the page forbids every
 * request: it opens from file:// and nothing leaves it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/hashmap.h"
#include "common/util.h"
#include "flamegraph/internal.h"

/* Trend rows charted, at most: the steepest rises. */
#define HTML_TREND_ROWS 6
/* Source lines either side of a sampled line sent to the page (the store keeps FG_SOURCE_CONTEXT). */
#define HTML_SRC_CONTEXT 3

struct html {
	const struct fg_profile *p;
	FILE *f;
	struct spy_buf out;
	struct spy_err *err;
	int rc;
	struct spy_hmap sm;    /* a string's address -> its index in strv */
	const char **strv;
	size_t nstrs, strs_alloc;
	struct spy_buf body;   /* the data's arrays, before the string table they index */
	struct spy_buf errors; /* the errors metadata in words (fg_errors_words) */
};

/* ---- escaping ------------------------------------------------------------ */

void fg_html_text(struct spy_buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t n = strlen((const char *)s);
	while (n) {
		uint32_t cp;
		size_t used = spy_utf8_decode(s, n, &cp);
		s += used;
		n -= used;
		switch (cp) {
		case '&': spy_buf_adds(b, "&amp;"); break;
		case '<': spy_buf_adds(b, "&lt;"); break;
		case '>': spy_buf_adds(b, "&gt;"); break;
		case '"': spy_buf_adds(b, "&quot;"); break;
		case '\'': spy_buf_adds(b, "&#39;"); break;
		default:
			if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) {
				spy_buf_addch(b, '?');
			} else if (cp < 0x80) {
				spy_buf_addch(b, (char)cp);
			} else {
				spy_buf_addf(b, "&#x%" PRIX32 ";", cp);
			}
		}
	}
}

void fg_html_json_string(struct spy_buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t n = strlen((const char *)s);
	spy_buf_addch(b, '"');
	while (n) {
		uint32_t cp;
		size_t used = spy_utf8_decode(s, n, &cp);
		s += used;
		n -= used;
		if (cp == '"' || cp == '\\') {
			spy_buf_addch(b, '\\');
			spy_buf_addch(b, (char)cp);
		} else if (cp >= 0x20 && cp < 0x7f && cp != '<' && cp != '>' && cp != '&') {
			spy_buf_addch(b, (char)cp);
		} else if (cp < 0x10000) {
			spy_buf_addf(b, "\\u%04" PRIx32, cp);
		} else {
			cp -= 0x10000;
			spy_buf_addf(b, "\\u%04" PRIx32 "\\u%04" PRIx32, 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
		}
	}
	spy_buf_addch(b, '"');
}

/* ---- the string table ---------------------------------------------------- */

/*
 * The index of s (compared by pointer: interned, or a constant) in S; -1 for
 * NULL. The first calls make S's order, so each call is a statement of its
 * own: the order a function's arguments are evaluated in is unspecified
 * (gcc takes them right to left on x86-64, left to right on aarch64).
 */
static int64_t str_index(struct html *h, const char *s)
{
	if (!s) {
		return -1;
	}
	uint64_t key = (uint64_t)(uintptr_t)s;
	uint64_t i = spy_hmap_get(&h->sm, key);
	if (i != SPY_HMAP_NONE) {
		return (int64_t)i;
	}
	spy_hmap_put(&h->sm, key, h->nstrs);
	SPY_GROW(h->strv, h->strs_alloc, h->nstrs + 1);
	h->strv[h->nstrs] = s;
	return (int64_t)h->nstrs++;
}

/* ---- the data ------------------------------------------------------------ */

static void sep(struct spy_buf *b, size_t i)
{
	if (i) {
		spy_buf_adds(b, i % 32 ? "," : ",\n");
	}
}

static void emit_frames(struct html *h)
{
	struct spy_buf *b = &h->body;
	struct spy_buf pal = SPY_BUF_INIT;
	uint32_t *cols = NULL;
	size_t ncols = 0, cols_alloc = 0;
	size_t nf = fg_profile_frame_count(h->p);
	spy_buf_adds(b, ",\"F\":[");
	for (size_t i = 0; i < nf; i++) {
		const struct fg_frame *fr = fg_profile_frame(h->p, (uint32_t)i);
		int cls;
		uint32_t rgb = fg_svg_frame_colour(fr, &cls), c = 0;
		/* Colours come from files: few, so a linear look-up is cheap enough. */
		while (c < ncols && cols[c] != rgb) {
			c++;
		}
		if (c == ncols) {
			SPY_GROW(cols, cols_alloc, ncols + 1);
			cols[ncols++] = rgb;
			spy_buf_addf(&pal, "%s\"#%06" PRIx32 "\"", c ? "," : "", rgb);
		}
		sep(b, i);
		int64_t fn = str_index(h, fr->func);
		int64_t fl = str_index(h, fr->file);
		spy_buf_addf(b, "%" PRId64 ",%" PRId64 ",%" PRIu32 ",%d,%" PRIu32, fn, fl, fr->line, cls, c);
	}
	spy_buf_adds(b, "],\"P\":[");
	spy_buf_add(b, pal.buf, pal.len);
	spy_buf_adds(b, "]");
	spy_buf_release(&pal);
	free(cols);
}

/* T: the stacks in folded order, each (shared, new, ids..., count); sets rank[stack]. */
static void emit_stacks(struct html *h, const struct fg_order *o, uint32_t *rank)
{
	const struct fg_profile *p = h->p;
	struct spy_buf *b = &h->body;
	const uint32_t *prev = NULL;
	uint32_t nprev = 0;
	spy_buf_adds(b, ",\"T\":[");
	for (size_t k = 0; k < p->nstacks; k++) {
		const struct fg_stack_ent *s = &p->stacks[o->stack[k]];
		const uint32_t *ids = p->pool + s->off;
		uint32_t c = 0;
		rank[o->stack[k]] = (uint32_t)k;
		while (c < nprev && c < s->depth && prev[c] == ids[c]) {
			c++;
		}
		spy_buf_addf(b, "%s%" PRIu32 ",%" PRIu32, k ? (k % 16 ? "," : ",\n") : "", c, s->depth - c);
		for (uint32_t d = c; d < s->depth; d++) {
			spy_buf_addf(b, ",%" PRIu32, ids[d]);
		}
		spy_buf_addf(b, ",%" PRIu64, s->count);
		prev = ids;
		nprev = s->depth;
	}
	spy_buf_adds(b, "]");
}

static void emit_table(struct html *h)
{
	struct spy_buf *b = &h->body;
	struct fg_table t;
	fg_table_init(&t, h->p, NULL);
	spy_buf_addf(b, ",\"N\":%" PRIu64 ",\"K\":[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "],\"R\":[", t.samples,
		     t.kind[FG_KIND_PYTHON], t.kind[FG_KIND_NATIVE], t.kind[FG_KIND_IDLE]);
	for (size_t i = 0; i < t.n; i++) {
		const struct fg_row *r = &t.rows[i];
		sep(b, i);
		int64_t fn = str_index(h, r->func);
		int64_t fl = str_index(h, r->file);
		spy_buf_addf(b, "%" PRId64 ",%" PRId64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64,
			     fn, fl, r->self, r->total,
			     r->kind[FG_KIND_PYTHON], r->kind[FG_KIND_NATIVE], r->kind[FG_KIND_IDLE]);
	}
	spy_buf_adds(b, "]");
	fg_table_release(&t);
}

struct src_line {
	const char *file;
	uint32_t line;
};

static int cmp_src(const void *x, const void *y)
{
	const struct src_line *a = x, *b = y;
	if (a->file != b->file) {
		return (uintptr_t)a->file < (uintptr_t)b->file ? -1 : 1;
	}
	return a->line < b->line ? -1 : a->line > b->line;
}

/* L: (file, line, text) of the kept lines around every sampled Python line. */
static void emit_source(struct html *h)
{
	const struct fg_profile *p = h->p;
	struct spy_buf *b = &h->body;
	struct src_line *v = NULL;
	size_t n = 0, alloc = 0, nf = fg_profile_frame_count(p);
	spy_buf_adds(b, ",\"L\":[");
	for (size_t i = 0; i < nf && fg_profile_source_count(p); i++) {
		const struct fg_frame *fr = fg_profile_frame(p, (uint32_t)i);
		if (fr->kind != SPY_FRAME_PYTHON || !fr->file || !fr->line) {
			continue;
		}
		uint32_t lo = fr->line > HTML_SRC_CONTEXT ? fr->line - HTML_SRC_CONTEXT : 1;
		uint32_t hi = fr->line <= UINT32_MAX - HTML_SRC_CONTEXT ? fr->line + HTML_SRC_CONTEXT : UINT32_MAX;
		for (uint32_t l = lo; l >= lo && l <= hi; l++) {
			if (fg_profile_source(p, fr->file, l)) {
				SPY_GROW(v, alloc, n + 1);
				v[n++] = (struct src_line){ fr->file, l };
			}
		}
	}
	if (n) {
		qsort(v, n, sizeof(*v), cmp_src);
	}
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && !cmp_src(&v[i], &v[i - 1])) {
			continue;
		}
		sep(b, out++);
		int64_t fl = str_index(h, v[i].file);
		int64_t src = str_index(h, fg_profile_source(p, v[i].file, v[i].line));
		spy_buf_addf(b, "%" PRId64 ",%" PRIu32 ",%" PRId64, fl, v[i].line, src);
	}
	spy_buf_adds(b, "]");
	free(v);
}

/* M: the metadata as (key, value) pairs, but the windows, readings and source lines the views show. */
static void emit_meta(struct html *h)
{
	struct spy_buf *b = &h->body;
	size_t out = 0;
	fg_errors_words(h->p, &h->errors);
	spy_buf_adds(b, ",\"M\":[");
	for (size_t i = 0; i < fg_profile_meta_count(h->p); i++) {
		const char *k, *v;
		fg_profile_meta_at(h->p, i, &k, &v);
		if (!strncmp(k, "slice", 5) || !strncmp(k, "res-", 4) || !strcmp(k, "resources") ||
		    !strncmp(k, "source-", 7)) {
			continue;
		}
		if (!strcmp(k, FG_META_ERRORS) && h->errors.len) {
			v = h->errors.buf;
		}
		sep(b, out++);
		/* Keys and values are copies, not interned: each its own string. */
		int64_t ki = str_index(h, k);
		spy_buf_addf(b, "%" PRId64 ",%" PRId64, ki, str_index(h, v));
	}
	spy_buf_adds(b, "]");
}

struct win_ctx {
	struct spy_buf *b;
	const uint32_t *rank;
	size_t n;
};

static void win_entry(void *ctx, uint32_t stack, uint64_t count)
{
	struct win_ctx *w = ctx;
	spy_buf_addf(w->b, "%s%" PRIu32 ",%" PRIu64, w->n++ ? "," : "", w->rank[stack], count);
}

/* W (windows: their length, per window the stacks' counts, the rising functions) and RS (readings). */
static void emit_windows(struct html *h, const uint32_t *rank)
{
	struct spy_buf *b = &h->body;
	struct spy_err ignored = SPY_ERR_INIT;
	struct fg_slices *s = NULL;
	if (fg_slices_load(&s, h->p, "profile", &ignored) == 0 && s) {
		spy_buf_addf(b, ",\"W\":{\"s\":%.6g,\"w\":[", fg_slices_len(s));
		for (size_t i = 0; i < fg_slices_count(s); i++) {
			struct win_ctx w = { b, rank, 0 };
			spy_buf_adds(b, i ? ",\n[" : "[");
			fg_slices_each(s, i, win_entry, &w);
			spy_buf_adds(b, "]");
		}
		spy_buf_adds(b, "],\"t\":[");
		struct fg_trend t;
		fg_trend_init(&t, s, h->p, 0);
		size_t out = 0;
		for (size_t i = 0; i < t.n && out < HTML_TREND_ROWS; i++) {
			const struct fg_trend_row *r = &t.rows[i];
			if (!r->file || !(r->slope > 0)) {
				continue;
			}
			int64_t fn = str_index(h, r->func);
			int64_t fl = str_index(h, r->file);
			spy_buf_addf(b, "%s[%" PRId64 ",%" PRId64 ",%.4f,%.4f,%.4f]", out++ ? "," : "", fn, fl,
				     r->slope, r->first_pct, r->last_pct);
		}
		spy_buf_adds(b, "]}");
		fg_trend_release(&t);
		fg_slices_free(s);
	}
	struct fg_resources *r = NULL;
	if (fg_resources_load(&r, h->p, "profile", &ignored) == 0 && r) {
		spy_buf_adds(b, ",\"RS\":[");
		for (size_t i = 0; i < fg_resources_count(r); i++) {
			const struct fg_res_point *pt = fg_resources_at(r, i);
			const uint64_t v[4] = { pt->user_ns, pt->sys_ns, pt->rss, pt->threads };
			spy_buf_addf(b, "%s[%.3f", i ? (i % 8 ? "," : ",\n") : "", pt->t);
			for (int k = 0; k < 4; k++) {
				if (v[k] == FG_RES_UNKNOWN) {
					spy_buf_adds(b, ",null");
				} else {
					spy_buf_addf(b, ",%" PRIu64, v[k]);
				}
			}
			spy_buf_adds(b, "]");
		}
		spy_buf_adds(b, "]");
		fg_resources_free(r);
	}
}

/* ---- the page ------------------------------------------------------------ */

static void put(struct html *h, bool force)
{
	if (!h->rc) {
		h->rc = fg_flush(&h->out, h->f, force, "HTML report", h->err);
	}
	if (h->rc) {
		spy_buf_reset(&h->out);
	}
}

static void emit_page_head(struct html *h, const char *title)
{
	struct spy_buf *o = &h->out;
	spy_buf_adds(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
		     /* Nothing may be fetched: the report is one file, opened anywhere. */
		     "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
		     "script-src 'unsafe-inline'; style-src 'unsafe-inline'\">\n"
		     "<meta name=\"viewport\" content=\"width=device-width\">\n<title>");
	fg_html_text(o, title);
	spy_buf_adds(o, "</title>\n<style>\n");
	spy_buf_adds(o, fg_html_css);
	spy_buf_adds(o, "</style></head><body>\n<header><h1>");
	fg_html_text(o, title);
	spy_buf_adds(o, fg_html_body);
}

int fg_profile_write_html(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts,
			  struct spy_err *err)
{
	struct html h;
	memset(&h, 0, sizeof(h));
	h.p = p;
	h.f = f;
	h.err = err;
	spy_buf_init(&h.out);
	spy_buf_init(&h.body);
	spy_buf_init(&h.errors);
	emit_page_head(&h, opts && opts->title ? opts->title : "spy profile");
	put(&h, false);

	struct fg_order o;
	fg_order_init(&o, p);
	uint32_t *rank = spy_xmalloc((p->nstacks ? p->nstacks : 1) * sizeof(*rank));
	spy_buf_addf(&h.body, "\"V\":1,\"INV\":%d", opts && opts->inverted ? 1 : 0);
	emit_frames(&h);
	emit_stacks(&h, &o, rank);
	fg_order_release(&o);
	emit_table(&h);
	emit_source(&h);
	emit_meta(&h);
	emit_windows(&h, rank);
	free(rank);

	spy_buf_adds(&h.out, "<script type=\"application/json\" id=\"spy-data\">{\"S\":[");
	for (size_t i = 0; i < h.nstrs; i++) {
		sep(&h.out, i);
		fg_html_json_string(&h.out, h.strv[i]);
		put(&h, false);
	}
	spy_buf_adds(&h.out, "],\n");
	spy_buf_add(&h.out, h.body.buf, h.body.len);
	spy_buf_adds(&h.out, "}</script>\n<script>\n");
	spy_buf_adds(&h.out, fg_html_js);
	spy_buf_adds(&h.out, "</script>\n</body></html>\n");
	put(&h, true);

	spy_buf_release(&h.out);
	spy_buf_release(&h.body);
	spy_buf_release(&h.errors);
	spy_hmap_release(&h.sm);
	free(h.strv);
	return h.rc;
}
