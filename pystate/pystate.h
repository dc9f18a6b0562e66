/*
 * pystate: finding and walking a CPython runtime in someone else's memory.
 *
 * pystate reads the target only through a const struct spy_mem *: it never
 * sees a pid, a file or an ELF. profiler/open.c finds the anchors (symbol
 * addresses from symbolize/) and passes them in as struct pyrt_hints; unit
 * tests and fuzzers hand it synthetic memory the same way.
 *
 * Everything read is hostile input: every pointer is checked, every loop and
 * length is bounded (common/bounds.h), every linked walk has a cycle check,
 * and garbage yields an error code, never a crash or a hang.
 */
#ifndef SPY_PYSTATE_PYSTATE_H
#define SPY_PYSTATE_PYSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/sample.h"
#include "common/strtab.h"

/* Anchors found outside pystate; 0 means "not known". */
struct pyrt_hints {
	const char *binary;          /* the ELF holding the runtime, for messages */
	int32_t pid;                 /* the target's pid: the main thread's TID (2.7-3.10 TID discovery) */
	spy_addr_t runtime;          /* _PyRuntime (3.7+) */
	spy_addr_t py_version;       /* Py_Version (3.11+): uint32 PY_VERSION_HEX */
	spy_addr_t interp_head;      /* the static interp_head pointer variable (2.7, 3.6) */
	spy_addr_t interp_head_fn;   /* PyInterpreterState_Head() code (2.7, 3.6) */
	spy_addr_t tstate_current;   /* _PyThreadState_Current (2.7, 3.6) */
	spy_addr_t data_lo, data_hi; /* writable data (.data/.bss) of the ELF, for scans */
	uint32_t version_hint;       /* PY_VERSION_HEX from the file name, 0 if unknown */
	/*
	 * Where the GIL lives when the runtime does not say (dump's "waiting
	 * for the GIL"): 3.6's static gil_cond/gil_mutex/switch_* (.symtab
	 * only) with their sizes, and 2.7's interpreter_lock pointer variable.
	 */
	spy_addr_t gil_static[4];
	uint32_t gil_static_size[4];
	spy_addr_t gil_lock_ptr;
	uint32_t gil_lock_size;      /* of what *gil_lock_ptr points to (a sem_t) */
};

struct pyrt;

/* Interpreters one thread can be nested in beyond its innermost (see py_thread). */
#define PYRT_MAX_NEST 4

struct py_thread {
	spy_addr_t tstate;
	spy_addr_t interp;
	int64_t interp_id;
	uint64_t thread_id;   /* pthread_t: threading.get_ident() */
	int32_t native_tid;   /* kernel TID; 0 if unknown */
	/*
	 * native_tid as the target's memory holds it, in its own PID
	 * namespace: the caller may turn native_tid into its own namespace's
	 * (a container's target); rechecks compare this one.
	 */
	int32_t own_tid;
	bool holds_gil;
	/* A free-threaded build's thread attached to its interpreter (running
	 * Python, or C that has not detached): what holding the GIL is to a
	 * GIL build, for telling running from idle. False on a GIL build. */
	bool attached;
	/* Bound as the OS thread's thread state for PyGILState (3.12+):
	 * the one it entered last (see nest_threads in runtime.c). */
	bool gilstate;
	/*
	 * A thread inside a sub-interpreter (3.12+) has a thread state in each
	 * interpreter it entered, all of one native_tid: pyrt_threads lists it
	 * once, as the innermost (the fields above), with the thread states it
	 * entered that one from in outer[0..nouter), nearest first. pyrt_stack
	 * walks them all, one `<interpreter N>` frame between each stack and
	 * the one it was entered from (N: the inner interpreter's id).
	 */
	uint8_t nouter;
	struct py_outer {
		spy_addr_t tstate, interp;
		int64_t interp_id;
	} outer[PYRT_MAX_NEST];
};

/*
 * Find the runtime: decide the version (exact, from the target), pick the
 * layout row and walking strategies, and validate that the interpreter the
 * hints lead to is real. -SPY_ENOPY if no interpreter is found, -SPY_EVERSION
 * ("Python 3.N: unsupported layout ...") if it is found but not understood.
 * strs receives every decoded string and must outlive the pyrt.
 */
