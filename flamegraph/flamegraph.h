/*
 * flamegraph: aggregating stacks into a profile, the folded format in and
 * out (plain or gzip), the per-function cumtime table, and the output
 * formats (svg, json, speedscope, pprof). It knows nothing
 * of processes: its input is spy_stacks whose strings are already interned,
 * or a folded file.
 *
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
 *
 * Folded text of a frame (fg_frame_format): a Python or native frame is
 * "func (file:line)", or "func (file)" when line is 0; a synthetic frame
 * (the process or thread root) is its func alone. Target strings are hostile:
 * ';' and control bytes (< 0x20, 0x7f) become '?', so a frame can neither
 * split into two nor break its line. Bytes >= 0x80 pass through untouched.
 * Reading splits a frame on its last " (" and, inside the parentheses, on
 * the last ':' when what follows is a line number (0..4294967295 written
 * without leading zeros); a frame without " (...)" is synthetic, one with a
 * line is Python, one without is Python if the file ends in ".py" and native
 * otherwise. A file whose own name ends in ":<digits>" is written with an
 * explicit ":0" when its line is unknown ("f (x:12:0)"), so it cannot be
 * mistaken for line 12. Formatting a parsed frame gives back the same text,
 * except that a redundant ":0" is dropped.
 *
 * Errors: functions that can fail return 0 or -SPY_E* and take
 * struct spy_err *err last (NULL allowed). Reading reports malformed input as
 * -SPY_EFORMAT with "NAME:LINE: what is wrong"; I/O failures are -SPY_EIO
 * with the path and strerror. After a failed read the profile holds what was
 * read before the bad line; callers normally discard it.
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

/* No frame / no node (the root's parent and frame). */
#define FG_NONE UINT32_MAX

/*
 * Frames per stack kept by fg_profile_add and accepted by the reader: every
 * stack spy records (SPY_MAX_PY_DEPTH Python frames spliced with up to
 * SPY_MAX_NATIVE_DEPTH native ones, plus the process and thread roots) fits.
 * Deeper stacks keep their root-most frames and are counted as truncated.
 */
#define FG_MAX_DEPTH (SPY_MAX_PY_DEPTH + SPY_MAX_NATIVE_DEPTH + 16)
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

/* The documented metadata keys (cli.md, "Files"), in the order written. */
#define FG_META_SPY_VERSION "spy-version"
#define FG_META_PID "pid"
#define FG_META_PYTHON "python"
#define FG_META_RATE_HZ "rate-hz"
#define FG_META_DURATION_S "duration-s"
#define FG_META_SAMPLES "samples"
#define FG_META_ERRORS "errors"
#define FG_META_COMMAND "command"

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
};

struct fg_profile;

/*
 * A new empty profile. strtab is borrowed (the session's table, which must
 * outlive the profile); NULL makes the profile own a table of its own, which
 * is what report does when it reads a file. flags: enum fg_flags.
 */
struct fg_profile *fg_profile_new(struct spy_strtab *strtab, unsigned flags);
/* Frees everything, including an owned string table. NULL is a no-op. */
void fg_profile_free(struct fg_profile *p);
/* The table strings must be interned in; borrowed, lives with the profile. */
struct spy_strtab *fg_profile_strtab(struct fg_profile *p);
unsigned fg_profile_flags(const struct fg_profile *p);

/*
 * Add count samples of stack s, ordered innermost frame first as walked.
 * The stack is copied if new; s is not kept. Frames deeper than
 * FG_MAX_DEPTH are cut (innermost side) and counted in fg_stats.truncated.
 * An empty stack, or count == 0, adds nothing; the former is counted in
 * fg_stats.dropped. Returns 0, or -SPY_EBOUND when the stack is new and the
 * limit of distinct stacks is reached, or when the profile would exceed
 * FG_MAX_TOTAL samples (the samples are dropped and counted). Never
 * allocates when the stack is already in the profile.
 */
int fg_profile_add(struct fg_profile *p, const struct spy_stack *s, uint64_t count);

/*
 * Cap the number of distinct stacks, for callers that bound memory; known
 * stacks still count once the cap is reached. Default FG_MAX_STACKS.
 */
void fg_profile_limit_stacks(struct fg_profile *p, size_t max_stacks);

void fg_profile_stats(const struct fg_profile *p, struct fg_stats *st);

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

/*
 * Metadata. Keys are 1..FG_MAX_META_KEY bytes of [A-Za-z0-9._-]; any other
 * key is a bug in the caller (SPY_BUG). Values are copied; control bytes are
 * replaced by '?' and values longer than FG_MAX_META_VALUE are cut at a UTF-8
 * boundary, so what is stored is exactly what a folded file round-trips.
 * value NULL removes the key. fg_profile_meta_get returns NULL when unset;
 * the pointer is valid until that key is set again.
 */
