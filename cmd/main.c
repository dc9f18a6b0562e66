/*
 * spy's entry point: one table of subcommands, a dispatcher, the single place
 * that prints errors, and the mapping from error codes to the exit codes of
 * the CLI contract. Subcommands live one per file (cmd/dump.c, ...).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "common/log.h"
#include "common/term.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command commands[] = {
	{ "record", cmd_record, "sample a process and write a profile (flame graph, table, ...)" },
	{ "dump", cmd_dump, "print the current Python stack of every thread" },
	{ "top", cmd_top, "live view of the functions using the most time" },
	{ "report", cmd_report, "re-render a saved profile in another format" },
	{ "diff", cmd_diff, "compare two saved profiles (CI regression gate)" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: spy COMMAND [OPTIONS]\n"
		   "       spy --version | spy help [COMMAND] | spy COMMAND --help\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		fprintf(f, "    %-8s %s\n", commands[i].name, commands[i].summary);
	}
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
		      int argc, char **argv, char **rest, int *nrest)
{
	struct spy_err err = SPY_ERR_INIT;
	int rc = opts_parse(opts, argc, argv, rest, nrest, &err);
	if (rc == OPTS_HELP) {
		opts_usage(stdout, usage, opts);
		return 0;
	}
	if (rc < 0) {
		/* One line, as every error (cli.md); it names --help. */
		return cmd_usage_error(cmd, "%s", err.msg);
	}
	return -1;
}

int cmd_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	struct spy_buf msg = SPY_BUF_INIT, b = SPY_BUF_INIT;
	va_start(ap, fmt);
	spy_buf_vaddf(&msg, fmt, ap);
	va_end(ap);
	spy_term_escape(&b, msg.buf, msg.len, (size_t)-1, NULL);
	fprintf(stderr, "spy%s%s: %s", cmd ? " " : "", cmd ? cmd : "", b.buf);
	spy_buf_release(&msg);
	spy_buf_release(&b);
	if (cmd) {
		fprintf(stderr, " (see 'spy %s --help')\n", cmd);
	} else {
		fprintf(stderr, " (see 'spy help')\n");
	}
	return 2;
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (!strcmp(commands[i].name, name)) {
			return &commands[i];
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	spy_log_init_from_env();
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *name = argv[1];
	if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
		printf("spy %s\n", SPY_VERSION);
		return 0;
	}
	if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(name, "help")) {
		if (argc < 3) {
			usage(stdout);
			return 0;
		}
		const struct command *c = find_command(argv[2]);
		if (!c) {
			return cmd_usage_error(NULL, "unknown command '%s'", argv[2]);
		}
		char *help_argv[] = { argv[2], "--help", NULL };
		return c->fn(2, help_argv);
	}
	const struct command *c = find_command(name);
	if (!c) {
		if (name[0] == '-') {
			return cmd_usage_error(NULL, "unknown option '%s'", name);
		}
		return cmd_usage_error(NULL, "unknown command '%s'", name);
	}
	return c->fn(argc - 1, argv + 1);
}
