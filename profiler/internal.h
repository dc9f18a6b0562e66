/*
 * The profiler's own structures, shared by its files: open.c (a process and
 * its runtime), walk.c (reading threads), tick.c (one tick's rules: what is
 * stopped, walked, kept), look.c (dump's one look) and profiler.c (the
 * session: launching, descendants, waiting for ticks).
 */
#ifndef SPY_PROFILER_INTERNAL_H
#define SPY_PROFILER_INTERNAL_H

#include "common/hashmap.h"
#include "profiler/native.h"
#include "common/credopen.h"
#include "profiler/look.h"
#include "sampler/process.h"
#include "sampler/sampler.h"

/* One OS thread seen, with its state kept across ticks. */
struct prof_thread {
	struct proc_task task;
	bool seen;          /* found by this tick's walk */
	bool had_cpu;       /* a CPU-time reading preceded this tick's (see the activity rule) */
	bool walked;        /* walked before (one thread at a time: no warm-up walk needed) */
	/*
	 * -i: the stack last read of a thread asleep, while it stays asleep
	 * (see still_stack in tick.c); valid is cleared by every refresh that
	 * finds the thread scheduled since.
	 */
	struct spy_stack kept;
	bool kept_valid;
	const char *root;   /* interned `thread TID "name"` */
	const char *name;   /* the interpreter's name the root was made with (NULL: the kernel's) */
	bool native_only;   /* ... and whether it was made for a thread without a Python thread state */
	bool rooted;        /* the root was made from a walk (not the table's placeholder) */
	bool no_frames;     /* found running at its last walk with no Python frame (see nativeonly.c) */
	/*
	 * -i --native, a native-only thread: its pcs (and stack pointers) as
	 * last unwound while it slept in a syscall (see prof_still_native in nativeonly.c).
	 */
	spy_addr_t *kept_v, *kept_sp;
	size_t kept_n, kept_alloc;
	char comm[17];      /* the kernel's name, when first seen */
};

/* One thread as this tick's walk found it (index i of the process's listing). */
struct prof_walked {
	bool holds_gil;
	bool attached;        /* free-threaded without a GIL: attached to the
				 interpreter, so running as a GIL holder is */
	bool gc;              /* the runtime was collecting garbage in this thread */
	int rc;               /* < 0: the stack could not be read (the thread exited) */
	const char *name;     /* the interpreter's name for it (interned), or NULL */
	struct spy_stack stack;
	/* per tick, the rules' marks */
	bool fresh;           /* its thread was first seen now */
	bool listed_gil;      /* it held the GIL when listed */
	bool frozen;          /* walked behind the GIL holder's hold */
	bool retry;           /* read running while the GIL changed hands: once more, or held */
	bool state_read;      /* its thread's state read this tick, before its walk (skip_idle) */
	bool native_only;     /* --native: a thread with no Python thread state (py holds its TID alone) */
	bool walked;          /* its stack was read this tick (prof_walk_thread) */
	struct native_pcs pcs;   /* --native: from the stop to the merge */
	const char *task;     /* --async --native: its running task (name), cut after the merge */
	size_t task_keep;
	/* The OpenTelemetry span its context held when read while it could not run. */
	bool has_span;
	struct pyrt_span span;
	struct prof_span pspan;  /* the same, as samples hand it on */
};

/* Without --native: a thread of the process at the last reading (nativeonly.c). */
struct prof_unsampled {
	pid_t tid;
	uint64_t last_ns;   /* its CPU time then, if not listed */
	bool listed;        /* the interpreter listed it then */
	bool counted;       /* some of its time was counted */
	bool seen;
};

