/*
 * What the commands share around the profiler's ticks: continuous mode's
 * windows (record --push and each of the agent's processes) and the
 * summary line at the end (record and top).
 */
#ifndef SPY_CMD_SESSION_H
#define SPY_CMD_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "profiler/profiler.h"

/*
 * Continuous mode: one window of the run, closed. Windows are whole
 * seconds of the wall clock, aligned to multiples of every_s (as the
 * backends' own agents align theirs), and contiguous: each one's until is
 * the next one's from. The first starts at the run's start (its second,
 * rounded down); the last ends where the run stops (rounded up, at least
 * one second long). A tick belongs to the window in which it is taken.
 */
struct cmd_window {
	uint64_t seq;         /* 0, 1, ... */
	int64_t from_s;       /* unix seconds */
	int64_t until_s;
	uint64_t ticks;       /* ticks sampled in it */
	uint64_t missed;      /* deadlines missed in it */
	bool last;            /* the run's end: no window follows */
};

struct cmd_windows {
	unsigned every_s;             /* 0: no windows */
	struct cmd_window win;        /* the open one: from_s, seq, ticks so far; missed at its start */
	uint64_t end_ns;              /* monotonic time at which it closes */
	int64_t wall_minus_mono_ns;   /* the wall clock at the start, less the monotonic one */
	bool whole;                   /* cmd_windows_start_whole's */
	void (*closed)(void *ctx, const struct cmd_window *w);
	void *ctx;
};

/* Windows of every_s seconds from now (monotonic now_ns); closed is called for each. */
void cmd_windows_start(struct cmd_windows *w, unsigned every_s, uint64_t now_ns,
		       void (*closed)(void *ctx, const struct cmd_window *w), void *ctx);
/*
 * The same, every window a whole period: the first from the multiple of
 * every_s before now, the last until the one after the stop. The agent's:
 * every process's windows on one grid, whenever it was found.
 */
void cmd_windows_start_whole(struct cmd_windows *w, unsigned every_s, uint64_t now_ns,
			     void (*closed)(void *ctx, const struct cmd_window *w), void *ctx);
/* Close every window that ended by now (several, if the loop was held up: they stay contiguous). */
void cmd_windows_check(struct cmd_windows *w, const struct prof_stats *st, uint64_t now_ns);
/* A tick taken at now_ns: counted in its window (closing those that ended first). */
void cmd_windows_tick(struct cmd_windows *w, const struct prof_stats *st, uint64_t now_ns);
/* The window open when the run stopped (at stop_ns) ends then, rounded up to its second. */
void cmd_windows_end(struct cmd_windows *w, const struct prof_stats *st, uint64_t stop_ns);

/* "spy: N samples in S s (R Hz), M missed ticks, errors: ..." and any exec notes. */
void cmd_summary(const struct profiler *p, uint64_t now_ns, struct spy_buf *out);
/*
 * Detached: where -s watched a root that is no Python process and none
 * appeared in its tree, the one line (with a launched program's fate) and
 * exit 4 in place of the summary; else 0.
 */
int cmd_no_python(struct profiler *p);

#endif
