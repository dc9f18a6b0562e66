/*
 * The option parser behind every subcommand (see opts.h). It never exits or
 * prints: errors come back as SPY_EUSAGE in a spy_err, and cmd/main.c decides
 * how to show them, so the parser is unit-testable.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/opts.h"
#include "common/util.h"

static int describe(const struct opt *o, char *buf, size_t n)
{
	if (o->long_name) {
		return snprintf(buf, n, "--%s", o->long_name);
	}
	return snprintf(buf, n, "-%c", o->short_name);
}

static int set_value(const struct opt *o, const char *arg, struct spy_err *err)
{
	char name[64];
	describe(o, name, sizeof(name));
	char *end = NULL;
	switch (o->type) {
	case OPT_PID: {
		errno = 0;
		long v = strtol(arg, &end, 10);
		if (errno || end == arg || *end || v <= 0 || v > INT_MAX) {
			return spy_err_set(err, SPY_EUSAGE, "option %s: '%s' is not a valid process id", name, arg);
		}
		*(int *)o->value = (int)v;
		return 0;
	}
	case OPT_UINT: {
		errno = 0;
		if (arg[0] == '-') {
			return spy_err_set(err, SPY_EUSAGE, "option %s: '%s' must not be negative", name, arg);
		}
		unsigned long v = strtoul(arg, &end, 10);
		if (errno || end == arg || *end || v > UINT_MAX) {
			return spy_err_set(err, SPY_EUSAGE, "option %s: '%s' is not a whole number", name, arg);
		}
		*(unsigned *)o->value = (unsigned)v;
		return 0;
	}
	case OPT_DOUBLE: {
		errno = 0;
		double v = strtod(arg, &end);
		if (errno || end == arg || *end || !isfinite(v)) {
			return spy_err_set(err, SPY_EUSAGE, "option %s: '%s' is not a number", name, arg);
		}
		if (v < 0) {
			return spy_err_set(err, SPY_EUSAGE, "option %s: '%s' must not be negative", name, arg);
		}
		*(double *)o->value = v;
		return 0;
	}
	case OPT_STRING:
	case OPT_OPTCOUNT:
		*(const char **)o->value = arg;
		return 0;
	case OPT_STRINGS: {
		struct opt_strings *l = o->value;
		SPY_GROW(l->v, l->alloc, l->n + 1);
		l->v[l->n++] = arg;
		return 0;
	}
	case OPT_BOOL:
	case OPT_PROGRAM:
	case OPT_END:
		break;
	}
	SPY_BUG("set_value on option type %d", (int)o->type);
}

static const struct opt *find_long(const struct opt *opts, const char *name, size_t len)
{
	for (const struct opt *o = opts; o->type != OPT_END; o++) {
		if (o->long_name && strlen(o->long_name) == len && !strncmp(o->long_name, name, len)) {
			return o;
		}
	}
	return NULL;
}

static const struct opt *find_short(const struct opt *opts, char c)
{
	for (const struct opt *o = opts; o->type != OPT_END; o++) {
		if (o->short_name == c) {
			return o;
		}
	}
	return NULL;
}

static const struct opt *find_type(const struct opt *opts, enum opt_type type)
{
	for (const struct opt *o = opts; o->type != OPT_END; o++) {
		if (o->type == type) {
			return o;
		}
	}
	return NULL;
}

/* Whether s is a whole number: what an optional value left apart may be. */
static bool is_count(const char *s)
{
	size_t i = 0;
	while (s[i] >= '0' && s[i] <= '9') {
		i++;
	}
	return i > 0 && !s[i];
}

