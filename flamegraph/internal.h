/*
 * Private to flamegraph/: the layout of struct fg_profile, the helpers its
 * files share, and the renderers' view of a profile (frames by id, the
 * trie, the timeline's runs, each format's own writer). flamegraph.h is
 * the module's contract; only this folder, its tests and bench include
 * this file.
 */
#ifndef SPY_FLAMEGRAPH_INTERNAL_H
#define SPY_FLAMEGRAPH_INTERNAL_H

#include "common/hashmap.h"
#include "common/json.h"
#include "flamegraph/flamegraph.h"

/*
 * ---- The renderers' side of the profile: what the module's files share,
 * and what its tests (and bench) may reach. Not the module's contract.
 */

/*
 * The distinct stack the last fg_profile_add (or folded line read) counted
 * its samples in, a stable id below fg_stats.stacks; FG_NONE when it
 * counted none (empty stack, count 0, a limit hit). For fg_slices_add.
 */
uint32_t fg_profile_last_stack(const struct fg_profile *p);

/* Frames by id, 0 .. count-1. The pointer is valid until the next add or read. */
size_t fg_profile_frame_count(const struct fg_profile *p);
const struct fg_frame *fg_profile_frame(const struct fg_profile *p, uint32_t id);

/*
 * Call fn once per distinct stack, in the folded file's order (depth-first,
 * children by folded text). frames holds depth frame ids root first and is
 * valid only during the call; count is that stack's samples. A nonzero
 * return from fn stops the walk and is returned. fn must not add to p.
 */
typedef int (*fg_stack_fn)(void *ctx, const uint32_t *frames, size_t depth, uint64_t count);
int fg_profile_foreach_stack(const struct fg_profile *p, fg_stack_fn fn, void *ctx);

/*
 * The label sets the samples of the stack whose frames are frames (the
 * pointer fg_profile_foreach_stack handed over) carried, and how many
 * samples each; those of the stack's count not given here carried none.
 */
typedef int (*fg_label_fn)(void *ctx, const struct fg_label *l, size_t n, uint64_t count);
int fg_profile_stack_labels(const struct fg_profile *p, const uint32_t *frames, fg_label_fn fn, void *ctx);
struct fg_labels;
void fg_labels_free(struct fg_labels *l);
size_t fg_labels_bytes(const struct fg_labels *l);

/*
 * The trie of a profile, for renderers: a snapshot built by fg_tree_init
 * (O(frames stored), one allocation per array) that does not change when
 * the profile does. Node 0 is the root (no frame); nodes are numbered in
 * depth-first order, so a parent's id is below its children's. The children
 * of node i are child[start[i] .. start[i + 1]), in output order.
 */
struct fg_node {
	uint32_t parent;   /* FG_NONE for the root */
	uint32_t frame;    /* FG_NONE for the root */
	uint32_t depth;    /* 0 for the root */
	uint64_t self;     /* samples whose innermost frame is this node */
	uint64_t total;    /* samples passing through this node (self included) */
};

struct fg_tree {
	struct fg_node *nodes;
	size_t nnodes;
	uint32_t *start;   /* nnodes + 1 entries */
	uint32_t *child;   /* nnodes - 1 entries */
};

void fg_tree_init(struct fg_tree *t, const struct fg_profile *p);
void fg_tree_release(struct fg_tree *t);

/* Metadata as stored (see fg_profile_meta_set): NULL when unset, valid until the key is set again. */
const char *fg_profile_meta_get(const struct fg_profile *p, const char *key);
/* Entries in written order: documented keys first, then the others as set. */
size_t fg_profile_meta_count(const struct fg_profile *p);
void fg_profile_meta_at(const struct fg_profile *p, size_t i, const char **key, const char **value);
/* True if key is a syntactically valid metadata key. */
bool fg_meta_key_valid(const char *key, size_t len);

/*
 * Folded output: metadata lines "# key: value", then one line per distinct
 * stack in fg_profile_foreach_stack order: frames joined by ';', a space,
 * the count. A count above FG_MAX_COUNT is split over identical lines, which
 * add up again when read. A root frame whose text starts with '#' has that
 * byte written as '?', so the line cannot pass for metadata. Whatever the
 * profile holds, the output reads back without error.
 *
 * fg_profile_write_folded streams plain text to out (not closed; -SPY_EIO on
 * a write error, name is used in the message); fg_profile_write_folded_gz
 * the same, gzip-compressed, onto out's descriptor. fg_profile_format_folded
 * appends the text to a buffer.
 */
int fg_profile_write_folded(const struct fg_profile *p, FILE *out, const char *name,
			    struct spy_err *err);
