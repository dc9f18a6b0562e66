/*
 * ptrace control of a live target: seize every thread, stop one at a time
 * for a sample (or, for one consistent look, all of them), restart them,
 * and always let go, one at a time too.
 *
 * Threads are seized with PTRACE_SEIZE and stopped with PTRACE_INTERRUPT,
 * never PTRACE_ATTACH, which stops with SIGSTOP. That choice is the safety
 * net for a spy that dies: when a tracer exits, even by SIGKILL, the kernel
 * detaches its tracees and restarts those in a ptrace-stop, but leaves
 * group-stopped ones stopped, and a SIGSTOP attach is what would put them in
 * group-stop. So we never cause a group-stop and never fight the kernel's
 * cleanup; the atexit() registry (registry.c) covers every exit() path on top.
 *
 * The design decision to question is what happens when waitpid() reports a
 * signal-delivery-stop while we are pausing. A seized thread stops for every
 * signal sent to it, so a SIGCHLD or SIGALRM can beat our PTRACE_INTERRUPT.
 * Any trap clears a pending INTERRUPT in the kernel, but an INTERRUPT sent to
 * a thread that is already trapped stays pending and fires as a
 * PTRACE_EVENT_STOP as soon as the thread is restarted, with nobody waiting:
 * the thread would then sit stopped until the next tick, where the same thing
 * happens again. From user space the two cases look the same. So we make them
 * the same: the signal is re-delivered at once (PTRACE_CONT with it) and the
 * thread is interrupted again, which leaves exactly one trap to collect. The
 * kernel checks for a pending trap before it dequeues another signal and
 * before the handler runs one instruction, so the thread stops again at once,
 * at the entry of its handler, and the signal is neither held nor swallowed.
 * Two backstops keep any stray trap (a timed-out wait, a group-stop racing us)
 * from outliving one tick: pause first collects, without blocking, threads
 * that stopped on their own and does not interrupt those (interrupting a
 * trapped thread is what leaves a trap pending), and PTRACE_DETACH clears
 * every pending trap in the kernel.
 *
 * Waits poll waitpid(WNOHANG) against a deadline instead of blocking: a
 * thread in uninterruptible sleep stops only when the kernel lets go of it,
 * and a thread-group leader that has exited is not reported to waitpid while
 * other threads live, which a blocking wait would turn into a hang with the
 * whole target stopped.
 *
 * ptrace binds a tracee to the tracing *thread*: every call below must come
 * from the thread that called proc_attach().
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "sampler/internal.h"

/*
 * How long proc_pause() waits for every thread to stop. A thread that takes
 * longer (uninterruptible sleep, a starved CPU) is not executing user code,
 * so rather than hold every other thread stopped behind it we sample without
 * it; its interrupt stays pending and a later pause collects the trap.
 * Such a straggler is not waited for again until it has stopped: a thread
 * in D state for minutes would otherwise cost every pause the whole timeout
 * with every other thread stopped. Each pause and each poll between ticks
 * still looks at it once (collect_pending), so it is sampled again, and
 * restarted, as soon as it traps. proc_detach does not wait for it either:
 * it stays traced, interrupt pending, until a later proc_detach (the
 * atexit registry) finds it stopped or spy exits and the kernel detaches it.
 */
#define PAUSE_TIMEOUT_NS (250ull * 1000 * 1000)
/* proc_detach() waits longer: leaving a thread traced is worse than a slow exit. */
#define DETACH_TIMEOUT_NS (2000ull * 1000 * 1000)
/*
 * Listings of task/ per attach or pause. Once every known thread is stopped
 * none can clone, so a round or two settles it; more are needed only when
 * dying threads cut listings short (see seize_new). The bound stops a target
 * that spawns threads faster than we seize them from holding us.
 */
#define RELIST_ROUNDS 8
/*
 * Signals one thread may have re-delivered during one pause. Past this the
 * thread stays in its signal-delivery-stop and gets the signal at resume.
 */
#define MAX_REDELIVERIES 16
/* proc_stop_thread waits for SIGCHLD this long at a time (see wait_one). */
#define HOLD_WAIT_SLICE_NS (500l * 1000)
/*
 * Between pauses every tracee is looked at (one waitpid each) only when
 * one has something to report (collect_noticed), and task/ is listed
 * again only when its link count moved (tasks_changed); both are done
 * anyway this often, so that a report missed for a reason not foreseen
 * costs at most this long of a thread left stopped, or not yet seized.
 */
