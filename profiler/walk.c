/*
 * Reading a process's threads (see internal.h): the one way to list them
 * (thread states, GIL, names) and walk each one's Python stack, for ticks
 * and for dump's look alike. With --native each thread's native stack is
 * unwound while it is stopped and merged once the process runs again.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "profiler/internal.h"

/* A thread renamed while sampled is seen within this. */
#define NAMES_REFRESH_NS 1000000000ull

/*
 * --async: in place of the event loop's frames outward of the running
 * task's coroutine (its keep-th Python frame from the innermost), one
 * `task "NAME"` frame, so samples group by task. Native frames merged in
 * count for nothing: those outward of the coroutine are the loop's too.
 */
/* The `task "NAME"` frame for an interned task name. */
static const char *task_frame(struct prof_process *pp, const char *name)
{
	size_t s = (size_t)(((uintptr_t)name >> 3) * 0x9e3779b97f4a7c15ull >> 58) &
		   (SPY_ARRAY_SIZE(pp->task_frames) - 1);
	if (pp->task_frames[s].name != name) {
		struct spy_buf b = SPY_BUF_INIT;
		spy_buf_addf(&b, "task \"%s\"", name);
		pp->task_frames[s].name = name;
		pp->task_frames[s].frame = spy_strtab_interns(pp->strs, b.buf);
		spy_buf_release(&b);
	}
	return pp->task_frames[s].frame;
}

void prof_cut_at_task(struct prof_process *pp, struct spy_stack *st, const char *name, size_t keep)
{
	size_t i = 0, py = 0;
	while (i < st->n && py < keep) {
		py += st->v[i++].kind == SPY_FRAME_PYTHON;
	}
	if (py < keep) {
		return;
	}
	st->n = i;
	spy_stack_push_synthetic(st, task_frame(pp, name));
}

/* The task thread i runs: cut now, or with --native after the merge. */
static void attribute_task(struct prof_process *pp, size_t i, bool native)
{
	struct prof_walked *t = &pp->w[i];
	const char *name;
	size_t keep;
	t->task = NULL;
	if (pyrt_stack_task(pp->rt, &pp->ah, &pp->py[i], &name, &keep) != 1 || keep > t->stack.n) {
		return;
	}
	if (native) {
		t->task = name;
		t->task_keep = keep;
	} else {
		prof_cut_at_task(pp, &t->stack, name, keep);
	}
}

/* Room for at least n listed threads (at most SPY_MAX_THREADS), the new entries zeroed. */
static void grow_walked(struct prof_process *pp, size_t n)
{
	size_t want = pp->walloc ? pp->walloc : 8;
	while (want < n) {
		want *= 2;
	}
	want = want > SPY_MAX_THREADS ? SPY_MAX_THREADS : want;
	pp->w = spy_xrealloc(pp->w, want * sizeof(*pp->w));
	pp->py = spy_xrealloc(pp->py, want * sizeof(*pp->py));
	memset(pp->w + pp->walloc, 0, (want - pp->walloc) * sizeof(*pp->w));
	memset(pp->py + pp->walloc, 0, (want - pp->walloc) * sizeof(*pp->py));
	pp->walloc = want;
}

size_t prof_os_tids(struct prof_process *pp)
{
	const struct spy_tracer_ops *ops = pp->h.tracer;
	if (!ops) {
		return 0;
	}
	for (;;) {
		if (!pp->tids_alloc) {
			pp->tids_alloc = 64;
			pp->tids = spy_xcalloc(pp->tids_alloc, sizeof(*pp->tids));
		}
		size_t n = ops->tids(&pp->h, pp->tids, pp->tids_alloc);
		if (n < pp->tids_alloc || pp->tids_alloc >= SPY_MAX_THREADS) {
			return n;
		}
		pp->tids_alloc *= 2;
		pp->tids = spy_xrealloc(pp->tids, pp->tids_alloc * sizeof(*pp->tids));
	}
}

static int tid_cmp(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return (x > y) - (x < y);
}

/*
 * --native: after the n Python threads listed, every other thread the
 * tracer seized (an OpenMP or BLAS worker, a C library's own pool),
 * without a thread state: its stack is its native frames alone. The
 * tracer's list is as of the tick's proc_track (or the look's pause), so
 * no listing of task/ is added to a tick. The total stays within the
 * table's bound. The new count.
 */
