/*
 * Continuous mode for record --push and the agent (see stream.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/stream.h"
#include "common/buf.h"
#include "common/util.h"

/* How often the sender's state is looked at for a line to print. */
#define STREAM_LOOK_NS (100 * 1000 * 1000ull)
#define STREAM_TIMEOUT_NS (10 * 1000 * 1000 * 1000ull)

void stream_sink_init(struct stream_sink *k, const char *cmd)
{
	memset(k, 0, sizeof(*k));
	k->cmd = cmd;
	k->o.every_s = UINT_MAX;
}

static int config_error(const struct stream_sink *k, const struct spy_err *err)
{
	return err->code == SPY_EUSAGE ? cmd_usage_error(k->cmd, "%s", err->msg) : cmd_fail(err);
}

/* The first option given that needs --push, or NULL. */
static const char *needs_push(const struct stream_opts *o)
{
	return o->every_s != UINT_MAX ? "--push-every"
	       : o->app               ? "--app"
	       : o->labels.n          ? "--label"
	       : o->tenant            ? "--tenant"
	       : o->token_file        ? "--token-file"
	       : o->basic_file        ? "--basic-auth-file"
	       : o->api               ? "--push-api"
	       : o->ca                ? "--push-ca"
	       : o->cert              ? "--push-cert"
	       : o->key               ? "--push-key"
	       : o->send_command      ? "--push-command"
	       : o->insecure          ? "--push-insecure"
						: NULL;
}

/* --app and --label: 0 or the exit code (2). */
static int check_names(const struct stream_sink *k)
{
	const struct stream_opts *o = &k->o;
	const char *why;
	if (o->app && (why = push_check_app(o->app))) {
		return cmd_usage_error(k->cmd, "--app '%s': %s", o->app, why);
	}
	for (size_t i = 0; i < o->labels.n; i++) {
		const char *kv = o->labels.v[i], *eq = strchr(kv, '=');
		char key[128];
		if (!eq || (size_t)(eq - kv) >= sizeof(key)) {
			return cmd_usage_error(k->cmd, "--label '%s': expected KEY=VALUE", kv);
		}
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
		if ((why = push_check_key(key)) || (why = push_check_value(eq + 1))) {
			return cmd_usage_error(k->cmd, "--label '%s': %s", kv, why);
		}
	}
	return 0;
}

int stream_sink_check(struct stream_sink *k)
{
	struct stream_opts *o = &k->o;
	if (!o->url) {
		const char *needs = needs_push(o);
		return needs ? cmd_usage_error(k->cmd, "%s goes with --push URL", needs) : 0;
	}
	if (o->every_s == UINT_MAX) {
		o->every_s = STREAM_EVERY_S;
	}
	if (o->every_s < 1 || o->every_s > STREAM_EVERY_MAX_S) {
		return cmd_usage_error(k->cmd, "--push-every must be 1 to %d seconds", STREAM_EVERY_MAX_S);
	}
	struct push_config *c = k->push = spy_xcalloc(1, sizeof(*c));
	struct spy_err err = SPY_ERR_INIT;
	const struct push_dest d = {o->url, o->api, o->ca, o->cert, o->key, o->tenant, o->insecure};
	c->send_command = o->send_command;
	if (push_config_dest(c, &d, &err) < 0) {
		return config_error(k, &err);
	}
	c->every_s = o->every_s;
	c->timeout_ns = STREAM_TIMEOUT_NS;
	int rc = check_names(k);
	if (rc) {
		return rc;
	}
	if (gethostname(k->host, sizeof(k->host) - 1) != 0 || !k->host[0]) {
		snprintf(k->host, sizeof(k->host), "unknown");
	}
	push_sanitize(k->host, false);
	return 0;
}

int stream_sink_auth(struct stream_sink *k)
{
	struct spy_err err = SPY_ERR_INIT;
	if (k->push && push_config_auth(k->push, k->o.token_file, k->o.basic_file, &err) < 0) {
		return config_error(k, &err);
	}
	return 0;
}

int stream_sink_start(struct stream_sink *k)
{
	struct spy_err err = SPY_ERR_INIT;
	return pusher_start(&k->pusher, k->push, &err) < 0 ? cmd_fail(&err) : 0;
}

