/*
 * Source lines kept in a profile: the text of the sampled lines of Python
 * frames (with a few lines of context and each function's `def` line),
 * keyed by (file, line), so `-f lines`, the SVG tooltip and the JSON frames
 * can show code on a machine that never saw the files.
 *
 * The decision a newcomer would question: the lines are chosen when the
 * profile is complete (fg_profile_source_capture), not as samples come in.
 * Only then is it known which lines are hot, so the budget (bytes and lines
 * stored) goes to the hottest files first, and a cold line seen once costs
 * its ±FG_SOURCE_CONTEXT lines and nothing more. The caller keeps the file
 * contents until then (cmd/source.c reads each file once, bounded).
 *
 * In a folded file the store is two kinds of metadata line, written after
 * the other metadata (internal.h, "Source lines in a folded file"), which
 * older readers take for ordinary metadata: one key repeated, so they keep
 * one value and lose nothing else.
 *
 * Text is hostile (a file in a target's tree): tabs are expanded (to
 * 8-column stops, as Python reads them), trailing blanks dropped, then the
 * one terminal escaper (common/term.h) makes every control character,
 * bidi control and invalid UTF-8 visible, and the result is cut to
 * FG_MAX_SOURCE_TEXT bytes. What is stored is exactly what a folded file
 * round-trips; each output escapes it again for its own syntax.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/term.h"
#include "common/util.h"
#include "flamegraph/internal.h"

struct src_ent {
	const char *file;   /* interned in the profile's table */
	uint32_t line;
	char *text;
};

struct fg_source {
	struct src_ent *v;
	size_t n, alloc;
	struct spy_hmap index; /* ent_key -> index into v */
	size_t bytes;       /* text stored */
};

static uint64_t ent_key(const char *file, uint32_t line)
{
	return ((uint64_t)(uintptr_t)file * 0x9e3779b97f4a7c15ULL) ^ line;
}

void fg_source_free(struct fg_source *s)
{
	if (!s) {
		return;
	}
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].text);
	}
	free(s->v);
	spy_hmap_release(&s->index);
	free(s);
}

/* The entry of (file, line), or NULL. */
static struct src_ent *find_ent(const struct fg_source *s, const char *file, uint32_t line)
{
	uint64_t k = ent_key(file, line);
	struct spy_hmap_it it;
	for (uint64_t v = spy_hmap_find(&s->index, k, &it); v != SPY_HMAP_NONE;
	     v = spy_hmap_next(&s->index, k, &it)) {
		if (s->v[v].file == file && s->v[v].line == line) {
			return &s->v[v];
		}
	}
	return NULL;
}

const char *fg_profile_source(const struct fg_profile *p, const char *file, uint32_t line)
{
	const struct fg_source *s = p->source;
	if (!s || !s->n || !file || !line) {
		return NULL;
	}
	const struct src_ent *e = find_ent(s, file, line);
	return e ? e->text : NULL;
}

size_t fg_profile_source_count(const struct fg_profile *p)
{
	return p->source ? p->source->n : 0;
}

/* Tabs expanded, trailing blanks and line ends dropped: the text as an editor shows it. */
static void detab(struct spy_buf *out, const char *t, size_t n)
{
	size_t col = 0;
	/* A line longer than this is cut anyway; do not expand a megabyte of tabs. */
	size_t cap = 4 * FG_MAX_SOURCE_TEXT;
	for (size_t i = 0; i < n && out->len < cap; i++) {
		if (t[i] == '\t') {
			do {
				spy_buf_addch(out, ' ');
			} while (++col % 8);
			continue;
		}
		spy_buf_addch(out, t[i]);
		/* Columns count code points, not bytes: continuation bytes add none. */
		if (((unsigned char)t[i] & 0xc0) != 0x80) {
			col++;
		}
	}
	while (out->len && (out->buf[out->len - 1] == ' ' || out->buf[out->len - 1] == '\r' ||
			    out->buf[out->len - 1] == '\n' || out->buf[out->len - 1] == '\f')) {
		out->buf[--out->len] = '\0';
	}
}

