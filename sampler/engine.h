/*
 * The sampling engine: the one loop behind record and top. It owns what a
 * live sample needs and commands must not redo: opening the process (named
 * by pid or launched, waiting for its interpreter), with -s its descendants
 * too, seizing them, the tick, stopping each thread for its walk (one at
 * a time), walking every thread, telling
 * idle from active, torn and truncated stacks, resuming, re-reading the
 * maps, noticing exits, detaching, and the summary line. Commands plug in
 * callbacks only: what to do with a kept stack (after the target runs
 * again) and what to do between ticks (a progress line, a redraw).
 *
 * The engine knows no Python: reading the interpreter is a walker's
 * business (struct eng_walker), supplied by cmd, where sampler, pystate
 * and symbolize meet. And it reaches a process only through a handle with
 * a backend table (struct spy_process): a live process, or a core, which
 * does nothing on pause and says what it cannot do; tests plug in a fake.
 *
 * The question a newcomer asks: why does a thread that sleeps count as
 * active when it holds the GIL? Because a thread waiting for the GIL also
 * sleeps (a futex), so the state letter cannot tell the holder from the
 * waiters; holding the GIL is the better witness of running Python code.
 */
#ifndef SPY_SAMPLER_ENGINE_H
#define SPY_SAMPLER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/sample.h"
#include "common/strtab.h"
#include "sampler/sampler.h"

/* ---- the process handle ---- */

struct spy_process;
/* One thread as a process reports it, and what it waits on (dump). */
struct spy_thread_info {
	pid_t tid;
	char comm[17];          /* "" if unknown (a core) */
	struct proc_wait wait;
};
/*
 * A backend: how one kind of process is reached. An operation a backend
 * cannot do is NULL, and the engine (or a command asking
 * spy_process_can()) treats it as such: a core has no attach, pause,
 * resume or poll, and its threads come from its notes.
 */
struct spy_process_ops {
	const char *kind;   /* "process", "core file" */
	pid_t (*pid)(const struct spy_process *p);
	const char *(*cmdline)(const struct spy_process *p);
	/* Seize every thread; -SPY_EPERM with remedy if refused. */
	int (*attach)(struct spy_process *p, struct spy_err *err);
	/* Stop every thread: 0, -SPY_EINTR (stop requested), -SPY_EGONE, other < 0 (err may be NULL). */
	int (*pause)(struct spy_process *p, struct spy_err *err);
	void (*resume)(struct spy_process *p);
	/*
	 * One thread at a time (default sampling): track once a tick, before
	 * (restart self-stopped threads, seize new ones; -SPY_EGONE once gone);
	 * stop_thread holds one thread (0, -SPY_ENOPROC: not one seized, -SPY_EGONE: exited,
	 * -SPY_EINTR, other < 0: did not stop in time; with wait_ns, 1: not
	 * stopped within it, so off a CPU and unable to run until it stops:
	 * held as it is); resume_thread lets it go.
	 * NULL: the backend can only pause the whole process.
	 */
	int (*track)(struct spy_process *p);
	int (*stop_thread)(struct spy_process *p, pid_t tid, uint64_t wait_ns);
	void (*resume_thread)(struct spy_process *p);
	/* Attached, between pauses: let self-stopped threads go on; -SPY_EGONE once gone. */
	int (*poll)(struct spy_process *p);
	void (*detach)(struct spy_process *p);
	/* Not attached: whether it still runs (one cheap read). */
	bool (*alive)(struct spy_process *p);
	/* The exit status reaped while tracing (see proc_exit_status). */
	bool (*exit_status)(const struct spy_process *p, int *status);
	/* Whether it exec'd while traced (see proc_execed); NULL: never. */
	bool (*execed)(const struct spy_process *p);
	/* Memory: a fresh view for a walk of a running process; re-read the maps. */
	void (*fresh_view)(struct spy_process *p);
	void (*read_maps)(struct spy_process *p);
	/* The process's CPU time, RSS, threads, switches and I/O now (see proc_read_resources). */
	void (*resources)(struct spy_process *p, struct proc_resources *out);
	/* Threads watched across ticks (see struct proc_task). */
	void (*task_open)(const struct spy_process *p, struct proc_task *t, pid_t tid);
	void (*task_refresh)(struct proc_task *t, bool with_cpu);
	/* Not scheduled since the last refresh read it asleep (proc_task_still); NULL: never known. */
	bool (*task_still)(struct proc_task *t);
	void (*task_close)(struct proc_task *t);
	void (*task_name)(const struct spy_process *p, pid_t tid, char *buf, size_t size);
	/* -s: every descendant's pid (into *out, free()); its executable, to notice an exec. */
	size_t (*descendants)(const struct spy_process *p, pid_t **out);
	void (*exe_of)(const struct spy_process *p, pid_t pid, char *buf, size_t size);
	/*
	 * Every thread, at most max, with what it waits on: a live process's
	 * from /proc (read before pausing: a stop interrupts the wait), a
	 * core's from its notes. < 0 if the list cannot be read.
	 */
	long (*threads)(struct spy_process *p, struct spy_thread_info *out, size_t max, struct spy_err *err);
	/* Look again at one thread's wait (a live process only; NULL for a core, which never changes). */
	void (*thread_wait)(const struct spy_process *p, pid_t tid, struct proc_wait *out);
};