/* The long option at argv[*i] ("--name" or "--name=value"); *i moves past its value. */
static int parse_long(const struct opt *opts, int argc, char **argv, int *i, struct spy_err *err)
{
	const char *name = argv[*i] + 2;
	const char *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	if (len == 4 && !strncmp(name, "help", 4)) {
		/* --help itself returned before; this is --help=VALUE. */
		return spy_err_set(err, SPY_EUSAGE, "option --help takes no value");
	}
	const struct opt *o = find_long(opts, name, len);
	if (!o || o->type == OPT_PROGRAM) {
		return spy_err_set(err, SPY_EUSAGE, "unknown option '--%.*s'", (int)len, name);
	}
	if (o->type == OPT_BOOL) {
		if (eq) {
			return spy_err_set(err, SPY_EUSAGE, "option --%s takes no value", o->long_name);
		}
		*(bool *)o->value = true;
		return 0;
	}
	const char *arg = eq ? eq + 1 : NULL;
	if (!arg && o->type == OPT_OPTCOUNT) {
		arg = *i + 1 < argc && is_count(argv[*i + 1]) ? argv[++*i] : "";
	}
	if (!arg) {
		if (*i + 1 >= argc) {
			return spy_err_set(err, SPY_EUSAGE, "option --%s needs a value (%s)", o->long_name,
					   o->argh ? o->argh : "value");
		}
		arg = argv[++*i];
	}
	return set_value(o, arg, err);
}

/*
 * A group of short options at argv[*i]; the first one taking a value ends
 * it. -h is help wherever it stands in a group (-ih, -hh): no table holds
 * it, as opts_usage adds its row to every command's.
 */
static int parse_short(const struct opt *opts, int argc, char **argv, int *i, struct spy_err *err)
{
	for (const char *p = argv[*i] + 1; *p; p++) {
		if (*p == 'h') {
			return OPTS_HELP;
		}
		const struct opt *o = find_short(opts, *p);
		if (!o) {
			return spy_err_set(err, SPY_EUSAGE, "unknown option '-%c'", *p);
		}
		if (o->type == OPT_BOOL) {
			*(bool *)o->value = true;
			continue;
		}
		const char *arg = p[1] ? p + 1 : NULL;
		if (!arg) {
			if (*i + 1 >= argc) {
				return spy_err_set(err, SPY_EUSAGE, "option -%c needs a value (%s)", *p,
						   o->argh ? o->argh : "value");
			}
			arg = argv[++*i];
		}
		return set_value(o, arg, err);
	}
	return 0;
}

int opts_parse(const struct opt *opts, int argc, char **argv, char **rest, int *nrest,
	       struct spy_err *err)
{
	const struct opt *program = find_type(opts, OPT_PROGRAM);
	int nr = 0;
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			if (program) {
				*(char ***)program->value = argv + i;
				*nrest = nr;
				return OPTS_OK;
			}
			break;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			*nrest = nr;
			return OPTS_HELP;
		}
		int rc = 0;
		if (a[0] == '-' && a[1] == '-') {
			rc = parse_long(opts, argc, argv, &i, err);
		} else if (a[0] == '-' && a[1] != '\0') {
			rc = parse_short(opts, argc, argv, &i, err);
		} else {
			rest[nr++] = argv[i];
		}
		if (rc != 0) {
			*nrest = nr;
			return rc;
		}
	}
	for (; i < argc; i++) {
		rest[nr++] = argv[i];
	}
	*nrest = nr;
	return OPTS_OK;
}

const struct opt opts_help = { 'h', "help", OPT_BOOL, NULL, NULL, "show this help" };

static void usage_row(FILE *f, const struct opt *o)
{
	char left[64];
	int n = 0;
	if (o->short_name) {
		n += snprintf(left + n, sizeof(left) - (size_t)n, "-%c, ", o->short_name);
	} else {
		n += snprintf(left + n, sizeof(left) - (size_t)n, "    ");
	}
	if (o->long_name) {
		n += snprintf(left + n, sizeof(left) - (size_t)n, "--%s", o->long_name);
	}
	if (o->type != OPT_BOOL && n < (int)sizeof(left)) {
		snprintf(left + n, sizeof(left) - (size_t)n, " %s", o->argh ? o->argh : "VALUE");
	}
	/* A long option gets a line of its own, the help in the column below. */
	if (strlen(left) > 24) {
		fprintf(f, "    %s\n    %-24s %s\n", left, "", o->help);
	} else {
		fprintf(f, "    %-24s %s\n", left, o->help);
	}
}

void opts_usage(FILE *f, const char *const *usage, const struct opt *opts)
{
	for (int i = 0; usage[i]; i++) {
		fprintf(f, "%s %s\n", i == 0 ? "usage:" : "      ", usage[i]);
	}
	fputc('\n', f);
	for (const struct opt *o = opts; o->type != OPT_END; o++) {
		if (o->type != OPT_PROGRAM) {
			usage_row(f, o);
		}
	}
	usage_row(f, &opts_help);
}
