/*
 * One look at a process or a core (see prof_look in profiler.h), for dump.
 *
 * The order of work is what keeps the stopped window short: what each
 * thread is blocked in is read from /proc *before* pausing (once paused
 * every thread reads as 't' and its syscall is interrupted), the target is
 * stopped only for the memory walk (stacks, locals, where the GIL is), and
 * symbols and merging happen after it runs again. A core needs no
 * pausing: the same walk runs over its memory, and each thread's wait
 * comes from its registers, as does its native stack with --native.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "profiler/internal.h"

/* The GIL is a mutex and a condition variable or two: few ranges. */
#define GIL_RANGES 6

/*
 * A thread waiting for the GIL wakes every switch interval (5 ms) to ask
 * the holder to let go, and reads R for that moment; the more so right
 * after a pause, which interrupts every wait. And a wait that a pause
 * interrupted goes on in restart_syscall, which does not say on which
 * futex. Threads that read either way are looked at again, a little later,
 * a few times, over more than a switch interval: by then a GIL waiter has
 * waited again, on the GIL's own futex.
 */
#define WAIT_LOOKS 4
#define WAIT_LOOK_GAP_NS (2 * 1000 * 1000)

enum prof_state prof_classify(const struct spy_wait *w, bool gil_known, bool futex_is_gil)
{
	switch (w->kind) {
	case SPY_WAIT_RUNNING:
		return PROF_STATE_RUNNING;
	case SPY_WAIT_OTHER:
		return PROF_STATE_IDLE;
	case SPY_WAIT_FUTEX:
		if (futex_is_gil) {
			return PROF_STATE_GIL;
		}
		/* Without the GIL's address a futex could be either: say only what is sure. */
		return gil_known ? PROF_STATE_LOCK : PROF_STATE_IDLE;
	default:
		return PROF_STATE_UNKNOWN;
	}
}

/*
 * Tests need to signal spy while it holds the target stopped, to prove the
 * target is released on every exit path, and a walk slow enough to meet
 * the stop's limit; a real dump's stopped window is a few milliseconds,
 * far too short to hit. SPY_TEST_HOLD_PAUSED_MS widens it (as a slow walk
 * would: up to the limit), in test builds only (-Dtest_hooks=true): a knob
 * that holds a production target stopped has no business in an installed
 * spy.
 */
static void hold_paused_for_tests(uint64_t deadline)
{
#ifdef SPY_TEST_HOOKS
	const char *v = getenv("SPY_TEST_HOLD_PAUSED_MS");
	uint64_t until = spy_now_ns() + (v ? (uint64_t)strtoul(v, NULL, 10) * 1000000ull : 0);
	while (spy_now_ns() < until && spy_now_ns() < deadline && !proc_stop_requested) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
#else
	(void)deadline;
#endif
}

static bool look_again(const struct spy_wait *w)
{
	return w->kind == SPY_WAIT_RUNNING || (w->kind == SPY_WAIT_FUTEX && !w->futex);
}

/* Every thread and what it waits on, before pausing; a core's never changes. */
static long read_os_threads(struct spy_process *p, struct proc_thread *out, size_t max, struct spy_err *err)
{
	long n = p->ops->threads(p, out, max, err);
	for (int look = 1; look < WAIT_LOOKS && n > 0 && p->tracer; look++) {
		bool again = false;
		for (long i = 0; i < n && !again; i++) {
			again = look_again(&out[i].wait);
		}
		if (!again || proc_stop_requested) {
			break;
		}
		struct timespec gap = { 0, WAIT_LOOK_GAP_NS };
		nanosleep(&gap, NULL);
		for (long i = 0; i < n; i++) {
			if (look_again(&out[i].wait)) {
				p->tracer->thread_wait(p, out[i].tid, &out[i].wait);
			}
		}
	}
	return n;
}

static const struct proc_thread *find_os_thread(const struct proc_thread *os, size_t n, pid_t tid)
{
	for (size_t i = 0; i < n; i++) {
		if (os[i].tid == tid) {
			return &os[i];
		}
	}
	return NULL;
}

