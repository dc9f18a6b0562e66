/*
 * The sampling engine (see engine.h).
 *
 * A tick walks every Python thread of every process. By default one
 * thread is stopped at a time, for its own walk only (sample_held): thread
 * states are read before anything is stopped (a ptrace-stopped thread reads
 * 't'), and everything done with the stacks (native symbols, the command's
 * aggregation) happens after the thread runs again. The whole-process
 * pause (sample_paused) is left for a backend or walker that cannot do
 * that, and for a thread whose TID the walk cannot tell. With
 * --nonblocking nothing is stopped; a walk that does not reach the root
 * may then be torn, and is counted rather than handed on.
 *
 * Ticks are absolute deadlines (ticker.c); between them the loop polls the
 * processes, because a seized thread that receives a signal stays stopped
 * until its tracer restarts it.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "sampler/engine.h"

/* Longest sleep between looks at the processes (exits, signals) while waiting for a tick. */
#define POLL_NS (10 * 1000 * 1000ull)
/* Launch mode: how long a program has to show a Python interpreter, and how often we look. */
#define LAUNCH_WAIT_NS (5 * 1000 * 1000 * 1000ull)
#define LAUNCH_POLL_NS (10 * 1000 * 1000ull)
/*
 * How often a process's maps are re-read. The walk refuses addresses
 * outside the maps it knows, and a process that grows its heap (every
 * interpreter during start-up, any program allocating) puts new frames and
 * thread states in new mappings: at once when a walk fails (at most every
 * MAPS_RETRY_NS, backing off while retries do not help), and every few
 * seconds in any case, so a slowly growing heap is followed too.
 */
#define MAPS_RETRY_NS (10 * 1000 * 1000ull)
#define MAPS_REFRESH_NS (2 * 1000 * 1000 * 1000ull)
/* -s: how often descendants are looked for. */
#define SCAN_NS (100 * 1000 * 1000ull)
/*
 * A descendant that is not a Python process now may become one: a fork of
 * a shell that execs python, or a python that has not finished starting.
 * It is tried again while its executable stays the same for REJECT_TRIES
 * scans, and again whenever its executable changes (an exec).
 */
#define REJECT_TRIES 20

const char *const eng_error_names[ENG_ERR_MAX] = {
	[ENG_ERR_PAUSE] = "pause",
	[ENG_ERR_THREADS] = "threads",
	[ENG_ERR_GONE] = "thread-gone",
	[ENG_ERR_TORN] = "torn",
	[ENG_ERR_TRUNCATED] = "truncated",
	[ENG_ERR_DROPPED] = "dropped",
	[ENG_ERR_NATIVE] = "native",
	[ENG_ERR_STATE] = "state",
};

/* ---- the thread table ---- */

/* The thread's root frame, named by the walker's name or else the kernel's. */
static void thread_root(struct engine *e, struct eng_os_thread *th, const char *name)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "thread %d \"%s\"", (int)th->task.tid, name ? name : th->comm);
	th->root = spy_strtab_interns(e->strs, b.buf);
	th->name = name;
	spy_buf_release(&b);
}

/*
 * hint: where tid is likely to be (its place in the thread list: the table
 * grows in listing order), tried first. Without it, finding every thread
 * of a 150-thread process twice a tick was a scan of 22,500 entries.
 */
static struct eng_os_thread *thread_find(struct eng_process *p, pid_t tid, size_t hint)
{
	if (hint < p->nth && p->th[hint].task.tid == tid) {
		return &p->th[hint];
	}
	for (size_t i = 0; i < p->nth; i++) {
		if (p->th[i].task.tid == tid) {
			return &p->th[i];
		}
	}
	return NULL;
}

static struct eng_os_thread *thread_get(struct engine *e, struct eng_process *p, pid_t tid, size_t hint,
					bool *fresh)
{
	struct eng_os_thread *found = thread_find(p, tid, hint);
	if (found) {
		*fresh = false;
		return found;
	}
	SPY_GROW(p->th, p->th_alloc, p->nth + 1);
	struct eng_os_thread *th = &p->th[p->nth++];
	memset(th, 0, sizeof(*th));
	const struct spy_process_ops *ops = p->proc.ops;
	if (ops->task_open) {
		ops->task_open(&p->proc, &th->task, tid);
	} else {
		th->task.tid = tid;
		th->task.stat_fd = -1;
	}
	if (ops->task_name) {
		ops->task_name(&p->proc, tid, th->comm, sizeof(th->comm));
	}
	/* A first CPU reading, so that the next tick can trust an R (see is_active). */
	if (p->attached && ops->task_refresh) {
		ops->task_refresh(&th->task, true);
	}
	thread_root(e, th, NULL);
	e->threads_seen++;
	*fresh = true;
	return th;
}

/* Close the stat files of threads the last walk did not find (all: every one). */
static void threads_prune(struct eng_process *p, bool all)
{
	size_t kept = 0;
	for (size_t i = 0; i < p->nth; i++) {
		if (!all && p->th[i].seen) {
			p->th[kept++] = p->th[i];
		} else {
			if (p->proc.ops->task_close) {
				p->proc.ops->task_close(&p->th[i].task);
			}
			spy_stack_release(&p->th[i].kept);
		}
	}
	p->nth = kept;
}

/* ---- processes ---- */

/* Open pid through the walker into a new process entry, *out; on failure nothing is kept. */
static int process_open(struct engine *e, pid_t pid, struct eng_process **out, struct spy_err *err)
{
	struct eng_process *p = spy_xcalloc(1, sizeof(*p));
	int rc = e->w.open(e->w.ctx, pid, &p->proc, &p->py, err);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->pid = p->proc.ops->pid(&p->proc);
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "process %d \"%s\"", (int)p->pid, p->proc.ops->cmdline(&p->proc));
	p->root = spy_strtab_interns(e->strs, b.buf);
	spy_buf_release(&b);
	SPY_GROW(e->procs, e->procs_alloc, e->nprocs + 1);
	e->procs[e->nprocs++] = p;
	*out = p;
	return 0;
}

