/*
 * The sampling loop shared by the live commands (see sampling.h).
 *
 * A tick walks every Python thread of the process. By default the process
 * is paused for the walk and only for it: thread states are read before the
 * pause (a ptrace-stopped thread reads 't'), and everything done with the
 * stacks (native symbols, the caller's aggregation, printing) happens after
 * proc_resume. With --nonblocking nothing is paused; a walk that does not
 * reach the root may then be torn, and is counted rather than handed on.
 *
 * The question a newcomer asks: why does a thread that sleeps count as
 * active when it holds the GIL? Because a thread waiting for the GIL also
 * sleeps (a futex), so the state letter cannot tell the holder from the
 * waiters; holding the GIL is the better witness of running Python code.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "cmd/sampling.h"
#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"

/* Longest sleep between looks at the target (its exit, its signals) while waiting for a tick. */
#define POLL_NS (10 * 1000 * 1000ull)
/* Launch mode: how long a program has to show a Python interpreter, and how often we look. */
#define LAUNCH_WAIT_NS (5 * 1000 * 1000 * 1000ull)
#define LAUNCH_POLL_NS (10 * 1000 * 1000ull)
/*
 * The memory reader only serves mapped addresses, and a growing heap puts
 * frames in new mappings: re-read the maps soon after a tick with errors,
 * and every few seconds regardless.
 */
#define MAPS_RETRY_NS (100 * 1000 * 1000ull)
#define MAPS_REFRESH_NS (2 * 1000 * 1000 * 1000ull)

const char *const smp_error_names[SMP_ERR_MAX] = {
	[SMP_ERR_PAUSE] = "pause",
	[SMP_ERR_THREADS] = "threads",
	[SMP_ERR_GONE] = "thread-gone",
	[SMP_ERR_TORN] = "torn",
	[SMP_ERR_TRUNCATED] = "truncated",
	[SMP_ERR_DROPPED] = "dropped",
	[SMP_ERR_NATIVE] = "native",
};

/* ---- threads ---- */

static struct smp_thread *thread_get(struct sampling *s, pid_t tid, bool *fresh)
{
	for (size_t i = 0; i < s->nth; i++) {
		if (s->th[i].task.tid == tid) {
			*fresh = false;
			return &s->th[i];
		}
	}
	SPY_GROW(s->th, s->th_alloc, s->nth + 1);
	struct smp_thread *th = &s->th[s->nth++];
	memset(th, 0, sizeof(*th));
	proc_task_open(s->t.proc, &th->task, tid);
	s->threads_seen++;
	*fresh = true;
	return th;
}

/* Close the stat files of threads the last walk did not find (all: every one). */
static void threads_prune(struct sampling *s, bool all)
{
	size_t kept = 0;
	for (size_t i = 0; i < s->nth; i++) {
		if (!all && s->th[i].seen) {
			s->th[kept++] = s->th[i];
		} else {
			proc_task_close(&s->th[i].task);
		}
	}
	s->nth = kept;
}

/* ---- opening ---- */

int sampling_launch(struct spawn *sp, struct target *t, char **program, struct spy_err *err)
{
	int rc = spawn_start(sp, program, err);
	if (rc < 0) {
		return rc;
	}
	uint64_t deadline = ticker_now_ns() + LAUNCH_WAIT_NS;
	struct spy_err last = SPY_ERR_INIT;
	/* A shim (pyenv's) execs the interpreter later: each try opens the process afresh. */
	while ((rc = target_open_pid(t, sp->pid, &last)) < 0) {
		if (rc == -SPY_EPERM) {
			*err = last;
			return rc;
		}
		if (spawn_reap(sp, false)) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found: '%s' exited before one appeared",
					   program[0]);
		}
		if (proc_stop_requested) {
			spawn_forward(sp);
			return spy_err_set(err, SPY_EINTR, "interrupted");
		}
		if (ticker_now_ns() >= deadline) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in '%s' (process %d) after %llu s: %s",
					   program[0], (int)sp->pid,
					   (unsigned long long)(LAUNCH_WAIT_NS / 1000000000ull), last.msg);
		}
		struct timespec ts = { 0, (long)LAUNCH_POLL_NS };
		nanosleep(&ts, NULL);
	}
	return 0;
}

