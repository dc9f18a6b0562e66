/*
 * The pure part of `spy top`, exposed for unit tests: its rows, their
 * order, and the text of one screen.
 *
 * A row is one function (or one line, with --lines): its share of the
 * stacks kept in the last refresh interval (py-spy's %Own and %Total,
 * recursion counted once per stack) and its time since the start (OwnTime,
 * TotalTime, in seconds of samples). Strings are borrowed from the session.
 */
#ifndef SPY_CMD_TOP_H
#define SPY_CMD_TOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

struct top_row {
	const char *func, *file;
	uint32_t line;                /* 0: not shown */
	double own_pct, total_pct;    /* of the interval's stacks */
	double own_s, total_s;        /* since the start */
};

enum top_sort {
	TOP_SORT_OWN = 0,   /* %Own, then OwnTime */
	TOP_SORT_TOTAL,     /* %Total, then TotalTime */
};

/* Parse "own" or "total"; false otherwise. */
bool top_sort_parse(const char *name, enum top_sort *out);
/*
 * Order rows for display: the key's interval share, the other interval
 * share, the key's time since the start, then func, file, line.
 */
void top_sort_rows(struct top_row *rows, size_t n, enum top_sort sort);

/*
 * Append one screen to out: header (lines ending in '\n'), a blank line,
 * the column titles, then at most max_rows rows (0: all). Every line is cut
 * to width columns (0: no limit) at a UTF-8 character boundary. With ansi,
 * the screen starts at the cursor's home, each line clears what is left of
 * it and the rest of the screen is cleared after the last, so a redraw
 * never leaves stale text. Names are escaped as in folded text: a hostile
 * function name cannot inject a terminal escape.
 */
void top_render(struct spy_buf *out, const char *header, const struct top_row *rows, size_t n,
		size_t width, size_t max_rows, bool ansi);

#endif
