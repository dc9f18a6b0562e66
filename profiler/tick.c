/*
 * One tick of one process (see internal.h): what is stopped, what is
 * walked, what is kept.
 *
 * By default one thread is stopped at a time, for its own walk only
 * (sample_held): on a GIL build only the GIL holder, the others being
 * read running under the GIL's switch count (read_running); thread states
 * are read before anything is stopped (a ptrace-stopped thread reads
 * 't'), and everything done with the stacks (native symbols, the
 * command's aggregation) happens after the thread runs again. The
 * whole-process pause (sample_paused) is left for a thread whose TID the
 * walk cannot tell. With --nonblocking nothing is stopped; a
 * walk that does not reach the root may then be torn, and is counted
 * rather than handed on.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "profiler/internal.h"

/* ---- the thread table ---- */

/*
 * The thread's root frame, named by the interpreter's name or else the
 * kernel's; `[native]` after it for a thread without a Python thread
 * state (--native), whose samples are all native frames. No parentheses:
 * a folded frame ending in `)` would read back as a function in a file.
 */
static void thread_root(struct prof_tick_state *e, struct prof_thread *th, const char *name, bool native_only)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "thread %d \"%s\"%s", (int)th->task.tid, name ? name : th->comm,
		     native_only ? " [native]" : "");
	th->root = spy_strtab_interns(e->strs, b.buf);
	th->name = name;
	th->native_only = native_only;
	spy_buf_release(&b);
}

/* Thread tid's entry in the table, or NULL. */
static struct prof_thread *thread_find(struct prof_process *p, pid_t tid)
{
	uint64_t i = spy_hmap_get(&p->th_index, (uint64_t)(uint32_t)tid);
	return i == SPY_HMAP_NONE ? NULL : &p->th[i];
}

static struct prof_thread *thread_get(struct prof_tick_state *e, struct prof_process *p, pid_t tid, bool *fresh)
{
	struct prof_thread *found = thread_find(p, tid);
	if (found) {
		*fresh = false;
		return found;
	}
	SPY_GROW(p->th, p->th_alloc, p->nth + 1);
	spy_hmap_put(&p->th_index, (uint64_t)(uint32_t)tid, p->nth);
	struct prof_thread *th = &p->th[p->nth++];
	memset(th, 0, sizeof(*th));
	const struct spy_tracer_ops *ops = p->h.tracer;
	ops->task_open(&p->h, &th->task, tid);
	ops->task_name(&p->h, tid, th->comm, sizeof(th->comm));
	/* A first CPU reading, so that the next tick can trust an R (see is_active). */
	if (p->attached) {
		ops->task_refresh(&th->task, PROC_TASK_CPU);
	}
	thread_root(e, th, NULL, false);
	e->st.threads_seen++;
	*fresh = true;
	return th;
}

/* Close the stat files of threads the last walk did not find (all: every one). */
static void threads_prune(struct prof_process *p, bool all)
{
	size_t kept = 0;
	spy_hmap_clear(&p->th_index);
	for (size_t i = 0; i < p->nth; i++) {
		if (!all && p->th[i].seen) {
			spy_hmap_put(&p->th_index, (uint64_t)(uint32_t)p->th[i].task.tid, kept);
			p->th[kept++] = p->th[i];
		} else {
			p->h.tracer->task_close(&p->th[i].task);
			spy_stack_release(&p->th[i].kept);
			free(p->th[i].kept_v);
			free(p->th[i].kept_sp);
		}
	}
	p->nth = kept;
}

/* Whether t is wanted whatever its state says, which then need not be read. */
static bool wanted_any_state(const struct prof_tick_state *e, const struct prof_walked *t)
{
	return e->o.idle || t->holds_gil || t->attached;
}

/*
 * Whether listed thread t must be walked this tick: one that can have run
 * Python since the last tick (running, or holding the GIL as listed), or
 * any with --idle. The stack of a thread asleep is handed on only with
 * --idle, so without it a sleeper is neither stopped nor read (stopping
 * one would only interrupt its sleep).
 */
static bool wanted(struct prof_tick_state *e, const struct prof_walked *t, const struct prof_thread *th)
{
	return wanted_any_state(e, t) || !th || proc_task_active(&th->task);
}

/*
 * --nonblocking: listed thread i, not wanted this tick (asleep, holding
 * no GIL, without -i), is not walked either; its state is read now, before
 * the walk, where is_active read it after. A pool of 150 waiting threads
 * was 150 walks a tick, their pages read, for the 4 that run.
 */
