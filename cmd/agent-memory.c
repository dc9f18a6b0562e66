/*
 * spy agent's memory budgets (agent-memory.h).
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/agent-memory.h"

/* After a shed, the RSS is judged again this much later: time for the worker to let go and free. */
#define SHED_SETTLE_NS (1000 * 1000 * 1000ull)

#ifdef SPY_TEST_HOOKS
/* Tests: a budget reached within the seconds a test runs, on every interpreter's speed. */
static size_t kb_from_env(const char *name, size_t dflt)
{
	const char *v = getenv(name);
	return v ? (size_t)strtoul(v, NULL, 10) << 10 : dflt;
}
#else
#define kb_from_env(name, dflt) (dflt)
#endif

size_t agent_names_budget(void)
{
	return kb_from_env("SPY_TEST_AGENT_NAMES_KB", AGENT_NAMES_BYTES);
}

size_t agent_window_budget(void)
{
	return kb_from_env("SPY_TEST_AGENT_WINDOW_KB", AGENT_WINDOW_BYTES);
}

void agent_window_open(struct agent_window *w, struct spy_strtab *strs, size_t max_bytes)
{
	memset(w, 0, sizeof(*w));
	w->p = fg_profile_new(strs, 0);
	w->strs = strs;
	w->max_bytes = max_bytes;
	w->trunc = (struct spy_stack)SPY_STACK_INIT;
}

size_t agent_window_bytes(const struct agent_window *w)
{
	struct fg_stats st;
	fg_profile_stats(w->p, &st);
	return st.bytes + st.names;
}

void agent_window_add(struct agent_window *w, const struct spy_stack *st)
{
	if (!st->n) {
		return;
	}
	if (!w->full) {
		fg_profile_add(w->p, st, 1);
		w->full = agent_window_bytes(w) > w->max_bytes;
		return;
	}
	/* Full: a stack the window holds counts as itself, a new one under the truncation frame. */
	if (fg_profile_add_known(w->p, st, 1) == 0) {
		return;
	}
	spy_stack_reset(&w->trunc);
	spy_stack_push_synthetic(&w->trunc, spy_strtab_interns(w->strs, AGENT_STACKS_OVER));
	spy_stack_append(&w->trunc, &st->v[st->n - 1], 1);
	fg_profile_add(w->p, &w->trunc, 1);
	w->over++;
}

struct fg_profile *agent_window_take(struct agent_window *w)
{
	struct fg_profile *p = w->p;
	w->p = fg_profile_new(w->strs, 0);
	w->full = false;
	w->over = 0;
	return p;
}

void agent_window_close(struct agent_window *w)
{
	fg_profile_free(w->p);
	spy_stack_release(&w->trunc);
	w->p = NULL;
}

size_t agent_rss(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long size = 0, pages = 0;
	size_t rss = 0;
	if (f && fscanf(f, "%ld %ld", &size, &pages) == 2 && pages > 0) {
		rss = (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
	}
	if (f) {
		fclose(f);
	}
	return rss;
}

bool agent_memory_over(struct agent_memory *m, uint64_t now_ns, size_t *rss)
{
	if (now_ns < m->judge_ns) {
		return false;
	}
	if (m->trim) {
		/* What the shed process's worker freed is free in the heap, not given back: RSS would not show it. */
		malloc_trim(0);
		m->trim = false;
	}
	*rss = agent_rss();
	return *rss > m->max_bytes;
}

void agent_memory_shed(struct agent_memory *m, uint64_t now_ns)
{
	m->shed++;
	m->trim = true;
	m->judge_ns = now_ns + SHED_SETTLE_NS;
}

void agent_memory_status(char *out, size_t size, uint64_t names_over, uint64_t stacks_over, uint64_t shed)
{
	int n = 0;
	out[0] = '\0';
	if (names_over) {
		n += snprintf(out + n, size - (size_t)n, ", names over budget %llu", (unsigned long long)names_over);
	}
	if (stacks_over && (size_t)n < size) {
		n += snprintf(out + n, size - (size_t)n, ", stacks over budget %llu", (unsigned long long)stacks_over);
	}
	if (shed && (size_t)n < size) {
		snprintf(out + n, size - (size_t)n, ", shed %llu", (unsigned long long)shed);
	}
}
