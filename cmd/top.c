/*
 * spy top: a live view of the functions a Python process spends its time
 * in, redrawn every --refresh seconds, like py-spy top.
 *
 * Sampling is the profiler's (profiler/profiler.h), with -s over the
 * process's Python descendants too; this file runs the loop, aggregates
 * and draws. Two
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
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/top.h"
#include "cmd/session.h"
#include "common/term.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

/* Redrawing faster than this only burns the CPU the target wants. */
#define TOP_MIN_REFRESH_S 0.05
/* Rows of a snapshot written to a pipe, where no terminal says how many fit. */
#define TOP_PIPE_ROWS 50
/*
 * Distinct stacks kept since the start. A view left running for days on a
 * program with ever new stacks must not grow without end; past this, new
 * stacks still count in the current interval but not in the times, and
 * are counted as dropped.
 */
#define TOP_MAX_STACKS (1u << 20)

struct top {
	struct spy_strtab strs;   /* the invocation's one string table */
	struct profiler *p;
	struct prof_opts o;
	bool launched;    /* the program was launched: stdin is its */
	enum top_sort sort;
	bool by_line;     /* --lines: one row per line */
	bool threads;     /* -t: a `thread TID "name"` row per thread */
	struct spy_stack stack;   /* scratch: a stack with its thread root */
	bool tty;
	double refresh_s;
	struct fg_profile *cur, *cum;
	uint64_t next_ns;
	/* the sampler's counters at the start of the interval */
	uint64_t mark_ns, mark_samples, mark_gil, mark_threads, mark_active;
	struct spy_buf screen;    /* the last snapshot, plain */
	unsigned snapshots;
	bool out_broken;          /* stdout is gone (a closed pipe): stop */
	bool keys;                /* stdin is a terminal in non-canonical mode */
	struct termios saved_tio; /* to give it back as it was */
};

static const char *const top_usage[] = {
	"spy top [OPTIONS] --pid PID",
	"spy top [OPTIONS] -- PROGRAM [ARGS...]",
	"    on a terminal, keys: q quits, o sorts by %Own, t by %Total (not in launch mode)",
	NULL,
};

/* ---- aggregation ---- */

static int add_stack(struct top *t, const struct prof_sample *info)
{
	const struct spy_stack *stack = info->stack;
	if (t->threads && info->thread_root) {
		/* The thread's root frame makes a row of its own, whose %Total
		 * is that thread's share, named as threading named it. */
		spy_stack_reset(&t->stack);
		spy_stack_append(&t->stack, stack->v, stack->n);
		struct spy_frame *f = spy_stack_push(&t->stack);
		memset(f, 0, sizeof(*f));
		f->func = info->thread_root;
		/* Not synthetic: the table leaves those (process roots, idle
		 * marks) out, and this one is meant to be a row. */
		f->kind = SPY_FRAME_PYTHON;
		stack = &t->stack;
	}
	int rc = fg_profile_add(t->cum, stack, 1);
	int rc2 = fg_profile_add(t->cur, stack, 1);
	return rc < 0 ? rc : rc2;
}

/* Rows by identity: the interned pointers, and the line when rows are lines. */
static int cmp_key(const void *x, const void *y, void *by_line)
{
	const struct fg_row *a = x, *b = y;
	if (a->func != b->func) {
		return (uintptr_t)a->func < (uintptr_t)b->func ? -1 : 1;
	}
	if (a->file != b->file) {
		return (uintptr_t)a->file < (uintptr_t)b->file ? -1 : 1;
	}
	if (*(bool *)by_line && a->line != b->line) {
		return a->line < b->line ? -1 : 1;
	}
	return 0;
}