static bool skip_idle(struct prof_tick_state *e, struct prof_process *p, size_t i)
{
	struct prof_walked *t = &p->w[i];
	const struct spy_tracer_ops *ops = p->h.tracer;
	pid_t tid = p->py[i].native_tid;
	/* A thread new to the table has no state file open yet: walked. */
	struct prof_thread *th = tid > 0 ? thread_find(p, tid) : NULL;
	/*
	 * Wanted whatever its state, it is not read here: is_active does not
	 * read a GIL holder's either. A one-thread target's flat-out sample
	 * cost a third more with that read (bench/README, run 6).
	 */
	if (p->attached || !th || wanted_any_state(e, t)) {
		return false;
	}
	ops->task_refresh(&th->task, 0);
	e->st.errors[SPY_SAMPLE_ERR_STATE] += th->task.failed;
	t->state_read = true;
	return !th->task.failed && !wanted(e, t, th);
}

/* Walk every thread of p into p->w. pyrt's error, else 1 if some stack is not whole, else 0. */
static int walk(struct prof_tick_state *e, struct prof_process *p, size_t *n_out)
{
	size_t n = 0;
	/* Paused, the view is fresh already; a running process needs one asked for. */
	if (!p->attached) {
		p->h.tracer->fresh_view(&p->h, 0);
	}
	int rc = prof_walk_list(p, &e->wo, NULL);
	n = rc < 0 ? 0 : p->nw;
	for (size_t i = 0; i < n; i++) {
		if (!skip_idle(e, p, i)) {
			prof_walk_thread(p, &e->wo, i, false, &e->gc_known);
		}
	}
	*n_out = n;
	if (rc < 0) {
		return rc;
	}
	bool whole = true;
	for (size_t i = 0; i < *n_out; i++) {
		whole = whole && p->w[i].rc == 0 && !p->w[i].stack.truncated;
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
static int walk_with_retry(struct prof_tick_state *e, struct prof_process *p, size_t *n, uint64_t now)
{
	int rc = walk(e, p, n);
	if (rc == 0 || !prof_maps_reread(p, now)) {
		return rc;
	}
	rc = walk(e, p, n);
	prof_maps_retried(p, rc == 0);
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
static bool is_active(struct prof_process *p, const struct prof_walked *t, struct prof_thread *th,
		      bool fresh, uint64_t *failed)
{
	if (t->holds_gil || t->attached) {
		return true;
	}
	if (!th) {
		return false;
	}
	if (!p->attached && !t->state_read) {
		p->h.tracer->task_refresh(&th->task, 0);
		*failed += th->task.failed;
	}
	/* A state that could not be read is no reason to call a thread idle. */
	bool trusted = !p->attached || (!fresh && th->had_cpu) || th->task.failed;
	return trusted && proc_task_active(&th->task);
}

/* Whether walked thread i is handed on; sets *idle. */
static bool keep(struct prof_tick_state *e, struct prof_process *p, size_t i, struct prof_thread *th,
		 bool fresh, bool *idle)
{
	const struct prof_walked *t = &p->w[i];
	if (t->rc < 0) {
		e->st.errors[SPY_SAMPLE_ERR_GONE]++;
		return false;
	}
	if (t->stack.truncated) {
		bool torn = !p->attached;
		e->st.errors[torn ? SPY_SAMPLE_ERR_TORN : SPY_SAMPLE_ERR_TRUNCATED]++;
		if (torn) {
			return false;
		}
	}
	bool active = is_active(p, t, th, fresh, &e->st.errors[SPY_SAMPLE_ERR_STATE]);
	if (th && t->walked) {
		/* A thread with a thread state and no Python frame yields no sample. */
		th->no_frames = t->stack.n == 0;
	}
	e->st.thread_samples++;
	e->st.active_samples += active;
	*idle = !active;
	if (e->o.gil && !t->holds_gil) {
		return false;
	}
	/*
	 * With --native a stack is its unwind's too, merged once kept: a
	 * native-only thread's, or a Python thread's running C with no Python
	 * frame (an OpenMP worker that took a thread state to call back).
	 */
	return (active || e->o.idle) && (t->stack.n > 0 || (p->nat && t->pcs.n > 0));
}

/*
 * Each thread's state, read before anything is stopped (a ptrace-stopped
 * thread reads 't'): schedstat here, and for a thread that ran since,
 * stat later, in threads_settle.
 */
static void threads_refresh(struct prof_tick_state *e, struct prof_process *p)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	for (size_t i = 0; i < p->nth; i++) {
		struct prof_thread *th = &p->th[i];
		th->seen = false;
		if (p->attached) {
			th->had_cpu = th->task.read_ns != 0;
			ops->task_refresh(&th->task, PROC_TASK_CPU | PROC_TASK_DEFER);
			e->st.errors[SPY_SAMPLE_ERR_STATE] += th->task.failed;
			/* Scheduled since its stack was kept: it may have changed. */
			th->kept_valid = th->kept_valid && th->task.slept;
		}
	}
}

/*
 * The state reads threads_refresh left, still before anything is
 * stopped. After the listing (sample_held), holder is the TID of the GIL
 * holder it found, taken as running without a read: it is held, and
 * active whatever its state says. 0: every owed state is read.
 */
static void threads_settle(struct prof_tick_state *e, struct prof_process *p, pid_t holder)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	if (!p->attached) {
		return;
	}
	for (size_t i = 0; i < p->nth; i++) {
		struct proc_task *t = &p->th[i].task;
		if (t->owed) {
			ops->task_settle(t, holder > 0 && t->tid == holder);
			e->st.errors[SPY_SAMPLE_ERR_STATE] += t->failed;
		}
	}
}

/* One tick's holds: the longest any thread was held, and all of them together. */
static void hold_account(struct prof_tick_state *e, uint64_t longest, uint64_t total, bool whole)
{
	struct prof_holds *h = &e->holds;
	h->ticks++;
	h->whole_ticks += whole;
	h->longest_sum_ns += longest;
	h->total_sum_ns += total;
	h->longest_max_ns = longest > h->longest_max_ns ? longest : h->longest_max_ns;
	h->total_max_ns = total > h->total_max_ns ? total : h->total_max_ns;
	h->over_goal += longest > PROF_HOLD_GOAL_NS;
	spy_log(SPY_LOG_TRACE, "engine: tick held %s for %.1f us, %.1f us in all",
		whole ? "the whole process" : "one thread at most", (double)longest / 1e3,
		(double)total / 1e3);
}

/* The stopped window: pause, walk (and --native's unwinds), resume. n, or < 0 for nothing. */
static long sample_paused(struct prof_tick_state *e, struct prof_process *p, uint64_t now, bool refreshed)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	if (!refreshed) {
		threads_refresh(e, p);
	}
	threads_settle(e, p, 0);
	uint64_t t0 = spy_now_ns();
	if (p->attached) {
		int rc = ops->pause(&p->h, NULL);
		if (rc == -SPY_EGONE) {
			p->gone = true;
		} else if (rc < 0 && rc != -SPY_EINTR) {
			e->st.errors[SPY_SAMPLE_ERR_PAUSE]++;
		}
		if (rc < 0) {
			return -1;
		}
		p->paused = true;
	}
	size_t n = 0;
	int rc = walk_with_retry(e, p, &n, now);
	for (size_t i = 0; rc >= 0 && p->nat && i < n; i++) {
		prof_walk_unwind(p, i);
	}
	if (p->attached) {
		p->paused = false;
		ops->resume(&p->h);
		/* Every thread was held from the pause to the resume. */
		uint64_t held = spy_now_ns() - t0;
		hold_account(e, held, held * (n ? n : 1), true);
	}
	if (rc < 0) {
		e->st.errors[SPY_SAMPLE_ERR_THREADS]++;
		return -1;
	}
	return (long)n;
}

