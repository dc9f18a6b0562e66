/*
 * spy record: sample a process at a fixed rate and write a profile.
 *
 * Sampling is the engine's (sampler/engine.h): the pause, the walk, idle
 * detection, -s's descendants, every way out of the loop. This file turns
 * its options into the engine's, each kept stack into a profile sample
 * (under a `process PID "cmdline"` root, with -t a `thread TID "name"`
 * one, with -i an `idle` leaf on idle samples), and the profile into the
 * output file through cmd/output.c, the one place that touches the file
 * system. The output is opened before anything is started or attached, so
 * a minute of sampling never ends in "cannot write".
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/output.h"
#include "cmd/walker.h"
#include "common/buf.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

/* The progress line is redrawn at most this often. */
#define PROGRESS_NS (250 * 1000 * 1000ull)
/* Rates above this are not samples any more, they are a busy loop. */
#define MAX_RATE_HZ 100000.0

struct rec {
	/* options */
	struct eng_opts o;
	int pid;
	char **program;
	const char *output;
	enum fg_format fmt;
	bool threads, function, quiet, native, native_all, progress;
	bool want_table, table_to_stdout;
	double slice;                      /* --slice S: window length, 0 without */
	struct fg_table_opts table_opts;   /* --table N, --sort */

	struct spy_strtab strs;            /* the invocation's one string table */
	struct walker w;
	struct engine e;
	struct cmd_output out;
	struct spy_buf default_out;

	/* aggregation */
	struct spy_stack stack;            /* scratch: a kept stack with its roots */
	struct fg_profile *profile;
	struct fg_slices *slices;          /* --slice only: per-window counts */
	struct fg_timeline *timeline;      /* -f chrome only: the samples in time order */
	const char *idle_frame;            /* the synthetic leaf marking -i's idle samples */
	uint64_t last_progress_ns;
};

static const char *const record_usage[] = {
	"spy record [OPTIONS] --pid PID",
	"spy record [OPTIONS] -- PROGRAM [ARGS...]",
	NULL,
};

/* ---- the engine's callbacks ---- */

static void push_synthetic(struct spy_stack *s, const char *name)
{
	struct spy_frame *f = spy_stack_push(s);
	memset(f, 0, sizeof(*f));
	f->func = name;
	f->kind = SPY_FRAME_SYNTHETIC;
}

static int record_stack(void *ctx, struct engine *e, const struct spy_stack *s,
			const struct eng_sample *info)
{
	struct rec *r = ctx;
	spy_stack_reset(&r->stack);
	/*
	 * -i marks an idle sample with a synthetic leaf, so the flame graph
	 * shows (and colours) time spent waiting apart from time running the
	 * same line, and the folded file keeps the distinction.
	 */
	if (info->idle) {
		push_synthetic(&r->stack, r->idle_frame);
	}
	for (size_t i = 0; i < s->n; i++) {
		*spy_stack_push(&r->stack) = s->v[i];
	}
	const char *thread_root = info->thread ? info->thread->root : NULL;
	if (r->threads && thread_root) {
		push_synthetic(&r->stack, thread_root);
	}
	push_synthetic(&r->stack, info->proc->root);
	struct fg_track track = { (int32_t)info->proc->pid, (int32_t)info->tid, info->proc->root,
				  thread_root };
	int rc = fg_profile_add_at(r->profile, &r->stack, (double)(info->now_ns - e->start_ns) / 1e9,
				   r->slices, r->timeline, &track);
	return rc;
}

static void show_progress(struct rec *r, uint64_t now)
{
	double el = eng_elapsed(&r->e, now);
	fprintf(stderr, "\rspy: %.1f s, %llu samples (%.1f Hz), %llu errors, %zu threads\033[K",
		el, (unsigned long long)r->e.samples, el > 0 ? (double)r->e.samples / el : 0.0,
		(unsigned long long)eng_errors(&r->e), r->e.threads_seen);
}

static bool between_ticks(void *ctx, struct engine *e, uint64_t now)
{
	struct rec *r = ctx;
	if (r->progress && now - r->last_progress_ns >= PROGRESS_NS) {
		r->last_progress_ns = now;
		show_progress(r, now);
	}
	return true;
}