int fg_profile_write_folded_gz(const struct fg_profile *p, FILE *out, const char *name,
			       struct spy_err *err);
void fg_profile_format_folded(const struct fg_profile *p, struct spy_buf *out);

/*
 * Append the table as aligned text: one summary line, the whole profile's
 * split by kind ("by kind: 60.0% python, 25.0% native, 15.0% idle"), a
 * header "  total%  self%  cumtime  tottime  python%  native%  idle%
 * function (file:line)" with columns widened to fit, then one row per
 * function. Names are escaped as in folded
 * text, so a hostile name cannot inject terminal control sequences.
 */
void fg_table_render(const struct fg_table *t, struct spy_buf *out);

/*
 * The same renderer with the caller's colours (spy diff colours NEW's
 * frames by their change this way, so there is one renderer).
 * frame_style is called once per frame drawn (synthetic ones included), in
 * a deterministic order, before anything is written. It may set *rgb
 * (0xRRGGBB) to override the frame's colour and append one line of text to
 * note, shown in the frame's tooltip (escaped like every other string); it
 * returns false to keep the frame's usual colour (note is then ignored).
 * legend/nlegend replace the legend (NULL: the frame kinds'). style NULL is
 * fg_profile_write_svg.
 */
struct fg_svg_legend {
	const char *label;
	uint32_t rgb;
};
struct fg_svg_style {
	bool (*frame_style)(void *ctx, const struct fg_frame *fr, uint32_t *rgb,
			    struct spy_buf *note);
	void *ctx;
	const struct fg_svg_legend *legend;
	size_t nlegend;
};
int fg_profile_write_svg_styled(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts,
				const struct fg_svg_style *style, struct spy_err *err);

/* The row of (func, file) (interned pointers), NULL if neither profile has it. */
const struct fg_diff_row *fg_diff_find(const struct fg_diff *d, const char *func, const char *file);

/* The differential flame graph's colour for a self-share delta, scale the largest |delta| (0xRRGGBB). */
uint32_t fg_diff_colour(double delta, double scale);

/* The (stack, count) pairs of window wi (stack: an index into the profile's stacks), in no set order. */
void fg_slices_each(const struct fg_slices *s, size_t wi, void (*fn)(void *ctx, uint32_t stack, uint64_t count),
		    void *ctx);

/*
 * The errors metadata in words for the SVG's and the report's headers:
 * "1 stack cut short, in the start-up" for "1 (truncated 1)" with
 * FG_META_STARTUP saying so (a walk stopped by bad memory or a bound: the
 * stack is kept from its innermost frame, doc/html-report.md); a kind
 * it does not know stays "name n". Nothing when the profile has no errors
 * key. Plain text, for the caller to escape.
 */
void fg_errors_words(const struct fg_profile *p, struct spy_buf *out);

/* A frame's colour in the SVG (0xRRGGBB), and its class there: 0 Python, 1 native, 2 synthetic, 3 idle. */
uint32_t fg_svg_frame_colour(const struct fg_frame *fr, int *cls);

/*
 * The HTML report (html.c, its fixed parts html-script.c). fg_html_text
 * appends str as HTML text or a quoted attribute's value, ASCII only;
 * fg_html_json_string as a JSON string that is safe inside a <script>
 * element ('<', '>', '&' and all non-ASCII as \u escapes). Invalid UTF-8
 * reads as U+FFFD in both. opts: the title (NULL: "spy profile") and
 * whether the graph opens as an icicle.
 */
void fg_html_text(struct spy_buf *b, const char *str);
void fg_html_json_string(struct spy_buf *b, const char *str);
int fg_profile_write_html(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts,
			  struct spy_err *err);
extern const char fg_html_css[], fg_html_body[], fg_html_js[];

/* The windows: how many, and their length in seconds. */
size_t fg_slices_count(const struct fg_slices *s);
double fg_slices_len(const struct fg_slices *s);

/* Count count samples of p's last added stack in the window of t (seconds since the start); fg_profile_add_at calls it. */
void fg_slices_add(struct fg_slices *s, const struct fg_profile *p, double t, uint64_t count);