int pyrt_new(struct pyrt **out, const struct spy_mem *mem, const struct pyrt_hints *hints,
	     struct spy_strtab *strs, struct spy_err *err);
void pyrt_free(struct pyrt *rt);

/* A free-threaded build (--disable-gil, 3.13+). */
bool pyrt_free_threaded(const struct pyrt *rt);
/*
 * Whether the target runs with a GIL now: false for a free-threaded build
 * whose GIL is off (its default), where no thread "holds the GIL" and
 * py_thread.holds_gil is always false.
 */
bool pyrt_has_gil(struct pyrt *rt);

/*
 * Whether interp's garbage collector is collecting now: 1 or 0, or -1 when
 * the version does not say where to look (2.7, 3.6) or it cannot be read.
 */
int pyrt_gc_collecting(struct pyrt *rt, spy_addr_t interp);

/* PY_VERSION_HEX of the target, e.g. 0x030b07f0 for 3.11.7. */
uint32_t pyrt_version(const struct pyrt *rt);
/* "3.11.7" */
const char *pyrt_version_string(const struct pyrt *rt);

/*
 * The Python threads of every interpreter, main interpreter's threads in
 * creation order as far as the target keeps one. Fills at most max entries;
 * *n is how many were found (bounded by SPY_MAX_THREADS), which may exceed
 * max. A list cut short by bad memory, a cycle or a bound still returns 0
 * with what was read; -SPY_ECORRUPT only when not one thread was readable.
 * native_tid is native_thread_id on 3.11+; before that it is read from
 * glibc's struct pthread when hints->pid allowed finding the tid field, else 0.
 */
int pyrt_threads(struct pyrt *rt, struct py_thread *out, size_t max, size_t *n,
		 struct spy_err *err);

/*
 * Look again at a thread pyrt_threads listed, while that thread is held
 * (stopped) and the others run: 0 if its thread state still is the same
 * thread's (interpreter, thread id and TID unchanged), with holds_gil read
 * afresh, which stays true for as long as the thread is held; -SPY_EGONE if
 * the state was freed or reused meanwhile. A thread listed with outer
 * thread states (in a sub-interpreter) has its innermost chosen again, and
 * those freed since dropped: it may have entered or left one meanwhile.
 */
int pyrt_thread_recheck(struct pyrt *rt, struct py_thread *t);

/*
 * Whether holder, a thread pyrt_thread_recheck found holding its GIL
 * while held, also holds the GIL thread t's interpreter runs under (read
 * now): the same GIL, so t cannot run Python until holder runs again.
 * False for a thread of a free-threaded build or of an interpreter with
 * a GIL of its own.
 */
bool pyrt_gil_freezes(struct pyrt *rt, const struct py_thread *holder, const struct py_thread *t);

/*
 * The GIL's switch count, as a sequence lock for reading a thread without
 * stopping it. take_gil() sets last_holder and counts a switch whenever a
 * thread takes the GIL from another, before that thread runs any Python,
 * and pushing or popping a frame needs the GIL: a thread that is not
 * last_holder when the count is read cannot change its frames until the
 * count moves. So: count then holder read (in that order), the thread
 * walked running, the count read again, equal: the walk saw frames that
 * did not change. *count and *last_holder of the GIL interp runs under;
 * 0, or -1 where it cannot be read: a free-threaded build, 2.7/3.6,
 * a row without the count (3.7.0-3.7.3; a target whose _Py_DebugOffsets
 * move locked from where the row has it), unreadable memory.
 */
int pyrt_gil_switches(struct pyrt *rt, spy_addr_t interp, uint64_t *count, spy_addr_t *last_holder);

