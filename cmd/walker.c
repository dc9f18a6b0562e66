/*
 * The engine's walker for Python processes (see walker.h). Everything here
 * runs where the engine says: walk and paused in the stopped window,
 * finish with the process running again.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/walker.h"
#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"

static int walker_open(void *ctx, pid_t pid, struct spy_process *proc, void **py, struct spy_err *err)
{
	struct walker *w = ctx;
	struct walked *d = spy_xcalloc(1, sizeof(*d));
	/* In place: the pyrt keeps a pointer into the target. */
	int rc = target_open_pid(&d->t, pid, w->strs, err);
	if (rc < 0) {
		free(d);
		return rc;
	}
	proc_mem_prefetch(d->t.proc, true);
	*proc = target_process(&d->t);
	*py = d;
	return 0;
}

static int walker_start(void *ctx, void *py, struct spy_err *err)
{
	struct walker *w = ctx;
	struct walked *d = py;
	if (!w->native || d->nat) {
		return 0;
	}
	d->nat = spy_xcalloc(1, sizeof(*d->nat));
	int rc = native_init(d->nat, &d->t, w->native_all, err);
	if (rc < 0) {
		free(d->nat);
		d->nat = NULL;
	}
	return rc;
}

/* A thread renamed while sampled is seen within this. */
#define WALKER_NAMES_REFRESH_NS 1000000000ull
/* --async: while asyncio is not loaded (3.14's _asyncio is a module loaded
 * on import), the maps are searched for it this often. */
#define WALKER_ASYNC_LOOK_NS 1000000000ull

/* The `task "NAME"` frame for an interned task name. */
static const char *task_frame(struct walker *w, const char *name)
{
	size_t s = (size_t)(((uintptr_t)name >> 3) * 0x9e3779b97f4a7c15ull >> 58) &
		   (SPY_ARRAY_SIZE(w->task_frames) - 1);
	if (w->task_frames[s].name != name) {
		struct spy_buf b = SPY_BUF_INIT;
		spy_buf_addf(&b, "task \"%s\"", name);
		w->task_frames[s].name = name;
		w->task_frames[s].frame = spy_strtab_interns(w->strs, b.buf);
		spy_buf_release(&b);
	}
	return w->task_frames[s].frame;
}

/*
 * --async: in place of the event loop's frames outward of the running
 * task's coroutine (its keep-th Python frame from the innermost), one
 * `task "NAME"` frame, so samples group by task. Native frames merged in
 * count for nothing: those outward of the coroutine are the loop's too.
 */
static void cut_at_task(struct walker *w, struct spy_stack *st, const char *name, size_t keep)
{
	size_t i = 0, py = 0;
	while (i < st->n && py < keep) {
		py += st->v[i++].kind == SPY_FRAME_PYTHON;
	}
	if (py < keep) {
		return;
	}
	st->n = i;
	struct spy_frame *f = spy_stack_push(st);
	memset(f, 0, sizeof(*f));
	f->func = task_frame(w, name);
	f->kind = SPY_FRAME_SYNTHETIC;
}

/* The task thread i runs: cut now, or with --native after the merge. */
static void attribute_task(struct walker *w, struct walked *d, size_t i, struct spy_stack *st)
{
	const char *name;
	size_t keep;
	if (w->task) {
		w->task[i].name = NULL;
	}
	if (pyrt_stack_task(d->t.rt, &d->ah, &w->py[i], &name, &keep) != 1 || keep > st->n) {
		return;
	}
	if (w->task) {
		w->task[i] = (struct walker_task){ name, keep };
	} else {
		cut_at_task(w, st, name, keep);
	}
}