/*
 * Walk listed thread i while held, or under its GIL's switch count
 * (read_running). A walk that met trouble may have met
 * memory mapped since the maps were read: as walk_with_retry, once, with
 * the same backoff.
 */
static void walk_held(struct prof_tick_state *e, struct prof_process *p, size_t i, uint64_t now)
{
	struct prof_walked *t = &p->w[i];
	prof_walk_thread(p, &e->wo, i, true, &e->gc_known);
	if ((t->rc == 0 && !t->stack.truncated) || !prof_maps_reread(p, now)) {
		return;
	}
	prof_walk_thread(p, &e->wo, i, true, &e->gc_known);
	prof_maps_retried(p, t->rc == 0 && !t->stack.truncated);
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
static bool still_stack(struct prof_tick_state *e, struct prof_process *p, size_t i, struct prof_thread *th)
{
	struct prof_walked *t = &p->w[i];
	const struct spy_tracer_ops *ops = p->h.tracer;
	if (!e->o.idle || p->w[i].listed_gil || (p->nat != NULL) ||
	    th->task.failed || !th->task.state || proc_task_active(&th->task)) {
		return false;
	}
	if (th->kept_valid) {
		spy_stack_copy(&t->stack, &th->kept);
		t->rc = 0;
		t->has_span = false;
		t->holds_gil = t->attached = false;
		t->gc = false;
		e->still.kept++;
		return true;
	}
	prof_walk_thread(p, &e->wo, i, false, &e->gc_known);
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
	uint64_t stopped;          /* threads stopped */
	bool stop;                 /* a stop was requested while waiting */
	bool counted;              /* the GIL's switch count can be read (see read_running) */
	/* The count read last after a walk (read_running): the next read's "before". */
	bool chained;
	spy_addr_t chain_interp, chain_last;
	uint64_t chain_count;
};

/*
 * Listed thread i's OS thread, looked up for this tick; NULL when nothing
 * more is to be done for it: not worth walking, or -i's stack taken
 * without a stop (still_stack).
 */
static struct prof_thread *hold_prepare(struct prof_tick_state *e, struct prof_process *p, size_t i)
{
	struct prof_walked *t = &p->w[i];
	bool fresh;
	struct prof_thread *th = thread_get(e, p, p->py[i].native_tid, &fresh);
	p->w[i].fresh = fresh;
	if (!wanted(e, t, th)) {
		t->holds_gil = false;
		return NULL;
	}
	return still_stack(e, p, i, th) || prof_still_native(e, p, i, th) ? NULL : th;
}

/*
 * PROF_FROZEN_BUDGET_NS, which the unit tests widen
 * (SPY_TEST_FROZEN_BUDGET_MS, test builds only): what they count is
 * which threads are stopped, and under emulation or a loaded machine the
 * holder's own walk alone can spend the 50 us.
 */
static uint64_t frozen_budget_ns(void)
{
#ifdef SPY_TEST_HOOKS
	static uint64_t budget;
	if (!budget) {
		const char *v = getenv("SPY_TEST_FROZEN_BUDGET_MS");
		budget = v ? (uint64_t)strtoul(v, NULL, 10) * 1000000ull : 0;
		budget = budget ? budget : PROF_FROZEN_BUDGET_NS;
	}
	return budget;
#else
	return PROF_FROZEN_BUDGET_NS;
#endif
}

/*
 * While the GIL holder h is held, the threads that run Python under its
 * GIL cannot: their frames are what they will be until h is restarted, so
 * they are walked now without stops of their own (a thread busy in C
 * with the GIL released would otherwise have to get a core to stop, which
 * on a saturated machine takes milliseconds). Only as many as keep h's
 * hold within PROF_FROZEN_BUDGET_NS; the rest are held one at a time. On
 * 3.12+ the holder is read from the GIL itself, which a thread taking it
 * marks locked a few instructions before naming itself: a walk started
 * in that window may be torn, bounded and validated like a
 * --nonblocking one (up to 3.11 the holder is the thread state swapped
 * in after the GIL is taken, and the question does not arise).
 */
static void walk_frozen(struct prof_tick_state *e, struct prof_process *p, size_t h, uint64_t held_from,
			const struct hold_tick *ht)
{
	/* With the switch count the others are read running, with no hold to lengthen. */
	if (p->nat || !p->w[h].holds_gil || ht->counted) {
		return;
	}
	for (size_t j = 0; j < ht->n && !proc_stop_requested; j++) {
		if (j == h || p->w[j].listed_gil || p->w[j].frozen) {
			continue;
		}
		if (spy_now_ns() - held_from >= frozen_budget_ns()) {
			return;
		}
		/*
		 * A thread never walked is left to its own hold: its first walk
		 * decodes every code object it meets, too long to add to h's.
		 */
		const struct prof_thread *known = thread_find(p, p->py[j].native_tid);
		if (!known || !known->walked || !prof_walk_frozen_by(p, h, j)) {
			continue;
		}
		p->w[j].frozen = true;
		struct prof_thread *th = hold_prepare(e, p, j);
		if (!th) {
			continue;
		}
		struct prof_walked *t = &p->w[j];
		prof_walk_thread(p, &e->wo, j, false, &e->gc_known);
		t->holds_gil = false;
		th->walked = true;
		e->holds.frozen++;
	}
}

/* Stop listed thread i (th, worth it) alone, walk it (and what its GIL freezes), restart it. */
static void hold_one(struct prof_tick_state *e, struct prof_process *p, size_t i, struct prof_thread *th,
		     uint64_t now, struct hold_tick *ht)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	struct prof_walked *t = &p->w[i];
	/*
	 * A hold lasts long enough for the GIL to change hands many times (a
	 * slow machine's, milliseconds): a count read before it is no one's
	 * before after it, or each read after it would move, and be held too.
	 */
	ht->chained = false;
	/*
	 * A thread walked for the first time has code objects pystate has
	 * not decoded yet, which would triple its first hold: walk it once
	 * running first, as --nonblocking would (the walk tolerates a torn
	 * read), so that the walk while held finds them decoded.
	 */
	if (!th->walked) {
		prof_walk_thread(p, &e->wo, i, false, &e->gc_known);
		th->walked = true;
	}
	uint64_t t0 = spy_now_ns();
	int rc = ops->stop_thread(&p->h, p->py[i].native_tid, p->nat ? 0 : e->offcpu_wait_ns);
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
		e->st.errors[SPY_SAMPLE_ERR_PAUSE] += rc != -SPY_EGONE && rc != -SPY_ENOPROC;
		t->holds_gil = false;
		/* Nor is what a walk running left (a warm-up, a read whose count moved) handed on. */
		spy_stack_reset(&t->stack);
		return;
	}
	/* Held from its stop, not from the interrupt: until then it ran. */
	uint64_t t1 = spy_now_ns();
	if (rc == 1) {
		/* Off a CPU, interrupted: it runs nothing until it stops, and then waits for a poll. */
		e->holds.offcpu++;
	} else {
		e->holds.stop_sum_ns += t1 - t0;
		e->holds.stops++;
	}
	walk_held(e, p, i, now);
	if (t->native_only && e->o.idle) {
		prof_keep_native(p, i, th, th->task.state && !th->task.failed && !proc_task_active(&th->task));
	}
	walk_frozen(e, p, i, t1, ht);
	ops->resume_thread(&p->h);
	uint64_t held = spy_now_ns() - t1;
	ht->longest = held > ht->longest ? held : ht->longest;
	ht->total += held;
	ht->stopped++;
}

