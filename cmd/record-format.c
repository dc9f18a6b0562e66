/*
 * Output formats of `spy record` and `spy report`: their names, the
 * format a file name implies, and writing a profile in each.
 * Apart from record.c so that unit tests can link it without the rest of
 * the command.
 */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "cmd/output.h"
#include "cmd/record.h"
#include "common/buf.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

static const struct {
	const char *name;
	enum rec_format f;
	const char *ext;   /* of the default output name, spy-<pid>EXT */
} formats[] = {
	{ "svg", REC_SVG, ".svg" },
	{ "folded", REC_FOLDED, ".folded" },
	{ "table", REC_TABLE, ".txt" },
	{ "speedscope", REC_SPEEDSCOPE, ".speedscope.json" },
	{ "chrome", REC_CHROME, ".trace.json" },
	{ "pprof", REC_PPROF, ".pb.gz" },
	{ "json", REC_JSON, ".json" },
};

bool record_format_parse(const char *name, enum rec_format *out)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (!strcmp(formats[i].name, name)) {
			*out = formats[i].f;
			return true;
		}
	}
	return false;
}

const char *record_format_name(enum rec_format f)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (formats[i].f == f) {
			return formats[i].name;
		}
	}
	return "?";
}

const char *record_format_ext(enum rec_format f)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (formats[i].f == f) {
			return formats[i].ext;
		}
	}
	return ".svg";
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcasecmp(s + n - m, suffix);
}

enum rec_format record_format_from_path(const char *path)
{
	/* Longest suffixes first: ".pb.gz" is pprof, any other ".gz" is folded. */
	static const struct {
		const char *suffix;
		enum rec_format f;
	} exts[] = {
		{ ".speedscope.json", REC_SPEEDSCOPE },
		{ ".chrome.json", REC_CHROME },
		{ ".trace.json", REC_CHROME },
		{ ".pb.gz", REC_PPROF },
		{ ".pprof", REC_PPROF },
		{ ".svg", REC_SVG },
		{ ".folded", REC_FOLDED },
		{ ".collapsed", REC_FOLDED },
		{ ".gz", REC_FOLDED },
		{ ".txt", REC_TABLE },
		{ ".table", REC_TABLE },
		{ ".json", REC_JSON },
	};
	for (size_t i = 0; i < SPY_ARRAY_SIZE(exts); i++) {
		if (ends_with(path, exts[i].suffix)) {
			return exts[i].f;
		}
	}
	return REC_SVG;
}

static int write_table(const struct rec_writer *w, FILE *f, const char *name, struct spy_err *err)
{
	struct fg_table t;
	struct spy_buf b = SPY_BUF_INIT;
	fg_table_init(&t, w->profile, w->table);
	fg_table_render(&t, &b);
	fg_table_release(&t);
	return cmd_output_text(f, &b, name, err);
}

int record_format_write(void *writer, FILE *f, const char *name, struct spy_err *err)
{
	const struct rec_writer *w = writer;
	int rc;
	switch (w->format) {
	case REC_FOLDED:
		return fg_profile_write_folded(w->profile, f, name, err);
	case REC_TABLE:
		return write_table(w, f, name, err);
	case REC_SVG:
		rc = fg_profile_write_svg(w->profile, f, w->svg, err);
		break;
	case REC_JSON:
		rc = fg_profile_write_json(w->profile, f, err);
		break;
	case REC_SPEEDSCOPE:
		rc = fg_profile_write_speedscope(w->profile, f, err);
		break;
	case REC_PPROF:
		rc = fg_profile_write_pprof(w->profile, f, err);
		break;
	case REC_CHROME:
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
