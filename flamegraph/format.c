/*
 * The output formats: their names, the format a file name implies, and
 * writing a profile in each onto a FILE * (see flamegraph.h). Opening,
 * replacing and syncing the file is the caller's (cmd/output.c): nothing
 * here touches the file system.
 *
 * File names are matched ignoring case, everywhere: "PROF.SVG" is an SVG
 * and "prof.folded.GZ" a gzipped folded file.
 */
#include <errno.h>
#include <string.h>

#include "common/buf.h"
#include "common/util.h"
#include "flamegraph/internal.h"

static const struct {
	const char *name;
	enum fg_format f;
	const char *ext;   /* of a default output name, spy-<pid>EXT */
} formats[] = {
	{ "svg", FG_FORMAT_SVG, ".svg" },
	{ "folded", FG_FORMAT_FOLDED, ".folded" },
	{ "table", FG_FORMAT_TABLE, ".txt" },
	{ "speedscope", FG_FORMAT_SPEEDSCOPE, ".speedscope.json" },
	{ "chrome", FG_FORMAT_CHROME, ".trace.json" },
	{ "pprof", FG_FORMAT_PPROF, ".pb.gz" },
	{ "json", FG_FORMAT_JSON, ".json" },
	{ "lines", FG_FORMAT_LINES, ".lines.txt" },
	{ "html", FG_FORMAT_HTML, ".html" },
};

bool fg_format_parse(const char *name, enum fg_format *out)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (!strcmp(formats[i].name, name)) {
			*out = formats[i].f;
			return true;
		}
	}
	return false;
}

const char *fg_format_name(enum fg_format f)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (formats[i].f == f) {
			return formats[i].name;
		}
	}
	return "?";
}

const char *fg_format_ext(enum fg_format f)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (formats[i].f == f) {
			return formats[i].ext;
		}
	}
	return ".svg";
}

enum fg_format fg_format_from_path(const char *path)
{
	/* Longest suffixes first: ".pb.gz" is pprof, any other ".gz" is folded. */
	static const struct {
		const char *suffix;
		enum fg_format f;
	} exts[] = {
		{ ".speedscope.json", FG_FORMAT_SPEEDSCOPE },
		{ ".chrome.json", FG_FORMAT_CHROME },
		{ ".trace.json", FG_FORMAT_CHROME },
		{ ".pb.gz", FG_FORMAT_PPROF },
		{ ".pprof", FG_FORMAT_PPROF },
		{ ".svg", FG_FORMAT_SVG },
		{ ".folded", FG_FORMAT_FOLDED },
		{ ".collapsed", FG_FORMAT_FOLDED },
		{ ".gz", FG_FORMAT_FOLDED },
		{ ".lines.txt", FG_FORMAT_LINES },
		{ ".lines", FG_FORMAT_LINES },
		{ ".txt", FG_FORMAT_TABLE },
		{ ".table", FG_FORMAT_TABLE },
		{ ".json", FG_FORMAT_JSON },
		{ ".html", FG_FORMAT_HTML },
		{ ".htm", FG_FORMAT_HTML },
	};
	for (size_t i = 0; i < SPY_ARRAY_SIZE(exts); i++) {
		if (spy_ends_with_nocase(path, exts[i].suffix)) {
			return exts[i].f;
		}
	}
	return FG_FORMAT_SVG;
}

bool fg_format_gzip(enum fg_format f, const char *path)
{
	/* pprof is gzipped by its writer, whatever the name. */
	return f == FG_FORMAT_FOLDED && path && spy_ends_with_nocase(path, ".gz");
}

static int write_table(const struct fg_writer *w, FILE *f, const char *name, struct spy_err *err)
{
	struct fg_table t;
	struct spy_buf b = SPY_BUF_INIT;
	fg_table_init(&t, w->profile, w->table);
	fg_table_render(&t, &b);
	fg_table_release(&t);
	int rc = fwrite(b.buf, 1, b.len, f) == b.len ? 0 : -SPY_EIO;
	spy_buf_release(&b);
	return rc ? spy_err_set(err, SPY_EIO, "cannot write %s: %s", name, strerror(errno)) : 0;
}

static int write_lines(const struct fg_writer *w, FILE *f, const char *name, struct spy_err *err)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_lines_render(w->profile, w->lines, &b);
	int rc = fwrite(b.buf, 1, b.len, f) == b.len ? 0 : -SPY_EIO;
	spy_buf_release(&b);
	return rc ? spy_err_set(err, SPY_EIO, "cannot write %s: %s", name, strerror(errno)) : 0;
}

int fg_write(void *writer, FILE *f, const char *name, struct spy_err *err)
{
	const struct fg_writer *w = writer;
	int rc;
	switch (w->format) {
	case FG_FORMAT_FOLDED:
		return w->gzip ? fg_profile_write_folded_gz(w->profile, f, name, err)
			       : fg_profile_write_folded(w->profile, f, name, err);
	case FG_FORMAT_TABLE:
		return write_table(w, f, name, err);
	case FG_FORMAT_LINES:
		return write_lines(w, f, name, err);
	case FG_FORMAT_SVG:
		rc = fg_profile_write_svg(w->profile, f, w->svg, err);
		break;
	case FG_FORMAT_HTML:
		rc = fg_profile_write_html(w->profile, f, w->svg, err);
		break;
	case FG_FORMAT_JSON:
		rc = fg_profile_write_json(w->profile, f, err);
		break;
	case FG_FORMAT_SPEEDSCOPE:
		rc = fg_profile_write_speedscope(w->profile, f, err);
		break;
	case FG_FORMAT_PPROF:
		rc = fg_profile_write_pprof(w->profile, f, err);
		break;
	case FG_FORMAT_CHROME:
		rc = fg_profile_write_chrome(w->profile, w->timeline, f, err);
		break;
	default:
		SPY_BUG("unknown format %d", (int)w->format);
	}
	/* The renderers do not know the file's name. */
	if (rc) {
		spy_err_prefix(err, "%s: ", name);
	}
	return rc;
}
