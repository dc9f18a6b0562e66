/*
 * The profiler: one Python-aware object per profiled process, pulled by
 * each command's own loop. It is the only module that uses sampler
 * (ptrace, memory, procfs, cores), pystate (the interpreter's structures)
 * and symbolize (ELF, native unwinding) together; commands see none of
 * them through it, only what is declared here.
 *
 * A profiler is a session over one process (named by pid, or launched),
 * with -s its Python descendants too, each a struct prof_process: handle,
 * runtime, caches, thread table and stop state together. prof_next()
 * waits for the next tick (looking after the processes meanwhile) and
 * hands back the stacks kept that tick; the command does everything else
 * (windows, progress, output) between calls. prof_look() (look.h) is the
 * one-shot read dump makes, of a live process or a core, through the same
 * thread walk the ticks use.
 *
 * Invariants, kept on every path, the command's included:
 * - A target is never left stopped: every stop is undone before a call
 *   returns; prof_detach() (and prof_close) let every process go.
 * - At most one thread is held at a time (by default), the GIL holder
 *   first; a thread asleep is not stopped without -i, and with -i not when
 *   its stack is known to be unchanged. A whole-process pause is taken
 *   only where one thread cannot be held alone.
 * - Everything done with a stack besides reading it (native symbols,
 *   merging, the command's aggregation) happens with the target running.
 * - Memory read from the target is bounded (pystate's walks, SPY_MAX_*);
 *   the reads besides the stacks (names, maps, asyncio hints) are spread
 *   over ticks on their own clocks, not repeated every tick.
 * - A stop signal (SIGINT, SIGTERM, SIGHUP) ends prof_next() and
 *   prof_look() at their next check, within a tick or a hold.
 *
 * The question a newcomer asks: why does a thread that sleeps count as
 * active when it holds the GIL? Because a thread waiting for the GIL also
 * sleeps (a futex), so the state letter cannot tell the holder from the
 * waiters; holding the GIL is the better witness of running Python code.
 */
#ifndef SPY_PROFILER_PROFILER_H
#define SPY_PROFILER_PROFILER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/sample.h"
#include "common/strtab.h"
#include "common/wait.h"

struct profiler;
struct prof_process;

struct prof_opts {
	double rate;        /* ticks per second, > 0 */
	double duration;    /* seconds; < 0 until stopped */
	bool idle;          /* keep idle threads' stacks */
	bool gil;           /* keep only the GIL holder's */
	bool nonblocking;   /* never stop the target */
	bool subprocesses;  /* -s: sample the Python descendants too */
	bool native, native_all;   /* merge native frames (all: the interpreter's too) */
	bool async;         /* a `task "NAME"` frame for the running asyncio task */
	bool gc;            /* mark the stacks taken while the collector ran */
	/*
	 * Ticks on multiples of the period on the monotonic clock (the first
	 * one up to a period late): profilers at one rate then tick at the
	 * same instants, woken by one timer (an agent's, one per process).
	 */
	bool aligned;
};


/* A span a sample was taken in (pystate/spans.c). */
struct prof_span {
	uint8_t trace_id[16]; /* big-endian */
	uint8_t span_id[8];
	const char *name;     /* interned, NULL if the span has none */
};

/* One stack kept in a tick, valid until the next prof_next(). */
struct prof_sample {
	const struct spy_stack *stack;   /* innermost first */
	const char *proc_root;     /* interned `process PID "cmdline"` */
	const char *thread_root;   /* interned `thread TID "name"`, NULL without a TID */
	const struct prof_process *proc;   /* the process it was taken from */
	pid_t pid, tid;
	bool holds_gil;
	bool gc;            /* the collector was running in this thread */
	bool idle;          /* only ever true with opts.idle */
	/*
	 * The OpenTelemetry SDK's current span of the thread (read while the
	 * thread could not run: held, frozen behind the GIL's holder, or the
	 * process paused), or NULL: none, no SDK, or not read.
	 */
	const struct prof_span *span;
	/*
	 * An exec was seen by the end of its tick (or before): its frames may
	 * name another program's files, which that program's rights (the
	 * credentials taken when the process was opened) do not cover. Their
	 * names are shown, but no file they name is to be opened.
	 */
	bool names_untrusted;
};

/* What prof_next() returns. */
enum prof_event {
	PROF_END = 0,    /* the duration ran out, a stop was requested, or the process exited */
	PROF_TICK = 1,   /* a tick: out holds its kept stacks */
	PROF_WAIT = 2,   /* nothing yet (at most 10 ms passed): the command's turn */
};

struct prof_tick {
	uint64_t start_ns;   /* when the tick began (ticker_now clock) */
	double t_s;          /* its time since the first tick, in seconds */
	const struct prof_sample *v;
	size_t n;
};

/* Counters since the start. */
struct prof_stats {
	uint64_t samples;           /* ticks sampled */
	uint64_t missed;            /* deadlines missed (the tick came too late) */
	uint64_t gil_ticks;         /* ticks in which a Python thread held the GIL */
	uint64_t thread_samples;    /* threads walked, summed over ticks */
	uint64_t active_samples;    /* of those, the ones running or holding the GIL */
	uint64_t errors[SPY_SAMPLE_ERR_MAX];
	size_t threads_seen;        /* distinct threads ever seen */
	size_t live_threads;        /* Python threads in the last tick, over every process */
	size_t processes;           /* processes sampled now */
	/* Without --native: threads without a Python thread state, not sampled, and their CPU time. */
	size_t unsampled_threads;
	uint64_t unsampled_ns;
	uint64_t start_ns, stop_ns; /* the first tick; the end (0 while running) */
};

