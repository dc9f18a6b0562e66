/*
 * The HTTP client (see http.h) on libcurl's easy interface, loaded at the
 * first client (load_curl): one handle per client, its options set once; a
 * request sets the URL, headers and body, performs, and reads what the
 * callbacks kept.
 *
 * The bounds are ours, on top of libcurl's own: the header callback counts
 * the head's bytes and keeps the status line's text; the write callback
 * keeps the body's first bytes and counts the rest; the progress callback
 * checks the abort time. A callback that refuses more ends the transfer;
 * when the status was already read (a body too long, a declared length
 * over HTTP_MAX_BODY), the request still counts as answered with it.
 *
 * No low-speed limit: a server that takes a while to answer a request it
 * has read whole is not hostile, and the total deadline already ends a
 * drip of bytes.
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/http.h"
#include "common/term.h"
#include "common/util.h"

struct http_client {
	CURL *h;
	char errbuf[CURL_ERROR_SIZE];
	/* per request */
	const struct http_request *rq;
	size_t head_bytes, body_bytes, nkept;
	bool head_over, body_over;
	char reason[256];
	char kept[HTTP_MAX_BODY_KEPT];
};

/* ---- the URL ---- */

static bool host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
	       c == '_';
}

/* The host and port of the authority a[0..n); 0 or -SPY_EUSAGE. */
static int check_authority(const char *a, size_t n, struct spy_err *err)
{
	const char *end = a + n, *p = a;
	if (p < end && *p == '[') {
		while (p < end && *p != ']') {
			p++;
		}
		if (p == end || p == a + 1 || strspn(a + 1, "0123456789abcdefABCDEF:.") < (size_t)(p - a - 1)) {
			return spy_err_set(err, SPY_EUSAGE, "--push: a bad [IPv6 address] in the URL");
		}
		p++;
	} else {
		while (p < end && host_char(*p)) {
			p++;
		}
		if (p == a) {
			return spy_err_set(err, SPY_EUSAGE, "--push: no host in the URL");
		}
	}
	if (p < end && *p == ':') {
		size_t pl = (size_t)(end - p - 1);
		long port = pl && pl < 6 && strspn(p + 1, "0123456789") >= pl ? strtol(p + 1, NULL, 10) : 0;
		if (port < 1 || port > 65535) {
			return spy_err_set(err, SPY_EUSAGE, "--push: the URL's port is not 1 to 65535");
		}
		p = end;
	}
	if (p != end) {
		return spy_err_set(err, SPY_EUSAGE, "--push: the URL's host holds a character a host name does not");
	}
	return 0;
}

/*
 * Whether the host of the authority a[0..n) (checked) is this machine's
 * loopback by its very name: "localhost", 127.0.0.0/8 as a dotted quad,
 * [::1]. A name that merely resolves there is not taken on trust.
 */
static bool loopback_host(const char *a, size_t n)
{
	const char *colon = a[0] == '[' ? NULL : memchr(a, ':', n);
	size_t hn = colon ? (size_t)(colon - a) : n;
	if (!strncmp(a, "[::1]", 5) && (n == 5 || a[5] == ':')) {
		return true;
	}
	if (hn == 9 && !strncasecmp(a, "localhost", 9)) {
		return true;
	}
	if (hn < 7 || hn > 15 || strncmp(a, "127.", 4) || strspn(a, "0123456789.") < hn) {
		return false;
	}
	int dots = 0, digits = 0;
	for (size_t i = 0; i < hn; i++) {
		if (a[i] == '.') {
			if (!digits) {
				return false;
			}
			dots++;
			digits = 0;
		} else if (++digits > 3) {
			return false;
		}
	}
	return dots == 3 && digits;
}

