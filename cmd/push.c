/*
 * record --push (see push.h): the labels, the request, the queue and the
 * sender thread.
 *
 * The request, as Pyroscope's server API documents it for pprof with a
 * sample type configuration: POST {base}/ingest?name=APP{k=v,...}&from=S
 * &until=S&format=pprof&sampleRate=HZ&spyName=spy, Content-Type
 * multipart/form-data, a form file "profile" (the gzip'd pprof) and a form
 * file "sample_type_config" (JSON). The configuration names spy's sample
 * type ("samples", counted per tick) the "cpu" profile of the application,
 * summed and sampled, so that it shows as APP's cpu profile; the pprof's
 * second type (wall nanoseconds) is left out of it, so is not ingested
 * twice. spy's default samples are the threads running or holding the GIL
 * (with -i, idle ones too): what Python agents report as cpu.
 *
 * Retry: 1 s after a failure, doubling to 30 s, but never longer than the
 * push period, so a backend that comes back is caught up with within one
 * period. A window the server refuses (a 4xx other than 408 and 429) is
 * dropped at once: sending it again would be refused again.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd/push.h"
#include "common/util.h"

#define BACKOFF_MIN_NS (1000 * 1000 * 1000ull)
#define BACKOFF_MAX_NS (30 * 1000 * 1000 * 1000ull)
/* While flushing at exit, a failed push is tried again this soon. */
#define FLUSH_RETRY_NS (250 * 1000 * 1000ull)
/* How long past its flush time a sender stuck in a name lookup is waited for. */
#define JOIN_GRACE_NS (1000 * 1000 * 1000ull)
/* A credentials file larger than this is not one. */
#define MAX_SECRET 1000

static const char sample_type_config[] =
	"{\"samples\":{\"units\":\"samples\",\"aggregation\":\"sum\",\"display-name\":\"cpu\",\"sampled\":true}}\n";

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

bool push_config_label(struct push_config *c, const char *key, const char *value)
{
	size_t i = 0;
	while (i < c->nlabels && strcmp(c->labels[i].key, key)) {
		i++;
	}
	if (i == PUSH_MAX_LABELS) {
		return false;
	}
	c->nlabels += i == c->nlabels;
	snprintf(c->labels[i].key, sizeof(c->labels[i].key), "%s", key);
	snprintf(c->labels[i].value, sizeof(c->labels[i].value), "%s", value);
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

/* ---- the queue ---- */

struct window {
	int64_t from_s, until_s;
	char *body;
	size_t len;
};

struct pusher {
	struct push_config c;
	char boundary[48];
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;

	/* under mu */
	struct window q[PUSH_MAX_WINDOWS];   /* a ring: head is the oldest */
	size_t head, n, bytes;
	bool inflight;                       /* the sender holds q's oldest, taken out */
	bool closing;
	struct push_status st;

	_Atomic uint64_t abort_at_ns;        /* UINT64_MAX until closing */
};

static void window_free(struct window *w)
{
	free(w->body);
	memset(w, 0, sizeof(*w));
}

/* Under mu: drop the oldest queued window. */
static void drop_oldest(struct pusher *p)
{
	struct window *w = &p->q[p->head];
	p->bytes -= w->len;
	window_free(w);
	p->head = (p->head + 1) % PUSH_MAX_WINDOWS;
	p->n--;
	p->st.dropped++;
}

/* The multipart body: the profile, then the sample type configuration. */
static char *make_body(const struct pusher *p, const void *pprof, size_t len, size_t *out_len)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "--%s\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n"
		     "Content-Type: application/octet-stream\r\n\r\n", p->boundary);
	spy_buf_add(&b, pprof, len);
	spy_buf_addf(&b, "\r\n--%s\r\nContent-Disposition: form-data; name=\"sample_type_config\"; "
		     "filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n%s\r\n--%s--\r\n",
		     p->boundary, sample_type_config, p->boundary);
	return spy_buf_detach(&b, out_len);
}

