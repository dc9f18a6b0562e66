/*
 * spy diff BASE NEW: compare two saved folded profiles function by function
 * (flamegraph/diff.c does the work), print the functions whose share
 * changed most, optionally write a differential flame graph or JSON, and
 * act as a CI gate: exit 1 when a function's share grew past --fail-over
 * and the growth is more than sampling noise (significant).
 *
 * The decision a newcomer would question: the gate's verdict goes to
 * stderr and the exit code, never into the chosen output, so a pipeline
 * can keep the JSON or the SVG as an artefact and still fail the job. The
 * gate is checked only after every output was written, so a failing build
 * still leaves its diff behind for the developer to look at.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/output.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

static const char *const diff_usage[] = {
	"spy diff [OPTIONS] BASE NEW",
	"    BASE, NEW: folded profiles saved by record (plain or .gz; one may be - for stdin)",
	"    exit 1 when --fail-over/--fail-over-self is exceeded, 5 on an unreadable profile",
	NULL,
};

/* The table's rows when --top is not given: a screenful. */
#define DIFF_DEFAULT_TOP 20

struct diff_run {
	struct fg_diff d;
	const struct fg_profile *cur;
	const char *base_name, *cur_name;
	struct fg_diff_gate gate;
	size_t top;
	struct fg_svg_opts svg;
};

static int write_table(void *ctx, FILE *f, const char *name, struct spy_err *err)
{
	const struct diff_run *r = ctx;
	struct spy_buf b = SPY_BUF_INIT;
	fg_diff_render(&r->d, r->top, &b);
	int rc = 0;
	if (fwrite(b.buf, 1, b.len, f) != b.len || fflush(f) != 0) {
		rc = spy_err_set(err, SPY_EIO, "cannot write %s", name);
	}
	spy_buf_release(&b);
	return rc;
}

static int write_json(void *ctx, FILE *f, const char *name, struct spy_err *err)
{
	const struct diff_run *r = ctx;
	int rc = fg_diff_write_json(&r->d, r->top, &r->gate, r->base_name, r->cur_name, f, err);
	if (rc) {
		spy_err_prefix(err, "%s: ", name);
	}
	return rc;
}

static int write_svg(void *ctx, FILE *f, const char *name, struct spy_err *err)
{
	const struct diff_run *r = ctx;
	int rc = fg_diff_write_svg(&r->d, r->cur, f, &r->svg, err);
	if (rc) {
		spy_err_prefix(err, "%s: ", name);
	}
	return rc;
}

static struct fg_profile *load(struct spy_strtab *strtab, const char *path, struct spy_err *err)
{
	struct fg_profile *p = fg_profile_new(strtab, 0);
	int rc = strcmp(path, "-") ? fg_profile_load_folded(p, path, err)
				   : fg_profile_read_folded_fd(p, STDIN_FILENO, "<stdin>", err);
	if (rc < 0) {
		fg_profile_free(p);
		return NULL;
	}
	return p;
}

/* Print the functions over the gate on stderr; returns how many there are. */
static size_t report_gate(const struct diff_run *r)
{
	size_t n = 0;
	struct spy_buf b = SPY_BUF_INIT;
	for (size_t i = 0; i < r->d.n; i++) {
		const struct fg_diff_row *row = &r->d.rows[i];
		unsigned why = fg_diff_row_fails(row, &r->gate);
		if (!why) {
			continue;
		}
		struct fg_frame f = { row->func, row->file, 0, SPY_FRAME_PYTHON };
		spy_buf_reset(&b);
		fg_frame_format(&f, &b);
		if (why & 1) {
			fprintf(stderr, "spy diff: %s: total share %.2f%% -> %.2f%% (%+.2f points, over %g; p %.2g)\n",
				b.buf, row->base.total_pct, row->cur.total_pct, row->total_delta,
				r->gate.total_pts, row->total_p);
		}
		if (why & 2) {
			fprintf(stderr, "spy diff: %s: self share %.2f%% -> %.2f%% (%+.2f points, over %g; p %.2g)\n",
				b.buf, row->base.self_pct, row->cur.self_pct, row->self_delta,
				r->gate.self_pts, row->self_p);
		}
		n++;
	}
	spy_buf_release(&b);
	return n;
}

/* Where to write: -o's format (or -f), else the table on stdout. */
static int pick_format(const char *format, const char *output, enum fg_format *out)
{
	if (format) {
		if (!fg_format_parse(format, out)) {
			return cmd_usage_error("diff", "unknown format '%s' (table, json or svg)", format);
		}
	} else if (output && strcmp(output, "-")) {
		*out = fg_format_from_path(output);
	} else {
		*out = FG_FORMAT_TABLE;
	}
	if (*out != FG_FORMAT_TABLE && *out != FG_FORMAT_JSON && *out != FG_FORMAT_SVG) {
		return cmd_usage_error("diff", "diff writes table, json or svg, not %s",
				       fg_format_name(*out));
	}
	return 0;
}