static size_t list_native_only(struct prof_process *pp, size_t n)
{
	size_t m = pp->nat ? prof_os_tids(pp) : 0;
	if (!m) {
		return n;
	}
	/* The Python threads' TIDs, sorted, to find the others by one merge. */
	pid_t *py = spy_xcalloc(n ? n : 1, sizeof(*py));
	for (size_t i = 0; i < n; i++) {
		py[i] = pp->py[i].native_tid;
	}
	qsort(py, n, sizeof(*py), tid_cmp);
	size_t k = n, j = 0;
	for (size_t i = 0; i < m && k < SPY_MAX_THREADS; i++) {
		while (j < n && py[j] < pp->tids[i]) {
			j++;
		}
		if (j < n && py[j] == pp->tids[i]) {
			continue;
		}
		if (k >= pp->walloc) {
			grow_walked(pp, k + 1);
			if (k >= pp->walloc) {
				break;
			}
		}
		memset(&pp->py[k], 0, sizeof(pp->py[k]));
		pp->py[k].native_tid = pp->tids[i];
		pp->w[k].native_only = true;
		k++;
	}
	free(py);
	return k;
}

/* What a listing clears of each thread's last tick. */
static void walked_reset(struct prof_walked *t)
{
	t->rc = 0;
	t->task = NULL;
	t->state_read = false;
	t->walked = false;
	/* Unwound only if held this tick: nothing of an earlier one is merged. */
	t->pcs.n = 0;
	t->pcs.rc = 0;
	spy_stack_reset(&t->stack);
}

int prof_walk_list(struct prof_process *pp, const struct prof_walk_opts *o, struct spy_err *err)
{
	size_t n = 0;
	int rc = pyrt_threads(pp->rt, pp->py, pp->walloc, &n, err);
	n = n > SPY_MAX_THREADS ? SPY_MAX_THREADS : n;
	if (rc == 0 && n > pp->walloc) {
		/*
		 * Sized to the threads the process has, not to the bound: an
		 * agent holds hundreds of processes, most with a thread or two,
		 * and a table of SPY_MAX_THREADS each was 700 KiB a process.
		 */
		grow_walked(pp, n);
		rc = pyrt_threads(pp->rt, pp->py, pp->walloc, &n, err);
		n = n > pp->walloc ? pp->walloc : n;
	}
	struct py_thread *py = pp->py;
	pp->nw = 0;
	if (rc < 0) {
		return rc;
	}
	/* A container's target numbers its threads its own way: spy's TIDs from here on. */
	for (size_t i = 0; pp->h.tracer && i < n; i++) {
		py[i].native_tid = pp->h.tracer->host_tid(&pp->h, py[i].own_tid);
	}
	/* threading's names: looked up for new threads, all again each second. */
	uint64_t now = o->now_ns ? o->now_ns : spy_now_ns();
	uint64_t before = pyrt_names_reads(pp->rt);
	size_t budget = o->names_reads ? o->names_reads : PYRT_NAMES_TICK_READS;
	pyrt_names_update(pp->rt, py, n, now, NAMES_REFRESH_NS, budget);
	/*
	 * A Thread object in memory mapped since the maps were read reads as
	 * garbage: a launched program's threads went unnamed until the next
	 * refresh, two seconds on. Not on the walks' backoff, which a start-up
	 * full of failed walks stretches to seconds: a failing pass is rerun
	 * a few ticks only (pyrt_names_failing), so at most that many reads.
	 */
	if (pyrt_names_failing(pp->rt) && pp->h.tracer &&
	    now - pp->last_maps_ns >= MAPS_RETRY_NS) {
		pp->h.tracer->read_maps(&pp->h);
		pp->last_maps_ns = now;
		pyrt_names_update(pp->rt, py, n, now, NAMES_REFRESH_NS, budget);
	}
	uint64_t made = pyrt_names_reads(pp->rt) - before;
	if (pp->names_listed && made > pp->names_most) {
		pp->names_most = made;
	}
	pp->names_listed = true;
	if (!pp->names_cut_told && pyrt_names_cut(pp->rt)) {
		pp->names_cut_told = true;
		spy_log(SPY_LOG_WARN, "process %d: threading's thread list or a Thread object is past spy's bound; "
			"the threads found are named, the rest are not", (int)pp->pid);
	}
	for (size_t i = 0; i < n; i++) {
		struct prof_walked *t = &pp->w[i];
		t->holds_gil = py[i].holds_gil;
		t->attached = py[i].attached;
		t->gc = false;
		t->name = pyrt_thread_name(pp->rt, &py[i]);
		t->native_only = false;
		walked_reset(t);
	}
	size_t all = list_native_only(pp, n);
	for (size_t i = n; i < all; i++) {
		struct prof_walked *t = &pp->w[i];
		t->holds_gil = t->attached = t->gc = false;
		t->name = NULL;
		walked_reset(t);
	}
	pp->nw = all;
	return 0;
}

