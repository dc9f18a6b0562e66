/*
 * record --push's pieces that need no real server: the URL (refused
 * without echoing a secret), the program's name (never an argument),
 * Pyroscope's label rules, the Authorization header from the environment
 * or a file (never both), base64 and query escaping, the protobuf writer;
 * and the HTTP client's deadlines against a listener that never answers,
 * one that refuses, and hostile servers (endless head or body, a drip,
 * huge and negative lengths, garbage, a reason with escapes).
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd/push.h"
#include "common/http.h"
#include "common/proto.h"
#include "tests/lib/check.h"

static void test_url(void)
{
	struct http_url u;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(http_url_parse("http://pyroscope:4040", &u, NULL), 0);
	CHECK_STR(u.base, "http://pyroscope:4040");
	CHECK(!u.https);
	CHECK_INT(http_url_parse("HTTPS://example.org/base/path//", &u, NULL), 0);
	CHECK_STR(u.base, "https://example.org/base/path");
	CHECK(u.https);
	CHECK_INT(http_url_parse("http://[::1]:4040/", &u, NULL), 0);
	CHECK_STR(u.base, "http://[::1]:4040");
	CHECK(u.loopback);
	/* Loopback by its very name only: what a credential may go to over plain http. */
	static const char *const loop[] = { "http://localhost", "http://LOCALHOST:4040/x", "http://127.0.0.1:9",
					    "http://127.255.3.40", "http://[::1]" };
	static const char *const not_loop[] = { "http://pyroscope:4040", "http://127.0.0.1.evil.example",
						"http://localhost.example", "http://127.1", "http://127.0.0.1234",
						"http://128.0.0.1", "http://[::2]", "http://1127.0.0.1", "http://127..0.1",
						"http://localhostx:1", "http://127.0.0.:1" };
	for (size_t i = 0; i < sizeof(loop) / sizeof(loop[0]); i++) {
		CHECK_INT(http_url_parse(loop[i], &u, NULL), 0);
		CHECK(u.loopback);
	}
	for (size_t i = 0; i < sizeof(not_loop) / sizeof(not_loop[0]); i++) {
		int rc = http_url_parse(not_loop[i], &u, NULL);
		CHECK(rc < 0 || !u.loopback);
	}
	CHECK_INT(http_url_parse("http://host:0", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://host:65536", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("pyroscope:4040", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://[::1/", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://ho%st/", &u, NULL), -SPY_EUSAGE);
	/* Refused without a word of the URL: what is refused may be a secret. */
	static const char *const secret[] = {
		"http://user:hunter2@pyro/", "https://hunter2@pyro:4040", "http://pyro/?token=hunter2",
		"http://pyro/#hunter2", "http://pyro/hunter2\x1b[2J", "http://pyro/hunter2\r\nX: y",
		"http://pyro/hunter2 x", "http://pyro:hunter2@x", "http://pyro/\xc3\xa9hunter2",
	};
	for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++) {
		CHECK_INT(http_url_parse(secret[i], &u, &err), -SPY_EUSAGE);
		CHECK(!strstr(err.msg, "hunter2"));
		CHECK(!strstr(err.msg, "pyro"));
	}
	CHECK_INT(http_url_parse("http://user:hunter2@host/", &u, &err), -SPY_EUSAGE);
	CHECK(strstr(err.msg, "credentials do not go in the URL"));
	CHECK_INT(http_url_parse("http://host/x?y=1", &u, &err), -SPY_EUSAGE);
	CHECK(strstr(err.msg, "query"));
	CHECK_INT(http_url_parse("http://host/\x07", &u, &err), -SPY_EUSAGE);
	CHECK(strstr(err.msg, "control character"));
}

static void check_name(const char *cmdline, const char *program, const char *app)
{
	char out[300];
	push_program_name(cmdline, out, sizeof(out));
	CHECK_STR(out, program);
	push_default_app(cmdline, out, sizeof(out));
	CHECK_STR(out, app);
}