#define LOOK_BACKSTOP_NS (10ull * 1000 * 1000)
#define LIST_BACKSTOP_NS (100ull * 1000 * 1000)
/*
 * A look (the waitid, the link count) that found nothing stands for this
 * long. Flat out, ticks come every 50-100 us and each asked twice (the
 * poll before the tick, proc_track in it), two syscalls of a sample's
 * eleven; a report that waits this much longer costs a thread stopped on
 * a signal 1 ms, and a new thread 1 ms before it is seized.
 */
#define LOOK_FRESH_NS (1000ull * 1000)

/* What to do with a stop that waitpid() reports. */
enum collect_mode {
	COLLECT_PAUSE,  /* keep the thread stopped; re-deliver signals and re-interrupt */
	COLLECT_POLL,   /* restart the thread at once */
	COLLECT_DETACH, /* keep it stopped, remember the signal for PTRACE_DETACH */
};

static long xptrace(enum __ptrace_request req, pid_t tid, long data)
{
	return ptrace(req, tid, NULL, (void *)data);
}

/* ---- the per-thread state machine ---- */

static bool thread_is_dead(struct proc *p, pid_t tid)
{
	char state = 0;
	int rc = procfs_thread_state(p->dirfd, tid, &state);
	return rc == -SPY_EGONE || state == 'Z' || state == 'X' || state == 'x';
}

/*
 * SIGCHLD held (proc_chld_hold). A tracer gets one for every stop and exit
 * of a tracee. Delivered, each stop cost two sigprocmask calls (it was
 * blocked while we waited for the stop, to sleep on it) and a signal frame;
 * held, the sampling thread takes it only where it waits, for a stop
 * (wait_one) or for the next tick (ticker_wait), and throws away once
 * between ticks the ones its own interrupts raised (proc_chld_drain).
 * SIGCHLD goes to the process: where several threads sample (the agent's
 * workers), one may take another's, which then learns of its tracee's
 * report at its next look (a tick or a poll later), as it did when the
 * handler ran on whichever thread had SIGCHLD unblocked.
 */
static __thread bool chld_held;     /* blocked by proc_chld_hold */
static __thread bool chld_blocked;  /* it was blocked already before */
static __thread bool chld_raised;   /* an interrupt since the last drain */
/*
 * The sleep before this tick ran out with no SIGCHLD (proc_chld_sleep):
 * no tracee has reported anything since the look before it, which
 * proc_track need not repeat. Cleared by the drain before each look, and
 * by a sleep that took a SIGCHLD.
 */
static __thread bool chld_quiet;
/*
 * SIGCHLDs taken where nobody looked after them (the sleep, the drain):
 * each may stand for a report, so a quiet look from before one no longer
 * stands (collect_noticed's LOOK_FRESH_NS).
 */
static __thread unsigned chld_news;

static void chld_only(sigset_t *s)
{
	sigemptyset(s);
	sigaddset(s, SIGCHLD);
}

bool proc_chld_hold(bool on)
{
	if (on == chld_held) {
		return chld_held;
	}
	sigset_t s, old;
	chld_only(&s);
	if (on) {
		if (pthread_sigmask(SIG_BLOCK, &s, &old) == 0) {
			chld_blocked = sigismember(&old, SIGCHLD) == 1;
			chld_held = true;
			chld_raised = false;
		}
	} else {
		if (!chld_blocked) {
			(void)pthread_sigmask(SIG_UNBLOCK, &s, NULL);
		}
		chld_held = false;
	}
	return chld_held;
}

bool proc_chld_held(void)
{
	return chld_held;
}

void proc_chld_drain(void)
{
	chld_quiet = false;
	if (!chld_held || !chld_raised) {
		return;
	}
	/* Standard signals do not queue: one pending SIGCHLD stands for them all. */
	sigset_t s;
	chld_only(&s);
	struct timespec none = { 0, 0 };
	chld_news += sigtimedwait(&s, NULL, &none) == SIGCHLD;
	chld_raised = false;
}

