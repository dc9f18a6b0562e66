/*
 * Without --native, the threads no interpreter lists (an OpenMP or BLAS
 * pool, a C library's workers) are not sampled; what they cost is still
 * told, so that a profile hiding half the CPU says so: their CPU time
 * (task/TID/stat's utime + stime) over the recording, read on a clock of
 * its own between ticks, once more at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "profiler/internal.h"

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
