/*
 * pystate's private types: struct pyrt and the code-object cache. Unit tests
 * may include this to look inside; nothing outside pystate/ and tests/ may.
 */
#ifndef SPY_PYSTATE_INTERNAL_H
#define SPY_PYSTATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bounds.h"
#include "common/hashmap.h"
#include "common/mem.h"
#include "common/sample.h"
#include "common/strtab.h"
#include "pystate/linetable.h"
#include "pystate/offsets.h"
#include "pystate/pystate.h"

/* Code-cache slots: enough for the hot code of a big program, bounded so
 * a target churning through lambdas cannot grow us. Power of two. The
 * table starts at PYCODE_CACHE_MIN slots and doubles on the first eviction
 * at each size (code.c), so a short-lived pyrt (dump, a fuzz input) does
 * not pay for 4096 entries it never fills. */
#define PYCODE_CACHE_SLOTS 4096
#define PYCODE_CACHE_MIN 64
/* Line-table bytes the cache may hold in all: slots x SPY_MAX_LINETABLE
 * would be 4 GiB. Past it a code object is cached without its table (its
 * frames show no line). Real tables are a few hundred bytes. */
#define PYCODE_TAB_BUDGET ((size_t)64 << 20)

/* A dict's header words from ma_used on (names_moved): used count, version, keys, values. */
#define PYRT_DICT_SIG_WORDS 4

/* Threads whose names are remembered: twice SPY_MAX_THREADS, because
 * ended threads stay until the next full scan, which comes early when the
 * threads at hand might not fit beside them. */
#define PYRT_NAME_MAX (2 * SPY_MAX_THREADS)
/* Addresses one linked walk remembers (pyrt_seen): more than a stack's
 * SPY_MAX_PY_DEPTH frames or a list's SPY_MAX_THREADS thread states. */
#define PYRT_SEEN_MAX 8192
/* A walk's first PYRT_SEEN_SCAN addresses are kept in seen_log alone, with
 * a PYRT_SEEN_BITS-bit filter in front: only a filter hit scans the log.
 * Past that, the hash map holds them all (a walk's cost stays linear). */
#define PYRT_SEEN_SCAN 256
#define PYRT_SEEN_BITS 4096

/*
 * A round of walks (pyrt_round): the thread states walked since the clock
 * last moved, open-addressed; a round of more than half as many threads
 * ends early. 32 bits of each: two thread states alike in them, or a clock
 * come round again, only end a round early (entries expire sooner), and a
 * process's table stays 4 KiB.
 */
#define PYRT_ROUND_SLOTS 512
struct pyrt_round_slot {
	uint32_t tstate;          /* a fold of its address */
	uint32_t clock;           /* the round it was walked in: a slot of another is free */
};

/* The threads' last walks a pyrt keeps (splice.c), and the most bytes one spans. */
#define PYSPLICE_THREADS 4
#define PYSPLICE_MAX_BYTES (64u * 1024u)
#define PYSPLICE_SHIM_SPAN 128u
/*
 * A shim a walk passed (3.12+: the entry frame of an eval-loop call, on the
 * C stack, outside the data stack's bytes): its bytes as decoded, and how
 * many frames of the run were pushed before it.
 */
struct pysplice_shim {
	spy_addr_t addr;
	size_t idx;
	bool anchor;              /* it began a group (pyrt_stack_anchors) */
	unsigned char bytes[PYSPLICE_SHIM_SPAN];
};
/* One thread's last walk: the frames of its bottom run, and the bytes they lie in. */
struct pysplice_rec {
	spy_addr_t tstate;        /* 0: empty */
	uint64_t stamp;           /* rt->clock when its oldest frame was decoded (the memo's clock) */
	uint64_t used;            /* rt->walks when last walked, for replacement */
	spy_addr_t lo, hi;        /* the bytes [lo, hi) are snap */
	unsigned char *snap;
	size_t snap_alloc;
	spy_addr_t *addr;         /* the frames pushed, innermost first, and where they are */
	struct spy_frame *fr;
	size_t n, addr_alloc, fr_alloc;
	struct pysplice_shim *shims;
	size_t nshims, shims_alloc;
};

/* Largest fixed part of a struct we copy in one read (PyCodeObject,
 * _PyInterpreterFrame, the PyThreadState fields we use, PyFrameObject). */
