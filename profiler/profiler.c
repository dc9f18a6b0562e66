/*
 * The profiler's session (see profiler.h): the processes, launching, -s's
 * descendants, and the wait for each tick.
 *
 * Ticks are absolute deadlines (sampler's ticker); between them
 * prof_next polls the processes, because a seized thread that receives a
 * signal stays stopped until its tracer restarts it.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "profiler/internal.h"

/* Longest sleep between looks at the processes (exits, signals) while waiting for a tick. */
#define POLL_NS (10 * 1000 * 1000ull)
/*
 * Launch mode: how long a program has to show a Python interpreter, and how
 * often we look: every millisecond at first, since an interpreter's whole
 * start-up takes 10-30 ms and a look 10 ms late finds it over (its samples
 * lost); from LAUNCH_FAST_NS on (a shim or a slow wrapper before the exec),
 * every 10 ms.
 */
#define LAUNCH_WAIT_NS (5 * 1000 * 1000 * 1000ull)
#define LAUNCH_FAST_NS (200 * 1000 * 1000ull)
#define LAUNCH_POLL_FAST_NS (1000 * 1000ull)
#define LAUNCH_POLL_NS (10 * 1000 * 1000ull)
/* -s: how often descendants are looked for. */
#define SCAN_NS (100 * 1000 * 1000ull)
/*
 * A descendant that is not a Python process now may become one: a fork of
 * a shell that execs python, or a python that has not finished starting.
 * It is tried again while its executable stays the same for REJECT_TRIES
 * scans, and again whenever its executable changes (an exec).
 */
#define REJECT_TRIES 20

/* A descendant that was not (yet) a Python process, and when to look again. */
struct prof_rejected {
	pid_t pid;
	char exe[256];
	int tries;
};

struct profiler {
	struct prof_tick_state ts;   /* options, counters, this tick's kept stacks */
	/* procs[0] is the process named or launched, kept to the end; the rest come and go (-s) */
	struct prof_process **procs;
	size_t nprocs, procs_alloc;
	struct prof_rejected *rej;
	size_t nrej, rej_alloc;
	uint64_t last_scan_ns;
	/* A Python process was found (a watched root: a descendant), and the first one's version */
	bool found;
	char python[32];

	bool launched;
	struct spawn sp;          /* launch mode only */
	const char *program;      /* launch mode: argv[0], for the summary */

	struct ticker tk;
	bool started, stopped;
	uint64_t end_ns;
	bool timed_out;   /* the duration ran out */
	/* spy raised to SCHED_RR while sampling (undone at the stop); when its CPU share was last looked at */
	bool sched_rt;
	uint64_t sched_check_ns, sched_cpu_ns;
	bool sched_judged;  /* past the first window, the start-up's */
	uint64_t poll_ns;   /* the longest wait between looks at the processes */
	struct sigaction chld_old;
	bool chld_set;
	uint64_t ticked_ns;   /* the clock at the end of the tick just taken, or 0 */
};

/* ---- processes ---- */

/* A Python process is sampled: the first one's version is the session's (prof_python). */
static void note_found(struct profiler *e, const struct prof_process *p)
{
	if (!e->found) {
		e->found = true;
		snprintf(e->python, sizeof(e->python), "%s", prof_process_python(p));
	}
}

/* Open pid into a new process entry, *out; on failure nothing is kept. */
static int process_open(struct profiler *e, pid_t pid, struct prof_process **out, struct spy_err *err)
{
	struct prof_process *p;
	int rc = prof_process_open(&p, pid, true, e->ts.strs, err);
	if (rc < 0) {
		return rc;
	}
	SPY_GROW(e->procs, e->procs_alloc, e->nprocs + 1);
	e->procs[e->nprocs++] = p;
	note_found(e, p);
	*out = p;
	return 0;
}

/* Unless nonblocking, seize it (with --native, its unwinder first). */
static int process_start(struct profiler *e, struct prof_process *p, struct spy_err *err)
{
	p->last_maps_ns = spy_now_ns();
	p->maps_retry_ns = 10 * 1000 * 1000ull;
	if (e->ts.o.nonblocking || p->watched) {
		return 0;
	}
	int rc = e->ts.o.native ? prof_native_start(p, e->ts.o.native_all, err) : 0;
	if (rc == 0) {
		rc = p->h.tracer->attach(&p->h, err);
	}
	p->attached = rc == 0;
	return rc;
}