static void collect_locals(struct pyrt *rt, struct prof_look_thread *d, size_t *left)
{
	/* Per Python frame: pyrt's frame i is the i-th, a marker (<interpreter N>) none. */
	size_t npy = 0;
	for (size_t j = 0; j < d->stack.n; j++) {
		npy += d->stack.v[j].kind == SPY_FRAME_PYTHON;
	}
	d->frame_locals = spy_xcalloc(npy ? npy : 1, sizeof(*d->frame_locals));
	for (size_t j = 0; j < npy; j++) {
		struct prof_frame_locals *fl = &d->frame_locals[j];
		/* What the array may grow by for this frame (doubling: twice). */
		size_t worst = 2 * PYRT_MAX_LOCALS * sizeof(*d->locals);
		if (*left < worst) {
			fl->first = d->nlocals;
			fl->unreadable = fl->over_budget = true;
			continue;
		}
		size_t had = d->alloc_locals;
		SPY_GROW(d->locals, d->alloc_locals, d->nlocals + PYRT_MAX_LOCALS);
		size_t grown = (d->alloc_locals - had) * sizeof(*d->locals);
		*left -= grown < *left ? grown : *left;
		fl->first = d->nlocals;
		int rc = pyrt_frame_locals(rt, j, d->locals + d->nlocals, PYRT_MAX_LOCALS, &fl->n);
		fl->unreadable = rc < 0;
		fl->over_budget = rc == -SPY_EBOUND;
		d->nlocals += fl->n;
	}
	d->nframe_locals = npy;
}

/* The stopped window's reads, with what the limit allows. */
struct look_ctx {
	struct prof_look *l;
	const struct prof_look_opts *o;
	const struct proc_thread *os;
	size_t nos;
	uint64_t deadline;
	bool maps_again;   /* the maps were read again, once, while stopped */
};

static bool over_time(struct look_ctx *c)
{
	if (!c->l->incomplete && c->l->pp->h.tracer && spy_now_ns() >= c->deadline) {
		c->l->incomplete = true;
	}
	return c->l->incomplete || proc_stop_requested;
}

/* Listed thread i: its stack (the walk ticks use), locals, whether it waits for the GIL. */
static void collect_thread(struct look_ctx *c, size_t i)
{
	struct prof_process *pp = c->l->pp;
	struct prof_look_thread *d = &c->l->threads[c->l->n++];
	static const struct prof_walk_opts wo = { 0 };
	bool gc_known = false;
	d->py = pp->py[i];
	d->name = pp->w[i].name;
	d->native_only = pp->w[i].native_only;
	const struct proc_thread *ot = find_os_thread(c->os, c->nos, d->py.native_tid);
	if (ot) {
		memcpy(d->comm, ot->comm, sizeof(d->comm));
		d->wait = ot->wait;
	}
	/* A thread whose walk fails still gets printed, with what was read. */
	prof_walk_thread(pp, &wo, i, false, &gc_known);
	/*
	 * The walk refuses addresses outside the maps, read before the stop:
	 * memory mapped since (a thread state's new data stack: each entry
	 * into a sub-interpreter makes one) reads again, once, as a tick's
	 * walk does (tick.c's walk_with_retry). Stopped, nothing maps more.
	 */
	struct prof_walked *w = &pp->w[i];
	if ((w->rc != 0 || w->stack.truncated) && !c->maps_again && pp->h.tracer) {
		c->maps_again = true;
		pp->h.tracer->read_maps(&pp->h);
		prof_walk_thread(pp, &wo, i, false, &gc_known);
	}
	spy_stack_copy(&d->stack, &pp->w[i].stack);
	if (c->o->locals) {
		collect_locals(pp->rt, d, &c->l->locals_left);
	}
	struct pyrt_range gil[GIL_RANGES];
	/* A thread without a thread state waits for no GIL: any futex of its is a lock's. */
	size_t ng = d->native_only ? 0 : pyrt_gil_ranges(pp->rt, d->py.interp, gil, GIL_RANGES);
	bool in_gil = false;
	for (size_t k = 0; k < ng && d->wait.kind == SPY_WAIT_FUTEX; k++) {
		in_gil |= d->wait.futex >= gil[k].lo && d->wait.futex < gil[k].hi;
	}
	d->in_gil = in_gil;
	d->state = prof_classify(&d->wait, ng > 0 || d->native_only, in_gil);
	if (pp->nat) {
		prof_walk_unwind(pp, i);
	}
}