/*
 * Open pid, or (pid 0) launch program and wait for its interpreter; then,
 * unless nonblocking, seize it. Installs the stop signals' handlers
 * (launch mode: the ones that forward a signal sent to spy alone).
 * -SPY_EINTR if stopped while waiting for a launched program's
 * interpreter; -SPY_EUSAGE for -g on a build without a GIL, -SPY_EVERSION
 * for --async where tasks cannot be read. strs must outlive the
 * profiler. prof_close() in every case (*out is set even on failure).
 */
int prof_open(struct profiler **out, const struct prof_opts *o, struct spy_strtab *strs, pid_t pid,
	      char **program, struct spy_err *err);
/* Wait for the next tick (first call: the clock starts), or at most 10 ms; see enum prof_event. */
enum prof_event prof_next(struct profiler *p, struct prof_tick *out);
/*
 * How long prof_next() may wait between looks at the processes (default
 * and least 10 ms): an agent with many processes at low rates looks less
 * often, noticing an exit or a stop signal later.
 */
void prof_set_poll(struct profiler *p, uint64_t ns);
/* A new rate (> 0) from the next tick on: an agent sharing a CPU budget among processes. */
void prof_set_rate(struct profiler *p, double rate);
/* Sampling is over (idempotent): spy's priority back to normal; the end is stamped. */
void prof_stop(struct profiler *p);
/* Resume and detach every process (idempotent); a stop signal is forwarded to a launched program. */
void prof_detach(struct profiler *p);
/*
 * After prof_detach: a launched program told to stop (or gone) is waited
 * for, a second signal giving up; its fate ("; python3 exited with status
 * 0", "; python3 (process 12) is still running") is appended to out.
 * Nothing for a --pid target.
 */
void prof_program_fate(struct profiler *p, struct spy_buf *out);
/* "; process N replaced its program (exec): sampling stopped there", for each. */
void prof_exec_notes(const struct profiler *p, struct spy_buf *out);
/* Whether the process named replaced its program (exec) while it was sampled. */
bool prof_execed(const struct profiler *p);
void prof_close(struct profiler *p);

void prof_stats(const struct profiler *p, struct prof_stats *out);
/* A stack the command could not keep: counted as dropped. */
void prof_dropped(struct profiler *p);
/* Seconds from the first tick to now_ns (or to the stop, once stopped). */
double prof_elapsed(const struct profiler *p, uint64_t now_ns);
/* With opts.gc: whether the runtime said at least once whether it was collecting. */
bool prof_gc_known(const struct profiler *p);

/* The process named or launched; what is known of a process. */
const struct prof_process *prof_root(const struct profiler *p);
pid_t prof_process_pid(const struct prof_process *pp);
const char *prof_process_cmdline(const struct prof_process *pp);
/* Its credentials when it was opened, before its memory was read (NULL for a core or unknown). */
struct spy_creds;
const struct spy_creds *prof_process_creds(const struct prof_process *pp);
const char *prof_process_python(const struct prof_process *pp);
/*
 * The Python version of the process named or launched, or of the first
 * Python descendant of a root -s watches (a shell, unshare: no Python
 * process itself); "" while none has been found.
 */
const char *prof_python(const struct profiler *p);
/*
 * Once sampling is over: 0, or -SPY_ENOPY where -s watched such a root and
 * no Python process appeared in its tree, with the line saying until when
 * (the tree exited, the duration ran out, a stop).
 */
int prof_check_found(const struct profiler *p, struct spy_err *err);

/* The resources of the process named or launched now: known is 0 for one gone. */
struct prof_resources {
	unsigned known;   /* PROF_RES_* */
	uint64_t utime, stime;   /* ns */
	uint64_t rss;            /* bytes */
	uint64_t threads, ctxsw;
	uint64_t read_bytes, write_bytes;
};
enum {
	PROF_RES_CPU = 1, PROF_RES_RSS = 2, PROF_RES_THREADS = 4, PROF_RES_CTXSW = 8, PROF_RES_IO = 16,
};
void prof_resources(struct profiler *p, struct prof_resources *out);

/* "N" or "N (reason n, reason n)". */
void prof_format_errors(const struct prof_stats *s, struct spy_buf *out);
uint64_t prof_errors(const struct prof_stats *s);

/* The stop signal received (SIGINT, SIGTERM, SIGHUP), or 0. */
int prof_stop_signal(void);
/* The handlers that set it, for a command that opens nothing through prof_open (dump). */
void prof_install_stop_handlers(void);
/* SIGHUP noted, not a stop, from now on (and whether one came since the last call): a daemon's. */
void prof_ignore_hup(void);
bool prof_hup_seen(void);

/* ---- one look (dump) ---- */

/* A thread's state, of the CLI contract, plus unknown (no /proc, no registers). */
enum prof_state {
	PROF_STATE_UNKNOWN = 0,
	PROF_STATE_RUNNING,
	PROF_STATE_IDLE,
	PROF_STATE_LOCK,      /* waiting on a lock */
	PROF_STATE_GIL,       /* waiting for the GIL */
};
/* The state a wait gives, knowing whether the GIL's address is known and its futex is the GIL's. */
enum prof_state prof_classify(const struct spy_wait *w, bool gil_known, bool futex_is_gil);

#endif