int proc_chld_sleep(uint64_t ns)
{
	sigset_t s;
	chld_only(&s);
	struct timespec rel = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	int sig = sigtimedwait(&s, NULL, &rel);
	if (sig == SIGCHLD) {
		chld_news++;
		chld_quiet = false;
		return 0;
	}
	if (sig < 0 && errno == EINTR) {
		return -SPY_EINTR;
	}
	chld_quiet = true;
	return 1;
}

static void interrupt(struct proc_tracee *t)
{
	/* On ESRCH the thread died or is not ours any more; the next wait says which. */
	if (xptrace(PTRACE_INTERRUPT, t->tid, 0) == 0) {
		t->interrupted = true;
		chld_raised = true;
	}
}

/* Restart a stopped thread, giving it the signal it is owed. */
static void restart(struct proc_tracee *t)
{
	/*
	 * A thread in group-stop (the target was sent SIGSTOP) is resumed with
	 * PTRACE_LISTEN: it stays stopped, as job control wants, but is no
	 * longer ours to collect, and SIGCONT wakes it without us.
	 */
	if (!t->sig && t->group_stop && xptrace(PTRACE_LISTEN, t->tid, 0) == 0) {
		t->state = TRACEE_RUNNING;
		return;
	}
	/* ESRCH: it was killed while stopped, and its exit is the next thing to collect. */
	if (xptrace(PTRACE_CONT, t->tid, t->sig) < 0 && errno != ESRCH) {
		spy_log(SPY_LOG_DEBUG, "PTRACE_CONT %d: %s", (int)t->tid, strerror(errno));
	}
	t->sig = 0;
	t->state = TRACEE_RUNNING;
}