/* One process profiled: the one named or launched, a descendant (-s), or a core. */
struct prof_process {
	struct spy_process h;
	pid_t pid;
	struct spy_creds creds;      /* its credentials when opened (live processes: has_creds) */
	bool has_creds;
	struct pyrt *rt;
	struct spy_strtab *strs;     /* the command's */
	char *binary;                /* path (as the target sees it) of the ELF holding the runtime */
	bool names_cut_told;         /* the warning that some names are missing was printed */
	/* The names' remote reads: in the listings after the first (which
	 * also finds threading._active), the most one made. */
	bool names_listed;
	uint64_t names_most;
	bool no_builtin_asyncio;     /* binary has no .AsyncioDebug: not searched again */
	struct pyrt_async_hints ah;  /* --async: found when asyncio is loaded */
	uint64_t ah_looked_ns;       /* when the maps were last searched for it */
	struct native *nat;          /* --native; NULL without */
	const char *root;            /* interned `process PID "cmdline"` */
	bool attached, gone;
	bool paused;                 /* every thread stopped now (sample_paused), for the spans */
	/*
	 * -s, the root named or launched is not a Python process (a shell,
	 * unshare, a supervisor): no runtime, never attached, stopped or
	 * sampled; only its descendants are looked for, and its exit noticed.
	 */
	bool watched;
	/* the thread table, and where each TID is in it */
	struct prof_thread *th;
	size_t nth, th_alloc;
	struct spy_hmap th_index;
	/* this tick's walk: w[i] is listed thread py[i] (walloc each, grown to the threads listed) */
	struct py_thread *py;
	struct prof_walked *w;
	size_t nw, walloc;
	/* The tracer's threads (prof_os_tids): scratch, grown to the most listed. */
	pid_t *tids;
	size_t tids_alloc;
	/* Without --native: the threads no listing names (nativeonly.c). */
	struct prof_unsampled *un;
	size_t nun, un_alloc;
	uint64_t un_total_ns;               /* what they used, unlisted, so far */
	uint64_t un_read_ns;                /* when last read (0: never) */
	/* --async: the root frame of each task name (names are interned:
	 * compared by pointer), so a sample interns nothing. */
	struct {
		const char *name, *frame;
	} task_frames[64];
	uint64_t last_maps_ns;
	uint64_t maps_retry_ns;   /* how long after the last maps read a failed read may read them again */
	uint64_t last_alive_ns;
	uint64_t last_trim_ns;    /* when its memory cache last gave back what went unread (PROF_TRIM_NS) */
	/*
	 * The last tick walked every thread the process has, cleanly: if none
	 * has been on a CPU since, the next tick is the same (see tick.c's
	 * process_still); still: the last tick was such a repeat.
	 */
	bool repeatable, still;
	/*
	 * An exec replaced its image since it was opened, seen after some
	 * tick's reads (tick.c's image_check): every sample from then on is
	 * marked names_untrusted. Never cleared.
	 */
	bool exec_seen;
};

/* ---- open.c ---- */

/*
 * Open pid (or the core at path) and find its interpreter: handle and
 * runtime. On failure nothing is left open.
 */
int prof_process_open(struct prof_process **out, pid_t pid, bool prefetch, struct spy_strtab *strs,
		      struct spy_err *err);
/* -s: open pid to be watched for its Python descendants, without a runtime (see watched). */
int prof_process_open_watched(struct prof_process **out, pid_t pid, struct spy_strtab *strs,
			      struct spy_err *err);
int prof_process_open_core(struct prof_process **out, const char *path, const char *exe, const char *root,
			   struct spy_strtab *strs, struct spy_err *err);
/*
 * Where the target's _asyncio module says how to read its tasks (3.14+:
 * .AsyncioDebug of lib-dynload/_asyncio*.so, or of the interpreter where
 * built in); h->debug_offsets stays 0 while asyncio is not loaded.
 * reread_maps: it may have been loaded since the maps were read.
 */
int prof_async_hints(struct prof_process *pp, bool reread_maps, struct pyrt_async_hints *h);
/* --native's unwinder and symbols for pp (a live process). */
int prof_native_start(struct prof_process *pp, bool all, struct spy_err *err);
void prof_process_free(struct prof_process *pp);

#ifdef SPY_TEST_HOOKS
/*
 * Tests: open pid through a fake backend and the anchors of a synthetic
 * image instead of /proc and ELF files (tests/lib/fakepy.h); hints NULL:
 * the handle alone, for a root -s watches.
 */
extern int (*prof_test_open)(pid_t pid, struct spy_process *h, struct pyrt_hints *hints);
#endif