/*
 * The timeline (for -f chrome): per thread, the samples in time order as
 * runs of one stack over consecutive samples, (stack id, samples, first and
 * last sample time). Memory grows with the number of stack changes, not of
 * samples, and stops at FG_MAX_TIMELINE_RUNS runs (later changes are
 * dropped and counted). A thread is a track, keyed by (pid, tid) and
 * named by the caller (strings borrowed: interned in the profile's table).
 *
 * fg_timeline_add counts one sample of p's last added stack
 * (fg_profile_last_stack; nothing when FG_NONE) for thread tid of process
 * pid, t seconds since the start, samples of one thread coming in time
 * order. It continues the thread's last run when the stack is the same and
 * no sample is missing: t is within 1.75 periods (1 / rate_hz) of the run's
 * last sample. p must not be FG_FUNCTION-merged after the fact: ids are
 * those of p.
 *
 * fg_timeline_walk turns the runs into nested spans, one per frame per
 * stretch of consecutive samples the frame stays on the stack at the same
 * depth under the same callers: a frame continuing across samples is one
 * span even when deeper frames change. A run lasts from its first sample
 * to the next run's first sample when that is contiguous (the rule
 * above), else one period past its last sample. Leading "process ..." and
 * "thread ..." synthetic roots are left out (the track is the thread). fn
 * is called in time order per track, tracks in the order first seen: a
 * begin (begin true) at each span's start, an end at its end, ends
 * innermost first; depth 0 is the outermost frame kept. A nonzero return
 * stops the walk and is returned.
 *
 * fg_timeline_layout builds a timeline from an aggregated profile that has
 * none (a folded file): per (process root, thread root) track, the stacks
 * one after another in folded order, each lasting count periods (rate from
 * "# rate-hz:", else FG_TIMELINE_RATE), which is what speedscope does for
 * folded input. Its pids and tids are 1, 2, ... in order of first
 * appearance, the roots' text being the names.
 */
#define FG_MAX_TIMELINE_RUNS (1u << 22)
#define FG_TIMELINE_RATE 100.0

typedef int (*fg_span_fn)(void *ctx, size_t track, uint32_t frame, uint32_t depth, uint64_t ts_ns,
			  bool begin);

void fg_timeline_add(struct fg_timeline *tl, const struct fg_profile *p, const struct fg_track *th,
		     double t);
struct fg_timeline *fg_timeline_layout(const struct fg_profile *p);
size_t fg_timeline_tracks(const struct fg_timeline *tl);
const struct fg_track *fg_timeline_track(const struct fg_timeline *tl, size_t i);
/* Runs stored, and samples not stored (the run cap). */
size_t fg_timeline_runs(const struct fg_timeline *tl);
uint64_t fg_timeline_dropped(const struct fg_timeline *tl);
int fg_timeline_walk(const struct fg_timeline *tl, const struct fg_profile *p, fg_span_fn fn,
		     void *ctx);

/*
 * Other formats, each one document streamed to f (flushed, not closed;
 * -SPY_EIO on a write error). Deterministic for a given profile. Target
 * strings are escaped for the format, invalid UTF-8 becoming U+FFFD.
 *  - json: metadata, frames (func, file, line, kind), threads and the
 *    distinct stacks as frame ids root first with counts
 *    (doc/json-format.md).
 *  - speedscope: speedscope.app's file format, one "sampled" profile per
 *    thread when stacks carry "thread ..." synthetic roots (those and the
 *    "process ..." root become the profile's name), else one; weights in
 *    seconds when "# rate-hz:" is known, else in samples.
 *  - pprof: gzip-compressed profile.proto for `go tool pprof`: sample types
 *    samples/count and, when the rate is known, wall/nanoseconds; one
 *    location per frame, one function per (func, file); metadata as
 *    comments.
 */
int fg_profile_write_json(const struct fg_profile *p, FILE *f, struct spy_err *err);
int fg_profile_write_speedscope(const struct fg_profile *p, FILE *f, struct spy_err *err);
/* fg_profile_write_pprof is in flamegraph.h: record --push calls it with its options. */
/*
 * chrome: the Trace Event Format (chrome://tracing, Perfetto): a
 * process_name and a thread_name metadata event per track, then nested
 * B/E events, one pair per span of fg_timeline_walk, timestamps in
 * microseconds; "cat" is the frame kind, "args" its file and line; the
 * profile's metadata in "otherData", with "timeline-dropped-samples" when
 * the run cap was hit. tl NULL lays the profile out with
 * fg_timeline_layout.
 */
int fg_profile_write_chrome(const struct fg_profile *p, const struct fg_timeline *tl, FILE *f,
			    struct spy_err *err);

/*
 * Folded text of a frame (fg_frame_format): a Python or native frame is
 * "func (file:line)", or "func (file)" when line is 0; a synthetic frame
 * (the process or thread root) is its func alone. Target strings are hostile:
 * ';' becomes '?' and control characters, bidi controls and invalid UTF-8
 * are made visible by the terminal escaper (common/term.h: "\x1b",
 * "\u202e"), so a frame can neither split into two, break its line nor
 * drive a terminal; other UTF-8 passes through untouched.
 * Reading splits a frame on its last " (" and, inside the parentheses, on
 * the last ':' when what follows is a line number (0..4294967295 written
 * without leading zeros); a frame without " (...)" is synthetic, one with a
 * line is Python, one without is Python if the file ends in ".py" or is in
 * angle brackets (Python's "<frozen site>", "<string>") and native
 * otherwise. A file whose own name ends in ":<digits>" is written with an
 * explicit ":0" when its line is unknown ("f (x:12:0)"), so it cannot be
 * mistaken for line 12. Formatting a parsed frame gives back the same text,
 * except that a redundant ":0" is dropped.
 */