/*
 * Listed thread i (th, worth walking, not the GIL holder as listed) read
 * running under its GIL's switch count (pyrt_gil_switches): taken if the
 * count did not move and the thread was not the GIL's last holder, when
 * it could not have run Python all along. Its thread state is looked at
 * again inside the window, as a held thread's is. Not read: the GIL's
 * last holder, which may take the GIL back without a switch counted (it
 * holds the GIL, or did last; later in the tick the GIL may have moved
 * on). The count read after one thread's walk is the next one's before
 * (ht's chain): read earlier, it only widens the window it vouches for,
 * and a thread read running costs one read of the count, not two.
 */
enum read_rc {
	READ_NOT = -1,   /* no count to read: held */
	READ_MOVED,      /* the count moved: read again, or held */
	READ_OK,
	READ_LAST,       /* the GIL's last holder: looked at again, or held */
};
static enum read_rc read_running(struct prof_tick_state *e, struct prof_process *p, size_t i,
				 struct prof_thread *th, uint64_t now, struct hold_tick *ht)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	struct py_thread *py = &p->py[i];
	struct prof_walked *t = &p->w[i];
	uint64_t before, after;
	spy_addr_t last;
	/*
	 * The count is read from the target itself, not from a memory view:
	 * a view serves a line as it was when first fetched (the listing's,
	 * for the GIL's), and a count read twice from one view never moves.
	 * The walk gets a view of its own, begun after the first read, so
	 * that nothing it reads is older than the count it is checked
	 * against.
	 */
	if (ht->chained && ht->chain_interp == py->interp) {
		before = ht->chain_count;
		last = ht->chain_last;
	} else {
		ops->end_view(&p->h);
		if (pyrt_gil_switches(p->rt, py->interp, &before, &last) < 0) {
			return READ_NOT;
		}
	}
	ht->chained = false;
	if (last == py->tstate) {
		return READ_LAST;
	}
	/* Its own lines fetched ahead: the shared view's are the last thread's. */
	ops->fresh_view(&p->h, py->native_tid);
	walk_held(e, p, i, now);
	/* Its code objects are decoded now: a hold after this needs no warm-up walk. */
	th->walked = true;
	ops->end_view(&p->h);
	if (pyrt_gil_switches(p->rt, py->interp, &after, &last) < 0) {
		return READ_MOVED;
	}
	ht->chained = true;
	ht->chain_interp = py->interp;
	ht->chain_count = after;
	ht->chain_last = last;
	if (after != before) {
		return READ_MOVED;
	}
	/* Not holding the GIL since the count was read, whatever the recheck saw. */
	py->holds_gil = t->holds_gil = false;
	e->holds.running++;
	return READ_OK;
}

