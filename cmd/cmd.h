/*
 * cmd: the command line. main.c dispatches through one table to a function
 * per subcommand (one file each), prints the one error line, and maps error
 * codes to the exit codes of the contract (doc/cli.md, shared docs). A
 * subcommand returns an exit code; it prints its own output and returns
 * errors as struct spy_err through cmd_fail().
 */
#ifndef SPY_CMD_CMD_H
#define SPY_CMD_CMD_H

#include <stdio.h>

#include "common/err.h"

struct opt;

int cmd_record(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_agent(int argc, char **argv);

/* The subcommands, in the order `spy help` lists them; ends with a NULL name. */
struct cmd_info {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};
extern const struct cmd_info cmd_table[];
/* `spy`'s own usage lines (NULL-terminated), before the list of commands. */
extern const char *const cmd_top_usage[];
const struct cmd_info *cmd_find(const char *name);
/* The top-level usage: usage lines and the commands with their summaries. */
void cmd_usage(FILE *f);

/* --rate's ceiling for every sampling command (cli.md): past it the
 * period is shorter than one sample takes, a busy loop, not sampling. */
#define CMD_MAX_RATE_HZ 1000000.0

/* Print err as the one error line ("spy: msg (remedy)") and return its exit code. */
int cmd_fail(const struct spy_err *err);
/* Print a usage error for command cmd and return 2. */
int cmd_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The hint of a command that runs a program (record, top), after an unexpected argument. */
#define CMD_PROGRAM_HINT " (a program to run goes after '--')"
/*
 * Parse command cmd's options (opts_parse, cmd/opts.h) and answer --help,
 * bad options and too many arguments the same way for every command: the
 * first npos arguments that are not options go to pos[0..npos) (NULL where
 * fewer were given); one more is an "unexpected argument", said with hint
 * (NULL: none) after it. Returns -1 to go on, else the exit code to
 * return: 0 once the help is printed on stdout, 2 once the one error line
 * (naming --help) is printed on stderr.
 */
int cmd_parse_options(const char *cmd, const char *const *usage, const struct opt *opts,
		      int argc, char **argv, const char **pos, int npos, const char *hint);

/*
 * When set, --help calls it with the command's usage lines and option
 * table instead of printing them: tools/options-dump.c reads every
 * command's table this way at build time. spy itself never sets it.
 */
extern void (*cmd_help_hook)(const char *cmd, const char *const *usage, const struct opt *opts);

#endif
