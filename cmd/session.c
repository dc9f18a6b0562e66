/*
 * Windows and the summary line (see session.h).
 */
#include <string.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/session.h"

static void window_open(struct cmd_windows *w, const struct prof_stats *st, int64_t from_s, uint64_t seq)
{
	int64_t every = (int64_t)w->every_s;
	int64_t until_s = (from_s / every + 1) * every;
	w->win.seq = seq;
	w->win.from_s = from_s;
	w->win.ticks = 0;
	w->win.missed = st ? st->missed : 0;
	w->end_ns = (uint64_t)(until_s * 1000000000ll - w->wall_minus_mono_ns);
}

static void window_close(struct cmd_windows *w, const struct prof_stats *st, int64_t until_s, bool last)
{
	struct cmd_window c = w->win;
	c.until_s = until_s;
	c.missed = st->missed - w->win.missed;
	c.last = last;
	w->closed(w->ctx, &c);
	if (!last) {
		window_open(w, st, until_s, c.seq + 1);
	}
}

void cmd_windows_start(struct cmd_windows *w, unsigned every_s, uint64_t now_ns,
		       void (*closed)(void *ctx, const struct cmd_window *w), void *ctx)
{
	memset(w, 0, sizeof(*w));
	w->every_s = every_s;
	w->closed = closed;
	w->ctx = ctx;
	if (!every_s) {
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t wall = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
	w->wall_minus_mono_ns = wall - (int64_t)now_ns;
	window_open(w, NULL, (int64_t)ts.tv_sec, 0);
}

void cmd_windows_start_whole(struct cmd_windows *w, unsigned every_s, uint64_t now_ns,
			     void (*closed)(void *ctx, const struct cmd_window *w), void *ctx)
{
	cmd_windows_start(w, every_s, now_ns, closed, ctx);
	if (every_s) {
		w->whole = true;
		window_open(w, NULL, w->win.from_s / (int64_t)every_s * (int64_t)every_s, 0);
	}
}

void cmd_windows_check(struct cmd_windows *w, const struct prof_stats *st, uint64_t now_ns)
{
	while (w->every_s && now_ns >= w->end_ns) {
		int64_t every = (int64_t)w->every_s;
		window_close(w, st, (w->win.from_s / every + 1) * every, false);
	}
}

void cmd_windows_tick(struct cmd_windows *w, const struct prof_stats *st, uint64_t now_ns)
{
	/* A tick due just past a boundary belongs to the next window. */
	cmd_windows_check(w, st, now_ns);
	w->win.ticks++;
}

void cmd_windows_end(struct cmd_windows *w, const struct prof_stats *st, uint64_t stop_ns)
{
	if (!w->every_s) {
		return;
	}
	int64_t wall = (int64_t)stop_ns + w->wall_minus_mono_ns;
	int64_t until_s = (wall + 999999999ll) / 1000000000ll;
	if (w->whole) {
		/* Where the next would have begun. */
		until_s = (w->win.from_s / (int64_t)w->every_s + 1) * (int64_t)w->every_s;
	}
	window_close(w, st, until_s > w->win.from_s ? until_s : w->win.from_s + 1, true);
}

int cmd_no_python(struct profiler *p)
{
	struct spy_err err = SPY_ERR_INIT;
	if (prof_check_found(p, &err) == 0) {
		return 0;
	}
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_adds(&b, err.msg);
	prof_program_fate(p, &b);
	snprintf(err.msg, sizeof(err.msg), "%s", b.buf);
	spy_buf_release(&b);
	return cmd_fail(&err);
}

void cmd_summary(const struct profiler *p, uint64_t now_ns, struct spy_buf *out)
{
	struct prof_stats st;
	prof_stats(p, &st);
	double el = prof_elapsed(p, now_ns);
	spy_buf_addf(out, "spy: %llu samples in %.2f s (%.1f Hz), %llu missed ticks, errors: ",
		     (unsigned long long)st.samples, el, el > 0 ? (double)st.samples / el : 0.0,
		     (unsigned long long)st.missed);
	prof_format_errors(&st, out);
	/* Without --native, CPU the profile cannot show: the user should know to look. */
	if (st.unsampled_threads && st.unsampled_ns >= 10 * 1000 * 1000ull) {
		spy_buf_addf(out, "; %zu thread%s without Python used %.2f CPU-s, not sampled (--native samples them)",
			     st.unsampled_threads, st.unsampled_threads == 1 ? "" : "s",
			     (double)st.unsampled_ns / 1e9);
	}
	prof_exec_notes(p, out);
}
