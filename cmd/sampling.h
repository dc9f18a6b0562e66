/*
 * The sampling loop of the live commands: one Python process, named by its
 * pid or launched from `-- PROGRAM ARGS`, sampled at a fixed rate until a
 * duration runs out, a stop signal arrives or the process exits.
 *
 * The loop owns everything a sample needs (the target, its threads' stat
 * files for idle detection, the per-tick scratch stacks, the ticker, the
 * error counters) and hands each kept stack to the caller's stack_fn, always
 * after the target has been resumed: callers aggregate and print, they never
 * see a paused process. Between ticks it calls the caller's wait_fn (at most
 * every POLL interval), where a live view redraws itself.
 *
 * Contracts:
 *  - sampling_open() installs the SIGINT/SIGTERM handlers (launch mode: the
 *    ones that forward a signal sent to spy alone), opens the target and,
 *    unless nonblocking, seizes it. On failure nothing is left attached;
 *    call sampling_release() in every case.
 *  - sampling_run() returns with the target still attached;
 *    sampling_detach() resumes and detaches (idempotent), and
 *    sampling_release() detaches too, so no path leaves the target stopped.
 *  - Strings in the stacks handed to stack_fn are interned in s->t.strs,
 *    which lives until sampling_release().
 */
#ifndef SPY_CMD_SAMPLING_H
#define SPY_CMD_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cmd/native.h"
#include "cmd/target.h"
#include "common/buf.h"
#include "common/sample.h"
#include "sampler/sampler.h"

struct smp_opts {
	double rate;        /* ticks per second, > 0 */
	double duration;    /* seconds; < 0 until stopped */
	bool idle;          /* keep idle threads' stacks */
	bool gil;           /* keep only the GIL holder's */
	bool nonblocking;   /* never pause the target */
	bool native, native_all;
};

/* Per-sample failures, by reason (their names are smp_error_names). */
enum smp_error {
	SMP_ERR_PAUSE,      /* the process could not be paused */
	SMP_ERR_THREADS,    /* the thread list could not be read */
	SMP_ERR_GONE,       /* a thread's stack could not be read (it exited) */
	SMP_ERR_TORN,       /* --nonblocking: a walk did not reach the root */
	SMP_ERR_TRUNCATED,  /* a walk stopped at a bound or bad memory (kept) */
	SMP_ERR_DROPPED,    /* the caller refused a stack (stack_fn < 0) */
	SMP_ERR_NATIVE,     /* --native: a thread could not be unwound (Python stack kept) */
	SMP_ERR_MAX
};

/* What the loop knows of one kept stack besides its frames. */
struct smp_sample {
	pid_t tid;          /* kernel thread id; 0 if unknown */
	bool holds_gil;
	bool idle;          /* only ever true with opts.idle */
	uint64_t now_ns;    /* when the tick's walk finished */
};

struct sampling;
/* Called once per kept stack, target running. A negative return counts as dropped. */
typedef int (*smp_stack_fn)(void *ctx, struct sampling *s, const struct spy_stack *stack,
			    const struct smp_sample *info);
/* Called between ticks, at least every POLL interval; false stops the loop. */
typedef bool (*smp_wait_fn)(void *ctx, struct sampling *s, uint64_t now_ns);

struct smp_thread {
	struct proc_task task;
	bool seen;          /* found by this tick's walk */
	bool had_cpu;       /* a CPU-time reading preceded this tick's (see keep_thread) */
};

struct sampling {
	struct smp_opts o;
	struct target t;
	bool opened, attached, gone;
	bool launched;
	struct spawn sp;            /* launch mode only */
	char *program;              /* launch mode: argv[0], for the summary */
	struct native *nat;         /* --native; NULL without */

	struct smp_thread *th;
	size_t nth, th_alloc;
	size_t threads_seen;        /* distinct threads ever seen */

	/* per-tick scratch, reused */
	struct py_thread *py;
	struct spy_stack *stacks;
	int *stack_rc;
	struct native_pcs *pcs;

	/* counters since the start */
	uint64_t samples;           /* ticks sampled */
	uint64_t gil_ticks;         /* ticks in which a Python thread held the GIL */
	uint64_t thread_samples;    /* threads walked, summed over ticks */
	uint64_t active_samples;    /* of those, the ones running or holding the GIL */
	uint64_t errors[SMP_ERR_MAX];
	size_t live_threads;        /* Python threads in the last tick */
	struct ticker tk;
	uint64_t start_ns, end_ns, stop_ns;
	uint64_t last_maps_ns, last_alive_ns;
};

extern const char *const smp_error_names[SMP_ERR_MAX];

/*
 * Launch mode's first step, on its own: start program (spawn_start) and
 * wait until target_open_pid finds a Python runtime in it, retrying while
 * a shim execs the interpreter. -SPY_ENOPY if the program exits first or
 * none appears within a few seconds; -SPY_EINTR (signal forwarded) if a
 * stop signal arrives meanwhile; -SPY_EPERM as target_open_pid says.
 */
int sampling_launch(struct spawn *sp, struct target *t, char **program, struct spy_err *err);
/* Open pid, or (pid 0) launch program and wait for its interpreter; then attach. */
int sampling_open(struct sampling *s, const struct smp_opts *o, pid_t pid, char **program,
		  struct spy_err *err);
/* Sample until the duration, a stop signal, the target's exit or wait_fn says stop. */
void sampling_run(struct sampling *s, smp_stack_fn stack_fn, smp_wait_fn wait_fn, void *ctx);
/* Resume and detach (idempotent). */
void sampling_detach(struct sampling *s);
/*
 * After sampling_detach: a launched program told to stop (or gone) is
 * waited for, a second signal giving up; a summary of its fate ("; python3
 * exited with status 0", "; python3 (process 12) is still running") is
 * appended to out. Nothing for a --pid target.
 */
void sampling_finish(struct sampling *s, struct spy_buf *out);
/* "exited with status N", "was killed by signal N (name)" or "exited", for a wait status. */
void sampling_describe_exit(struct spy_buf *out, int status);
void sampling_release(struct sampling *s);

uint64_t sampling_errors(const struct sampling *s);
/* "N" or "N (reason n, reason n)". */
void sampling_format_errors(const struct sampling *s, struct spy_buf *out);
/* Seconds from the first tick to now_ns (or to the stop, once stopped). */
double sampling_elapsed(const struct sampling *s, uint64_t now_ns);

#endif