static int attach(struct sampling *s, struct spy_err *err)
{
	proc_mem_prefetch(s->t.proc, true);
	s->last_maps_ns = ticker_now_ns();
	if (s->o.nonblocking) {
		return 0;
	}
	if (s->o.native) {
		s->nat = spy_xcalloc(1, sizeof(*s->nat));
		int rc = native_init(s->nat, &s->t, s->o.native_all, err);
		if (rc < 0) {
			free(s->nat);
			s->nat = NULL;
			return rc;
		}
	}
	int rc = proc_list_threads(s->t.proc, err);
	if (rc < 0) {
		return rc;
	}
	rc = proc_attach(s->t.proc, err);
	s->attached = rc == 0;
	return rc;
}

int sampling_open(struct sampling *s, const struct smp_opts *o, pid_t pid, char **program,
		  struct spy_err *err)
{
	memset(s, 0, sizeof(*s));
	s->o = *o;
	int rc;
	if (program) {
		spawn_install_signals();
		s->launched = true;
		s->program = program[0];
		rc = sampling_launch(&s->sp, &s->t, program, err);
	} else {
		proc_install_stop_handlers();
		rc = target_open_pid(&s->t, pid, err);
	}
	if (rc < 0) {
		return rc;
	}
	s->opened = true;
	s->py = spy_xcalloc(SPY_MAX_THREADS, sizeof(*s->py));
	s->stacks = spy_xcalloc(SPY_MAX_THREADS, sizeof(*s->stacks));
	s->stack_rc = spy_xcalloc(SPY_MAX_THREADS, sizeof(*s->stack_rc));
	s->pcs = spy_xcalloc(SPY_MAX_THREADS, sizeof(*s->pcs));
	return attach(s, err);
}

/* ---- one tick ---- */

static void maybe_reread_maps(struct sampling *s, bool had_errors)
{
	uint64_t now = ticker_now_ns();
	uint64_t age = now - s->last_maps_ns;
	if (age < MAPS_REFRESH_NS && !(had_errors && age >= MAPS_RETRY_NS)) {
		return;
	}
	proc_read_maps(s->t.proc, NULL);
	s->last_maps_ns = now;
}

/*
 * The stopped window: list the threads and walk each stack (and, with
 * --native, unwind it). Returns the number of threads walked, or -1 if the
 * tick produced nothing (the process is gone, the pause failed or was
 * interrupted, the thread list unreadable).
 */
static long walk_paused(struct sampling *s)
{
	if (s->attached) {
		int rc = proc_pause(s->t.proc, NULL);
		if (rc == -SPY_EGONE) {
			s->gone = true;
		} else if (rc < 0 && rc != -SPY_EINTR) {
			s->errors[SMP_ERR_PAUSE]++;
		}
		if (rc < 0) {
			return -1;
		}
	}
	/* Paused, this is a fresh view already; --nonblocking has to ask for one. */
	proc_mem_invalidate(s->t.proc);
	size_t n = 0;
	int rc = pyrt_threads(s->t.rt, s->py, SPY_MAX_THREADS, &n, NULL);
	n = rc < 0 ? 0 : (n > SPY_MAX_THREADS ? SPY_MAX_THREADS : n);
	for (size_t i = 0; i < n; i++) {
		spy_stack_reset(&s->stacks[i]);
		s->stack_rc[i] = pyrt_stack(s->t.rt, &s->py[i], &s->stacks[i], NULL);
		if (s->nat) {
			native_unwind(s->nat, &s->t, s->py[i].native_tid, &s->pcs[i]);
		}
	}
	if (s->attached) {
		proc_resume(s->t.proc, NULL);
	}
	if (rc < 0) {
		s->errors[SMP_ERR_THREADS]++;
		return -1;
	}
	return (long)n;
}