/* Unless nonblocking (or the backend cannot), seize it. */
static int process_start(struct engine *e, struct eng_process *p, struct spy_err *err)
{
	p->last_maps_ns = ticker_now_ns();
	p->maps_retry_ns = MAPS_RETRY_NS;
	if (e->o.nonblocking || !p->proc.ops->attach) {
		return 0;
	}
	int rc = e->w.start ? e->w.start(e->w.ctx, p->py, err) : 0;
	if (rc == 0) {
		rc = p->proc.ops->attach(&p->proc, err);
	}
	p->attached = rc == 0;
	return rc;
}

static void process_stop(struct eng_process *p)
{
	if (p->attached) {
		p->proc.ops->detach(&p->proc);
		p->attached = false;
	}
	threads_prune(p, true);
}

static void process_free(struct engine *e, struct eng_process *p)
{
	process_stop(p);
	free(p->th);
	e->w.close(e->w.ctx, p->py);
	free(p);
}

/* ---- launching ---- */

static int launch(struct engine *e, char **program, struct spy_err *err)
{
	int rc = spawn_start(&e->sp, program, err);
	if (rc < 0) {
		return rc;
	}
	e->launched = true;
	e->program = program[0];
	uint64_t deadline = ticker_now_ns() + LAUNCH_WAIT_NS;
	struct spy_err last = SPY_ERR_INIT;
	struct eng_process *p;
	/* A shim (pyenv's) execs the interpreter later: each try opens the process afresh. */
	while ((rc = process_open(e, e->sp.pid, &p, &last)) < 0) {
		if (rc == -SPY_EPERM) {
			*err = last;
			spawn_abandon(&e->sp);
			return rc;
		}
		if (spawn_reap(&e->sp, false)) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found: '%s' exited before one appeared",
					   program[0]);
		}
		if (proc_stop_requested) {
			spawn_forward(&e->sp);
			return spy_err_set(err, SPY_EINTR, "interrupted");
		}
		if (ticker_now_ns() >= deadline) {
			/* Not left running unsupervised, as root or otherwise. */
			spawn_abandon(&e->sp);
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in '%s' (process %d) after %llu s: %s",
					   program[0], (int)e->sp.pid,
					   (unsigned long long)(LAUNCH_WAIT_NS / 1000000000ull), last.msg);
		}
		struct timespec ts = { 0, (long)LAUNCH_POLL_NS };
		nanosleep(&ts, NULL);
	}
	return 0;
}

int eng_open(struct engine *e, const struct eng_opts *o, const struct eng_walker *w,
	     struct spy_strtab *strs, pid_t pid, char **program, struct spy_err *err)
{
	memset(e, 0, sizeof(*e));
	e->o = *o;
	e->w = *w;
	e->strs = strs;
	e->scratch = spy_xcalloc(SPY_MAX_THREADS, sizeof(*e->scratch));
	e->fresh = spy_xcalloc(SPY_MAX_THREADS, sizeof(*e->fresh));
	e->listed_gil = spy_xcalloc(SPY_MAX_THREADS, sizeof(*e->listed_gil));
	e->frozen = spy_xcalloc(SPY_MAX_THREADS, sizeof(*e->frozen));
	int rc;
	if (program) {
		spawn_install_signals();
		rc = launch(e, program, err);
	} else {
		struct eng_process *p;
		proc_install_stop_handlers();
		rc = process_open(e, pid, &p, err);
	}
	if (rc < 0) {
		return rc;
	}
	rc = process_start(e, e->procs[0], err);
	if (rc < 0 && program) {
		spawn_abandon(&e->sp);
	}
	return rc;
}

/* ---- one tick ---- */

/* Walk every thread of p into e->scratch. pyrt's error, else 1 if some stack is not whole, else 0. */
static int walk(struct engine *e, struct eng_process *p, size_t *n_out)
{
	size_t n = 0;
	/* Paused, the view is fresh already; a running process needs one asked for. */
	if (!p->attached && p->proc.ops->fresh_view) {
		p->proc.ops->fresh_view(&p->proc);
	}
	int rc = e->w.walk(e->w.ctx, p->py, e->scratch, SPY_MAX_THREADS, &n);
	*n_out = rc < 0 ? 0 : (n > SPY_MAX_THREADS ? SPY_MAX_THREADS : n);
	if (rc < 0) {
		return rc;
	}
	bool whole = true;
	for (size_t i = 0; i < *n_out; i++) {
		whole = whole && e->scratch[i].rc == 0 && !e->scratch[i].stack.truncated;
	}
	return whole ? 0 : 1;
}

/*
 * A walk that met trouble may only have met memory mapped since the maps
 * were read: read them again and walk once more before the process moves
 * on. A retry that does not help makes the next one wait longer, so a
 * stack truncated for good (deeper than the bound) does not cost a maps
 * read every tick.
 */
static int walk_with_retry(struct engine *e, struct eng_process *p, size_t *n, uint64_t now)
{
	int rc = walk(e, p, n);
	if (rc == 0 || !p->proc.ops->read_maps || now - p->last_maps_ns < p->maps_retry_ns) {
		return rc;
	}
	p->proc.ops->read_maps(&p->proc);
	p->last_maps_ns = now;
	rc = walk(e, p, n);
	p->maps_retry_ns = rc == 0 ? MAPS_RETRY_NS
		: p->maps_retry_ns < MAPS_REFRESH_NS / 2 ? 2 * p->maps_retry_ns : MAPS_REFRESH_NS;
	return rc;
}

/*
 * The activity rule: whether walked thread t is active. Not paused, a
 * thread's state is read now. Paused, it was read before the pause; but a
 * pause wakes sleepers, which then read R for a moment, and tasks.c can
 * only tell that from running by the CPU time since its previous R
 * reading. A thread without one (new this tick, or not seen in R since)
 * holding no GIL is taken as idle this once; so is one without a TID.
 */
static bool is_active(struct eng_process *p, const struct eng_thread *t, struct eng_os_thread *th,
		      bool fresh, uint64_t *failed)
{
	if (t->holds_gil || t->attached) {
		return true;
	}
	if (!th) {
		return false;
	}
	if (!p->attached && p->proc.ops->task_refresh) {
		p->proc.ops->task_refresh(&th->task, false);
		*failed += th->task.failed;
	}
	/* A state that could not be read is no reason to call a thread idle. */
	bool trusted = !p->attached || (!fresh && th->had_cpu) || th->task.failed;
	return trusted && proc_task_active(&th->task);
}