static bool is_stop_signal(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/* Record what waitpid() said about t, then act on it as mode says. */
static void collect(struct proc *p, struct proc_tracee *t, int st, enum collect_mode mode)
{
	if (WIFEXITED(st) || WIFSIGNALED(st)) {
		t->state = TRACEE_GONE;
		if (t->tid == p->pid) {
			p->exited = true;
			p->exit_status = st;
		}
		return;
	}
	if (!WIFSTOPPED(st)) {
		return;
	}
	int sig = WSTOPSIG(st);
	int event = (int)((unsigned)st >> 16);
	/* Any trap consumes a pending interrupt. */
	t->interrupted = false;
	t->straggler = false;
	t->state = TRACEE_STOPPED;
	t->sig = 0;
	if (event == PTRACE_EVENT_STOP) {
		/* An interrupt reports SIGTRAP; a group-stop reports the stopping signal. */
		t->group_stop = is_stop_signal(sig);
	} else if (event == 0) {
		t->group_stop = false;
		t->sig = sig;
	} else if (event == PTRACE_EVENT_EXEC) {
		/* Every address resolved in the old image now means nothing. */
		t->group_stop = false;
		p->execed = true;
	}
	/* PTRACE_O_TRACEEXEC is the only option: no other event can arrive. */

	spy_log(SPY_LOG_TRACE, "thread %d: %s stop, signal %d", (int)t->tid,
		event == PTRACE_EVENT_STOP ? "event" : event ? "other" : "signal-delivery", sig);
	switch (mode) {
	case COLLECT_PAUSE:
		if (t->sig && t->redeliveries < MAX_REDELIVERIES) {
			/* See the top of the file: deliver now, leave exactly one trap to collect. */
			t->redeliveries++;
			restart(t);
			interrupt(t);
		}
		break;
	case COLLECT_POLL:
		restart(t);
		break;
	case COLLECT_DETACH:
		break;
	}
}

/*
 * Wait for t to report something, until deadline. Returns 1 with *st, 0 on
 * timeout, -SPY_EGONE if t can no longer be waited for, or -SPY_EINTR when
 * interruptible and a stop was requested.
 */
static int wait_one(struct proc *p, struct proc_tracee *t, uint64_t deadline,
		    bool interruptible, int *st)
{
	for (unsigned i = 0;; i++) {
		pid_t r = waitpid(t->tid, st, __WALL | WNOHANG);
		if (r == t->tid) {
			return 1;
		}
		/* ECHILD: reaped already (SIGCHLD ignored), or it is no longer traced by us. */
		if (r < 0 && errno == ECHILD) {
			return -SPY_EGONE;
		}
		if (interruptible && proc_stop_requested) {
			return -SPY_EINTR;
		}
		if (spy_now_ns() >= deadline) {
			return 0;
		}
		/*
		 * An exited leader is not reported while other threads live:
		 * ask /proc. A thread that died between the waitpid above and
		 * this look must still be reaped, or it would stay our zombie,
		 * so wait once more before giving up on it.
		 */
		if ((i == 16 || (i > 0 && i % 64 == 0)) && thread_is_dead(p, t->tid)) {
			r = waitpid(t->tid, st, __WALL | WNOHANG);
			return r == t->tid ? 1 : -SPY_EGONE;
		}
		/*
		 * One thread held alone (proc_stop_thread, SIGCHLD blocked): a
		 * trap noticed late is time it sits stopped for nothing, and a
		 * yield or a sleep can keep us off the CPU for a time slice.
		 * Sleeping until the kernel tells of the stop (a tracer gets
		 * SIGCHLD for it) wakes us at once, with a sleeper's claim to
		 * the CPU for the walk; the timeout bounds a SIGCHLD that is
		 * ignored, and so never sent.
		 */
		if (p->held_wait) {
			struct timespec ts = { 0, HOLD_WAIT_SLICE_NS };
			if (sigtimedwait(&p->held_chld, NULL, &ts) == SIGCHLD) {
				/* Most likely this stop's, taken: nothing left to drain. */
				chld_raised = false;
			}
			continue;
		}
		/* Most threads stop within microseconds: yield first, then back off to 1 ms. */
		if (i < 32) {
			sched_yield();
		} else {
			unsigned shift = i - 32 < 6 ? i - 32 : 6;
			struct timespec ts = { 0, (long)(16000u << shift) };
			nanosleep(&ts, NULL);
		}
	}
}

/*
 * Bring one running tracee (already interrupted or not) to a stop or its
 * end. 0 (look at t->state), or -SPY_EINTR; past the deadline it is left
 * running, interrupted, and marked a straggler.
 */
static int stop_one(struct proc *p, struct proc_tracee *t, uint64_t deadline, enum collect_mode mode,
		    bool interruptible, bool late_ok)
{
	/* Looked at once by collect_pending; not waited for (see the top). */
	while (t->state == TRACEE_RUNNING && !(t->straggler && t->interrupted)) {
		if (!t->interrupted) {
			interrupt(t);
		}
		int st;
		int rc = wait_one(p, t, deadline, interruptible, &st);
		if (rc == 1) {
			collect(p, t, st, mode);
		} else if (rc == -SPY_EGONE) {
			t->state = TRACEE_GONE;
		} else if (rc == -SPY_EINTR) {
			return rc;
		} else if (late_ok) {
			/* Off a CPU, it stops once it gets one: no straggler (see proc_stop_thread). */
			break;
		} else {
			spy_log(SPY_LOG_DEBUG, "thread %d of process %d did not stop in time",
				(int)t->tid, (int)p->pid);
			t->straggler = true;
			break;
		}
	}
	return 0;
}

/*
 * Bring every running tracee to a stop (or to its end), interrupting those
 * not yet interrupted. Returns 0 or -SPY_EINTR; a thread that does not stop
 * by the deadline is left running, still interrupted.
 */
static int stop_all(struct proc *p, uint64_t deadline, enum collect_mode mode, bool interruptible)
{
	for (size_t i = 0; i < p->ntracees; i++) {
		if (p->tracees[i].state == TRACEE_RUNNING && !p->tracees[i].interrupted) {
			interrupt(&p->tracees[i]);
		}
	}
	for (size_t i = 0; i < p->ntracees; i++) {
		if (stop_one(p, &p->tracees[i], deadline, mode, interruptible, false) == -SPY_EINTR) {
			return -SPY_EINTR;
		}
	}
	return 0;
}

/*
 * One non-blocking look at every running tracee: threads that stopped on
 * their own since we last looked (a signal arrived, a stale trap fired, the
 * process exited) are collected without being interrupted.
 */
static void look_once(struct proc *p, struct proc_tracee *t, enum collect_mode mode)
{
	int st;
	if (t->state != TRACEE_RUNNING) {
		return;
	}
	pid_t r = waitpid(t->tid, &st, __WALL | WNOHANG);
	if (r == t->tid) {
		collect(p, t, st, mode);
	} else if (r < 0 && errno == ECHILD) {
		t->state = TRACEE_GONE;
	}
}

static void collect_pending(struct proc *p, enum collect_mode mode)
{
	for (size_t i = 0; i < p->ntracees; i++) {
		look_once(p, &p->tracees[i], mode);
	}
}

/*
 * collect_pending between pauses, only when there is something to collect.
 * Looking at 150 idle tracees with a waitpid each, twice a tick, was a
 * third of spy's system time on a thread pool; one waitid over all our
 * children that leaves what it sees to be collected (WNOWAIT) says
 * whether any has a stop or an exit to report. What it sees may be
 * another proc's (-s) or a child that is no tracee: then this proc looks
 * every time, as it did before. A look that found nothing stands for
 * LOOK_FRESH_NS, unless a SIGCHLD was taken since where nobody looked
 * after it (chld_news). A backstop looks anyway now and then, against a
 * report the kernel gives in some way not foreseen here.
 */
static void collect_noticed(struct proc *p, enum collect_mode mode)
{
	uint64_t now = spy_now_ns();
	if (now - p->looked_ns < LOOK_BACKSTOP_NS) {
		/* chld_quiet: nothing reported since the look before the tick's sleep. */
		if (chld_quiet || (now - p->quiet_ns < LOOK_FRESH_NS && p->quiet_news == chld_news)) {
			return;
		}
		siginfo_t si;
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) == 0 &&
		    si.si_pid == 0) {
			p->quiet_ns = now;
			p->quiet_news = chld_news;
			return;
		}
	}
	p->looked_ns = now;
	p->quiet_ns = now;
	p->quiet_news = chld_news;
	collect_pending(p, mode);
}