/* Exposed for unit tests: PY_VERSION_HEX (major.minor) from a path such as
 * ".../libpython3.11.so.1.0" or "/usr/bin/python2.7"; 0 if none. */
unsigned prof_version_from_path(const char *path);

/* ---- walk.c ---- */

struct prof_walk_opts {
	bool async;   /* cut at the running task (see prof_cut_at_task) */
	bool gc;      /* ask the holder's interpreter whether it collects */
	/* Remote reads the names' lookup may make in this listing (0: a
	 * tick's, PYRT_NAMES_TICK_READS); it resumes at the next one. */
	size_t names_reads;
	uint64_t now_ns; /* the tick's time, for the names' refresh; 0: read the clock */
};
/*
 * List every thread into pp->py and pp->w (tid, name, GIL as listed; empty
 * stacks); err may be NULL. With --native, after the Python threads, every
 * other thread the tracer seized (native_only).
 */
int prof_walk_list(struct prof_process *pp, const struct prof_walk_opts *o, struct spy_err *err);
/* Walk listed thread i; held: it alone is stopped (see walk.c). */
void prof_walk_thread(struct prof_process *pp, const struct prof_walk_opts *o, size_t i, bool held,
		      bool *gc_known);
/* Every thread the tracer seized, ascending, into pp->tids: how many (0 without a tracer). */
size_t prof_os_tids(struct prof_process *pp);
/* Whether listed thread j cannot run Python while listed thread h is held (h holds its GIL). */
bool prof_walk_frozen_by(struct prof_process *pp, size_t h, size_t j);
/* --native, stopped: unwind listed thread i; running again: merge it. < 0: the unwind failed. */
void prof_walk_unwind(struct prof_process *pp, size_t i);
int prof_walk_finish(struct prof_process *pp, size_t i);
/* The `task "NAME"` frame for the running task (--async), interned in strs. */
void prof_cut_at_task(struct prof_process *pp, struct spy_stack *st, const char *name, size_t keep);

/* ---- tick.c ---- */

/* How long threads were held (stopped) per tick, since the start; logged at the end (debug). */
#define PROF_HOLD_GOAL_NS (200 * 1000ull)
/*
 * A thread interrupted and not stopped within this (or half a period, if
 * shorter, but at least the floor) is off a CPU: one on a CPU takes the
 * interrupt within microseconds. It is then held as it is (see hold_one).
 */
#define PROF_OFFCPU_WAIT_NS (1000 * 1000ull)
#define PROF_OFFCPU_WAIT_MIN_NS (100 * 1000ull)
/*
 * The GIL holder's hold takes on no more walks of other threads past this
 * (see walk_frozen): with the one begun last (tens of us at 100 frames),
 * it stays within PROF_HOLD_GOAL_NS; at half the goal, bench/hold-time saw
 * 20 threads 100 deep with -i pass it in 8 ticks of 178.
 */
#define PROF_FROZEN_BUDGET_NS (PROF_HOLD_GOAL_NS / 4)
struct prof_holds {
	uint64_t ticks;            /* ticks that held something (attached walks) */
	uint64_t whole_ticks;      /* of those, ticks that paused the whole process */
	uint64_t longest_sum_ns;   /* per tick, the longest one thread was held: summed */
	uint64_t longest_max_ns;   /* ... and the largest */
	uint64_t total_sum_ns;     /* per tick, every thread's hold added up: summed */
	uint64_t total_max_ns;
	uint64_t over_goal;        /* ticks whose longest hold passed PROF_HOLD_GOAL_NS */
	uint64_t stops, stop_sum_ns;   /* one thread at a time: from the interrupt to its stop */
	uint64_t frozen;           /* threads walked behind the GIL holder's hold, not stopped */
	uint64_t offcpu;           /* threads held off a CPU: interrupted, not yet stopped (stop_thread 1) */
	uint64_t running;          /* threads read running under the GIL's switch count, not stopped */
	uint64_t retried;          /* ... whose count moved during a first read */
	uint64_t fell_back;        /* ... and again during the second: held */
	uint64_t last_holder;      /* threads held as their GIL's last holder (see read_running) */
	uint64_t stopped;          /* threads stopped, one at a time */
	uint64_t most_stopped;     /* the most threads stopped in one tick */
	uint64_t names_most;       /* the most remote reads the names' lookup made in a tick (not a process's first) */
};
/* -i: stacks of sleeping threads taken without a stop (still_stack in tick.c): kept, read. */
struct prof_still {
	uint64_t kept, read;
	uint64_t ticks;   /* ticks of a process none of whose threads had run: the last one again */
};