bool fg_profile_source_set(struct fg_profile *p, const char *file, uint32_t line, const char *text,
			   size_t len)
{
	if (!file || !line) {
		return false;
	}
	if (!p->source) {
		p->source = spy_xcalloc(1, sizeof(*p->source));
	}
	struct fg_source *s = p->source;
	if (s->n >= FG_MAX_SOURCE_LINES || s->bytes >= FG_MAX_SOURCE_BYTES) {
		return false;
	}
	if (find_ent(s, file, line)) {
		return true;  /* the first text kept wins: merged profiles agree on a file or not at all */
	}
	struct spy_buf raw = SPY_BUF_INIT, esc = SPY_BUF_INIT;
	detab(&raw, text, len);
	spy_term_escape(&esc, raw.buf, raw.len, FG_MAX_SOURCE_TEXT, NULL);
	spy_buf_release(&raw);
	/* A cut may end in blanks: drop them too, so reading back stores the same text. */
	while (esc.len && esc.buf[esc.len - 1] == ' ') {
		esc.buf[--esc.len] = '\0';
	}
	SPY_GROW(s->v, s->alloc, s->n + 1);
	s->bytes += esc.len;
	s->v[s->n] = (struct src_ent){ file, line, spy_buf_detach(&esc, NULL) };
	spy_hmap_add(&s->index, ent_key(file, line), s->n++);
	return true;
}

/* ---- the def line ---------------------------------------------------------- */

static size_t indent_of(const char *t, size_t n)
{
	size_t i = 0;
	while (i < n && t[i] == ' ') {
		i++;
	}
	return i;
}

static bool is_def_of(const char *t, size_t n, const char *name, size_t nlen)
{
	size_t i = indent_of(t, n);
	if (n - i >= 6 && !memcmp(t + i, "async ", 6)) {
		i += 6;
		while (i < n && t[i] == ' ') {
			i++;
		}
	}
	if (n - i < 4 || memcmp(t + i, "def ", 4)) {
		return false;
	}
	i += 4;
	while (i < n && t[i] == ' ') {
		i++;
	}
	if (n - i < nlen || memcmp(t + i, name, nlen)) {
		return false;
	}
	i += nlen;
	return i < n && (t[i] == '(' || t[i] == ' ');
}

uint32_t fg_source_def_line(const char *func, uint32_t line, fg_line_fn get, void *ctx)
{
	/* The code object's own name: the last part of a qualified one ("Klass.<locals>.meth"). */
	const char *name = strrchr(func, '.');
	name = name ? name + 1 : func;
	size_t nlen = strlen(name);
	if (!nlen || name[0] == '<' || line < 2) {
		return 0;
	}
	size_t n;
	const char *t = get(ctx, line, &n);
	if (t && is_def_of(t, n, name, nlen)) {
		return line;
	}
	bool nested = t && indent_of(t, n) > 0;
	uint32_t stop = line > FG_SOURCE_DEF_SCAN ? line - FG_SOURCE_DEF_SCAN : 1;
	for (uint32_t k = line - 1; k >= stop; k--) {
		t = get(ctx, k, &n);
		if (t && is_def_of(t, n, name, nlen)) {
			return k;
		}
		/*
		 * Code at column 0 (not a comment or a decorator) is module level:
		 * the function starts below it, or the def is not where we look.
		 */
		if (nested && t && n && t[0] != ' ' && t[0] != '#' && t[0] != '@' && t[0] != ')' &&
		    t[0] != ']' && t[0] != '}') {
			break;
		}
	}
	return 0;
}

/* ---- capture --------------------------------------------------------------- */

/*
 * One file's text with the starts of its first lines: line L is at
 * off[L - 1] .. off[L]. Only the lines up to the last one wanted are found
 * (a sampled line near the top of a long module costs little), with
 * memchr: the file's bytes are the bulk of the capture's work.
 */
struct src_index {
	const char *data;
	size_t *off;
	size_t nlines, alloc;
};

static void index_file(struct src_index *x, const char *data, size_t len, uint32_t want)
{
	memset(x, 0, sizeof(*x));
	x->data = data;
	SPY_GROW(x->off, x->alloc, 1);
	x->off[0] = 0;
	size_t at = 0;
	while (at < len && x->nlines < want) {
		const char *nl = memchr(data + at, '\n', len - at);
		at = nl ? (size_t)(nl - data) + 1 : len;
		SPY_GROW(x->off, x->alloc, x->nlines + 2);
		x->off[++x->nlines] = at;
	}
}

static const char *index_line(void *ctx, uint32_t line, size_t *len)
{
	const struct src_index *x = ctx;
	if (!line || line > x->nlines) {
		return NULL;
	}
	size_t a = x->off[line - 1], b = x->off[line];
	*len = b - a - (b > a && x->data[b - 1] == '\n');
	return x->data + a;
}

