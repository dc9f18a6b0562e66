/*
 * record --push (see push.h): the requests, the queue and the sender
 * thread.
 *
 * push (the default), as Pyroscope's API reference documents its Connect
 * endpoint (unary, binary protobuf): POST {base}/push.v1.PusherService/Push,
 * Content-Type application/proto, Connect-Protocol-Version 1, body a
 * push.v1.PushRequest:
 *   PushRequest      { repeated RawProfileSeries series = 1; }
 *   RawProfileSeries { repeated types.v1.LabelPair labels = 1;
 *                      repeated RawSample samples = 2; }
 *   RawSample        { bytes raw_profile = 1; string ID = 2; }
 *   types.v1.LabelPair { string name = 1; string value = 2; }
 * One series per window: labels __name__ = process_cpu, service_name =
 * the application name, then host, pid, python and --label's, sorted by
 * name as Pyroscope keeps them; one sample, the window's gzip'd pprof and
 * a random UUID. The pprof carries the window's start (time_nanos) and
 * length (duration_nanos): a window kept through an outage lands where it
 * was taken.
 *
 * ingest (--push-api ingest), as the server API documents it for pprof
 * with a sample type configuration: POST {base}/ingest?name=APP{k=v,...}
 * &from=S&until=S&format=pprof&sampleRate=HZ&spyName=spy, Content-Type
 * multipart/form-data, a form file "profile" (the gzip'd pprof) and a form
 * file "sample_type_config" (JSON) naming spy's "samples" the
 * application's "cpu" profile, summed and sampled; the pprof's second
 * type (cpu nanoseconds) is left out, so not ingested twice.
 *
 * spy's default samples are the threads running or holding the GIL (with
 * -i, idle ones too): what Python agents report as cpu.
 *
 * Retry: 1 s after a failure, doubling to 30 s, but never longer than the
 * push period, so a backend that comes back is caught up with within one
 * period. A window the server refuses (a 4xx other than 408 and 429) is
 * dropped at once: sending it again would be refused again.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cmd/push.h"
#include "common/proto.h"
#include "common/util.h"

#define BACKOFF_MIN_NS (1000 * 1000 * 1000ull)
#define BACKOFF_MAX_NS (30 * 1000 * 1000 * 1000ull)
/* While flushing at exit, a failed push is tried again this soon. */
#define FLUSH_RETRY_NS (250 * 1000 * 1000ull)
/* How long past its flush time a sender stuck in a request is waited for. */
#define JOIN_GRACE_NS (2000 * 1000 * 1000ull)
/* Processes whose window root frame is remembered (-s: a few; more are computed again). */
#define ROOT_CACHE 16

static const char sample_type_config[] =
	"{\"samples\":{\"units\":\"samples\",\"aggregation\":\"sum\",\"display-name\":\"cpu\",\"sampled\":true}}\n";

struct window {
	char *target;    /* ingest: the path and query (the series' name); NULL for push */
	char *body;
	size_t len;
};

struct pusher {
	struct push_config c;
	struct http_client *http;            /* the sender's */
	char boundary[48];                   /* ingest's form boundary */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;

	/* under mu */
	struct window q[PUSH_MAX_WINDOWS];   /* a ring: head is the oldest */
	size_t head, n, bytes;
	bool inflight;                       /* the sender holds q's oldest, taken out */
	size_t inflight_bytes;               /* its size, which the bound counts too */
	bool closing;
	struct push_status st;

	_Atomic uint64_t abort_at_ns;        /* UINT64_MAX until closing */

	/* the sampling thread's */
	struct {
		const char *root, *shown;
	} roots[ROOT_CACHE];
};

/* ---- what a window says of its process ---- */

const char *pusher_root(struct pusher *p, struct spy_strtab *strs, const char *root, int pid,
			const char *cmdline)
{
	if (p->c.send_command) {
		return root;
	}
	size_t slot = (size_t)(spy_mix64((uint64_t)(uintptr_t)root) % ROOT_CACHE);
	if (p->roots[slot].root == root) {
		return p->roots[slot].shown;
	}
	char name[300];
	push_program_name(cmdline, name, sizeof(name));
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "process %d \"%s\"", pid, name);
	p->roots[slot].root = root;
	p->roots[slot].shown = spy_strtab_interns(strs, b.buf);
	spy_buf_release(&b);
	return p->roots[slot].shown;
}