void stream_sink_lines(struct stream_sink *k, uint64_t now_ns, void (*say)(void *ctx, const char *line), void *ctx)
{
	if (!k->pusher || now_ns - k->last_look_ns < STREAM_LOOK_NS) {
		return;
	}
	k->last_look_ns = now_ns;
	struct push_status st;
	pusher_status(k->pusher, &st);
	const char *url = k->push->url_text;
	struct spy_buf b = SPY_BUF_INIT;
	if (st.failing && !k->shown.failing) {
		spy_buf_addf(&b, "push to %s failed: %s; retrying, the windows are kept", url, st.last_error);
		say(ctx, b.buf);
	} else if (!st.failing && k->shown.failing && st.sent > k->shown.sent) {
		spy_buf_reset(&b);
		spy_buf_addf(&b, "push to %s works again", url);
		say(ctx, b.buf);
	}
	if (st.rejected > k->shown.rejected) {
		spy_buf_reset(&b);
		spy_buf_addf(&b, "push to %s: %llu window(s) refused, not sent again: %s", url,
			     (unsigned long long)(st.rejected - k->shown.rejected), st.last_refusal);
		say(ctx, b.buf);
	}
	if (st.dropped > k->shown.dropped) {
		spy_buf_reset(&b);
		spy_buf_addf(&b, "push: the queue is full: %llu oldest window(s) dropped",
			     (unsigned long long)(st.dropped - k->shown.dropped));
		say(ctx, b.buf);
	}
	spy_buf_release(&b);
	k->shown = st;
}

void stream_sink_finish(struct stream_sink *k, uint64_t wait_ns, struct push_status *st)
{
	memset(st, 0, sizeof(*st));
	if (k->pusher) {
		pusher_finish(k->pusher, wait_ns, st);
		k->pusher = NULL;
	}
}

void stream_sink_release(struct stream_sink *k)
{
	free(k->push);
	free(k->o.labels.v);
	k->push = NULL;
	k->o.labels.v = NULL;
}

bool stream_label(struct stream *s, const char *key, const char *value)
{
	return push_series_label(&s->series, key, value);
}

int stream_open(struct stream *s, struct stream_sink *k, const char *app, const char *cmdline, int pid,
		const char *python)
{
	memset(s, 0, sizeof(*s));
	s->sink = k;
	s->pid = pid;
	app = app ? app : k->o.app;
	if (app) {
		snprintf(s->series.app, sizeof(s->series.app), "%s", app);
	} else {
		push_default_app(cmdline, s->series.app, sizeof(s->series.app));
	}
	char spid[16], py[64];
	snprintf(spid, sizeof(spid), "%d", pid);
	snprintf(py, sizeof(py), "%s", python);
	push_sanitize(py, false);
	stream_label(s, "host", k->host);
	stream_label(s, "pid", spid);
	/* record -s watching a shell: no Python known yet, and a label has a value. */
	if (py[0]) {
		stream_label(s, "python", py);
	}
	for (size_t i = 0; i < k->o.labels.n; i++) {
		const char *kv = k->o.labels.v[i], *eq = strchr(kv, '=');
		char key[128];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
		if (!stream_label(s, key, eq + 1)) {
			return cmd_usage_error(k->cmd, "more than %d labels", PUSH_MAX_LABELS);
		}
	}
	return 0;
}

void stream_window(struct stream *s, struct fg_profile *p, const char *python, const char *command, double rate_hz,
		   int64_t from_s, int64_t until_s)
{
	struct fg_stats st;
	fg_profile_stats(p, &st);
	if (st.samples > 0) {
		fg_profile_meta_set(p, FG_META_SPY_VERSION, SPY_VERSION);
		fg_profile_meta_setf(p, FG_META_PID, "%d", s->pid);
		fg_profile_meta_set(p, FG_META_PYTHON, python);
		fg_profile_meta_setf(p, FG_META_RATE_HZ, "%g", rate_hz);
		fg_profile_meta_setf(p, FG_META_DURATION_S, "%lld", (long long)(until_s - from_s));
		fg_profile_meta_set(p, FG_META_COMMAND, command);
	}
	s->series.rate_hz = rate_hz;
	pusher_window(s->sink->pusher, &s->series, p, from_s, until_s);
}