/* The program's name: never an argument, whatever the options before the script. */
static void test_program_name(void)
{
	check_name("/usr/bin/python3.11 /srv/app/app.py --db-password=hunter2", "python3.11 app.py", "app");
	check_name("python3 -u -X dev -W ignore app.py secret", "python3 app.py", "app");
	check_name("python3 -Xdev -Wignore -- tool.py -x secret", "python3 tool.py", "tool");
	check_name("python3 -m http.server 8000 --bind hunter2", "python3 -m http.server", "http.server");
	check_name("python3 -um celery worker --password hunter2", "python3 -m celery", "celery");
	check_name("python3 -c import os; os.system('hunter2')", "python3 -c", "python3");
	check_name("python3", "python3", "python3");
	check_name("/usr/local/bin/gunicorn app:wsgi --secret hunter2", "gunicorn", "gunicorn");
	check_name("", "python", "python");
	check_name("pypy3 bench.py 1", "pypy3 bench.py", "bench");
}

/* The protobuf writer against hand-encoded bytes (the protobuf encoding guide's examples). */
static void test_proto(void)
{
	struct spy_buf b = SPY_BUF_INIT, sub = SPY_BUF_INIT;
	spy_pb_uint(&b, 1, 150);
	CHECK_INT(b.len, 3);
	CHECK(!memcmp(b.buf, "\x08\x96\x01", 3));
	spy_buf_reset(&b);
	spy_pb_str(&b, 2, "testing");
	CHECK_INT(b.len, 9);
	CHECK(!memcmp(b.buf, "\x12\x07testing", 9));
	spy_buf_reset(&b);
	spy_pb_uint(&sub, 1, 150);
	spy_pb_msg(&b, 3, &sub);
	CHECK_INT(sub.len, 0);
	CHECK_INT(b.len, 5);
	CHECK(!memcmp(b.buf, "\x1a\x03\x08\x96\x01", 5));
	spy_buf_reset(&b);
	spy_pb_varint(&b, UINT64_MAX);
	CHECK_INT(b.len, 10);
	spy_buf_release(&b);
	spy_buf_release(&sub);
}

static void test_labels(void)
{
	CHECK(!push_check_app("my-app.v2_x"));
	CHECK(push_check_app("my app"));
	CHECK(push_check_app("a{b}"));
	CHECK(push_check_app(""));
	CHECK(!push_check_key("env"));
	CHECK(!push_check_key("_x9"));
	CHECK(push_check_key("9x"));
	CHECK(push_check_key("a.b"));
	CHECK(push_check_key("__name__"));
	CHECK(push_check_key("service_name"));
	CHECK(!push_check_value("prod-eu.1/x"));
	CHECK(push_check_value("a b"));
	CHECK(push_check_value("a,b"));
	CHECK(push_check_value("a=b"));
	CHECK(push_check_value("a}"));
	CHECK(push_check_value("a\n"));
	CHECK(push_check_value(""));
	char host[] = "my host,{x}";
	push_sanitize(host, false);
	CHECK_STR(host, "my_host__x_");
	char app[] = "python3.11 app";
	push_sanitize(app, true);
	CHECK_STR(app, "python3.11_app");

	struct push_config c;
	memset(&c, 0, sizeof(c));
	CHECK(push_series_label(&c.series, "host", "a"));
	CHECK(push_series_label(&c.series, "pid", "1"));
	CHECK(push_series_label(&c.series, "host", "b"));   /* a --label replaces spy's own */
	CHECK_INT(c.series.nlabels, 2);
	CHECK_STR(c.series.labels[0].value, "b");
}

