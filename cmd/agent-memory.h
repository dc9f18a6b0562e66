/*
 * spy agent's memory budgets (doc/spy-agent.md, "Memory"): what one
 * process can make the agent hold, and what the agent holds in all.
 *
 * A process chooses its names and its stacks: one that makes functions
 * without end, or stacks that never repeat, would grow the agent with it
 * (unique 4 KB names took it from 17 MB to 637 MB in 9 s). So:
 *  - its names: at most AGENT_NAMES_BYTES for its life (the worker's
 *    string table, common/strtab.h);
 *  - each of its windows: at most AGENT_WINDOW_BYTES of stacks, frames
 *    and the names they carry (what encoding the window costs). Past it a
 *    new stack's samples go under one truncation frame below the
 *    process's root, AGENT_STACKS_OVER, counted in the window's metadata
 *    (stacks-over-budget) and the status line; stacks the window holds
 *    still count as themselves;
 *  - the agent: --max-memory of RSS. Past it the process whose names and
 *    window hold the most is let go (shed), said in one line and counted,
 *    and not profiled again unless it replaces its program; then the
 *    allocator gives back what it freed before the RSS is judged again.
 */
#ifndef SPY_CMD_AGENT_MEMORY_H
#define SPY_CMD_AGENT_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "flamegraph/flamegraph.h"

#define AGENT_NAMES_BYTES ((size_t)8 << 20)
#define AGENT_WINDOW_BYTES ((size_t)4 << 20)
/* Half the shipped unit's MemoryMax (512M, deploy/spy-agent.service): the backstop is never reached first. */
#define AGENT_MAX_MEMORY_MB 256
/* Below this the agent could not hold its own start (about 10 MiB) and one process. */
#define AGENT_MIN_MEMORY_MB 16
#define AGENT_STACKS_OVER "<stacks over spy's memory budget>"

/* A process's window, held to its byte budget. */
struct agent_window {
	struct fg_profile *p;
	struct spy_strtab *strs;
	size_t max_bytes;
	uint64_t over;          /* samples counted under AGENT_STACKS_OVER */
	bool full;              /* past max_bytes: only known stacks count as themselves */
	struct spy_stack trunc; /* the truncation stack: AGENT_STACKS_OVER, the sample's root */
};

/* The per-process budgets (test builds: SPY_TEST_AGENT_NAMES_KB, SPY_TEST_AGENT_WINDOW_KB). */
size_t agent_names_budget(void);
size_t agent_window_budget(void);

/* A new empty window on strs. */
void agent_window_open(struct agent_window *w, struct spy_strtab *strs, size_t max_bytes);
/* One sample of stack st (leaf first, its last frame the process's root). */
void agent_window_add(struct agent_window *w, const struct spy_stack *st);
/* The bytes the window holds: its stacks, frames and their names. */
size_t agent_window_bytes(const struct agent_window *w);
/* Hand the profile over (the caller frees it) and start an empty one. */
struct fg_profile *agent_window_take(struct agent_window *w);
void agent_window_close(struct agent_window *w);

/* The agent-wide budget, judged by the main thread. */
struct agent_memory {
	size_t max_bytes;
	uint64_t judge_ns;      /* not judged before: a shed process's memory is still being given back */
	bool trim;              /* something was shed: give the free memory back before judging */
	uint64_t shed;          /* processes shed */
};

/* The agent's resident set, bytes; 0 if unknown. */
size_t agent_rss(void);
/*
 * Whether the agent is over its budget now (*rss: what it holds); false
 * also while a shed's memory is being given back (at most one process is
 * shed a second).
 */
bool agent_memory_over(struct agent_memory *m, uint64_t now_ns, size_t *rss);
/* A process was shed at now_ns: counted, and judged again a second later. */
void agent_memory_shed(struct agent_memory *m, uint64_t now_ns);
/* The status line's tail: ", names over budget N, stacks over budget N, shed N", each only when not 0. */
void agent_memory_status(char *out, size_t size, uint64_t names_over, uint64_t stacks_over, uint64_t shed);

#endif