/* The thread list and what is known of each thread without holding it: tid, GIL (as listed), name. */
static int walker_list(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n_out)
{
	struct walker *w = ctx;
	struct walked *d = py;
	size_t n = 0;
	int rc = pyrt_threads(d->t.rt, w->py, max, &n, NULL);
	if (rc < 0) {
		*n_out = 0;
		return rc;
	}
	n = n > max ? max : n;
	/* threading's names: looked up for new threads, all again each second. */
	uint64_t now = ticker_now_ns();
	pyrt_names_update(d->t.rt, w->py, n, now, WALKER_NAMES_REFRESH_NS, PYRT_NAMES_TICK_READS);
	if (!d->names_cut_told && pyrt_names_cut(d->t.rt)) {
		d->names_cut_told = true;
		spy_log(SPY_LOG_WARN, "process %d: threading's thread list or a Thread object is past spy's bound; "
			"the threads not reached keep the kernel's name", (int)target_pid(&d->t));
	}
	if (w->async && !d->ah.debug_offsets && now - d->ah_looked_ns >= WALKER_ASYNC_LOOK_NS &&
	    pyrt_version(d->t.rt) >= 0x030e0000) {
		d->ah_looked_ns = now;
		(void)target_async_hints(&d->t, true, &d->ah);
	}
	for (size_t i = 0; i < n; i++) {
		th[i].tid = w->py[i].native_tid;
		th[i].holds_gil = w->py[i].holds_gil;
		th[i].attached = w->py[i].attached;
		th[i].gc = false;
		th[i].name = pyrt_thread_name(d->t.rt, &w->py[i]);
		th[i].rc = 0;
		spy_stack_reset(&th[i].stack);
	}
	*n_out = n;
	return 0;
}

/*
 * Listed thread i's stack. held: it alone is stopped, the others run, so
 * its thread state is looked at again first (freed or reused since the
 * listing: gone) and the GIL read again while it cannot change hands: it
 * holds the GIL if it did when listed and still does; with --native it is
 * unwound now too.
 */
static void walker_walk_thread(void *ctx, void *py, size_t i, struct eng_thread *t, bool held)
{
	struct walker *w = ctx;
	struct walked *d = py;
	spy_stack_reset(&t->stack);
	bool listed = w->py[i].holds_gil;
	if (held && pyrt_thread_recheck(d->t.rt, &w->py[i]) < 0) {
		t->rc = -SPY_EGONE;
		t->holds_gil = false;
		return;
	}
	/* One holder per GIL a tick: the one listed, if it still holds it (see the engine). */
	w->py[i].holds_gil = w->py[i].holds_gil && listed;
	t->holds_gil = w->py[i].holds_gil;
	t->attached = w->py[i].attached;
	/*
	 * The collector runs in the thread that holds the GIL (it is
	 * entered from an allocation or gc.collect()), so only that
	 * thread's interpreter is asked: one 4-byte read a tick, on a
	 * page the walk has usually cached. Without a GIL, in a thread
	 * attached to it, which the collector keeps while the others are
	 * stopped.
	 */
	int gc = w->gc && (w->py[i].holds_gil || w->py[i].attached) ?
			 pyrt_gc_collecting(d->t.rt, w->py[i].interp) : -1;
	t->gc = gc == 1;
	w->gc_known |= gc >= 0;
	t->rc = pyrt_stack(d->t.rt, &w->py[i], &t->stack, NULL);
	if (d->nat) {
		native_note_anchors(&d->t, &w->pcs[i]);
	}
	if (w->async && t->rc == 0) {
		attribute_task(w, d, i, &t->stack);
	}
	if (held && d->nat) {
		native_unwind(d->nat, &d->t, t->tid, &w->pcs[i]);
	}
}

static bool walker_frozen_by(void *ctx, void *py, size_t h, size_t j)
{
	struct walker *w = ctx;
	struct walked *d = py;
	return pyrt_gil_freezes(d->t.rt, &w->py[h], &w->py[j]);
}

static int walker_walk(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n_out)
{
	int rc = walker_list(ctx, py, th, max, n_out);
	for (size_t i = 0; rc == 0 && i < *n_out; i++) {
		walker_walk_thread(ctx, py, i, &th[i], false);
	}
	return rc;
}

