/*
 * Fuzzing the command lines: every command's option table (the rows its
 * --help prints, caught once through cmd_help_hook as tools/options-dump
 * catches them) under cmd/opts.c's parser, with options repeated, joined
 * (-iqp1, --name=value), cut short of their values, and anything else the
 * bytes say. The tables are copied with their value pointers pointed at
 * the harness's own slots, so a parse never touches a command's state.
 * Whatever the bytes:
 *  - the parse ends in OPTS_OK, OPTS_HELP or -SPY_EUSAGE, the last with a
 *    message, which the terminal escaper turns into one clean line as
 *    cmd_usage_error would;
 *  - every argument left over is one of argv's own, in order, and no more
 *    than argc;
 *  - no table holds a row without a place for its value, nor one for -h
 *    or --help, which the parser answers itself (the agent's table once
 *    did: `spy agent -hh` wrote through its NULL).
 * A violation aborts. Input: byte 0 picks the command, the rest is its
 * arguments separated by NUL bytes (at most MAX_ARGS of them).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "common/buf.h"
#include "common/term.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CMDS 16
#define MAX_ROWS 96
#define MAX_ARGS 64

struct table {
	const char *name;
	struct opt rows[MAX_ROWS + 1];
	size_t n;
};

static struct table tables[MAX_CMDS];
static size_t ntables;

static void catch_table(const char *cmd, const char *const *usage, const struct opt *opts)
{
	(void)usage;
	if (ntables >= MAX_CMDS) {
		abort();
	}
	struct table *t = &tables[ntables++];
	t->name = cmd;
	for (const struct opt *o = opts; o->type != OPT_END; o++) {
		if (t->n >= MAX_ROWS || !o->value || o->short_name == 'h' ||
		    (o->long_name && !strcmp(o->long_name, "help"))) {
			abort();
		}
		t->rows[t->n++] = *o;
	}
}

/* Each command's table, once: its rows' names and help are literals, they outlive the call. */
static void catch_tables(void)
{
	cmd_help_hook = catch_table;
	for (const struct cmd_info *c = cmd_table; c->name; c++) {
		char *argv[] = { (char *)c->name, "--help", NULL };
		size_t before = ntables;
		if (c->fn(2, argv) != 0 || ntables != before + 1) {
			abort();
		}
	}
	cmd_help_hook = NULL;
}

/* The values a parse writes, one slot of each kind a row. */
struct slots {
	bool b[MAX_ROWS];
	int i[MAX_ROWS];
	unsigned u[MAX_ROWS];
	double d[MAX_ROWS];
	const char *s[MAX_ROWS];
	struct opt_strings l[MAX_ROWS];
	char **p[MAX_ROWS];
};

static void point_at(struct opt *rows, size_t n, struct slots *v)
{
	for (size_t k = 0; k < n; k++) {
		switch (rows[k].type) {
		case OPT_BOOL: rows[k].value = &v->b[k]; break;
		case OPT_PID: rows[k].value = &v->i[k]; break;
		case OPT_UINT: rows[k].value = &v->u[k]; break;
		case OPT_DOUBLE: rows[k].value = &v->d[k]; break;
		case OPT_STRING:
		case OPT_OPTCOUNT: rows[k].value = &v->s[k]; break;
		case OPT_STRINGS: rows[k].value = &v->l[k]; break;
		case OPT_PROGRAM: rows[k].value = &v->p[k]; break;
		case OPT_END: abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ntables) {
		catch_tables();
	}
	if (size < 1) {
		return 0;
	}
	const struct table *t = &tables[data[0] % ntables];
	/* The arguments: NUL-separated, each its own allocation so ASan sees a read past one. */
	char *argv[MAX_ARGS + 2] = { (char *)t->name };
	int argc = 1;
	size_t at = 1;
	while (at < size && argc <= MAX_ARGS) {
		const uint8_t *end = memchr(data + at, 0, size - at);
		size_t len = end ? (size_t)(end - (data + at)) : size - at;
		argv[argc] = malloc(len + 1);
		if (!argv[argc]) {
			abort();
		}
		memcpy(argv[argc], data + at, len);
		argv[argc++][len] = 0;
		at += len + 1;
	}
	argv[argc] = NULL;

	struct opt rows[MAX_ROWS + 1];
	memcpy(rows, t->rows, sizeof(rows));
	struct slots v;
	memset(&v, 0, sizeof(v));
	point_at(rows, t->n, &v);
	char *rest[MAX_ARGS + 2];
	int nrest = -1;
	struct spy_err err = SPY_ERR_INIT;
	int rc = opts_parse(rows, argc, argv, rest, &nrest, &err);
	if (rc != OPTS_OK && rc != OPTS_HELP && rc != -SPY_EUSAGE) {
		abort();
	}
	if (nrest < 0 || nrest > argc) {
		abort();
	}
	/* Leftovers are argv's own arguments, in argv's order. */
	int last = 0;
	for (int k = 0; k < nrest; k++) {
		int found = 0;
		for (int j = last + 1; j < argc && !found; j++) {
			if (rest[k] == argv[j]) {
				found = last = j;
			}
		}
		if (!found) {
			abort();
		}
	}
	for (size_t k = 0; k < t->n; k++) {
		if (rows[k].type == OPT_PROGRAM && v.p[k] && (v.p[k] < argv + 1 || v.p[k] > argv + argc)) {
			abort();
		}
	}
	if (rc == -SPY_EUSAGE) {
		if (!err.msg[0]) {
			abort();
		}
		/* What cmd_usage_error prints: one line, nothing a terminal acts on. */
		struct spy_buf b = SPY_BUF_INIT;
		spy_term_adds(&b, err.msg);
		for (size_t k = 0; k < b.len; k++) {
			unsigned char c = (unsigned char)b.buf[k];
			if (c < 0x20 || c == 0x7f) {
				abort();
			}
		}
		spy_buf_release(&b);
	}
	for (size_t k = 0; k < t->n; k++) {
		free(v.l[k].v);
	}
	for (int k = 1; k < argc; k++) {
		free(argv[k]);
	}
	return 0;
}
