/*
 * spy record: sample a process at a fixed rate and write a profile.
 *
 * Sampling is the profiler's (profiler/profiler.h): the pause, the walk,
 * idle detection, -s's descendants. This file owns the loop: it turns its
 * options into the profiler's, pulls each tick's kept stacks, turns each
 * into a profile sample
 * (under a `process PID "cmdline"` root, with -t a `thread TID "name"`
 * one, with -i an `idle` leaf on idle samples), and the profile into the
 * output file through cmd/output.c, the one place that touches the file
 * system. The output is opened before anything is started or attached, so
 * a minute of sampling never ends in "cannot write".
 *
 * Continuous mode (--push URL) is cmd/session.h's windows: each kept stack
 * also goes into the open window's profile, and when a window closes it
 * is handed to the stream (cmd/stream.h: the labels, the metadata, the
 * sender's thread, which does the network, and its lines). A window's
 * root frame names the program, not its arguments (pusher_command).
 * Without -o (or --table) no whole-run profile is kept, so memory follows
 * the window, not the run.
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
#include "cmd/push.h"
#include "cmd/sources.h"
#include "cmd/session.h"
#include "cmd/stream.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

/* The progress line is redrawn at most this often. */
#define PROGRESS_NS (250 * 1000 * 1000ull)
#define PUSH_FLUSH_STOPPED_NS (500 * 1000 * 1000ull)

struct rec {
	/* options */
	struct prof_opts o;
	int pid;
	char **program;
	const char *output;
	enum fg_format fmt;
	bool threads, function, quiet, native, native_all, progress, async, no_source, keep_source;
	bool want_table, table_to_stdout;  /* table_to_stdout: -f table or lines with no -o */
	bool sort_given;
	double slice;                      /* --slice S: window length, 0 without */
	struct fg_table_opts table_opts;   /* --table N, --sort */

	struct spy_strtab strs;            /* the invocation's one string table */
	struct profiler *p;
	struct cmd_windows win;
	struct cmd_output out;
	struct spy_buf default_out;

	/* aggregation */
	struct spy_stack stack;            /* scratch: a kept stack with its roots */
	struct fg_profile *profile;
	struct fg_slices *slices;          /* --slice only: per-window counts */
	struct fg_timeline *timeline;      /* -f chrome only: the samples in time order */
	struct fg_resources *res;          /* --slice or -f chrome: the process's resources, once per window */
	uint64_t res_every_ns, res_next_ns, res_cpu_ns;
	const char *idle_frame;            /* the synthetic leaf marking -i's idle samples */
	struct cmd_sources sources;        /* the sampled files, unless --no-source or -F */
	size_t frames_seen;                /* the profile's distinct frames when files were last noted */
	const char *gc_frame;              /* the synthetic leaf marking a sample in the collector */
	const char *startup_frame;         /* launch mode: the one frame the interpreter's start-up is folded into */
	bool main_started;                 /* launch mode: a sample of the program itself was seen */
	uint64_t startup_samples, startup_truncated;
	uint64_t last_progress_ns;

	/* --push */
	struct stream_sink sink;           /* the options, the sender, its lines */
	struct stream stream;              /* the target's labels */
	bool no_file;                      /* --push without -o: nothing written locally */
	bool keep_run;                     /* a whole-run profile is needed (a file or a table) */
	struct fg_profile *window;         /* the open window's samples */
};

static const char *const record_usage[] = {
	"spy record [OPTIONS] --pid PID",
	"spy record [OPTIONS] -- PROGRAM [ARGS...]",
	NULL,
};

/* ---- the loop ---- */

/*
 * Whether s (innermost first) is the interpreter's start-up: its outermost
 * Python frame is the interpreter's own start-up code (a frozen module,
 * importlib's bootstrap, getpath, site, but not runpy, which runs -m's
 * program; before 3.11 site.py and the encodings package), or it has no
 * Python frame yet. A stack the walk cut short lacks its outermost frames,
 * so it is taken for start-up too while the program has not been seen.
 */