struct spy_process {
	const struct spy_process_ops *ops;
	void *impl;   /* the backend's: struct proc, struct core, a test's fake */
};

/* The live backend over an opened proc, and the core backend over a core; the handle borrows it. */
struct spy_process spy_process_live(struct proc *p);
struct spy_process spy_process_core(struct core *c);

/* What a command may ask a backend for. */
enum spy_process_cap {
	SPY_CAP_PAUSE,     /* stop and resume its threads (a live process) */
	SPY_CAP_UNWIND,    /* unwind native stacks: needs stopped live threads */
	SPY_CAP_WATCH,     /* thread states over time, liveness */
};
/* Whether p can; if not and err, an error naming what p is. */
bool spy_process_can(const struct spy_process *p, enum spy_process_cap cap, const char *what,
		     struct spy_err *err);

/*
 * One look at p, for dump: seize and stop it if its backend can (a core
 * is read as it is), call fn unless a stop was requested, then resume and
 * detach, on every path. fn's error, else the attach's or pause's.
 */
int eng_look(struct spy_process *p, int (*fn)(void *ctx, struct spy_err *err), void *ctx,
	     struct spy_err *err);

/* ---- the walker: the interpreter's side, supplied by cmd ---- */

/* One thread as a walk found it. */
struct eng_thread {
	pid_t tid;            /* kernel thread id; 0 if unknown */
	bool holds_gil;
	bool attached;        /* free-threaded without a GIL: attached to the
				 interpreter, so running as a GIL holder is */
	bool gc;              /* the runtime was collecting garbage in this thread (walker's gc) */
	int rc;               /* < 0: the stack could not be read (the thread exited) */
	const char *name;     /* the interpreter's name for it (interned in the engine's
				 table), or NULL: the kernel's is used */
	struct spy_stack stack;
};