/*
 * The Python stack of one thread, innermost frame first, appended to out
 * (which the caller resets). Frames carry interned strings; addr is the code
 * object; line is 0 when unknown. SPY_FRAME_PY_ENTRY marks the first frame
 * of each C-level eval-loop call (every frame before 3.11; 3.11 is_entry;
 * 3.12+ the frame above a C-stack shim). A walk stopped by a bound, a cycle
 * or bad memory keeps what it read, sets out->truncated and flags its last
 * frame SPY_FRAME_TRUNCATED, and returns 0. Returns -SPY_EMEM only when the
 * thread's first frame pointer cannot be read (the thread went away).
 */
int pyrt_stack(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out,
	       struct spy_err *err);

/*
 * For --native: where the groups of the last pyrt_stack() ran. From 3.12
 * each C-level eval call keeps a shim frame (its "entry frame") among its
 * own locals, below the first frame it runs; *out[k] is the address of the
 * k-th such shim from the innermost, which lies inside the C stack frame of
 * the eval call that ran the k-th group (the frames through the k-th
 * SPY_FRAME_PY_ENTRY frame). Returns how many; 0 before 3.12, where frames
 * carry no such address. Valid until the next pyrt_stack().
 */
size_t pyrt_stack_anchors(const struct pyrt *rt, const spy_addr_t **out);

/*
 * The names Python's threading module gave the threads th[0..n): names[i]
 * is the interned name of th[i], or NULL for a thread threading does not
 * know (started from C) or whose name cannot be read. One scan of each
 * interpreter's threading._active (bounded); returns how many were named,
 * or a negative error (with err set) when none could be and a module's
 * structures could not be read.
 */
int pyrt_thread_names(struct pyrt *rt, const struct py_thread *th, size_t n, const char **names,
		      struct spy_err *err);

/*
 * For samplers: the same names, cached, found a budget at a time.
 * pyrt_names_update() starts a pass over threading's threads when a thread
 * of th[0..n) was not seen before, or refresh_ns after the last pass
 * started (a thread renamed later is seen then), and goes on with the pass
 * under way, making at most about budget remote reads per call
 * (PYRT_NAMES_TICK_READS for a sampler's tick). Finding threading._active,
 * once per interpreter, is not counted, so an ordinary program's threads
 * are named in the tick that first sees them; a target whose Thread
 * objects are huge is named over several calls, never at the cost of one.
 * A name is used as soon as it is found; a lookup that found nothing is
 * remembered until the next pass. pyrt_thread_name() is then a table
 * lookup: threading's name, or NULL (use the kernel's).
 * pyrt_thread_names() is one whole pass, bounded by PYRT_NAMES_CALL_READS
 * in all (err says when it stopped short).
 */
#define PYRT_NAMES_TICK_READS 1024
#define PYRT_NAMES_CALL_READS (1 << 16)
/* threading._active entries, and one Thread's attributes, read at most. */
#define PYRT_NAMES_ACTIVE_MAX (1 << 20)
#define PYRT_NAMES_ATTR_MAX (1 << 16)
/* Keys of one Thread read as strings once the "_name" key object is known (namescan.c). */
#define PYRT_NAMES_KEY_READS 64
void pyrt_names_update(struct pyrt *rt, const struct py_thread *th, size_t n, uint64_t now_ns,
		       uint64_t refresh_ns, size_t budget);
/* Whether a list was past its bound (above): names were given for those found. */
bool pyrt_names_cut(const struct pyrt *rt);
/* Whether the last pass failed a read and is run again at the next tick (a few times in a row at most). */
bool pyrt_names_failing(const struct pyrt *rt);
/* Remote reads the names' lookup has made in all, for a sampler's count per tick. */
uint64_t pyrt_names_reads(const struct pyrt *rt);
const char *pyrt_thread_name(const struct pyrt *rt, const struct py_thread *t);

/*
 * dump: the address ranges a thread blocked on the GIL sleeps on (a futex
 * inside one of them), for the interpreter interp. 3.7-3.11 _PyRuntime's
 * ceval.gil, 3.12+ *interp->ceval.gil, 3.6/2.7 from the hints' symbols.
 * Returns how many ranges were filled (at most max); 0 when unknown.
 */
struct pyrt_range {
	spy_addr_t lo, hi;
};
size_t pyrt_gil_ranges(struct pyrt *rt, spy_addr_t interp, struct pyrt_range *out, size_t max);