/* Whether walked thread i is to be handed on, and if so whether it is idle. */
static bool keep_thread(struct sampling *s, size_t i, struct smp_thread *th, bool fresh, bool *idle)
{
	const struct py_thread *pt = &s->py[i];
	const struct spy_stack *st = &s->stacks[i];
	if (s->stack_rc[i] < 0) {
		s->errors[SMP_ERR_GONE]++;
		return false;
	}
	if (st->truncated) {
		bool torn = s->o.nonblocking;
		s->errors[torn ? SMP_ERR_TORN : SMP_ERR_TRUNCATED]++;
		if (torn) {
			return false;
		}
	}
	/*
	 * Not paused, a thread's state is read now. Paused, it was read before
	 * the pause; but a pause wakes sleepers, which then read R for a
	 * moment, and tasks.c can only tell that from running by the CPU time
	 * since its previous R reading. A thread without one (new, or never
	 * seen in R) holding no GIL is taken as idle this once.
	 */
	if (th && !pt->holds_gil && !s->attached) {
		proc_task_refresh(&th->task, false);
	}
	bool trusted = th && (!s->attached || (!fresh && th->had_cpu));
	bool active = pt->holds_gil || (trusted && proc_task_active(&th->task));
	s->thread_samples++;
	s->active_samples += active;
	*idle = !active;
	if (s->o.gil && !pt->holds_gil) {
		return false;
	}
	return (active || s->o.idle) && st->n > 0;
}

static void sample_tick(struct sampling *s, smp_stack_fn stack_fn, void *ctx)
{
	uint64_t errors_before = sampling_errors(s);
	for (size_t i = 0; i < s->nth; i++) {
		struct smp_thread *th = &s->th[i];
		th->seen = false;
		if (s->attached) {
			th->had_cpu = th->task.read_ns != 0;
			proc_task_refresh(&th->task, true);
		}
	}
	s->samples++;
	long n = walk_paused(s);
	if (n < 0) {
		if (!s->gone) {
			maybe_reread_maps(s, true);
		}
		return;
	}
	s->live_threads = (size_t)n;
	bool gil_held = false;
	struct smp_sample info = { .now_ns = ticker_now_ns() };
	for (size_t i = 0; i < (size_t)n; i++) {
		struct smp_thread *th = NULL;
		bool fresh = false;
		if (s->py[i].native_tid > 0) {
			th = thread_get(s, s->py[i].native_tid, &fresh);
			th->seen = true;
		}
		gil_held |= s->py[i].holds_gil;
		if (!keep_thread(s, i, th, fresh, &info.idle)) {
			continue;
		}
		if (s->nat && native_merge(s->nat, &s->t, &s->pcs[i], &s->stacks[i]) < 0) {
			s->errors[SMP_ERR_NATIVE]++;
		}
		info.tid = s->py[i].native_tid;
		info.holds_gil = s->py[i].holds_gil;
		if (stack_fn(ctx, s, &s->stacks[i], &info) < 0) {
			s->errors[SMP_ERR_DROPPED]++;
		}
	}
	s->gil_ticks += gil_held;
	threads_prune(s, false);
	maybe_reread_maps(s, sampling_errors(s) != errors_before);
}

/* ---- the loop ---- */

static void poll_target(struct sampling *s)
{
	if (s->attached) {
		s->gone = proc_poll(s->t.proc) == -SPY_EGONE;
		return;
	}
	if (s->launched) {
		/* Our own child: only our wait sees it exit. */
		s->gone = spawn_reap(&s->sp, false);
		return;
	}
	uint64_t now = ticker_now_ns();
	if (now - s->last_alive_ns >= POLL_NS) {
		s->gone = !proc_alive(s->t.proc);
		s->last_alive_ns = now;
	}
}

/* Sleep until the next tick, looking after the target meanwhile; false to stop. */
static bool next_tick(struct sampling *s, smp_wait_fn wait_fn, void *ctx)
{
	for (;;) {
		poll_target(s);
		if (s->gone || proc_stop_requested || ticker_deadline(&s->tk) >= s->end_ns) {
			return false;
		}
		if (wait_fn && !wait_fn(ctx, s, ticker_now_ns())) {
			return false;
		}
		if (ticker_wait(&s->tk, POLL_NS) == 1) {
			return true;
		}
	}
}