static void test_auth(void)
{
	struct push_config c;
	struct spy_err err = SPY_ERR_INIT;
	memset(&c, 0, sizeof(c));
	CHECK_INT(http_url_parse("http://127.0.0.1:4040", &c.url, NULL), 0);
	unsetenv("SPY_PUSH_TOKEN");
	unsetenv("SPY_PUSH_BASIC_AUTH");
	CHECK_INT(push_config_auth(&c, NULL, NULL, NULL), 0);
	CHECK_STR(c.auth, "");
	setenv("SPY_PUSH_BASIC_AUTH", "user:pass", 1);
	CHECK_INT(push_config_auth(&c, NULL, NULL, NULL), 0);
	CHECK_STR(c.auth, "Basic dXNlcjpwYXNz");
	unsetenv("SPY_PUSH_BASIC_AUTH");
	setenv("SPY_PUSH_TOKEN", "tok\r\nX-Evil: 1", 1);
	CHECK_INT(push_config_auth(&c, NULL, NULL, &err), -SPY_EUSAGE);
	CHECK(strstr(err.msg, "control character"));

	char path[] = "/tmp/spy-test-token-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK(write(fd, "abc123\n", 7) == 7);
	close(fd);
	CHECK_INT(push_config_auth(&c, path, NULL, &err), -SPY_EUSAGE);   /* and SPY_PUSH_TOKEN: two */
	CHECK(strstr(err.msg, "not several"));
	unsetenv("SPY_PUSH_TOKEN");
	CHECK_INT(push_config_auth(&c, path, NULL, NULL), 0);
	CHECK_STR(c.auth, "Bearer abc123");
	CHECK_INT(push_config_auth(&c, NULL, path, &err), -SPY_EUSAGE);   /* basic needs USER:PASSWORD */
	/* Credentials cross a network only under TLS, unless the user said otherwise. */
	CHECK_INT(http_url_parse("http://pyroscope.example:4040", &c.url, NULL), 0);
	CHECK_INT(push_config_auth(&c, path, NULL, &err), -SPY_EUSAGE);
	CHECK(strstr(err.msg, "only over https://") && strstr(err.msg, "--push-insecure"));
	CHECK(!strstr(err.msg, "abc123"));
	c.insecure = true;
	CHECK_INT(push_config_auth(&c, path, NULL, NULL), 0);
	CHECK_STR(c.auth, "Bearer abc123");
	c.insecure = false;
	CHECK_INT(http_url_parse("https://pyroscope.example:4040", &c.url, NULL), 0);
	CHECK_INT(push_config_auth(&c, path, NULL, NULL), 0);
	CHECK_INT(http_url_parse("http://pyroscope.example:4040", &c.url, NULL), 0);
	CHECK_INT(push_config_auth(&c, NULL, NULL, NULL), 0);   /* nothing to protect */
	unlink(path);
	CHECK_INT(push_config_auth(&c, path, NULL, &err), -SPY_EIO);
	CHECK_INT(push_config_auth(&c, "/proc/self", NULL, &err), -SPY_EIO);   /* not a regular file */
}

static void test_encoding(void)
{
	struct spy_buf b = SPY_BUF_INIT;
	http_base64(&b, "", 0);
	http_base64(&b, "f", 1);
	http_base64(&b, "fo", 2);
	http_base64(&b, "foo", 3);
	CHECK_STR(b.buf, "Zg==Zm8=Zm9v");
	spy_buf_reset(&b);
	http_query_escape(&b, "app{host=a.b,x=1~}");
	CHECK_STR(b.buf, "app%7Bhost%3Da.b%2Cx%3D1~%7D");
	spy_buf_release(&b);
}

/* A listener on loopback that never accepts: connect works (the backlog), no answer ever comes. */
static int silent_listener(char *port, size_t size)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(fd, 4) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	snprintf(port, size, "%d", ntohs(a.sin_port));
	return fd;
}

static const struct http_request *request_to(struct http_url *u, const char *port, uint64_t timeout_ns)
{
	static struct http_request rq;
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%s", port);
	CHECK_INT(http_url_parse(url, u, NULL), 0);
	rq = (struct http_request){ u, "/ingest", NULL, 0, "x", 1, timeout_ns, NULL, false };
	return &rq;
}

static void test_deadlines(void)
{
	struct http_url u;
	struct http_client *c;
	char port[16];
	int lfd = silent_listener(port, sizeof(port));
	CHECK_INT(http_client_new(&c, NULL, NULL), 0);
	struct http_request rq = *request_to(&u, port, 300 * 1000 * 1000ull);
	struct http_response rs;
	struct spy_err err = SPY_ERR_INIT;
	uint64_t t0 = spy_now_ns();
	CHECK_INT(http_post(c, &rq, &rs, &err), -SPY_EIO);
	uint64_t took = spy_now_ns() - t0;
	CHECK(strstr(err.msg, "timed out"));
	CHECK(took >= 250 * 1000 * 1000ull && took < 2000 * 1000 * 1000ull);

	/* An abort time cuts a long timeout short, and says why. */
	_Atomic uint64_t abort_at = spy_now_ns() + 200 * 1000 * 1000ull;
	rq.timeout_ns = 30 * 1000 * 1000 * 1000ull;
	rq.abort_at_ns = &abort_at;
	t0 = spy_now_ns();
	CHECK_INT(http_post(c, &rq, &rs, &err), -SPY_EIO);
	CHECK(spy_now_ns() - t0 < 2500 * 1000 * 1000ull);
	CHECK(strstr(err.msg, "exiting"));
	close(lfd);

	/* Nobody listening: refused, at once. */
	rq.abort_at_ns = NULL;
	CHECK_INT(http_post(c, &rq, &rs, &err), -SPY_EIO);
	CHECK(strstr(err.msg, "refused"));
	http_client_free(c);
}