/*
 * dump --locals: one frame's arguments and locals, values read one level
 * deep (locals.c). Everything is bounded: PYV_MAX_DIGITS digits of an int,
 * PYV_MAX_TEXT bytes of a str or bytes, PYRT_MAX_LOCALS names per frame.
 */
#define PYV_MAX_DIGITS 64   /* 64 * 30 bits: ints up to ~578 decimal digits */
#define PYV_MAX_TEXT 200    /* bytes of a str/bytes value kept for its repr */
#define PYRT_MAX_LOCALS 256 /* names per frame; more are counted, not read */

enum py_value_kind {
	PYV_UNREADABLE = 0, /* the pointer or the object could not be read */
	PYV_UNBOUND,        /* NULL slot: not assigned yet (or deleted) */
	PYV_NONE,
	PYV_BOOL,           /* ival is 0 or 1 */
	PYV_INT,            /* small: ival; big: digits (see ndigits) */
	PYV_FLOAT,
	PYV_STR,
	PYV_BYTES,
	PYV_CONTAINER,      /* list, tuple, dict, set, frozenset: type + len */
	PYV_OTHER,          /* anything else: type name only */
};

struct py_value {
	uint8_t kind;         /* enum py_value_kind */
	bool negative;        /* PYV_INT given by digits */
	bool truncated;       /* text or digits cut at their bound */
	const char *type;     /* interned tp_name (all but UNREADABLE/UNBOUND) */
	int64_t ival;
	double fval;
	int64_t len;          /* container items; str/bytes full length */
	const char *text;     /* interned UTF-8 (str) or raw bytes escaped as \xNN (bytes) */
	uint32_t ndigits;     /* > 0: the int is digits[] base 2^shift, least significant first */
	uint32_t shift;
	uint32_t digits[PYV_MAX_DIGITS];
};

struct py_local {
	const char *name;     /* interned */
	bool is_arg;
	struct py_value v;
};

/*
 * The locals of Python frame i (0 = innermost) of the last pyrt_stack() call,
 * whose frames must still be in memory (call it while the target is
 * paused). Fills at most max entries, *n how many; 0 or -SPY_EMEM /
 * -SPY_ECORRUPT when the frame or its code cannot be read.
 */
int pyrt_frame_locals(struct pyrt *rt, size_t i, struct py_local *out, size_t max, size_t *n);

/*
 * The remote reads pyrt_frame_locals may make from now on, in all its calls
 * (0: no bound, the default). Past it, a call returns -SPY_EBOUND with what
 * it read of its frame, and later calls read nothing: a target of thousands
 * of frames of hundreds of locals each cannot hold a dump for long.
 * PYRT_LOCALS_READS is dump's (a few hundred ms of reads).
 */
#define PYRT_LOCALS_READS ((size_t)1 << 18)
void pyrt_locals_budget(struct pyrt *rt, size_t reads);

/* A short repr of v, Python-like: None, True, 42, 1.5, 'text', b'..', <list len=3>, <Foo>. */
struct spy_buf;
void pyrt_value_repr(const struct py_value *v, struct spy_buf *out);

/*
 * asyncio (tasks.c): the tasks of every event loop, for dump --tasks, and
 * the task a thread is running, for record --async.
 */
#define PYRT_TASK_MAX_CHAIN 64      /* coroutine frames kept per task */
#define PYRT_TASK_MAX_AWAITERS 32   /* awaited_by entries kept per task */
#define PYRT_MAX_TASKS 100000       /* bound on a walk */

enum pyrt_task_state { PYRT_TASK_PENDING, PYRT_TASK_DONE, PYRT_TASK_CANCELLED };