static void process_stop(struct prof_process *p)
{
	if (p->attached) {
		p->h.tracer->detach(&p->h);
		p->attached = false;
	}
	prof_threads_clear(p);
}

static void process_free(struct prof_process *p)
{
	process_stop(p);
	prof_process_free(p);
}

/* Whether the process named or launched has exited. */
static bool root_gone(const struct profiler *e)
{
	return !e->nprocs || e->procs[0]->gone;
}

/*
 * Whether the session is over: the root has exited and, with -s, so has
 * every descendant followed (as py-spy's -s, which samples until none
 * runs). New descendants are no longer found once the root has gone:
 * its orphans belong to another parent.
 */
static bool tree_gone(const struct profiler *e)
{
	if (!root_gone(e)) {
		return false;
	}
	for (size_t i = 1; e->ts.o.subprocesses && i < e->nprocs; i++) {
		if (!e->procs[i]->gone) {
			return false;
		}
	}
	return true;
}

static bool worth_trying(struct profiler *e, pid_t pid);

/*
 * -s: the root is no Python process; watch it for Python descendants
 * instead. Its own executable counts as a rejected descendant's: an exec
 * (a shell's last command, a shim) makes it worth opening again.
 */
static int watch_root(struct profiler *e, pid_t pid, const struct spy_err *why, struct spy_err *err)
{
	struct prof_process *p;
	int rc = prof_process_open_watched(&p, pid, e->ts.strs, err);
	if (rc < 0) {
		return rc;
	}
	SPY_GROW(e->procs, e->procs_alloc, e->nprocs + 1);
	e->procs[e->nprocs++] = p;
	(void)worth_trying(e, pid);
	spy_log(SPY_LOG_DEBUG, "engine: %s: watching it for Python descendants (-s)", why->msg);
	return 0;
}

/* The root's exec made it a Python process: it is sampled from now on, in the watched entry's place. */
static void root_became_python(struct profiler *e)
{
	struct prof_process *w = e->procs[0], *p;
	if (prof_process_open(&p, w->pid, true, e->ts.strs, NULL) < 0) {
		return;
	}
	if (process_start(e, p, NULL) < 0) {
		process_free(p);
		return;
	}
	e->procs[0] = p;
	process_free(w);
	note_found(e, p);
	spy_log(SPY_LOG_DEBUG, "engine: process %d became a Python process (%s): sampled",
		(int)p->pid, prof_process_cmdline(p));
}

/* ---- launching ---- */

/*
 * -s: a launched program that is no interpreter yet is watched once it has
 * a child (a shell's), or past the fast polls (a slow shim's exec is then
 * caught as the watched root's).
 */
static bool launch_watch_now(const struct profiler *e, uint64_t start)
{
	if (spy_now_ns() - start >= LAUNCH_FAST_NS) {
		return true;
	}
	pid_t *v = NULL;
	size_t n = proc_list_descendants(e->sp.pid, &v);
	free(v);
	return n > 0;
}

static int launch(struct profiler *e, char **program, struct spy_err *err)
{
	int rc = spawn_start(&e->sp, program, err);
	if (rc < 0) {
		return rc;
	}
	e->launched = true;
	e->program = program[0];
	uint64_t start = spy_now_ns(), deadline = start + LAUNCH_WAIT_NS;
	struct spy_err last = SPY_ERR_INIT;
	struct prof_process *p;
	/* A shim (pyenv's) execs the interpreter later: each try opens the process afresh. */
	while ((rc = process_open(e, e->sp.pid, &p, &last)) < 0) {
		if (rc == -SPY_EPERM) {
			*err = last;
			spawn_abandon(&e->sp);
			return rc;
		}
		if (spawn_reap(&e->sp, false)) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found: '%s' exited before one appeared",
					   program[0]);
		}
		if (proc_stop_requested) {
			spawn_forward(&e->sp);
			return spy_err_set(err, SPY_EINTR, "interrupted");
		}
		if (e->ts.o.subprocesses && rc == -SPY_ENOPY && launch_watch_now(e, start)) {
			return watch_root(e, e->sp.pid, &last, err);
		}
		if (spy_now_ns() >= deadline) {
			/* Not left running unsupervised, as root or otherwise. */
			spawn_abandon(&e->sp);
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in '%s' (process %d) after %llu s: %s",
					   program[0], (int)e->sp.pid,
					   (unsigned long long)(LAUNCH_WAIT_NS / 1000000000ull), last.msg);
		}
		bool fast = spy_now_ns() - start < LAUNCH_FAST_NS;
		struct timespec ts = { 0, (long)(fast ? LAUNCH_POLL_FAST_NS : LAUNCH_POLL_NS) };
		nanosleep(&ts, NULL);
	}
	return 0;
}