/* ---- output ---- */

static void set_metadata(struct rec *r, uint64_t now)
{
	struct fg_profile *p = r->profile;
	const struct target *t = walker_target(eng_root(&r->e));
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_meta_set(p, FG_META_SPY_VERSION, SPY_VERSION);
	fg_profile_meta_setf(p, FG_META_PID, "%d", target_pid(t));
	fg_profile_meta_set(p, FG_META_PYTHON, pyrt_version_string(t->rt));
	fg_profile_meta_setf(p, FG_META_RATE_HZ, "%g", r->o.rate);
	fg_profile_meta_setf(p, FG_META_DURATION_S, "%.3f", eng_elapsed(&r->e, now));
	fg_profile_meta_setf(p, FG_META_SAMPLES, "%llu", (unsigned long long)r->e.samples);
	eng_format_errors(&r->e, &b);
	fg_profile_meta_set(p, FG_META_ERRORS, b.buf);
	fg_profile_meta_set(p, FG_META_COMMAND, target_cmdline(t));
	fg_profile_meta_setf(p, "missed-ticks", "%llu", (unsigned long long)r->e.tk.missed);
	fg_profile_meta_set(p, "mode", r->o.nonblocking ? "nonblocking" : "blocking");
	if (r->slices) {
		fg_slices_store(r->slices, p);
	}
	spy_buf_release(&b);
}

/* The output file, named or spy-<pid>EXT; none for a table bound for stdout. */
static int open_output(struct rec *r, pid_t pid, struct spy_err *err)
{
	if (r->table_to_stdout || r->out.path) {
		return 0;
	}
	if (!r->output) {
		spy_buf_addf(&r->default_out, "spy-%d%s", (int)pid, fg_format_ext(r->fmt));
		r->output = r->default_out.buf;
	}
	return cmd_output_open(&r->out, r->output, err);
}

/* Detached: write the profile, and the table on stdout. 0 or -SPY_EIO with err set. */
static int write_outputs(struct rec *r, uint64_t end, struct spy_err *err)
{
	int rc = 0;
	set_metadata(r, end);
	struct fg_table_opts topts = r->table_opts;
	topts.rate_hz = r->o.rate;
	struct fg_svg_opts sopts = { NULL, false };
	struct fg_writer w = { r->fmt, r->profile, r->timeline, &topts, &sopts, false };
	if (!r->table_to_stdout) {
		w.gzip = fg_format_gzip(r->fmt, r->output);
		rc = cmd_output_commit(&r->out, fg_write, &w, err);
	}
	if (r->want_table && rc == 0) {
		w.format = FG_FORMAT_TABLE;
		w.gzip = false;
		fg_write(&w, stdout, "<stdout>", NULL);
		fflush(stdout);
	}
	return rc;
}

/* ---- the command ---- */

static bool all_digits(const char *s)
{
	if (!*s) {
		return false;
	}
	for (; *s; s++) {
		if (*s < '0' || *s > '9') {
			return false;
		}
	}
	return true;
}

/* Usage rules beyond the parser's; 0, else the exit code (2). */
static int check_args(struct rec *r, const char *format, const char *sort, const char *table)
{
	const char *msg = NULL;
	if (!r->pid && !r->program) {
		msg = "--pid PID or -- PROGRAM [ARGS...] is required";
	} else if (r->pid && r->program) {
		msg = "--pid and a program to run are exclusive";
	} else if (!(r->o.rate > 0) || r->o.rate > MAX_RATE_HZ) {
		return cmd_usage_error("record", "--rate must be above 0 and at most %g", MAX_RATE_HZ);
	} else if (r->o.duration == 0) {
		msg = "--duration must be above 0";
	} else if ((r->native || r->native_all) && r->o.nonblocking) {
		msg = "--native unwinds paused threads: it cannot go with --nonblocking";
	} else if (sort && !fg_sort_parse(sort, &r->table_opts.sort)) {
		return cmd_usage_error("record", "--sort: '%s' is not cumtime, tottime or name", sort);
	} else if (table && (!all_digits(table) || strlen(table) > 10 || strtoull(table, NULL, 10) > UINT_MAX)) {
		return cmd_usage_error("record", "--table: '%s' is not a number of rows", table);
	} else if (format && !fg_format_parse(format, &r->fmt)) {
		return cmd_usage_error("record", "--format: unknown format '%s'", format);
	}
	if (msg) {
		return cmd_usage_error("record", "%s", msg);
	}
	if (!format && r->output) {
		r->fmt = fg_format_from_path(r->output);
	}
	r->table_opts.top = table ? (unsigned)strtoul(table, NULL, 10) : 20;
	/* A table with no file named goes to stdout, once. */
	r->table_to_stdout = r->fmt == FG_FORMAT_TABLE && !r->output;
	r->want_table = table || r->table_to_stdout || isatty(STDOUT_FILENO);
	if (r->slice > 0 && r->fmt != FG_FORMAT_FOLDED) {
		return cmd_usage_error("record", "--slice keeps its windows in a folded profile: use -o FILE.folded");
	}
	r->progress = !r->quiet && isatty(STDERR_FILENO);
	return 0;
}

