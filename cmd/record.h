/*
 * Pieces of `spy record` that are pure functions, exposed for unit tests.
 */
#ifndef SPY_CMD_RECORD_H
#define SPY_CMD_RECORD_H

#include <stdbool.h>
#include <stdio.h>

#include "common/err.h"

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

/*
 * Writing a profile in any format, for record and report alike: what it is
 * written from, and a cmd_write_fn (cmd/output.h) taking a struct
 * rec_writer as its context.
 */
struct fg_profile;
struct fg_timeline;
struct fg_table_opts;
struct fg_svg_opts;
struct rec_writer {
	enum rec_format format;
	const struct fg_profile *profile;
	const struct fg_timeline *timeline;  /* chrome; NULL lays the stacks end to end */
	const struct fg_table_opts *table;   /* table */
	const struct fg_svg_opts *svg;       /* svg */
};
int record_format_write(void *writer, FILE *f, const char *name, struct spy_err *err);

#endif