void fg_profile_meta_set(struct fg_profile *p, const char *key, const char *value);
void fg_profile_meta_setf(struct fg_profile *p, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
const char *fg_profile_meta_get(const struct fg_profile *p, const char *key);
/* Entries in written order: documented keys first, then the others as set. */
size_t fg_profile_meta_count(const struct fg_profile *p);
void fg_profile_meta_at(const struct fg_profile *p, size_t i, const char **key, const char **value);
/* True if key is a syntactically valid metadata key. */
bool fg_meta_key_valid(const char *key, size_t len);

/* Append the folded text of f to out (see the top of this file). */
void fg_frame_format(const struct fg_frame *f, struct spy_buf *out);

/*
 * Folded output: metadata lines "# key: value", then one line per distinct
 * stack in fg_profile_foreach_stack order: frames joined by ';', a space,
 * the count. A count above FG_MAX_COUNT is split over identical lines, which
 * add up again when read. A root frame whose text starts with '#' has that
 * byte written as '?', so the line cannot pass for metadata. Whatever the
 * profile holds, the output reads back without error.
 *
 * fg_profile_write_folded streams plain text to out (not closed; -SPY_EIO on
 * a write error, name is used in the message). fg_profile_format_folded
 * appends the same text to a buffer.
 *
 * fg_profile_save_folded writes to path atomically: a temporary file in the
 * same directory, fsync, rename over path; on failure path is untouched and
 * the temporary is removed. A symlink is followed (its target is replaced,
 * the link kept); an existing path that is not a regular file (/dev/stdout,
 * a FIFO) is written in place instead. A path ending in ".gz" is
 * gzip-compressed.
 */
int fg_profile_write_folded(const struct fg_profile *p, FILE *out, const char *name,
			    struct spy_err *err);
void fg_profile_format_folded(const struct fg_profile *p, struct spy_buf *out);
int fg_profile_save_folded(const struct fg_profile *p, const char *path, struct spy_err *err);

/*
 * Folded input, added to what p already holds (so several files merge).
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
int fg_profile_read_folded(struct fg_profile *p, const void *data, size_t len,
			   const char *name, struct spy_err *err);
int fg_profile_read_folded_fd(struct fg_profile *p, int fd, const char *name,
			      struct spy_err *err);
int fg_profile_load_folded(struct fg_profile *p, const char *path, struct spy_err *err);

/*
 * The per-function table: what cProfile + pstats sorted by cumtime would show,
 * estimated from samples. A function is a (func, file) pair of a non-synthetic
 * frame; its lines merge.
 *  - self:  samples whose innermost frame is the function;
 *  - total: samples with the function anywhere on the stack, counted once per
 *           stack however deep the recursion;
 *  - self_pct, total_pct: of all samples in the profile;
 *  - tottime, cumtime: self / rate_hz and total / rate_hz seconds, 0 when
 *    the rate is unknown (rendered as "-");
 *  - line: the lowest nonzero line seen for the function (0 under -F or when
 *    unknown). Lowest rather than first seen, so the table of a recording and
 *    of its re-read folded file agree; it is also the line nearest the def.
 * Rows are sorted by the chosen key, then total desc, self desc, func, file
 * (bytewise): a total order, so ties never depend on insertion order.
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
};

struct fg_row {
	const char *func, *file;  /* borrowed from the profile's string table */
	uint32_t line;
	uint64_t self, total;
	double self_pct, total_pct;
	double tottime, cumtime;
};

struct fg_table {
	struct fg_row *rows;
	size_t n;          /* rows kept (after top) */
	size_t nfuncs;     /* functions in the profile (before top) */
	uint64_t samples;  /* the percentages' denominator */
	double rate_hz;    /* 0 when unknown */
	enum fg_sort sort;
};

#define FG_TABLE_OPTS_INIT { FG_SORT_CUMTIME, 0, 0.0 }

/* Parse "cumtime", "tottime" or "name"; false otherwise. */
bool fg_sort_parse(const char *name, enum fg_sort *out);
/*
 * Fill caller-owned t from p (o NULL: the defaults). O(frames stored), no
 * trie needed. t's strings are borrowed from p's string table.
 */
void fg_table_init(struct fg_table *t, const struct fg_profile *p, const struct fg_table_opts *o);
void fg_table_release(struct fg_table *t);
/*
 * Append the table as aligned text: one summary line, a header
 * "  total%  self%  cumtime  tottime  function (file:line)" with columns
 * widened to fit, then one row per function. Names are escaped as in folded
 * text, so a hostile name cannot inject terminal control sequences.
 */
void fg_table_render(const struct fg_table *t, struct spy_buf *out);

/*
 * SVG flame graph: one self-contained file (inline CSS and script, nothing
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
struct fg_svg_opts {
	const char *title;   /* NULL: "spy flame graph" */
	bool inverted;       /* icicle: root at the top */
};
int fg_profile_write_svg(const struct fg_profile *p, FILE *f, const struct fg_svg_opts *opts, struct spy_err *err);

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
int fg_profile_write_pprof(const struct fg_profile *p, FILE *f, struct spy_err *err);

#endif