static bool startup_stack(const struct spy_stack *s)
{
	if (s->truncated) {
		return true;
	}
	for (size_t i = s->n; i-- > 0;) {
		const struct spy_frame *f = &s->v[i];
		if (f->kind != SPY_FRAME_PYTHON) {
			continue;
		}
		const char *file = f->file ? f->file : "";
		return (!strncmp(file, "<frozen ", 8) && strcmp(file, "<frozen runpy>")) ||
		       spy_ends_with(file, "/site.py") || strstr(file, "/encodings/");
	}
	return true;
}

/* The OpenTelemetry span a sample was taken in, as its labels (json, pprof). */
static void label_span(struct fg_profile *p, const struct prof_span *sp)
{
	char trace[33], span[17];
	for (size_t i = 0; i < sizeof(sp->trace_id); i++) {
		snprintf(trace + 2 * i, 3, "%02x", sp->trace_id[i]);
	}
	for (size_t i = 0; i < sizeof(sp->span_id); i++) {
		snprintf(span + 2 * i, 3, "%02x", sp->span_id[i]);
	}
	struct fg_label l[3] = { { "span_id", span }, { "trace_id", trace }, { "span_name", sp->name } };
	(void)fg_profile_label_last(p, l, sp->name ? 3 : 2, 1);
}

static int record_stack(struct rec *r, const struct prof_sample *info, double t_s)
{
	const struct spy_stack *s = info->stack;
	spy_stack_reset(&r->stack);
	/*
	 * Launch mode: the start-up is not what the user asked about, and its
	 * import chains are the deepest stacks of a short run. Until the
	 * program's own code is seen, a sample is folded into one frame, so it
	 * still counts but never sets a flame graph's height.
	 */
	static const struct spy_stack none;
	if (r->program && !r->main_started && !(r->main_started = !startup_stack(s))) {
		r->startup_samples++;
		r->startup_truncated += s->truncated != 0;
		spy_stack_push_synthetic(&r->stack, r->startup_frame);
		s = &none;
	}
	/*
	 * -i marks an idle sample with a synthetic leaf, so the flame graph
	 * shows (and colours) time spent waiting apart from time running the
	 * same line, and the folded file keeps the distinction.
	 */
	if (info->idle && s->n) {
		spy_stack_push_synthetic(&r->stack, r->idle_frame);
	}
	/* The collector interrupted the stack under it, as other profilers show it. */
	if (info->gc && s->n) {
		spy_stack_push_synthetic(&r->stack, r->gc_frame);
	}
	spy_stack_append(&r->stack, s->v, s->n);
	const char *thread_root = info->thread_root;
	if (r->threads && thread_root) {
		spy_stack_push_synthetic(&r->stack, thread_root);
	}
	spy_stack_push_synthetic(&r->stack, info->proc_root);
	struct fg_track track = { (int32_t)info->pid, (int32_t)info->tid, info->proc_root, thread_root };
	int rc = 0;
	if (r->window) {
		/* The window's root names the program, not its arguments (unless --push-command). */
		struct spy_frame *top = &r->stack.v[r->stack.n - 1];
		top->func = pusher_root(r->sink.pusher, &r->strs, info->proc_root, info->pid,
					prof_process_cmdline(info->proc));
		rc = fg_profile_add(r->window, &r->stack, 1);
		top->func = info->proc_root;
	}
	if (r->keep_run) {
		int rrc = fg_profile_add_at(r->profile, &r->stack, t_s,
					    r->slices, r->timeline, &track);
		rc = rc < 0 ? rc : rrc;
		if (info->span) {
			label_span(r->profile, info->span);
		}
	}
	if (r->keep_run && r->keep_source) {
		/* A new file can only come with a new frame: the common sample costs one compare. */
		struct fg_stats st;
		fg_profile_stats(r->profile, &st);
		if (st.frames != r->frames_seen) {
			r->frames_seen = st.frames;
			cmd_sources_note(&r->sources, s, info->pid, prof_process_creds(info->proc),
					 info->names_untrusted);
		}
	}
	return rc;
}