#define PYRT_MAX_SPAN 0x400

/* What we keep per code object: everything the line lookup and the frame
 * need, so steady-state samples re-read only the fixed header. */
struct pycode {
	spy_addr_t addr;          /* 0: empty slot */
	/* fingerprint, re-checked against each sample's header read */
	spy_addr_t type, name_ptr;
	int32_t firstlineno;
	/* 3.11+: code units (ob_size) and _co_firsttraceable, as of the last header read */
	int64_t nunits;
	int32_t firsttraceable;
	const char *func, *file;  /* interned */
	uint8_t *tab;             /* line table bytes (owned) */
	size_t tab_len, tab_alloc;
	/* The last lookup's line and the addresses sharing it: a hot frame
	 * loops over a few lines' instructions. Empty (lo = hi) when reset. */
	struct pyline_span memo;
	int32_t memo_line;
};

struct pyrt;
typedef int (*pyrt_walk_fn)(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out);
typedef spy_addr_t (*pyrt_gil_fn)(struct pyrt *rt, spy_addr_t interp);

struct pyrt {
	const struct spy_mem *mem;
	struct spy_strtab *strs;
	/* The row for the target's version, refined by _Py_DebugOffsets (3.13+). */
	struct pyoffsets off;
	uint32_t version;
	char version_str[24];
	const char *version_source; /* "_Py_DebugOffsets", "Py_Version", "sys.version", "file name" */
	spy_addr_t runtime;         /* _PyRuntime, 0 for 2.7/3.6 */
	spy_addr_t interp_head_var; /* 2.7/3.6: the interp_head pointer variable */
	spy_addr_t interp_fixed;    /* found with no variable to re-read (_PyThreadState_Current) */
	const char *interp_source;  /* the ladder rung that found it, for the debug log */
	spy_addr_t tstate_current;  /* 2.7/3.6: _PyThreadState_Current */
	/* 2.7/3.6: the GIL's statics, from the hints (pyrt_gil_ranges). */
	spy_addr_t gil_static[4];
	uint32_t gil_static_size[4];
	spy_addr_t gil_lock_ptr;
	uint32_t gil_lock_size;
	int32_t pid;

	/* Strategies, picked once from the row's models. */
	pyrt_walk_fn walk;
	pyrt_gil_fn gil_holder;

	/* Struct spans: the bytes from a struct's start through its last field we use. */
	size_t tstate_span, frame_span, code_span;

	/* Type objects learned on first sight (tp_name check), then compared by address. */
	spy_addr_t code_type, str_type, bytes_type;

	/* pthread tid offset for versions without native_thread_id: 0 unknown. */
	uint32_t tid_off;
	bool tid_tried;

	struct pycode *cache;       /* cache_slots entries, allocated on first use */
	size_t cache_slots;         /* PYCODE_CACHE_MIN .. PYCODE_CACHE_SLOTS */
	uint64_t cache_hits, cache_misses;
	size_t tab_bytes;           /* line tables held by the cache (PYCODE_TAB_BUDGET) */
	uint64_t tab_over_budget;   /* tables dropped for it */

	/* Decoded frames by address (walk.c, pyframe_memo); allocated on first use. */
	unsigned char *memo;        /* PYFRAME_MEMO_WAYS x PYFRAME_MEMO_SETS entries of memo_stride bytes */
	size_t memo_stride;
	uint64_t walks;             /* stacks walked so far */
	/* The memo's clock: rounds of walks (pyrt_round), and the current round's threads. */
	uint64_t clock;
	struct pyrt_round_slot round[PYRT_ROUND_SLOTS];
	size_t round_n;
	uint64_t memo_hits, memo_misses;
	/* The threads' last walks (splice.c). */
	struct pysplice_rec splice[PYSPLICE_THREADS];
	uint64_t splice_evicted;  /* rt->clock when a record last went to another thread */
	struct pysplice_shim *splice_shims; /* the shims of the walk under way */
	size_t splice_shims_alloc;
	uint64_t splice_hits;

	/* The current walk's addresses, see pyrt_seen(): all in seen_log,
	 * in the order seen; the first seen_indexed of them in the filter, or
	 * in seen (the map) once seen_map is set. */
	uint64_t seen_filter[PYRT_SEEN_BITS / 64];
	struct spy_hmap seen;
	bool seen_map;
	spy_addr_t seen_log[PYRT_SEEN_MAX];
	size_t seen_n, seen_indexed;

