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

void prof_unsampled_read(struct prof_tick_state *e, struct prof_process *p, uint64_t now, bool last)
{
	const struct spy_tracer_ops *ops = p->h.tracer;
	/* Not before a tick has filled the thread table: every thread would pass for unlisted. */
	if (p->nat || !p->attached || p->gone || !p->names_listed || !ops || !ops->task_cpu ||
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
		pid_t tid = p->tids[i];
		uint64_t cpu;
		if (spy_hmap_get(&p->th_index, (uint64_t)(uint32_t)tid) != SPY_HMAP_NONE ||
		    ops->task_cpu(&p->h, tid, &cpu) < 0) {
			continue;
		}
		struct prof_unsampled *u = find(p, tid);
		if (!u) {
			SPY_GROW(p->un, p->un_alloc, p->nun + 1);
			u = &p->un[p->nun++];
			/* One started since the first reading ran all of its time within the recording. */
			*u = (struct prof_unsampled){ tid, first ? cpu : 0, cpu, false };
			e->st.unsampled_threads++;
		}
		u->seen = true;
		u->last_ns = cpu >= u->last_ns ? cpu : u->last_ns;
	}
	/* A thread gone (or listed by its interpreter now) keeps what it used. */
	uint64_t total = p->un_gone_ns;
	size_t kept = 0;
	for (size_t i = 0; i < p->nun; i++) {
		uint64_t used = p->un[i].last_ns - p->un[i].first_ns;
		total += used;
		if (p->un[i].seen) {
			p->un[kept++] = p->un[i];
		} else {
			p->un_gone_ns += used;
		}
	}
	p->nun = kept;
	e->st.unsampled_ns += total - p->un_total_ns;
	p->un_total_ns = total;
}