/* bsearch with cmp_key's context (glibc has no bsearch_r). */
static const struct fg_row *find_row(const struct fg_row *rows, size_t n, const struct fg_row *key, bool by_line)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = cmp_key(key, &rows[mid], &by_line);
		if (!c) {
			return &rows[mid];
		}
		if (c < 0) {
			hi = mid;
		} else {
			lo = mid + 1;
		}
	}
	return NULL;
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
	o.rate_hz = t->o.rate;
	o.by_line = t->by_line;
	fg_table_init(&cum, t->cum, &o);
	fg_table_init(&cur, t->cur, &o);
	qsort_r(cur.rows, cur.n, sizeof(*cur.rows), cmp_key, &t->by_line);
	struct top_row *rows = spy_xcalloc(cum.n + 1, sizeof(*rows));
	for (size_t i = 0; i < cum.n; i++) {
		const struct fg_row *c = &cum.rows[i];
		const struct fg_row *now = find_row(cur.rows, cur.n, c, t->by_line);
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
	struct prof_stats st;
	prof_stats(t->p, &st);
	const struct prof_process *tg = prof_root(t->p);
	uint64_t samples = st.samples - t->mark_samples;
	double span = (double)(now - t->mark_ns) / 1e9;
	/* The command line last: a narrow terminal cuts it, not the numbers. */
	const char *python = prof_python(t->p);
	spy_buf_addf(h, "spy top: process %d, ", (int)prof_process_pid(tg));
	if (!*prof_process_python(tg)) {
		/* -s watching a shell, unshare, a supervisor: what its descendants run */
		spy_buf_adds(h, *python ? "its descendants' Python " : "no Python process yet");
	} else {
		spy_buf_adds(h, "Python ");
	}
	spy_term_adds(h, python);
	spy_buf_addf(h, ", %.1f s elapsed: ", prof_elapsed(t->p, now));
	spy_term_adds(h, prof_process_cmdline(tg));
	spy_buf_addch(h, '\n');
	spy_buf_addf(h, "samples: %llu (%.1f Hz of %g), threads: %zu, ", (unsigned long long)samples,
		     span > 0 ? (double)samples / span : 0.0, t->o.rate, st.live_threads);
	if (t->o.subprocesses) {
		spy_buf_addf(h, "processes: %zu, ", st.processes);
	}
	spy_buf_addf(h, "GIL: %.1f%%, active: %.1f%%, errors: ", pct(st.gil_ticks - t->mark_gil, samples),
		     pct(st.active_samples - t->mark_active, st.thread_samples - t->mark_threads));
	prof_format_errors(&st, h);
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

/* Write the view: sized to the terminal and drawn in place there, else one more plain snapshot. */
static void show(struct top *t, const char *header, const struct top_row *rows, size_t n)
{
	spy_buf_reset(&t->screen);
	top_render(&t->screen, header, rows, n, 0, TOP_PIPE_ROWS, false);
	if (!t->tty) {
		printf("%s%s", t->snapshots ? "\n" : "", t->screen.buf);
		return;
	}
	size_t cols, lines, used = 0;
	term_size(&cols, &lines);
	for (const char *c = header; *c; c++) {
		used += *c == '\n';
	}
	/* header, blank, titles, and one line spare so that the last newline never scrolls */
	size_t room = lines > used + 3 ? lines - used - 3 : 1;
	struct spy_buf view = SPY_BUF_INIT;
	top_render(&view, header, rows, n, cols, room, true);
	fwrite(view.buf, 1, view.len, stdout);
	spy_buf_release(&view);
}

/* Start a new interval at now: the sampler's counters as they are, an empty profile. */
static void start_interval(struct top *t, uint64_t now)
{
	struct prof_stats st;
	prof_stats(t->p, &st);
	t->mark_ns = now;
	t->mark_samples = st.samples;
	t->mark_gil = st.gil_ticks;
	t->mark_threads = st.thread_samples;
	t->mark_active = st.active_samples;
	fg_profile_free(t->cur);
	t->cur = fg_profile_new(&t->strs, 0);
}

/* Draw the interval just ended (or the first, empty, screen) and start a new one. */
static void snapshot(struct top *t, uint64_t now)
{
	struct spy_buf header = SPY_BUF_INIT;
	size_t n = 0;
	format_header(t, now, &header);
	struct top_row *rows = build_rows(t, &n);
	show(t, header.buf, rows, n);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		t->out_broken = true;
	}
	t->snapshots++;
	free(rows);
	spy_buf_release(&header);
	start_interval(t, now);
}