	/* Frame addresses of the last pyrt_stack(), parallel to its frames
	 * (at most SPY_MAX_PY_DEPTH), for locals; kept from the first on. */
	spy_addr_t *frames;
	size_t nframes, frames_alloc;
	bool keep_frames;
	/* The entry frames of the last pyrt_stack() (3.12+), see pyrt_stack_anchors. */
	spy_addr_t *anchors;
	size_t nanchors, anchors_alloc;
	/* tp_name of types seen by pyrt_frame_locals (locals.c), by address. */
	struct pytype_memo {
		spy_addr_t type;
		uint8_t kind;
		const char *name;
	} types[32];
	size_t ntypes;

	struct py_thread *tmp;      /* pyrt_threads scratch, reused */
	size_t tmp_alloc;
	struct pynest_key { int32_t tid; uint32_t at; } *nest; /* nest_threads' scratch */
	size_t nest_alloc;
	struct spy_stack outer_stack; /* pyrt_stack's scratch for an outer thread state */

	const char *unknown;        /* interned "<unknown>" */

	/* Thread names (names.c): what threading called each thread, by
	 * (ident, tstate); name NULL is a lookup that found none. */
	struct pyname_ent {
		uint64_t ident;
		spy_addr_t tstate;
		const char *name;
		uint32_t gen;       /* names_gen of the pass that set it */
	} *names;
	size_t nnames, names_alloc;
	struct spy_hmap name_index; /* name_key(ident, tstate) -> index into names */
	uint32_t names_gen;
	uint64_t names_scanned_ns;  /* when the last finished pass started */
	uint64_t names_scans;       /* passes over threading._active started (debug log, tests) */
	uint64_t names_reads;       /* remote reads they made (pyrt_names_reads) */
	spy_addr_t names_key;       /* the str "_name" last matched, compared by address; 0 = read keys */
	bool names_cut;             /* a list was longer than its bound: some names may be missing */
	/* The pass under way (namescan.c): where it stopped, to go on from there. */
	struct pyname_pass {
		bool on;
		uint32_t gen;               /* names_gen of its names */
		uint64_t started_ns;
		spy_addr_t interp[8];       /* the interpreters whose threading it reads */
		size_t ninterp, at;         /* ... and the one it is at */
		size_t entry;               /* the next entry of that one's _active */
		spy_addr_t obj;             /* that entry's Thread, when its attributes are being read */
		uint64_t ident;             /* ... its ident */
		size_t obj_entry;           /* ... the next attribute */
		size_t key_reads;           /* ... keys read as strings so far */
		uint32_t found;
		spy_addr_t known_interp[8]; /* threading._active found, by interpreter */
		spy_addr_t known_active[8];
		size_t nknown;
		/*
		 * threading not in sys.modules when last looked: sys.modules
		 * then (where, its entries' array, how many in use or
		 * deleted, how many in use), and the passes since that took
		 * it for unchanged.
		 */
		spy_addr_t miss_interp, miss_modules, miss_entries;
		uint64_t miss_n, miss_used;
		unsigned miss_skips;
		/*
		 * Per interp[]: where a change may name a thread the pass left
		 * unnamed (the header of threading._active, of threading's
		 * dict while it is imported, of sys.modules while threading is
		 * not there, or the interpreter's sys.modules slot while that
		 * is NULL), and those watch_len bytes when the pass read them.
		 */
		spy_addr_t watch[8];
		uint32_t watch_len[8];
		bool failed;                /* a read of threading's dicts or of a Thread failed */
		unsigned retries;           /* failed passes in a row, each rerun at the next tick */
		uint64_t watch_sig[8][PYRT_DICT_SIG_WORDS];
	} names_pass;

	/* dump --locals (locals.c): remote reads allowed in all (0: no bound), and made. */
	size_t locals_budget, locals_reads;

	struct pyrt_async *async;   /* asyncio (tasks.c), allocated on first use */
	struct pyrt_spans *spans;   /* OpenTelemetry spans (spans.c), allocated on first use */

