/*
 * options-dump: a build-time helper (never installed) that prints spy's
 * command table and every command's usage lines and option rows, the very
 * rows --help prints, one per line with tab-separated fields:
 *
 *   version VERSION
 *   usage   spy|COMMAND  LINE
 *   command NAME  SUMMARY
 *   option  COMMAND  SHORT  LONG  TYPE  ARGH  HELP     (SHORT/ARGH "" if none)
 *
 * tools/gen-docs turns this into the man pages and shell completions. It
 * runs each command as `spy COMMAND --help` would, with cmd_help_hook
 * catching the table instead of printing it: no second list of options
 * exists anywhere to drift from the one the parser uses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"

static int caught;

static const char *field(const char *s)
{
	if (!s) {
		return "";
	}
	/* A tab or newline would break the line format: refuse, loudly. */
	if (strpbrk(s, "\t\n")) {
		fprintf(stderr, "options-dump: tab or newline in \"%s\"\n", s);
		exit(1);
	}
	return s;
}

static const char *type_name(enum opt_type t)
{
	switch (t) {
	case OPT_BOOL: return "bool";
	case OPT_PID: return "pid";
	case OPT_UINT: return "uint";
	case OPT_DOUBLE: return "double";
	case OPT_STRING: return "string";
	case OPT_STRINGS: return "string";
	case OPT_OPTCOUNT: return "string";
	case OPT_PROGRAM: break;
	case OPT_END: break;
	}
	fprintf(stderr, "options-dump: unknown option type %d\n", (int)t);
	exit(1);
}

static void print_option(const char *cmd, const struct opt *o)
{
	char s[2] = { o->short_name, 0 };
	printf("option\t%s\t%s\t%s\t%s\t", cmd, s, field(o->long_name), type_name(o->type));
	printf("%s\t%s\n", field(o->argh), field(o->help));
}

static void catch_help(const char *cmd, const char *const *usage, const struct opt *opts)
{
	for (int i = 0; usage[i]; i++) {
		printf("usage\t%s\t%s\n", cmd, field(usage[i]));
	}
	for (const struct opt *o = opts; o->type != OPT_END; o++) {
		if (o->type != OPT_PROGRAM) {
			print_option(cmd, o);
		}
	}
	print_option(cmd, &opts_help);
	caught++;
}

int main(void)
{
	printf("version\t%s\n", SPY_VERSION);
	for (int i = 0; cmd_top_usage[i]; i++) {
		printf("usage\tspy\t%s\n", field(cmd_top_usage[i]));
	}
	cmd_help_hook = catch_help;
	for (const struct cmd_info *c = cmd_table; c->name; c++) {
		printf("command\t%s\t%s\n", field(c->name), field(c->summary));
		char *argv[] = { (char *)c->name, "--help", NULL };
		int before = caught;
		int rc = c->fn(2, argv);
		if (rc != 0 || caught != before + 1) {
			fprintf(stderr, "options-dump: 'spy %s --help' did not go through cmd_parse_options\n",
				c->name);
			return 1;
		}
	}
	return fflush(stdout) ? 1 : 0;
}