/* The closed window to the pusher; a new one opens. */
static void record_window(void *ctx, const struct cmd_window *w)
{
	struct rec *r = ctx;
	struct fg_profile *p = r->window;
	char command[1024];
	const struct prof_process *t = prof_root(r->p);
	fg_profile_meta_setf(p, FG_META_SAMPLES, "%llu", (unsigned long long)w->ticks);
	fg_profile_meta_setf(p, "missed-ticks", "%llu", (unsigned long long)w->missed);
	fg_profile_meta_setf(p, "window", "%llu %lld %lld", (unsigned long long)w->seq, (long long)w->from_s,
			     (long long)w->until_s);
	pusher_command(r->sink.pusher, prof_process_cmdline(t), command, sizeof(command));
	stream_window(&r->stream, p, prof_python(r->p), command, r->o.rate, w->from_s, w->until_s);
	fg_profile_free(r->window);
	r->window = w->last ? NULL : fg_profile_new(&r->strs, r->function ? FG_FUNCTION : 0);
}

/* A status line of the sender's (stream_sink_lines), over the progress line if there is one. */
static void push_line(void *ctx, const char *line)
{
	const struct rec *r = ctx;
	fprintf(stderr, "%sspy: %s\n", r->progress ? "\r\033[K" : "", line);
}

static void show_progress(struct rec *r, uint64_t now)
{
	double el = prof_elapsed(r->p, now);
	struct prof_stats s;
	prof_stats(r->p, &s);
	fprintf(stderr, "\rspy: %.1f s, %llu samples (%.1f Hz), %llu errors, %zu threads",
		el, (unsigned long long)s.samples, el > 0 ? (double)s.samples / el : 0.0,
		(unsigned long long)prof_errors(&s), s.threads_seen);
	if (r->sink.pusher) {
		struct push_status st;
		pusher_status(r->sink.pusher, &st);
		fprintf(stderr, "; pushed %llu, queued %zu%s", (unsigned long long)st.sent, st.queued,
			st.failing ? ", retrying" : "");
	}
	fputs("\033[K", stderr);
}

/* One reading of the process's resources (at most once per window: a few preads and one status file per thread). */
static void read_resources(struct rec *r, uint64_t now)
{
	uint64_t t0 = spy_thread_cpu_ns();
	struct prof_resources pr;
	prof_resources(r->p, &pr);
	struct fg_res_point pt = {
		.t = prof_elapsed(r->p, now),
		.user_ns = pr.known & PROF_RES_CPU ? pr.utime : FG_RES_UNKNOWN,
		.sys_ns = pr.known & PROF_RES_CPU ? pr.stime : FG_RES_UNKNOWN,
		.rss = pr.known & PROF_RES_RSS ? pr.rss : FG_RES_UNKNOWN,
		.threads = pr.known & PROF_RES_THREADS ? pr.threads : FG_RES_UNKNOWN,
		.ctxsw = pr.known & PROF_RES_CTXSW ? pr.ctxsw : FG_RES_UNKNOWN,
		.read_bytes = pr.known & PROF_RES_IO ? pr.read_bytes : FG_RES_UNKNOWN,
		.write_bytes = pr.known & PROF_RES_IO ? pr.write_bytes : FG_RES_UNKNOWN,
	};
	/* A process gone reads nothing: no reading rather than one of unknowns. */
	if (pr.known) {
		fg_resources_add(r->res, &pt);
	}
	r->res_cpu_ns += spy_thread_cpu_ns() - t0;
}

/* Between ticks: the command's own chores. */
static void between_ticks(struct rec *r, uint64_t now)
{
	struct prof_stats st;
	prof_stats(r->p, &st);
	cmd_windows_check(&r->win, &st, now);
	stream_sink_lines(&r->sink, now, push_line, r);
	if (r->res && st.start_ns && now >= r->res_next_ns) {
		/* On the window's grid (from the start), not from the last reading: no drift. */
		read_resources(r, now);
		uint64_t since = now - st.start_ns;
		r->res_next_ns = st.start_ns + (since / r->res_every_ns + 1) * r->res_every_ns;
	}
	if (r->progress && now - r->last_progress_ns >= PROGRESS_NS) {
		r->last_progress_ns = now;
		show_progress(r, now);
	}
}