	/* asyncio before 3.14 (tasks-legacy.c): types learned by tp_name, and
	 * asyncio.tasks._current_tasks of aio_interp, looked up once (after a
	 * failed lookup, again only every PYAIO_RETRY calls). */
	spy_addr_t aio_task_type, aio_coro_type, aio_gather_type, aio_dict_type;
	bool aio_layout_bad;        /* _asyncio.Task's tp_basicsize is not the row's */
	spy_addr_t aio_interp, aio_current_tasks;
	uint32_t aio_retry;
};

/*
 * Scans of the writable data (scan.c). The range comes from section
 * headers; a corrupt ELF can make it any size, and libpython's .data+.bss
 * is ~0.5-2 MiB (3.12: 1.6 MiB), a static python's a few MiB.
 */
#define PYRT_SCAN_MAX (32u << 20)
/* One read per chunk: big enough that a scan is a few dozen reads. */
#define PYRT_SCAN_CHUNK (64u << 10)
/* PY_VERSION's longest plausible suffix after X.Y.Z ("rc12+local"). */
#define PYRT_VERSION_SUFFIX_MAX 24

/*
 * Called with the n + lookahead bytes at base (avail in all, n <= avail):
 * matches may start in buf[0, n) and read on to buf[avail - 1]. base is
 * 8-aligned. Return true to stop the scan.
 */
typedef bool (*pyrt_scan_fn)(void *ctx, spy_addr_t base, const unsigned char *buf, size_t n,
			     size_t avail);
/* Feed [lo, hi) (lo rounded up to 8, capped at PYRT_SCAN_MAX) to fn in chunks. */
void pyrt_scan(const struct spy_mem *mem, spy_addr_t lo, spy_addr_t hi, size_t overlap,
	       pyrt_scan_fn fn, void *ctx);
/* PY_VERSION_HEX of "X.Y.Z[suffix] (" at s, or 0. */
uint32_t pyrt_parse_sys_version(const unsigned char *s, size_t len);
/* The sys.version text in [lo, hi): the first match agreeing with hint's
 * major.minor, else the first match; 0 if none. */
uint32_t pyrt_scan_sys_version(const struct spy_mem *mem, spy_addr_t lo, spy_addr_t hi,
			       uint32_t hint);
/* The address of an 8-aligned "xdebugpy" followed by a 3.13+ version, or 0. */
spy_addr_t pyrt_scan_cookie(const struct spy_mem *mem, spy_addr_t lo, spy_addr_t hi);

/* find.c */
/*
 * Every thread of interp points back at it (bounded, cycle-checked). strict
 * adds the proof a guess needs (see find.c): at least one thread, modules
 * and sysdict of type "dict", sane innermost frames before 3.11.
 */
bool pyrt_interp_ok(struct pyrt *rt, spy_addr_t interp, bool strict);
/*
 * Walk the ladder for rt->off (rt->runtime and rt->interp_head_var preset
 * from the hints): the interpreter list head, or 0. Sets rt->runtime,
 * interp_head_var or interp_fixed as the rung found it. *checked: the
 * result already passed pyrt_interp_ok(strict).
 */
spy_addr_t pyrt_find_interp(struct pyrt *rt, const struct pyrt_hints *h, bool *checked);
/* The current head of the interpreter list, re-read each call. */
spy_addr_t pyrt_first_interp(struct pyrt *rt);

/* debugoffs.c */
/*
 * Refine rt->off from the _Py_DebugOffsets at rt->runtime, decoded with
 * rt->off.dbg. future: the table is the only source, so an impossible value
 * is -SPY_EVERSION. Free-threaded builds are -SPY_EVERSION either way.
 */
int pyrt_apply_debug_offsets(struct pyrt *rt, const char *binary, struct spy_err *err);
/* The free_threaded word of the table at runtime (laid out as d), or -1. */
int pyrt_debug_free_threaded(const struct spy_mem *mem, spy_addr_t runtime,
			     const struct pydebug_layout *d);

/* layouts.c */
const struct pyoffsets *pyoffsets_newest(void);
/* Same major, newer minor than every row. */
bool pyoffsets_is_future(uint32_t version);
/* Where the fields of version's _Py_DebugOffsets sit: a row's own, or for
 * versions newer than every row the newest known table layout; NULL if none. */
const struct pydebug_layout *pydebug_layout_for(uint32_t version);
/* Patch o for per-micro exceptions of the exact version; returns how many. */
unsigned pyoffsets_apply_quirks(struct pyoffsets *o, uint32_t version);

