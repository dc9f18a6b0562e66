/*
 * Writing a command's output file safely: into a temporary beside it,
 * renamed over it once complete, so a failed run leaves the old file whole.
 * Shared by report and diff.
 */
#ifndef SPY_CMD_OUTPUT_H
#define SPY_CMD_OUTPUT_H

#include <stdio.h>

#include "common/err.h"

/* Writes the document to f; name is for messages. 0 or -SPY_E* with err set. */
typedef int (*cmd_write_fn)(void *ctx, FILE *f, const char *name, struct spy_err *err);

/*
 * Write path through fn. An existing path that is not a regular file
 * (/dev/stdout, a FIFO) is written in place; a directory is an error.
 * Errors are -SPY_EIO "cannot write PATH: why".
 */
int cmd_output_file(const char *path, cmd_write_fn fn, void *ctx, struct spy_err *err);

#endif