/* Keys, when stdin is a terminal: q quits, o and t sort by %Own and %Total (redrawn at once). */
static bool read_keys(struct top *t, uint64_t now)
{
	struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
	char c;
	while (t->keys && poll(&pfd, 1, 0) == 1 && read(STDIN_FILENO, &c, 1) == 1) {
		if (c == 'q' || c == 'Q') {
			return false;
		}
		if (c == 'o' || c == 't') {
			t->sort = c == 'o' ? TOP_SORT_OWN : TOP_SORT_TOTAL;
			/* redraw at once (the interval restarts there) */
			t->next_ns = now;
		}
	}
	return true;
}

/* Between ticks: keys and redraws; false to stop. */
static bool between_ticks(struct top *t, uint64_t now)
{
	if (!read_keys(t, now)) {
		return false;
	}
	if (now >= t->next_ns) {
		snapshot(t, now);
		uint64_t step = spy_s_to_ns(t->refresh_s);
		/* Late (a slow terminal): the next refresh is a whole period from now, not a burst. */
		t->next_ns = t->next_ns + step > now ? t->next_ns + step : now + step;
	}
	return !t->out_broken;
}

/* ---- the terminal ---- */

/*
 * Keys without Enter and without echo; ISIG stays, so Ctrl-C still stops
 * spy through its handler, and every way out passes keys_leave. Not in
 * launch mode: the program shares the terminal, and its input is its own.
 */
static void keys_enter(struct top *t)
{
	struct termios tio;
	if (!t->tty || t->launched || !isatty(STDIN_FILENO) ||
	    tcgetattr(STDIN_FILENO, &t->saved_tio) != 0) {
		return;
	}
	tio = t->saved_tio;
	tio.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	tio.c_cc[VMIN] = 0;
	tio.c_cc[VTIME] = 0;
	t->keys = tcsetattr(STDIN_FILENO, TCSANOW, &tio) == 0;
}

static void keys_leave(struct top *t)
{
	if (t->keys) {
		tcsetattr(STDIN_FILENO, TCSANOW, &t->saved_tio);
		t->keys = false;
	}
}

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
	bool function, lines, native, native_all;
	char **program;
};

