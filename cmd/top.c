/*
 * spy top: a live view of the functions a Python process spends its time
 * in, redrawn every --refresh seconds, like py-spy top.
 *
 * Sampling is cmd/sampling.c's loop; this file aggregates and draws. Two
 * profiles are kept: one for the current refresh interval (the %Own and
 * %Total columns, what is hot now) and one since the start (the OwnTime
 * and TotalTime columns), and flamegraph's per-function table does the
 * accounting for both, so recursion is counted once per stack here as in
 * record's cumtime table. The interval profile is thrown away at each
 * refresh: memory stays bounded by what one interval sees plus the
 * distinct stacks of the whole run.
 *
 * On a terminal the view takes the alternate screen and redraws in place;
 * every way out (duration, Ctrl-C, SIGTERM, the target exiting) gives the
 * screen back and prints the last view on the normal one. Anywhere else
 * (a pipe, a file) each refresh prints one plain snapshot, starting with a
 * "spy top" line, after a blank line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/sampling.h"
#include "cmd/top.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

/* Rates above this are a busy loop, not sampling (as for record). */
#define TOP_MAX_RATE_HZ 100000.0
/* Redrawing faster than this only burns the CPU the target wants. */
#define TOP_MIN_REFRESH_S 0.05
/* Rows of a snapshot written to a pipe, where no terminal says how many fit. */
#define TOP_PIPE_ROWS 50

struct top {
	struct sampling s;
	enum top_sort sort;
	bool tty;
	double refresh_s;
	struct fg_profile *cur, *cum;
	uint64_t next_ns;
	/* the sampler's counters at the start of the interval */
	uint64_t mark_ns, mark_samples, mark_gil, mark_threads, mark_active;
	struct spy_buf screen;    /* the last snapshot, plain */
	unsigned snapshots;
};

static const char *const top_usage[] = {
	"spy top [OPTIONS] --pid PID",
	"spy top [OPTIONS] -- PROGRAM [ARGS...]",
	NULL,
};

/* ---- aggregation ---- */

static int add_stack(void *ctx, struct sampling *s, const struct spy_stack *stack,
		     const struct smp_sample *info)
{
	struct top *t = ctx;
	int rc = fg_profile_add(t->cum, stack, 1);
	return rc < 0 ? rc : fg_profile_add(t->cur, stack, 1);
}

static int cmp_key(const void *x, const void *y)
{
	const struct fg_row *a = x, *b = y;
	if (a->func != b->func) {
		return (uintptr_t)a->func < (uintptr_t)b->func ? -1 : 1;
	}
	if (a->file != b->file) {
		return (uintptr_t)a->file < (uintptr_t)b->file ? -1 : 1;
	}
	return 0;
}

/*
 * One row per function seen since the start, with its interval shares.
 * Both tables come from profiles on one string table, so a function is the
 * same pair of pointers in both.
 */
static struct top_row *build_rows(struct top *t, size_t *n)
{
	struct fg_table cum, cur;
	struct fg_table_opts o = FG_TABLE_OPTS_INIT;
	o.rate_hz = t->s.o.rate;
	fg_table_init(&cum, t->cum, &o);
	fg_table_init(&cur, t->cur, &o);
	qsort(cur.rows, cur.n, sizeof(*cur.rows), cmp_key);
	struct top_row *rows = spy_xcalloc(cum.n + 1, sizeof(*rows));
	for (size_t i = 0; i < cum.n; i++) {
		const struct fg_row *c = &cum.rows[i];
		const struct fg_row *now = bsearch(c, cur.rows, cur.n, sizeof(*cur.rows), cmp_key);
		rows[i] = (struct top_row){ c->func, c->file, c->line, now ? now->self_pct : 0,
					    now ? now->total_pct : 0, c->tottime, c->cumtime };
	}
	*n = cum.n;
	fg_table_release(&cum);
	fg_table_release(&cur);
	top_sort_rows(rows, *n, t->sort);
	return rows;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void format_header(struct top *t, uint64_t now, struct spy_buf *h)
{
	struct sampling *s = &t->s;
	uint64_t samples = s->samples - t->mark_samples;
	double span = (double)(now - t->mark_ns) / 1e9;
	spy_buf_addf(h, "spy top: process %d \"%s\", Python %s, %.1f s elapsed\n", target_pid(&s->t),
		     target_cmdline(&s->t), pyrt_version_string(s->t.rt), sampling_elapsed(s, now));
	spy_buf_addf(h, "samples: %llu (%.1f Hz of %g), threads: %zu, GIL: %.1f%%, active: %.1f%%, errors: ",
		     (unsigned long long)samples, span > 0 ? (double)samples / span : 0.0, s->o.rate,
		     s->live_threads, pct(s->gil_ticks - t->mark_gil, samples),
		     pct(s->active_samples - t->mark_active, s->thread_samples - t->mark_threads));
	sampling_format_errors(s, h);
	spy_buf_addf(h, "\nsorted by %s; %%Own and %%Total over the last %.1f s, times since the start\n",
		     t->sort == TOP_SORT_TOTAL ? "%Total" : "%Own", span);
}

/* The terminal's size, or 0 x 0 when stdout is not one. */
static void term_size(size_t *cols, size_t *lines)
{
	struct winsize ws;
	*cols = *lines = 0;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
		*cols = ws.ws_col;
		*lines = ws.ws_row;
	}
}