/* code.c */
void pycode_cache_init(struct pyrt *rt);
void pycode_cache_release(struct pyrt *rt);
/*
 * The cache entry for the code object at addr, whose first rt->code_span
 * bytes the caller has already read into hdr (one read per frame, per
 * sample). Validates the type and, on a miss or fingerprint change, decodes
 * names and the line table. Returns 0, -SPY_ECORRUPT (not a code object or
 * bad fields), -SPY_EMEM.
 */
int pycode_get(struct pyrt *rt, spy_addr_t addr, const unsigned char *hdr, struct pycode **out);
/* Line for byte offset addr in c, 0 when unknown. */
uint32_t pycode_line(struct pyrt *rt, struct pycode *c, int64_t addr);
/* The cache's entry for the code object at addr, without reading it, or NULL. */
struct pycode *pycode_cached(struct pyrt *rt, spy_addr_t addr);
/* Is type the code type? First call checks tp_name and remembers. */
bool pyrt_is_type(struct pyrt *rt, spy_addr_t *cached, spy_addr_t type, const char *name);

/* locals.c: the value of the object at obj, one level deep (0: unbound). */
void pyrt_read_value(struct pyrt *rt, spy_addr_t obj, struct py_value *v);

/* walk.c */
/*
 * The frame memo: a frame whose copied bytes (rt->frame_span of them) are
 * the same as when it was last decoded decodes the same way, so a sample
 * that finds most of a deep stack where it left it reads no code object
 * for those frames. Set-associative by frame address (the set from the
 * address's bits, PYFRAME_MEMO_WAYS entries each); an entry is trusted
 * for PYFRAME_MEMO_TTL rounds of walks (pyrt_round), then decoded again
 * through the code cache (which checks the code object's fingerprint), so
 * a code object freed and its address reused under a byte-identical frame
 * is caught within that many samples of its thread (and in any case within
 * PYFRAME_MEMO_TTL * PYRT_ROUND_SLOTS / 2 walks). Powers of two.
 */
#define PYFRAME_MEMO_SETS 1024
#define PYFRAME_MEMO_WAYS 4
#define PYFRAME_MEMO_TTL 64
/*
 * A walk of tstate's stack begins: the memo's clock (rt->clock) moves when
 * a thread is walked again, so that it counts rounds over the threads, not
 * walks. Counted in walks, a pool of more threads than PYFRAME_MEMO_TTL
 * walked each tick found every entry expired: 150 threads, no hit at all.
 */
void pyrt_round(struct pyrt *rt, spy_addr_t tstate);
void pyframe_memo_release(struct pyrt *rt);
/* Append a to *v (rt->frames, rt->anchors), up to SPY_MAX_PY_DEPTH of them. */
void pyrt_note_addr(spy_addr_t **v, size_t *n, size_t *alloc, spy_addr_t a);
int pyrt_walk_frameobj(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out);

/*
 * splice.c: the bottom of a 3.11+ stack copied from the thread's last walk
 * (struct pysplice_rec above). One walk's part: begin; per frame try, then
 * visit (or shim, for a shim); end.
 */
struct pysplice {
	bool off;                 /* no splice and no record for this walk */
	struct pysplice_rec *rec; /* the thread's, if any */
	spy_addr_t tstate;
	size_t same;              /* bytes of rec from its lo up that are unchanged */
	spy_addr_t at;            /* the frame to splice at (0: none), rec->addr[at_i] */
	size_t at_i;
	bool spliced;
	spy_addr_t prev;          /* the last frame visited */
	size_t run_out;           /* out->n where the bottom run began */
	size_t run_frames;        /* rt->nframes then */
	size_t nshims, run_shims; /* rt->splice_shims so far, and where the run's began */
	spy_addr_t run_hi;        /* its first frame */
	bool clean;               /* every frame of the run from a peek */
	uint64_t oldest;          /* the oldest decode the run reuses (a memo entry's stamp) */
	bool refresh;             /* the record is too old: this walk decodes every frame */
};
void pysplice_begin(struct pyrt *rt, spy_addr_t tstate, struct pysplice *s);
/* At frame f, before reading it: true when the rest of the stack was copied into out. */
bool pysplice_try(struct pyrt *rt, struct pysplice *s, spy_addr_t f, struct spy_stack *out);
/* Frame f was read (from the reader's cache: peeked) with out_n frames pushed before it. */
void pysplice_visit(struct pyrt *rt, struct pysplice *s, spy_addr_t f, size_t out_n, bool peeked);
/* Frame f, read as fb, was a shim; anchor: it began a group. */
void pysplice_shim(struct pyrt *rt, struct pysplice *s, spy_addr_t f, const unsigned char *fb,
		   size_t out_n, bool anchor);
