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
#include <stddef.h>
#include <stdio.h>

#include "common/err.h"

enum opt_type {
	OPT_END = 0,
	OPT_BOOL,     /* bool *: set to true */
	OPT_PID,      /* int *: a positive process id */
	OPT_UINT,     /* unsigned *: a non-negative integer */
	OPT_DOUBLE,   /* double *: a non-negative finite number */
	OPT_STRING,   /* const char **: the argument itself */
	OPT_STRINGS,  /* struct opt_strings *: each use's argument, in order */
	/*
	 * const char **: an optional count. "--name=V" always gives a value,
	 * "--name V" only when V is a whole number, and a bare "--name" sets
	 * "" (given, no count). Long form only for the optional part.
	 */
	OPT_OPTCOUNT,
	/*
	 * char ***: not an option but where a program to run begins: "--"
	 * ends option parsing and *value becomes the arguments after it (a
	 * NULL-terminated tail of argv, maybe empty); left alone without
	 * "--". Not shown in --help: the usage lines show the program.
	 */
	OPT_PROGRAM,
};

struct opt {
	char short_name;        /* 0 if none */
	const char *long_name;  /* without the leading "--" */
	enum opt_type type;
	void *value;
	const char *argh;       /* name of the argument in help, e.g. "PID" */
	const char *help;
};

/* An OPT_STRINGS option's values; v points into argv, and is the caller's
 * to free (NULL when the option was not given). */
struct opt_strings {
	const char **v;
	size_t n, alloc;
};

enum {
	OPTS_OK = 0,
	OPTS_HELP = 1, /* -h/--help was given: print usage, exit 0 */
};

/*
 * Parse argv[1..argc-1] (argv[argc] NULL, as main's) against opts, which
 * end with an OPT_END row. Non-option arguments, and everything after "--"
 * unless opts has an OPT_PROGRAM row, are collected in order into
 * rest[0..*nrest-1] (rest must hold argc entries). Returns OPTS_OK,
 * OPTS_HELP, or -SPY_EUSAGE with err set.
 */
int opts_parse(const struct opt *opts, int argc, char **argv, char **rest, int *nrest,
	       struct spy_err *err);

/* The -h/--help row every command has; opts_parse answers it itself. */
extern const struct opt opts_help;

/* Print the usage lines, then one line per option (opts_help last), to f. */
void opts_usage(FILE *f, const char *const *usage, const struct opt *opts);

#endif