/* Whether walked thread i is handed on; sets *idle. */
static bool keep(struct engine *e, struct eng_process *p, size_t i, struct eng_os_thread *th,
		 bool fresh, bool *idle)
{
	const struct eng_thread *t = &e->scratch[i];
	if (t->rc < 0) {
		e->errors[ENG_ERR_GONE]++;
		return false;
	}
	if (t->stack.truncated) {
		bool torn = !p->attached;
		e->errors[torn ? ENG_ERR_TORN : ENG_ERR_TRUNCATED]++;
		if (torn) {
			return false;
		}
	}
	bool active = is_active(p, t, th, fresh, &e->errors[ENG_ERR_STATE]);
	e->thread_samples++;
	e->active_samples += active;
	*idle = !active;
	if (e->o.gil && !t->holds_gil) {
		return false;
	}
	return (active || e->o.idle) && t->stack.n > 0;
}

void eng_resources(struct engine *e, struct proc_resources *out)
{
	memset(out, 0, sizeof(*out));
	struct eng_process *ep = e->nprocs ? e->procs[0] : NULL;
	if (ep && !ep->gone && ep->proc.ops->resources) {
		ep->proc.ops->resources(&ep->proc, out);
	}
}

/* Each thread's state, read before anything is stopped (a ptrace-stopped thread reads 't'). */
static void threads_refresh(struct engine *e, struct eng_process *p)
{
	const struct spy_process_ops *ops = p->proc.ops;
	for (size_t i = 0; i < p->nth; i++) {
		struct eng_os_thread *th = &p->th[i];
		th->seen = false;
		if (p->attached && ops->task_refresh) {
			th->had_cpu = th->task.read_ns != 0;
			ops->task_refresh(&th->task, true);
			e->errors[ENG_ERR_STATE] += th->task.failed;
			/* Scheduled since its stack was kept: it may have changed. */
			th->kept_valid = th->kept_valid && th->task.slept;
		}
	}
}

/* One tick's holds: the longest any thread was held, and all of them together. */
static void hold_account(struct engine *e, uint64_t longest, uint64_t total, bool whole)
{
	struct eng_holds *h = &e->holds;
	h->ticks++;
	h->whole_ticks += whole;
	h->longest_sum_ns += longest;
	h->total_sum_ns += total;
	h->longest_max_ns = longest > h->longest_max_ns ? longest : h->longest_max_ns;
	h->total_max_ns = total > h->total_max_ns ? total : h->total_max_ns;
	h->over_goal += longest > ENG_HOLD_GOAL_NS;
	spy_log(SPY_LOG_TRACE, "engine: tick held %s for %.1f us, %.1f us in all",
		whole ? "the whole process" : "one thread at most", (double)longest / 1e3,
		(double)total / 1e3);
}

/* The stopped window: pause, walk (and what the walker reads paused), resume. n, or < 0 for nothing. */
static long sample_paused(struct engine *e, struct eng_process *p, uint64_t now)
{
	const struct spy_process_ops *ops = p->proc.ops;
	threads_refresh(e, p);
	uint64_t t0 = ticker_now_ns();
	if (p->attached) {
		int rc = ops->pause(&p->proc, NULL);
		if (rc == -SPY_EGONE) {
			p->gone = true;
		} else if (rc < 0 && rc != -SPY_EINTR) {
			e->errors[ENG_ERR_PAUSE]++;
		}
		if (rc < 0) {
			return -1;
		}
	}
	size_t n = 0;
	int rc = walk_with_retry(e, p, &n, now);
	if (rc >= 0 && e->w.paused) {
		e->w.paused(e->w.ctx, p->py, e->scratch, n);
	}
	if (p->attached) {
		ops->resume(&p->proc);
		/* Every thread was held from the pause to the resume. */
		uint64_t held = ticker_now_ns() - t0;
		hold_account(e, held, held * (n ? n : 1), true);
	}
	if (rc < 0) {
		e->errors[ENG_ERR_THREADS]++;
		return -1;
	}
	return (long)n;
}

/*
 * Whether listed thread t must be walked this tick: one that can have run
 * Python since the last tick (running, or holding the GIL as listed), or
 * any with --idle. The stack of a thread asleep is handed on only with
 * --idle, so without it a sleeper is neither stopped nor read (stopping
 * one would only interrupt its sleep).
 */
static bool wanted(struct engine *e, const struct eng_thread *t, const struct eng_os_thread *th)
{
	return e->o.idle || t->holds_gil || t->attached || !th || proc_task_active(&th->task);
}

/*
 * Walk listed thread i while held. A walk that met trouble may have met
 * memory mapped since the maps were read: as walk_with_retry, once, with
 * the same backoff.
 */
static void walk_held(struct engine *e, struct eng_process *p, size_t i, uint64_t now)
{
	struct eng_thread *t = &e->scratch[i];
	e->w.walk_thread(e->w.ctx, p->py, i, t, true);
	if ((t->rc == 0 && !t->stack.truncated) || !p->proc.ops->read_maps ||
	    now - p->last_maps_ns < p->maps_retry_ns) {
		return;
	}
	p->proc.ops->read_maps(&p->proc);
	p->last_maps_ns = now;
	e->w.walk_thread(e->w.ctx, p->py, i, t, true);
	bool ok = t->rc == 0 && !t->stack.truncated;
	p->maps_retry_ns = ok ? MAPS_RETRY_NS
		: p->maps_retry_ns < MAPS_REFRESH_NS / 2 ? 2 * p->maps_retry_ns : MAPS_REFRESH_NS;
}

/*
 * -i: the stack of listed thread i, asleep, without stopping it. A thread
 * that has not been on a CPU since this tick's refresh read it asleep
 * cannot have changed its stack, and stopping it would only wake it (and
 * being woken, it would count as scheduled at the next tick, and be
 * stopped again): on a pool of 150 idle threads that was 150 stops a tick.
 * So: its stack kept from a read while it slept, if it has slept since;
 * else read running and kept if schedstat says it was not scheduled during
 * the read. Anything else (running, holding the GIL when listed, no
 * schedstat, a walk that met trouble) is left to the walk while held.
 */
