/* Unit tests for cmd/: the option parser and the interpreter-path helpers. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/opts.h"
#include "profiler/internal.h"
#include "tests/lib/check.h"

struct vals {
	int pid;
	unsigned table;
	double rate;
	bool idle, quiet;
	const char *out;
};

static int parse(struct vals *v, int argc, char **argv, char **rest, int *nrest, struct spy_err *err)
{
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &v->pid, "PID", "pid" },
		{ 'r', "rate", OPT_DOUBLE, &v->rate, "HZ", "rate" },
		{ 0, "table", OPT_UINT, &v->table, "N", "table" },
		{ 'i', "idle", OPT_BOOL, &v->idle, NULL, "idle" },
		{ 'q', "quiet", OPT_BOOL, &v->quiet, NULL, "quiet" },
		{ 'o', "output", OPT_STRING, &v->out, "FILE", "out" },
		{ 0 },
	};
	*v = (struct vals){ 0 };
	return opts_parse(opts, argc, argv, rest, nrest, err);
}

#define ARGV(...) ((char *[]){ "cmd", __VA_ARGS__, NULL })
#define ARGC(...) ((int)(sizeof((char *[]){ "cmd", __VA_ARGS__ }) / sizeof(char *)))
#define PARSE(...) parse(&v, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), rest, &nrest, &err)

static void test_forms(void)
{
	struct vals v;
	struct spy_err err = SPY_ERR_INIT;
	char *rest[16];
	int nrest;

	CHECK_INT(PARSE("--pid", "42"), OPTS_OK);
	CHECK_INT(v.pid, 42);
	CHECK_INT(PARSE("--pid=43"), OPTS_OK);
	CHECK_INT(v.pid, 43);
	CHECK_INT(PARSE("-p", "44"), OPTS_OK);
	CHECK_INT(v.pid, 44);
	CHECK_INT(PARSE("-p45"), OPTS_OK);
	CHECK_INT(v.pid, 45);
	CHECK_INT(PARSE("-iq"), OPTS_OK);
	CHECK(v.idle && v.quiet);
	CHECK_INT(PARSE("-iqp", "46"), OPTS_OK);
	CHECK(v.idle && v.quiet);
	CHECK_INT(v.pid, 46);
	CHECK_INT(PARSE("-r", "99.5", "--table", "7", "-o", "x.svg"), OPTS_OK);
	CHECK(v.rate == 99.5);
	CHECK_INT(v.table, 7);
	CHECK_STR(v.out, "x.svg");
	CHECK_INT(PARSE("a", "-i", "b", "--", "-q", "c"), OPTS_OK);
	CHECK_INT(nrest, 4);
	CHECK_STR(rest[0], "a");
	CHECK_STR(rest[1], "b");
	CHECK_STR(rest[2], "-q");
	CHECK_STR(rest[3], "c");
	CHECK(v.idle && !v.quiet);
	CHECK_INT(PARSE("--help"), OPTS_HELP);
	CHECK_INT(PARSE("-p", "1", "-h"), OPTS_HELP);
	/* -h inside a group is help too; once it crashed the agent, whose table held the row. */
	CHECK_INT(PARSE("-hh"), OPTS_HELP);
	CHECK_INT(PARSE("-ih"), OPTS_HELP);
	CHECK(v.idle);
	CHECK_INT(PARSE("-h="), OPTS_HELP);
	CHECK_INT(PARSE("-ph"), -SPY_EUSAGE);   /* -p's value, "h", is not a pid */
}