/* Draw the interval just ended (or the first, empty, screen) and start a new one. */
static void snapshot(struct top *t, uint64_t now)
{
	struct spy_buf header = SPY_BUF_INIT;
	size_t n = 0;
	format_header(t, now, &header);
	struct top_row *rows = build_rows(t, &n);
	spy_buf_reset(&t->screen);
	top_render(&t->screen, header.buf, rows, n, 0, TOP_PIPE_ROWS, false);
	if (t->tty) {
		size_t cols, lines;
		term_size(&cols, &lines);
		/* header, blank, titles, and one line spare so the last newline never scrolls */
		size_t used = 0;
		for (const char *c = header.buf; *c; c++) {
			used += *c == '\n';
		}
		size_t room = lines > used + 3 ? lines - used - 3 : 1;
		struct spy_buf view = SPY_BUF_INIT;
		top_render(&view, header.buf, rows, n, cols, room, true);
		fwrite(view.buf, 1, view.len, stdout);
		spy_buf_release(&view);
	} else {
		printf("%s%s", t->snapshots ? "\n" : "", t->screen.buf);
	}
	fflush(stdout);
	t->snapshots++;
	free(rows);
	spy_buf_release(&header);

	struct sampling *s = &t->s;
	t->mark_ns = now;
	t->mark_samples = s->samples;
	t->mark_gil = s->gil_ticks;
	t->mark_threads = s->thread_samples;
	t->mark_active = s->active_samples;
	fg_profile_free(t->cur);
	t->cur = fg_profile_new(&s->t.strs, 0);
}

static bool between_ticks(void *ctx, struct sampling *s, uint64_t now)
{
	struct top *t = ctx;
	if (now >= t->next_ns) {
		snapshot(t, now);
		uint64_t step = (uint64_t)(t->refresh_s * 1e9);
		/* Late (a slow terminal): the next refresh is a whole period from now, not a burst. */
		t->next_ns = t->next_ns + step > now ? t->next_ns + step : now + step;
	}
	return true;
}

/* ---- the terminal ---- */

static void screen_enter(const struct top *t)
{
	if (t->tty) {
		/* the alternate screen, and no cursor blinking over the table */
		fputs("\033[?1049h\033[?25l\033[H\033[J", stdout);
		fflush(stdout);
	}
}

static void screen_leave(const struct top *t)
{
	if (t->tty) {
		fputs("\033[?25h\033[?1049l", stdout);
		/* what the user was looking at stays readable after exit */
		fwrite(t->screen.buf, 1, t->screen.len, stdout);
		fflush(stdout);
	}
}

/* ---- the command ---- */

struct top_args {
	int pid;
	double rate, duration, refresh;
	const char *sort;
	bool function, lines, subprocesses;
	char **program;
};

static int check_args(struct top_args *a, struct smp_opts *o, enum top_sort *sort)
{
	if (!a->pid == !a->program) {
		return cmd_usage_error("top", a->pid ? "--pid and a program to run are exclusive"
					       : "--pid PID or -- PROGRAM [ARGS...] is required");
	}
	if (!(a->rate > 0) || a->rate > TOP_MAX_RATE_HZ) {
		return cmd_usage_error("top", "--rate must be above 0 and at most %g", TOP_MAX_RATE_HZ);
	}
	if (a->duration == 0) {
		return cmd_usage_error("top", "--duration must be above 0");
	}
	if (a->refresh < TOP_MIN_REFRESH_S) {
		return cmd_usage_error("top", "--refresh must be at least %g s", TOP_MIN_REFRESH_S);
	}
	if (a->sort && !top_sort_parse(a->sort, sort)) {
		return cmd_usage_error("top", "--sort: '%s' is not own or total", a->sort);
	}
	if (a->subprocesses) {
		return cmd_usage_error("top", "--subprocesses is not supported by top yet");
	}
	o->native |= o->native_all;
	if (o->native && o->nonblocking) {
		return cmd_usage_error("top", "--native unwinds paused threads: it cannot go with --nonblocking");
	}
	o->rate = a->rate;
	o->duration = a->duration;
	return 0;
}