/*
 * -g on a build without a GIL (a free-threaded build whose GIL is off),
 * where no thread ever holds one, would keep nothing; --async where its
 * version's tasks cannot be read, nothing useful.
 */
static int check_root(struct profiler *e, struct spy_err *err)
{
	const struct prof_process *pp = e->procs[0];
	if (pp->watched) {
		return 0;
	}
	if (e->ts.o.gil && !pyrt_has_gil(pp->rt)) {
		return spy_err_set(err, SPY_EUSAGE,
				   "-g: Python %s is a free-threaded build running without a GIL, so no thread "
				   "holds one; leave -g out (or run it with PYTHON_GIL=1)",
				   pyrt_version_string(pp->rt));
	}
	return e->ts.o.async ? pyrt_tasks_supported(pp->rt, err) : 0;
}

int prof_open(struct profiler **out, const struct prof_opts *o, struct spy_strtab *strs, pid_t pid,
	      char **program, struct spy_err *err)
{
	struct profiler *e = spy_xcalloc(1, sizeof(*e));
	e->poll_ns = POLL_NS;
	*out = e;
	e->ts.o = *o;
	e->ts.o.native |= o->native_all;
	e->ts.wo = (struct prof_walk_opts){ .async = o->async, .gc = o->gc };
	e->ts.strs = strs;
	int rc;
	if (program) {
		spawn_install_signals();
		rc = launch(e, program, err);
	} else {
		struct prof_process *p;
		proc_install_stop_handlers();
		rc = process_open(e, pid, &p, err);
		if (rc == -SPY_ENOPY && o->subprocesses) {
			struct spy_err why = *err;
			rc = watch_root(e, pid, &why, err);
		}
	}
	if (rc == 0) {
		rc = check_root(e, err);
	}
	if (rc == 0) {
		rc = process_start(e, e->procs[0], err);
	}
	if (rc < 0 && program && e->launched) {
		spawn_abandon(&e->sp);
	}
	return rc;
}

/* ---- descendants (-s) ---- */

static bool is_sampled(const struct profiler *e, pid_t pid)
{
	for (size_t i = 0; i < e->nprocs; i++) {
		if (!e->procs[i]->gone && e->procs[i]->pid == pid) {
			return true;
		}
	}
	return false;
}

static bool worth_trying(struct profiler *e, pid_t pid)
{
	char exe[256] = "";
	const struct spy_process *root = &e->procs[0]->h;
	root->tracer->exe_of(root, pid, exe, sizeof(exe));
	for (size_t i = 0; i < e->nrej; i++) {
		struct prof_rejected *j = &e->rej[i];
		if (j->pid != pid) {
			continue;
		}
		if (strcmp(j->exe, exe)) {
			memcpy(j->exe, exe, sizeof(j->exe));
			j->tries = 0;
		}
		return ++j->tries <= REJECT_TRIES;
	}
	SPY_GROW(e->rej, e->rej_alloc, e->nrej + 1);
	struct prof_rejected *j = &e->rej[e->nrej++];
	j->pid = pid;
	memcpy(j->exe, exe, sizeof(j->exe));
	j->tries = 1;
	return true;
}