void pusher_enqueue(struct pusher *p, int64_t from_s, int64_t until_s, const void *pprof, size_t len)
{
	/* The boundary must not occur in the profile; a random one almost never does. */
	if (memmem(pprof, len, p->boundary, strlen(p->boundary))) {
		pthread_mutex_lock(&p->mu);
		p->st.rejected++;
		snprintf(p->st.last_error, sizeof(p->st.last_error), "a window's profile held the form boundary");
		pthread_mutex_unlock(&p->mu);
		return;
	}
	struct window w = { from_s, until_s, NULL, 0 };
	w.body = make_body(p, pprof, len, &w.len);
	pthread_mutex_lock(&p->mu);
	while (p->n > 0 && (p->n + p->inflight >= PUSH_MAX_WINDOWS || p->bytes + w.len > PUSH_MAX_BYTES)) {
		drop_oldest(p);
	}
	if (p->n < PUSH_MAX_WINDOWS) {
		p->q[(p->head + p->n) % PUSH_MAX_WINDOWS] = w;
		p->n++;
		p->bytes += w.len;
		w.body = NULL;
	} else {
		p->st.dropped++;
	}
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	free(w.body);
}

void pusher_skip(struct pusher *p)
{
	pthread_mutex_lock(&p->mu);
	p->st.empty++;
	pthread_mutex_unlock(&p->mu);
}

void pusher_status(struct pusher *p, struct push_status *st)
{
	pthread_mutex_lock(&p->mu);
	*st = p->st;
	st->queued = p->n + p->inflight;
	pthread_mutex_unlock(&p->mu);
}

/* ---- sending ---- */

static void name_param(const struct push_config *c, struct spy_buf *out)
{
	struct spy_buf name = SPY_BUF_INIT;
	spy_buf_addf(&name, "%s{", c->app);
	for (size_t i = 0; i < c->nlabels; i++) {
		spy_buf_addf(&name, "%s%s=%s", i ? "," : "", c->labels[i].key, c->labels[i].value);
	}
	spy_buf_adds(&name, "}");
	http_query_escape(out, name.buf);
	spy_buf_release(&name);
}

/* 1 sent, 0 failed (retry), -1 refused (drop); why in err. */
static int send_window(struct pusher *p, const struct window *w, struct spy_err *err)
{
	const struct push_config *c = &p->c;
	struct spy_buf target = SPY_BUF_INIT, ctype = SPY_BUF_INIT;
	spy_buf_addf(&target, "%s/ingest?name=", c->url.path);
	name_param(c, &target);
	spy_buf_addf(&target, "&from=%lld&until=%lld&format=pprof&sampleRate=%g&spyName=spy",
		     (long long)w->from_s, (long long)w->until_s, c->rate_hz);
	spy_buf_addf(&ctype, "multipart/form-data; boundary=%s", p->boundary);
	struct http_header h[3];
	size_t nh = 0;
	h[nh++] = (struct http_header){ "Content-Type", ctype.buf };
	if (c->tenant[0]) {
		h[nh++] = (struct http_header){ "X-Scope-OrgID", c->tenant };
	}
	if (c->auth[0]) {
		h[nh++] = (struct http_header){ "Authorization", c->auth };
	}
	struct http_request rq = { "POST", &c->url, target.buf, h, nh, w->body, w->len, c->timeout_ns,
				   &p->abort_at_ns };
	struct http_response rs;
	int rc = http_request(&rq, &rs, err);
	if (rc == 0 && rs.status >= 200 && rs.status < 300) {
		rc = 1;
	} else if (rc == 0) {
		bool retry = rs.status >= 500 || rs.status == 408 || rs.status == 429;
		spy_err_set(err, SPY_EIO, "HTTP %d %s%s%s", rs.status, rs.reason, rs.body[0] ? ": " : "", rs.body);
		rc = retry ? 0 : -1;
	} else {
		rc = 0;
	}
	spy_buf_release(&target);
	spy_buf_release(&ctype);
	return rc;
}