/*
 * A hostile server, in a child: accepts one connection, reads what the
 * request sends, answers with script (len bytes), then, if drip, one byte
 * of it every 50 ms, or, if forever, the line "X-Pad: ..." or body bytes
 * without end. Killed by the test when done.
 */
enum hostile_kind { H_ONCE, H_DRIP, H_ENDLESS_HEAD, H_ENDLESS_BODY };

static pid_t hostile_server(enum hostile_kind kind, const char *script, char *port, size_t size)
{
	int lfd = silent_listener(port, size);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid > 0) {
		close(lfd);
		return pid;
	}
	alarm(30);
	int fd = accept(lfd, NULL, NULL);
	char in[4096];
	struct timeval tv = { 0, 200 * 1000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (recv(fd, in, sizeof(in), 0) > 0) {
	}
	size_t n = strlen(script);
	if (kind == H_DRIP) {
		for (size_t i = 0;; i = (i + 1) % n) {
			if (send(fd, script + i, 1, MSG_NOSIGNAL) != 1) {
				_exit(0);
			}
			usleep(50 * 1000);
		}
	}
	if (send(fd, script, n, MSG_NOSIGNAL) < 0) {
		_exit(0);
	}
	static char pad[4096];
	memset(pad, kind == H_ENDLESS_HEAD ? 'a' : 'b', sizeof(pad));
	while (kind == H_ENDLESS_HEAD || kind == H_ENDLESS_BODY) {
		if (kind == H_ENDLESS_HEAD && send(fd, "X-Pad: ", 7, MSG_NOSIGNAL) != 7) {
			_exit(0);
		}
		if (send(fd, pad, sizeof(pad), MSG_NOSIGNAL) < 0) {
			_exit(0);
		}
		if (kind == H_ENDLESS_HEAD && send(fd, "\r\n", 2, MSG_NOSIGNAL) != 2) {
			_exit(0);
		}
	}
	sleep(20);
	_exit(0);
}