/* Sample until the duration, a stop signal or the process's exit. */
static void run(struct rec *r)
{
	cmd_windows_start(&r->win, r->sink.push ? r->sink.o.every_s : 0, spy_now_ns(), record_window, r);
	struct prof_tick tk;
	enum prof_event ev;
	while ((ev = prof_next(r->p, &tk)) != PROF_END) {
		if (ev == PROF_TICK) {
			struct prof_stats st;
			prof_stats(r->p, &st);
			cmd_windows_tick(&r->win, &st, tk.start_ns);
			for (size_t i = 0; i < tk.n; i++) {
				if (record_stack(r, &tk.v[i], tk.t_s) < 0) {
					prof_dropped(r->p);
				}
			}
		}
		between_ticks(r, spy_now_ns());
	}
	struct prof_stats st;
	prof_stats(r->p, &st);
	cmd_windows_end(&r->win, &st, st.stop_ns);
}

/* ---- output ---- */

static void set_metadata(struct rec *r, uint64_t now)
{
	struct fg_profile *p = r->profile;
	const struct prof_process *t = prof_root(r->p);
	struct prof_stats st;
	prof_stats(r->p, &st);
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_meta_set(p, FG_META_SPY_VERSION, SPY_VERSION);
	fg_profile_meta_setf(p, FG_META_PID, "%d", (int)prof_process_pid(t));
	fg_profile_meta_set(p, FG_META_PYTHON, prof_python(r->p));
	fg_profile_meta_setf(p, FG_META_RATE_HZ, "%g", r->o.rate);
	fg_profile_meta_setf(p, FG_META_DURATION_S, "%.3f", prof_elapsed(r->p, now));
	fg_profile_meta_setf(p, FG_META_SAMPLES, "%llu", (unsigned long long)st.samples);
	prof_format_errors(&st, &b);
	fg_profile_meta_set(p, FG_META_ERRORS, b.buf);
	fg_profile_meta_set(p, FG_META_COMMAND, prof_process_cmdline(t));
	fg_profile_meta_setf(p, "missed-ticks", "%llu", (unsigned long long)st.missed);
	fg_profile_meta_set(p, "mode", r->o.nonblocking ? "nonblocking" : "blocking");
	if (r->startup_samples) {
		fg_profile_meta_setf(p, FG_META_STARTUP, "%llu %llu", (unsigned long long)r->startup_samples,
				     (unsigned long long)r->startup_truncated);
	}
	if (r->o.gc) {
		/* Whether a missing <GC> means no collection or a Python that does not say (2.7, 3.6). */
		fg_profile_meta_set(p, FG_META_GC, prof_gc_known(r->p) ? "sampled" : "unknown");
	}
	if (r->slices) {
		fg_slices_store(r->slices, p);
	}
	if (r->res) {
		fg_resources_store(r->res, p);
		/* What the readings cost, for bench/kinds-overhead. */
		spy_log(SPY_LOG_DEBUG, "resources: %zu readings in %.3f ms CPU", fg_resources_count(r->res),
			(double)r->res_cpu_ns / 1e6);
	}
	if (r->keep_source) {
		struct fg_source_stats sst;
		uint64_t t0 = spy_thread_cpu_ns();
		fg_profile_source_capture(p, cmd_sources_get, &r->sources, &sst);
		/* What the source lines cost, for bench/source-overhead. */
		spy_log(SPY_LOG_DEBUG, "sources: %zu files read (%.1f MiB) in %.2f ms CPU, %zu lines kept in %.2f ms CPU",
			r->sources.n - r->sources.unreadable, (double)r->sources.bytes / (1 << 20),
			(double)r->sources.read_ns / 1e6, sst.lines, (double)(spy_thread_cpu_ns() - t0) / 1e6);
		/* Why a line has no text, for whoever views the profile elsewhere. */
		fg_profile_meta_setf(p, "sources", "%zu lines of %zu files kept; %zu files unreadable%s",
				     sst.lines, sst.files, r->sources.unreadable + sst.unreadable,
				     sst.budget_hit ? "; budget full" : "");
		if (r->sources.withheld) {
			/* Names only: which files spy did not read for the program (doc/permissions.md). */
			struct spy_buf w = SPY_BUF_INIT;
			cmd_sources_withheld(&r->sources, &w);
			fg_profile_meta_set(p, FG_META_WITHHELD, w.buf);
			spy_buf_release(&w);
		}
	}
	spy_buf_release(&b);
}