static void forget_rejected(struct profiler *e, pid_t pid)
{
	for (size_t i = 0; i < e->nrej; i++) {
		if (e->rej[i].pid == pid) {
			e->rej[i] = e->rej[--e->nrej];
			return;
		}
	}
}

/* Forget the descendants that have exited; procs[0] stays to the end. */
static void reap_descendants(struct profiler *e)
{
	size_t kept = 1;
	for (size_t i = 1; i < e->nprocs; i++) {
		if (e->procs[i]->gone) {
			process_free(e->procs[i]);
		} else {
			e->procs[kept++] = e->procs[i];
		}
	}
	e->nprocs = e->nprocs ? kept : 0;
}

static void scan_descendants(struct profiler *e)
{
	/* Gone, its pid may name another process, whose children are none of ours. */
	if (root_gone(e)) {
		return;
	}
	if (e->procs[0]->watched && worth_trying(e, e->procs[0]->pid)) {
		root_became_python(e);
		if (!e->procs[0]->watched) {
			forget_rejected(e, e->procs[0]->pid);
		}
	}
	const struct spy_process *root = &e->procs[0]->h;
	pid_t *v = NULL;
	size_t n = root->tracer->descendants(root, &v);
	for (size_t i = 0; i < n; i++) {
		pid_t pid = v[i];
		if (is_sampled(e, pid) || !worth_trying(e, pid)) {
			continue;
		}
		struct prof_process *p;
		if (process_open(e, pid, &p, NULL) < 0) {
			continue;
		}
		forget_rejected(e, pid);
		if (process_start(e, p, NULL) < 0) {
			p->gone = true;
		}
		spy_log(SPY_LOG_DEBUG, "engine: following process %d (%s)", (int)pid,
			prof_process_cmdline(p));
	}
	free(v);
}

/* Notice which processes have exited, without blocking. */
static void poll_processes(struct profiler *e, uint64_t now)
{
	/* Before the look: a report after it is a SIGCHLD that ends the sleep. */
	proc_chld_drain();
	for (size_t i = 0; i < e->nprocs; i++) {
		struct prof_process *p = e->procs[i];
		const struct spy_tracer_ops *ops = p->h.tracer;
		if (p->gone) {
			continue;
		}
		if (p->attached) {
			p->gone = ops->poll(&p->h) == -SPY_EGONE;
		} else if (i == 0 && e->launched) {
			/* Our own child: only our wait sees it exit. */
			p->gone = spawn_reap(&e->sp, false);
		} else if (now - p->last_alive_ns >= e->poll_ns) {
			/* A /proc read each tick would cost more than the sample; exit can wait 10 ms. */
			p->gone = !ops->alive(&p->h);
			p->last_alive_ns = now;
		}
	}
}

/*
 * spy's own scheduling while it samples. On a machine whose cores the
 * target keeps busy (a hundred threads in C with the GIL released), spy is
 * one runnable thread among a hundred and gets its fair share: every
 * wake-up (the tick, each held thread's stop) waits behind the target's
 * threads, and 100 Hz asked gave 2-30 Hz. A negative nice helps little
 * where autogroups or cgroups group the tasks, as they usually do (nice
 * weighs spy against its own group only, and there it takes from a
 * program spy launched). So where spy has the right (CAP_SYS_NICE, root,
 * or an RLIMIT_RTPRIO), it takes the lowest real-time priority, SCHED_RR
 * 1, which any other real-time task outranks: a wake-up then runs at once,
 * and the target loses what the rate asked costs anyway (bench/saturated
 * measures both). A real-time thread that never sleeps would own a core,
 * bounded only by the kernel's throttling, so: never while the ticker
 * spins, and once spy's own work takes more than half a core in a window
 * after the first (ticks that cost more than their period) it goes back
 * to the default for the rest of the run. SCHED_RESET_ON_FORK: a program
 * spy launches, and anything spy starts, begins at the default. spy started under nice or chrt keeps
 * what it was given (that is how to say no), and without the right it
 * goes on as it was. Undone when sampling stops: writing a large profile
 * is no reason to outrank anything.
 */
#define SCHED_CHECK_NS (200 * 1000 * 1000ull)

