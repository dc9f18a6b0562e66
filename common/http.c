/*
 * The HTTP/1.1 client (see http.h). A request is: resolve, connect
 * (non-blocking, polled), write everything, read until the head ends and
 * then the body until Content-Length, the connection's end, or the bound.
 * Chunked bodies are read to their end as bytes and not decoded: only the
 * status matters, and the first bytes go into an error line.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/http.h"
#include "common/term.h"
#include "common/util.h"

/* Polls are cut into slices this long, so that an abort deadline is seen soon. */
#define SLICE_NS (100 * 1000 * 1000ull)

uint64_t http_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int http_url_parse(const char *url, struct http_url *u, struct spy_err *err)
{
	memset(u, 0, sizeof(*u));
	if (!strncmp(url, "https://", 8)) {
		return spy_err_set(err, SPY_EUSAGE,
				   "--push %s: https is not supported (spy has no TLS stack); "
				   "push to a local forwarder over http, such as Grafana Alloy", url);
	}
	if (strncmp(url, "http://", 7)) {
		return spy_err_set(err, SPY_EUSAGE, "--push %s: expected http://HOST[:PORT][/PATH]", url);
	}
	const char *h = url + 7, *end;
	const char *host_end;
	if (*h == '[') {
		host_end = strchr(h, ']');
		if (!host_end) {
			return spy_err_set(err, SPY_EUSAGE, "--push %s: unterminated [IPv6 address]", url);
		}
		h++;
		end = host_end + 1;
	} else {
		host_end = h + strcspn(h, ":/?#");
		end = host_end;
	}
	size_t hl = (size_t)(host_end - h);
	if (hl == 0 || hl >= sizeof(u->host)) {
		return spy_err_set(err, SPY_EUSAGE, "--push %s: no host, or a host name too long", url);
	}
	memcpy(u->host, h, hl);
	if (strpbrk(u->host, "@ \t\r\n")) {
		return spy_err_set(err, SPY_EUSAGE,
				   "--push %s: credentials do not go in the URL (see SPY_PUSH_BASIC_AUTH)", url);
	}
	snprintf(u->port, sizeof(u->port), "80");
	if (*end == ':') {
		const char *p = end + 1;
		size_t pl = strspn(p, "0123456789");
		long port = pl && pl < 6 ? strtol(p, NULL, 10) : 0;
		if (port < 1 || port > 65535) {
			return spy_err_set(err, SPY_EUSAGE, "--push %s: bad port", url);
		}
		snprintf(u->port, sizeof(u->port), "%ld", port);
		end = p + pl;
	}
	if (*end && *end != '/') {
		return spy_err_set(err, SPY_EUSAGE, "--push %s: expected http://HOST[:PORT][/PATH], without query", url);
	}
	size_t pl = strlen(end);
	while (pl > 0 && end[pl - 1] == '/') {
		pl--;
	}
	if (pl >= sizeof(u->path) || strpbrk(end, "?# \t\r\n")) {
		return spy_err_set(err, SPY_EUSAGE, "--push %s: bad path (too long, or a query or blank in it)", url);
	}
	memcpy(u->path, end, pl);
	return 0;
}

/* The time left before rq's deadline or its abort time; 0 if none. */
static uint64_t time_left(const struct http_request *rq, uint64_t deadline)
{
	uint64_t now = http_now_ns();
	uint64_t until = deadline;
	if (rq->abort_at_ns) {
		uint64_t a = atomic_load(rq->abort_at_ns);
		until = a < until ? a : until;
	}
	return now < until ? until - now : 0;
}

/* Wait for events on fd: 1 ready, 0 out of time, < 0 error (errno). */
static int wait_fd(const struct http_request *rq, uint64_t deadline, int fd, short events)
{
	for (;;) {
		uint64_t left = time_left(rq, deadline);
		if (left == 0) {
			return 0;
		}
		struct pollfd pfd = { fd, events, 0 };
		uint64_t slice = left < SLICE_NS ? left : SLICE_NS;
		int n = poll(&pfd, 1, (int)(slice / 1000000) + 1);
		if (n > 0) {
			return 1;
		}
		if (n < 0 && errno != EINTR) {
			return -1;
		}
	}
}