/* What is read while the target is held: threads, then (--tasks) the tasks. */
static int collect(struct look_ctx *c, struct spy_err *err)
{
	struct prof_look *l = c->l;
	/* One listing names every thread it can: dump has no next tick. */
	static const struct prof_walk_opts wo = { .names_reads = PYRT_NAMES_CALL_READS };
	hold_paused_for_tests(c->deadline);
	int rc = prof_walk_list(l->pp, &wo, err);
	if (rc < 0) {
		return rc;
	}
	if (c->o->locals) {
		pyrt_locals_budget(l->pp->rt, PROF_LOCALS_READS);
	}
	for (size_t i = 0; i < l->pp->nw && !over_time(c); i++) {
		collect_thread(c, i);
	}
	if (c->o->tasks && !over_time(c)) {
		/* After the threads: a running task's walk reuses pyrt_stack's scratch. */
		l->task_v = spy_xcalloc(PROF_MAX_TASKS, sizeof(*l->task_v));
		if (pyrt_tasks(l->pp->rt, &l->pp->ah, l->task_v, PROF_MAX_TASKS, &l->tasks_total, &l->tasks_err) < 0) {
			l->tasks_error = l->tasks_err.msg;
			l->tasks_total = 0;
		}
		l->ntasks = l->tasks_total < PROF_MAX_TASKS ? l->tasks_total : PROF_MAX_TASKS;
	}
	return 0;
}

/* Stop the target if it runs (a core is read as it is), collect, let it go on every path. */
static int look_stopped(struct look_ctx *c, struct spy_err *err)
{
	struct spy_process *h = &c->l->pp->h;
	const struct spy_tracer_ops *t = h->tracer;
	int rc = t ? t->attach(h, err) : 0;
	if (rc == 0 && t) {
		rc = t->pause(h, err);
	}
	uint64_t t0 = spy_now_ns();
	c->deadline = t0 + PROF_LOOK_STOP_NS;
	if (rc == 0 && !proc_stop_requested) {
		rc = collect(c, err);
	}
	if (t) {
		t->detach(h);
	}
	c->l->stopped_ms = (double)(spy_now_ns() - t0) / 1e6;
	spy_log(SPY_LOG_DEBUG, "dump: target paused for %.3f ms (%zu threads)", c->l->stopped_ms, c->l->n);
	return rc;
}

static int look_open(struct prof_look *l, const struct prof_look_opts *o, struct spy_err *err)
{
	int rc = o->core ? prof_process_open_core(&l->pp, o->core, o->exe, o->root, &l->strs, err)
			 : prof_process_open(&l->pp, o->pid, false, &l->strs, err);
	if (rc < 0) {
		return rc;
	}
	if (o->tasks && (rc = pyrt_tasks_supported(l->pp->rt, err)) < 0) {
		return rc;
	}
	if (o->tasks) {
		(void)prof_async_hints(l->pp, false, &l->pp->ah);
	}
	l->pid = (int)l->pp->pid;
	l->cmdline = prof_process_cmdline(l->pp);
	l->version = pyrt_version_string(l->pp->rt);
	l->binary = l->pp->binary;
	l->free_threaded = pyrt_free_threaded(l->pp->rt);
	l->no_gil = !pyrt_has_gil(l->pp->rt);
	return o->native ? prof_native_start(l->pp, o->native_all, err) : 0;
}

int prof_look(struct prof_look *l, const struct prof_look_opts *o, struct spy_err *err)
{
	memset(l, 0, sizeof(*l));
	l->o = *o;
	l->strs = (struct spy_strtab)SPY_STRTAB_INIT;
	l->locals_left = PROF_LOCALS_BUDGET;
	int rc = look_open(l, o, err);
	if (rc < 0) {
		return rc;
	}
	l->threads = spy_xcalloc(SPY_MAX_THREADS, sizeof(*l->threads));
	struct proc_thread *os = spy_xcalloc(SPY_MAX_THREADS, sizeof(*os));
	long nos = read_os_threads(&l->pp->h, os, SPY_MAX_THREADS, err);
	struct look_ctx c = { l, o, os, nos > 0 ? (size_t)nos : 0, 0, false };
	rc = nos < 0 ? (int)nos : look_stopped(&c, err);
	free(os);
	/* Symbols and merging after the target runs again. */
	for (size_t i = 0; l->pp->nat && i < l->n; i++) {
		native_merge(l->pp->nat, &l->pp->h, &l->pp->w[i].pcs, &l->threads[i].stack);
	}
	return rc;
}

void prof_look_release(struct prof_look *l)
{
	for (size_t i = 0; l->threads && i < l->n; i++) {
		spy_stack_release(&l->threads[i].stack);
		free(l->threads[i].frame_locals);
		free(l->threads[i].locals);
	}
	free(l->threads);
	free(l->task_v);
	prof_process_free(l->pp);
	spy_strtab_release(&l->strs);
	memset(l, 0, sizeof(*l));
}

void prof_value_repr(const struct py_value *v, struct spy_buf *out)
{
	pyrt_value_repr(v, out);
}