static void sched_raise(struct profiler *e)
{
	e->sched_rt = false;
	errno = 0;
	int policy = sched_getscheduler(0);
	int nice = getpriority(PRIO_PROCESS, 0);
	if (policy != SCHED_OTHER || nice != 0 || errno) {
		spy_log(SPY_LOG_DEBUG, "engine: started with scheduling policy %d, nice %d: kept as given",
			policy, nice);
		return;
	}
	if (e->tk.spin) {
		spy_log(SPY_LOG_DEBUG, "engine: spinning: sampling at the default priority");
		return;
	}
	struct sched_param sp = { .sched_priority = 1 };
	if (sched_setscheduler(0, SCHED_RR | SCHED_RESET_ON_FORK, &sp) < 0) {
		spy_log(SPY_LOG_DEBUG, "engine: cannot raise spy's priority (%s): sampling at the default",
			strerror(errno));
		return;
	}
	e->sched_rt = true;
	e->sched_judged = false;
	e->sched_check_ns = spy_now_ns();
	e->sched_cpu_ns = spy_thread_cpu_ns();
	spy_log(SPY_LOG_DEBUG, "engine: sampling at SCHED_RR 1");
}

static void sched_restore(struct profiler *e)
{
	if (e->sched_rt) {
		struct sched_param sp = { .sched_priority = 0 };
		(void)sched_setscheduler(0, SCHED_OTHER, &sp);
		e->sched_rt = false;
	}
}

/* Real-time only while spy's own work leaves most of a core to others. */
static void sched_check(struct profiler *e, uint64_t now)
{
	if (!e->sched_rt || now - e->sched_check_ns < SCHED_CHECK_NS) {
		return;
	}
	uint64_t cpu = spy_thread_cpu_ns();
	/*
	 * The first window is the start-up's: each thread's first walk
	 * decodes its code objects, and the names are listed. A hundred
	 * threads took 54% of a core in it, then 100 Hz at SCHED_RR, where
	 * the default gave 10 Hz on the loaded cores (integration-load, 3.12).
	 */
	bool judged = e->sched_judged;
	e->sched_judged = true;
	if (judged && 2 * (cpu - e->sched_cpu_ns) > now - e->sched_check_ns) {
		sched_restore(e);
		spy_log(SPY_LOG_DEBUG, "engine: sampling took %.0f%% of a core at SCHED_RR 1: the default from here",
			100.0 * (double)(cpu - e->sched_cpu_ns) / (double)(now - e->sched_check_ns));
	}
	e->sched_check_ns = now;
	e->sched_cpu_ns = cpu;
}

/*
 * Nothing: a stop's SIGCHLD only has to end the sleep between ticks (see
 * start); the sampling thread holds it (proc_chld_hold) and sleeps on it,
 * so this runs only where holding it failed, or on another thread.
 */
static void chld_wake(int sig)
{
	(void)sig;
}

/* The ticks' clock at the rate asked, from now_ns. */
static void set_clock(struct profiler *e, uint64_t now_ns)
{
	ticker_init(&e->tk, e->ts.o.rate, now_ns);
	if (e->ts.o.aligned) {
		uint64_t period = e->tk.period_ns;
		e->tk.start_ns = now_ns / period * period + (now_ns % period ? period : 0);
	}
	/* Compared as a double: a rate as low as 1e-300 makes half a period infinite. */
	double half = 5e8 / e->ts.o.rate;
	uint64_t w = half < (double)PROF_OFFCPU_WAIT_NS ? (uint64_t)half : PROF_OFFCPU_WAIT_NS;
	e->ts.offcpu_wait_ns = w > PROF_OFFCPU_WAIT_MIN_NS ? w : PROF_OFFCPU_WAIT_MIN_NS;
}

void prof_set_poll(struct profiler *e, uint64_t ns)
{
	e->poll_ns = ns > POLL_NS ? ns : POLL_NS;
}

void prof_set_rate(struct profiler *e, double rate)
{
	if (!(rate > 0) || rate == e->ts.o.rate) {
		return;
	}
	e->ts.o.rate = rate;
	if (e->started) {
		set_clock(e, spy_now_ns());
	}
}