/*
 * Two things the option parser does not do: `--table` takes an optional
 * value, and everything after `--` is the program, even if it looks like
 * an option of ours. -1 to go on, else the exit code.
 */
static int parse_args(struct rec *r, int argc, char **argv)
{
	const char *format = NULL, *sort = NULL, *table = NULL;
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &r->pid, "PID", "attach to a running process" },
		{ 'o', "output", OPT_STRING, &r->output, "FILE", "where to write (default spy-<pid>.svg; with -f, that format's extension)" },
		{ 'f', "format", OPT_STRING, &format, "F",
		  "svg, folded, table, speedscope, chrome, pprof, json" },
		{ 'r', "rate", OPT_DOUBLE, &r->o.rate, "HZ", "samples per second (default 100)" },
		{ 'd', "duration", OPT_DOUBLE, &r->o.duration, "S", "stop after S seconds" },
		{ 'n', "native", OPT_BOOL, &r->native, NULL, "merge native (C/C++) frames with the Python frames" },
		{ 0, "native-all", OPT_BOOL, &r->native_all, NULL,
		  "with --native, also keep the interpreter's own frames (eval loop, call trampolines)" },
		{ 'i', "idle", OPT_BOOL, &r->o.idle, NULL, "keep samples of idle threads" },
		{ 'g', "gil", OPT_BOOL, &r->o.gil, NULL, "keep only the thread holding the GIL" },
		{ 's', "subprocesses", OPT_BOOL, &r->o.subprocesses, NULL, "also profile child processes, present and future" },
		{ 't', "threads", OPT_BOOL, &r->threads, NULL, "a root frame per thread" },
		{ 'F', "function", OPT_BOOL, &r->function, NULL, "aggregate by function, not line" },
		{ 0, "nonblocking", OPT_BOOL, &r->o.nonblocking, NULL, "never pause the target" },
		{ 0, "table", OPT_STRING, &table, "[N]", "print the top N functions (default 20) after recording" },
		{ 0, "sort", OPT_STRING, &sort, "KEY", "table order: cumtime, tottime or name" },
		{ 'q', "quiet", OPT_BOOL, &r->quiet, NULL, "no progress line" },
		{ 0, "slice", OPT_DOUBLE, &r->slice, "S", "also count samples per S-second window, kept in a folded profile (for report --trend)" },
		{ 0 },
	};
	char **av = spy_xcalloc((size_t)argc + 1, sizeof(*av));
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	char table_arg[32];
	int ac = 0, nrest = 0;
	for (int i = 0; i < argc; i++) {
		if (i > 0 && !strcmp(argv[i], "--")) {
			r->program = &argv[i + 1];
			break;
		}
		if (i > 0 && !strcmp(argv[i], "--table")) {
			bool n = i + 1 < argc && all_digits(argv[i + 1]) && strlen(argv[i + 1]) < 20;
			snprintf(table_arg, sizeof(table_arg), "--table=%s", n ? argv[++i] : "20");
			av[ac++] = table_arg;
			continue;
		}
		av[ac++] = argv[i];
	}
	int rc = cmd_parse_options("record", record_usage, opts, ac, av, rest, &nrest);
	if (rc < 0 && nrest > 0) {
		rc = cmd_usage_error("record", "unexpected argument '%s' (a program to run goes after '--')", rest[0]);
	} else if (rc < 0 && r->program && !r->program[0]) {
		r->program = NULL;
		rc = r->pid ? -1 : cmd_usage_error("record", "no program after '--'");
	}
	if (rc < 0) {
		rc = check_args(r, format, sort, table);
		rc = rc ? rc : -1;
	}
	free(av);
	free(rest);
	return rc;
}