static bool still_stack(struct engine *e, struct eng_process *p, size_t i, struct eng_os_thread *th)
{
	struct eng_thread *t = &e->scratch[i];
	const struct spy_process_ops *ops = p->proc.ops;
	if (!e->o.idle || e->listed_gil[i] || e->w.held_only || !ops->task_still ||
	    th->task.failed || !th->task.state || proc_task_active(&th->task)) {
		return false;
	}
	if (th->kept_valid) {
		spy_stack_copy(&t->stack, &th->kept);
		t->rc = 0;
		t->holds_gil = t->attached = false;
		t->gc = false;
		e->still.kept++;
		return true;
	}
	e->w.walk_thread(e->w.ctx, p->py, i, t, false);
	if (t->rc != 0 || t->stack.truncated || !ops->task_still(&th->task)) {
		return false;
	}
	t->holds_gil = t->attached = false;
	spy_stack_copy(&th->kept, &t->stack);
	th->kept_valid = true;
	th->walked = true;
	e->still.read++;
	return true;
}

/* One tick of sample_held so far. */
struct hold_tick {
	size_t n;                  /* threads listed */
	uint64_t longest, total;   /* ns held */
	bool stop;                 /* a stop was requested while waiting */
};

/*
 * Listed thread i's OS thread, looked up for this tick; NULL when nothing
 * more is to be done for it: not worth walking, or -i's stack taken
 * without a stop (still_stack).
 */
static struct eng_os_thread *hold_prepare(struct engine *e, struct eng_process *p, size_t i)
{
	struct eng_thread *t = &e->scratch[i];
	bool fresh;
	struct eng_os_thread *th = thread_get(e, p, t->tid, i, &fresh);
	e->fresh[i] = fresh;
	if (!wanted(e, t, th)) {
		t->holds_gil = false;
		return NULL;
	}
	return still_stack(e, p, i, th) ? NULL : th;
}

/*
 * While the GIL holder h is held, the threads that run Python under its
 * GIL cannot: their frames are what they will be until h is restarted, so
 * they are walked now without stops of their own (a thread busy in C
 * with the GIL released would otherwise have to get a core to stop, which
 * on a saturated machine takes milliseconds). Only as many as keep h's
 * hold within ENG_FROZEN_BUDGET_NS; the rest are held one at a time. On
 * 3.12+ the holder is read from the GIL itself, which a thread taking it
 * marks locked a few instructions before naming itself: a walk started
 * in that window may be torn, bounded and validated like a
 * --nonblocking one (up to 3.11 the holder is the thread state swapped
 * in after the GIL is taken, and the question does not arise).
 */
static void walk_frozen(struct engine *e, struct eng_process *p, size_t h, uint64_t held_from,
			const struct hold_tick *ht)
{
	if (!e->w.frozen_by || e->w.held_only || !e->scratch[h].holds_gil) {
		return;
	}
	for (size_t j = 0; j < ht->n && !proc_stop_requested; j++) {
		if (j == h || e->listed_gil[j] || e->frozen[j]) {
			continue;
		}
		if (ticker_now_ns() - held_from >= ENG_FROZEN_BUDGET_NS) {
			return;
		}
		/*
		 * A thread never walked is left to its own hold: its first walk
		 * decodes every code object it meets, too long to add to h's.
		 */
		const struct eng_os_thread *known = thread_find(p, e->scratch[j].tid, j);
		if (!known || !known->walked || !e->w.frozen_by(e->w.ctx, p->py, h, j)) {
			continue;
		}
		e->frozen[j] = true;
		struct eng_os_thread *th = hold_prepare(e, p, j);
		if (!th) {
			continue;
		}
		struct eng_thread *t = &e->scratch[j];
		e->w.walk_thread(e->w.ctx, p->py, j, t, false);
		t->holds_gil = false;
		th->walked = true;
		e->holds.frozen++;
	}
}

/* Stop listed thread i alone (if worth it), walk it (and what its GIL freezes), restart it. */
static void hold_one(struct engine *e, struct eng_process *p, size_t i, uint64_t now,
		     struct hold_tick *ht)
{
	const struct spy_process_ops *ops = p->proc.ops;
	struct eng_thread *t = &e->scratch[i];
	struct eng_os_thread *th = hold_prepare(e, p, i);
	if (!th) {
		return;
	}
	/*
	 * A thread walked for the first time has code objects the walker has
	 * not decoded yet, which would triple its first hold: walk it once
	 * running first, as --nonblocking would (the walk tolerates a torn
	 * read), so that the walk while held finds them decoded.
	 */
	if (!th->walked) {
		e->w.walk_thread(e->w.ctx, p->py, i, t, false);
		th->walked = true;
	}
	uint64_t t0 = ticker_now_ns();
	int rc = ops->stop_thread(&p->proc, t->tid, e->w.held_only ? 0 : e->offcpu_wait_ns);
	if (rc == -SPY_EINTR) {
		ht->stop = true;
		return;
	}
	if (rc < 0) {
		/*
		 * Exited; or new since the tick's seizing (it is seized for the
		 * next; a TID that is not the target's never is): not walked, as
		 * a whole-process pause would have walked it only if it had
		 * stopped it; or it would not stop in time.
		 */
		t->rc = rc == -SPY_EGONE ? rc : 0;
		e->errors[ENG_ERR_PAUSE] += rc != -SPY_EGONE && rc != -SPY_ENOPROC;
		t->holds_gil = false;
		return;
	}
	/* Held from its stop, not from the interrupt: until then it ran. */
	uint64_t t1 = ticker_now_ns();
	if (rc == 1) {
		/* Off a CPU, interrupted: it runs nothing until it stops, and then waits for a poll. */
		e->holds.offcpu++;
	} else {
		e->holds.stop_sum_ns += t1 - t0;
		e->holds.stops++;
	}
	walk_held(e, p, i, now);
	walk_frozen(e, p, i, t1, ht);
	ops->resume_thread(&p->proc);
	uint64_t held = ticker_now_ns() - t1;
	ht->longest = held > ht->longest ? held : ht->longest;
	ht->total += held;
}