/* Bytes of one frame's folded text the reader accepts: a func and a file of
 * SPY_MAX_STR each plus punctuation. The writer never produces more: it
 * writes at most SPY_MAX_STR bytes of each string (cut at a UTF-8 boundary). */
#define FG_MAX_FRAME (2 * SPY_MAX_STR + 32)
/* Bytes of one line of a folded file: the longest line the writer can
 * produce, FG_MAX_DEPTH frames of FG_MAX_FRAME bytes (~36 MiB; real lines
 * are a few KiB). A file without newlines (a binary mistaken for a profile)
 * stops here instead of eating memory. */
#define FG_MAX_LINE ((size_t)FG_MAX_DEPTH * (FG_MAX_FRAME + 1) + 32)
/* Largest count on one folded line: a year of 1000 Hz sampling on 30 threads
 * is ~10^12; anything bigger is corruption. A stack whose count grew past it
 * (identical lines add up) is written as several lines. */
#define FG_MAX_COUNT 1000000000000ULL

/*
 * The folded reader's rules (fg_profile_read_folded and friends). Folded input, added to what p already holds (so several files merge).
 * Plain or gzip is told by the first two bytes (1f 8b), never by the name;
 * concatenated gzip members are read as one stream. Lines may end in "\n" or
 * "\r\n", the last may lack its newline; empty lines are skipped; a line
 * starting with '#' must be "# key: value" (or "# key:"). A stack line is
 * "frame;frame;... COUNT": split on the last space, COUNT is 1 to 13
 * decimal digits up to FG_MAX_COUNT (0 is accepted and adds nothing), and
 * every frame is non-empty. Identical stacks add up, to at most
 * FG_MAX_TOTAL samples in the profile. Control bytes, lines longer than
 * FG_MAX_LINE, more than FG_MAX_DEPTH frames, frames longer than
 * FG_MAX_FRAME, metadata values longer than FG_MAX_META_VALUE, corrupt or
 * truncated gzip: -SPY_EFORMAT with "NAME:LINE: ...". Never crashes,
 * whatever the bytes.
 *
 * fg_profile_read_folded reads len bytes at data (name is for messages);
 * fg_profile_read_folded_fd reads fd to its end without closing it;
 * fg_profile_load_folded opens path (-SPY_EIO if it cannot).
 */

/*
 * fg_profile_write_svg in full. SVG flame graph: one self-contained file (inline CSS and script, nothing
 * fetched) drawn from the profile's trie, with hover details, click to zoom,
 * search and a header from the metadata (title, command, python, duration,
 * samples, rate, errors). Every target string is escaped, so a hostile name
 * cannot add markup. Deterministic for a given profile. Frames narrower
 * than one pixel of the 1200-pixel graph are not drawn one by one: a node's
 * narrow children are summed into one "merged" block, so the file's size is
 * bounded by the picture (a few MiB at most), not by the number of stacks.
 * Colours: Python frames warm, native cool, by a hash of the file (so a
 * module keeps its colour across runs); synthetic frames grey, or
 * violet-grey when the name starts with "idle", "waiting", "sleeping" or
 * "gil" (any case, optionally after '[' or '<'): name thread-state frames
 * that way to have them stand out. Returns 0 or -SPY_EIO on a write error
 * (f is flushed, not closed).
 */

/*
 * The table in full:
 * The per-function table: what cProfile + pstats sorted by cumtime would show,
 * estimated from samples. A function is a (func, file) pair of a non-synthetic
 * frame; its lines merge.
 *  - self:  samples whose innermost frame is the function;
 *  - total: samples with the function anywhere on the stack, counted once per
 *           stack however deep the recursion;
 *  - self_pct, total_pct: of all samples in the profile;
 *  - tottime, cumtime: self / rate_hz and total / rate_hz seconds, 0 when
 *    the rate is unknown (rendered as "-");
 *  - kind[]: the total samples split by the kind of each sample's stack
 *    (fg_stack_kind: Python, native, idle), so they add up to total;
 *    kind_pct[] of total. The table's own kind[] splits every sample.
 *  - line: the lowest nonzero line seen for the function (0 under -F or when
 *    unknown). Lowest rather than first seen, so the table of a recording and
 *    of its re-read folded file agree; it is also the line nearest the def.
 * Rows are sorted by the chosen key, then total desc, self desc, func, file
 * (bytewise): a total order, so ties never depend on insertion order.
 */

