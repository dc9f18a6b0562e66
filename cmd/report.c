/*
 * spy report: re-render a profile saved by record (folded text, plain or
 * gzip, told by its bytes) in another format, or as the table.
 *
 * The format is --format, else the output name's extension, else svg (as
 * for record). Without -o, text formats (folded, table, json) go to stdout
 * and an SVG, speedscope, chrome or pprof file is written beside the
 * profile (PROFILE with .folded/.gz/... replaced by .svg, .speedscope.json,
 * .trace.json or .pb.gz), since a flame graph or gzip bytes on a terminal help nobody. "-" reads stdin or writes
 * stdout. A file is replaced atomically (a temporary in the same directory,
 * then rename), as record does, so a failed run leaves the old file whole.
 *
 * A malformed profile is exit 5 with the reader's "FILE:LINE: what" message.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/output.h"
#include "common/buf.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

static const char *const report_usage[] = {
	"spy report [OPTIONS] PROFILE",
	"    PROFILE: a folded profile saved by record (plain or .gz; - for stdin)",
	NULL,
};

struct report {
	struct fg_profile *profile;
	enum fg_format format;
	struct fg_table_opts table;
	struct fg_svg_opts svg;
	struct fg_lines_opts lines;
	struct fg_slices *slices;  /* --trend: the profile's time windows */
	struct fg_resources *res;  /* --trend: the process's resources, when recorded */
};

static int write_trend(void *report, FILE *f, const char *name, struct spy_err *err)
{
	const struct report *r = report;
	struct fg_trend t;
	struct spy_buf b = SPY_BUF_INIT;
	fg_trend_init(&t, r->slices, r->profile, r->table.top);
	fg_trend_render(&t, &b);
	fg_trend_release(&t);
	/* Beside the functions, in units of their own (doc/spy-report.md, "Trends"). */
	if (r->res) {
		spy_buf_addch(&b, '\n');
		fg_resources_trend(r->res, &b);
	}
	return cmd_output_text(f, &b, name, err);
}

/*
 * --trend: the time windows record --slice stored in the profile. They
 * number the stacks as written, so the profile is read as it is, never
 * with -F (the trend is by function anyway).
 */
static int load_trend(struct report *r, const char *input, struct spy_err *err)
{
	int rc = fg_slices_load(&r->slices, r->profile, input, err);
	if (rc == 0) {
		rc = fg_resources_load(&r->res, r->profile, input, err);
	}
	if (rc == 0 && !r->slices) {
		rc = spy_err_set(err, SPY_EFORMAT, "%s has no time windows", input);
		spy_err_remedy(err, "record it with spy record --slice SECONDS");
	}
	return rc;
}

/*
 * The file written for PROFILE when no -o is given and the format is not
 * for a terminal: its name with ext (".svg", ".speedscope.json", ".pb.gz").
 */
static char *default_path(const char *profile, const char *ext)
{
	static const char *exts[] = { ".folded.gz", ".collapsed.gz", ".gz", ".folded", ".collapsed", ".txt" };
	size_t len = strlen(profile);
	for (size_t i = 0; i < SPY_ARRAY_SIZE(exts); i++) {
		if (spy_ends_with_nocase(profile, exts[i]) && len > strlen(exts[i])) {
			len -= strlen(exts[i]);
			break;
		}
	}
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_add(&b, profile, len);
	spy_buf_adds(&b, ext);
	return spy_buf_detach(&b, NULL);
}