struct eng_walker {
	void *ctx;
	/*
	 * Open pid and find its interpreter: *proc is its handle, *py the
	 * walker's own state for it. On failure nothing is left open.
	 */
	int (*open)(void *ctx, pid_t pid, struct spy_process *proc, void **py, struct spy_err *err);
	/* Attach-time set-up (--native's unwinder); NULL if none. */
	int (*start)(void *ctx, void *py, struct spy_err *err);
	/* Walk every thread into th (at most max) and set *n; < 0 if the thread list is unreadable. */
	int (*walk)(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n);
	/*
	 * The same walk in two halves, for one thread held at a time: list
	 * every thread (tid, name, GIL as listed; empty stacks) with the
	 * process running, then walk listed thread i into t, held tells it
	 * the thread alone is stopped (it then also does what paused does
	 * for that thread). NULL: only walk is offered.
	 */
	int (*list)(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n);
	void (*walk_thread)(void *ctx, void *py, size_t i, struct eng_thread *t, bool held);
	/* walk_thread(held) needs the thread stopped for more than its memory (--native's registers). */
	bool held_only;
	/*
	 * Whether listed thread j cannot run Python while listed thread h is
	 * held: h, stopped, holds the GIL j's interpreter runs under (read
	 * now), so j's frames stay as they are until h is restarted, and j
	 * can be walked without a stop of its own. NULL: never.
	 */
	bool (*frozen_by)(void *ctx, void *py, size_t h, size_t j);
	/* In the stopped window, after the last walk: what must be read before the threads move (--native); NULL if nothing. */
	void (*paused)(void *ctx, void *py, const struct eng_thread *th, size_t n);
	/* Target running: finish thread i's stack for keeping (--native's merge); < 0 counted. NULL if nothing. */
	int (*finish)(void *ctx, void *py, size_t i, struct spy_stack *stack);
	void (*close)(void *ctx, void *py);
};

/* ---- the engine ---- */

struct eng_opts {
	double rate;        /* ticks per second, > 0 */
	double duration;    /* seconds; < 0 until stopped */
	bool idle;          /* keep idle threads' stacks */
	bool gil;           /* keep only the GIL holder's */
	bool nonblocking;   /* never pause the target */
	bool subprocesses;  /* -s: sample the Python descendants too */
	unsigned window_s;  /* continuous mode: close a window every this many seconds; 0: none */
};

/* Per-sample failures, by reason (their names are eng_error_names). */
enum eng_error {
	ENG_ERR_PAUSE,      /* the process could not be paused */
	ENG_ERR_THREADS,    /* the thread list could not be read */
	ENG_ERR_GONE,       /* a thread's stack could not be read (it exited) */
	ENG_ERR_TORN,       /* --nonblocking: a walk did not reach the root */
	ENG_ERR_TRUNCATED,  /* a walk stopped at a bound or bad memory (kept) */
	ENG_ERR_DROPPED,    /* the command refused a stack (stack callback < 0) */
	ENG_ERR_NATIVE,     /* --native: a thread could not be unwound (Python stack kept) */
	ENG_ERR_STATE,      /* a thread's state file would not open (descriptors?): sampled anyway */
	ENG_ERR_MAX
};
extern const char *const eng_error_names[ENG_ERR_MAX];

/* One OS thread seen, with its state kept across ticks. */
struct eng_os_thread {
	struct proc_task task;
	bool seen;          /* found by this tick's walk */
	bool had_cpu;       /* a CPU-time reading preceded this tick's (see the activity rule) */
	bool walked;        /* walked before (one thread at a time: no warm-up walk needed) */
	/*
	 * -i: the stack last read of a thread asleep, while it stays asleep
	 * (see still_stack in engine.c); valid is cleared by every refresh
	 * that finds the thread scheduled since.
	 */
	struct spy_stack kept;
	bool kept_valid;
	const char *root;   /* interned `thread TID "name"` */
	const char *name;   /* the walker's name the root was made with (NULL: the kernel's) */
	char comm[17];      /* the kernel's name, when first seen */
};

/* One process sampled: the one named or launched, or with -s a descendant. */
struct eng_process {
	struct spy_process proc;
	void *py;                 /* the walker's */
	pid_t pid;
	bool attached, gone;
	const char *root;         /* interned `process PID "cmdline"` */
	struct eng_os_thread *th;
	size_t nth, th_alloc;
	uint64_t last_maps_ns;
	uint64_t maps_retry_ns;   /* how long after the last maps read a failed walk may read them again */
	uint64_t last_alive_ns;
};

/* What the engine knows of one kept stack besides its frames. */
struct eng_sample {
	const struct eng_process *proc;
	const struct eng_os_thread *thread;   /* NULL if the walk gave no TID */
	pid_t tid;
	bool holds_gil;
	bool gc;            /* eng_thread.gc */
	bool idle;          /* only ever true with opts.idle */
	uint64_t now_ns;    /* when the tick's walk finished */
};

