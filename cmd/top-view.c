/*
 * The text of `spy top`'s screen: rows sorted by the current interval, cut
 * to the terminal. Pure functions of their input, so the unit tests check
 * layout and truncation without a process or a terminal.
 *
 * Lines are cut by columns counted as UTF-8 characters (every byte that is
 * not a continuation byte), not by bytes: a cut inside a character would
 * print garbage, and wide (CJK) characters, which this undercounts, are rare
 * enough in Python identifiers and paths that a slightly long line is the
 * better trade than a width table.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/top.h"
#include "flamegraph/flamegraph.h"

static const char title[] = "   %Own  %Total   OwnTime  TotalTime  Function (file:line)";

bool top_sort_parse(const char *name, enum top_sort *out)
{
	if (!strcmp(name, "own")) {
		*out = TOP_SORT_OWN;
	} else if (!strcmp(name, "total")) {
		*out = TOP_SORT_TOTAL;
	} else {
		return false;
	}
	return true;
}

static int desc(double a, double b)
{
	return a > b ? -1 : (a < b ? 1 : 0);
}

static int nstrcmp(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "");
}

static int cmp_rows(const void *x, const void *y, void *arg)
{
	const struct top_row *a = x, *b = y;
	bool total = *(const enum top_sort *)arg == TOP_SORT_TOTAL;
	/* the key's share now, the other share now, then the key's time since the start */
	int c = total ? desc(a->total_pct, b->total_pct) : desc(a->own_pct, b->own_pct);
	if (!c) {
		c = total ? desc(a->own_pct, b->own_pct) : desc(a->total_pct, b->total_pct);
	}
	if (!c) {
		c = total ? desc(a->total_s, b->total_s) : desc(a->own_s, b->own_s);
	}
	if (!c) {
		c = nstrcmp(a->func, b->func);
	}
	if (!c) {
		c = nstrcmp(a->file, b->file);
	}
	if (!c) {
		c = a->line < b->line ? -1 : (a->line > b->line);
	}
	return c;
}

void top_sort_rows(struct top_row *rows, size_t n, enum top_sort sort)
{
	qsort_r(rows, n, sizeof(*rows), cmp_rows, &sort);
}

/* Append line (len bytes, no newline) cut to width columns, then the line's end. */
static void add_line(struct spy_buf *out, const char *line, size_t len, size_t width, bool ansi)
{
	size_t cols = 0, end = 0;
	for (; end < len; end++) {
		bool starts_char = ((unsigned char)line[end] & 0xc0) != 0x80;
		if (starts_char && width && cols++ == width) {
			break;
		}
	}
	spy_buf_add(out, line, end);
	if (ansi) {
		spy_buf_adds(out, "\033[K");
	}
	spy_buf_addch(out, '\n');
}

static void add_lines(struct spy_buf *out, const char *text, size_t width, bool ansi)
{
	while (*text) {
		const char *nl = strchr(text, '\n');
		size_t len = nl ? (size_t)(nl - text) : strlen(text);
		add_line(out, text, len, width, ansi);
		text += len + (nl != NULL);
	}
}

void top_render(struct spy_buf *out, const char *header, const struct top_row *rows, size_t n,
		size_t width, size_t max_rows, bool ansi)
{
	if (ansi) {
		spy_buf_adds(out, "\033[H");
	}
	add_lines(out, header, width, ansi);
	add_line(out, "", 0, width, ansi);
	add_line(out, title, sizeof(title) - 1, width, ansi);
	struct spy_buf line = SPY_BUF_INIT;
	for (size_t i = 0; i < n && (!max_rows || i < max_rows); i++) {
		const struct top_row *r = &rows[i];
		spy_buf_reset(&line);
		spy_buf_addf(&line, "%7.2f %7.2f %9.2f %10.2f  ", r->own_pct, r->total_pct, r->own_s, r->total_s);
		/* A row with no file is a thread's (top -t): its name alone. */
		struct fg_frame f = { r->func, r->file, r->line,
				      r->file && *r->file ? SPY_FRAME_PYTHON : SPY_FRAME_SYNTHETIC };
		fg_frame_format(&f, &line);
		add_line(out, line.buf, line.len, width, ansi);
	}
	spy_buf_release(&line);
	if (ansi) {
		spy_buf_adds(out, "\033[J");
	}
}