/* The clock starts: the first deadline is now. */
static void start(struct profiler *e)
{
	e->started = true;
	e->ts.st.start_ns = spy_now_ns();
	e->end_ns = e->ts.o.duration >= 0 ? e->ts.st.start_ns + spy_s_to_ns(e->ts.o.duration) : UINT64_MAX;
	set_clock(e, e->ts.st.start_ns);
	/*
	 * A thread held off a CPU (hold_one) stops when it next gets one, and
	 * waits for the next poll to be restarted: SIGCHLD, with a handler
	 * that does nothing, ends the sleep between ticks at its stop, so that
	 * poll comes at once. SA_RESTART: no other call is cut short by it.
	 */
	struct sigaction chld = { .sa_handler = chld_wake, .sa_flags = SA_RESTART };
	sigemptyset(&chld.sa_mask);
	e->chld_set = sigaction(SIGCHLD, &chld, &e->chld_old) == 0;
	/*
	 * Held, not delivered (see proc_chld_hold): a stop then costs no
	 * sigprocmask and no signal frame. The handler stays: SIGCHLD
	 * ignored is never raised for a stop, blocked or not.
	 */
	if (e->chld_set) {
		(void)proc_chld_hold(true);
	}
	/*
	 * The kernel may defer a timed wake-up by the thread's timer slack,
	 * 50 us by default, to batch it with others: at kilohertz rates that
	 * is most of a period. 1 ns: ticks on time.
	 */
	(void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	sched_raise(e);
}

/* One tick: every process, one after the other. */
static void tick(struct profiler *e, uint64_t start_ns)
{
	bool gil_held = false;
	e->ts.st.samples++;
	e->ts.st.live_threads = 0;
	e->ts.nkept = 0;
	for (size_t i = 0; i < e->nprocs && !proc_stop_requested; i++) {
		if (!e->procs[i]->gone && !e->procs[i]->watched) {
			/* The first at the tick's start; the others when their turn comes. */
			prof_tick_process(&e->ts, e->procs[i], i ? spy_now_ns() : start_ns, &gil_held);
		}
	}
	e->ts.st.gil_ticks += gil_held;
}

enum prof_event prof_next(struct profiler *e, struct prof_tick *out)
{
	memset(out, 0, sizeof(*out));
	if (e->stopped) {
		return PROF_END;
	}
	if (!e->started) {
		start(e);
	}
	/* Just after a tick, its end's clock serves: flat out, each read is 1% of a sample. */
	uint64_t now = e->ticked_ns ? e->ticked_ns : spy_now_ns();
	e->ticked_ns = 0;
	poll_processes(e, now);
	e->timed_out = ticker_deadline(&e->tk) >= e->end_ns;
	if (tree_gone(e) || proc_stop_requested || e->timed_out) {
		prof_stop(e);
		return PROF_END;
	}
	if (e->ts.o.subprocesses && now - e->last_scan_ns >= SCAN_NS) {
		reap_descendants(e);
		scan_descendants(e);
		e->last_scan_ns = now;
	}
	/* Between ticks, never inside one: the tick's time is the stacks'. */
	for (size_t i = 0; i < e->nprocs; i++) {
		if (!e->procs[i]->watched) {
			prof_side_reads(&e->ts, e->procs[i], now);
		}
	}
	uint64_t seen;
	if (ticker_wait(&e->tk, e->poll_ns, &seen) != 1) {
		return PROF_WAIT;
	}
	out->start_ns = seen ? seen : spy_now_ns();
	out->t_s = (double)(out->start_ns - e->ts.st.start_ns) / 1e9;
	tick(e, out->start_ns);
	now = spy_now_ns();
	e->ticked_ns = now;
	/* A late last tick must not count deadlines past the end as missed. */
	ticker_take(&e->tk, now < e->end_ns ? now : e->end_ns);
	sched_check(e, now);
	out->v = e->ts.kept;
	out->n = e->ts.nkept;
	return PROF_TICK;
}

void prof_stop(struct profiler *e)
{
	if (e->stopped) {
		return;
	}
	e->stopped = true;
	if (!e->started) {
		return;
	}
	e->ts.st.stop_ns = spy_now_ns();
	for (size_t i = 0; i < e->nprocs; i++) {
		prof_unsampled_read(&e->ts, e->procs[i], e->ts.st.stop_ns, true);
	}
	sched_restore(e);
	(void)proc_chld_hold(false); /* nothing if it was not held */
	if (e->chld_set) {
		sigaction(SIGCHLD, &e->chld_old, NULL);
	}
	prof_holds_log(&e->ts);
}

/* ---- ending ---- */

void prof_detach(struct profiler *e)
{
	prof_stop(e);
	for (size_t i = 0; i < e->nprocs; i++) {
		process_stop(e->procs[i]);
	}
	if (e->launched && proc_stop_requested) {
		spawn_forward(&e->sp);
	}
}

/* "exited with status N", "was killed by signal N (name)" or "exited", for a wait status. */
static void describe_exit(struct spy_buf *out, int status)
{
	if (WIFEXITED(status)) {
		spy_buf_addf(out, "exited with status %d", WEXITSTATUS(status));
	} else if (WIFSIGNALED(status)) {
		spy_buf_addf(out, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	} else {
		spy_buf_adds(out, "exited");
	}
}

/*
 * How long a program told to stop is waited for. A program that ignores
 * the signal (nohup, a handler of its own) goes on running: spy ends
 * anyway, within a second of the signal, and says so.
 */
#define PROGRAM_WAIT_NS (800 * 1000 * 1000ull)

/* Wait for a program that was told to stop (already forwarded); a second signal gives up on it. */
static bool wait_program(struct profiler *e)
{
	int signals = proc_stop_requested ? 1 : 0;
	uint64_t deadline = spy_now_ns() + PROGRAM_WAIT_NS;
	while (!spawn_reap(&e->sp, false)) {
		if (spy_now_ns() >= deadline) {
			return false;
		}
		proc_stop_requested = 0;
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		if (proc_stop_requested && ++signals < 2) {
			spawn_forward(&e->sp);
		} else if (proc_stop_requested) {
			return false;
		}
	}
	return true;
}

void prof_program_fate(struct profiler *e, struct spy_buf *out)
{
	if (!e->launched) {
		return;
	}
	int status = 0;
	bool known = false;
	const struct spy_process *root = e->nprocs ? &e->procs[0]->h : NULL;
	if (root && root->tracer->exit_status(root, &status)) {
		known = true;
	} else if (root_gone(e) || proc_stop_requested) {
		known = wait_program(e);
		status = e->sp.status;
	} else {
		/* The duration ran out: the program goes on, as a --pid target would. */
		known = spawn_reap(&e->sp, false);
		status = e->sp.status;
	}
	if (known) {
		spy_buf_addf(out, "; %s ", e->program);
		describe_exit(out, status);
	} else {
		spy_buf_addf(out, "; %s (process %d) is still running", e->program, (int)e->sp.pid);
	}
}

void prof_exec_notes(const struct profiler *e, struct spy_buf *out)
{
	for (size_t i = 0; i < e->nprocs; i++) {
		const struct spy_process *sp = &e->procs[i]->h;
		if (sp->tracer && sp->tracer->execed(sp)) {
			spy_buf_addf(out, "; process %d replaced its program (exec): sampling stopped there",
				     (int)sp->ops->pid(sp));
		}
	}
}

bool prof_execed(const struct profiler *e)
{
	const struct spy_process *sp = e->nprocs ? &e->procs[0]->h : NULL;
	return sp && sp->tracer && sp->tracer->execed(sp);
}

void prof_close(struct profiler *e)
{
	if (!e) {
		return;
	}
	prof_stop(e);
	for (size_t i = 0; i < e->nprocs; i++) {
		process_free(e->procs[i]);
	}
	free(e->procs);
	free(e->rej);
	free(e->ts.kept);
	free(e);
}

/* ---- what is known ---- */

const struct prof_process *prof_root(const struct profiler *e)
{
	return e->nprocs ? e->procs[0] : NULL;
}

const char *prof_python(const struct profiler *e)
{
	return e->python;
}

int prof_check_found(const struct profiler *e, struct spy_err *err)
{
	if (e->found || !e->nprocs) {
		return 0;
	}
	const struct prof_process *r = e->procs[0];
	if (e->launched && r->gone) {
		return spy_err_set(err, SPY_ENOPY, "no Python interpreter found: '%s' and its descendants "
				   "exited before one appeared", e->program);
	}
	struct spy_buf b = SPY_BUF_INIT;
	if (e->launched) {
		spy_buf_addf(&b, "'%s' (process %d)", e->program, (int)r->pid);
	} else {
		spy_buf_addf(&b, "process %d (%s)", (int)r->pid, prof_process_cmdline(r));
	}
	if (r->gone) {
		spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s or its descendants: they exited",
			    b.buf);
	} else if (!proc_stop_requested && e->timed_out) {
		spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s or its descendants in %g s",
			    b.buf, e->ts.o.duration);
	} else {
		spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s or its descendants before spy "
			    "was stopped", b.buf);
	}
	spy_buf_release(&b);
	return -SPY_ENOPY;
}