/*
 * Pass pass of sample_held over listed thread i: 0, the GIL holder as
 * listed, held (nothing else can change hands while it is); 1, every other
 * thread, read running under the switch count where it can be read, else
 * held; 2, those whose count moved, or that were the GIL's last holder:
 * read once more (the GIL may have moved on), then held. At most one
 * retry a thread a tick.
 */
static void hold_pass(struct prof_tick_state *e, struct prof_process *p, size_t i, int pass, uint64_t now,
		      struct hold_tick *ht)
{
	struct prof_walked *t = &p->w[i];
	if (t->frozen || (pass == 0) != t->listed_gil || (pass == 2 && !t->retry)) {
		return;
	}
	struct prof_thread *th = pass == 2 ? thread_find(p, p->py[i].native_tid) : hold_prepare(e, p, i);
	if (!th) {
		return;
	}
	t->retry = false;
	enum read_rc rc = pass > 0 && ht->counted ? read_running(e, p, i, th, now, ht) : READ_NOT;
	if (rc == READ_OK) {
		return;
	}
	if (rc != READ_NOT && pass == 1) {
		/* A read whose count moved may be torn: nothing of it is kept if the tick ends first. */
		spy_stack_reset(&t->stack);
		t->retry = true;
		e->holds.retried += rc == READ_MOVED;
		return;
	}
	e->holds.fell_back += rc == READ_MOVED;
	e->holds.last_holder += rc == READ_LAST;
	hold_one(e, p, i, th, now, ht);
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
 * Where the GIL's switch count can be read (a GIL build, 3.7+, without
 * --native, whose unwinds need the thread stopped), only the GIL holder
 * is held, and the rest read running (hold_pass): one stop a tick per
 * GIL, and a thread waiting for a CPU costs no wait for it to stop.
 * n, -1 for nothing, or -2 to take the whole-process pause instead (a
 * thread without a known TID cannot be held alone).
 */