/* Everything after the first "--" is the program, whatever it looks like. */
static int split_program(int argc, char **argv, struct top_args *a)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			a->program = &argv[i + 1];
			return i;
		}
	}
	return argc;
}

static int run(struct top *t, const struct smp_opts *o, struct top_args *a)
{
	struct spy_err err = SPY_ERR_INIT;
	int rc = sampling_open(&t->s, o, a->pid, a->program, &err);
	if (rc < 0) {
		return rc == -SPY_EINTR ? 0 : cmd_fail(&err);
	}
	t->cum = fg_profile_new(&t->s.t.strs, 0);
	t->cur = fg_profile_new(&t->s.t.strs, 0);
	t->tty = isatty(STDOUT_FILENO);
	screen_enter(t);
	t->next_ns = ticker_now_ns() + (uint64_t)(t->refresh_s * 1e9);
	t->mark_ns = ticker_now_ns();
	sampling_run(&t->s, add_stack, between_ticks, t);
	sampling_detach(&t->s);
	uint64_t end = ticker_now_ns();
	/* The last, partial interval is worth showing if it saw anything. */
	if (t->s.samples > t->mark_samples || !t->snapshots) {
		snapshot(t, end);
	}
	screen_leave(t);

	struct spy_buf sum = SPY_BUF_INIT;
	double el = sampling_elapsed(&t->s, end);
	spy_buf_addf(&sum, "spy: %llu samples in %.2f s (%.1f Hz), %llu missed ticks, errors: ",
		     (unsigned long long)t->s.samples, el, el > 0 ? (double)t->s.samples / el : 0.0,
		     (unsigned long long)t->s.tk.missed);
	sampling_format_errors(&t->s, &sum);
	sampling_finish(&t->s, &sum);
	fprintf(stderr, "%s\n", sum.buf);
	spy_buf_release(&sum);
	return 0;
}

int cmd_top(int argc, char **argv)
{
	struct top_args a = { .rate = 100, .duration = -1, .refresh = 1 };
	struct smp_opts o = { 0 };
	struct top *t = spy_xcalloc(1, sizeof(*t));
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &a.pid, "PID", "attach to a running process" },
		{ 'r', "rate", OPT_DOUBLE, &a.rate, "HZ", "samples per second (default 100)" },
		{ 'd', "duration", OPT_DOUBLE, &a.duration, "S", "stop after S seconds (default: until Ctrl-C or the target exits)" },
		{ 0, "refresh", OPT_DOUBLE, &a.refresh, "S", "redraw every S seconds (default 1); %Own and %Total cover that interval" },
		{ 0, "sort", OPT_STRING, &a.sort, "KEY", "own (default) or total" },
		{ 'F', "function", OPT_BOOL, &a.function, NULL, "one row per function (the default; lines merged, the first shown)" },
		{ 'i', "idle", OPT_BOOL, &o.idle, NULL, "count idle threads too (sleeping, blocked)" },
		{ 'g', "gil", OPT_BOOL, &o.gil, NULL, "count only the thread holding the GIL" },
		{ 'n', "native", OPT_BOOL, &o.native, NULL, "merge native (C/C++) frames with the Python frames" },
		{ 0, "native-all", OPT_BOOL, &o.native_all, NULL, "with --native, keep the interpreter's own frames" },
		{ 0, "nonblocking", OPT_BOOL, &o.nonblocking, NULL, "never pause the target (torn stacks are counted as errors)" },
		{ 's', "subprocesses", OPT_BOOL, &a.subprocesses, NULL, "not supported by top yet (exit 2)" },
		{ 0 },
	};
	int ac = split_program(argc, argv, &a);
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	int nrest = 0, exit_code;
	struct spy_err err = SPY_ERR_INIT;
	int rc = opts_parse(opts, ac, argv, rest, &nrest, &err);
	if (rc == OPTS_HELP) {
		opts_usage(stdout, top_usage, opts);
		exit_code = 0;
	} else if (rc < 0) {
		exit_code = cmd_usage_error("top", "%s", err.msg);
	} else if (nrest > 0) {
		exit_code = cmd_usage_error("top", "unexpected argument '%s' (a program to run goes after '--')", rest[0]);
	} else if (a.program && !a.program[0]) {
		exit_code = cmd_usage_error("top", "no program after '--'");
	} else if (!(exit_code = check_args(&a, &o, &t->sort))) {
		t->refresh_s = a.refresh;
		exit_code = run(t, &o, &a);
	}
	free(rest);
	fg_profile_free(t->cur);
	fg_profile_free(t->cum);
	sampling_release(&t->s);
	spy_buf_release(&t->screen);
	free(t);
	return exit_code;
}
