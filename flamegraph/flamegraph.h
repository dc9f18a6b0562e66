/*
 * flamegraph, the module's contract: a profile of stacks (spy_stacks whose
 * strings are interned in the profile's table, or a folded file), adding
 * samples with their time, the output formats, the cumtime table, the
 * diff and the trend. It knows nothing of processes. The renderers' side
 * (frames by id, the trie, each format's own writer) and the full rules
 * are in flamegraph/internal.h, for the module and its tests.
 *
 * A profile holds metadata, distinct frames and distinct stacks with their
 * counts; memory grows with distinct stacks, never with samples; output is
 * deterministic. A frame's folded text is "func (file:line)", "func
 * (file)" without a line, a synthetic frame's func alone.
 *
 * Errors: 0 or -SPY_E*, struct spy_err *err last (NULL allowed); malformed
 * input is -SPY_EFORMAT "NAME:LINE: what", I/O -SPY_EIO with the path.
 */
#ifndef SPY_FLAMEGRAPH_FLAMEGRAPH_H
#define SPY_FLAMEGRAPH_FLAMEGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/bounds.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/sample.h"
#include "common/strtab.h"

/* Frames per stack kept (root-most) and read: every stack spy records fits (internal.h). */
#define FG_MAX_DEPTH (SPY_MAX_PY_DEPTH + SPY_MAX_NATIVE_DEPTH + 16)
/* The documented metadata keys (cli.md, "Files"), in the order written. */
#define FG_META_SPY_VERSION "spy-version"
#define FG_META_PID "pid"
#define FG_META_PYTHON "python"
#define FG_META_RATE_HZ "rate-hz"
#define FG_META_DURATION_S "duration-s"
#define FG_META_SAMPLES "samples"
#define FG_META_ERRORS "errors"
#define FG_META_COMMAND "command"
/* Set by record --slice or -f chrome: "sampled", or "unknown" where the Python does not say (2.7, 3.6). */
#define FG_META_GC "gc"
/* Source files the program could not read, so spy did not (names, no content). */
#define FG_META_WITHHELD "withheld"
/* The agent: names interned in place of new ones past the process's name budget, in this window (common/strtab.h). */
#define FG_META_NAMES_OVER "names-over-budget"
/* The agent: samples of new stacks counted under one truncation frame past the window's byte budget (cmd/agent-memory.h). */
#define FG_META_STACKS_OVER "stacks-over-budget"
/* The synthetic frame record puts innermost on a sample taken while the garbage collector ran. */
#define FG_GC_FRAME "<GC>"
/* Launch mode: the interpreter's start-up (imports before the program's code) folded into one frame. */
#define FG_STARTUP_FRAME "<start-up>"
/* "N M": N samples of the start-up folded into FG_STARTUP_FRAME, M of them with a stack the walk cut short. */
#define FG_META_STARTUP "startup"

/* Profile options, fixed at fg_profile_new. */
enum fg_flags {
	FG_FUNCTION = 1, /* -F: aggregate by function, line numbers dropped */
};

struct fg_frame {
	const char *func;  /* interned; never NULL once in a profile ("" instead) */
	const char *file;  /* interned; NULL for synthetic frames */
	uint32_t line;     /* 0 when unknown, under FG_FUNCTION, and for synthetic */
	uint8_t kind;      /* enum spy_frame_kind */
};

struct fg_stats {
	uint64_t samples;    /* samples added */
	uint64_t dropped;    /* samples not added: empty stack or a limit hit */
	uint64_t truncated;  /* samples added with their stack cut to FG_MAX_DEPTH */
	size_t frames;       /* distinct frames */
	size_t stacks;       /* distinct stacks */
	size_t frame_ids;    /* frames stored over all distinct stacks */
	size_t bytes;        /* heap held by frames, stacks and hashes (not strings) */
	size_t names;        /* bytes of the names the frames carry (func and file, each frame's own):
				what writing the profile out costs beyond bytes */
};

struct fg_profile;