static void drop_gone(struct proc *p)
{
	size_t out = 0;
	for (size_t i = 0; i < p->ntracees; i++) {
		if (p->tracees[i].state != TRACEE_GONE) {
			p->tracees[out++] = p->tracees[i];
		}
	}
	p->ntracees = out;
}

static void restart_all(struct proc *p)
{
	for (size_t i = 0; i < p->ntracees; i++) {
		if (p->tracees[i].state == TRACEE_STOPPED) {
			restart(&p->tracees[i]);
		}
	}
	p->paused = false;
	/* Running threads may write anything: no cached page stays true. */
	memcache_view(p, false);
}

static struct proc_tracee *find_tracee(struct proc_tracee *v, size_t n, pid_t tid)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].tid == tid) {
			return &v[mid];
		}
		if (v[mid].tid < tid) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	return NULL;
}

static int tracee_cmp(const void *a, const void *b)
{
	const struct proc_tracee *x = a, *y = b;
	return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static int seize_error(struct proc *p, pid_t tid, int e, struct spy_err *err)
{
	pid_t tracer = procfs_tracer_pid(p->dirfd, tid);
	int rc;
	if (tracer > 0) {
		rc = spy_err_set(err, SPY_EPERM,
				 "cannot attach to process %d: thread %d is already traced by process %d%s",
				 (int)p->pid, (int)tid, (int)tracer,
				 tracer == getpid() ? " (this spy)" : "");
		spy_err_remedy(err, "stop the other tracer (a debugger or another profiler) first");
		return rc;
	}
	rc = spy_err_set(err, SPY_EPERM, "cannot attach to process %d (thread %d): %s",
			 (int)p->pid, (int)tid, strerror(e));
	spy_err_remedy(err, "%s", SAMPLER_REMEDY_PERM);
	return rc;
}

/*
 * Seize the threads listed in task/ that we do not trace yet. While attaching
 * a refusal is an error; while pausing, the threads already held matter more
 * than one newcomer, which is skipped.
 *
 * *again is set when the listing should be repeated: we seized someone (who
 * may have cloned before we stopped it), or a listed thread vanished under
 * us, and a dying thread can cut a listing short (see procfs_list_tids).
 */
static int seize_new(struct proc *p, bool attaching, bool *again, struct spy_err *err)
{
	size_t n, known = p->ntracees, added = 0;
	int rc = procfs_list_tids(p, &n);

	*again = false;
	p->listed_whole = false;
	p->listed_ns = spy_now_ns();
	if (rc == -SPY_EGONE) {
		return spy_err_set(err, SPY_EGONE, "process %d has exited", (int)p->pid);
	}
	if (rc < 0) {
		rc = spy_err_set(err, -rc, "cannot list the threads of process %d", (int)p->pid);
		spy_err_remedy(err, "%s", SAMPLER_REMEDY_PERM);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		pid_t tid = p->tids[i];
		if (find_tracee(p->tracees, known, tid)) {
			continue;
		}
		if (p->ntracees >= SPY_MAX_THREADS) {
			spy_log(SPY_LOG_DEBUG, "process %d: not seizing more than %d threads",
				(int)p->pid, SPY_MAX_THREADS);
			break;
		}
		/*
		 * Only exec stops: no clone or syscall stops while the target
		 * runs between samples, but an exec must be seen, or the new
		 * program would be walked with the old one's addresses.
		 */
		if (xptrace(PTRACE_SEIZE, tid, PTRACE_O_TRACEEXEC) < 0) {
			int e = errno;
			char state = 0;
			if (e == ESRCH) {
				*again = true;
				continue;
			}
			/*
			 * The kernel refuses exiting threads with EPERM. A zombie
			 * leader stays listed until the process ends, so only
			 * a thread on its way out of the list calls for a relist.
			 */
			if (e == EPERM && (procfs_thread_state(p->dirfd, tid, &state) == -SPY_EGONE ||
					   state == 'X' || state == 'x' || state == 'Z')) {
				*again = *again || state != 'Z';
				continue;
			}
			if (!attaching) {
				spy_log(SPY_LOG_DEBUG, "cannot seize new thread %d: %s", (int)tid,
					strerror(e));
				continue;
			}
			return seize_error(p, tid, e, err);
		}
		SPY_GROW(p->tracees, p->tracees_alloc, p->ntracees + 1);
		struct proc_tracee *t = &p->tracees[p->ntracees++];
		memset(t, 0, sizeof(*t));
		t->tid = tid;
		t->state = TRACEE_RUNNING;
		added++;
	}
	if (added) {
		qsort(p->tracees, p->ntracees, sizeof(*p->tracees), tracee_cmp);
		*again = true;
	}
	/* Every thread listed is traced, and no thread traced is missing from the list. */
	p->listed_whole = !*again && n == p->ntracees && n < SPY_MAX_THREADS;
	return 0;
}

/*
 * Whether task/ may name a thread we do not trace. Its link count is 2 +
 * the threads of the process, and a traced thread that exits stays
 * counted (a zombie) until our waitpid reaps it, when drop_gone forgets
 * it: so after a listing that found exactly the tracees, a count equal to
 * the tracees still left means no thread was added, and the listing (a
 * directory read that costs a dentry lookup per thread) can be skipped.
 * A thread the walker named and we do not trace (relist), and the
 * backstop, list anyway.
 */
static bool tasks_changed(struct proc *p)
{
	struct stat st;
	uint64_t now = spy_now_ns();
	if (!p->listed_whole || p->relist || now - p->listed_ns >= LIST_BACKSTOP_NS) {
		return true;
	}
	if (now - p->counted_ns < LOOK_FRESH_NS) {
		return false;
	}
	if (fstatat(p->dirfd, "task", &st, 0) != 0 || st.st_nlink < 2 ||
	    (size_t)(st.st_nlink - 2) != p->ntracees) {
		return true;
	}
	p->counted_ns = now;
	return false;
}

/* ---- the public operations ---- */

int proc_attach(struct proc *p, struct spy_err *err)
{
	if (p->attached) {
		return 0;
	}
	p->attached = true;
	p->paused = false;
	p->tracer = getpid();
	tracer_remember(p);
	/*
	 * Threads cloned while we seize are missed by one listing; the next
	 * catches them, and the next pause seizes any still missing.
	 */
	for (int round = 0; round < RELIST_ROUNDS; round++) {
		bool again;
		int rc = seize_new(p, true, &again, err);
		if (rc < 0) {
			proc_detach(p);
			return rc;
		}
		if (!again) {
			break;
		}
	}
	if (p->ntracees == 0) {
		proc_detach(p);
		return spy_err_set(err, SPY_EGONE, "process %d has exited", (int)p->pid);
	}
	return 0;
}

int proc_pause(struct proc *p, struct spy_err *err)
{
	if (!p->attached) {
		return spy_err_set(err, SPY_EUSAGE, "process %d: pause before attach", (int)p->pid);
	}
	if (p->paused) {
		return 0;
	}
	if (proc_stop_requested) {
		return spy_err_set(err, SPY_EINTR, "interrupted");
	}
	uint64_t deadline = spy_now_ns() + PAUSE_TIMEOUT_NS;
	for (size_t i = 0; i < p->ntracees; i++) {
		p->tracees[i].redeliveries = 0;
	}
	collect_pending(p, COLLECT_PAUSE);
	for (int round = 0;; round++) {
		int rc = stop_all(p, deadline, COLLECT_PAUSE, true);
		if (rc == -SPY_EINTR) {
			restart_all(p);
			drop_gone(p);
			return spy_err_set(err, SPY_EINTR, "interrupted while pausing process %d",
					   (int)p->pid);
		}
		bool again = false;
		if (round + 1 >= RELIST_ROUNDS || seize_new(p, false, &again, NULL) < 0 || !again) {
			break;
		}
	}
	drop_gone(p);
	if (p->ntracees == 0) {
		return spy_err_set(err, SPY_EGONE, "process %d has exited", (int)p->pid);
	}
	if (p->execed) {
		restart_all(p);
		return spy_err_set(err, SPY_EGONE, "process %d replaced its program (exec)", (int)p->pid);
	}
	p->paused = true;
	/* Nothing can change the target until it is let run: one view serves the pause. */
	memcache_view(p, true);
	return 0;
}

int proc_resume(struct proc *p, struct spy_err *err)
{
	if (!p->attached || !p->paused) {
		return 0;
	}
	restart_all(p);
	return 0;
}

/*
 * One thread at a time (the default sampling mode). The rest of the
 * process runs meanwhile, so the cache serves only what is read while this
 * thread is held: a fresh view, without the prefetch of the last one's
 * lines (those were another thread's).
 */
int proc_track(struct proc *p)
{
	if (!p->attached || p->paused) {
		return 0;
	}
	collect_noticed(p, COLLECT_POLL);
	drop_gone(p);
	if (tasks_changed(p)) {
		bool again = false;
		p->relist = false;
		(void)seize_new(p, false, &again, NULL);
	}
	return p->ntracees && !p->execed ? 0 : -SPY_EGONE;
}

int proc_stop_thread(struct proc *p, pid_t tid, uint64_t wait_ns)
{
	if (!p->attached || p->paused || p->held) {
		return -SPY_EBOUND;
	}
	struct proc_tracee *t = find_tracee(p->tracees, p->ntracees, tid);
	if (!t) {
		/* Not one of the target's threads we seized (new since proc_track, or a bad TID). */
		p->relist = true;
		return -SPY_ENOPROC;
	}
	if (t->state == TRACEE_GONE) {
		return -SPY_EGONE;
	}
	t->redeliveries = 0;
	/*
	 * Left interrupted by an earlier hold (held off a CPU, or a straggler):
	 * it may have stopped since; if not, with wait_ns it has not run
	 * since either, and is held as it is again without a wait.
	 */
	bool again = t->interrupted;
	if (again) {
		look_once(p, t, COLLECT_PAUSE);
	}
	if (!(wait_ns && again && t->state == TRACEE_RUNNING && t->interrupted)) {
		sigset_t old;
		chld_only(&p->held_chld);
		/* Held (proc_chld_hold): blocked already, and taken at the poll. */
		bool unblock = !chld_held;
		p->held_wait = chld_held || pthread_sigmask(SIG_BLOCK, &p->held_chld, &old) == 0;
		int rc = stop_one(p, t, spy_now_ns() + (wait_ns ? wait_ns : PAUSE_TIMEOUT_NS), COLLECT_PAUSE,
				  true, wait_ns != 0);
		if (p->held_wait && unblock) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
		}
		p->held_wait = false;
		if (rc < 0) {
			return -SPY_EINTR;
		}
	}
	if (wait_ns && t->state == TRACEE_RUNNING && t->interrupted && !p->execed) {
		/*
		 * Interrupted, not stopped within wait_ns: not on a CPU (one
		 * that was took the interrupt within microseconds), and unable
		 * to run an instruction of its own before it traps, which the
		 * next proc_track or proc_poll collects, restarting it. Its
		 * memory is as still as if it were stopped.
		 */
		p->held = tid;
		memcache_view_held(p, tid);
		return 1;
	}
	if (t->state != TRACEE_STOPPED) {
		return t->state == TRACEE_GONE ? -SPY_EGONE : -SPY_EBOUND;
	}
	if (p->execed) {
		restart(t);
		return -SPY_EGONE;
	}
	p->held = tid;
	memcache_view_held(p, tid);
	return 0;
}

