/*
 * Pieces of `spy record` that are pure functions, exposed for unit tests.
 */
#ifndef SPY_CMD_RECORD_H
#define SPY_CMD_RECORD_H

#include <stdbool.h>

enum rec_format {
	REC_SVG = 0,
	REC_FOLDED,
	REC_TABLE,
	REC_SPEEDSCOPE,
	REC_CHROME,
	REC_PPROF,
	REC_JSON,
};

/* Parse a --format name; false if unknown. */
bool record_format_parse(const char *name, enum rec_format *out);
/* The format a file name implies (cli.md: "from extension, else svg"). */
enum rec_format record_format_from_path(const char *path);
const char *record_format_name(enum rec_format f);
/* The extension that implies f, for default output names (".svg", ".pb.gz"). */
const char *record_format_ext(enum rec_format f);
/* Whether this build can write f. */
bool record_format_implemented(enum rec_format f);

#endif