static int timed_out(const struct http_request *rq, struct spy_err *err, const char *what)
{
	bool aborted = rq->abort_at_ns && http_now_ns() >= atomic_load(rq->abort_at_ns);
	if (aborted) {
		return spy_err_set(err, SPY_EIO, "gave up %s: spy is exiting", what);
	}
	return spy_err_set(err, SPY_EIO, "timed out after %.0f s %s", (double)rq->timeout_ns / 1e9, what);
}

static int connect_to(const struct http_request *rq, uint64_t deadline, struct spy_err *err)
{
	const struct http_url *u = rq->url;
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int g = getaddrinfo(u->host, u->port, &hints, &res);
	if (g != 0) {
		return spy_err_set(err, SPY_EIO, "cannot resolve %s: %s", u->host,
				   g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
	}
	int fd = -1, last = 0;
	bool late = false;
	for (struct addrinfo *ai = res; ai && fd < 0 && !late; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			last = errno;
			continue;
		}
		int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (rc < 0 && errno == EINPROGRESS) {
			int w = wait_fd(rq, deadline, fd, POLLOUT);
			socklen_t sl = sizeof(last);
			if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &last, &sl) == 0 && last == 0) {
				rc = 0;
			} else if (w == 0) {
				late = true;
			} else if (w < 0) {
				last = errno;
			}
		} else if (rc < 0) {
			last = errno;
		}
		if (rc < 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0 && late) {
		char what[300];
		snprintf(what, sizeof(what), "connecting to %s:%s", u->host, u->port);
		return timed_out(rq, err, what);
	}
	if (fd < 0) {
		return spy_err_set(err, SPY_EIO, "connect to %s:%s: %s", u->host, u->port, strerror(last));
	}
	return fd;
}

static int send_all(const struct http_request *rq, uint64_t deadline, int fd, const void *data,
		    size_t len, struct spy_err *err)
{
	const char *p = data;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			return spy_err_set(err, SPY_EIO, "sending to %s:%s: %s", rq->url->host, rq->url->port,
					   strerror(errno));
		}
		int w = wait_fd(rq, deadline, fd, POLLOUT);
		if (w == 0) {
			return timed_out(rq, err, "sending the request");
		}
		if (w < 0) {
			return spy_err_set(err, SPY_EIO, "sending: %s", strerror(errno));
		}
	}
	return 0;
}

/* The value of header name (lower case, with its colon) in head, or NULL. */
static const char *header_value(const char *head, const char *name)
{
	size_t nl = strlen(name);
	for (const char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
		if (!strncasecmp(line + 2, name, nl)) {
			const char *v = line + 2 + nl;
			return v + strspn(v, " \t");
		}
	}
	return NULL;
}

static int read_response(const struct http_request *rq, uint64_t deadline, int fd,
			 struct http_response *rs, struct spy_err *err)
{
	char *head = spy_xmalloc(HTTP_MAX_HEAD + 1);
	size_t hl = 0;
	char *end = NULL;
	int rc = 0;
	/* The head, up to its blank line, within HTTP_MAX_HEAD. */
	while (!end) {
		if (hl == HTTP_MAX_HEAD) {
			rc = spy_err_set(err, SPY_EIO, "the response's head is over %d bytes", HTTP_MAX_HEAD);
			goto out;
		}
		ssize_t n = recv(fd, head + hl, HTTP_MAX_HEAD - hl, 0);
		if (n > 0) {
			hl += (size_t)n;
			head[hl] = 0;
			end = strstr(head, "\r\n\r\n");
			continue;
		}
		if (n == 0) {
			rc = spy_err_set(err, SPY_EIO, "%s:%s closed the connection without a response",
					 rq->url->host, rq->url->port);
			goto out;
		}
		if (errno != EAGAIN && errno != EINTR) {
			rc = spy_err_set(err, SPY_EIO, "reading the response: %s", strerror(errno));
			goto out;
		}
		int w = wait_fd(rq, deadline, fd, POLLIN);
		if (w <= 0) {
			rc = w == 0 ? timed_out(rq, err, "waiting for a response")
				    : spy_err_set(err, SPY_EIO, "reading the response: %s", strerror(errno));
			goto out;
		}
	}
	int major, minor, status, off = 0;
	if (sscanf(head, "HTTP/%d.%d %3d%n", &major, &minor, &status, &off) != 3 || status < 100 || status > 599) {
		rc = spy_err_set(err, SPY_EIO, "%s:%s did not answer in HTTP", rq->url->host, rq->url->port);
		goto out;
	}
	rs->status = status;
	const char *reason = head + off + strspn(head + off, " ");
	struct spy_buf b = SPY_BUF_INIT;
	spy_term_escape(&b, reason, strcspn(reason, "\r\n"), sizeof(rs->reason) - 8, NULL);
	snprintf(rs->reason, sizeof(rs->reason), "%s", b.buf ? b.buf : "");
	spy_buf_reset(&b);

