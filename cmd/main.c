/*
 * spy's entry point: the dispatcher over the table of subcommands
 * (cmd/cli.c, with the one error printer and the mapping from error codes to
 * the exit codes of the CLI contract). Subcommands live one per file
 * (cmd/dump.c, ...).
 */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "common/log.h"

int main(int argc, char **argv)
{
	spy_log_init_from_env();
	if (argc < 2) {
		cmd_usage(stderr);
		return 2;
	}
	const char *name = argv[1];
	if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
		printf("spy %s\n", SPY_VERSION);
		return 0;
	}
	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		cmd_usage(stdout);
		return 0;
	}
	if (!strcmp(name, "help")) {
		if (argc < 3) {
			cmd_usage(stdout);
			return 0;
		}
		const struct cmd_info *c = cmd_find(argv[2]);
		if (!c) {
			return cmd_usage_error(NULL, "unknown command '%s'", argv[2]);
		}
		char *help_argv[] = { argv[2], "--help", NULL };
		return c->fn(2, help_argv);
	}
	const struct cmd_info *c = cmd_find(name);
	if (!c) {
		if (name[0] == '-') {
			return cmd_usage_error(NULL, "unknown option '%s'", name);
		}
		return cmd_usage_error(NULL, "unknown command '%s'", name);
	}
	return c->fn(argc - 1, argv + 1);
}