/* A sampled line (a row of the by-line table) and the rank of its file. */
struct cap_row {
	size_t file_rank;   /* the files in order of their hottest line */
	size_t row;         /* rows are hottest first */
};

static int by_file_then_heat(const void *a, const void *b)
{
	const struct cap_row *x = a, *y = b;
	if (x->file_rank != y->file_rank) {
		return x->file_rank < y->file_rank ? -1 : 1;
	}
	return x->row < y->row ? -1 : x->row > y->row;
}

static bool keep_line(struct fg_profile *p, struct src_index *x, const char *file, uint32_t line)
{
	size_t n;
	const char *t = index_line(x, line, &n);
	if (!t || fg_profile_source(p, file, line)) {
		return true;
	}
	return fg_profile_source_set(p, file, line, t, n);
}

void fg_profile_source_capture(struct fg_profile *p, fg_source_fn get, void *ctx,
			       struct fg_source_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (fg_profile_flags(p) & FG_FUNCTION) {
		return;  /* no line numbers: nothing to show */
	}
	/* Every sampled line, hottest (by total) first. */
	struct fg_table_opts o = FG_TABLE_OPTS_INIT;
	o.by_line = true;
	struct fg_table t;
	fg_table_init(&t, p, &o);

	/* Group the lines by file, the file with the hottest line first, so
	 * each file is indexed once and the budget goes to the hottest. */
	struct cap_row *rows = spy_xcalloc(t.n ? t.n : 1, sizeof(*rows));
	size_t nrows = 0;
	struct spy_hmap rank = SPY_HMAP_INIT; /* file -> its rank */
	for (size_t i = 0; i < t.n; i++) {
		const char *f = t.rows[i].file;
		/* "<string>", "<frozen os>", "<stdin>": CPython's names for code with no file. */
		if (!f || !t.rows[i].line || f[0] == '<') {
			continue;
		}
		uint64_t r = spy_hmap_get(&rank, (uint64_t)(uintptr_t)f);
		if (r == SPY_HMAP_NONE) {
			r = spy_hmap_count(&rank);
			spy_hmap_add(&rank, (uint64_t)(uintptr_t)f, r);
		}
		rows[nrows++] = (struct cap_row){ r, i };
	}
	spy_hmap_release(&rank);
	qsort(rows, nrows, sizeof(*rows), by_file_then_heat);

	bool full = false;
	for (size_t i = 0; i < nrows && !full;) {
		const char *file = t.rows[rows[i].row].file;
		size_t next = i;
		while (next < nrows && rows[next].file_rank == rows[i].file_rank) {
			next++;
		}
		const char *data;
		size_t len;
		if (get(ctx, file, &data, &len) < 0) {
			st->unreadable++;
			i = next;
			continue;
		}
		uint32_t want = 0;
		for (size_t k = i; k < next; k++) {
			uint32_t l = t.rows[rows[k].row].line;
			want = l > want ? l : want;
		}
		struct src_index x;
		index_file(&x, data, len, want > UINT32_MAX - FG_SOURCE_CONTEXT ? UINT32_MAX : want + FG_SOURCE_CONTEXT);
		size_t before = fg_profile_source_count(p);
		for (; i < next && !full; i++) {
			const struct fg_row *r = &t.rows[rows[i].row];
			uint32_t lo = r->line > FG_SOURCE_CONTEXT ? r->line - FG_SOURCE_CONTEXT : 1;
			for (uint32_t l = lo; l <= r->line + FG_SOURCE_CONTEXT && !full; l++) {
				full = !keep_line(p, &x, file, l);
			}
			uint32_t def = fg_source_def_line(r->func, r->line, index_line, &x);
			if (def && !full) {
				full = !keep_line(p, &x, file, def);
			}
		}
		i = next;
		st->files++;
		st->lines += fg_profile_source_count(p) - before;
		free(x.off);
	}
	free(rows);
	st->budget_hit = full;
	fg_table_release(&t);
}

/* ---- in a folded file ------------------------------------------------------ */

/* An entry with its file as written (escaped): what the order is made of. */
struct emit_ent {
	const struct src_ent *e;
	size_t esc; /* offset of the escaped file name in the emit buffer */
};

static int emit_cmp(const void *a, const void *b, void *arg)
{
	const struct emit_ent *x = a, *y = b;
	const char *texts = arg;
	int c = strcmp(texts + x->esc, texts + y->esc);
	if (c) {
		return c;
	}
	if (x->e->line != y->e->line) {
		return x->e->line < y->e->line ? -1 : 1;
	}
	return strcmp(x->e->file, y->e->file);
}