struct pyrt_task {
	spy_addr_t addr;        /* the Task object */
	spy_addr_t loop;        /* its event loop object, 0 if unknown */
	const char *name;       /* interned; task.get_name() */
	uint8_t state;          /* enum pyrt_task_state */
	bool running;           /* the current task of its loop (its coroutine is on a thread's stack) */
	uint64_t thread_id;     /* py_thread.thread_id of the thread running it when running, else 0 */
	uint64_t loop_thread_id; /* py_thread.thread_id of the thread whose running loop is loop, 0 if none or unknown */
	size_t nchain;
	bool chain_truncated;
	/* The coroutine chain, innermost first (func, file, line; addr the code object). */
	struct spy_frame chain[PYRT_TASK_MAX_CHAIN];
	size_t nawaited_by;
	/* Task objects awaiting this one (gather, await task). */
	spy_addr_t awaited_by[PYRT_TASK_MAX_AWAITERS];
};

/* Anchors found outside pystate (profiler/open.c, via symbolize/): 0 = unknown. */
struct pyrt_async_hints {
	spy_addr_t debug_offsets; /* the _asyncio module's .AsyncioDebug section, 3.14+ */
};

/*
 * Whether this version's tasks can be read at all: 0, or -SPY_EVERSION with
 * one clear message (which versions are). Reads nothing.
 */
int pyrt_tasks_supported(const struct pyrt *rt, struct spy_err *err);

/*
 * Every task of every event loop, in each thread's creation order. Fills at
 * most max entries; *n is how many were found (bounded by PYRT_MAX_TASKS),
 * which may exceed max. A list cut short by bad memory, a cycle or a bound
 * returns 0 with what was read. -SPY_EVERSION for unsupported versions (see
 * pyrt_tasks_supported), -SPY_ENOPY when the target has no asyncio loaded
 * (3.14+: h->debug_offsets is 0).
 */
int pyrt_tasks(struct pyrt *rt, const struct pyrt_async_hints *h, struct pyrt_task *out, size_t max,
	       size_t *n, struct spy_err *err);

/*
 * record --async: the task t is running, against the stack the last
 * pyrt_stack(rt, t, ...) read (call it right after, target unchanged).
 * Returns 1 with *name (interned task name) and *nframes: that stack's
 * frames [0, *nframes) are the task's (its coroutines and what they call);
 * those outward of them are the event loop's. Returns 0 when t runs no task
 * or the task's coroutine is not on that stack, negative when the version
 * is unsupported or nothing could be read. Cheap per sample: one read of
 * the thread's running task, one of the task; names cached by task.
 */
int pyrt_stack_task(struct pyrt *rt, const struct pyrt_async_hints *h, const struct py_thread *t,
		    const char **name, size_t *nframes);

/*
 * The OpenTelemetry Python SDK's current span of each thread (spans.c):
 * read from the thread's contextvars, while the thread is held.
 */
struct pyrt_span {
	uint8_t trace_id[16]; /* big-endian: its hex is OTel's */
	uint8_t span_id[8];
	const char *name;     /* interned; NULL when the span has none (a NonRecordingSpan) */
};
/* How often sys.modules is looked at again for the SDK while it is not found. */
#define PYRT_SPAN_LOOK_NS 1000000000ull
/* Whether the version's layout lets spans be read (3.8+). */
bool pyrt_spans_supported(const struct pyrt *rt);
/*
 * 1 and *out when thread t's current context holds an SDK span; 0 when it
 * holds none, the SDK is not loaded (sys.modules is looked at again at
 * most every PYRT_SPAN_LOOK_NS of now_ns, and only when it grew) or the
 * version is not supported; negative when the chain could not be read
 * (counted, nothing guessed). Bounded: a HAMT walk of at most 8 nodes,
 * dicts of at most 256 entries, a name of at most 127 bytes.
 */
int pyrt_thread_span(struct pyrt *rt, const struct py_thread *t, uint64_t now_ns, struct pyrt_span *out);
struct pyrt_span_stats {
	bool sdk;             /* the SDK's variable was found */
	uint64_t looks;       /* looks at sys.modules for it */
	uint64_t found;       /* spans read */
	uint64_t failed;      /* chains that could not be read */
	uint64_t cut;         /* dicts past their bound */
	uint64_t reads;       /* remote reads, about */
};
void pyrt_span_stats(const struct pyrt *rt, struct pyrt_span_stats *out);

#endif