static long sample_held(struct prof_tick_state *e, struct prof_process *p, uint64_t now, bool refreshed)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	if (!refreshed) {
		threads_refresh(e, p);
	}
	int rc = ops->track(&p->h);
	if (rc == -SPY_EGONE) {
		p->gone = true;
		return -1;
	}
	size_t n = 0;
	p->h.tracer->fresh_view(&p->h, 0);
	rc = prof_walk_list(p, &e->wo, NULL);
	if (rc < 0 && now - p->last_maps_ns >= p->maps_retry_ns) {
		ops->read_maps(&p->h);
		p->last_maps_ns = now;
		rc = prof_walk_list(p, &e->wo, NULL);
	}
	n = rc < 0 ? 0 : p->nw;
	n = n > SPY_MAX_THREADS ? SPY_MAX_THREADS : n;
	/* The whole-process pause settles every state itself, the holder's too. */
	for (size_t i = 0; i < n; i++) {
		if (p->py[i].native_tid <= 0) {
			return -2;
		}
	}
	pid_t holder = 0;
	for (size_t i = 0; i < n && !holder; i++) {
		holder = p->w[i].holds_gil ? p->py[i].native_tid : 0;
	}
	threads_settle(e, p, holder);
	if (rc < 0) {
		e->st.errors[SPY_SAMPLE_ERR_THREADS]++;
		return -1;
	}
	/*
	 * A GIL has one holder a tick, as in a whole-process pause: the thread
	 * the listing saw holding it, if it still does once held (prof_walk_thread
	 * sees to that). It is held first, before it can let go; a thread
	 * that takes the GIL after the listing is not a second holder.
	 */
	for (size_t i = 0; i < n; i++) {
		p->w[i].listed_gil = p->w[i].holds_gil;
		p->w[i].frozen = p->w[i].retry = false;
	}
	uint64_t count;
	spy_addr_t last;
	struct hold_tick ht = {
		.n = n,
		.counted = !p->nat && n && pyrt_gil_switches(p->rt, p->py[0].interp, &count, &last) == 0,
	};
	for (int pass = 0; pass < 3 && !ht.stop; pass++) {
		for (size_t i = 0; i < n && !ht.stop && !proc_stop_requested; i++) {
			hold_pass(e, p, i, pass, now, &ht);
		}
	}
	hold_account(e, ht.longest, ht.total, false);
	e->holds.stopped += ht.stopped;
	e->holds.most_stopped = ht.stopped > e->holds.most_stopped ? ht.stopped : e->holds.most_stopped;
	return (long)n;
}

/* Listed thread i kept: handed on with the process running. */
static void keep_sample(struct prof_tick_state *e, struct prof_process *p, size_t i, const struct prof_thread *th,
			bool idle)
{
	struct prof_walked *t = &p->w[i];
	/* Symbols and merging only for the stacks kept, and with the process running. */
	if ((p->nat || t->task) && prof_walk_finish(p, i) < 0) {
		e->st.errors[SPY_SAMPLE_ERR_NATIVE]++;
	}
	/* Nothing to show: an unwind that failed, of a thread with no Python frame either. */
	if (t->stack.n == 0) {
		return;
	}
	if (t->has_span) {
		memcpy(t->pspan.trace_id, t->span.trace_id, sizeof(t->pspan.trace_id));
		memcpy(t->pspan.span_id, t->span.span_id, sizeof(t->pspan.span_id));
		t->pspan.name = t->span.name;
	}
	SPY_GROW(e->kept, e->kept_alloc, e->nkept + 1);
	e->kept[e->nkept++] = (struct prof_sample){
		.stack = &t->stack,
		.proc_root = p->root,
		.proc = p,
		.thread_root = th ? th->root : NULL,
		.pid = p->pid,
		.tid = p->py[i].native_tid,
		.holds_gil = t->holds_gil,
		.gc = t->gc,
		.idle = idle,
		.span = t->has_span ? &t->pspan : NULL,
		.names_untrusted = p->exec_seen,
	};
}