void proc_resume_thread(struct proc *p)
{
	if (!p->held) {
		return;
	}
	struct proc_tracee *t = find_tracee(p->tracees, p->ntracees, p->held);
	if (t && t->state == TRACEE_STOPPED) {
		restart(t);
	}
	p->held = 0;
	memcache_view(p, false);
}

bool proc_traces_only(struct proc *p, const pid_t *tids, size_t n)
{
	if (!p->attached || p->paused || p->held || p->execed || n != p->ntracees) {
		return false;
	}
	for (size_t i = 0; i < p->ntracees; i++) {
		const struct proc_tracee *t = &p->tracees[i];
		if (t->state != TRACEE_RUNNING || t->interrupted || t->sig) {
			return false;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (!find_tracee(p->tracees, p->ntracees, tids[i])) {
			return false;
		}
	}
	return true;
}

size_t proc_tids(const struct proc *p, pid_t *out, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < p->ntracees && n < max; i++) {
		if (p->tracees[i].state != TRACEE_GONE) {
			out[n++] = p->tracees[i].tid;
		}
	}
	return n;
}

int proc_poll(struct proc *p)
{
	if (!p->attached || p->paused) {
		return 0;
	}
	collect_noticed(p, COLLECT_POLL);
	drop_gone(p);
	return p->ntracees && !p->execed ? 0 : -SPY_EGONE;
}

