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

static int walker_walk(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n_out)
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
	pyrt_names_update(d->t.rt, w->py, n, ticker_now_ns(), WALKER_NAMES_REFRESH_NS);
	for (size_t i = 0; i < n; i++) {
		th[i].tid = w->py[i].native_tid;
		th[i].holds_gil = w->py[i].holds_gil;
		th[i].name = pyrt_thread_name(d->t.rt, &w->py[i]);
		spy_stack_reset(&th[i].stack);
		th[i].rc = pyrt_stack(d->t.rt, &w->py[i], &th[i].stack, NULL);
	}
	*n_out = n;
	return 0;
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
	return d->nat ? native_merge(d->nat, &d->t, &w->pcs[i], stack) : 0;
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

void walker_init(struct walker *w, struct spy_strtab *strs, bool native, bool native_all)
{
	memset(w, 0, sizeof(*w));
	w->strs = strs;
	w->native = native || native_all;
	w->native_all = native_all;
	w->py = spy_xcalloc(SPY_MAX_THREADS, sizeof(*w->py));
	if (w->native) {
		w->pcs = spy_xcalloc(SPY_MAX_THREADS, sizeof(*w->pcs));
	}
}

struct eng_walker walker_ops(struct walker *w)
{
	return (struct eng_walker){
		.ctx = w,
		.open = walker_open,
		.start = walker_start,
		.walk = walker_walk,
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