int http_url_parse(const char *url, struct http_url *u, struct spy_err *err)
{
	memset(u, 0, sizeof(*u));
	for (const char *p = url; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c <= ' ' || c >= 0x7f) {
			return spy_err_set(err, SPY_EUSAGE,
					   "--push: the URL holds a control character, a blank or a non-ASCII byte");
		}
	}
	size_t skip;
	if (!strncasecmp(url, "https://", 8)) {
		u->https = true;
		skip = 8;
	} else if (!strncasecmp(url, "http://", 7)) {
		skip = 7;
	} else {
		return spy_err_set(err, SPY_EUSAGE, "--push: expected a URL http[s]://HOST[:PORT][/PATH]");
	}
	const char *a = url + skip;
	size_t an = strcspn(a, "/?#");
	if (strchr(a, '@')) {
		return spy_err_set(err, SPY_EUSAGE,
				   "--push: credentials do not go in the URL (use --basic-auth-file or "
				   "SPY_PUSH_BASIC_AUTH, --token-file or SPY_PUSH_TOKEN)");
	}
	if (strpbrk(a, "?#")) {
		return spy_err_set(err, SPY_EUSAGE,
				   "--push: the URL has a query or fragment; it is the server's base address "
				   "(spy adds the API's path)");
	}
	int rc = check_authority(a, an, err);
	if (rc < 0) {
		return rc;
	}
	size_t n = strlen(url);
	while (n > skip + an && url[n - 1] == '/') {
		n--;
	}
	if (n - skip + 8 >= sizeof(u->base)) {
		return spy_err_set(err, SPY_EUSAGE, "--push: the URL is over %zu bytes", sizeof(u->base) - 10);
	}
	snprintf(u->base, sizeof(u->base), "%s%.*s", u->https ? "https://" : "http://", (int)(n - skip), a);
	u->loopback = loopback_host(a, an);
	return 0;
}

/* ---- the client ---- */

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
	struct http_client *c = ctx;
	size_t len = size * n;
	c->head_bytes += len;
	if (c->head_bytes > HTTP_MAX_HEAD) {
		c->head_over = true;
		return 0;
	}
	/* A status line (an interim 1xx one comes first, then the final one): keep its text. */
	if (len > 12 && !strncmp(data, "HTTP/", 5)) {
		const char *end = data + len, *text = NULL;
		const char *sp = memchr(data, ' ', len);
		if (sp && (sp = memchr(sp + 1, ' ', (size_t)(end - sp - 1)))) {
			text = sp + 1;
		}
		size_t tl = 0;
		while (text && text + tl < end && text[tl] != '\r' && text[tl] != '\n') {
			tl++;
		}
		snprintf(c->reason, sizeof(c->reason), "%.*s", (int)tl, text ? text : "");
	}
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	struct http_client *c = ctx;
	size_t len = size * n;
	size_t take = c->nkept < sizeof(c->kept) ? sizeof(c->kept) - c->nkept : 0;
	take = take < len ? take : len;
	memcpy(c->kept + c->nkept, data, take);
	c->nkept += take;
	c->body_bytes += len;
	if (c->body_bytes > HTTP_MAX_BODY) {
		c->body_over = true;
		return 0;
	}
	return len;
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	const struct http_client *c = ctx;
	const _Atomic uint64_t *abort_at = c->rq ? c->rq->abort_at_ns : NULL;
	return abort_at && spy_now_ns() >= atomic_load(abort_at);
}

/*
 * libcurl, loaded when a client is first made: linked, it and the
 * libraries it pulls in (TLS stacks, Kerberos, LDAP, ...: some thirty)
 * cost every spy command ~50 ms at start and ~6 MiB of mappings, for the
 * one that pushes. Built against its headers, so the types and constants
 * are the ones of the libcurl.so.4 ABI.
 */
static struct {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
	CURLcode (*easy_perform)(CURL *h);
	CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
	void (*easy_cleanup)(CURL *h);
	const char *(*easy_strerror)(CURLcode rc);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
} lc;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_problem[300];   /* why libcurl cannot be used, "" once loaded */

static void load_curl(void)
{
	static const struct {
		const char *name;
		void *slot;
	} syms[] = {
		{ "curl_global_init", &lc.global_init }, { "curl_easy_init", &lc.easy_init },
		{ "curl_easy_setopt", &lc.easy_setopt }, { "curl_easy_perform", &lc.easy_perform },
		{ "curl_easy_getinfo", &lc.easy_getinfo }, { "curl_easy_cleanup", &lc.easy_cleanup },
		{ "curl_easy_strerror", &lc.easy_strerror }, { "curl_slist_append", &lc.slist_append },
		{ "curl_slist_free_all", &lc.slist_free_all },
	};
	void *h = dlopen(HTTP_LIBCURL, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *why = dlerror();
		snprintf(curl_problem, sizeof(curl_problem), "cannot load %s (Debian: libcurl4): %s", HTTP_LIBCURL,
			 why ? why : "not found");
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *f = dlsym(h, syms[i].name);
		if (!f) {
			snprintf(curl_problem, sizeof(curl_problem), "%s has no %s", HTTP_LIBCURL, syms[i].name);
			return;
		}
		/* A function pointer from dlsym's object pointer, as POSIX has it done. */
		memcpy(syms[i].slot, &f, sizeof(f));
	}
	CURLcode rc = lc.global_init(CURL_GLOBAL_DEFAULT);
	if (rc != CURLE_OK) {
		snprintf(curl_problem, sizeof(curl_problem), "cannot initialize libcurl: %s", lc.easy_strerror(rc));
	}
	/* The library stays loaded for the process's life. */
}