void pysplice_end(struct pyrt *rt, struct pysplice *s, const struct spy_stack *out);
void pysplice_release(struct pyrt *rt);
int pyrt_walk_iframe(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out);
spy_addr_t pyrt_gil_tstate_current(struct pyrt *rt, spy_addr_t interp);
spy_addr_t pyrt_gil_runtime(struct pyrt *rt, spy_addr_t interp);
spy_addr_t pyrt_gil_interp(struct pyrt *rt, spy_addr_t interp);

/*
 * The object a 3.14+ _PyStackRef refers to (the tag bits cleared), or 0 for
 * a tagged integer, which is not an object. Before 3.14 the slot is a plain
 * pointer and comes back as it is.
 */
static inline spy_addr_t pyrt_ref(const struct pyoffsets *o, uint64_t bits)
{
	if (o->stackref_tag_bits == PYOFF_NONE) {
		return bits;
	}
	if (o->stackref_int_tag != PYOFF_NONE && (bits & o->stackref_tag_bits) == o->stackref_int_tag) {
		return 0;
	}
	return bits & ~(uint64_t)o->stackref_tag_bits;
}

/* Little-endian field access on a local copy of a remote struct. */
static inline uint64_t pyrt_u64(const unsigned char *buf, uint32_t off)
{
	uint64_t v;
	__builtin_memcpy(&v, buf + off, 8);
	return v;
}

static inline uint32_t pyrt_u32(const unsigned char *buf, uint32_t off)
{
	uint32_t v;
	__builtin_memcpy(&v, buf + off, 4);
	return v;
}

/*
 * Exact cycle detection for linked walks (frames, thread states): a set
 * of the walk's addresses. The count caps (SPY_MAX_PY_DEPTH,
 * SPY_MAX_THREADS) bound insertions per walk below PYRT_SEEN_MAX.
 */
/* Start a new walk: forget every address seen so far. */
void pyrt_seen_reset(struct pyrt *rt);
/* true when addr was already seen on this walk; otherwise remember it. */
bool pyrt_seen(struct pyrt *rt, spy_addr_t addr);
/* Remember addr without asking: the caller knows it is new (a frame below
 * every one its walk met). Indexed by the next pyrt_seen. */
static inline void pyrt_seen_note(struct pyrt *rt, spy_addr_t addr)
{
	if (rt->seen_n < PYRT_SEEN_MAX) {
		rt->seen_log[rt->seen_n++] = addr;
	}
}

/*
 * Counting the remote reads of a piece of work, for its budget (namescan.c,
 * locals.c): between begin and end, rt->mem is c->m, which counts each
 * read into c->reads and passes it on.
 */
struct pyrt_counted {
	struct spy_mem m;
	const struct spy_mem *in;
	size_t reads;
};
void pyrt_count_begin(struct pyrt *rt, struct pyrt_counted *c);
void pyrt_count_end(struct pyrt *rt, struct pyrt_counted *c);

/*
 * names.c: dicts and instance attributes of every layout (offsets.h enum
 * pydict_model, enum pyidict_model), read from copies with every count and
 * pointer checked; scanned, never hashed into. Shared with tasks-legacy.c.
 */
/* Entries read from one dict at most (sys.modules of a big service: ~2000). */
#define PYRT_DICT_MAX_ENTRIES 16384
/* A dict's storage, whatever its layout: entry i's key and value. */
struct dview {
	spy_addr_t entries;   /* first entry */
	size_t n;             /* entries in use or deleted (nentries / 2.7 slots) */
	uint32_t stride;      /* bytes per entry */
	uint32_t key_off, value_off;
	spy_addr_t values;    /* split table: value i at values + 8 * i, else 0 */
	bool cut;             /* the dict has more entries than the view's max */
};
/* -SPY_ECORRUPT for a dict of more than PYRT_DICT_MAX_ENTRIES entries. */
int pyrt_dict_view(struct pyrt *rt, spy_addr_t dict, struct dview *v);
/* The first max entries of the dict (v->cut says whether there are more). */
int pyrt_dict_view_max(struct pyrt *rt, spy_addr_t dict, struct dview *v, size_t max);
/* The attributes of an ordinary instance, as a view of at most max entries;
 * -SPY_ENOPY when it has none. */
