/*
 * The profiler's one-shot look (dump): a live process or a core read once,
 * every thread with its stack, wait, locals and the asyncio tasks. What a
 * look hands back is pystate's own value types (a thread, a local, a
 * task), as dump prints them, so this header is the one of the profiler's
 * that exposes pystate's; what is done with them (a value's repr) is a
 * profiler function, so cmd calls no pystate code. profiler.h, which
 * record, top and the agent use, shows none of pystate.
 */
#ifndef SPY_PROFILER_LOOK_H
#define SPY_PROFILER_LOOK_H

#include "profiler/profiler.h"
#include "pystate/pystate.h"

/* One frame's locals: [first, first + n) of the thread's locals array. */
struct prof_frame_locals {
	size_t first, n;
	bool unreadable;
	bool over_budget;     /* not (all) read: PROF_LOCALS_BUDGET or PROF_LOCALS_READS was spent */
};

/*
 * Memory --locals may take over all threads: a frame holds up to
 * PYRT_MAX_LOCALS values of a few hundred bytes, and frames x threads of
 * a hostile (or just deep, wide) target would multiply into gigabytes.
 */
#define PROF_LOCALS_BUDGET ((size_t)32 << 20)
/* ... and the remote reads they may take in all (pystate's bound for a dump). */
#define PROF_LOCALS_READS PYRT_LOCALS_READS
/* Tasks a look reads at most (each carries its chain: ~3 KiB). */
#define PROF_MAX_TASKS 4096
/* How long a look keeps a live target stopped at most: past it, it lets go with what it has. */
#define PROF_LOOK_STOP_NS (2000 * 1000 * 1000ull)

/* One thread as a look read it. */
struct prof_look_thread {
	struct py_thread py;
	struct spy_stack stack;
	struct spy_wait wait;
	enum prof_state state;
	char comm[17];
	const char *name;                  /* threading's name for it (interned), or NULL */
	bool in_gil;                       /* the futex waited on is the GIL's */
	bool native_only;                  /* --native: no Python thread state (py holds its TID alone) */
	/* --locals: per Python frame of stack, in order, and the values they point into. */
	struct prof_frame_locals *frame_locals;
	size_t nframe_locals;
	struct py_local *locals;
	size_t nlocals, alloc_locals;
};

struct prof_look_opts {
	int pid;                          /* a live process, or */
	const char *core, *exe, *root;    /* a core file (see core_open) */
	bool locals, native, native_all, tasks;
};

struct prof_look {
	struct prof_look_opts o;           /* what was asked for */
	int pid;
	const char *cmdline, *version, *binary;
	bool free_threaded;                /* a --disable-gil build */
	bool no_gil;                       /* ... running with its GIL off: nobody holds it */
	struct prof_look_thread *threads;  /* in the order listed */
	size_t n;
	size_t locals_left;                /* of PROF_LOCALS_BUDGET */
	/* --tasks: the asyncio tasks (tasks_total may exceed ntasks), or why there are none */
	struct pyrt_task *task_v;
	size_t ntasks, tasks_total;
	const char *tasks_error;
	struct spy_err tasks_err;
	/* The target was let go before everything was read: the stop's time limit passed. */
	bool incomplete;
	double stopped_ms;                 /* how long it was kept stopped */
	struct prof_process *pp;           /* the look's own */
	struct spy_strtab strs;
};

/*
 * One look at a process or a core, the same thread walk ticks use: each
 * thread's wait is read first (a stop interrupts it), then the target is
 * stopped (a core is read as it is) for the walk, at most
 * PROF_LOOK_STOP_NS, resumed and detached on every path, and with
 * --native the stacks are merged once it runs again. -SPY_EVERSION with
 * --tasks where tasks cannot be read; -SPY_EUSAGE for --native on a core.
 * prof_look_release() in every case.
 */
int prof_look(struct prof_look *out, const struct prof_look_opts *o, struct spy_err *err);
void prof_look_release(struct prof_look *l);

/* A short repr of a local's value, Python-like: None, 42, 'text', <list len=3>. */
void prof_value_repr(const struct py_value *v, struct spy_buf *out);

#endif
