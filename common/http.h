/*
 * An HTTP client for pushing profiles (record --push), on libcurl: http://
 * and https:// (the system's CA store, or a private CA; a client
 * certificate for mutual TLS), the standard proxy variables (http_proxy,
 * https_proxy, all_proxy, no_proxy, as libcurl reads them), and a
 * connection kept between requests.
 *
 * A server is not trusted: every request has a deadline (name lookup
 * included: libcurl resolves on a thread of its own) and can be cut short
 * by an abort time; the response's head and body are bounded (a head over
 * HTTP_MAX_HEAD, a body over HTTP_MAX_BODY, a declared length over it, a
 * negative or garbage one end the request); only http and https are
 * spoken, redirects are not followed, nothing is decompressed.
 */
#ifndef SPY_COMMON_HTTP_H
#define SPY_COMMON_HTTP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

/* Bounds on what a server may send back: the status line and headers, the body read, the body kept. */
#define HTTP_MAX_HEAD 16384
#define HTTP_MAX_BODY 65536
#define HTTP_MAX_BODY_KEPT 512
/* Connecting (the TLS handshake included, through a proxy too) gets this long, within the request's deadline. */
#define HTTP_CONNECT_NS (5 * 1000 * 1000 * 1000ull)

struct http_url {
	char base[1400];   /* scheme://host[:port][/path], without a trailing '/' */
	bool https;
	bool loopback;     /* the host is localhost, 127.x.x.x or [::1], literally */
};

/*
 * Parse "http[s]://host[:port][/path]" (IPv6 as [addr]). -SPY_EUSAGE with
 * a message naming what is wrong; the message never quotes the URL, which
 * may hold a secret (user:password@, a token in a query). Refused: control
 * bytes, blanks and non-ASCII bytes, userinfo, a query or fragment.
 */
int http_url_parse(const char *url, struct http_url *u, struct spy_err *err);

/* TLS files; NULL: the system's CA store, no client certificate. */
struct http_tls {
	const char *ca_file;     /* the CAs trusted instead of the system's */
	const char *cert_file;   /* client certificate (PEM), with key_file */
	const char *key_file;
};

struct http_header {
	const char *name, *value;
};

struct http_request {
	const struct http_url *url;
	const char *target;                 /* appended to the base: path and query, starting with '/' */
	const struct http_header *headers;
	size_t nheaders;
	const void *body;                   /* POSTed; not copied */
	size_t body_len;
	uint64_t timeout_ns;                /* for the whole request */
	/* When set, a monotonic time (spy_now_ns) past which the request gives up early. */
	const _Atomic uint64_t *abort_at_ns;
	bool direct;                        /* no proxy, whatever the environment says */
};

struct http_response {
	int status;
	char reason[128];               /* the status line's text, escaped ("" over HTTP/2) */
	char body[HTTP_MAX_BODY_KEPT];  /* the body's first bytes, escaped, for an error line */
};

/* The library loaded for the first client (dlopen: see http.c). */
#define HTTP_LIBCURL "libcurl.so.4"

/* A client: one libcurl handle, its connection kept between requests; used by one thread at a time. */
struct http_client;
/*
 * The first call loads and initializes libcurl (-SPY_EIO naming what is
 * missing): make it before starting other threads.
 */
int http_client_new(struct http_client **out, const struct http_tls *tls, struct spy_err *err);
void http_client_free(struct http_client *c);

/*
 * POST rq and read the response's status line, headers and (bounded)
 * body. 0 once a status was read, whatever it is; < 0 (-SPY_EIO) with err
 * set ("connect to 127.0.0.1:4040: Connection refused", "timed out after
 * 10 s") otherwise.
 */
int http_post(struct http_client *c, const struct http_request *rq, struct http_response *rs,
	      struct spy_err *err);

/* The standard reason phrase of status, "" if not a common one (HTTP/2 sends none). */
const char *http_reason(int status);
/* Append the base64 of len bytes at data (RFC 4648, padded). */
void http_base64(struct spy_buf *out, const void *data, size_t len);
/* Append s percent-encoded for a query value (RFC 3986 unreserved kept). */
void http_query_escape(struct spy_buf *out, const char *s);

#endif