/* Set the options that do not change between requests; CURLE_OK or the first failure. */
static CURLcode set_options(struct http_client *c, const struct http_tls *tls)
{
	CURL *h = c->h;
	CURLcode rc = CURLE_OK;
#define SET(opt, v)                                          \
	do {                                                 \
		if (rc == CURLE_OK) {                        \
			rc = lc.easy_setopt(h, opt, v);    \
		}                                            \
	} while (0)
	SET(CURLOPT_ERRORBUFFER, c->errbuf);
	SET(CURLOPT_NOSIGNAL, 1L);                 /* no SIGALRM around name lookups: threads */
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_FOLLOWLOCATION, 0L);
	SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)HTTP_MAX_BODY);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, c);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, c);
	SET(CURLOPT_XFERINFOFUNCTION, on_progress);
	SET(CURLOPT_XFERINFODATA, c);
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_USERAGENT, "spy/" SPY_VERSION);
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	if (tls && tls->ca_file) {
		SET(CURLOPT_CAINFO, tls->ca_file);
		SET(CURLOPT_CAPATH, (char *)NULL);
	}
	if (tls && tls->cert_file) {
		SET(CURLOPT_SSLCERT, tls->cert_file);
	}
	if (tls && tls->key_file) {
		SET(CURLOPT_SSLKEY, tls->key_file);
	}
#undef SET
	return rc;
}

int http_client_new(struct http_client **out, const struct http_tls *tls, struct spy_err *err)
{
	pthread_once(&curl_once, load_curl);
	if (curl_problem[0]) {
		return spy_err_set(err, SPY_EIO, "%s", curl_problem);
	}
	struct http_client *c = spy_xcalloc(1, sizeof(*c));
	c->h = lc.easy_init();
	CURLcode rc = c->h ? set_options(c, tls) : CURLE_OUT_OF_MEMORY;
	if (rc != CURLE_OK) {
		http_client_free(c);
		return spy_err_set(err, SPY_EIO, "cannot set up libcurl: %s", lc.easy_strerror(rc));
	}
	*out = c;
	return 0;
}

void http_client_free(struct http_client *c)
{
	if (c) {
		if (c->h) {
			lc.easy_cleanup(c->h);
		}
		free(c);
	}
}

/* err from a failed transfer: what happened, escaped (the server's bytes can be in libcurl's text). */
static int transfer_error(struct http_client *c, CURLcode rc, struct spy_err *err)
{
	const struct http_request *rq = c->rq;
	struct spy_buf b = SPY_BUF_INIT;
	const char *text = c->errbuf[0] ? c->errbuf : lc.easy_strerror(rc);
	spy_term_escape(&b, text, strlen(text), 300, NULL);
	long os_errno = 0;
	lc.easy_getinfo(c->h, CURLINFO_OS_ERRNO, &os_errno);
	if (rc == CURLE_ABORTED_BY_CALLBACK) {
		spy_err_set(err, SPY_EIO, "gave up: spy is exiting");
	} else if (c->head_over) {
		spy_err_set(err, SPY_EIO, "the response's head is over %d bytes", HTTP_MAX_HEAD);
	} else if (rc == CURLE_OPERATION_TIMEDOUT) {
		spy_err_set(err, SPY_EIO, "timed out after %.0f s (%s)", (double)rq->timeout_ns / 1e9, b.buf);
	} else if (rc == CURLE_COULDNT_CONNECT && os_errno) {
		/* libcurl's text names the address (the proxy's, through one); the system's says why. */
		spy_err_set(err, SPY_EIO, "%s (%s)", b.buf, strerror((int)os_errno));
	} else {
		spy_err_set(err, SPY_EIO, "%s", b.buf);
	}
	spy_buf_release(&b);
	return -SPY_EIO;
}

static void escaped(char *out, size_t size, const char *s, size_t n)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_term_escape(&b, s, n, size - 8, NULL);
	snprintf(out, size, "%s", b.buf ? b.buf : "");
	spy_buf_release(&b);
}