void fg_source_emit(const struct fg_profile *p, struct spy_buf *out)
{
	const struct fg_source *s = p->source;
	if (!s || !s->n) {
		return;
	}
	/*
	 * Sorted by file as written, then line: the same profile gives the
	 * same bytes, and so does the profile read back from them. Ordering by
	 * the raw names did not: escaping moves a name ("\x90" sorts before
	 * "p", byte 0x90 after), and two names that escape alike ("b;c",
	 * "b?c") are one file once read back, so they are written as one, the
	 * first of each line kept.
	 */
	struct spy_buf texts = SPY_BUF_INIT;
	struct emit_ent *v = spy_xmalloc(s->n * sizeof(*v));
	for (size_t i = 0; i < s->n; i++) {
		v[i].e = &s->v[i];
		v[i].esc = texts.len;
		fg_escape(&texts, s->v[i].file);
		spy_buf_addch(&texts, '\0');
	}
	qsort_r(v, s->n, sizeof(*v), emit_cmp, texts.buf);
	size_t id = 0;
	for (size_t i = 0; i < s->n; i++) {
		const char *file = texts.buf + v[i].esc;
		bool same_file = i > 0 && !strcmp(file, texts.buf + v[i - 1].esc);
		if (same_file && v[i].e->line == v[i - 1].e->line) {
			continue;
		}
		if (!same_file) {
			if (i) {
				id++;
			}
			spy_buf_addf(out, "# " FG_META_SOURCE_FILE ": %zu %s\n", id, file);
		}
		spy_buf_addf(out, "# " FG_META_SOURCE_LINE ": %zu:%" PRIu32 " %s\n", id, v[i].e->line,
			     v[i].e->text);
	}
	free(v);
	spy_buf_release(&texts);
}

/* Decimal digits at *s (no sign, no leading zero unless "0"), below max; advances *s. */
static bool parse_num(const char **s, const char *end, uint64_t max, uint64_t *out)
{
	const char *t = *s;
	uint64_t v = 0;
	if (t == end || *t < '0' || *t > '9' || (*t == '0' && t + 1 < end && t[1] >= '0' && t[1] <= '9')) {
		return false;
	}
	for (; t < end && *t >= '0' && *t <= '9'; t++) {
		v = v * 10 + (uint64_t)(*t - '0');
		if (v > max) {
			return false;
		}
	}
	*s = t;
	*out = v;
	return true;
}

int fg_source_parse(struct fg_profile *p, struct fg_source_ids *ids, const char *key, const char *v,
		    size_t vlen, const char **why)
{
	const char *end = v + vlen;
	uint64_t id, line;
	if (!strcmp(key, FG_META_SOURCE_FILE)) {
		if (!parse_num(&v, end, FG_MAX_SOURCE_FILES - 1, &id) || v == end || *v != ' ' || v + 1 == end) {
			*why = "malformed source file (expected \"# " FG_META_SOURCE_FILE ": ID PATH\")";
			return -1;
		}
		v++;
		if (id >= ids->n) {
			size_t n = ids->n;
			SPY_GROW(ids->file, ids->alloc, id + 1);
			memset(ids->file + n, 0, (id + 1 - n) * sizeof(*ids->file));
			ids->n = id + 1;
		}
		ids->file[id] = spy_strtab_intern(p->strtab, v, (size_t)(end - v));
		return 1;
	}
	if (!strcmp(key, FG_META_SOURCE_LINE)) {
		if (!parse_num(&v, end, FG_MAX_SOURCE_FILES - 1, &id) || v == end || *v++ != ':' ||
		    !parse_num(&v, end, UINT32_MAX, &line) || !line || (v < end && *v != ' ')) {
			*why = "malformed source line (expected \"# " FG_META_SOURCE_LINE ": ID:LINE TEXT\")";
			return -1;
		}
		if (id >= ids->n || !ids->file[id]) {
			*why = "source line of a file id no \"# " FG_META_SOURCE_FILE ":\" line named";
			return -1;
		}
		if (v < end) {
			v++;
		}
		/* Past the store's bounds a line is left out, not an error: merged profiles may get there. */
		fg_profile_source_set(p, ids->file[id], (uint32_t)line, v, (size_t)(end - v));
		return 1;
	}
	return 0;
}