/*
 * The differential profile in full:
 * Differential profile (spy diff): how each function's share of samples
 * changed from BASE to NEW. A function is a (func, file) pair of a
 * non-synthetic frame, lines merged as in the table, so profiles recorded
 * with and without FG_FUNCTION, or on Pythons whose line numbers differ,
 * still compare. Shares are the table's self_pct and total_pct (recursion
 * counted once per stack), each of its own profile's samples, so profiles
 * of different lengths compare; a function absent from one side has share
 * 0 there. Deltas are NEW minus BASE, in percentage points. A function
 * found in one profile only under a qualified name (Klass.meth, as 3.11+
 * records) and in the other only under the bare one (meth, as older
 * Pythons do), alone with that file and bare name, is one function and
 * keeps the qualified name.
 *
 * Both profiles must use the same string table (fg_profile_new with one
 * spy_strtab), since functions are matched by pointer; SPY_BUG otherwise.
 * Rows are sorted by the larger of |total_delta| and |self_delta|, then
 * |total_delta|, func, file: the biggest change first, ties deterministic.
 */

/*
 * The gate in full:
 * The regression gate: a row fails when its total share grew by more than
 * total_pts points (or its self share by more than self_pts), and NEW has
 * at least min_samples samples of it (total or self respectively), so a
 * function seen a handful of times cannot fail a build. A negative
 * threshold is off.
 */

/*
 * The differential flame graph in full:
 * The differential flame graph: cur (the NEW profile the diff was made
 * from) drawn by fg_profile_write_svg_styled, each function's frames
 * coloured by its self-share change, red for grew and blue for shrank, the
 * intensity by the size of the change relative to the largest one; the
 * tooltip gives base and new shares and the deltas. fg_diff_colour is that
 * colour for a delta, scale being the largest |self_delta| (0xRRGGBB).
 */

/*
 * Time windows in full:
 * Time windows (spy record --slice S, spy report --trend): the samples of a
 * profile split into consecutive windows of S seconds, each window holding
 * (stack id, count) pairs for the stacks it saw. Memory is bounded by the
 * pairs stored, at most distinct stacks x windows and at most the samples,
 * and windows are capped at FG_MAX_SLICES: a recording longer than that
 * many windows merges neighbouring windows pairwise and doubles S, so an
 * hour-long recording with --slice 0.1 still fits.
 *
 * In a folded file the windows are metadata lines, which every reader of
 * the folded format already skips or keeps: "# slice-s: S" (the final
 * window length), "# slices: N" (windows), then one "# slice-I: R:C R:C
 * ..." line per non-empty window I, R being the stack's position among
 * the file's stack lines (0 = the first) and C its samples in that window.
 * A window whose list would pass FG_MAX_META_VALUE bytes continues in
 * "# slice-I.1:", "# slice-I.2:", ...
 *
 * fg_slices_add counts count samples of p's last added stack
 * (fg_profile_last_stack) in the window of t seconds since the start (t
 * < 0 counts as 0); it does nothing when that is FG_NONE. fg_slices_store
 * writes the metadata into p (replacing any); fg_slices_load reads it
 * back: 0 with *out NULL when the profile has no windows, -SPY_EFORMAT
 * "NAME: # slice-I: what" when they are malformed or name a stack the
 * profile lacks. p must be read without FG_FUNCTION, which would merge
 * stacks and renumber them.
 */

/*
 * The trend in full:
 * The trend of each function across the windows: its total share of each
 * non-empty window's samples (recursion counted once per stack, as in the
 * table), the least-squares slope of that share against the window index
 * (percentage points per window; each window weighted by its samples, so
 * a last window cut short counts little), the share in the first and last
 * non-empty windows, the mean (weighted the same way: the function's share
 * of all those samples), and r2, the square of the correlation of
 * share with time (1: a straight line, steady; near 0: noise). Rows are sorted by slope, steepest
 * rise first, then func and file; top keeps the first top rows (0: all).
 * One more row, func "[gc]" and file NULL, is the share of the samples
 * whose stack holds the synthetic FG_GC_FRAME, computed the same way; it
 * is there when the profile sampled the collector (# gc: sampled, even if
 * it never caught one) or holds such a frame.
 */