/* A new empty profile on strtab (borrowed, outlives it; NULL: its own). flags: enum fg_flags. */
struct fg_profile *fg_profile_new(struct spy_strtab *strtab, unsigned flags);
/* Frees everything, including an owned string table. NULL is a no-op. */
void fg_profile_free(struct fg_profile *p);

/*
 * Add count samples of stack s (innermost frame first, as walked). 0, or
 * -SPY_EBOUND when a bound is hit (the samples are counted as dropped).
 */
int fg_profile_add(struct fg_profile *p, const struct spy_stack *s, uint64_t count);

/*
 * Add count samples of s only if the profile holds that stack already: 0,
 * or -SPY_EBOUND with nothing added, counted or interned (a frame or the
 * stack is new, or the sample bound). For a caller holding a profile to a
 * budget: past it, known stacks still count and new ones go elsewhere.
 */
int fg_profile_add_known(struct fg_profile *p, const struct spy_stack *s, uint64_t count);

/* Cap the distinct stacks (known ones still count), to bound memory. */
void fg_profile_limit_stacks(struct fg_profile *p, size_t max_stacks);
/* The byte budget of each folded read into p (default FG_MAX_READ_BYTES). */
void fg_profile_limit_read(struct fg_profile *p, size_t max_bytes);

void fg_profile_stats(const struct fg_profile *p, struct fg_stats *st);

/* Metadata: key [A-Za-z0-9._-]+, value copied through the terminal escaper
 * (common/term.h), cut to FG_MAX_META_VALUE bytes; NULL removes. */