/* One request to a hostile server: http_post's result, err's text in why, the status in *status. */
static int against(enum hostile_kind kind, const char *script, char *why, size_t size, int *status)
{
	char port[16];
	pid_t pid = hostile_server(kind, script, port, sizeof(port));
	struct http_url u;
	struct http_client *c;
	CHECK_INT(http_client_new(&c, NULL, NULL), 0);
	struct http_request rq = *request_to(&u, port, 1500 * 1000 * 1000ull);
	struct http_response rs;
	struct spy_err err = SPY_ERR_INIT;
	uint64_t t0 = spy_now_ns();
	int rc = http_post(c, &rq, &rs, &err);
	/* Every case ends within the request's deadline (and a second's slack). */
	CHECK(spy_now_ns() - t0 < 2500 * 1000 * 1000ull);
	snprintf(why, size, "%s", rc < 0 ? err.msg : rs.reason);
	*status = rc < 0 ? 0 : rs.status;
	if (rc == 0) {
		CHECK(strlen(rs.body) < HTTP_MAX_BODY_KEPT);
	}
	http_client_free(c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return rc;
}

/* A server that never stops, drips, lies about lengths or answers garbage: bounded time, bounded memory, a reason. */
static void test_hostile(void)
{
	char why[700];
	int status;
	CHECK_INT(against(H_ENDLESS_HEAD, "HTTP/1.1 200 OK\r\n", why, sizeof(why), &status), -SPY_EIO);
	CHECK(strstr(why, "head is over"));
	CHECK_INT(against(H_DRIP, "HTTP/1.1 200 OK\r\nX: y\r\n", why, sizeof(why), &status), -SPY_EIO);
	CHECK(strstr(why, "timed out"));
	/* The status came before the body: answered with it, the rest unread. */
	CHECK_INT(against(H_ENDLESS_BODY, "HTTP/1.1 200 OK\r\n\r\n", why, sizeof(why), &status), 0);
	CHECK_INT(status, 200);
	CHECK_INT(against(H_ONCE, "HTTP/1.1 413 Too Big\r\nContent-Length: 99999999999999\r\n\r\nxx", why,
			  sizeof(why), &status), 0);
	CHECK_INT(status, 413);
	CHECK_STR(why, "Too Big");
	CHECK_INT(against(H_ONCE, "HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nxx", why, sizeof(why), &status),
		  -SPY_EIO);
	CHECK_INT(against(H_ONCE, "\x01\xff garbage\r\n\r\n", why, sizeof(why), &status), -SPY_EIO);
	/* A reason phrase with a terminal escape is shown escaped. */
	CHECK_INT(against(H_ONCE, "HTTP/1.1 400 Bad \x1b[2J\r\nContent-Length: 3\r\n\r\nno\n", why, sizeof(why),
			  &status), 0);
	CHECK_INT(status, 400);
	CHECK(!strchr(why, 0x1b) && strstr(why, "Bad "));
}

/* A server that reads one request whole, copies it to fd out, and answers 200. */
static pid_t capture_server(char *port, size_t size, int out)
{
	int lfd = silent_listener(port, size);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid > 0) {
		close(lfd);
		return pid;
	}
	alarm(30);
	int fd = accept(lfd, NULL, NULL);
	static char req[1 << 20];
	size_t n = 0, want = sizeof(req);
	ssize_t got;
	while (n < want && (got = recv(fd, req + n, sizeof(req) - n, 0)) > 0) {
		n += (size_t)got;
		char *end = memmem(req, n, "\r\n\r\n", 4);
		char *cl = end ? strcasestr(req, "\r\nContent-Length: ") : NULL;
		if (end && cl && cl < end) {
			want = (size_t)(end + 4 - req) + strtoul(cl + 18, NULL, 10);
		}
	}
	CHECK(write(out, req, n) == (ssize_t)n);
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
	CHECK(send(fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL) > 0);
	sleep(1);
	_exit(0);
}

/*
 * A window of a series of its own (what an agent pushes for each process)
 * goes out as one PushRequest to the push path, labelled with that series,
 * sorted, __name__ and service_name first among them.
 */
