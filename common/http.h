/*
 * A small HTTP/1.1 client: one request per connection, for pushing
 * profiles (record --push). http:// only.
 *
 * Why not libcurl: spy needs one POST with a few headers to a server the
 * user names, and a library with its TLS stack, proxies and protocols
 * would be a build and run-time dependency of every install for that.
 * https is not supported because spy carries no TLS stack; a backend
 * behind TLS is reached through a local forwarder (Grafana Alloy's
 * pyroscope.receive_http, a TLS-terminating proxy), which is also where
 * fleets keep their credentials.
 *
 * Every step has a deadline (name lookup excepted: getaddrinfo has none,
 * which is why a caller runs this on a thread of its own), every length
 * read is bounded, and the connection is closed after each response.
 */
#ifndef SPY_COMMON_HTTP_H
#define SPY_COMMON_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

/* Bounds on what a server may send back: the status line and headers, and the body kept. */
#define HTTP_MAX_HEAD 16384
#define HTTP_MAX_BODY_KEPT 512

struct http_url {
	char host[256];
	char port[8];
	char path[1024];   /* the base path, without its trailing '/' ("" for the root) */
};

/*
 * Parse "http://host[:port][/path]" (IPv6 as [addr]); -SPY_EUSAGE with a
 * message naming what is wrong (https: not supported, and why).
 */
int http_url_parse(const char *url, struct http_url *u, struct spy_err *err);

struct http_header {
	const char *name, *value;
};

struct http_request {
	const char *method;
	const struct http_url *url;
	const char *target;                 /* path and query, starting with '/' */
	const struct http_header *headers;
	size_t nheaders;
	const void *body;
	size_t body_len;
	uint64_t timeout_ns;                /* for the whole request */
	/* When set, a monotonic time (ticker-like ns) past which the request gives up early. */
	const _Atomic uint64_t *abort_at_ns;
};

struct http_response {
	int status;
	char reason[128];               /* the status line's text, escaped */
	char body[HTTP_MAX_BODY_KEPT];  /* the body's first bytes, escaped, for an error line */
};

/*
 * Send rq and read the response's status line, headers and (bounded) body.
 * 0 once a response was read, whatever its status; < 0 (-SPY_EIO) with
 * err set ("connect to HOST:PORT: Connection refused", "timed out after
 * 10 s waiting for a response") otherwise.
 */
int http_request(const struct http_request *rq, struct http_response *rs, struct spy_err *err);

/* Append the base64 of len bytes at data (RFC 4648, padded). */
void http_base64(struct spy_buf *out, const void *data, size_t len);
/* Append s percent-encoded for a query value (RFC 3986 unreserved kept). */
void http_query_escape(struct spy_buf *out, const char *s);
/* Monotonic now, in ns (CLOCK_MONOTONIC, the ticker's clock). */
uint64_t http_now_ns(void);

#endif