static void wait_until(struct pusher *p, uint64_t mono_ns)
{
	/* The condition variable runs on CLOCK_MONOTONIC (see pusher_start). */
	struct timespec ts = { (time_t)(mono_ns / 1000000000ull), (long)(mono_ns % 1000000000ull) };
	pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

static void *sender(void *arg)
{
	struct pusher *p = arg;
	uint64_t backoff = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->n == 0 && !p->closing) {
			pthread_cond_wait(&p->cv, &p->mu);
		}
		if (p->n == 0 || http_now_ns() >= atomic_load(&p->abort_at_ns)) {
			break;
		}
		struct window w = p->q[p->head];
		memset(&p->q[p->head], 0, sizeof(w));
		p->head = (p->head + 1) % PUSH_MAX_WINDOWS;
		p->n--;
		p->bytes -= w.len;
		p->inflight = true;
		pthread_mutex_unlock(&p->mu);

		struct spy_err err = SPY_ERR_INIT;
		int rc = send_window(p, &w, &err);

		pthread_mutex_lock(&p->mu);
		p->inflight = false;
		if (rc != 0) {
			rc > 0 ? p->st.sent++ : p->st.rejected++;
			p->st.failing = false;
			window_free(&w);
			backoff = 0;
			continue;
		}
		p->st.failures++;
		p->st.failing = true;
		snprintf(p->st.last_error, sizeof(p->st.last_error), "%s", err.msg);
		/* Kept, at the head again, unless the queue filled meanwhile: then it is the oldest, dropped. */
		if (p->n < PUSH_MAX_WINDOWS && p->bytes + w.len <= PUSH_MAX_BYTES) {
			p->head = (p->head + PUSH_MAX_WINDOWS - 1) % PUSH_MAX_WINDOWS;
			p->q[p->head] = w;
			p->n++;
			p->bytes += w.len;
		} else {
			window_free(&w);
			p->st.dropped++;
		}
		uint64_t cap = (uint64_t)p->c.every_s * 1000000000ull;
		cap = cap < BACKOFF_MAX_NS ? cap : BACKOFF_MAX_NS;
		backoff = backoff ? backoff * 2 : BACKOFF_MIN_NS;
		backoff = backoff > cap ? cap : backoff;
		uint64_t until = http_now_ns() + backoff;
		for (uint64_t now = http_now_ns(); now < until && now < atomic_load(&p->abort_at_ns);
		     now = http_now_ns()) {
			if (p->closing && until > now + FLUSH_RETRY_NS) {
				until = now + FLUSH_RETRY_NS;
			}
			wait_until(p, until);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pusher_start(struct pusher **out, const struct push_config *c, struct spy_err *err)
{
	struct pusher *p = spy_xcalloc(1, sizeof(*p));
	p->c = *c;
	atomic_store(&p->abort_at_ns, UINT64_MAX);
	uint64_t r = spy_mix64(http_now_ns() ^ (uint64_t)getpid() << 32);
	uint64_t r2 = spy_mix64(r + 0x9e3779b97f4a7c15ull);
	snprintf(p->boundary, sizeof(p->boundary), "spy-%016llx%016llx", (unsigned long long)r,
		 (unsigned long long)r2);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&p->mu, NULL);
	/* The thread blocks every signal: SIGINT and SIGTERM (the stop), SIGCHLD stay the sampler's. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&p->thread, NULL, sender, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return spy_err_set(err, SPY_EIO, "cannot start the push thread: %s", strerror(rc));
	}
	*out = p;
	return 0;
}

void pusher_finish(struct pusher *p, uint64_t wait_ns, struct push_status *st)
{
	pthread_mutex_lock(&p->mu);
	p->closing = true;
	atomic_store(&p->abort_at_ns, http_now_ns() + wait_ns);
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	/*
	 * Every step of a request has a deadline but the name lookup: a
	 * resolver that hangs must not hold the exit. The thread is then left
	 * behind, with p, for the process's end.
	 */
	uint64_t limit = http_now_ns() + wait_ns + JOIN_GRACE_NS;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t rt = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (limit - http_now_ns());
	ts.tv_sec = (time_t)(rt / 1000000000ull);
	ts.tv_nsec = (long)(rt % 1000000000ull);
	if (pthread_timedjoin_np(p->thread, NULL, &ts) != 0) {
		pusher_status(p, st);
		pthread_detach(p->thread);
		return;
	}
	pusher_status(p, st);
	while (p->n > 0) {
		window_free(&p->q[p->head]);
		p->head = (p->head + 1) % PUSH_MAX_WINDOWS;
		p->n--;
	}
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