	/* The body: what came with the head, then up to Content-Length (or the end), keeping the first bytes. */
	char kept[HTTP_MAX_BODY_KEPT];
	size_t nkept = 0;
	size_t have = hl - (size_t)(end + 4 - head);
	memcpy(kept, end + 4, have < sizeof(kept) ? have : sizeof(kept));
	nkept = have < sizeof(kept) ? have : sizeof(kept);
	*end = 0;
	const char *cl = header_value(head, "content-length:");
	bool no_body = status == 204 || status == 304 || status < 200;
	long long want = no_body ? 0 : cl ? strtoll(cl, NULL, 10) : -1;
	long long got = (long long)have;
	char sink[4096];
	while (want < 0 || got < want) {
		ssize_t n = recv(fd, sink, sizeof(sink), 0);
		if (n > 0) {
			size_t take = nkept < sizeof(kept) ? sizeof(kept) - nkept : 0;
			take = take < (size_t)n ? take : (size_t)n;
			memcpy(kept + nkept, sink, take);
			nkept += take;
			got += n;
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			break;   /* the status is what matters */
		}
		if (wait_fd(rq, deadline, fd, POLLIN) <= 0) {
			break;
		}
	}
	spy_term_escape(&b, kept, nkept, sizeof(rs->body) - 8, NULL);
	snprintf(rs->body, sizeof(rs->body), "%s", b.buf ? b.buf : "");
	spy_buf_release(&b);
out:
	free(head);
	return rc;
}

int http_request(const struct http_request *rq, struct http_response *rs, struct spy_err *err)
{
	memset(rs, 0, sizeof(*rs));
	uint64_t deadline = http_now_ns() + rq->timeout_ns;
	struct spy_buf req = SPY_BUF_INIT;
	const struct http_url *u = rq->url;
	bool v6 = strchr(u->host, ':') != NULL;
	spy_buf_addf(&req, "%s %s HTTP/1.1\r\nHost: %s%s%s", rq->method, rq->target, v6 ? "[" : "", u->host,
		     v6 ? "]" : "");
	if (strcmp(u->port, "80")) {
		spy_buf_addf(&req, ":%s", u->port);
	}
	spy_buf_addf(&req, "\r\nUser-Agent: spy/%s\r\nConnection: close\r\nContent-Length: %zu\r\n",
		     SPY_VERSION, rq->body_len);
	for (size_t i = 0; i < rq->nheaders; i++) {
		spy_buf_addf(&req, "%s: %s\r\n", rq->headers[i].name, rq->headers[i].value);
	}
	spy_buf_adds(&req, "\r\n");
	int fd = connect_to(rq, deadline, err);
	int rc = fd < 0 ? fd : send_all(rq, deadline, fd, req.buf, req.len, err);
	if (rc == 0) {
		rc = send_all(rq, deadline, fd, rq->body, rq->body_len, err);
	}
	if (rc == 0) {
		rc = read_response(rq, deadline, fd, rs, err);
	}
	if (fd >= 0) {
		close(fd);
	}
	spy_buf_release(&req);
	return rc < 0 ? -SPY_EIO : 0;
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