void sampling_run(struct sampling *s, smp_stack_fn stack_fn, smp_wait_fn wait_fn, void *ctx)
{
	s->start_ns = ticker_now_ns();
	s->end_ns = s->o.duration >= 0 ? s->start_ns + (uint64_t)(s->o.duration * 1e9) : UINT64_MAX;
	ticker_init(&s->tk, s->o.rate, s->start_ns);
	while (next_tick(s, wait_fn, ctx)) {
		sample_tick(s, stack_fn, ctx);
		uint64_t now = ticker_now_ns();
		/* A late last tick must not count deadlines past the end as missed. */
		ticker_take(&s->tk, now < s->end_ns ? now : s->end_ns);
	}
	s->stop_ns = ticker_now_ns();
}

/* ---- ending ---- */

void sampling_detach(struct sampling *s)
{
	if (s->attached) {
		proc_detach(s->t.proc);
		s->attached = false;
	}
	threads_prune(s, true);
}

void sampling_describe_exit(struct spy_buf *out, int status)
{
	if (WIFEXITED(status)) {
		spy_buf_addf(out, "exited with status %d", WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		spy_buf_addf(out, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	} else {
		spy_buf_adds(out, "exited");
	}
}

/* Wait for a program that was told to stop; a second signal gives up on it. */
static bool wait_program(struct sampling *s)
{
	int signals = proc_stop_requested ? 1 : 0;
	while (!s->sp.reaped) {
		proc_stop_requested = 0;
		if (spawn_reap(&s->sp, true)) {
			break;
		}
		if (proc_stop_requested && ++signals < 2) {
			spawn_forward(&s->sp);
		} else if (proc_stop_requested) {
			return false;
		}
	}
	return true;
}

void sampling_finish(struct sampling *s, struct spy_buf *out)
{
	if (!s->launched) {
		return;
	}
	int status = 0;
	bool known = false;
	if (s->opened && proc_exit_status(s->t.proc, &status)) {
		known = true;
	} else if (s->gone || proc_stop_requested) {
		if (proc_stop_requested) {
			spawn_forward(&s->sp);
		}
		known = wait_program(s);
		status = s->sp.status;
	} else {
		/* The duration ran out: the program goes on, as a --pid target would. */
		known = spawn_reap(&s->sp, false);
		status = s->sp.status;
	}
	if (known) {
		spy_buf_addf(out, "; %s ", s->program);
		sampling_describe_exit(out, status);
	} else {
		spy_buf_addf(out, "; %s (process %d) is still running", s->program, (int)s->sp.pid);
	}
}

void sampling_release(struct sampling *s)
{
	if (s->t.proc) {
		sampling_detach(s);
	}
	if (s->nat) {
		native_log_stats(s->nat);
		native_release(s->nat);
		free(s->nat);
	}
	for (size_t i = 0; s->stacks && i < SPY_MAX_THREADS; i++) {
		spy_stack_release(&s->stacks[i]);
	}
	for (size_t i = 0; s->pcs && i < SPY_MAX_THREADS; i++) {
		native_pcs_release(&s->pcs[i]);
	}
	free(s->stacks);
	free(s->pcs);
	free(s->stack_rc);
	free(s->py);
	free(s->th);
	target_release(&s->t);
	memset(s, 0, sizeof(*s));
}

/* ---- counters ---- */

uint64_t sampling_errors(const struct sampling *s)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < SMP_ERR_MAX; i++) {
		sum += s->errors[i];
	}
	return sum;
}

void sampling_format_errors(const struct sampling *s, struct spy_buf *out)
{
	spy_buf_addf(out, "%llu", (unsigned long long)sampling_errors(s));
	const char *sep = " (";
	for (size_t i = 0; i < SMP_ERR_MAX; i++) {
		if (!s->errors[i]) {
			continue;
		}
		spy_buf_addf(out, "%s%s %llu", sep, smp_error_names[i], (unsigned long long)s->errors[i]);
		sep = ", ";
	}
	if (sep[0] == ',') {
		spy_buf_adds(out, ")");
	}
}

double sampling_elapsed(const struct sampling *s, uint64_t now_ns)
{
	uint64_t end = s->stop_ns ? s->stop_ns : now_ns;
	/* 0 before the first tick */
	return s->start_ns && end > s->start_ns ? (double)(end - s->start_ns) / 1e9 : 0.0;
}