/*
 * Listed thread i's stack. held: it alone is stopped, the others run (or
 * it is read under its GIL's switch count, see tick.c's read_running), so
 * its thread state is looked at again first (freed or reused since the
 * listing: gone) and the GIL read again while it cannot change hands: it
 * holds the GIL if it did when listed and still does; with --native it is
 * unwound now too.
 */
void prof_walk_thread(struct prof_process *pp, const struct prof_walk_opts *o, size_t i, bool held,
		      bool *gc_known)
{
	struct prof_walked *t = &pp->w[i];
	struct py_thread *py = &pp->py[i];
	spy_stack_reset(&t->stack);
	t->walked = true;
	t->has_span = false;
	if (t->native_only) {
		/* No Python stack to read or check: its native one, stopped, is all. */
		t->rc = 0;
		t->pcs.nanchors = 0;
		if (held) {
			prof_walk_unwind(pp, i);
		}
		return;
	}
	bool listed = py->holds_gil;
	if (held && pyrt_thread_recheck(pp->rt, py) < 0) {
		t->holds_gil = false;
		/*
		 * --native: the thread is stopped, so alive; its thread state was
		 * freed since the listing (a C thread's PyGILState_Release): a
		 * native-only thread now.
		 */
		if (pp->nat) {
			t->native_only = true;
			t->name = NULL;
			prof_walk_thread(pp, o, i, held, gc_known);
			return;
		}
		t->rc = -SPY_EGONE;
		return;
	}
	/* One holder per GIL a tick: the one listed, if it still holds it (see tick.c). */
	py->holds_gil = py->holds_gil && listed;
	t->holds_gil = py->holds_gil;
	t->attached = py->attached;
	/*
	 * The collector runs in the thread that holds the GIL (it is
	 * entered from an allocation or gc.collect()), so only that
	 * thread's interpreter is asked: one 4-byte read a tick, on a
	 * page the walk has usually cached. Without a GIL, in a thread
	 * attached to it, which the collector keeps while the others are
	 * stopped.
	 */
	int gc = o->gc && (py->holds_gil || py->attached) ? pyrt_gc_collecting(pp->rt, py->interp) : -1;
	t->gc = gc == 1;
	*gc_known |= gc >= 0;
	t->rc = pyrt_stack(pp->rt, py, &t->stack, NULL);
	if (pp->nat) {
		native_note_anchors(pp->rt, &t->pcs);
	}
	if (o->async && t->rc == 0) {
		attribute_task(pp, i, pp->nat != NULL);
	}
	/* Only while it cannot run: a context read as it changes could name a span that ended. */
	if (t->rc == 0 && (held || t->frozen || pp->paused)) {
		t->has_span = pyrt_thread_span(pp->rt, py, o->now_ns ? o->now_ns : spy_now_ns(), &t->span) == 1;
	}
	if (held && pp->nat) {
		prof_walk_unwind(pp, i);
	}
}

bool prof_walk_frozen_by(struct prof_process *pp, size_t h, size_t j)
{
	return pyrt_gil_freezes(pp->rt, &pp->py[h], &pp->py[j]);
}

void prof_walk_unwind(struct prof_process *pp, size_t i)
{
	native_unwind(pp->nat, &pp->h, pp->py[i].native_tid, &pp->w[i].pcs);
}

int prof_walk_finish(struct prof_process *pp, size_t i)
{
	struct prof_walked *t = &pp->w[i];
	int rc = pp->nat ? native_merge(pp->nat, &pp->h, &t->pcs, &t->stack) : 0;
	if (t->task) {
		prof_cut_at_task(pp, &t->stack, t->task, t->task_keep);
	}
	return rc;
}