static void test_errors(void)
{
	struct vals v;
	struct spy_err err = SPY_ERR_INIT;
	char *rest[16];
	int nrest;

	CHECK_INT(PARSE("--bogus"), -SPY_EUSAGE);
	CHECK_STR(err.msg, "unknown option '--bogus'");
	CHECK_INT(PARSE("--help=yes"), -SPY_EUSAGE);
	CHECK_STR(err.msg, "option --help takes no value");
	CHECK_INT(PARSE("-x"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--pid"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--pid", "abc"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--pid", "0"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--pid", "-5"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--pid", "12x"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--pid", "99999999999"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--rate", "abc"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--rate", "-1"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--rate", "inf"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--rate", "nan"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--table", "-3"), -SPY_EUSAGE);
	CHECK_INT(PARSE("--idle=1"), -SPY_EUSAGE);
	CHECK_INT(PARSE("-o"), -SPY_EUSAGE);
}

/* A table like record's: a repeatable option, an optional count and a program after "--". */
struct rvals {
	struct opt_strings labels;
	const char *table, *out;
	bool quiet;
	char **program;
};

static int rparse(struct rvals *v, int argc, char **argv, char **rest, int *nrest, struct spy_err *err)
{
	const struct opt opts[] = {
		{ 0, "label", OPT_STRINGS, &v->labels, "K=V", "label" },
		{ 0, "table", OPT_OPTCOUNT, &v->table, "[N]", "table" },
		{ 'o', "output", OPT_STRING, &v->out, "FILE", "out" },
		{ 'q', "quiet", OPT_BOOL, &v->quiet, NULL, "quiet" },
		{ 0, NULL, OPT_PROGRAM, &v->program, NULL, NULL },
		{ 0 },
	};
	free(v->labels.v);
	*v = (struct rvals){ 0 };
	return opts_parse(opts, argc, argv, rest, nrest, err);
}

#define RPARSE(...) rparse(&r, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), rest, &nrest, &err)

static void test_program_and_lists(void)
{
	struct rvals r = { 0 };
	struct spy_err err = SPY_ERR_INIT;
	char *rest[16];
	int nrest;

	/* Repeated, in both forms, in order. */
	CHECK_INT(RPARSE("--label", "a=1", "-q", "--label=b=2", "--label", "c"), OPTS_OK);
	CHECK_INT(r.labels.n, 3);
	CHECK_STR(r.labels.v[0], "a=1");
	CHECK_STR(r.labels.v[1], "b=2");
	CHECK_STR(r.labels.v[2], "c");
	CHECK(r.quiet);
	CHECK(r.program == NULL);
	CHECK_INT(RPARSE("--label"), -SPY_EUSAGE);

	/* Everything after "--" is the program, options of ours included;
	 * a positional before it stays in rest for the caller to refuse. */
	/* A named argv: r.program points into it, so it must outlive the call
	 * (RPARSE's compound literal ends with its statement). */
	char *pargv[] = { "test", "x", "-q", "--", "python", "-q", "--label", "--", "-h", NULL };
	CHECK_INT(rparse(&r, 9, pargv, rest, &nrest, &err), OPTS_OK);
	CHECK_INT(nrest, 1);
	CHECK_STR(rest[0], "x");
	CHECK(r.quiet);
	CHECK_INT(r.labels.n, 0);
	CHECK(r.program != NULL);
	if (r.program) {
		CHECK_STR(r.program[0], "python");
		CHECK_STR(r.program[1], "-q");
		CHECK_STR(r.program[3], "--");
		CHECK_STR(r.program[4], "-h");
		CHECK(r.program[5] == NULL);
	}
	char *eargv[] = { "test", "-q", "--", NULL };
	CHECK_INT(rparse(&r, 3, eargv, rest, &nrest, &err), OPTS_OK);
	CHECK(r.program != NULL && r.program[0] == NULL);
	CHECK_INT(RPARSE("--program"), -SPY_EUSAGE); /* the row has no name to use */

	/* The optional count: taken apart only when it is a number. */
	CHECK_INT(RPARSE("--table"), OPTS_OK);
	CHECK_STR(r.table, "");
	CHECK_INT(RPARSE("--table", "7", "-q"), OPTS_OK);
	CHECK_STR(r.table, "7");
	CHECK(r.quiet);
	CHECK_INT(RPARSE("--table=abc"), OPTS_OK);
	CHECK_STR(r.table, "abc");
	CHECK_INT(RPARSE("--table", "abc"), OPTS_OK);
	CHECK_STR(r.table, "");
	CHECK_INT(nrest, 1);
	CHECK_STR(rest[0], "abc");
	char *targv[] = { "test", "--table", "-o", "f", "--", "p", NULL };
	CHECK_INT(rparse(&r, 6, targv, rest, &nrest, &err), OPTS_OK);
	CHECK_STR(r.table, "");
	CHECK_STR(r.out, "f");
	CHECK(r.program && !strcmp(r.program[0], "p"));
	char *nargv[] = { "test", "--table", "--", "9", NULL };
	CHECK_INT(rparse(&r, 4, nargv, rest, &nrest, &err), OPTS_OK);
	CHECK_STR(r.table, "");
	CHECK(r.program && !strcmp(r.program[0], "9"));
	free(r.labels.v);
}

static void test_paths(void)
{
	CHECK_INT(prof_version_from_path("/x/lib/libpython3.11.so.1.0"), 0x030b0000);
	CHECK_INT(prof_version_from_path("/usr/bin/python3.11"), 0x030b0000);
	CHECK_INT(prof_version_from_path("/x/libpython3.6m.so.1.0"), 0x03060000);
	CHECK_INT(prof_version_from_path("/x/bin/python2.7"), 0x02070000);
	CHECK_INT(prof_version_from_path("/usr/bin/python3"), 0);
	CHECK_INT(prof_version_from_path("/usr/bin/sleep"), 0);
	CHECK_INT(prof_version_from_path("/opt/python3.11/bin/uwsgi"), 0);
	CHECK(spy_is_libpython("/a/b/libpython3.13.so.1.0"));
	CHECK(spy_is_libpython("/a/b/libpython2.7.so.1.0"));
	CHECK(spy_is_libpython("/a/b/libpython3.6m.so.1.0"));
	CHECK(!spy_is_libpython("/a/b/libpython3.so"));
	CHECK(!spy_is_libpython("/a/libpython3.11/python3.11"));
	CHECK(!spy_is_libpython("/a/b/mylibpython3.11.so"));
}

int main(void)
{
	test_forms();
	test_errors();
	test_program_and_lists();
	test_paths();
	return check_done();
}