void fg_profile_meta_set(struct fg_profile *p, const char *key, const char *value);
void fg_profile_meta_setf(struct fg_profile *p, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Append the folded text of f to out (see the top of this file). */
void fg_frame_format(const struct fg_frame *f, struct spy_buf *out);

/*
 * Folded input, plain or gzip (told by its first bytes), added to what p
 * holds, so several files merge; malformed input is -SPY_EFORMAT with
 * "NAME:LINE: ..." and never crashes (the rules: internal.h). From len
 * bytes at data, from fd to its end (not closed), or from path.
 */
int fg_profile_read_folded(struct fg_profile *p, const void *data, size_t len,
			   const char *name, struct spy_err *err);
int fg_profile_read_folded_fd(struct fg_profile *p, int fd, const char *name,
			      struct spy_err *err);
int fg_profile_load_folded(struct fg_profile *p, const char *path, struct spy_err *err);

/*
 * The per-function table: what cProfile + pstats sorted by cumtime would
 * show, estimated from samples, one row per (func, file), recursion
 * counted once per stack; a total order (the rules: internal.h).
 */
enum fg_sort {
	FG_SORT_CUMTIME = 0, /* total desc */
	FG_SORT_TOTTIME,     /* self desc */
	FG_SORT_NAME,        /* func, then file, ascending */
};

struct fg_table_opts {
	enum fg_sort sort;
	size_t top;       /* keep the first top rows; 0 keeps all */
	double rate_hz;   /* samples per second; 0 reads "# rate-hz:" */
	bool by_line;     /* one row per (func, file, line) instead of per function (spy top --lines) */
};

/*
 * What a sample was doing, told from its stack (innermost frame outwards):
 * idle when it ends in a thread-state leaf (record -i's "idle": the thread
 * was neither on a CPU nor holding the GIL, so waiting for the GIL counts
 * here), native when the innermost code frame is native (--native), Python
 * otherwise. Synthetic frames that are not a state (<GC>, the roots) are
 * looked through.
 */
enum fg_kind {
	FG_KIND_PYTHON = 0,
	FG_KIND_NATIVE,
	FG_KIND_IDLE,
	FG_KINDS
};
extern const char *const fg_kind_names[FG_KINDS];   /* "python", "native", "idle" */

struct fg_row {
	const char *func, *file;  /* borrowed from the profile's string table */
	uint32_t line;
	uint64_t self, total;
	double self_pct, total_pct;
	double tottime, cumtime;
	uint64_t kind[FG_KINDS];      /* the total samples by kind; they add up to total */
	double kind_pct[FG_KINDS];    /* of total */
};

struct fg_table {
	struct fg_row *rows;
	size_t n;          /* rows kept (after top) */
	size_t nfuncs;     /* functions in the profile (before top) */
	uint64_t samples;  /* the percentages' denominator */
	double rate_hz;    /* 0 when unknown */
	enum fg_sort sort;
	uint64_t kind[FG_KINDS];     /* every sample by kind */
	double kind_pct[FG_KINDS];   /* of samples */
};

#define FG_TABLE_OPTS_INIT { FG_SORT_CUMTIME, 0, 0.0, false }

/* Parse "cumtime", "tottime" or "name"; false otherwise. */
bool fg_sort_parse(const char *name, enum fg_sort *out);
/*
 * Fill caller-owned t from p (o NULL: the defaults). O(frames stored), no
 * trie needed. t's strings are borrowed from p's string table.
 */
void fg_table_init(struct fg_table *t, const struct fg_profile *p, const struct fg_table_opts *o);
void fg_table_release(struct fg_table *t);

/*
 * SVG flame graph: one self-contained file, every target string escaped,
 * deterministic for a given profile (what it draws: internal.h).
 */
struct fg_svg_opts {
	const char *title;   /* NULL: "spy flame graph" */
	bool inverted;       /* icicle: root at the top */
};
int fg_profile_write_svg(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts, struct spy_err *err);

/*
 * Differential profile (spy diff): how each function's share of samples
 * (self and total, as in the table) changed from BASE to NEW, in
 * percentage points. Both profiles share one string table (the rules:
 * internal.h).
 */
struct fg_diff_side {
	uint64_t self, total;
	double self_pct, total_pct;
	double kind_pct[FG_KINDS];     /* of total, as in the table */
};

struct fg_diff_row {
	const char *func, *file;       /* borrowed from the shared string table */
	struct fg_diff_side base, cur;
	double self_delta, total_delta; /* cur - base, percentage points */
	/*
	 * Two-sided p-values of the two-proportion test on each share, Holm-
	 * adjusted over the functions compared (doc/spy-diff.md); a change is
	 * significant when its p-value is at most FG_DIFF_LEVEL.
	 */
	double self_p, total_p;
};

/* The significance level of spy diff's test, family-wise over the functions. */
#define FG_DIFF_LEVEL 0.05
/*
 * Samples of a sampling profiler are not independent (a function running
 * for longer than the period, a descheduled thread, give runs of samples):
 * the binomial variance is multiplied by this dispersion, i.e. a profile
 * of n samples counts as n / dispersion independent ones. 3 covers what
 * was measured on recordings of 200 samples at 100 Hz of a program of
 * short calls (2.4 to 2.8; doc/spy-diff.md).
 */
#define FG_DIFF_DISPERSION 3.0

struct fg_diff {
	struct fg_diff_row *rows;      /* every function of either profile */
	size_t n;
	uint64_t base_samples, cur_samples;
	double base_kind_pct[FG_KINDS], cur_kind_pct[FG_KINDS];   /* the whole profiles' split */
	uint32_t *byname;              /* row indices by (func, file) pointers */
	double dispersion;             /* of the test, FG_DIFF_DISPERSION unless set */
};

/*
 * The regression gate: a row fails when its share grew past a threshold
 * (negative: off) on enough samples and, with significance, the growth is
 * significant (p-value at most FG_DIFF_LEVEL).
 */
struct fg_diff_gate {
	double total_pts, self_pts;
	uint64_t min_samples;
	bool significance;
};

#define FG_DIFF_GATE_OFF { -1.0, -1.0, 0, false }

/* Whether a row's total (or self) change is significant. */
bool fg_diff_total_significant(const struct fg_diff_row *r);
bool fg_diff_self_significant(const struct fg_diff_row *r);
/*
 * The two-sided p-value of a two-proportion z-test (pooled) of x1 of n1
 * against x2 of n2, its variance times dispersion, unadjusted; 1 when
 * either side has no samples or the pooled share is 0 or 1.
 */
double fg_diff_pvalue(uint64_t x1, uint64_t n1, uint64_t x2, uint64_t n2, double dispersion);
/* Test every row again with another dispersion (>= 1; fg_diff_init uses FG_DIFF_DISPERSION). */
void fg_diff_set_dispersion(struct fg_diff *d, double dispersion);

void fg_diff_init(struct fg_diff *d, const struct fg_profile *base, const struct fg_profile *cur);
void fg_diff_release(struct fg_diff *d);
/* Which of the gate's tests r fails: bit 0 total, bit 1 self; 0 if none. */
unsigned fg_diff_row_fails(const struct fg_diff_row *r, const struct fg_diff_gate *g);
/*
 * Append the first top rows (0: all) as an aligned text table, after one
 * summary line and the split by kind of both profiles ("by kind: python
 * 90.0% -> 60.0% (-30.0), ..."); names escaped as in the cumtime table.
 */
void fg_diff_render(const struct fg_diff *d, size_t top, struct spy_buf *out);
/*
 * The diff as one JSON document (doc/diff-json.md): base and new names and
 * sample counts, the gate, the first top rows (0: all) and every row that
 * fails the gate. Streamed to f (flushed, not closed); -SPY_EIO on error.
 */
int fg_diff_write_json(const struct fg_diff *d, size_t top, const struct fg_diff_gate *g,
		       const char *base_name, const char *cur_name, FILE *f, struct spy_err *err);

/* The differential flame graph: NEW drawn with each function coloured by its self-share change. */
int fg_diff_write_svg(const struct fg_diff *d, const struct fg_profile *cur, FILE *f,
		      const struct fg_svg_opts *opts, struct spy_err *err);

/*
 * Time windows (record --slice S, report --trend): the samples split into
 * windows of S seconds, bounded in memory and count (FG_MAX_SLICES), kept
 * in a folded file as metadata lines (fg_slices_store, fg_slices_load;
 * the format: internal.h). Samples come from fg_profile_add_at.
 */
#define FG_MAX_SLICES 4096

struct fg_slices;

struct fg_slices *fg_slices_new(double slice_s);
void fg_slices_free(struct fg_slices *s);
void fg_slices_store(const struct fg_slices *s, struct fg_profile *p);
int fg_slices_load(struct fg_slices **out, const struct fg_profile *p, const char *name,
		   struct spy_err *err);
/* Remove the windows' metadata from p: for a profile whose stacks were
 * merged (read with FG_FUNCTION), which would make the stack numbers lie. */
void fg_slices_drop(struct fg_profile *p);

/*
 * The process's resources over a recording (record --slice, -f chrome):
 * readings at points in time, kept in a folded file as metadata ("# resources"
 * names the columns, "# res-I" holds reading I; doc/folded-format.md). A
 * field not read is FG_RES_UNKNOWN. Past FG_MAX_SLICES readings every other
 * one is dropped.
 */
#define FG_RES_UNKNOWN UINT64_MAX
struct fg_res_point {
	double t;                       /* seconds since the recording started */
	uint64_t user_ns, sys_ns;       /* CPU time of the process so far */
	uint64_t rss;                   /* bytes resident */
	uint64_t threads;
	uint64_t ctxsw;                 /* context switches of the live threads so far */
	uint64_t read_bytes, write_bytes;   /* storage I/O so far */
};
struct fg_resources;
struct fg_resources *fg_resources_new(void);
void fg_resources_free(struct fg_resources *r);
void fg_resources_add(struct fg_resources *r, const struct fg_res_point *pt);
size_t fg_resources_count(const struct fg_resources *r);
const struct fg_res_point *fg_resources_at(const struct fg_resources *r, size_t i);
/* Replace p's readings with r's (NULL: remove them). */
void fg_resources_store(const struct fg_resources *r, struct fg_profile *p);
/* *out NULL when p has none (or columns this spy does not know); a malformed reading is SPY_EFORMAT. */
int fg_resources_load(struct fg_resources **out, const struct fg_profile *p, const char *name,
		      struct spy_err *err);
/* Peak RSS and threads; CPU, switches and I/O between the first and last reading (t: that span). */
void fg_resources_totals(const struct fg_resources *r, struct fg_res_point *tot);
/* report --trend's resource rows: [rss], [cpu], [threads], [ctxsw], [io]. */
void fg_resources_trend(const struct fg_resources *r, struct spy_buf *out);

/* The trend of each function across the windows: slope, first, last and mean share, r2 (internal.h). */
struct fg_trend_row {
	const char *func, *file;
	double slope, first_pct, last_pct, mean_pct, r2;
};

struct fg_trend {
	struct fg_trend_row *rows;
	size_t n, nfuncs;
	size_t windows;        /* non-empty windows */
	double slice_s;
	uint64_t samples;
};

void fg_trend_init(struct fg_trend *t, const struct fg_slices *s, const struct fg_profile *p,
		   size_t top);
void fg_trend_release(struct fg_trend *t);
void fg_trend_render(const struct fg_trend *t, struct spy_buf *out);

/*
 * The timeline (for -f chrome): per thread (a track, keyed by pid and tid
 * and named by the caller, strings interned in the profile's table), the
 * samples in time order; rate_hz is the sampling rate. Its samples come
 * from fg_profile_add_at; the chrome writer lays them out.
 */
struct fg_timeline;

struct fg_track {
	int32_t pid, tid;
	const char *pname, *tname; /* NULL: unnamed */
};

struct fg_timeline *fg_timeline_new(double rate_hz);
void fg_timeline_free(struct fg_timeline *tl);

/*
 * Add one sample of s to p at t seconds since the start, and, when given,
 * to the slices (--slice) and the timeline (track: whose sample it is), in
 * the order they need: both count p's last added stack. Returns
 * fg_profile_add's.
 */
int fg_profile_add_at(struct fg_profile *p, const struct spy_stack *s, double t, struct fg_slices *sl,
		      struct fg_timeline *tl, const struct fg_track *track);

/*
 * Labels of samples (flamegraph/labels.c): the OpenTelemetry span a
 * sample was taken in, as span_id, trace_id and span_name. Kept per
 * distinct stack and set of labels, beside the stack's count: json and
 * pprof write them, the other formats (folded among them) do not change.
 * At most FG_MAX_LABELS labels a sample, FG_MAX_LABEL_SETS distinct sets
 * and FG_MAX_LABEL_ENTS (stack, set) pairs; past them a sample stays
 * counted in its stack, unlabelled.
 */
#define FG_MAX_LABELS 8
#define FG_MAX_LABEL_SETS (1u << 16)
#define FG_MAX_LABEL_ENTS (1u << 20)
struct fg_label {
	const char *key, *value;
};
/* count samples of the stack the last add counted carry labels l[0..n) (copied). */
int fg_profile_label_last(struct fg_profile *p, const struct fg_label *l, size_t n, uint64_t count);

/*
 * Source lines (record keeps the hot lines' text; -f lines, the SVG
 * tooltip and the JSON frames show it): per (file, line) of the profile's
 * Python frames, the line's text, tabs expanded and escaped as metadata is
 * (common/term.h), bounded in lines and bytes (the rules: internal.h). A
 * folded file carries them as "# source-file:" and "# source-line:" lines.
 */
/* The line's text (file interned in the profile's table), NULL if not kept. */
const char *fg_profile_source(const struct fg_profile *p, const char *file, uint32_t line);
/* Keep len bytes at text as line of file; false when the store is full. */
bool fg_profile_source_set(struct fg_profile *p, const char *file, uint32_t line, const char *text,
			   size_t len);

/* A file's bytes for the capture: 0 with *data, *len set (borrowed until
 * the capture returns), or < 0 when the file could not be read. */
typedef int (*fg_source_fn)(void *ctx, const char *file, const char **data, size_t *len);

struct fg_source_stats {
	size_t files;       /* files whose lines were kept */
	size_t lines;       /* lines kept */
	size_t unreadable;  /* files get() could not give */
	bool budget_hit;    /* the store filled up before every sampled line was kept */
};

/*
 * Keep the text of every sampled line of p's Python frames, with
 * FG_SOURCE_CONTEXT lines either side and the line of the function's
 * `def`, asking get for each file once, the file of the hottest line
 * first, until the store is full. Nothing under FG_FUNCTION (no lines).
 */
void fg_profile_source_capture(struct fg_profile *p, fg_source_fn get, void *ctx,
			       struct fg_source_stats *st);

/*
 * The lines view (-f lines): the top functions, ranked by sort (default
 * tottime), each with its sampled lines and context lines around them:
 * per line the self and total samples and their share of all samples,
 * beside the source text when the profile keeps it.
 */
#define FG_LINES_TOP 5
#define FG_LINES_CONTEXT 2

struct fg_lines_opts {
	enum fg_sort sort;
	size_t top;         /* functions shown; 0: FG_LINES_TOP */
	unsigned context;   /* lines shown either side of a sampled line (at most the 3 kept: FG_SOURCE_CONTEXT) */
};

#define FG_LINES_OPTS_INIT { FG_SORT_TOTTIME, FG_LINES_TOP, FG_LINES_CONTEXT }

void fg_lines_render(const struct fg_profile *p, const struct fg_lines_opts *o, struct spy_buf *out);

/*
 * The output formats: names, the one a file name implies (any case:
 * ".pb.gz" pprof, other ".gz" folded, else svg), default extensions, and
 * one writer call onto a FILE * (the shape of cmd/output.h's cmd_write_fn).
 */
enum fg_format {
	FG_FORMAT_SVG = 0,
	FG_FORMAT_FOLDED,
	FG_FORMAT_TABLE,
	FG_FORMAT_SPEEDSCOPE,
	FG_FORMAT_CHROME,
	FG_FORMAT_PPROF,
	FG_FORMAT_JSON,
	FG_FORMAT_LINES,
	FG_FORMAT_HTML,
};
/* Parse a --format name (exact); false if unknown. */
bool fg_format_parse(const char *name, enum fg_format *out);
enum fg_format fg_format_from_path(const char *path);
const char *fg_format_name(enum fg_format f);
const char *fg_format_ext(enum fg_format f);
/* Whether format f written to path is gzip-compressed (a folded ".gz", any case). */
bool fg_format_gzip(enum fg_format f, const char *path);

/* What a pprof says beyond the profile (all zero: wall time, no start time). */
struct fg_pprof_opts {
	/* The samples' time is CPU time (sample and period type cpu/nanoseconds: Pyroscope's process_cpu), not wall. */
	bool cpu;
	/* The profile's start, unix ns (time_nanos: where a backend files a window sent late); 0 for none. */
	int64_t time_ns;
};

struct fg_writer {
	enum fg_format format;
	const struct fg_profile *profile;
	const struct fg_timeline *timeline;  /* chrome; NULL lays the stacks end to end */
	const struct fg_table_opts *table;   /* table */
	const struct fg_svg_opts *svg;       /* svg */
	bool gzip;                           /* folded: compressed (fg_format_gzip) */
	const struct fg_lines_opts *lines;   /* lines; NULL: the defaults */
};
/* Write w (a struct fg_writer *) onto f; name is for messages. 0 or -SPY_EIO with err set. */
int fg_write(void *w, FILE *f, const char *name, struct spy_err *err);
/* pprof with options (fg_write's pprof is o NULL: the defaults); 0 or -SPY_EIO with err set. */
int fg_profile_write_pprof(const struct fg_profile *p, const struct fg_pprof_opts *o, FILE *f,
			   struct spy_err *err);

#endif