int http_post(struct http_client *c, const struct http_request *rq, struct http_response *rs,
	      struct spy_err *err)
{
	memset(rs, 0, sizeof(*rs));
	c->rq = rq;
	c->head_bytes = c->body_bytes = c->nkept = 0;
	c->head_over = c->body_over = false;
	c->reason[0] = c->errbuf[0] = 0;

	struct spy_buf url = SPY_BUF_INIT, line = SPY_BUF_INIT;
	spy_buf_addf(&url, "%s%s", rq->url->base, rq->target);
	struct curl_slist *hl = NULL;
	/* No 100-continue round trip: a server that never sends one would cost a second a request. */
	hl = lc.slist_append(hl, "Expect:");
	for (size_t i = 0; i < rq->nheaders && hl; i++) {
		spy_buf_reset(&line);
		spy_buf_addf(&line, "%s: %s", rq->headers[i].name, rq->headers[i].value);
		struct curl_slist *more = lc.slist_append(hl, line.buf);
		if (!more) {
			lc.slist_free_all(hl);
		}
		hl = more;
	}
	/* The line held a credential, perhaps. */
	if (line.buf) {
		memset(line.buf, 0, line.len);
	}
	spy_buf_release(&line);
	long ms = (long)(rq->timeout_ns / 1000000u);
	ms = ms > 0 ? ms : 1;
	long connect_ms = (long)(HTTP_CONNECT_NS / 1000000u);
	connect_ms = connect_ms < ms ? connect_ms : ms;
	CURLcode rc = hl ? CURLE_OK : CURLE_OUT_OF_MEMORY;
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_URL, url.buf);
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_NOPROXY, rq->direct ? "*" : (char *)NULL);
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_HTTPHEADER, hl);
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_POSTFIELDS, rq->body);
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_TIMEOUT_MS, ms);
	rc = rc ? rc : lc.easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
	rc = rc ? rc : lc.easy_perform(c->h);
	long status = 0;
	lc.easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &status);
	/* A body too long, or declared so, after a status: answered, the rest unread. */
	bool answered = rc == CURLE_OK || (!c->head_over && (c->body_over || rc == CURLE_FILESIZE_EXCEEDED));
	int ret = 0;
	if (answered && status >= 100 && status <= 599) {
		rs->status = (int)status;
		escaped(rs->reason, sizeof(rs->reason), c->reason, strlen(c->reason));
		escaped(rs->body, sizeof(rs->body), c->kept, c->nkept);
	} else if (answered) {
		ret = spy_err_set(err, SPY_EIO, "the server did not answer in HTTP");
	} else {
		ret = transfer_error(c, rc, err);
	}
	/* The headers (a credential among them) and the body are the caller's: nothing kept pointing at them. */
	lc.easy_setopt(c->h, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
	lc.easy_setopt(c->h, CURLOPT_POSTFIELDS, (char *)NULL);
	lc.slist_free_all(hl);
	spy_buf_release(&url);
	c->rq = NULL;
	return ret;
}

const char *http_reason(int status)
{
	static const struct {
		int status;
		const char *text;
	} tab[] = {
		{ 200, "OK" }, { 400, "Bad Request" }, { 401, "Unauthorized" }, { 403, "Forbidden" },
		{ 404, "Not Found" }, { 405, "Method Not Allowed" }, { 408, "Request Timeout" },
		{ 413, "Content Too Large" }, { 415, "Unsupported Media Type" }, { 422, "Unprocessable Content" },
		{ 429, "Too Many Requests" }, { 500, "Internal Server Error" }, { 502, "Bad Gateway" },
		{ 503, "Service Unavailable" }, { 504, "Gateway Timeout" },
	};
	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		if (tab[i].status == status) {
			return tab[i].text;
		}
	}
	return "";
}

void http_base64(struct spy_buf *out, const void *data, size_t len)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		v |= i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0;
		v |= i + 2 < len ? p[i + 2] : 0;
		char q[4] = { tab[v >> 18 & 63], tab[v >> 12 & 63], i + 1 < len ? tab[v >> 6 & 63] : '=',
			      i + 2 < len ? tab[v & 63] : '=' };
		spy_buf_add(out, q, 4);
	}
}

void http_query_escape(struct spy_buf *out, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-._~", c)) {
			spy_buf_addch(out, (char)c);
		} else {
			spy_buf_addf(out, "%%%02X", c);
		}
	}
}