void prof_stats(const struct profiler *e, struct prof_stats *out)
{
	*out = e->ts.st;
	out->missed = e->tk.missed;
	out->processes = 0;
	for (size_t i = 0; i < e->nprocs; i++) {
		out->processes += !e->procs[i]->watched && !e->procs[i]->gone;
	}
}

void prof_dropped(struct profiler *e)
{
	e->ts.st.errors[SPY_SAMPLE_ERR_DROPPED]++;
}

bool prof_gc_known(const struct profiler *e)
{
	return e->ts.gc_known;
}

double prof_elapsed(const struct profiler *e, uint64_t now_ns)
{
	const struct prof_stats *s = &e->ts.st;
	uint64_t end = s->stop_ns ? s->stop_ns : now_ns;
	/* 0 before the first tick */
	return s->start_ns && end > s->start_ns ? (double)(end - s->start_ns) / 1e9 : 0.0;
}

void prof_resources(struct profiler *e, struct prof_resources *out)
{
	memset(out, 0, sizeof(*out));
	struct prof_process *p = e->nprocs ? e->procs[0] : NULL;
	/* A watched root's are not the program's sampled: a shell's, unshare's. */
	if (!p || p->gone || p->watched) {
		return;
	}
	struct proc_resources pr;
	memset(&pr, 0, sizeof(pr));
	p->h.tracer->resources(&p->h, &pr);
	*out = (struct prof_resources){
		.known = (pr.known & PROC_RES_CPU ? PROF_RES_CPU : 0) | (pr.known & PROC_RES_RSS ? PROF_RES_RSS : 0) |
			 (pr.known & PROC_RES_THREADS ? PROF_RES_THREADS : 0) |
			 (pr.known & PROC_RES_CTXSW ? PROF_RES_CTXSW : 0) | (pr.known & PROC_RES_IO ? PROF_RES_IO : 0),
		.utime = pr.utime, .stime = pr.stime, .rss = pr.rss, .threads = pr.threads, .ctxsw = pr.ctxsw,
		.read_bytes = pr.read_bytes, .write_bytes = pr.write_bytes,
	};
}

uint64_t prof_errors(const struct prof_stats *s)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < SPY_SAMPLE_ERR_MAX; i++) {
		sum += s->errors[i];
	}
	return sum;
}

void prof_format_errors(const struct prof_stats *s, struct spy_buf *out)
{
	spy_buf_addf(out, "%llu", (unsigned long long)prof_errors(s));
	const char *sep = " (";
	for (size_t i = 0; i < SPY_SAMPLE_ERR_MAX; i++) {
		if (!s->errors[i]) {
			continue;
		}
		spy_buf_addf(out, "%s%s %llu", sep, spy_sample_errors[i].name, (unsigned long long)s->errors[i]);
		sep = ", ";
	}
	if (sep[0] == ',') {
		spy_buf_adds(out, ")");
	}
}

int prof_stop_signal(void)
{
	return (int)proc_stop_requested;
}

void prof_install_stop_handlers(void)
{
	proc_install_stop_handlers();
}

void prof_ignore_hup(void)
{
	proc_ignore_hup();
}

bool prof_hup_seen(void)
{
	return proc_hup_seen();
}
