/*
 * cmd: the command line. main.c dispatches through one table to a function
 * per subcommand (one file each), prints the one error line, and maps error
 * codes to the exit codes of the contract (doc/cli.md, shared docs). A
 * subcommand returns an exit code; it prints its own output and returns
 * errors as struct spy_err through cmd_fail().
 */
#ifndef SPY_CMD_CMD_H
#define SPY_CMD_CMD_H

#include "common/err.h"

int cmd_record(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_diff(int argc, char **argv);

/* Print err as the one error line ("spy: msg (remedy)") and return its exit code. */
int cmd_fail(const struct spy_err *err);
/* Print a usage error for command cmd and return 2. */
int cmd_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
