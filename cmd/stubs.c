/*
 * Subcommands of the contract that this build does not have yet. Each says so
 * on one line and exits 2, so scripts written against the contract fail loudly
 * instead of doing nothing. A command moves to its own file when it is built.
 */
#include <stdio.h>

#include "cmd/cmd.h"

static int not_yet(const char *name)
{
	fprintf(stderr, "spy %s: not implemented yet in this version of spy (see 'spy help')\n", name);
	return 2;
}

int cmd_top(int argc, char **argv)
{
	return not_yet("top");
}

int cmd_diff(int argc, char **argv)
{
	return not_yet("diff");
}