static int check_args(struct top_args *a, struct prof_opts *o, enum top_sort *sort)
{
	if (!a->pid == !a->program) {
		return cmd_usage_error("top", a->pid ? "--pid and a program to run are exclusive"
					       : "--pid PID or -- PROGRAM [ARGS...] is required");
	}
	if (!(a->rate > 0) || a->rate > CMD_MAX_RATE_HZ) {
		return cmd_usage_error("top", "--rate must be above 0 and at most %.0f", CMD_MAX_RATE_HZ);
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
	if (a->function && a->lines) {
		return cmd_usage_error("top", "--function and --lines are exclusive");
	}
	a->native |= a->native_all;
	if (a->native && o->nonblocking) {
		return cmd_usage_error("top", "--native unwinds paused threads: it cannot go with --nonblocking");
	}
	o->rate = a->rate;
	o->duration = a->duration;
	o->native = a->native;
	o->native_all = a->native_all;
	return 0;
}

/* Sample until the duration, a stop signal, the process's exit, q or a closed stdout. */
static void loop(struct top *t)
{
	struct prof_tick tk;
	enum prof_event ev;
	while ((ev = prof_next(t->p, &tk)) != PROF_END) {
		for (size_t i = 0; i < tk.n; i++) {
			if (add_stack(t, &tk.v[i]) < 0) {
				prof_dropped(t->p);
			}
		}
		if (!between_ticks(t, spy_now_ns())) {
			break;
		}
	}
	prof_stop(t->p);
}

static int run(struct top *t, struct top_args *a)
{
	struct spy_err err = SPY_ERR_INIT;
	t->launched = a->program != NULL;
	int rc = prof_open(&t->p, &t->o, &t->strs, a->pid, a->program, &err);
	if (rc < 0) {
		/* Stopped while waiting for a launched program's interpreter: as record does. */
		return rc == -SPY_EINTR ? 128 + prof_stop_signal() : cmd_fail(&err);
	}
	t->cum = fg_profile_new(&t->strs, 0);
	fg_profile_limit_stacks(t->cum, TOP_MAX_STACKS);
	t->tty = isatty(STDOUT_FILENO);
	/* A reader that goes away (`spy top | head`) ends the view, not spy. */
	signal(SIGPIPE, SIG_IGN);
	keys_enter(t);
	screen_enter(t);
	if (t->tty) {
		/* A crash must not leave the terminal raw and on the alternate screen. */
		spy_term_crash_arm(STDIN_FILENO, t->keys ? &t->saved_tio : NULL, STDOUT_FILENO,
				   "\033[?25h\033[?1049l");
	}
	start_interval(t, spy_now_ns());
	t->next_ns = t->mark_ns + spy_s_to_ns(t->refresh_s);
	if (t->tty) {
		/* the frame of the view at once, rather than a blank screen for a whole interval */
		snapshot(t, t->mark_ns);
	}
	loop(t);
	prof_detach(t->p);
	uint64_t end = spy_now_ns();
	struct prof_stats st;
	prof_stats(t->p, &st);
	/* The last, partial interval is worth showing if it saw anything. */
	if (!t->out_broken && (st.samples > t->mark_samples || !t->snapshots)) {
		snapshot(t, end);
	}
	spy_term_crash_disarm();
	screen_leave(t);
	keys_leave(t);

	int none = cmd_no_python(t->p);
	if (none) {
		return none;
	}
	struct spy_buf sum = SPY_BUF_INIT;
	cmd_summary(t->p, end, &sum);
	prof_program_fate(t->p, &sum);
	fprintf(stderr, "%s\n", sum.buf);
	spy_buf_release(&sum);
	return 0;
}

int cmd_top(int argc, char **argv)
{
	struct top_args a = { .rate = 100, .duration = -1, .refresh = 1 };
	struct top *t = spy_xcalloc(1, sizeof(*t));
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &a.pid, "PID", "attach to a running process" },
		{ 'r', "rate", OPT_DOUBLE, &a.rate, "HZ",
		  "samples per second (default 100, at most 1000000; above 20000 spy spins between samples: a core kept busy)" },
		{ 'd', "duration", OPT_DOUBLE, &a.duration, "S", "stop after S seconds (default: until Ctrl-C or the target exits)" },
		{ 0, "refresh", OPT_DOUBLE, &a.refresh, "S", "redraw every S seconds (default 1); %Own and %Total cover that interval" },
		{ 0, "sort", OPT_STRING, &a.sort, "KEY", "own (default) or total" },
		{ 'F', "function", OPT_BOOL, &a.function, NULL, "one row per function (the default; its lowest line shown)" },
		{ 'l', "lines", OPT_BOOL, &a.lines, NULL, "one row per line of code instead of per function" },
		{ 'i', "idle", OPT_BOOL, &t->o.idle, NULL, "count idle threads too (sleeping, blocked)" },
		{ 'g', "gil", OPT_BOOL, &t->o.gil, NULL, "count only the thread holding the GIL" },
		{ 't', "threads", OPT_BOOL, &t->threads, NULL,
		  "a row per thread too: thread TID \"name\", its share in %Total" },
		{ 'n', "native", OPT_BOOL, &a.native, NULL, "merge native (C/C++) frames with the Python frames" },
		{ 0, "native-all", OPT_BOOL, &a.native_all, NULL, "with --native, keep the interpreter's own frames" },
		{ 0, "nonblocking", OPT_BOOL, &t->o.nonblocking, NULL, "never pause the target (torn stacks are counted as errors)" },
		{ 's', "subprocesses", OPT_BOOL, &t->o.subprocesses, NULL, "also profile child processes, present and future" },
		{ 0, NULL, OPT_PROGRAM, &a.program, NULL, NULL },
		{ 0 },
	};
	int exit_code;
	int rc = cmd_parse_options("top", top_usage, opts, argc, argv, NULL, 0, CMD_PROGRAM_HINT);
	if (rc >= 0) {
		exit_code = rc;
	} else if (a.program && !a.program[0]) {
		exit_code = cmd_usage_error("top", "no program after '--'");
	} else if (!(exit_code = check_args(&a, &t->o, &t->sort))) {
		t->refresh_s = a.refresh;
		t->by_line = a.lines;
		exit_code = run(t, &a);
	}
	fg_profile_free(t->cur);
	fg_profile_free(t->cum);
	spy_stack_release(&t->stack);
	prof_close(t->p);
	spy_strtab_release(&t->strs);
	spy_buf_release(&t->screen);
	free(t);
	return exit_code;
}