static void walker_paused(void *ctx, void *py, const struct eng_thread *th, size_t n)
{
	struct walker *w = ctx;
	struct walked *d = py;
	for (size_t i = 0; i < n && d->nat; i++) {
		native_unwind(d->nat, &d->t, th[i].tid, &w->pcs[i]);
	}
}

static int walker_finish(void *ctx, void *py, size_t i, struct spy_stack *stack)
{
	struct walker *w = ctx;
	struct walked *d = py;
	int rc = d->nat ? native_merge(d->nat, &d->t, &w->pcs[i], stack) : 0;
	if (w->task && w->task[i].name) {
		cut_at_task(w, stack, w->task[i].name, w->task[i].keep);
	}
	return rc;
}

static void walker_close(void *ctx, void *py)
{
	struct walked *d = py;
	if (d->t.proc) {
		struct proc_mem_stats ms;
		proc_mem_stats(d->t.proc, &ms);
		spy_log(SPY_LOG_DEBUG,
			"process %d memory: %llu reads, %llu hits, %llu misses, "
			"%llu uncached, %llu lines prefetched, %llu syscalls",
			(int)proc_pid(d->t.proc), (unsigned long long)ms.reads,
			(unsigned long long)ms.hits, (unsigned long long)ms.misses,
			(unsigned long long)ms.uncached, (unsigned long long)ms.prefetched,
			(unsigned long long)ms.syscalls);
	}
	if (d->nat) {
		native_log_stats(d->nat);
		native_release(d->nat);
		free(d->nat);
	}
	target_release(&d->t);
	free(d);
}

void walker_init(struct walker *w, struct spy_strtab *strs, bool native, bool native_all, bool async)
{
	memset(w, 0, sizeof(*w));
	w->async = async;
	w->strs = strs;
	w->native = native || native_all;
	w->native_all = native_all;
	w->py = spy_xcalloc(SPY_MAX_THREADS, sizeof(*w->py));
	if (w->native) {
		w->pcs = spy_xcalloc(SPY_MAX_THREADS, sizeof(*w->pcs));
	}
	if (w->native && w->async) {
		w->task = spy_xcalloc(SPY_MAX_THREADS, sizeof(*w->task));
	}
}

struct eng_walker walker_ops(struct walker *w)
{
	return (struct eng_walker){
		.ctx = w,
		.open = walker_open,
		.start = walker_start,
		.walk = walker_walk,
		.list = walker_list,
		.walk_thread = walker_walk_thread,
		.frozen_by = walker_frozen_by,
		.held_only = w->native,
		.paused = w->native ? walker_paused : NULL,
		.finish = w->native ? walker_finish : NULL,
		.close = walker_close,
	};
}

void walker_release(struct walker *w)
{
	for (size_t i = 0; w->pcs && i < SPY_MAX_THREADS; i++) {
		native_pcs_release(&w->pcs[i]);
	}
	free(w->pcs);
	free(w->task);
	free(w->py);
	memset(w, 0, sizeof(*w));
}

const struct target *walker_target(const struct eng_process *p)
{
	return &((const struct walked *)p->py)->t;
}

int walker_check_gil(const struct engine *e, bool gil, struct spy_err *err)
{
	const struct target *t = walker_target(eng_root(e));
	if (!gil || !t || pyrt_has_gil(t->rt)) {
		return 0;
	}
	return spy_err_set(err, SPY_EUSAGE,
			   "-g: Python %s is a free-threaded build running without a GIL, so no thread "
			   "holds one; leave -g out (or run it with PYTHON_GIL=1)",
			   pyrt_version_string(t->rt));
}

int walker_check_async(const struct engine *e, struct spy_err *err)
{
	const struct target *t = walker_target(eng_root(e));
	return t ? pyrt_tasks_supported(t->rt, err) : 0;
}