/*
 * Continuous mode: one window of the run, closed. Windows are whole
 * seconds of the wall clock, aligned to multiples of window_s (as the
 * backends' own agents align theirs), and contiguous: each one's until is
 * the next one's from. The first starts at the run's start (its second,
 * rounded down); the last ends where the run stops (rounded up, at least
 * one second long). A tick belongs to the window in which it is taken.
 */
struct eng_window {
	uint64_t seq;         /* 0, 1, ... */
	int64_t from_s;       /* unix seconds */
	int64_t until_s;
	uint64_t ticks;       /* ticks sampled in it */
	uint64_t missed;      /* deadlines missed in it (ticker.h) */
	bool last;            /* the run's end: no window follows */
};

/* How long threads were held (stopped) per tick, since the start; logged at the end (debug). */
#define ENG_HOLD_GOAL_NS (200 * 1000ull)
/*
 * A thread interrupted and not stopped within this (or half a period, if
 * shorter, but at least the floor) is off a CPU: one on a CPU takes the
 * interrupt within microseconds. It is then held as it is (see hold_one).
 */
#define ENG_OFFCPU_WAIT_NS (1000 * 1000ull)
#define ENG_OFFCPU_WAIT_MIN_NS (100 * 1000ull)
/*
 * The GIL holder's hold takes on no more walks of other threads past this
 * (see walk_frozen): with the one begun last (tens of us at 100 frames),
 * it stays within ENG_HOLD_GOAL_NS; at half the goal, bench/hold-time saw
 * 20 threads 100 deep with -i pass it in 8 ticks of 178.
 */
#define ENG_FROZEN_BUDGET_NS (ENG_HOLD_GOAL_NS / 4)
struct eng_holds {
	uint64_t ticks;            /* ticks that held something (attached walks) */
	uint64_t whole_ticks;      /* of those, ticks that paused the whole process */
	uint64_t longest_sum_ns;   /* per tick, the longest one thread was held: summed */
	uint64_t longest_max_ns;   /* ... and the largest */
	uint64_t total_sum_ns;     /* per tick, every thread's hold added up: summed */
	uint64_t total_max_ns;
	uint64_t over_goal;        /* ticks whose longest hold passed ENG_HOLD_GOAL_NS */
	uint64_t stops, stop_sum_ns;   /* one thread at a time: from the interrupt to its stop */
	uint64_t frozen;           /* threads walked behind the GIL holder's hold, not stopped */
	uint64_t offcpu;           /* threads held off a CPU: interrupted, not yet stopped (stop_thread 1) */
};
/* -i: stacks of sleeping threads taken without a stop (still_stack in engine.c): kept, read. */
struct eng_still {
	uint64_t kept, read;
};

struct engine;
struct eng_callbacks {
	void *ctx;
	/* Once per kept stack, target running. < 0 counts as dropped. */
	int (*stack)(void *ctx, struct engine *e, const struct spy_stack *stack,
		     const struct eng_sample *info);
	/* Between ticks, at least every 10 ms; false stops the loop. NULL: nothing to do. */
	bool (*wait)(void *ctx, struct engine *e, uint64_t now_ns);
	/*
	 * With opts.window_s: a window has closed (every stack of it was
	 * handed on before). Called between ticks, and once at the end of
	 * eng_run for the last one. Keep it short: the next tick waits.
	 */
	void (*window)(void *ctx, struct engine *e, const struct eng_window *w);
};

/* A descendant that was not (yet) a Python process, and when to look again. */
struct eng_rejected {
	pid_t pid;
	char exe[256];
	int tries;
};

struct engine {
	struct eng_opts o;
	struct eng_walker w;
	struct spy_strtab *strs;   /* the command's; roots are interned here */

	/* procs[0] is the process named or launched, kept to the end; the rest come and go (-s) */
	struct eng_process **procs;
	size_t nprocs, procs_alloc;
	struct eng_rejected *rej;
	size_t nrej, rej_alloc;
	uint64_t last_scan_ns;