int cmd_diff(int argc, char **argv)
{
	const char *output = NULL, *format = NULL, *title = NULL;
	unsigned top = UINT_MAX, min_samples = 0;
	double fail_over = -1, fail_over_self = -1, dispersion = FG_DIFF_DISPERSION;
	bool quiet = false, no_significance = false;
	const struct opt opts[] = {
		{ 'o', "output", OPT_STRING, &output, "FILE", "where to write (- for stdout); format follows the extension (.svg, .json, else table)" },
		{ 'f', "format", OPT_STRING, &format, "F", "table (default), json or svg" },
		{ 0, "top", OPT_UINT, &top, "N", "keep the N functions that changed most (default 20 in the table, all in json; 0: all)" },
		{ 0, "fail-over", OPT_DOUBLE, &fail_over, "PCT", "exit 1 if a function's total share grew significantly and by more than PCT points" },
		{ 0, "fail-over-self", OPT_DOUBLE, &fail_over_self, "PCT", "exit 1 if a function's self share grew significantly and by more than PCT points" },
		{ 0, "no-significance", OPT_BOOL, &no_significance, NULL, "the gate fails on any growth over PCT, significant or not" },
		{ 0, "dispersion", OPT_DOUBLE, &dispersion, "F", "the test counts a profile of n samples as n/F independent ones (default 3; at least 1)" },
		{ 0, "min-samples", OPT_UINT, &min_samples, "N", "the gate ignores functions with fewer than N samples in NEW (default 0)" },
		{ 0, "title", OPT_STRING, &title, "TEXT", "svg: the title (default \"spy diff: NEW vs BASE\")" },
		{ 'q', "quiet", OPT_BOOL, &quiet, NULL, "with an svg or json file, do not also print the table" },
		{ 0 },
	};
	struct spy_err err = SPY_ERR_INIT;
	const char *pos[2];
	int rc = cmd_parse_options("diff", diff_usage, opts, argc, argv, pos, 2, NULL);
	const char *base = pos[0], *cur = pos[1];
	if (rc >= 0) {
		return rc;
	}
	if (!cur) {
		return cmd_usage_error("diff", "two profiles are needed (spy diff BASE NEW)");
	}
	if (!strcmp(base, "-") && !strcmp(cur, "-")) {
		return cmd_usage_error("diff", "only one of BASE and NEW can be read from stdin");
	}
	if (!(dispersion >= 1) || dispersion > 1e6) {
		return cmd_usage_error("diff", "--dispersion must be between 1 and 1e6, not %g", dispersion);
	}
	enum fg_format fmt;
	if (pick_format(format, output, &fmt)) {
		return 2;
	}

	struct spy_strtab strtab = SPY_STRTAB_INIT;
	struct fg_profile *pb = load(&strtab, base, &err);
	struct fg_profile *pc = pb ? load(&strtab, cur, &err) : NULL;
	if (!pc) {
		fg_profile_free(pb);
		spy_strtab_release(&strtab);
		return cmd_fail(&err);
	}

	struct diff_run r;
	memset(&r, 0, sizeof(r));
	fg_diff_init(&r.d, pb, pc);
	fg_diff_set_dispersion(&r.d, dispersion);
	r.cur = pc;
	r.base_name = strcmp(base, "-") ? base : "<stdin>";
	r.cur_name = strcmp(cur, "-") ? cur : "<stdin>";
	r.gate = (struct fg_diff_gate){ fail_over, fail_over_self, min_samples, !no_significance };
	r.top = top != UINT_MAX ? top : (fmt == FG_FORMAT_JSON ? 0 : DIFF_DEFAULT_TOP);
	struct spy_buf t = SPY_BUF_INIT;
	spy_buf_addf(&t, "spy diff: %s vs %s", r.cur_name, r.base_name);
	r.svg.title = title ? title : t.buf;

	cmd_write_fn fn = fmt == FG_FORMAT_SVG ? write_svg : fmt == FG_FORMAT_JSON ? write_json : write_table;
	bool to_file = output && strcmp(output, "-");
	rc = cmd_output_file(to_file ? output : "-", fn, &r, &err);
	if (rc == 0 && to_file && fmt != FG_FORMAT_TABLE && !quiet) {
		/* CI logs should show what changed even when the artefact is a file. */
		if (top == UINT_MAX) {
			r.top = DIFF_DEFAULT_TOP;
		}
		rc = write_table(&r, stdout, "<stdout>", &err);
	}
	int code = rc < 0 ? cmd_fail(&err) : 0;
	if (!code && report_gate(&r)) {
		code = 1;
	}
	spy_buf_release(&t);
	fg_diff_release(&r.d);
	fg_profile_free(pb);
	fg_profile_free(pc);
	spy_strtab_release(&strtab);
	return code;
}