/* What a tick needs of the session, and what it counts. */
struct prof_tick_state {
	struct prof_opts o;
	struct prof_walk_opts wo;
	struct spy_strtab *strs;
	uint64_t offcpu_wait_ns;    /* how long a hold waits for a thread to stop before holding it as it is */
	struct prof_holds holds;
	struct prof_still still;
	struct prof_stats st;
	bool gc_known;
	struct prof_sample *kept;   /* this tick's kept stacks */
	size_t nkept, kept_alloc;
};

/*
 * How often a process's memory cache gives back the lines no walk read
 * since the last time (spy_process_trim): a line unread for 10 to 20 s
 * costs no memory, and a line a walk reads every tick is never fetched
 * again for it.
 */
#define PROF_TRIM_NS (10 * 1000 * 1000 * 1000ull)
/* One tick of pp: stop, walk, resume, keep (into ts->kept). */
void prof_tick_process(struct prof_tick_state *ts, struct prof_process *pp, uint64_t now, bool *gil_held);
/*
 * Between ticks, one at a time and each on its own clock: the reads a tick
 * needs besides the stacks (the maps re-read every few seconds, --async's
 * search for asyncio), so that none of them costs a tick.
 */
void prof_side_reads(struct prof_tick_state *e, struct prof_process *p, uint64_t now);
/* Forget every thread (closing its state files). */
void prof_threads_clear(struct prof_process *pp);
void prof_holds_log(const struct prof_tick_state *ts);

/* ---- nativeonly.c ---- */

/*
 * -i --native: native-only thread i (th), asleep, given its kept unwind
 * instead of a stop, when the kernel vouches for it; true if so.
 */
bool prof_still_native(struct prof_tick_state *e, struct prof_process *p, size_t i, struct prof_thread *th);
/* After native-only thread i's unwind while held (asleep: read so before the stop): kept for the above. */
void prof_keep_native(struct prof_process *p, size_t i, struct prof_thread *th, bool asleep);


/*
 * Without --native: the CPU time of p's threads that no listing names,
 * into e->st (unsampled_*); every second between ticks, and last at the
 * end (whatever the clock says).
 */
void prof_unsampled_read(struct prof_tick_state *e, struct prof_process *p, uint64_t now, bool last);

/*
 * How often a process's maps are re-read. Reads refuse addresses outside
 * the maps spy knows (spy_mem_plausible), and a process that grows its
 * heap (every interpreter during start-up, any program allocating) puts
 * new frames, thread states and Thread objects in new mappings: at once
 * when a walk or the names' lookup fails (at most every MAPS_RETRY_NS,
 * backing off while retries do not help), and every few seconds in any
 * case, so a slowly growing heap is followed too.
 */
#define MAPS_RETRY_NS (10 * 1000 * 1000ull)
#define MAPS_REFRESH_NS (2 * 1000 * 1000 * 1000ull)
#define MAPS_REFRESH_TICKS 38.0   /* 2 s at the agent's 19 Hz */

/* For a read that met trouble: the maps read again now, if the backoff allows (true). */
static inline bool prof_maps_reread(struct prof_process *p, uint64_t now)
{
	if (!p->h.tracer || !p->h.tracer->read_maps || now - p->last_maps_ns < p->maps_retry_ns) {
		return false;
	}
	p->h.tracer->read_maps(&p->h);
	p->last_maps_ns = now;
	return true;
}

/* Whether reading them helped: the next retry's wait, doubling while it does not. */
static inline void prof_maps_retried(struct prof_process *p, bool helped)
{
	p->maps_retry_ns = helped ? MAPS_RETRY_NS
		: p->maps_retry_ns < MAPS_REFRESH_NS / 2 ? 2 * p->maps_retry_ns : MAPS_REFRESH_NS;
}

#endif