/*
 * After a tick's reads, before its stacks are handed on: whether an exec
 * replaced the process's image since it was opened. A thread read while
 * held is of one image (an exec waits for the tracer to reap the other
 * threads before it replaces the address space), but one read running (the
 * default mode's threads besides the GIL holder, --nonblocking, read_running)
 * can be read across an exec, its frames named partly by each program, and
 * the credentials its files are opened with are the first one's. Checked
 * after the reads, the one pread sees any exec before the last of them.
 * A process no thread of which ran since the last tick (still) cannot
 * have exec'd: not checked.
 */
static void image_check(struct prof_process *p)
{
	if (!p->exec_seen && p->h.tracer && !p->h.tracer->same_image(&p->h)) {
		p->exec_seen = true;
		spy_log(SPY_LOG_DEBUG,
			"process %d replaced its program (exec) while sampled: the files its stacks name are not read "
			"from here on",
			(int)p->pid);
	}
}

/* The threads a repeat may be decided for: the thread table, when no larger than this. */
#define STILL_MAX_THREADS 256

/*
 * A process none of whose threads has been on a CPU since the last tick
 * read their schedstat (the same run time and switch count) has not
 * changed since: no frame, no GIL hand-over, no thread can have come or
 * gone, nothing can have been mapped. Its tick is the last one again,
 * with no stop, no listing and no memory read: an idle service costs a
 * schedstat read per thread a tick. Only after a tick that walked, in
 * the default mode and cleanly, every thread the process has (the tracer
 * seizes no other, and none is stopped, interrupted or owed a signal);
 * not with --native, whose kept stacks were merged already.
 */
static bool process_still(const struct prof_process *p)
{
	if (!p->repeatable || p->nth != p->nw || p->nth == 0) {
		return false;
	}
	for (size_t i = 0; i < p->nth; i++) {
		if (!p->th[i].task.slept || p->th[i].task.failed) {
			return false;
		}
	}
	return true;
}

/* After a tick of n listed threads (one: held one at a time): whether the next may repeat it. */
static bool repeatable(struct prof_process *p, long n, bool one)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	if (!one || n <= 0 || p->nat || (size_t)n != p->nth || p->nth > STILL_MAX_THREADS) {
		return false;
	}
	pid_t tids[STILL_MAX_THREADS];
	for (size_t i = 0; i < p->nth; i++) {
		const struct prof_walked *t = &p->w[i];
		if (t->rc != 0 || t->stack.truncated || !thread_find(p, p->py[i].native_tid)) {
			return false;
		}
		tids[i] = p->th[i].task.tid;
	}
	/* The table's threads (each checked by process_still) are all the tracer seized. */
	return ops->traces_only(&p->h, tids, p->nth);
}

void prof_tick_process(struct prof_tick_state *e, struct prof_process *p, uint64_t now, bool *gil_held)
{
	e->wo.now_ns = now;
	bool one = p->attached;
	bool refreshed = p->repeatable && one;
	if (refreshed) {
		threads_refresh(e, p);
	}
	p->still = refreshed && process_still(p);
	long n;
	if (p->still) {
		n = (long)p->nw;
		hold_account(e, 0, 0, false);
		e->still.ticks++;
	} else {
		n = one ? sample_held(e, p, now, refreshed) : -2;
	}
	if (n == -2) {
		one = false;
		n = sample_paused(e, p, now, refreshed);
	}
	/* The process runs again; everything below is ours alone. */
	if (n > 0 && !p->still) {
		image_check(p);
	}
	size_t native_only = 0;
	for (long i = 0; i < n; i++) {
		struct prof_walked *t = &p->w[i];
		struct prof_thread *th = NULL;
		bool fresh = false, idle = false;
		pid_t tid = p->py[i].native_tid;
		if (tid > 0) {
			th = thread_get(e, p, tid, &fresh);
			fresh = one && !p->still ? t->fresh : fresh;
			th->seen = true;
			/*
			 * Names are interned: a new pointer is a new (or first) name.
			 * An unnamed thread's [native] is its first walk's: an OpenMP
			 * worker that takes a thread state for a moment (a callback
			 * through PyGILState_Ensure) stays under one root.
			 */
			if (!th->rooted || t->name != th->name) {
				thread_root(e, th, t->name,
					    !t->name && (th->rooted ? th->native_only : t->native_only));
				th->rooted = true;
			}
		}
		native_only += t->native_only;
		*gil_held |= t->holds_gil;
		if (keep(e, p, (size_t)i, th, fresh, &idle)) {
			keep_sample(e, p, (size_t)i, th, idle);
		}
	}
	if (n >= 0) {
		e->st.live_threads += (size_t)n - native_only;
		/* Forget threads that are gone, so their stat files do not pile up. */
		threads_prune(p, false);
	}
	p->repeatable = !p->gone && repeatable(p, n, one);
	e->holds.names_most = p->names_most > e->holds.names_most ? p->names_most : e->holds.names_most;
}

