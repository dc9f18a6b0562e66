/*
 * record --push (see push.h): the configuration (labels, credentials, TLS
 * files) and the program's name. The queue and the sender are in
 * push-send.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/push.h"
#include "common/util.h"

/* A credentials file larger than this is not one. */
#define MAX_SECRET 1000

/* ---- labels ---- */

static bool key_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && c >= '0' && c <= '9');
}

static bool app_char(char c)
{
	return key_char(c, false) || c == '.' || c == '-';
}

/* Not in a value: the name's grammar ({ } , =), quotes, blanks and control characters. */
static bool value_char(unsigned char c)
{
	return c > ' ' && c != 0x7f && !strchr("{},=\"'\\", c);
}

const char *push_check_app(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 200) {
		return "an application name is 1 to 200 characters";
	}
	for (; *s; s++) {
		if (!app_char(*s)) {
			return "an application name holds only letters, digits, '_', '.' and '-'";
		}
	}
	return NULL;
}

const char *push_check_key(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= sizeof(((struct push_label *)0)->key)) {
		return "a label key is 1 to 63 characters";
	}
	if (!strncmp(s, "__", 2)) {
		return "label keys starting with '__' are reserved";
	}
	if (!strcmp(s, "service_name")) {
		return "service_name is the application name: use --app";
	}
	for (const char *p = s; *p; p++) {
		if (!key_char(*p, p == s)) {
			return "a label key is a letter or '_', then letters, digits or '_'";
		}
	}
	return NULL;
}

const char *push_check_value(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= sizeof(((struct push_label *)0)->value)) {
		return "a label value is 1 to 255 bytes";
	}
	for (; *s; s++) {
		if (!value_char((unsigned char)*s)) {
			return "a label value holds no blanks, control characters, quotes, '\\', '{', '}', ',' or '='";
		}
	}
	return NULL;
}

void push_sanitize(char *s, bool app)
{
	for (; *s; s++) {
		if (app ? !app_char(*s) : !value_char((unsigned char)*s)) {
			*s = '_';
		}
	}
}

bool push_series_label(struct push_series *s, const char *key, const char *value)
{
	size_t i = 0;
	while (i < s->nlabels && strcmp(s->labels[i].key, key)) {
		i++;
	}
	if (i == PUSH_MAX_LABELS) {
		return false;
	}
	s->nlabels += i == s->nlabels;
	snprintf(s->labels[i].key, sizeof(s->labels[i].key), "%s", key);
	snprintf(s->labels[i].value, sizeof(s->labels[i].value), "%s", value);
	return true;
}

/* ---- credentials ---- */

/* A secret from a file: a regular file, read whole (bounded), one trailing newline dropped. */
static int read_secret(const char *path, char *out, size_t size, struct spy_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		return spy_err_set(err, SPY_EIO, "cannot read %s: %s", path, strerror(errno));
	}
	struct stat st;
	ssize_t n = -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)size) {
		n = read(fd, out, size - 1);
	}
	close(fd);
	if (n < 0) {
		return spy_err_set(err, SPY_EIO, "%s: not a regular file of at most %zu bytes", path, size - 2);
	}
	out[n] = 0;
	if (n > 0 && out[n - 1] == '\n') {
		out[--n] = 0;
	}
	if (n > 0 && out[n - 1] == '\r') {
		out[--n] = 0;
	}
	return 0;
}

static int check_secret(const char *s, const char *where, struct spy_err *err)
{
	if (!*s) {
		return spy_err_set(err, SPY_EUSAGE, "%s is empty", where);
	}
	for (; *s; s++) {
		if ((unsigned char)*s < ' ' || *s == 0x7f) {
			/* It goes into a header line: no line breaks smuggled in. */
			return spy_err_set(err, SPY_EUSAGE, "%s holds a control character", where);
		}
	}
	return 0;
}