void pusher_command(const struct pusher *p, const char *cmdline, char *out, size_t size)
{
	if (p->c.send_command) {
		snprintf(out, size, "%s", cmdline);
	} else {
		push_program_name(cmdline, out, size);
	}
}

/* ---- the requests' bodies ---- */

/* A random (version 4) UUID, for RawSample.ID. */
static void uuid4(char out[37])
{
	unsigned char r[16];
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* No entropy yet (early boot): unique is what matters, not unpredictable. */
		uint64_t a = spy_mix64(spy_now_ns() ^ (uint64_t)getpid() << 32), b = spy_mix64(a + 1);
		memcpy(r, &a, 8);
		memcpy(r + 8, &b, 8);
	}
	r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
	r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (size_t i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10) {
			out[o++] = '-';
		}
		out[o++] = hex[r[i] >> 4];
		out[o++] = hex[r[i] & 15];
	}
	out[o] = 0;
}

static int label_cmp(const void *a, const void *b)
{
	return strcmp(((const struct push_label *)a)->key, ((const struct push_label *)b)->key);
}

/* The PushRequest of one window: its series' labels and the pprof. */
static char *push_body(const struct push_series *s, const void *pprof, size_t len, size_t *out_len)
{
	struct push_label labels[PUSH_MAX_LABELS + 2];
	size_t n = 0;
	labels[n++] = (struct push_label){ "__name__", "process_cpu" };
	snprintf(labels[n].key, sizeof(labels[n].key), "service_name");
	snprintf(labels[n].value, sizeof(labels[n].value), "%s", s->app);
	n++;
	memcpy(labels + n, s->labels, s->nlabels * sizeof(s->labels[0]));
	n += s->nlabels;
	qsort(labels, n, sizeof(labels[0]), label_cmp);

	struct spy_buf series = SPY_BUF_INIT, sub = SPY_BUF_INIT, out = SPY_BUF_INIT;
	for (size_t i = 0; i < n; i++) {
		spy_pb_str(&sub, 1, labels[i].key);
		spy_pb_str(&sub, 2, labels[i].value);
		spy_pb_msg(&series, 1, &sub);
	}
	char id[37];
	uuid4(id);
	spy_pb_bytes(&sub, 1, pprof, len);
	spy_pb_str(&sub, 2, id);
	spy_pb_msg(&series, 2, &sub);
	spy_pb_msg(&out, 1, &series);
	spy_buf_release(&sub);
	spy_buf_release(&series);
	return spy_buf_detach(&out, out_len);
}

/* The ingest form: the profile, then the sample type configuration; NULL if the boundary is in the profile. */
static char *ingest_body(const struct pusher *p, const void *pprof, size_t len, size_t *out_len)
{
	/* A random boundary almost never occurs in a profile. */
	if (memmem(pprof, len, p->boundary, strlen(p->boundary))) {
		return NULL;
	}
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "--%s\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n"
		     "Content-Type: application/octet-stream\r\n\r\n", p->boundary);
	spy_buf_add(&b, pprof, len);
	spy_buf_addf(&b, "\r\n--%s\r\nContent-Disposition: form-data; name=\"sample_type_config\"; "
		     "filename=\"sample_type_config.json\"\r\nContent-Type: application/json\r\n\r\n%s\r\n--%s--\r\n",
		     p->boundary, sample_type_config, p->boundary);
	return spy_buf_detach(&b, out_len);
}

/* ingest's target: the path and the query, the series' name in it. */
static char *ingest_target(const struct push_series *s, int64_t from_s, int64_t until_s)
{
	struct spy_buf name = SPY_BUF_INIT, t = SPY_BUF_INIT;
	spy_buf_addf(&name, "%s{", s->app);
	for (size_t i = 0; i < s->nlabels; i++) {
		spy_buf_addf(&name, "%s%s=%s", i ? "," : "", s->labels[i].key, s->labels[i].value);
	}
	spy_buf_adds(&name, "}");
	spy_buf_adds(&t, "/ingest?name=");
	http_query_escape(&t, name.buf);
	spy_buf_addf(&t, "&from=%lld&until=%lld&format=pprof&sampleRate=%g&spyName=spy", (long long)from_s,
		     (long long)until_s, s->rate_hz);
	spy_buf_release(&name);
	return spy_buf_detach(&t, NULL);
}

