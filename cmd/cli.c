/*
 * What every command shares: the table of commands, the top-level usage,
 * the one error printer, and the answers to --help, to a bad option and
 * to an argument too many.
 * main.c dispatches through the table; tools/options-dump.c walks the same
 * table at build time to write the man pages and completions, so what
 * --help prints and what man shows come from the same rows.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "common/term.h"
#include "common/util.h"

const struct cmd_info cmd_table[] = {
	{ "record", cmd_record, "sample a process and write a profile (flame graph, table, ...)" },
	{ "dump", cmd_dump, "print the current Python stack of every thread" },
	{ "top", cmd_top, "live view of the functions using the most time" },
	{ "report", cmd_report, "re-render a saved profile in another format" },
	{ "diff", cmd_diff, "compare two saved profiles (CI regression gate)" },
	{ "agent", cmd_agent, "profile every Python process on the host, continuously, into Pyroscope" },
	{ NULL, NULL, NULL },
};

const char *const cmd_top_usage[] = {
	"spy COMMAND [OPTIONS]",
	"spy --version | spy help [COMMAND] | spy COMMAND --help",
	NULL,
};

void (*cmd_help_hook)(const char *cmd, const char *const *usage, const struct opt *opts);

void cmd_usage(FILE *f)
{
	for (int i = 0; cmd_top_usage[i]; i++) {
		fprintf(f, "%s %s\n", i == 0 ? "usage:" : "      ", cmd_top_usage[i]);
	}
	fprintf(f, "\ncommands:\n");
	for (const struct cmd_info *c = cmd_table; c->name; c++) {
		fprintf(f, "    %-8s %s\n", c->name, c->summary);
	}
}

const struct cmd_info *cmd_find(const char *name)
{
	for (const struct cmd_info *c = cmd_table; c->name; c++) {
		if (!strcmp(c->name, name)) {
			return c;
		}
	}
	return NULL;
}

int cmd_fail(const struct spy_err *err)
{
	/* Messages quote names from targets and files: escaped, one line. */
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_adds(&b, "spy: ");
	spy_term_adds(&b, err->msg);
	if (err->remedy[0]) {
		spy_buf_adds(&b, "; ");
		spy_term_adds(&b, err->remedy);
	}
	fprintf(stderr, "%s\n", b.buf);
	spy_buf_release(&b);
	return spy_err_exit_code(err->code);
}

int cmd_parse_options(const char *cmd, const char *const *usage, const struct opt *opts,
		      int argc, char **argv, const char **pos, int npos, const char *hint)
{
	struct spy_err err = SPY_ERR_INIT;
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	int nrest = 0;
	int rc = opts_parse(opts, argc, argv, rest, &nrest, &err);
	for (int i = 0; i < npos; i++) {
		pos[i] = i < nrest ? rest[i] : NULL;
	}
	const char *extra = nrest > npos ? rest[npos] : NULL;
	free(rest);
	if (rc == OPTS_HELP) {
		if (cmd_help_hook) {
			cmd_help_hook(cmd, usage, opts);
		} else {
			opts_usage(stdout, usage, opts);
		}
		return 0;
	}
	if (rc < 0) {
		/* One line, as every error (cli.md); it names --help. */
		return cmd_usage_error(cmd, "%s", err.msg);
	}
	if (extra) {
		return cmd_usage_error(cmd, "unexpected argument '%s'%s", extra, hint ? hint : "");
	}
	return -1;
}

int cmd_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	struct spy_buf b = SPY_BUF_INIT;
	va_start(ap, fmt);
	spy_term_vaddf(&b, fmt, ap);
	va_end(ap);
	fprintf(stderr, "spy%s%s: %s", cmd ? " " : "", cmd ? cmd : "", b.buf);
	spy_buf_release(&b);
	if (cmd) {
		fprintf(stderr, " (see 'spy %s --help')\n", cmd);
	} else {
		fprintf(stderr, " (see 'spy help')\n");
	}
	return 2;
}