/*
 * The default: one thread held at a time. The thread list is read with the
 * process running (a listing torn by a thread starting or ending is
 * bounded and validated like a --nonblocking one, and each listed thread
 * is checked again once held, see pyrt_thread_recheck); then each thread
 * worth walking is stopped, its own stack read (nothing else writes a
 * thread's frames, and the code objects they reach are kept alive by
 * them), and restarted before the next is touched. The GIL is read while
 * the thread is held, when it cannot change hands to or from that thread.
 * n, -1 for nothing, or -2 to take the whole-process pause instead (a
 * thread without a known TID cannot be held alone).
 */
static long sample_held(struct engine *e, struct eng_process *p, uint64_t now)
{
	const struct spy_process_ops *ops = p->proc.ops;
	threads_refresh(e, p);
	int rc = ops->track(&p->proc);
	if (rc == -SPY_EGONE) {
		p->gone = true;
		return -1;
	}
	size_t n = 0;
	if (p->proc.ops->fresh_view) {
		p->proc.ops->fresh_view(&p->proc);
	}
	rc = e->w.list(e->w.ctx, p->py, e->scratch, SPY_MAX_THREADS, &n);
	if (rc < 0 && ops->read_maps && now - p->last_maps_ns >= p->maps_retry_ns) {
		ops->read_maps(&p->proc);
		p->last_maps_ns = now;
		rc = e->w.list(e->w.ctx, p->py, e->scratch, SPY_MAX_THREADS, &n);
	}
	if (rc < 0) {
		e->errors[ENG_ERR_THREADS]++;
		return -1;
	}
	n = n > SPY_MAX_THREADS ? SPY_MAX_THREADS : n;
	for (size_t i = 0; i < n; i++) {
		if (e->scratch[i].tid <= 0) {
			return -2;
		}
	}
	/*
	 * A GIL has one holder a tick, as in a whole-process pause: the thread
	 * the listing saw holding it, if it still does once held (the walker
	 * sees to that). It is held first, before it can let go; a thread
	 * that takes the GIL after the listing is not a second holder.
	 */
	for (size_t i = 0; i < n; i++) {
		e->listed_gil[i] = e->scratch[i].holds_gil;
		e->frozen[i] = false;
	}
	struct hold_tick ht = { .n = n };
	for (int pass = 0; pass < 2 && !ht.stop; pass++) {
		for (size_t i = 0; i < n && !ht.stop && !proc_stop_requested; i++) {
			if ((pass == 0) == e->listed_gil[i] && !e->frozen[i]) {
				hold_one(e, p, i, now, &ht);
			}
		}
	}
	hold_account(e, ht.longest, ht.total, false);
	return (long)n;
}

static void sample_process(struct engine *e, struct eng_process *p, const struct eng_callbacks *cb,
			   bool *gil_held)
{
	uint64_t now = ticker_now_ns();
	bool one = p->attached && p->proc.ops->stop_thread && e->w.list && e->w.walk_thread;
	long n = one ? sample_held(e, p, now) : -2;
	if (n == -2) {
		one = false;
		n = sample_paused(e, p, now);
	}
	/* The process runs again; everything below is ours alone. */
	struct eng_sample info = { .proc = p, .now_ns = ticker_now_ns() };
	for (long i = 0; i < n; i++) {
		struct eng_thread *t = &e->scratch[i];
		struct eng_os_thread *th = NULL;
		bool fresh = false;
		if (t->tid > 0) {
			th = thread_get(e, p, t->tid, (size_t)i, &fresh);
			fresh = one ? e->fresh[i] : fresh;
			th->seen = true;
			/* Names are interned: a new pointer is a new (or first) name. */
			if (t->name != th->name) {
				thread_root(e, th, t->name);
			}
		}
		*gil_held |= t->holds_gil;
		if (!keep(e, p, (size_t)i, th, fresh, &info.idle)) {
			continue;
		}
		/* Symbols and merging only for the stacks kept, and with the process running. */
		if (e->w.finish && e->w.finish(e->w.ctx, p->py, (size_t)i, &t->stack) < 0) {
			e->errors[ENG_ERR_NATIVE]++;
		}
		info.thread = th;
		info.tid = t->tid;
		info.holds_gil = t->holds_gil;
		info.gc = t->gc;
		if (cb->stack(cb->ctx, e, &t->stack, &info) < 0) {
			e->errors[ENG_ERR_DROPPED]++;
		}
	}
	if (n >= 0) {
		e->live_threads += (size_t)n;
		/* Forget threads that are gone, so their stat files do not pile up. */
		threads_prune(p, false);
	}
	/* A slowly growing heap is followed even where no walk fails. */
	if (!p->gone && p->proc.ops->read_maps && now - p->last_maps_ns >= MAPS_REFRESH_NS) {
		p->proc.ops->read_maps(&p->proc);
		p->last_maps_ns = now;
	}
}

/* One tick: every process, one after the other. */
static void sample_tick(struct engine *e, const struct eng_callbacks *cb)
{
	bool gil_held = false;
	e->samples++;
	e->live_threads = 0;
	for (size_t i = 0; i < e->nprocs && !proc_stop_requested; i++) {
		if (!e->procs[i]->gone) {
			sample_process(e, e->procs[i], cb, &gil_held);
		}
	}
	e->gil_ticks += gil_held;
}

/* ---- descendants (-s) ---- */

static bool is_sampled(const struct engine *e, pid_t pid)
{
	for (size_t i = 0; i < e->nprocs; i++) {
		if (!e->procs[i]->gone && e->procs[i]->pid == pid) {
			return true;
		}
	}
	return false;
}

