/*
 * spy agent's CPU budget (see agent-budget.h).
 *
 * Once measured the one way that counted everything (the process's CPU
 * per tick, the rate scaled the same for every process), a process that
 * costs much made every other one pay: 100 sleeping processes of 20,000
 * mappings each, none profiled, took a benign one beside them from 19 Hz
 * to 1 Hz. Now each process's sampling is read off its own worker's
 * thread clock, what is not sampling (the scans, the opens, the pusher)
 * is bounded where it is spent and only subtracted here, and the rest is
 * shared out by max-min fairness: whoever fits under an even share keeps
 * the full rate, and what they leave goes to the others, each lowered in
 * proportion to what it costs.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/agent-budget.h"
#include "common/util.h"

#define AGENT_BUDGET_NS (3 * 1000 * 1000 * 1000ull)
/* Below this rate a window would hold too few samples to mean anything. */
#define AGENT_MIN_RATE_HZ 0.5
/* The opens may spend this many seconds of their share at once (the start on a node of 50 Pythons). */
#define AGENT_OPEN_BURST_S 20.0

static uint64_t clock_ns(clockid_t c, bool *ok)
{
	struct timespec ts;
	*ok = clock_gettime(c, &ts) == 0;
	return *ok ? (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec : 0;
}

static double open_share(const struct agent_budget *b)
{
	return b->max_cpu / 100 * AGENT_OPEN_SHARE;
}

void agent_budget_init(struct agent_budget *b, double rate, double max_cpu, uint64_t now, uint64_t cpu)
{
	memset(b, 0, sizeof(*b));
	b->rate = rate;
	b->max_cpu = max_cpu;
	b->at_ns = now;
	b->cpu_at = cpu;
	b->highest = b->lowest = rate;
	pthread_mutex_init(&b->lock, NULL);
	b->open_credit = open_share(b) * AGENT_OPEN_BURST_S * 1e9;
	b->open_at = now;   /* CLOCK_MONOTONIC, as spy_now_ns */
}

void agent_budget_release(struct agent_budget *b)
{
	pthread_mutex_destroy(&b->lock);
}

void agent_cost_init(struct agent_cost *c, double rate)
{
	c->has_clock = false;
	atomic_init(&c->opened_cpu, 0);
	atomic_init(&c->rate, rate);
	c->cpu_at = 0;
	c->full = 0;
}

void agent_cost_track(struct agent_cost *c, pthread_t th)
{
	c->has_clock = pthread_getcpuclockid(th, &c->clock) == 0;
}

/* Each process's share of a core over the period, scaled to the full rate: what it would cost there. */
static double measure(struct agent_budget *b, struct agent_cost *const *c, size_t n, double period_ns)
{
	double sampling = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t opened = atomic_load(&c[i]->opened_cpu);
		bool ok = false;
		uint64_t now = opened && c[i]->has_clock ? clock_ns(c[i]->clock, &ok) : 0;
		if (!ok) {
			c[i]->full = 0;   /* still opening (its CPU is the opens'), or its thread is ending */
			continue;
		}
		bool first = !c[i]->cpu_at;
		uint64_t from = first ? opened - 1 : c[i]->cpu_at;
		double used = now > from ? (double)(now - from) : 0;
		c[i]->cpu_at = now;
		sampling += used;
		double rate = atomic_load(&c[i]->rate);
		/*
		 * Not judged on its first period: its first walks read what later
		 * ones find cached (code objects, names), and its labels are read
		 * once; a benign process lowered for that came back only periods later.
		 */
		c[i]->full = first ? 0 : used / period_ns * (b->rate / (rate > 0 ? rate : b->rate));
	}
	return sampling;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

/*
 * The share of a core each process may take: every one whose cost at the
 * full rate fits under an even share of what is left keeps it, the rest
 * split what those leave (water-filling). INFINITY-like: all fit.
 */
static double fair_cap(struct agent_cost *const *c, size_t n, double budget)
{
	double *v = malloc(n * sizeof(*v));
	if (!v) {
		return budget / (double)(n ? n : 1);
	}
	for (size_t i = 0; i < n; i++) {
		v[i] = c[i]->full;
	}
	qsort(v, n, sizeof(*v), cmp_double);
	double left = budget, cap = 1e300;
	for (size_t i = 0; i < n; i++) {
		double even = left / (double)(n - i);
		if (v[i] > even) {
			cap = even;
			break;
		}
		left -= v[i];
	}
	free(v);
	return cap;
}

bool agent_budget_due(const struct agent_budget *b, uint64_t now)
{
	return now - b->at_ns >= AGENT_BUDGET_NS;
}

bool agent_budget_period(struct agent_budget *b, struct agent_cost *const *c, size_t n, uint64_t now,
			 uint64_t cpu, uint64_t ticks)
{
	if (!agent_budget_due(b, now)) {
		return false;
	}
	double period = (double)(now - b->at_ns), used = cpu > b->cpu_at ? (double)(cpu - b->cpu_at) : 0;
	b->cost_ns = ticks - b->ticks_at >= 10 ? used / (double)(ticks - b->ticks_at) : b->cost_ns;
	double sampling = measure(b, c, n, period);
	b->used = 100 * used / period;
	b->overhead = used > sampling ? 100 * (used - sampling) / period : 0;
	b->at_ns = now;
	b->cpu_at = cpu;
	b->ticks_at = ticks;
	/*
	 * What sampling may take: the budget less what the rest took. The rest
	 * is bounded where it is spent (the scans' and the opens' shares), so a
	 * quarter of the budget at least is left; a burst of opens does not
	 * stop every process's sampling for a period.
	 */
	double budget = b->max_cpu / 100 - b->overhead / 100;
	budget = budget < b->max_cpu / 400 ? b->max_cpu / 400 : budget;
	double cap = fair_cap(c, n, budget);
	b->highest = n ? 0 : b->rate;
	b->lowest = b->rate;
	b->lowered = 0;
	for (size_t i = 0; i < n; i++) {
		double cur = atomic_load(&c[i]->rate), rate = b->rate;
		if (c[i]->full > cap) {
			rate = b->rate * cap / c[i]->full;
		}
		/* Down at once, up by half at most: a process's cost follows its rate only roughly. */
		rate = rate > cur * 1.5 ? cur * 1.5 : rate;
		rate = rate > b->rate ? b->rate : rate < AGENT_MIN_RATE_HZ ? AGENT_MIN_RATE_HZ : rate;
		/* Steps of 1/8 Hz: a rate that wobbles with the measure would reset every clock. */
		rate = rate < b->rate ? (double)(long)(rate * 8) / 8 : rate;
		rate = rate < AGENT_MIN_RATE_HZ ? AGENT_MIN_RATE_HZ : rate;
		atomic_store(&c[i]->rate, rate);
		b->highest = rate > b->highest ? rate : b->highest;
		b->lowest = rate < b->lowest ? rate : b->lowest;
		b->lowered += rate < b->rate;
	}
	return true;
}

/* The opens' credit, refilled at their share, at most AGENT_OPEN_BURST_S of it kept. Under the lock. */
static void refill(struct agent_budget *b, uint64_t now)
{
	double share = open_share(b), most = share * AGENT_OPEN_BURST_S * 1e9;
	b->open_credit += (double)(now - b->open_at) * share;
	b->open_credit = b->open_credit > most ? most : b->open_credit;
	b->open_at = now;
}

bool agent_open_begin(struct agent_budget *b)
{
	uint64_t now = spy_now_ns();
	pthread_mutex_lock(&b->lock);
	refill(b, now > b->open_at ? now : b->open_at);
	bool ok = b->opening < AGENT_OPENS_MAX && b->open_credit > 0;
	b->opening += ok;
	pthread_mutex_unlock(&b->lock);
	return ok;
}

uint64_t agent_open_end(struct agent_budget *b, struct agent_cost *c, uint64_t from)
{
	uint64_t now = from ? spy_thread_cpu_ns() : 0, cost = now > from ? now - from : 0;
	if (c) {
		atomic_store(&c->opened_cpu, now + 1);
	}
	pthread_mutex_lock(&b->lock);
	b->opening--;
	b->open_credit -= (double)cost;
	pthread_mutex_unlock(&b->lock);
	return cost;
}

uint64_t agent_open_wait(const struct agent_budget *b, uint64_t cost_ns)
{
	return (uint64_t)((double)cost_ns / open_share(b));
}