/* ---- the queue ---- */

static void window_free(struct window *w)
{
	free(w->target);
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

static void enqueue(struct pusher *p, struct window w)
{
	pthread_mutex_lock(&p->mu);
	/* w is at most PUSH_MAX_WINDOW_BYTES (pusher_window): the others it evicts leave room for it. */
	while (p->n > 0 && (p->n + p->inflight >= PUSH_MAX_WINDOWS ||
			    p->bytes + p->inflight_bytes + w.len > PUSH_MAX_BYTES)) {
		drop_oldest(p);
	}
	if (p->n < PUSH_MAX_WINDOWS) {
		p->q[(p->head + p->n) % PUSH_MAX_WINDOWS] = w;
		p->n++;
		p->bytes += w.len;
		w.body = w.target = NULL;
	} else {
		p->st.dropped++;
	}
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	window_free(&w);
}

/* A window not sent for a reason of spy's own (counted as refused, the reason kept). */
static void not_sent(struct pusher *p, const char *why)
{
	pthread_mutex_lock(&p->mu);
	p->st.rejected++;
	snprintf(p->st.last_refusal, sizeof(p->st.last_refusal), "%s", why);
	pthread_mutex_unlock(&p->mu);
}

void pusher_window(struct pusher *p, const struct push_series *s, const struct fg_profile *prof, int64_t from_s,
		   int64_t until_s)
{
	s = s ? s : &p->c.series;
	struct fg_stats fs;
	fg_profile_stats(prof, &fs);
	if (fs.samples == 0) {
		pthread_mutex_lock(&p->mu);
		p->st.empty++;
		pthread_mutex_unlock(&p->mu);
		return;
	}
	char *pprof = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&pprof, &len);
	struct fg_pprof_opts po = { true, from_s * 1000000000ll };
	struct spy_err err = SPY_ERR_INIT;
	int rc = f ? fg_profile_write_pprof(prof, &po, f, &err) : spy_err_set(&err, SPY_EIO, "out of memory");
	if (f && fclose(f) != 0 && rc == 0) {
		rc = spy_err_set(&err, SPY_EIO, "window: %s", strerror(errno));
	}
	struct window w = { NULL, NULL, 0 };
	if (rc == 0 && p->c.api == PUSH_API_PUSH) {
		w.body = push_body(s, pprof, len, &w.len);
	} else if (rc == 0) {
		w.body = ingest_body(p, pprof, len, &w.len);
		w.target = w.body ? ingest_target(s, from_s, until_s) : NULL;
	}
	free(pprof);
	size_t cap = p->c.max_window_bytes ? p->c.max_window_bytes : PUSH_MAX_WINDOW_BYTES;
	if (rc < 0) {
		not_sent(p, err.msg);
	} else if (!w.body) {
		not_sent(p, "a window's profile held the form boundary");
	} else if (w.len > cap) {
		char why[160];
		snprintf(why, sizeof(why), "a window's request of %zu bytes is over the %zu one may take", w.len, cap);
		not_sent(p, why);
		window_free(&w);
	} else {
		enqueue(p, w);
	}
}

void pusher_status(struct pusher *p, struct push_status *st)
{
	pthread_mutex_lock(&p->mu);
	*st = p->st;
	st->queued = p->n + p->inflight;
	pthread_mutex_unlock(&p->mu);
}

/* ---- sending ---- */