bool proc_execed(const struct proc *p)
{
	return p->execed;
}

bool proc_is_paused(const struct proc *p)
{
	return p->paused;
}

bool proc_exit_status(const struct proc *p, int *status)
{
	if (p->exited && status) {
		*status = p->exit_status;
	}
	return p->exited;
}

void proc_detach(struct proc *p)
{
	if (!p || !p->attached) {
		return;
	}
	/* Detached, the target runs on: stop serving pages read while it was paused. */
	memcache_view(p, false);
	if (p->tracer != getpid()) {
		/* A fork of spy inherited this struct but not the tracing; only forget. */
		p->ntracees = 0;
		p->attached = false;
		p->paused = false;
		p->held = 0;
		tracer_forget(p);
		return;
	}
	/*
	 * PTRACE_DETACH works only on a thread in a ptrace-stop, so running
	 * ones are interrupted first. A thread found in a signal-delivery-stop
	 * is detached with its signal, which delivers it; detaching also drops
	 * any interrupt still pending, so nothing is left to trap later.
	 */
	collect_pending(p, COLLECT_DETACH);
	uint64_t deadline = spy_now_ns() + DETACH_TIMEOUT_NS;
	size_t left = 0;
	for (size_t i = 0; i < p->ntracees; i++) {
		struct proc_tracee *t = &p->tracees[i];
		/* One at a time, let go at once: detaching never holds the whole process. */
		stop_one(p, t, deadline, COLLECT_DETACH, false, false);
		if (t->state == TRACEE_STOPPED) {
			if (xptrace(PTRACE_DETACH, t->tid, t->sig) < 0 && errno != ESRCH) {
				spy_log(SPY_LOG_DEBUG, "PTRACE_DETACH %d: %s", (int)t->tid,
					strerror(errno));
			}
			continue;
		}
		/*
		 * A GONE thread needs nothing. One case is worth knowing: a main
		 * thread that exited while others live is a zombie we cannot
		 * detach. It stays traced by us until spy exits; should the
		 * whole process end first, its parent learns so only then.
		 */
		if (t->state == TRACEE_RUNNING) {
			/*
			 * It never stopped. Keep it so that a later call can try
			 * again; if none does, the kernel detaches it when spy
			 * exits, restarting it if it has trapped by then.
			 */
			spy_log(SPY_LOG_DEBUG, "thread %d of process %d stays traced: it did not stop",
				(int)t->tid, (int)p->pid);
			p->tracees[left++] = *t;
		}
	}
	p->ntracees = left;
	p->paused = false;
	p->held = 0;
	if (left == 0) {
		p->attached = false;
		tracer_forget(p);
	}
}
