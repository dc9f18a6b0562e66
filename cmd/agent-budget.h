/*
 * spy agent's CPU budget (--max-cpu), charged to whoever causes it
 * (cmd/agent-budget.c): each process's sampling on its own worker's CPU
 * clock, its rate lowered alone when it is the expensive one; opening
 * processes under a share of their own, two at a time; and what the scans
 * of /proc may spend (prof_fleet_set_budget).
 */
#ifndef SPY_CMD_AGENT_BUDGET_H
#define SPY_CMD_AGENT_BUDGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Processes opened at once, at most: each open reads the whole of a process's maps and its ELF. */
#define AGENT_OPENS_MAX 2
/* Of --max-cpu, the share the scans of /proc may take, and the share opens may. */
#define AGENT_SCAN_SHARE 0.2
#define AGENT_OPEN_SHARE 0.5
/* Examinations of processes per scan (two scans a second). */
#define AGENT_EXAMS_PER_SCAN 100

/* One process's part, in its worker. */
struct agent_cost {
	clockid_t clock;                 /* the worker thread's CPU clock */
	bool has_clock;
	atomic_uint_fast64_t opened_cpu; /* the worker's CPU when its open ended, plus 1; 0 while it opens */
	_Atomic double rate;             /* what its worker samples at, set by the budget */
	/* The budget's own, from one period to the next. */
	uint64_t cpu_at;                 /* the worker's CPU at the last period's end; 0: not yet measured */
	double full;                     /* its share of a core at the full rate, over the last period */
};

struct agent_budget {
	double rate, max_cpu;            /* --rate (Hz), --max-cpu (% of one core) */
	uint64_t at_ns, cpu_at, ticks_at;
	/* Over the last period: */
	double cost_ns;                  /* the agent's CPU per tick taken; 0 until measured */
	double used, overhead;           /* the agent's CPU, and what was not sampling (scans, opens, pushes), % of a core */
	double highest, lowest;          /* the rates in use */
	size_t lowered;                  /* processes below --rate */
	/* Opens: how many run, and the CPU credit left them (ns). */
	pthread_mutex_t lock;
	unsigned opening;
	double open_credit;
	uint64_t open_at;
};

void agent_budget_init(struct agent_budget *b, double rate, double max_cpu, uint64_t now, uint64_t cpu);
void agent_budget_release(struct agent_budget *b);
/* A new worker's part, at rate, before its thread starts; then its thread's clock, once it runs. */
void agent_cost_init(struct agent_cost *c, double rate);
void agent_cost_track(struct agent_cost *c, pthread_t th);

/* Whether a period (3 s) has passed since the last one. */
bool agent_budget_due(const struct agent_budget *b, uint64_t now);
/*
 * Once a period (3 s; false before): the agent's CPU (cpu, ns) and ticks
 * (over every process) since the start; c the live workers' parts. Sets
 * each one's rate: all at --rate when that fits the budget; otherwise the
 * budget left after what was not sampling is shared out evenly, the cheap
 * processes keeping their full rate and the expensive ones lowered to
 * their share (down to 0.5 Hz, up by half at most a period).
 */
bool agent_budget_period(struct agent_budget *b, struct agent_cost *const *c, size_t n, uint64_t now,
			 uint64_t cpu, uint64_t ticks);

/* Whether a process may be opened now (fewer than AGENT_OPENS_MAX at once, credit left); if so it is counted. */
bool agent_open_begin(struct agent_budget *b);
/* The open begun at the worker's CPU from (spy_thread_cpu_ns) ended: its cost charged to the opens' credit, and from
 * now on the worker's CPU is its process's sampling (c). Returns the cost (ns). */
uint64_t agent_open_end(struct agent_budget *b, struct agent_cost *c, uint64_t from);
/* How long a process whose open cost cost_ns waits before it is opened again: its opens alone
 * may not take more than the opens' share. */
uint64_t agent_open_wait(const struct agent_budget *b, uint64_t cost_ns);

#endif