int cmd_report(int argc, char **argv)
{
	const char *output = NULL, *format = NULL, *sort = NULL, *title = NULL;
	unsigned top = 0, context = FG_LINES_CONTEXT;
	bool function = false, inverted = false, trend = false;
	const struct opt opts[] = {
		{ 'o', "output", OPT_STRING, &output, "FILE", "where to write (- for stdout); format follows the extension" },
		{ 'f', "format", OPT_STRING, &format, "F", "svg, html, folded, table, lines, json, speedscope, chrome or pprof (default: from -o's extension, else svg)" },
		{ 'F', "function", OPT_BOOL, &function, NULL, "aggregate by function, dropping line numbers" },
		{ 0, "sort", OPT_STRING, &sort, "KEY", "table order: cumtime (default), tottime or name; lines: tottime by default" },
		{ 0, "top", OPT_UINT, &top, "N", "table: keep the first N rows (default: all); lines: N functions (default 5)" },
		{ 0, "context", OPT_UINT, &context, "N", "lines: show N lines around each sampled line (default 2, at most 3 are kept)" },
		{ 0, "title", OPT_STRING, &title, "TEXT", "svg, html: the title (default \"spy flame graph\", \"spy profile\")" },
		{ 0, "inverted", OPT_BOOL, &inverted, NULL, "svg, html: icicle graph, roots at the top" },
		{ 0, "trend", OPT_BOOL, &trend, NULL, "list functions by how steadily their share rises across the time windows of a profile recorded with --slice" },
		{ 0 },
	};
	struct spy_err err = SPY_ERR_INIT;
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	int nrest = 0;
	int rc = cmd_parse_options("report", report_usage, opts, argc, argv, rest, &nrest);
	const char *input = nrest > 0 ? rest[0] : NULL;
	const char *extra = nrest > 1 ? rest[1] : NULL;
	free(rest);
	if (rc >= 0) {
		return rc;
	}
	if (!input) {
		return cmd_usage_error("report", "which profile? (spy report PROFILE)");
	}
	if (extra) {
		return cmd_usage_error("report", "unexpected argument '%s'", extra);
	}

	struct report r;
	memset(&r, 0, sizeof(r));
	r.table = (struct fg_table_opts)FG_TABLE_OPTS_INIT;
	r.table.top = top;
	r.svg.title = title;
	r.svg.inverted = inverted;
	r.lines = (struct fg_lines_opts)FG_LINES_OPTS_INIT;
	r.lines.top = top ? top : FG_LINES_TOP;
	r.lines.context = context;
	if (format) {
		if (!fg_format_parse(format, &r.format)) {
			return cmd_usage_error("report", "unknown format '%s'", format);
		}
	} else if (output && strcmp(output, "-")) {
		r.format = fg_format_from_path(output);
	} else {
		r.format = FG_FORMAT_SVG;
	}
	if (sort && !fg_sort_parse(sort, &r.table.sort)) {
		return cmd_usage_error("report", "unknown sort key '%s' (cumtime, tottime or name)", sort);
	}
	if (sort) {
		r.lines.sort = r.table.sort;
	}

	if (trend && format) {
		return cmd_usage_error("report", "--trend writes a text table: -f does not apply");
	}
	if (trend) {
		r.format = FG_FORMAT_TABLE;  /* text, to stdout unless -o */
	}
	/* The invocation's one string table, as record's and diff's. */
	struct spy_strtab strs = SPY_STRTAB_INIT;
	r.profile = fg_profile_new(&strs, function && !trend ? FG_FUNCTION : 0);
	if (!strcmp(input, "-")) {
		rc = fg_profile_read_folded_fd(r.profile, STDIN_FILENO, "<stdin>", &err);
	} else {
		rc = fg_profile_load_folded(r.profile, input, &err);
	}
	if (rc == 0 && trend) {
		rc = load_trend(&r, strcmp(input, "-") ? input : "<stdin>", &err);
	}
	if (rc == 0 && function && !trend) {
		/* -F merged stacks: the windows' stack numbers no longer hold. */
		fg_slices_drop(r.profile);
	}
	if (rc < 0) {
		fg_profile_free(r.profile);
		spy_strtab_release(&strs);
		return cmd_fail(&err);
	}

	struct fg_writer w = { r.format, r.profile, NULL, &r.table, &r.svg, false, &r.lines };
	cmd_write_fn fn = trend ? write_trend : fg_write;
	void *ctx = trend ? (void *)&r : (void *)&w;
	/* Binary or graphical formats go to a file, never the terminal. */
	const char *ext = NULL;
	if (r.format == FG_FORMAT_SVG || r.format == FG_FORMAT_SPEEDSCOPE || r.format == FG_FORMAT_PPROF ||
	    r.format == FG_FORMAT_CHROME || r.format == FG_FORMAT_HTML) {
		ext = fg_format_ext(r.format);
	}
	/* Without -o: text to stdout, the rest to a file named after the profile. */
	char *path = NULL;
	if (!output && ext) {
		if (strcmp(input, "-")) {
			path = default_path(input, ext);
		} else {
			struct spy_buf b = SPY_BUF_INIT;
			spy_buf_addf(&b, "spy-report%s", ext);
			path = spy_buf_detach(&b, NULL);
		}
	}
	const char *dest = path ? path : output ? output : "-";
	w.gzip = fg_format_gzip(r.format, dest);
	rc = cmd_output_file(dest, fn, ctx, &err);
	if (rc == 0 && path) {
		fprintf(stderr, "spy report: wrote %s\n", path);
	}
	free(path);
	fg_slices_free(r.slices);
	fg_resources_free(r.res);
	fg_profile_free(r.profile);
	spy_strtab_release(&strs);
	return rc < 0 ? cmd_fail(&err) : 0;
}