static bool worth_trying(struct engine *e, pid_t pid)
{
	char exe[256] = "";
	const struct spy_process *root = &e->procs[0]->proc;
	root->ops->exe_of(root, pid, exe, sizeof(exe));
	for (size_t i = 0; i < e->nrej; i++) {
		struct eng_rejected *j = &e->rej[i];
		if (j->pid != pid) {
			continue;
		}
		if (strcmp(j->exe, exe)) {
			memcpy(j->exe, exe, sizeof(j->exe));
			j->tries = 0;
		}
		return ++j->tries <= REJECT_TRIES;
	}
	SPY_GROW(e->rej, e->rej_alloc, e->nrej + 1);
	struct eng_rejected *j = &e->rej[e->nrej++];
	j->pid = pid;
	memcpy(j->exe, exe, sizeof(j->exe));
	j->tries = 1;
	return true;
}

static void forget_rejected(struct engine *e, pid_t pid)
{
	for (size_t i = 0; i < e->nrej; i++) {
		if (e->rej[i].pid == pid) {
			e->rej[i] = e->rej[--e->nrej];
			return;
		}
	}
}

/* Forget the descendants that have exited; procs[0] stays to the end. */
static void reap_descendants(struct engine *e)
{
	size_t kept = 1;
	for (size_t i = 1; i < e->nprocs; i++) {
		if (e->procs[i]->gone) {
			process_free(e, e->procs[i]);
		} else {
			e->procs[kept++] = e->procs[i];
		}
	}
	e->nprocs = e->nprocs ? kept : 0;
}

static void scan_descendants(struct engine *e)
{
	const struct spy_process *root = &e->procs[0]->proc;
	if (!root->ops->descendants) {
		return;
	}
	pid_t *v = NULL;
	size_t n = root->ops->descendants(root, &v);
	for (size_t i = 0; i < n; i++) {
		pid_t pid = v[i];
		if (is_sampled(e, pid) || !worth_trying(e, pid)) {
			continue;
		}
		struct eng_process *p;
		if (process_open(e, pid, &p, NULL) < 0) {
			continue;
		}
		forget_rejected(e, pid);
		if (process_start(e, p, NULL) < 0) {
			p->gone = true;
		}
		spy_log(SPY_LOG_DEBUG, "engine: following process %d (%s)", (int)pid,
			p->proc.ops->cmdline(&p->proc));
	}
	free(v);
}

/* ---- the loop ---- */

/* Notice which processes have exited, without blocking. */
static void poll_processes(struct engine *e)
{
	uint64_t now = ticker_now_ns();
	for (size_t i = 0; i < e->nprocs; i++) {
		struct eng_process *p = e->procs[i];
		const struct spy_process_ops *ops = p->proc.ops;
		if (p->gone) {
			continue;
		}
		if (p->attached) {
			p->gone = ops->poll(&p->proc) == -SPY_EGONE;
		} else if (i == 0 && e->launched) {
			/* Our own child: only our wait sees it exit. */
			p->gone = spawn_reap(&e->sp, false);
		} else if (ops->alive && now - p->last_alive_ns >= POLL_NS) {
			/* A /proc read each tick would cost more than the sample; exit can wait 10 ms. */
			p->gone = !ops->alive(&p->proc);
			p->last_alive_ns = now;
		}
	}
}

/* ---- continuous mode ---- */

static void window_open(struct engine *e, int64_t from_s, uint64_t seq)
{
	int64_t every = (int64_t)e->o.window_s;
	int64_t until_s = (from_s / every + 1) * every;
	e->win.seq = seq;
	e->win.from_s = from_s;
	e->win.ticks = e->samples;
	e->win.missed = e->tk.missed;
	e->win_end_ns = (uint64_t)(until_s * 1000000000ll - e->wall_minus_mono_ns);
}

static void window_close(struct engine *e, const struct eng_callbacks *cb, int64_t until_s, bool last)
{
	struct eng_window w = e->win;
	w.until_s = until_s;
	w.ticks = e->samples - e->win.ticks;
	w.missed = e->tk.missed - e->win.missed;
	w.last = last;
	if (cb->window) {
		cb->window(cb->ctx, e, &w);
	}
	if (!last) {
		window_open(e, until_s, w.seq + 1);
	}
}

static void window_start(struct engine *e)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t wall = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
	e->wall_minus_mono_ns = wall - (int64_t)e->start_ns;
	window_open(e, (int64_t)ts.tv_sec, 0);
}

/* Close every window that ended by now (several, if the loop was held up: they stay contiguous). */
static void window_check(struct engine *e, const struct eng_callbacks *cb, uint64_t now)
{
	while (e->o.window_s && now >= e->win_end_ns) {
		int64_t every = (int64_t)e->o.window_s;
		window_close(e, cb, (e->win.from_s / every + 1) * every, false);
	}
}

/* The window open when the run stops ends then, rounded up to its second. */
static void window_end(struct engine *e, const struct eng_callbacks *cb)
{
	if (!e->o.window_s) {
		return;
	}
	int64_t wall = (int64_t)e->stop_ns + e->wall_minus_mono_ns;
	int64_t until_s = (wall + 999999999ll) / 1000000000ll;
	window_close(e, cb, until_s > e->win.from_s ? until_s : e->win.from_s + 1, true);
}

/* Sleep until the next tick, looking after the processes meanwhile; false to stop. */
static bool next_tick(struct engine *e, const struct eng_callbacks *cb)
{
	for (;;) {
		poll_processes(e);
		if (eng_root_gone(e) || proc_stop_requested || ticker_deadline(&e->tk) >= e->end_ns) {
			return false;
		}
		uint64_t now = ticker_now_ns();
		if (e->o.subprocesses && now - e->last_scan_ns >= SCAN_NS) {
			reap_descendants(e);
			scan_descendants(e);
			e->last_scan_ns = now;
		}
		window_check(e, cb, now);
		if (cb->wait && !cb->wait(cb->ctx, e, now)) {
			return false;
		}
		if (ticker_wait(&e->tk, POLL_NS) == 1) {
			return true;
		}
	}
}

