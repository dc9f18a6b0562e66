/*
 * Writing a command's output file safely, the one way spy touches the file
 * system for its outputs (record, report and diff): into a temporary
 * beside it, renamed over it once complete, so a failed run leaves the old
 * file whole; never through a link or special file someone else planted in
 * a shared directory; permissions set by descriptor (0600 as root). See
 * output.c for the policy.
 */
#ifndef SPY_CMD_OUTPUT_H
#define SPY_CMD_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "common/err.h"

/* Writes the document to f; name is for messages. 0 or -SPY_E* with err set. */
typedef int (*cmd_write_fn)(void *ctx, FILE *f, const char *name, struct spy_err *err);

/*
 * In two steps, for record, which proves the output writable before it
 * spends a minute sampling: cmd_output_open() creates the temporary beside
 * path (or notes that an existing non-regular path, /dev/stdout or a FIFO,
 * is written in place; a directory is an error), cmd_output_commit()
 * writes through fn and renames the temporary over path (a link at path
 * is replaced, not followed; a FIFO or device is written through the
 * descriptor opened at the start, never reopened by name), and
 * cmd_output_abandon() removes the temporary of an output never committed
 * (idempotent; commit calls it too). path must outlive o. Errors are
 * -SPY_EIO "cannot write PATH: why". The path "-" is standard output
 * (o->is_stdout; o->path is then CMD_OUTPUT_STDOUT_NAME), for every format.
 */
#define CMD_OUTPUT_STDOUT_NAME "<stdout>"
struct cmd_output {
	const char *path;
	bool in_place;
	bool is_stdout;
	char *tmp;
	int fd;
	bool unread_fifo;   /* a FIFO opened with no reader yet (see cmd_output_commit) */
};
int cmd_output_open(struct cmd_output *o, const char *path, struct spy_err *err);
int cmd_output_commit(struct cmd_output *o, cmd_write_fn fn, void *ctx, struct spy_err *err);
void cmd_output_abandon(struct cmd_output *o);

/* Write a rendered text to f and release it; -SPY_EIO on a short write. */
struct spy_buf;
int cmd_output_text(FILE *f, struct spy_buf *text, const char *name, struct spy_err *err);

/* Both steps at once ("-": standard output). */
int cmd_output_file(const char *path, cmd_write_fn fn, void *ctx, struct spy_err *err);

#endif