int push_config_auth(struct push_config *c, const char *token_file, const char *basic_file,
		     struct spy_err *err)
{
	char secret[MAX_SECRET + 2];
	const char *env_token = getenv("SPY_PUSH_TOKEN"), *env_basic = getenv("SPY_PUSH_BASIC_AUTH");
	int given = (token_file != NULL) + (basic_file != NULL) + (env_token && *env_token) + (env_basic && *env_basic);
	c->auth[0] = 0;
	if (given == 0) {
		return 0;
	}
	if (given > 1) {
		return spy_err_set(err, SPY_EUSAGE,
				   "one of SPY_PUSH_TOKEN, SPY_PUSH_BASIC_AUTH, --token-file and "
				   "--basic-auth-file, not several");
	}
	bool basic = basic_file || (env_basic && *env_basic);
	const char *file = token_file ? token_file : basic_file;
	const char *where = file ? file : basic ? "SPY_PUSH_BASIC_AUTH" : "SPY_PUSH_TOKEN";
	if (file) {
		int rc = read_secret(file, secret, sizeof(secret), err);
		if (rc < 0) {
			return rc;
		}
	} else {
		const char *v = basic ? env_basic : env_token;
		if (strlen(v) > MAX_SECRET) {
			return spy_err_set(err, SPY_EUSAGE, "%s is longer than %d bytes", where, MAX_SECRET);
		}
		snprintf(secret, sizeof(secret), "%s", v);
	}
	int rc = check_secret(secret, where, err);
	if (rc == 0 && !c->url.https && !c->url.loopback) {
		if (!c->insecure) {
			rc = spy_err_set(err, SPY_EUSAGE,
					 "%s: credentials are sent only over https:// (or to a loopback address); "
					 "--push-insecure sends them over http:// in the clear", where);
		} else {
			fprintf(stderr, "spy: --push-insecure: the credentials of %s go to the server in the clear\n",
				where);
		}
	}
	if (rc == 0 && basic && !strchr(secret, ':')) {
		rc = spy_err_set(err, SPY_EUSAGE, "%s: expected USER:PASSWORD", where);
	}
	if (rc == 0) {
		struct spy_buf b = SPY_BUF_INIT;
		if (basic) {
			spy_buf_adds(&b, "Basic ");
			http_base64(&b, secret, strlen(secret));
		} else {
			spy_buf_addf(&b, "Bearer %s", secret);
		}
		snprintf(c->auth, sizeof(c->auth), "%s", b.buf);
		spy_buf_release(&b);
	}
	memset(secret, 0, sizeof(secret));
	return rc;
}

/* ---- the API and TLS ---- */

static bool api_parse(const char *s, enum push_api *out)
{
	if (!strcmp(s, "push")) {
		*out = PUSH_API_PUSH;
	} else if (!strcmp(s, "ingest")) {
		*out = PUSH_API_INGEST;
	} else {
		return false;
	}
	return true;
}

/* A file spy will hand libcurl: readable now, so that a typo is a usage error and not a failed push each period. */
static int check_file(const char *opt, const char *path, struct spy_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	int rc = 0;
	if (fd < 0) {
		rc = spy_err_set(err, SPY_EIO, "%s %s: %s", opt, path, strerror(errno));
	} else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		rc = spy_err_set(err, SPY_EIO, "%s %s: not a regular file", opt, path);
	}
	if (fd >= 0) {
		close(fd);
	}
	return rc;
}

static int config_tls(struct push_config *c, const char *ca, const char *cert, const char *key,
		      struct spy_err *err)
{
	const char *given = ca ? "--push-ca" : cert ? "--push-cert" : key ? "--push-key" : NULL;
	if (given && !c->url.https) {
		return spy_err_set(err, SPY_EUSAGE, "%s goes with an https:// URL", given);
	}
	if (key && !cert) {
		return spy_err_set(err, SPY_EUSAGE, "--push-key goes with --push-cert");
	}
	int rc = ca ? check_file("--push-ca", ca, err) : 0;
	rc = rc ? rc : cert ? check_file("--push-cert", cert, err) : 0;
	rc = rc ? rc : key ? check_file("--push-key", key, err) : 0;
	if (rc == 0) {
		c->tls = (struct http_tls){ ca, cert, key };
	}
	return rc;
}

int push_config_dest(struct push_config *c, const struct push_dest *d, struct spy_err *err)
{
	if (http_url_parse(d->url, &c->url, err) < 0) {
		return -SPY_EUSAGE;
	}
	c->url_text = d->url;
	if (d->api && !api_parse(d->api, &c->api)) {
		return spy_err_set(err, SPY_EUSAGE, "--push-api: '%s' is not push or ingest", d->api);
	}
	int rc = config_tls(c, d->ca, d->cert, d->key, err);
	if (rc < 0) {
		return rc;
	}
	if (d->tenant && (push_check_value(d->tenant) || strlen(d->tenant) > 150)) {
		return spy_err_set(err, SPY_EUSAGE, "--tenant '%s': a tenant ID is 1 to 150 printable characters, "
				   "no blanks, quotes or { } , =", d->tenant);
	}
	snprintf(c->tenant, sizeof(c->tenant), "%s", d->tenant ? d->tenant : "");
	c->insecure = d->insecure;
	return 0;
}