/*
 * The profile in full.
 * struct fg_profile (opaque, fg_profile_new/fg_profile_free) holds:
 *  - metadata: an ordered list of "key: value" pairs, the documented keys
 *    first in cli.md's order, then any others in the order they were set;
 *  - frames: each distinct (func, file, line, kind) gets a small integer id;
 *  - stacks: each distinct sequence of frame ids, root first, with the
 *    number of samples that had exactly that stack.
 * The trie of stacks (root first, each node with self and total counts)
 * that renderers want is a view built from the stacks on demand:
 * struct fg_tree, with children already in output order.
 *
 * Invariants and contracts:
 *  - Strings are compared by pointer. Every func and file handed to
 *    fg_profile_add() must be interned in the profile's string table
 *    (fg_profile_strtab()); that is the session's table when one was given
 *    to fg_profile_new(). Strings read from a folded file are interned there
 *    too. They live as long as that table.
 *  - Memory grows with the number of distinct frames and distinct stacks,
 *    never with the number of samples: adding a stack already seen does no
 *    allocation and costs O(depth) (one frame look-up per frame, then one
 *    look-up of the whole stack).
 *  - Output is deterministic: stacks are visited depth-first with children
 *    in the byte order of their folded text, so the same profile always
 *    writes the same bytes, whatever order the samples came in.
 *  - With FG_FUNCTION every frame's line is set to 0 when it enters the
 *    profile (by fg_profile_add or by reading), so frames of one function
 *    merge. A caller who wants py-spy's "function's first line" instead
 *    passes that line in the frames and does not set FG_FUNCTION.
 */

/* Samples in one profile, all stacks together: far beyond any recording,
 * and far enough below 2^64 that no count in a profile can overflow. Adding
 * or reading past it is refused (-SPY_EBOUND / -SPY_EFORMAT). */
#define FG_MAX_TOTAL 1000000000000000000ULL
/* Bytes of a metadata value (a long command line is cut, not rejected). */
#define FG_MAX_META_VALUE 8192
/* Bytes of a metadata key. */
#define FG_MAX_META_KEY 64
/* Distinct stacks by default (ids are 32-bit); see fg_profile_limit_stacks. */
#define FG_MAX_STACKS (UINT32_MAX - 1)
/*
 * Memory one read of a folded file may add to a profile (new names,
 * frames and stacks), by default; see fg_profile_limit_read. A 40 MB .gz
 * can inflate to millions of distinct deep stacks: gigabytes.
 */
#define FG_MAX_READ_BYTES ((size_t)1 << 30)


/*
 * Source lines in full (source.c). The store maps (file, line) to text;
 * file is interned in the profile's table, as frames' files are, so a
 * frame finds its line by pointer. Bounds: FG_MAX_SOURCE_LINES lines and
 * FG_MAX_SOURCE_BYTES bytes of text in a profile (past them a line is not
 * kept: fg_profile_source_set returns false), FG_MAX_SOURCE_TEXT bytes per
 * line (cut at a code point, after escaping). The first text kept for a
 * (file, line) stays.
 *
 * Source lines in a folded file: after the other metadata,
 *   # source-file: ID PATH
 *   # source-line: ID:LINE TEXT
 * ID a decimal below FG_MAX_SOURCE_FILES naming PATH (escaped as a frame's
 * file is, so it is the very string the stack lines give) for the lines
 * that follow, LINE 1..4294967295, TEXT the stored text (may be empty).
 * Files are written sorted by path, lines by number, ids from 0. IDs are
 * local to one file: merging profiles renumbers nothing. A malformed line,
 * or one naming an id no source-file line gave, is -SPY_EFORMAT. Readers
 * that predate them take both for ordinary metadata (one key repeated:
 * the last value stays).
 *
 * The def line (fg_source_def_line): scanning up from line at most
 * FG_SOURCE_DEF_SCAN lines, the first "def NAME" or "async def NAME"
 * (NAME: the last dotted part of func), stopping at module-level code when
 * line is indented; 0 when not found or func is "<...>". get gives a
 * line's text (NULL when unknown). Capture and the lines view use the same
 * rule, one on the file, the other on the kept lines.
 */
#define FG_META_SOURCE_FILE "source-file"
#define FG_META_SOURCE_LINE "source-line"
#define FG_MAX_SOURCE_LINES 65536
#define FG_MAX_SOURCE_BYTES ((size_t)4 << 20)
#define FG_MAX_SOURCE_TEXT 512
#define FG_MAX_SOURCE_FILES 65536
/* Lines kept either side of a sampled line. */
#define FG_SOURCE_CONTEXT 3
#define FG_SOURCE_DEF_SCAN 200

struct fg_source;
struct fg_source_ids {
	const char **file;   /* by id; NULL: not named yet */
	size_t n, alloc;
};