/* The output file, named or spy-<pid>EXT; none for a table bound for stdout. */
static int open_output(struct rec *r, pid_t pid, struct spy_err *err)
{
	if (r->table_to_stdout || r->out.path || r->no_file) {
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
	struct fg_lines_opts lopts = FG_LINES_OPTS_INIT;
	if (r->sort_given) {
		lopts.sort = r->table_opts.sort;
	}
	struct fg_writer w = { r->fmt, r->profile, r->timeline, &topts, &sopts, false, &lopts };
	if (!r->table_to_stdout && !r->no_file) {
		w.gzip = fg_format_gzip(r->fmt, r->output);
		rc = cmd_output_commit(&r->out, fg_write, &w, err);
	} else if (r->fmt == FG_FORMAT_LINES) {
		fg_write(&w, stdout, "<stdout>", NULL);
		fflush(stdout);
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

/* --push's rules, and what it changes in the outputs; 0, else the exit code (2). */
static int check_push_args(struct rec *r, const char *table)
{
	int rc = stream_sink_check(&r->sink);
	if (rc || !r->sink.push) {
		return rc;
	}
	/* Continuous: a file only with -o, a table only when asked for. */
	r->no_file = !r->output && !r->table_to_stdout;
	r->want_table = table || (r->table_to_stdout && r->fmt == FG_FORMAT_TABLE);
	return 0;
}

/* The labels and the sender, once the target is known; 0 or the exit code. */
static int start_push(struct rec *r)
{
	const struct prof_process *t = prof_root(r->p);
	int rc = stream_open(&r->stream, &r->sink, NULL, prof_process_cmdline(t), (int)prof_process_pid(t),
			     prof_python(r->p));
	rc = rc ? rc : stream_sink_start(&r->sink);
	if (rc == 0) {
		r->window = fg_profile_new(&r->strs, r->function ? FG_FUNCTION : 0);
	}
	return rc;
}

/* Usage rules beyond the parser's; 0, else the exit code (2). */
static int check_args(struct rec *r, const char *format, const char *sort, const char *table)
{
	const char *msg = NULL;
	if (!r->pid && !r->program) {
		msg = "--pid PID or -- PROGRAM [ARGS...] is required";
	} else if (r->pid && r->program) {
		msg = "--pid and a program to run are exclusive";
	} else if (!(r->o.rate > 0) || r->o.rate > CMD_MAX_RATE_HZ) {
		return cmd_usage_error("record", "--rate must be above 0 and at most %.0f", CMD_MAX_RATE_HZ);
	} else if (r->o.duration == 0) {
		msg = "--duration must be above 0";
	} else if ((r->native || r->native_all) && r->o.nonblocking) {
		msg = "--native unwinds paused threads: it cannot go with --nonblocking";
	} else if (sort && !fg_sort_parse(sort, &r->table_opts.sort)) {
		return cmd_usage_error("record", "--sort: '%s' is not cumtime, tottime or name", sort);
	} else if (table && *table && (!all_digits(table) || strlen(table) > 10 || strtoull(table, NULL, 10) > UINT_MAX)) {
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
	r->table_opts.top = table && *table ? (unsigned)strtoul(table, NULL, 10) : 20;
	/* The report's thread filter needs the threads' roots. */
	r->threads = r->threads || r->fmt == FG_FORMAT_HTML;
	/* A table (or the lines view) with no file named goes to stdout, once. */
	r->table_to_stdout = (r->fmt == FG_FORMAT_TABLE || r->fmt == FG_FORMAT_LINES) && !r->output;
	/* With -o -, stdout is the profile's: the table only when asked for. */
	bool profile_on_stdout = r->output && !strcmp(r->output, "-");
	r->want_table = table || (r->table_to_stdout ? r->fmt == FG_FORMAT_TABLE
						     : isatty(STDOUT_FILENO) && !profile_on_stdout);
	r->sort_given = sort != NULL;
	/* -F has no lines to show the text of. */
	r->keep_source = !r->no_source && !r->function;
	if (r->slice > 0 && r->fmt != FG_FORMAT_FOLDED && r->fmt != FG_FORMAT_HTML) {
		return cmd_usage_error("record", "--slice keeps its windows in a folded profile or an HTML report: use -o FILE.folded or FILE.html");
	}
	r->progress = !r->quiet && isatty(STDERR_FILENO);
	return check_push_args(r, table);
}

/* The options, and after `--` the program (even if it looks like an
 * option of ours). -1 to go on, else the exit code. */
static int parse_args(struct rec *r, int argc, char **argv)
{
	const char *format = NULL, *sort = NULL, *table = NULL;
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &r->pid, "PID", "attach to a running process" },
		{ 'o', "output", OPT_STRING, &r->output, "FILE", "where to write (default spy-<pid>.svg; with -f, that format's extension; - for stdout)" },
		{ 'f', "format", OPT_STRING, &format, "F",
		  "svg, html, folded, table, lines, speedscope, chrome, pprof, json (pprof and json label each sample with its "
		  "OpenTelemetry span when the SDK is loaded)" },
		{ 'r', "rate", OPT_DOUBLE, &r->o.rate, "HZ",
		  "samples per second (default 100, at most 1000000; above 20000 spy spins between samples: a core kept busy)" },
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
		{ 0, "table", OPT_OPTCOUNT, &table, "[N]", "print the top N functions (default 20) after recording" },
		{ 0, "sort", OPT_STRING, &sort, "KEY", "table order: cumtime, tottime or name" },
		{ 'q', "quiet", OPT_BOOL, &r->quiet, NULL, "no progress line" },
		{ 0, "no-source", OPT_BOOL, &r->no_source, NULL, "do not keep the sampled lines' source text in the profile" },
		{ 0, "slice", OPT_DOUBLE, &r->slice, "S", "also count samples, and read the process's CPU, RSS, threads, switches and I/O, per S-second window, kept in a folded profile (for report --trend) or charted in an HTML report" },
		STREAM_PUSH_OPTIONS(&r->sink.o,
				    "continuous mode: every --push-every S, send the last window to the Pyroscope server at URL (http:// or https://); no file unless -o",
				    "with --push: "),
		STREAM_SERIES_OPTIONS(&r->sink.o),
		{ 0, "async", OPT_BOOL, &r->async, NULL,
		  "put the running asyncio task, as a `task \"NAME\"` frame, in place of the event loop's "
		  "frames (Python 3.8+; older: refused)" },
		{ 0, NULL, OPT_PROGRAM, &r->program, NULL, NULL },
		{ 0 },
	};
	int rc = cmd_parse_options("record", record_usage, opts, argc, argv, NULL, 0, CMD_PROGRAM_HINT);
	if (rc < 0 && r->program && !r->program[0]) {
		r->program = NULL;
		rc = r->pid ? -1 : cmd_usage_error("record", "no program after '--'");
	}
	if (rc < 0) {
		rc = check_args(r, format, sort, table);
		rc = rc ? rc : -1;
	}
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
	int arc = stream_sink_auth(&r->sink);
	if (arc) {
		return arc;
	}
	if (r->program && !r->output && !r->table_to_stdout && !r->no_file && access(".", W_OK) != 0) {
		/* The default name needs the child's pid; the directory can be checked now. */
		spy_err_set(&err, SPY_EIO, "cannot write spy-<pid>%s in the current directory: %s",
			    fg_format_ext(r->fmt), strerror(errno));
		return cmd_fail(&err);
	}
	if (r->program && r->output && open_output(r, 0, &err) < 0) {
		return cmd_fail(&err);
	}
	r->o.native = r->native;
	r->o.native_all = r->native_all;
	r->o.async = r->async;
	/* The collector's state goes with the views over time (issue 17's scope). */
	r->o.gc = r->slice > 0 || r->fmt == FG_FORMAT_CHROME;
	int rc = prof_open(&r->p, &r->o, &r->strs, r->pid, r->program, &err);
	if (rc == 0 && r->program) {
		rc = open_output(r, prof_process_pid(prof_root(r->p)), &err);
	}
	if (rc < 0) {
		cmd_output_abandon(&r->out);
		return rc == -SPY_EINTR ? 128 + prof_stop_signal() : cmd_fail(&err);
	}
	return r->sink.push ? start_push(r) : 0;
}

static void rec_release(struct rec *r)
{
	cmd_output_abandon(&r->out);
	prof_close(r->p);
	spy_buf_release(&r->default_out);
	spy_stack_release(&r->stack);
	cmd_sources_release(&r->sources);
	fg_slices_free(r->slices);
	fg_timeline_free(r->timeline);
	fg_resources_free(r->res);
	fg_profile_free(r->profile);
	fg_profile_free(r->window);
	stream_sink_release(&r->sink);
	spy_strtab_release(&r->strs);
}

int cmd_record(int argc, char **argv)
{
	struct rec *r = spy_xcalloc(1, sizeof(*r));
	r->o.rate = 100;
	r->o.duration = -1;
	r->out.fd = -1;
	stream_sink_init(&r->sink, "record");
	cmd_sources_init(&r->sources);
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
	if (r->slices || r->timeline) {
		/* Chrome's counter tracks get a reading a second. */
		r->res = fg_resources_new();
		r->res_every_ns = (uint64_t)((r->slices ? r->slice : 1.0) * 1e9);
		r->res_every_ns = r->res_every_ns < 10000000 ? 10000000 : r->res_every_ns;
	}
	r->idle_frame = spy_strtab_interns(&r->strs, "idle");
	r->gc_frame = spy_strtab_interns(&r->strs, FG_GC_FRAME);
	r->startup_frame = spy_strtab_interns(&r->strs, FG_STARTUP_FRAME);

	r->keep_run = !r->no_file || r->want_table;
	run(r);
	uint64_t end = spy_now_ns();
	if (r->res) {
		/* The run's end is a reading too, while the process is still open. */
		read_resources(r, end);
	}
	prof_detach(r->p);
	if (r->progress) {
		fputs("\r\033[K", stderr);
	}

	/* Detached: from here on nothing can leave the target stopped. */
	/*
	 * The last window goes out too, for a bounded time (the backend may
	 * be down): after a stop signal, what keeps the whole command within
	 * a second of it.
	 */
	struct push_status pst;
	stream_sink_finish(&r->sink, prof_stop_signal() ? PUSH_FLUSH_STOPPED_NS : PUSH_FLUSH_NS, &pst);
	int none = cmd_no_python(r->p);
	if (none) {
		/* Nothing was sampled, so nothing is written. */
		rec_release(r);
		free(r);
		return none;
	}
	struct spy_err werr = SPY_ERR_INIT;
	int wrc = r->keep_run ? write_outputs(r, end, &werr) : 0;
	struct spy_buf sum = SPY_BUF_INIT;
	cmd_summary(r->p, end, &sum);
	if (r->sink.push) {
		spy_buf_addf(&sum, "; pushed %llu window%s to %s", (unsigned long long)pst.sent,
			     pst.sent == 1 ? "" : "s", r->sink.push->url_text);
		/* Not lost: a window without samples is not sent, so the pushed ones have gaps there. */
		if (pst.empty) {
			spy_buf_addf(&sum, " (%llu empty, not sent)", (unsigned long long)pst.empty);
		}
		if (pst.dropped || pst.rejected || pst.queued) {
			spy_buf_addf(&sum, " (lost: %llu dropped from a full queue, %llu refused, %zu not sent in time)",
				     (unsigned long long)pst.dropped, (unsigned long long)pst.rejected, pst.queued);
		}
	}
	if (wrc == 0 && r->out.path) {
		spy_buf_addf(&sum, "; wrote %s", r->out.path);
	}
	prof_program_fate(r->p, &sum);
	fprintf(stderr, "%s\n", sum.buf);
	spy_buf_release(&sum);
	if (wrc < 0) {
		exit_code = cmd_fail(&werr);
	}
	rec_release(r);
	free(r);
	return exit_code;
}