/* ---- the program's name ---- */

/* The words of a command line (arguments joined by spaces), at most max, each cut to its slot. */
struct words {
	char w[8][256];
	size_t n;
};

static void split_words(const char *cmdline, struct words *ws)
{
	const char *p = cmdline;
	ws->n = 0;
	while (*p && ws->n < sizeof(ws->w) / sizeof(ws->w[0])) {
		size_t n = strcspn(p, " ");
		snprintf(ws->w[ws->n++], sizeof(ws->w[0]), "%.*s", (int)(n < 255 ? n : 255), p);
		p += n;
		p += strspn(p, " ");
	}
}

static bool is_python(const char *exe)
{
	return !strncmp(exe, "python", 6) || !strncmp(exe, "pypy", 4);
}

/*
 * What a Python runs: *kind 's' (a script, *what its path), 'm' (a module,
 * *what its name), 'c' (-c, *what NULL) or 0 (nothing found, an
 * interactive one). Options are skipped, with the argument of those that
 * take one (-X, -W, -Q, joined or not).
 */
static void python_runs(const struct words *ws, char *kind, const char **what)
{
	*kind = 0;
	*what = NULL;
	for (size_t i = 1; i < ws->n; i++) {
		const char *w = ws->w[i];
		if (!strcmp(w, "--") || w[0] != '-' || !w[1]) {
			size_t at = strcmp(w, "--") ? i : i + 1;
			if (at < ws->n) {
				*kind = 's';
				*what = ws->w[at];
			}
			return;
		}
		if (w[1] == '-') {
			continue;   /* --version, --check-hash-based-pycs: rare; its value would be taken for the script */
		}
		for (const char *c = w + 1; *c; c++) {
			if (*c == 'c' || *c == 'm') {
				*kind = *c;
				*what = *c == 'm' ? (c[1] ? c + 1 : i + 1 < ws->n ? ws->w[i + 1] : NULL) : NULL;
				*kind = *c == 'm' && !*what ? 0 : *kind;
				return;
			}
			if (strchr("XWQ", *c)) {
				i += c[1] == 0;   /* the argument is the next word */
				break;
			}
		}
	}
}

/* The executable's name in ws (split from cmdline) and, for a Python one,
 * what it runs: kind 's' (what: the script), 'm' (the module), 'c', or 0. */
static const char *program_of(const char *cmdline, struct words *ws, char *kind, const char **what)
{
	split_words(cmdline, ws);
	const char *exe = ws->n ? spy_basename(ws->w[0]) : "";
	*kind = 0;
	*what = NULL;
	if (is_python(exe)) {
		python_runs(ws, kind, what);
	}
	return exe;
}

void push_program_name(const char *cmdline, char *out, size_t size)
{
	struct words ws;
	char kind;
	const char *what;
	const char *exe = program_of(cmdline, &ws, &kind, &what);
	if (kind == 's') {
		snprintf(out, size, "%s %s", exe, spy_basename(what));
	} else if (kind == 'm') {
		snprintf(out, size, "%s -m %s", exe, what);
	} else if (kind == 'c') {
		snprintf(out, size, "%s -c", exe);
	} else {
		snprintf(out, size, "%s", exe[0] ? exe : "python");
	}
}

void push_default_app(const char *cmdline, char *out, size_t size)
{
	struct words ws;
	char kind;
	const char *what;
	const char *name = program_of(cmdline, &ws, &kind, &what);
	name = kind == 's' ? spy_basename(what) : kind == 'm' ? what : name;
	snprintf(out, size, "%s", name[0] ? name : "python");
	size_t n = strlen(out);
	if (n > 3 && !strcmp(out + n - 3, ".py")) {
		out[n - 3] = 0;
	}
	if (strlen(out) > 200) {
		out[200] = 0;
	}
	push_sanitize(out, true);
}