typedef const char *(*fg_line_fn)(void *ctx, uint32_t line, size_t *len);
uint32_t fg_source_def_line(const char *func, uint32_t line, fg_line_fn get, void *ctx);
size_t fg_profile_source_count(const struct fg_profile *p);
void fg_source_free(struct fg_source *s);
/* Append the folded lines of p's store (nothing when empty). */
void fg_source_emit(const struct fg_profile *p, struct spy_buf *out);
/*
 * A metadata line read (key, value of vlen bytes): 1 when it was a source
 * line and is kept, 0 when key is another key, -1 with *why when malformed.
 */
int fg_source_parse(struct fg_profile *p, struct fg_source_ids *ids, const char *key, const char *v,
		    size_t vlen, const char **why);

/* No frame / no node (the root's parent and frame). */
#define FG_NONE UINT32_MAX


/* The table strings must be interned in; borrowed, lives with the profile. */
struct spy_strtab *fg_profile_strtab(struct fg_profile *p);
unsigned fg_profile_flags(const struct fg_profile *p);

/*
 * fg_profile_add in full. Add count samples of stack s, ordered innermost frame first as walked.
 * The stack is copied if new; s is not kept. Frames deeper than
 * FG_MAX_DEPTH are cut (innermost side) and counted in fg_stats.truncated.
 * An empty stack, or count == 0, adds nothing; the former is counted in
 * fg_stats.dropped. Returns 0, or -SPY_EBOUND when the stack is new and the
 * limit of distinct stacks is reached, or when the profile would exceed
 * FG_MAX_TOTAL samples (the samples are dropped and counted). Never
 * allocates when the stack is already in the profile.
 */

/*
 * Metadata in full. Keys are 1..FG_MAX_META_KEY bytes of [A-Za-z0-9._-]; any other
 * key is a bug in the caller (SPY_BUG). Values are copied through the
 * terminal escaper (common/term.h) and cut to FG_MAX_META_VALUE bytes at a
 * unit boundary, so what is stored is exactly what a folded file round-trips.
 * value NULL removes the key. fg_profile_meta_get returns NULL when unset;
 * the pointer is valid until that key is set again.
 */

/*
 * Cap the number of distinct stacks, for callers that bound memory; known
 * stacks still count once the cap is reached. Default FG_MAX_STACKS.
 */

/*
 * Frames per stack kept by fg_profile_add and accepted by the reader: every
 * stack spy records (SPY_MAX_PY_DEPTH Python frames spliced with up to
 * SPY_MAX_NATIVE_DEPTH native ones, plus the process and thread roots) fits.
 * Deeper stacks keep their root-most frames and are counted as truncated.
 */


struct fg_meta_ent {
	char *key;
	char *value;
	int rank; /* position of a documented key, or FG_META_OTHER */
};

#define FG_META_OTHER 1000

/* One distinct stack: depth frame ids at pool[off], root first. */
struct fg_stack_ent {
	uint64_t count;
	size_t off;
	uint32_t depth;
};

struct fg_profile {
	unsigned flags;
	struct spy_strtab *strtab;    /* == &own_strtab unless borrowed */
	struct spy_strtab own_strtab;

	struct fg_meta_ent *meta;
	size_t nmeta, meta_alloc;

	/* Frames by id, and their index by frame_hash. */
	struct fg_frame *frames;
	size_t nframes, frames_alloc;
	struct spy_hmap frame_index;

	/* Distinct stacks, their index by path_hash, and their frames. */
	struct fg_stack_ent *stacks;
	size_t nstacks, stacks_alloc, max_stacks;
	size_t max_read;       /* fg_profile_limit_read */
	struct spy_hmap stack_index; /* path_hash -> index into stacks */
	uint32_t *pool;
	size_t npool, pool_alloc;

	struct fg_source *source;    /* kept source lines; NULL: none */

	/* Scratch for fg_profile_add, reused so adding allocates nothing. */
	uint32_t *ids;
	size_t ids_alloc;
	/* The frames ids[] were interned from, as the last add was given
	 * them (leaf first), in the last nlast of last_alloc slots: a sampler
	 * adds much the same deep stack every time, and a frame equal to the
	 * one at its depth from the root last time keeps its id without a
	 * lookup. Aligned at the end, so that the root sides of two stacks
	 * of different depths line up for memcmp, and an add copies only
	 * the frames above what it kept. */
	struct spy_frame *last;
	size_t nlast, last_alloc;
	/* path_hash's state after ids[0..k] of the last add: a stack that
	 * kept its root side hashes only the frames above what it kept. */
	uint64_t *last_h;
	size_t last_h_alloc;
	/* fg_profile_add_known's frame ids. */
	uint32_t *known_ids;
	size_t known_alloc;
	size_t names;         /* fg_stats.names */