/* 1 sent, 0 failed (retry), -1 refused (drop); why in err. */
static int send_window(struct pusher *p, const struct window *w, struct spy_err *err)
{
	const struct push_config *c = &p->c;
	struct spy_buf target = SPY_BUF_INIT, ctype = SPY_BUF_INIT;
	struct http_header h[4];
	size_t nh = 0;
	if (c->api == PUSH_API_PUSH) {
		spy_buf_adds(&target, "/push.v1.PusherService/Push");
		spy_buf_adds(&ctype, "application/proto");
		h[nh++] = (struct http_header){ "Connect-Protocol-Version", "1" };
	} else {
		spy_buf_adds(&target, w->target);
		spy_buf_addf(&ctype, "multipart/form-data; boundary=%s", p->boundary);
	}
	h[nh++] = (struct http_header){ "Content-Type", ctype.buf };
	if (c->tenant[0]) {
		h[nh++] = (struct http_header){ "X-Scope-OrgID", c->tenant };
	}
	if (c->auth[0]) {
		h[nh++] = (struct http_header){ "Authorization", c->auth };
	}
	/*
	 * Credentials over plain http are let go to a loopback server only
	 * (push_config_auth): straight to it, never through a proxy that the
	 * environment names, which may be on another machine.
	 */
	bool direct = c->auth[0] && !c->url.https && c->url.loopback && !c->insecure;
	struct http_request rq = { &c->url, target.buf, h, nh, w->body, w->len, c->timeout_ns, &p->abort_at_ns,
				   direct };
	struct http_response rs;
	int rc = http_post(p->http, &rq, &rs, err);
	if (rc == 0 && rs.status >= 200 && rs.status < 300) {
		rc = 1;
	} else if (rc == 0) {
		bool retry = rs.status >= 500 || rs.status == 408 || rs.status == 429;
		const char *reason = rs.reason[0] ? rs.reason : http_reason(rs.status);
		spy_err_set(err, SPY_EIO, "HTTP %d%s%s%s%s", rs.status, reason[0] ? " " : "", reason,
			    rs.body[0] ? ": " : "", rs.body);
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

/* Under mu: after a failed attempt, wait the backoff (shortened while closing); the new backoff. */
static uint64_t back_off(struct pusher *p, uint64_t backoff)
{
	uint64_t cap = (uint64_t)p->c.every_s * 1000000000ull;
	cap = cap < BACKOFF_MAX_NS ? cap : BACKOFF_MAX_NS;
	backoff = backoff ? backoff * 2 : BACKOFF_MIN_NS;
	backoff = backoff > cap ? cap : backoff;
	uint64_t until = spy_now_ns() + backoff;
	for (uint64_t now = spy_now_ns(); now < until && now < atomic_load(&p->abort_at_ns); now = spy_now_ns()) {
		if (p->closing && until > now + FLUSH_RETRY_NS) {
			until = now + FLUSH_RETRY_NS;
		}
		wait_until(p, until);
	}
	return backoff;
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
		if (p->n == 0 || spy_now_ns() >= atomic_load(&p->abort_at_ns)) {
			break;
		}
		struct window w = p->q[p->head];
		memset(&p->q[p->head], 0, sizeof(w));
		p->head = (p->head + 1) % PUSH_MAX_WINDOWS;
		p->n--;
		p->bytes -= w.len;
		p->inflight = true;
		p->inflight_bytes = w.len;
		pthread_mutex_unlock(&p->mu);

		struct spy_err err = SPY_ERR_INIT;
		int rc = send_window(p, &w, &err);

		pthread_mutex_lock(&p->mu);
		p->inflight = false;
		p->inflight_bytes = 0;
		if (rc != 0) {
			if (rc > 0) {
				p->st.sent++;
			} else {
				p->st.rejected++;
				snprintf(p->st.last_refusal, sizeof(p->st.last_refusal), "%s", err.msg);
			}
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
		backoff = back_off(p, backoff);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pusher_start(struct pusher **out, const struct push_config *c, struct spy_err *err)
{
	struct pusher *p = spy_xcalloc(1, sizeof(*p));
	p->c = *c;
	/* libcurl's global set-up is made here, before the thread. */
	int rc = http_client_new(&p->http, &p->c.tls, err);
	if (rc < 0) {
		free(p);
		return rc;
	}
	atomic_store(&p->abort_at_ns, UINT64_MAX);
	uint64_t r = spy_mix64(spy_now_ns() ^ (uint64_t)getpid() << 32);
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
	rc = pthread_create(&p->thread, NULL, sender, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		http_client_free(p->http);
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
	atomic_store(&p->abort_at_ns, spy_now_ns() + wait_ns);
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	/*
	 * Every request has a deadline and sees the abort time, but libcurl
	 * looks at it about once a second: a thread still in a request a
	 * second past the flush time is left behind, with p, for the
	 * process's end.
	 */
	uint64_t limit = spy_now_ns() + wait_ns + JOIN_GRACE_NS;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t rt = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (limit - spy_now_ns());
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
	http_client_free(p->http);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
