/*
 * Output formats of `spy record`: their names, which are built, and the
 * format a file name implies. Apart from record.c so that unit tests can
 * link it without the rest of the command.
 */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "cmd/record.h"
#include "common/util.h"

static const struct {
	const char *name;
	enum rec_format f;
	bool implemented;
	const char *ext;   /* of the default output name, spy-<pid>EXT */
} formats[] = {
	{ "svg", REC_SVG, true, ".svg" },
	{ "folded", REC_FOLDED, true, ".folded" },
	{ "table", REC_TABLE, true, ".txt" },
	{ "speedscope", REC_SPEEDSCOPE, true, ".speedscope.json" },
	{ "chrome", REC_CHROME, true, ".trace.json" },
	{ "pprof", REC_PPROF, true, ".pb.gz" },
	{ "json", REC_JSON, true, ".json" },
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

bool record_format_implemented(enum rec_format f)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(formats); i++) {
		if (formats[i].f == f) {
			return formats[i].implemented;
		}
	}
	return false;
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