	bool launched;
	struct spawn sp;          /* launch mode only */
	const char *program;      /* launch mode: argv[0], for the summary */

	struct eng_thread *scratch;   /* per tick, reused */
	bool *fresh;                  /* per tick: scratch[i]'s thread was first seen now */
	bool *listed_gil;             /* per tick: scratch[i] held the GIL when listed */
	bool *frozen;                 /* per tick: scratch[i] was walked behind the GIL holder's hold */
	struct eng_holds holds;
	struct eng_still still;

	/* counters since the start */
	uint64_t samples;           /* ticks sampled */
	uint64_t gil_ticks;         /* ticks in which a Python thread held the GIL */
	uint64_t thread_samples;    /* threads walked, summed over ticks */
	uint64_t active_samples;    /* of those, the ones running or holding the GIL */
	uint64_t errors[ENG_ERR_MAX];
	size_t threads_seen;        /* distinct threads ever seen */
	size_t live_threads;        /* Python threads in the last tick, over every process */
	struct ticker tk;
	uint64_t start_ns, end_ns, stop_ns;
	uint64_t offcpu_wait_ns;    /* how long a hold waits for a thread to stop before holding it as it is */
	/* eng_run raised spy to SCHED_RR (undone when it returns); when its CPU share was last looked at */
	bool sched_rt;
	uint64_t sched_check_ns, sched_cpu_ns;

	/* continuous mode: the open window */
	struct eng_window win;        /* from_s, seq and the counters at its start */
	uint64_t win_end_ns;          /* monotonic time at which it closes */
	int64_t wall_minus_mono_ns;   /* the wall clock at the start, less the monotonic one */
};

/*
 * Open pid, or (pid 0) launch program and wait for its interpreter; then,
 * unless nonblocking, seize it. Installs the SIGINT/SIGTERM handlers
 * (launch mode: the ones that forward a signal sent to spy alone).
 * -SPY_EINTR if stopped while waiting for a launched program's interpreter.
 * strs must outlive the engine. Call eng_release() in every case.
 */
int eng_open(struct engine *e, const struct eng_opts *o, const struct eng_walker *w,
	     struct spy_strtab *strs, pid_t pid, char **program, struct spy_err *err);
/*
 * The first process's resources now (record --slice and -f chrome read
 * them once per window, between ticks): known is 0 for a core, a process
 * gone, or a backend without them.
 */
void eng_resources(struct engine *e, struct proc_resources *out);
/* Sample until the duration, a stop signal, the first process's exit or wait says stop. */
void eng_run(struct engine *e, const struct eng_callbacks *cb);
/* Resume and detach every process (idempotent); a stop signal is forwarded to a launched program. */
void eng_detach(struct engine *e);
/*
 * After eng_detach: a launched program told to stop (or gone) is waited
 * for, a second signal giving up; its fate ("; python3 exited with status
 * 0", "; python3 (process 12) is still running") is appended to out.
 * Nothing for a --pid target.
 */
void eng_finish(struct engine *e, struct spy_buf *out);
void eng_release(struct engine *e);

/* The process named or launched. */
const struct eng_process *eng_root(const struct engine *e);
/* Whether the process named or launched has exited. */
bool eng_root_gone(const struct engine *e);
uint64_t eng_errors(const struct engine *e);
/* "N" or "N (reason n, reason n)". */
void eng_format_errors(const struct engine *e, struct spy_buf *out);
/* Seconds from the first tick to now_ns (or to the stop, once stopped). */
double eng_elapsed(const struct engine *e, uint64_t now_ns);
/* "spy: N samples in S s (R Hz), M missed ticks, errors: ..." */
void eng_summary(const struct engine *e, uint64_t now_ns, struct spy_buf *out);
/* "exited with status N", "was killed by signal N (name)" or "exited", for a wait status. */
void eng_describe_exit(struct spy_buf *out, int status);

#endif