	uint64_t samples, dropped, truncated;
	/* Index of the stack the last add counted, FG_NONE if it counted none
	 * (fg_profile_last_stack, for the time windows of slices.c). */
	uint32_t last_stack;
	/* The stack the last fg_profile_add counted, FG_NONE if none: while
	 * ids and last stay as they were, the same path is that stack, with
	 * no hash or compare of its ids. */
	uint32_t same_stack;
	struct fg_labels *labels;    /* labels.c; NULL until a sample carries one */
};

/*
 * Intern a frame (applying FG_FUNCTION and the synthetic normalisation);
 * func and file must already be in p->strtab. Returns its id.
 */
uint32_t fg_intern_frame(struct fg_profile *p, const char *func, const char *file,
			 uint32_t line, uint8_t kind);
/*
 * Add count samples of the stack ids[0..n), root first, 1 <= n <=
 * FG_MAX_DEPTH. Returns 0 or -SPY_EBOUND (stack or sample limit; nothing
 * changed, counted as dropped).
 */
int fg_add_path(struct fg_profile *p, const uint32_t *ids, size_t n, uint64_t count);

/*
 * The functions of a profile, as the table counts them (table.c): frame id
 * -> function id in fmap (FG_NONE for synthetic frames), and each
 * function's func and file, interned. For the table and the trend alike.
 */
struct fg_funcs {
	uint32_t *fmap;
	const char **func, **file;
	size_t n;
};

void fg_funcs_init(struct fg_funcs *fs, const struct fg_profile *p);
void fg_funcs_release(struct fg_funcs *fs);

/*
 * Append s as common/term.h escapes it for a terminal, ';' replaced by '?',
 * at most SPY_MAX_STR bytes (the one folded escaper; table, diff and top
 * print names through it too).
 */
void fg_escape(struct spy_buf *out, const char *s);

/*
 * The output order: every frame's folded text (frame f is
 * texts.buf[text_off[f] .. text_off[f + 1])) and the distinct stacks sorted
 * by their frames' texts, root first, a stack before the ones it prefixes.
 * That is the depth-first order of the trie with children sorted by text.
 */
struct fg_order {
	struct spy_buf texts;
	size_t *text_off;
	uint32_t *stack;   /* nstacks indices into p->stacks */
};

void fg_order_init(struct fg_order *o, const struct fg_profile *p);
void fg_order_release(struct fg_order *o);

/* fg_profile_foreach_stack over an order already built. */
int fg_order_foreach_stack(const struct fg_order *o, const struct fg_profile *p,
			   fg_stack_fn fn, void *ctx);

/*
 * Helpers of the JSON-based writers (json.c). fg_utf8_decode reads one code
 * point of s[0..n), n >= 1: returns the bytes used and sets *cp, or U+FFFD
 * for a maximal invalid subpart (1 to 3 bytes). fg_json_string appends str
 * as a quoted JSON string (the one JSON escaper: common/json.c). fg_flush
 * writes b to f when it holds 64 KiB or more, or always with force (then
 * fflush too); -SPY_EIO "writing the WHAT: strerror" on error. fg_kind_name: "python", "native" or
 * "synthetic". fg_frame_is_root: a synthetic frame whose name starts with
 * prefix ("process ", "thread ").
 */
static inline size_t fg_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	return spy_utf8_decode(s, n, cp);
}
static inline void fg_json_string(struct spy_buf *out, const char *str)
{
	spy_json_string(out, str);
}
int fg_flush(struct spy_buf *b, FILE *f, bool force, const char *what,
	     struct spy_err *err);
const char *fg_kind_name(uint8_t kind);
bool fg_frame_is_root(const struct fg_frame *f, const char *prefix);
/*
 * fg_frame_is_state: a synthetic frame naming a thread state, not code: it
 * starts, ignoring case, with "idle", "waiting", "sleeping" or "gil", bare
 * or after '[' or '<' (record -i's "idle", "waiting for the GIL",
 * "[idle]"). The SVG colours those violet-grey and the kind split counts
 * them idle.
 *
 * fg_stack_kind: the kind of the samples of one stack (ids root first),
 * from its innermost frame outwards: a thread-state frame makes it idle,
 * a native frame native, a Python frame Python; other synthetic frames
 * (<GC>, the roots) are looked through. A stack of roots alone counts as
 * Python (a hand-made folded file; record never keeps one).
 */
bool fg_frame_is_state(const struct fg_frame *f);
enum fg_kind fg_stack_kind(const struct fg_profile *p, const uint32_t *ids, size_t depth);

#endif