int pyrt_attr_view(struct pyrt *rt, spy_addr_t obj, struct dview *v, size_t max);
/*
 * Call fn(ctx, key, value) for every live entry of v, in order, until it
 * returns nonzero (which is returned). Deleted and empty slots (NULL key or
 * value) are skipped.
 */
typedef int (*pyrt_entry_fn)(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t value);
int pyrt_dict_each(struct pyrt *rt, const struct dview *v, pyrt_entry_fn fn, void *ctx);
/* The same from entry from on; *stopped (if not NULL) is the entry at which fn returned nonzero. */
int pyrt_dict_each_from(struct pyrt *rt, const struct dview *v, size_t from, pyrt_entry_fn fn, void *ctx,
			size_t *stopped);
/*
 * 1 and *value when str key want is in the dict at dict, 0 when it is
 * not, < 0 when that is unknown: the dict or one of its keys unreadable
 * (memory mapped since the maps were read reads so, as does a resize).
 */
int pyrt_dict_find(struct pyrt *rt, spy_addr_t dict, const char *want, spy_addr_t *value);
/* The value of str key want in the dict at dict, or 0 (absent or unreadable). */
spy_addr_t pyrt_dict_get(struct pyrt *rt, spy_addr_t dict, const char *want);
/* Attribute want of an ordinary instance (a Thread, a WeakSet), or 0. */
spy_addr_t pyrt_attr_get(struct pyrt *rt, spy_addr_t obj, const char *want);

/* spans.c */
void pyrt_spans_free(struct pyrt *rt);
/*
 * The value of key, whose hamt_hash is h, in the HAMT (PyHamtObject) at
 * hamt, found as Python/hamt.c finds it: 1 and *value, 0 absent, < 0
 * unreadable or not a HAMT's shape. At most 8 nodes read.
 */
int pyrt_hamt_find(struct pyrt *rt, spy_addr_t hamt, spy_addr_t key, int32_t h, spy_addr_t *value);

/* tasks.c / tasks-legacy.c: asyncio. */
/*
 * What a thread's event loop is running now, version-neutral: the Task,
 * its coroutine's embedded _PyInterpreterFrame (what pyrt_stack() saw as a
 * frame address, rt->frames) and its name object (a str, or an int N that
 * get_name() formats as "Task-N").
 */
struct pyrt_running_task {
	spy_addr_t task, frame, name;
};
/* 3.8-3.13 (tasks-legacy.c): whether that backend is there; false, its
 * versions are refused with "not supported yet" before anything is read. */
extern const bool pyrt_tasks_legacy_ready;
/* 3.8-3.13 (tasks-legacy.c): every task, as pyrt_tasks(). */
int pyrt_tasks_legacy(struct pyrt *rt, struct pyrt_task *out, size_t max, size_t *n,
		      struct spy_err *err);
/* 3.8-3.13 (tasks-legacy.c): the task t runs now; 1 and *r filled, 0 none, < 0 unreadable. */
int pyrt_running_task_legacy(struct pyrt *rt, const struct py_thread *t, struct pyrt_running_task *r);
/*
 * Shared by both: one _PyInterpreterFrame (a suspended coroutine's
 * embedded frame) decoded as pyrt_stack() would; 0, or < 0 when it is not a
 * readable frame with code.
 */
int pyrt_iframe_decode(struct pyrt *rt, spy_addr_t frame, struct spy_frame *out);
/* The same for a PyFrameObject (before 3.11: a coroutine's gi_frame). */
int pyrt_frameobj_decode(struct pyrt *rt, spy_addr_t frame, struct spy_frame *out);
/* A task's name from its name object: a str, or an int N as "Task-N"; NULL if neither. */
const char *pyrt_task_name(struct pyrt *rt, spy_addr_t name_obj);

#endif