/*
 * spy's own scheduling while it samples. On a machine whose cores the
 * target keeps busy (a hundred threads in C with the GIL released), spy is
 * one runnable thread among a hundred and gets its fair share: every
 * wake-up (the tick, each held thread's stop) waits behind the target's
 * threads, and 100 Hz asked gave 2-30 Hz. A negative nice helps little
 * where autogroups or cgroups group the tasks, as they usually do (nice
 * weighs spy against its own group only, and there it takes from a
 * program spy launched). So where spy has the right (CAP_SYS_NICE, root,
 * or an RLIMIT_RTPRIO), it takes the lowest real-time priority, SCHED_RR
 * 1, which any other real-time task outranks: a wake-up then runs at once,
 * and the target loses what the rate asked costs anyway (bench/saturated
 * measures both). A real-time thread that never sleeps would own a core,
 * bounded only by the kernel's throttling, so: never while the ticker
 * spins, and once spy's own work takes more than half a core (ticks that
 * cost more than their period) it goes back to the default for the rest
 * of the run. SCHED_RESET_ON_FORK: a program spy launches, and anything
 * spy starts, begins at the default. spy started under nice or chrt keeps
 * what it was given (that is how to say no), and without the right it
 * goes on as it was. Undone when sampling stops: writing a large profile
 * is no reason to outrank anything.
 */
#define SCHED_CHECK_NS (200 * 1000 * 1000ull)

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sched_raise(struct engine *e)
{
	e->sched_rt = false;
	errno = 0;
	int policy = sched_getscheduler(0);
	int nice = getpriority(PRIO_PROCESS, 0);
	if (policy != SCHED_OTHER || nice != 0 || errno) {
		spy_log(SPY_LOG_DEBUG, "engine: started with scheduling policy %d, nice %d: kept as given",
			policy, nice);
		return;
	}
	if (e->tk.spin) {
		spy_log(SPY_LOG_DEBUG, "engine: spinning: sampling at the default priority");
		return;
	}
	struct sched_param sp = { .sched_priority = 1 };
	if (sched_setscheduler(0, SCHED_RR | SCHED_RESET_ON_FORK, &sp) < 0) {
		spy_log(SPY_LOG_DEBUG, "engine: cannot raise spy's priority (%s): sampling at the default",
			strerror(errno));
		return;
	}
	e->sched_rt = true;
	e->sched_check_ns = ticker_now_ns();
	e->sched_cpu_ns = thread_cpu_ns();
	spy_log(SPY_LOG_DEBUG, "engine: sampling at SCHED_RR 1");
}

static void sched_restore(struct engine *e)
{
	if (e->sched_rt) {
		struct sched_param sp = { .sched_priority = 0 };
		(void)sched_setscheduler(0, SCHED_OTHER, &sp);
		e->sched_rt = false;
	}
}

/* Real-time only while spy's own work leaves most of a core to others. */
static void sched_check(struct engine *e, uint64_t now)
{
	if (!e->sched_rt || now - e->sched_check_ns < SCHED_CHECK_NS) {
		return;
	}
	uint64_t cpu = thread_cpu_ns();
	if (2 * (cpu - e->sched_cpu_ns) > now - e->sched_check_ns) {
		sched_restore(e);
		spy_log(SPY_LOG_DEBUG, "engine: sampling took %.0f%% of a core at SCHED_RR 1: the default from here",
			100.0 * (double)(cpu - e->sched_cpu_ns) / (double)(now - e->sched_check_ns));
	}
	e->sched_check_ns = now;
	e->sched_cpu_ns = cpu;
}

/* Nothing: a stop's SIGCHLD only has to end the sleep between ticks (see eng_run). */
static void chld_wake(int sig)
{
	(void)sig;
}