/* --async: while asyncio is not loaded (3.14's _asyncio is a module loaded
 * on import), the maps are searched for it this often. */
#define ASYNC_LOOK_NS 1000000000ull

void prof_side_reads(struct prof_tick_state *e, struct prof_process *p, uint64_t now)
{
	/* Asleep or not: a process that stopped reading memory holds no cache for it. */
	if (!p->gone && now - p->last_trim_ns >= PROF_TRIM_NS) {
		spy_process_trim(&p->h);
		p->last_trim_ns = now;
	}
	/* Nothing ran since the last look: nothing new is mapped, no module loaded. */
	if (p->gone || p->still) {
		return;
	}
	prof_unsampled_read(e, p, now, false);
	/*
	 * A slowly growing heap is followed even where no walk fails: every
	 * MAPS_REFRESH_NS, and no more often than every MAPS_REFRESH_TICKS
	 * periods, so that this read's cost follows the rate as the others'
	 * do. A process of 20,000 mappings costs 25-30 ms a read: at 2 s that
	 * was 1.5% of a core, which lowering its rate (an agent's budget)
	 * could not take away.
	 */
	/* Saturating: a rate of 1e-300 makes this period infinite. */
	uint64_t every = e->o.rate > 0 ? spy_s_to_ns(MAPS_REFRESH_TICKS / e->o.rate) : 0;
	every = every > MAPS_REFRESH_NS ? every : MAPS_REFRESH_NS;
	if (now - p->last_maps_ns >= every) {
		p->h.tracer->read_maps(&p->h);
		p->last_maps_ns = now;
		return;
	}
	if (e->wo.async && !p->ah.debug_offsets && now - p->ah_looked_ns >= ASYNC_LOOK_NS &&
	    pyrt_version(p->rt) >= 0x030e0000) {
		p->ah_looked_ns = now;
		(void)prof_async_hints(p, true, &p->ah);
	}
}

void prof_threads_clear(struct prof_process *p)
{
	threads_prune(p, true);
}

void prof_holds_log(const struct prof_tick_state *e)
{
	const struct prof_holds *h = &e->holds;
	if (h->ticks) {
		spy_log(SPY_LOG_DEBUG,
			"engine: held per tick: longest thread %.1f us mean, %.1f us max; "
			"all threads %.1f us mean, %.1f us max; the whole process in %llu of %llu ticks; "
			"%llu ticks held a thread over %llu us; a thread took %.1f us to stop (mean); "
			"%llu walks behind the GIL holder's hold, without a stop; "
			"%llu threads held off a CPU, interrupted before they stopped; "
			"%llu threads read running under the GIL's switch count, %llu read again, "
			"%llu held after all, %llu held as the GIL's last holder; "
			"%llu threads stopped in all, at most %llu in one tick",
			(double)h->longest_sum_ns / 1e3 / (double)h->ticks, (double)h->longest_max_ns / 1e3,
			(double)h->total_sum_ns / 1e3 / (double)h->ticks, (double)h->total_max_ns / 1e3,
			(unsigned long long)h->whole_ticks, (unsigned long long)h->ticks,
			(unsigned long long)h->over_goal, (unsigned long long)(PROF_HOLD_GOAL_NS / 1000),
			h->stops ? (double)h->stop_sum_ns / 1e3 / (double)h->stops : 0.0,
			(unsigned long long)h->frozen, (unsigned long long)h->offcpu,
			(unsigned long long)h->running, (unsigned long long)h->retried,
			(unsigned long long)h->fell_back, (unsigned long long)h->last_holder,
			(unsigned long long)h->stopped, (unsigned long long)h->most_stopped);
	}
	if (h->names_most) {
		spy_log(SPY_LOG_DEBUG, "engine: thread names: at most %llu remote reads in a tick (a tick's budget: %d)",
			(unsigned long long)h->names_most, PYRT_NAMES_TICK_READS);
	}
	if (e->still.ticks) {
		spy_log(SPY_LOG_DEBUG, "engine: %llu process ticks repeated the last: none of its threads had run",
			(unsigned long long)e->still.ticks);
	}
	if (e->still.kept || e->still.read) {
		spy_log(SPY_LOG_DEBUG, "engine: sleeping threads not stopped: %llu stacks kept from earlier, %llu read",
			(unsigned long long)e->still.kept, (unsigned long long)e->still.read);
	}
}