/* Open the output, then the process; 0 or the exit code. */
static int start(struct rec *r)
{
	struct spy_err err = SPY_ERR_INIT;
	/* The output must be writable before anything is started or attached. */
	if (r->pid && open_output(r, r->pid, &err) < 0) {
		return cmd_fail(&err);
	}
	if (r->program && !r->output && !r->table_to_stdout && access(".", W_OK) != 0) {
		/* The default name needs the child's pid; the directory can be checked now. */
		spy_err_set(&err, SPY_EIO, "cannot write spy-<pid>%s in the current directory: %s",
			    fg_format_ext(r->fmt), strerror(errno));
		return cmd_fail(&err);
	}
	if (r->program && r->output && open_output(r, 0, &err) < 0) {
		return cmd_fail(&err);
	}
	walker_init(&r->w, &r->strs, r->native, r->native_all);
	struct eng_walker ops = walker_ops(&r->w);
	int rc = eng_open(&r->e, &r->o, &ops, &r->strs, r->pid, r->program, &err);
	if (rc == 0) {
		rc = walker_check_gil(&r->e, r->o.gil, &err);
	}
	if (rc == 0 && r->program) {
		rc = open_output(r, eng_root(&r->e)->pid, &err);
	}
	if (rc < 0) {
		cmd_output_abandon(&r->out);
		return rc == -SPY_EINTR ? 128 + (int)proc_stop_requested : cmd_fail(&err);
	}
	return 0;
}

static void rec_release(struct rec *r)
{
	cmd_output_abandon(&r->out);
	eng_release(&r->e);
	walker_release(&r->w);
	spy_buf_release(&r->default_out);
	spy_stack_release(&r->stack);
	fg_slices_free(r->slices);
	fg_timeline_free(r->timeline);
	fg_profile_free(r->profile);
	spy_strtab_release(&r->strs);
}

int cmd_record(int argc, char **argv)
{
	struct rec *r = spy_xcalloc(1, sizeof(*r));
	r->o.rate = 100;
	r->o.duration = -1;
	r->out.fd = -1;
	int exit_code = parse_args(r, argc, argv);
	bool go = exit_code < 0;   /* else --help or a usage error: done */
	if (go) {
		exit_code = start(r);
		go = exit_code == 0;
	}
	if (!go) {
		rec_release(r);
		free(r);
		return exit_code;
	}
	r->profile = fg_profile_new(&r->strs, r->function ? FG_FUNCTION : 0);
	r->slices = r->slice > 0 ? fg_slices_new(r->slice) : NULL;
	r->timeline = r->fmt == FG_FORMAT_CHROME ? fg_timeline_new(r->o.rate) : NULL;
	r->idle_frame = spy_strtab_interns(&r->strs, "idle");

	const struct eng_callbacks cb = { r, record_stack, between_ticks };
	eng_run(&r->e, &cb);
	uint64_t end = ticker_now_ns();
	eng_detach(&r->e);
	if (r->progress) {
		fputs("\r\033[K", stderr);
	}

	/* Detached: from here on nothing can leave the target stopped. */
	struct spy_err werr = SPY_ERR_INIT;
	int wrc = write_outputs(r, end, &werr);
	struct spy_buf sum = SPY_BUF_INIT;
	eng_summary(&r->e, end, &sum);
	if (wrc == 0 && r->out.path) {
		spy_buf_addf(&sum, "; wrote %s", r->out.path);
	}
	eng_finish(&r->e, &sum);
	fprintf(stderr, "%s\n", sum.buf);
	spy_buf_release(&sum);
	if (wrc < 0) {
		exit_code = cmd_fail(&werr);
	}
	rec_release(r);
	free(r);
	return exit_code;
}
