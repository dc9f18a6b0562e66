/*
 * A small table-driven option parser for the subcommands, in the spirit of
 * git's parse-options: each subcommand declares a table of struct opt next to
 * the variables it fills, and one parser handles `-p 1`, `-p1`, `--pid 1`,
 * `--pid=1`, grouped short flags (`-iq`), `--` and positional arguments.
 * Values are checked strictly (the whole string must parse, ranges hold), so
 * `--rate abc` is a usage error rather than 0.
 */
#ifndef SPY_CMD_OPTS_H
#define SPY_CMD_OPTS_H

#include <stdbool.h>
#include <stdio.h>

#include "common/err.h"

enum opt_type {
	OPT_END = 0,
	OPT_BOOL,     /* bool *: set to true */
	OPT_PID,      /* int *: a positive process id */
	OPT_UINT,     /* unsigned *: a non-negative integer */
	OPT_DOUBLE,   /* double *: a non-negative finite number */
	OPT_STRING,   /* const char **: the argument itself */
};

struct opt {
	char short_name;        /* 0 if none */
	const char *long_name;  /* without the leading "--" */
	enum opt_type type;
	void *value;
	const char *argh;       /* name of the argument in help, e.g. "PID" */
	const char *help;
};

enum {
	OPTS_OK = 0,
	OPTS_HELP = 1, /* -h/--help was given: print usage, exit 0 */
};

/*
 * Parse argv[1..argc-1] against opts (terminated by an OPT_END row). Non-option
 * arguments, and everything after "--", are collected in order into
 * rest[0..*nrest-1] (rest must hold argc entries). With stop_at_positional,
 * the first non-option argument ends option parsing (for `-- PROGRAM ARGS`
 * styles). Returns OPTS_OK, OPTS_HELP, or -SPY_EUSAGE with err set.
 */
int opts_parse(const struct opt *opts, int argc, char **argv, char **rest, int *nrest,
	       struct spy_err *err);

/* The -h/--help row every command has; opts_parse answers it itself. */
extern const struct opt opts_help;

/* Print the usage lines, then one line per option (opts_help last), to f. */
void opts_usage(FILE *f, const char *const *usage, const struct opt *opts);

#endif
