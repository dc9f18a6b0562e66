/*
 * The threads no interpreter lists (an OpenMP or BLAS pool, a C library's
 * workers). With --native they are sampled as native-only threads (see
 * walk.c's list_native_only); -i keeps an idle one's unwind without a stop
 * while the kernel says it sleeps where it did (prof_still_native).
 * Without --native they are not sampled; what they cost is still told, so
 * that a profile hiding half the CPU says so: their CPU time
 * (task/TID/stat's utime + stime) over the recording, read on a clock of
 * its own between ticks, once more at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "profiler/internal.h"

/*
 * -i --native: the native stack of native-only thread i, asleep, without
 * stopping it. Unwinding needs a stop, and a stop wakes the thread, so
 * schedstat cannot vouch for it as it does for still_stack; the kernel's
 * record of where the thread sleeps can: a thread blocked in a syscall
 * with the same user stack pointer and pc as when its kept stack was
 * unwound (asleep in a syscall then too) is taken as in the same call
 * still. An idle pool of 200 threads was 200 stops a tick, each waiting
 * for its thread to get a CPU. Once vouched for, kept_valid says (as for
 * still_stack) it has not been on a CPU since: no read at all.
 */
bool prof_still_native(struct prof_tick_state *e, struct prof_process *p, size_t i, struct prof_thread *th)
{
	struct prof_walked *t = &p->w[i];
	const struct spy_tracer_ops *ops = p->h.tracer;
	spy_addr_t sp, pc;
	if (!e->o.idle || !t->native_only || !th->kept_n || th->task.failed || !th->task.state ||
	    proc_task_active(&th->task)) {
		return false;
	}
	if (!th->kept_valid && (ops->task_blocked_at(&p->h, th->task.tid, &sp, &pc) != 1 ||
				sp != th->kept_sp[0] || pc != th->kept_v[0])) {
		return false;
	}
	th->kept_valid = true;
	native_pcs_set(&t->pcs, th->kept_v, th->kept_sp, th->kept_n);
	e->still.kept++;
	return true;
}

/* After native-only thread i's unwind while held: kept for still_native if it slept in a syscall. */
void prof_keep_native(struct prof_process *p, size_t i, struct prof_thread *th, bool asleep)
{
	const struct native_pcs *pcs = &p->w[i].pcs;
	th->kept_n = 0;
	/* The stop woke it: schedstat vouches for nothing until still_native has looked. */
	th->kept_valid = false;
	if (!asleep || pcs->rc != 0 || pcs->n == 0) {
		return;
	}
	if (th->kept_alloc < pcs->n) {
		th->kept_v = spy_xrealloc(th->kept_v, pcs->n * sizeof(*th->kept_v));
		th->kept_sp = spy_xrealloc(th->kept_sp, pcs->n * sizeof(*th->kept_sp));
		th->kept_alloc = pcs->n;
	}
	memcpy(th->kept_v, pcs->v, pcs->n * sizeof(*pcs->v));
	memcpy(th->kept_sp, pcs->sp, pcs->n * sizeof(*pcs->sp));
	th->kept_n = pcs->n;
}

/* How often the unlisted threads' CPU is read (one stat read each). */
#define UNSAMPLED_NS (1000 * 1000 * 1000ull)

static struct prof_unsampled *find(struct prof_process *p, pid_t tid)
{
	for (size_t i = 0; i < p->nun; i++) {
		if (p->un[i].tid == tid) {
			return &p->un[i];
		}
	}
	return NULL;
}

/*
 * One reading of thread tid (listed: the interpreter lists it now, and its
 * stacks are sampled). Time
 * counts between two readings that both found it unlisted, or from its
 * start for a thread new since the first reading: an OpenMP worker that
 * takes a thread state for a moment (a callback through PyGILState_Ensure)
 * loses the second its reading fell in, and a Python thread's last moments
 * (its thread state freed, the thread not yet gone) do not count its life.
 */
static void read_one(struct prof_tick_state *e, struct prof_process *p, pid_t tid, bool listed, bool first)
{
	struct prof_unsampled *u = find(p, tid);
	if (!u) {
		SPY_GROW(p->un, p->un_alloc, p->nun + 1);
		u = &p->un[p->nun++];
		*u = (struct prof_unsampled){ .tid = tid, .listed = true };
		/* New since the first reading, unlisted: all of its time was the recording's. */
		u->listed = first || listed;
	}
	u->seen = true;
	uint64_t cpu = 0;
	if (listed || p->h.tracer->task_cpu(&p->h, tid, &cpu) < 0) {
		u->listed = true;
		return;
	}
	if (!u->listed && cpu > u->last_ns) {
		p->un_total_ns += cpu - u->last_ns;
		e->st.unsampled_ns += cpu - u->last_ns;
		e->st.unsampled_threads += !u->counted;
		u->counted = true;
	}
	u->listed = false;
	u->last_ns = cpu;
}

void prof_unsampled_read(struct prof_tick_state *e, struct prof_process *p, uint64_t now, bool last)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	/* Not before a tick has filled the thread table: every thread would pass for unlisted. */
	if (p->nat || !p->attached || p->gone || !p->names_listed || !ops ||
	    (!last && now - p->un_read_ns < UNSAMPLED_NS)) {
		return;
	}
	bool first = !p->un_read_ns;
	p->un_read_ns = now ? now : 1;
	size_t m = prof_os_tids(p);
	for (size_t i = 0; i < p->nun; i++) {
		p->un[i].seen = false;
	}
	for (size_t i = 0; i < m; i++) {
		uint64_t k = spy_hmap_get(&p->th_index, (uint64_t)(uint32_t)p->tids[i]);
		/* Listed with no Python frame (a C thread holding a thread state a while): unsampled too. */
		bool listed = k != SPY_HMAP_NONE && !p->th[k].no_frames;
		read_one(e, p, p->tids[i], listed, first);
	}
	size_t kept = 0;
	for (size_t i = 0; i < p->nun; i++) {
		if (p->un[i].seen) {
			p->un[kept++] = p->un[i];
		}
	}
	p->nun = kept;
}
