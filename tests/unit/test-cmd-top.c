/*
 * Unit tests for `spy top`'s screen (cmd/top-view.c): the row order for
 * each sort key and its tie-breaks, cutting lines to the terminal's width
 * at a UTF-8 boundary, the row limit, the ANSI redraw framing, and that a
 * hostile function name cannot smuggle an escape sequence onto the screen.
 */
#include <string.h>

#include "cmd/top.h"
#include "common/buf.h"
#include "tests/lib/check.h"

static void test_sort(void)
{
	struct top_row r[] = {
		{ "b", "m.py", 1, 10, 50, 1.0, 5.0 },
		{ "a", "m.py", 2, 40, 40, 4.0, 4.0 },
		{ "c", "m.py", 3, 10, 60, 2.0, 6.0 },
		{ "d", "m.py", 4, 10, 60, 3.0, 6.5 },
	};
	enum top_sort s;
	CHECK(top_sort_parse("own", &s) && s == TOP_SORT_OWN);
	CHECK(top_sort_parse("total", &s) && s == TOP_SORT_TOTAL);
	CHECK(!top_sort_parse("cumtime", &s));

	top_sort_rows(r, 4, TOP_SORT_OWN);
	/* a leads on %Own; c and d tie on %Own and %Total, so OwnTime puts d first */
	CHECK_STR(r[0].func, "a");
	CHECK_STR(r[1].func, "d");
	CHECK_STR(r[2].func, "c");
	CHECK_STR(r[3].func, "b");

	top_sort_rows(r, 4, TOP_SORT_TOTAL);
	CHECK_STR(r[0].func, "d");
	CHECK_STR(r[1].func, "c");
	CHECK_STR(r[2].func, "b");
	CHECK_STR(r[3].func, "a");
}

static size_t count_lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++) {
		n += *s == '\n';
	}
	return n;
}

static void test_render_plain(void)
{
	struct top_row r[] = {
		{ "work_a", "/app/x.py", 12, 70.0, 71.5, 1.25, 2.5 },
		{ "work_b", "/app/x.py", 0, 30.0, 30.0, 0.5, 0.5 },
	};
	struct spy_buf b = SPY_BUF_INIT;
	top_render(&b, "spy top: one\nsecond\n", r, 2, 0, 0, false);
	CHECK(!strchr(b.buf, '\033'));
	CHECK_INT(count_lines(b.buf), 6);   /* 2 header, blank, titles, 2 rows */
	CHECK(!strncmp(b.buf, "spy top: one\nsecond\n\n", 21));
	CHECK(strstr(b.buf, "%Own") && strstr(b.buf, "TotalTime"));
	CHECK(strstr(b.buf, "  70.00   71.50      1.25       2.50  work_a (/app/x.py:12)\n") != NULL);
	/* no line known: the file alone */
	CHECK(strstr(b.buf, "work_b (/app/x.py)\n") != NULL);

	/* the row limit */
	spy_buf_reset(&b);
	top_render(&b, "h\n", r, 2, 0, 1, false);
	CHECK(strstr(b.buf, "work_a") && !strstr(b.buf, "work_b"));
	spy_buf_release(&b);
}

static void test_render_cut(void)
{
	/* "é" is two bytes, one column: the cut falls between characters */
	struct top_row r[] = { { "f\xc3\xa9\xc3\xa9\xc3\xa9", "m.py", 0, 1, 1, 0, 0 } };
	struct spy_buf b = SPY_BUF_INIT;
	const char *row_start = "   1.00    1.00      0.00       0.00  f";
	size_t w = strlen(row_start) + 2;   /* room for "f" and two of the three é */
	top_render(&b, "a header longer than the width of this terminal is cut\n", r, 1, w, 0, false);
	const char *row = strstr(b.buf, row_start);
	CHECK(row != NULL);
	if (row) {
		const char *nl = strchr(row, '\n');
		CHECK(nl != NULL);
		/* row_start's one-byte columns, then two é of two bytes each */
		CHECK_INT(nl - row, strlen(row_start) + 4);
	}
	const char *first = b.buf;
	CHECK_INT(strchr(first, '\n') - first, w);
	spy_buf_release(&b);
}

static void test_render_ansi(void)
{
	/* a name carrying an escape sequence (clear screen) */
	struct top_row r[] = { { "evil\033[2J", "m.py", 1, 1, 1, 0, 0 } };
	struct spy_buf b = SPY_BUF_INIT;
	top_render(&b, "h\n", r, 1, 80, 0, true);
	CHECK(!strncmp(b.buf, "\033[H", 3));
	CHECK(!strcmp(b.buf + b.len - 3, "\033[J"));
	CHECK(strstr(b.buf, "\033[2J") == NULL);
	CHECK(strstr(b.buf, "evil\\x1b[2J") != NULL);
	/* every line clears what is left of it */
	CHECK(strstr(b.buf, "h\033[K\n") != NULL);
	spy_buf_release(&b);
}

int main(void)
{
	test_sort();
	test_render_plain();
	test_render_cut();
	test_render_ansi();
	return check_done();
}