static void test_pusher_series(void)
{
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	char port[16], url[64];
	pid_t pid = capture_server(port, sizeof(port), pfd[1]);
	close(pfd[1]);
	struct push_config c;
	memset(&c, 0, sizeof(c));
	snprintf(url, sizeof(url), "http://127.0.0.1:%s/base/", port);
	CHECK_INT(http_url_parse(url, &c.url, NULL), 0);
	c.url_text = url;
	c.every_s = 1;
	c.timeout_ns = 5 * 1000 * 1000 * 1000ull;
	snprintf(c.series.app, sizeof(c.series.app), "record-app");
	struct push_series s;
	memset(&s, 0, sizeof(s));
	snprintf(s.app, sizeof(s.app), "billing");
	CHECK(push_series_label(&s, "pid", "42"));
	CHECK(push_series_label(&s, "container_id", "abc123"));
	s.rate_hz = 19;

	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct fg_profile *prof = fg_profile_new(&strs, 0);
	struct spy_stack st;
	memset(&st, 0, sizeof(st));
	struct spy_frame *f = spy_stack_push(&st);
	memset(f, 0, sizeof(*f));
	f->func = spy_strtab_interns(&strs, "work");
	f->file = spy_strtab_interns(&strs, "app.py");
	f->line = 3;
	f->kind = SPY_FRAME_PYTHON;
	CHECK_INT(fg_profile_add(prof, &st, 5), 0);
	fg_profile_meta_set(prof, FG_META_RATE_HZ, "19");

	struct pusher *p;
	struct push_status ps;
	CHECK_INT(pusher_start(&p, &c, NULL), 0);
	pusher_window(p, &s, prof, 1700000000, 1700000010);
	pusher_finish(p, 3 * 1000 * 1000 * 1000ull, &ps);
	CHECK_INT(ps.sent, 1);

	static char req[1 << 20];
	size_t n = 0;
	ssize_t got;
	while ((got = read(pfd[0], req + n, sizeof(req) - 1 - n)) > 0) {
		n += (size_t)got;
	}
	req[n] = 0;
	CHECK(!strncmp(req, "POST /base/push.v1.PusherService/Push HTTP/1.1\r\n", 48));
	CHECK(strcasestr(req, "\r\nContent-Type: application/proto\r\n"));
	CHECK(strcasestr(req, "\r\nConnect-Protocol-Version: 1\r\n"));
	/* The labels, in order: LabelPair{name, value} as series field 1, each. */
	static const char *const want[][2] = {
		{ "__name__", "process_cpu" }, { "container_id", "abc123" }, { "pid", "42" }, { "service_name", "billing" },
	};
	const char *at = memmem(req, n, "\r\n\r\n", 4);
	CHECK(at != NULL);
	for (size_t i = 0; at && i < 4; i++) {
		struct spy_buf lp = SPY_BUF_INIT, sub = SPY_BUF_INIT;
		spy_pb_str(&sub, 1, want[i][0]);
		spy_pb_str(&sub, 2, want[i][1]);
		spy_pb_msg(&lp, 1, &sub);
		const char *next = memmem(at, n - (size_t)(at - req), lp.buf, lp.len);
		CHECK(next != NULL);
		at = next ? next + lp.len : NULL;
		spy_buf_release(&lp);
		spy_buf_release(&sub);
	}
	CHECK(!memmem(req, n, "record-app", 10));
	close(pfd[0]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	fg_profile_free(prof);
	spy_stack_release(&st);
	spy_strtab_release(&strs);
}

static void add_frame(struct fg_profile *prof, struct spy_strtab *strs, const char *func)
{
	struct spy_stack st;
	memset(&st, 0, sizeof(st));
	struct spy_frame *f = spy_stack_push(&st);
	memset(f, 0, sizeof(*f));
	f->func = spy_strtab_interns(strs, func);
	f->file = spy_strtab_interns(strs, "app.py");
	f->line = 3;
	f->kind = SPY_FRAME_PYTHON;
	CHECK_INT(fg_profile_add(prof, &st, 1), 0);
	spy_stack_release(&st);
}

/*
 * A window over the per-window cap is refused and counted, and the
 * windows already waiting stay: one process's oversized window once
 * emptied the shared queue of every other's, then was queued anyway,
 * past the queue's byte bound.
 */
static void test_pusher_cap(void)
{
	char port[16], url[64];
	int lfd = silent_listener(port, sizeof(port));   /* never answers: the windows wait */
	struct push_config c;
	memset(&c, 0, sizeof(c));
	snprintf(url, sizeof(url), "http://127.0.0.1:%s", port);
	CHECK_INT(http_url_parse(url, &c.url, NULL), 0);
	c.url_text = url;
	c.every_s = 1;
	c.timeout_ns = 2 * 1000 * 1000 * 1000ull;
	c.max_window_bytes = 4096;
	snprintf(c.series.app, sizeof(c.series.app), "capped");
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct fg_profile *small = fg_profile_new(&strs, 0), *big = fg_profile_new(&strs, 0);
	add_frame(small, &strs, "work");
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 2000; i++) {
		char name[64];
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		snprintf(name, sizeof(name), "f%016llx%d", (unsigned long long)x, i);
		add_frame(big, &strs, name);
	}
	struct pusher *p;
	struct push_status ps;
	CHECK_INT(pusher_start(&p, &c, NULL), 0);
	for (int i = 0; i < 3; i++) {
		pusher_window(p, NULL, small, 1700000000 + i, 1700000001 + i);
	}
	pusher_window(p, NULL, big, 1700000003, 1700000004);
	pusher_status(p, &ps);
	CHECK_INT((int)ps.queued, 3);
	CHECK_INT((int)ps.dropped, 0);
	CHECK_INT((int)ps.rejected, 1);
	CHECK(strstr(ps.last_refusal, "over the 4096"));
	pusher_finish(p, 100 * 1000 * 1000ull, &ps);
	close(lfd);
	fg_profile_free(small);
	fg_profile_free(big);
	spy_strtab_release(&strs);
}

int main(void)
{
	test_url();
	test_labels();
	test_auth();
	test_encoding();
	test_program_name();
	test_proto();
	test_deadlines();
	test_hostile();
	test_pusher_series();
	test_pusher_cap();
	return check_done();
}
