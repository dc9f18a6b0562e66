/*
 * record --push's pieces that need no server: the URL (https refused, and
 * why), Pyroscope's label rules, the Authorization header from the
 * environment or a file (never both), base64 and query escaping; and the
 * HTTP client's deadlines against a listener that never answers, and one
 * that refuses.
 */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmd/push.h"
#include "common/http.h"
#include "tests/lib/check.h"

static void test_url(void)
{
	struct http_url u;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(http_url_parse("http://pyroscope:4040", &u, NULL), 0);
	CHECK_STR(u.host, "pyroscope");
	CHECK_STR(u.port, "4040");
	CHECK_STR(u.path, "");
	CHECK_INT(http_url_parse("http://example.org/base/path//", &u, NULL), 0);
	CHECK_STR(u.port, "80");
	CHECK_STR(u.path, "/base/path");
	CHECK_INT(http_url_parse("http://[::1]:4040/", &u, NULL), 0);
	CHECK_STR(u.host, "::1");
	CHECK_INT(http_url_parse("https://pyroscope:4040", &u, &err), -SPY_EUSAGE);
	CHECK(strstr(err.msg, "https is not supported") && strstr(err.msg, "TLS"));
	CHECK_INT(http_url_parse("http://user:pw@host", &u, &err), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://host:0", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://host:65536", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://host/x?y=1", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("http://", &u, NULL), -SPY_EUSAGE);
	CHECK_INT(http_url_parse("pyroscope:4040", &u, NULL), -SPY_EUSAGE);
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
	CHECK(push_config_label(&c, "host", "a"));
	CHECK(push_config_label(&c, "pid", "1"));
	CHECK(push_config_label(&c, "host", "b"));   /* a --label replaces spy's own */
	CHECK_INT(c.nlabels, 2);
	CHECK_STR(c.labels[0].value, "b");
}

static void test_auth(void)
{
	struct push_config c;
	struct spy_err err = SPY_ERR_INIT;
	memset(&c, 0, sizeof(c));
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

static void test_deadlines(void)
{
	struct http_url u;
	char url[64], port[16];
	int lfd = silent_listener(port, sizeof(port));
	snprintf(url, sizeof(url), "http://127.0.0.1:%s", port);
	CHECK_INT(http_url_parse(url, &u, NULL), 0);
	struct http_request rq = { "POST", &u, "/ingest", NULL, 0, "x", 1, 300 * 1000 * 1000ull, NULL };
	struct http_response rs;
	struct spy_err err = SPY_ERR_INIT;
	uint64_t t0 = http_now_ns();
	CHECK_INT(http_request(&rq, &rs, &err), -SPY_EIO);
	uint64_t took = http_now_ns() - t0;
	CHECK(strstr(err.msg, "timed out"));
	CHECK(took >= 250 * 1000 * 1000ull && took < 2000 * 1000 * 1000ull);

	/* An abort time cuts a long timeout short, and says why. */
	_Atomic uint64_t abort_at = http_now_ns() + 200 * 1000 * 1000ull;
	rq.timeout_ns = 30 * 1000 * 1000 * 1000ull;
	rq.abort_at_ns = &abort_at;
	t0 = http_now_ns();
	CHECK_INT(http_request(&rq, &rs, &err), -SPY_EIO);
	CHECK(http_now_ns() - t0 < 2000 * 1000 * 1000ull);
	CHECK(strstr(err.msg, "exiting"));
	close(lfd);

	/* Nobody listening: refused, at once. */
	rq.abort_at_ns = NULL;
	CHECK_INT(http_request(&rq, &rs, &err), -SPY_EIO);
	CHECK(strstr(err.msg, "refused"));
}

int main(void)
{
	test_url();
	test_labels();
	test_auth();
	test_encoding();
	test_deadlines();
	return check_done();
}
