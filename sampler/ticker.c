/*
 * The tick loop's clock: absolute deadlines on CLOCK_MONOTONIC.
 *
 * Deadlines are computed as start + k * period from integers, never by adding
 * the period to the previous wake-up time: sleeping to a relative timeout
 * drifts by the sample's own cost every tick, and 100 Hz for 60 s must give
 * 6000 samples, not 5700. A caller that falls more than a period behind (a
 * slow pause, a loaded machine) skips the deadlines that passed and counts
 * them, because sampling them in a burst would put several samples on the
 * same instant and bias the profile toward whatever was running then.
 *
 * Short periods are spun for, not slept for (TICKER_SPIN_PERIOD_NS says
 * why): the counting is the same, so a rate the machine cannot keep shows
 * as missed ticks either way.
 */
#include <errno.h>
#include <time.h>

#include "common/arch.h"
#include "common/util.h"
#include "sampler/sampler.h"

void ticker_init(struct ticker *t, double hz, uint64_t now_ns)
{
	uint64_t period = spy_s_to_ns(1.0 / hz);
	t->start_ns = now_ns;
	/* A period under 1 ns would make every deadline the same instant (and
	 * 0 a division by zero); a tiny hz saturates. */
	t->period_ns = period ? period : 1;
	t->spin = t->period_ns < TICKER_SPIN_PERIOD_NS;
	t->next = 0;
	t->taken = 0;
	t->missed = 0;
}

uint64_t ticker_deadline(const struct ticker *t)
{
	return t->start_ns + t->next * t->period_ns;
}

void ticker_take(struct ticker *t, uint64_t now_ns)
{
	t->next++;
	t->taken++;
	uint64_t due = ticker_deadline(t);
	uint64_t slack = t->period_ns > TICKER_SLACK_NS ? t->period_ns : TICKER_SLACK_NS;
	if (now_ns >= due + slack) {
		/*
		 * The next deadline passed too long ago: catching up would be a
		 * burst of samples of one moment. Skip to the latest deadline
		 * <= now, which is taken late. Behind by less, the ticks are
		 * taken back to back: at kilohertz rates a scheduling hiccup of a
		 * millisecond spans several periods, and skipping them all would
		 * cost the rate more than the burst costs the profile.
		 */
		uint64_t latest = (now_ns - t->start_ns) / t->period_ns;
		t->missed += latest - t->next;
		t->next = latest;
	}
}

int ticker_wait(struct ticker *t, uint64_t max_ns, uint64_t *now_out)
{
	uint64_t now = spy_now_ns();
	uint64_t due = ticker_deadline(t);
	uint64_t unused;
	now_out = now_out ? now_out : &unused;
	*now_out = now;
	if (now >= due) {
		return 1;
	}
	uint64_t until = due;
	int reached = 1;
	if (due - now > max_ns) {
		until = now + max_ns;
		reached = 0;
	}
	if (until == now) {
		/* A zero slice is a poll: a sleep to an instant passed already still
		 * gives up the CPU, for milliseconds on a loaded machine. */
		return reached;
	}
	if (t->spin) {
		while ((*now_out = spy_now_ns()) < until) {
			if (proc_stop_requested) {
				return -SPY_EINTR;
			}
			spy_arch_cpu_relax();
		}
		return reached;
	}
	*now_out = 0; /* slept: the clock was not read since */
	if (proc_chld_held()) {
		/* Relative, from the clock just read: late by the few ns since. */
		int rc = proc_chld_sleep(until - now);
		return rc == 1 ? reached : rc;
	}
	struct timespec ts = {
		.tv_sec = (time_t)(until / 1000000000ull),
		.tv_nsec = (long)(until % 1000000000ull),
	};
	int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	if (rc == EINTR) {
		return -SPY_EINTR;
	}
	return reached;
}
