/*
 * Fuzzing the folded reader (plain and gzip) and every writer fed from
 * it: folded (which must read back to the very same text), SVG (upright
 * and inverted), json, speedscope, pprof, chrome, the cumtime table (per
 * function and per line), the lines view (with the kept source), a diff of the profile against itself (text,
 * JSON, SVG) and, when the file carries windows, the trend. Report reads
 * files anyone can hand over; nothing may crash, hang, read out of bounds
 * or overflow, whatever the bytes. An odd-sized input is read with -F
 * (FG_FUNCTION). The corpus is plain folded files and gzip'd ones.
 *
 * Under libFuzzer each input feeds one group of writers, picked by its
 * size: all of them made every execution ten times the reader's cost
 * (each writer orders and escapes every frame again), and the reader and
 * the round trip are the surface a crafted file meets first. The replay
 * main (the unit suite, over the corpus) feeds every writer every input,
 * so each regression input still meets the writer it once crashed.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "flamegraph/flamegraph.h"
#include "flamegraph/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink(void)
{
	static FILE *f;
	if (!f) {
		f = fopen("/dev/null", "w");
		if (!f) {
			abort();
		}
	}
	return f;
}

enum { W_SVG, W_DOCS, W_FOLDED, W_TABLE, W_DIFF, W_TREND, W_GROUPS };

/* The writers of group w, or of every group when w is W_GROUPS. */
static void writers(struct fg_profile *p, unsigned w)
{
	struct spy_err err = SPY_ERR_INIT;
	FILE *f = sink();
	struct fg_svg_opts up = { NULL, false }, down = { "t\x1b", true };
	struct spy_buf b = SPY_BUF_INIT;
	bool all = w == W_GROUPS;
	if (all || w == W_SVG) {
		(void)fg_profile_write_svg(p, f, &up, &err);
		(void)fg_profile_write_svg(p, f, &down, &err);
	}
	if (all || w == W_DOCS) {
		(void)fg_profile_write_json(p, f, &err);
		(void)fg_profile_write_speedscope(p, f, &err);
		(void)fg_profile_write_pprof(p, NULL, f, &err);
		(void)fg_profile_write_chrome(p, NULL, f, &err);
	}
	if (all || w == W_FOLDED) {
		(void)fg_profile_write_folded(p, f, "fuzz", &err);
	}
	if (all || w == W_TABLE) {
		struct fg_table t;
		struct fg_table_opts o = FG_TABLE_OPTS_INIT;
		fg_table_init(&t, p, &o);
		fg_table_render(&t, &b);
		fg_table_release(&t);
		o.by_line = true;
		o.top = 5;
		o.sort = FG_SORT_NAME;
		fg_table_init(&t, p, &o);
		fg_table_render(&t, &b);
		fg_table_release(&t);
		struct fg_lines_opts lo = { FG_SORT_CUMTIME, 3, 7 };
		fg_lines_render(p, NULL, &b);
		fg_lines_render(p, &lo, &b);
	}
	if (all || w == W_DIFF) {
		struct fg_diff d;
		struct fg_diff_gate g = { 1.0, 1.0, 0, true };
		fg_diff_init(&d, p, p);
		fg_diff_render(&d, 0, &b);
		(void)fg_diff_write_json(&d, 3, &g, "base", "new", f, &err);
		(void)fg_diff_write_svg(&d, p, f, &up, &err);
		fg_diff_release(&d);
	}
	if (all || w == W_TREND) {
		struct fg_slices *s = NULL;
		if (fg_slices_load(&s, p, "fuzz", &err) == 0 && s) {
			struct fg_trend tr;
			fg_trend_init(&tr, s, p, 0);
			fg_trend_render(&tr, &b);
			fg_trend_release(&tr);
		}
		fg_slices_free(s);
	}
	spy_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned flags = size & 1 ? FG_FUNCTION : 0;
	struct spy_err err = SPY_ERR_INIT;
	struct fg_profile *p = fg_profile_new(NULL, flags);
	if (fg_profile_read_folded(p, data, size, "fuzz", &err) == 0) {
#ifdef SPY_FUZZ_REPLAY
		writers(p, W_GROUPS);
#else
		writers(p, (unsigned)(size >> 1) % W_GROUPS);
#endif
		/* What is written reads back to the very same text. */
		struct spy_buf one = SPY_BUF_INIT, two = SPY_BUF_INIT;
		fg_profile_format_folded(p, &one);
		struct fg_profile *q = fg_profile_new(NULL, flags);
		if (fg_profile_read_folded(q, one.buf, one.len, "again", &err) != 0) {
			abort();
		}
		fg_profile_format_folded(q, &two);
		if (one.len != two.len || memcmp(one.buf, two.buf, one.len)) {
			abort();
		}
		fg_profile_free(q);
		spy_buf_release(&one);
		spy_buf_release(&two);
	} else if (err.code != SPY_EFORMAT) {
		abort();
	}
	fg_profile_free(p);
	return 0;
}
