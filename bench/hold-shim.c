/*
 * Preloaded into spy by bench/hold-time: measures, the same way for any
 * build, how long spy keeps each target thread stopped. A thread counts as
 * held from the waitpid() that reports its stop to the ptrace() call that
 * restarts it (CONT, LISTEN, DETACH). Ticks are told apart by a quiet gap:
 * nothing held for $SPY_HOLD_GAP_US (default 1000; the script passes half
 * a tick period, as a thread can take milliseconds to stop). At exit, one line to $SPY_HOLD_OUT:
 *   ticks N longest_mean_us X longest_max_us X total_mean_us X
 *   total_max_us X most_at_once N over200 N
 * Built by the script with one cc call (-shared -fPIC -ldl).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#define SLOTS 4096

static struct {
	pid_t tid;
	uint64_t since;   /* 0: not held */
} held[SLOTS];
static unsigned now_held, tick_most, most;
static uint64_t last_event, tick_longest, tick_total, gap_ns;
static uint64_t ticks, longest_sum, longest_max, total_sum, total_max, over200;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned slot(pid_t tid)
{
	unsigned s = (unsigned)tid % SLOTS;
	for (unsigned i = 0; i < SLOTS; i++, s = (s + 1) % SLOTS) {
		if (held[s].tid == tid || held[s].tid == 0) {
			held[s].tid = tid;
			return s;
		}
	}
	return (unsigned)tid % SLOTS;
}

static void tick_close(void)
{
	if (!tick_most) {
		return;
	}
	ticks++;
	longest_sum += tick_longest;
	total_sum += tick_total;
	longest_max = tick_longest > longest_max ? tick_longest : longest_max;
	total_max = tick_total > total_max ? tick_total : total_max;
	most = tick_most > most ? tick_most : most;
	over200 += tick_longest > 200000;
	tick_longest = tick_total = 0;
	tick_most = 0;
}

static void on_stop(pid_t tid)
{
	uint64_t now = now_ns();
	if (!gap_ns) {
		const char *g = getenv("SPY_HOLD_GAP_US");
		gap_ns = (g && atoll(g) > 0 ? (uint64_t)atoll(g) : 1000) * 1000;
	}
	if (now_held == 0 && now - last_event > gap_ns) {
		tick_close();
	}
	unsigned s = slot(tid);
	if (!held[s].since) {
		held[s].since = now;
		now_held++;
		tick_most = now_held > tick_most ? now_held : tick_most;
	}
	last_event = now;
}

static void on_restart(pid_t tid)
{
	uint64_t now = now_ns();
	unsigned s = slot(tid);
	if (held[s].since) {
		uint64_t d = now - held[s].since;
		held[s].since = 0;
		now_held--;
		tick_longest = d > tick_longest ? d : tick_longest;
		tick_total += d;
	}
	last_event = now;
}

pid_t waitpid(pid_t pid, int *st, int options)
{
	static pid_t (*real)(pid_t, int *, int);
	if (!real) {
		real = (pid_t (*)(pid_t, int *, int))dlsym(RTLD_NEXT, "waitpid");
	}
	int s = 0;
	pid_t r = real(pid, &s, options);
	if (st) {
		*st = s;
	}
	if (r > 0 && WIFSTOPPED(s)) {
		on_stop(r);
	}
	return r;
}

long ptrace(enum __ptrace_request req, ...)
{
	static long (*real)(enum __ptrace_request, pid_t, void *, void *);
	if (!real) {
		real = (long (*)(enum __ptrace_request, pid_t, void *, void *))dlsym(RTLD_NEXT, "ptrace");
	}
	va_list ap;
	va_start(ap, req);
	pid_t tid = va_arg(ap, pid_t);
	void *addr = va_arg(ap, void *);
	void *data = va_arg(ap, void *);
	va_end(ap);
	long r = real(req, tid, addr, data);
	if (req == PTRACE_CONT || req == PTRACE_LISTEN || req == PTRACE_DETACH) {
		on_restart(tid);
	}
	return r;
}

__attribute__((destructor)) static void report(void)
{
	tick_close();
	const char *out = getenv("SPY_HOLD_OUT");
	FILE *f = out ? fopen(out, "w") : NULL;
	if (!f || !ticks) {
		if (f) {
			fclose(f);
		}
		return;
	}
	fprintf(f, "ticks %llu longest_mean_us %.1f longest_max_us %.1f total_mean_us %.1f "
		"total_max_us %.1f most_at_once %u over200 %llu\n",
		(unsigned long long)ticks, (double)longest_sum / 1e3 / (double)ticks,
		(double)longest_max / 1e3, (double)total_sum / 1e3 / (double)ticks,
		(double)total_max / 1e3, most, (unsigned long long)over200);
	fclose(f);
}