void eng_run(struct engine *e, const struct eng_callbacks *cb)
{
	e->start_ns = ticker_now_ns();
	e->end_ns = e->o.duration >= 0 ? e->start_ns + spy_s_to_ns(e->o.duration) : UINT64_MAX;
	ticker_init(&e->tk, e->o.rate, e->start_ns);
	/* Compared as a double: a rate as low as 1e-300 makes half a period infinite. */
	double half = 5e8 / e->o.rate;
	e->offcpu_wait_ns = half < (double)ENG_OFFCPU_WAIT_NS ? (uint64_t)half : ENG_OFFCPU_WAIT_NS;
	e->offcpu_wait_ns = e->offcpu_wait_ns > ENG_OFFCPU_WAIT_MIN_NS ? e->offcpu_wait_ns
								  : ENG_OFFCPU_WAIT_MIN_NS;
	/*
	 * A thread held off a CPU (hold_one) stops when it next gets one, and
	 * waits for the next poll to be restarted: SIGCHLD, with a handler
	 * that does nothing, ends the sleep between ticks at its stop, so that
	 * poll comes at once. SA_RESTART: no other call is cut short by it.
	 */
	struct sigaction chld = { .sa_handler = chld_wake, .sa_flags = SA_RESTART }, chld_old;
	sigemptyset(&chld.sa_mask);
	bool chld_set = sigaction(SIGCHLD, &chld, &chld_old) == 0;
	/*
	 * The kernel may defer a timed wake-up by the thread's timer slack,
	 * 50 us by default, to batch it with others: at kilohertz rates that
	 * is most of a period. 1 ns: ticks on time.
	 */
	(void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	sched_raise(e);
	if (e->o.window_s) {
		window_start(e);
	}
	while (next_tick(e, cb)) {
		/* A tick due just past a boundary belongs to the next window. */
		window_check(e, cb, ticker_now_ns());
		sample_tick(e, cb);
		uint64_t now = ticker_now_ns();
		/* A late last tick must not count deadlines past the end as missed. */
		ticker_take(&e->tk, now < e->end_ns ? now : e->end_ns);
		sched_check(e, now);
	}
	e->stop_ns = ticker_now_ns();
	sched_restore(e);
	if (chld_set) {
		sigaction(SIGCHLD, &chld_old, NULL);
	}
	window_end(e, cb);
	const struct eng_holds *h = &e->holds;
	if (h->ticks) {
		spy_log(SPY_LOG_DEBUG,
			"engine: held per tick: longest thread %.1f us mean, %.1f us max; "
			"all threads %.1f us mean, %.1f us max; the whole process in %llu of %llu ticks; "
			"%llu ticks held a thread over %llu us; a thread took %.1f us to stop (mean); "
			"%llu walks behind the GIL holder's hold, without a stop; "
			"%llu threads held off a CPU, interrupted before they stopped",
			(double)h->longest_sum_ns / 1e3 / (double)h->ticks, (double)h->longest_max_ns / 1e3,
			(double)h->total_sum_ns / 1e3 / (double)h->ticks, (double)h->total_max_ns / 1e3,
			(unsigned long long)h->whole_ticks, (unsigned long long)h->ticks,
			(unsigned long long)h->over_goal, (unsigned long long)(ENG_HOLD_GOAL_NS / 1000),
			h->stops ? (double)h->stop_sum_ns / 1e3 / (double)h->stops : 0.0,
			(unsigned long long)h->frozen, (unsigned long long)h->offcpu);
	}
	if (e->still.kept || e->still.read) {
		spy_log(SPY_LOG_DEBUG, "engine: sleeping threads not stopped: %llu stacks kept from earlier, %llu read",
			(unsigned long long)e->still.kept, (unsigned long long)e->still.read);
	}
}

/* ---- ending ---- */

void eng_detach(struct engine *e)
{
	for (size_t i = 0; i < e->nprocs; i++) {
		process_stop(e->procs[i]);
	}
	if (e->launched && proc_stop_requested) {
		spawn_forward(&e->sp);
	}
}

void eng_describe_exit(struct spy_buf *out, int status)
{
	if (WIFEXITED(status)) {
		spy_buf_addf(out, "exited with status %d", WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		spy_buf_addf(out, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	} else {
		spy_buf_adds(out, "exited");
	}
}

/* Wait for a program that was told to stop (already forwarded); a second signal gives up on it. */
static bool wait_program(struct engine *e)
{
	int signals = proc_stop_requested ? 1 : 0;
	while (!e->sp.reaped) {
		proc_stop_requested = 0;
		if (spawn_reap(&e->sp, true)) {
			break;
		}
		if (proc_stop_requested && ++signals < 2) {
			spawn_forward(&e->sp);
		} else if (proc_stop_requested) {
			return false;
		}
	}
	return true;
}

void eng_finish(struct engine *e, struct spy_buf *out)
{
	if (!e->launched) {
		return;
	}
	int status = 0;
	bool known = false;
	const struct spy_process *root = e->nprocs ? &e->procs[0]->proc : NULL;
	if (root && root->ops->exit_status && root->ops->exit_status(root, &status)) {
		known = true;
	} else if (eng_root_gone(e) || proc_stop_requested) {
		known = wait_program(e);
		status = e->sp.status;
	} else {
		/* The duration ran out: the program goes on, as a --pid target would. */
		known = spawn_reap(&e->sp, false);
		status = e->sp.status;
	}
	if (known) {
		spy_buf_addf(out, "; %s ", e->program);
		eng_describe_exit(out, status);
	} else {
		spy_buf_addf(out, "; %s (process %d) is still running", e->program, (int)e->sp.pid);
	}
}

void eng_release(struct engine *e)
{
	for (size_t i = 0; i < e->nprocs; i++) {
		process_free(e, e->procs[i]);
	}
	free(e->procs);
	free(e->rej);
	for (size_t i = 0; e->scratch && i < SPY_MAX_THREADS; i++) {
		spy_stack_release(&e->scratch[i].stack);
	}
	free(e->scratch);
	free(e->fresh);
	free(e->listed_gil);
	free(e->frozen);
	memset(e, 0, sizeof(*e));
}

/* ---- one look (dump) ---- */

int eng_look(struct spy_process *p, int (*fn)(void *ctx, struct spy_err *err), void *ctx,
	     struct spy_err *err)
{
	bool pause = spy_process_can(p, SPY_CAP_PAUSE, NULL, NULL);
	int rc = pause ? p->ops->attach(p, err) : 0;
	if (rc == 0 && pause) {
		rc = p->ops->pause(p, err);
	}
	if (rc == 0 && !proc_stop_requested) {
		rc = fn(ctx, err);
	}
	if (pause) {
		p->ops->detach(p);
	}
	return rc;
}

/* ---- counters ---- */

const struct eng_process *eng_root(const struct engine *e)
{
	return e->nprocs ? e->procs[0] : NULL;
}

bool eng_root_gone(const struct engine *e)
{
	return !e->nprocs || e->procs[0]->gone;
}

uint64_t eng_errors(const struct engine *e)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < ENG_ERR_MAX; i++) {
		sum += e->errors[i];
	}
	return sum;
}

void eng_format_errors(const struct engine *e, struct spy_buf *out)
{
	spy_buf_addf(out, "%llu", (unsigned long long)eng_errors(e));
	const char *sep = " (";
	for (size_t i = 0; i < ENG_ERR_MAX; i++) {
		if (!e->errors[i]) {
			continue;
		}
		spy_buf_addf(out, "%s%s %llu", sep, eng_error_names[i], (unsigned long long)e->errors[i]);
		sep = ", ";
	}
	if (sep[0] == ',') {
		spy_buf_adds(out, ")");
	}
}

double eng_elapsed(const struct engine *e, uint64_t now_ns)
{
	uint64_t end = e->stop_ns ? e->stop_ns : now_ns;
	/* 0 before the first tick */
	return e->start_ns && end > e->start_ns ? (double)(end - e->start_ns) / 1e9 : 0.0;
}

void eng_summary(const struct engine *e, uint64_t now_ns, struct spy_buf *out)
{
	double el = eng_elapsed(e, now_ns);
	spy_buf_addf(out, "spy: %llu samples in %.2f s (%.1f Hz), %llu missed ticks, errors: ",
		     (unsigned long long)e->samples, el, el > 0 ? (double)e->samples / el : 0.0,
		     (unsigned long long)e->tk.missed);
	eng_format_errors(e, out);
	for (size_t i = 0; i < e->nprocs; i++) {
		const struct spy_process *sp = &e->procs[i]->proc;
		if (sp->ops->execed && sp->ops->execed(sp)) {
			spy_buf_addf(out, "; process %d replaced its program (exec): sampling stopped there",
				     (int)sp->ops->pid(sp));
		}
	}
}
