/*
 * spy agent: every Python process on the host, continuously, pushed to a
 * Pyroscope server (cmd/stream.h: the push options, the sender, the
 * labels and metadata, as record --push has them).
 *
 * The main thread scans for candidates (profiler/fleet.h: one readdir of
 * /proc per scan, new PIDs examined once), filters them (--uid, --match,
 * --exclude on the command line), and starts one worker thread per
 * process. A worker is record's default mode on one --pid: prof_open,
 * prof_next until the process exits or a stop signal, then detach. Each
 * thread is its own process's tracer (ptrace binds a tracee to the thread
 * that attached), so the processes never wait on each other. Each worker
 * closes a window on every wall-clock multiple of --push-every
 * (cmd/session.h's windows, whole periods), so every process's windows
 * line up, and hands it to the one pusher, whose thread does the network.
 *
 * The CPU budget (--max-cpu, % of one core) is charged to whoever causes
 * it (cmd/agent-budget.h): the scans of /proc and the opens under shares
 * of their own, and every 3 s each process's sampling, read off its
 * worker's thread clock, sets that process's rate: the expensive one is
 * lowered, not every one. Workers apply it at their next tick
 * (prof_set_rate), and each window says the rate it was sampled at.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cmd/agent-memory.h"
#include "cmd/agent-budget.h"
#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/push.h"
#include "cmd/session.h"
#include "cmd/stream.h"
#include "common/log.h"
#include "common/term.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"
#include "profiler/fleet.h"
#include "profiler/profiler.h"

/*
 * 19 Hz: always-on sampling must cost the profiled services next to
 * nothing, so near the OTel profiler's 20 Hz rather than Pyroscope's
 * examples' 100; odd (and prime) so that ticks do not fall in lockstep
 * with the 10, 20, 50 and 100 Hz periodic work of the services themselves,
 * which would show or hide it always.
 */
#define AGENT_RATE_HZ 19.0
/* 5% of one core: the agent's whole cost on a node, with the pusher. */
#define AGENT_MAX_CPU 5.0
#define AGENT_SCAN_NS (500 * 1000 * 1000ull)
#define AGENT_STATUS_S 60
/*
 * A process too young to show its interpreter is tried again after 0.25,
 * 0.5, ... 8 s (AGENT_RETRIES tries after the first), then given up on
 * until it replaces its program.
 */
#define AGENT_RETRIES 6
#define AGENT_RETRY_NS (250 * 1000 * 1000ull)
/*
 * A process older than this when first found with no interpreter is given
 * up on at once: the retries are for a Python still loading its own, and
 * one that has run this long has loaded it, or is not one (an executable
 * named python* that is not, which cost 7 opens).
 */
#define AGENT_YOUNG_S 20.0
#define AGENT_CMDLINE_MAX 4096

struct agent;

struct worker {
	struct agent *a;
	pid_t pid;
	pthread_t th;
	atomic_bool done;
	struct stream stream;        /* its labels (cmd/stream.h) */
	char program[300];
	uint64_t names_over_told;    /* the strtab's refusals already put in a window */
	atomic_size_t mem_bytes;     /* bytes its names and window hold (agent-memory.h) */
	atomic_bool shed;            /* the main thread's word: let the process go, it costs too much */
	struct agent_cost cost;      /* its CPU and rate (cmd/agent-budget.h) */
	uint64_t open_ns;            /* what its open cost on its own clock; read once joined */
	struct worker *next;
};

/* How a worker ended. */
enum worker_end {
	WORKER_LET_GO = 0,   /* the process exited, or a stop, or it could not be profiled (said) */
	WORKER_NO_PYTHON,    /* no interpreter found in it (yet) */
	WORKER_EXECED,       /* it replaced its program: perhaps by another Python */
	WORKER_SHED,         /* let go for --max-memory: not again unless it replaces its program */
};

/*
 * A process in which no interpreter was found (yet), or that replaced its
 * program: one entry a PID, until it is profiled or gone. The fleet's
 * scan reports a candidate born once only, so a process given up on is
 * looked at again here when its executable changes (an exec).
 */
struct pending {
	pid_t pid;
	unsigned tries;     /* opens that found no interpreter, since the last exec */
	uint64_t at_ns;     /* the next try; UINT64_MAX while one runs, or given up */
	bool given_up;
	bool execed;        /* its tries are for a program it exec'd: as young as its exec */
	uint64_t exe;       /* given up: what it ran then (its exe link, hashed: an entry stays small) */
};

/*
 * One line of the agent's log (stderr, which journald reads a line an
 * entry). Lines quote what targets chose -- a program's name, the paths in
 * an error -- so each goes through the terminal escaper: a newline or an
 * escape sequence in an argv[0] cannot start a forged entry or clear a
 * screen.
 */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	struct spy_buf b = SPY_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	spy_term_vaddf(&b, fmt, ap);
	va_end(ap);
	fprintf(stderr, "spy agent: %s\n", b.buf);
	spy_buf_release(&b);
}

/* The exe link of pid, hashed (FNV-1a); false for a process gone or unreadable. */
static bool exe_hash(const struct prof_fleet *f, pid_t pid, uint64_t *out)
{
	char exe[PATH_MAX];
	if (prof_fleet_exe(f, pid, exe, sizeof(exe)) < 0) {
		return false;
	}
	*out = spy_hash_bytes(exe, strlen(exe));
	return true;
}

/*
 * A young candidate the filters did not choose, looked at again each scan
 * for a while: a Python that forks before it execs the target shows its
 * parent's command line first, and is not reported as born again.
 */
struct recheck {
	pid_t pid;
	uint64_t until_ns;
};
#define AGENT_RECHECK_NS (5 * 1000 * 1000 * 1000ull)

struct agent {
	/* options */
	const char *match, *exclude, *uid_text;
	double rate, max_cpu;
	unsigned status_every;
	uid_t uid;
	bool has_uid;
	regex_t match_re, exclude_re;
	bool has_match, has_exclude;

	struct stream_sink sink;     /* the push options, the sender, its lines (cmd/stream.h) */
	struct prof_fleet *fleet;

	struct worker *workers;
	size_t nworkers;
	struct pending *pending;
	size_t npending, alloc_pending;
	struct recheck *recheck;
	size_t nrecheck, alloc_recheck;

	atomic_uint_fast64_t ticks;  /* over every process, since the start */
	atomic_uint_fast64_t left;   /* processes let go */
	atomic_uint_fast64_t names_over;  /* names refused for a process's budget, over every process */
	atomic_uint_fast64_t stacks_over; /* samples past a window's budget, over every process */
	unsigned max_memory_mb;
	struct agent_memory mem;
	struct agent_budget bud;
};

static const char *const agent_usage[] = {
	"spy agent --push URL [OPTIONS]",
	NULL,
};

static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- a process's worker ---- */

/* A worker's open window, and what closing it needs. */
struct worker_window {
	struct worker *w;
	struct agent_window win;
	struct spy_strtab *strs;
	const char *python;
	double rate, win_rate;       /* the rate now; the lowest the open window was sampled at */
};

/* A window closed (cmd/session.h): to the pusher, with the rate it was sampled at; a new one opens. */
static void close_window(void *ctx, const struct cmd_window *cw)
{
	struct worker_window *ww = ctx;
	struct worker *w = ww->w;
	uint64_t stacks_over = ww->win.over;
	struct fg_profile *p = agent_window_take(&ww->win);
	uint64_t over = spy_strtab_over(ww->strs) - w->names_over_told;
	if (over) {
		fg_profile_meta_setf(p, FG_META_NAMES_OVER, "%llu", (unsigned long long)over);
		atomic_fetch_add(&w->a->names_over, over);
		w->names_over_told += over;
	}
	if (stacks_over) {
		fg_profile_meta_setf(p, FG_META_STACKS_OVER, "%llu", (unsigned long long)stacks_over);
		atomic_fetch_add(&w->a->stacks_over, stacks_over);
	}
	stream_window(&w->stream, p, ww->python, w->program, ww->win_rate, cw->from_s, cw->until_s);
	fg_profile_free(p);
	ww->win_rate = ww->rate;
}

/* service_name, then host, pid, python, container_id, pod_uid, k8s_*: never an argument. */
static void label_series(struct worker *w, const char *cmdline, const char *python)
{
	struct prof_fleet_about *ab = spy_xcalloc(1, sizeof(*ab));
	bool known = prof_fleet_about(w->a->fleet, w->pid, ab) == 0;
	char app[sizeof(w->stream.series.app)];
	bool service = known && ab->service[0];
	snprintf(app, sizeof(app), "%s", service ? ab->service : "");
	if (service && push_check_app(app)) {
		push_sanitize(app, true);
	}
	stream_open(&w->stream, &w->a->sink, service ? app : NULL, cmdline, (int)w->pid, python);
	if (known && ab->container_id[0]) {
		stream_label(&w->stream, "container_id", ab->container_id);
	}
	if (known && ab->pod_uid[0]) {
		stream_label(&w->stream, "pod_uid", ab->pod_uid);
	}
	for (size_t i = 0; known && i < ab->nk8s; i++) {
		if (!push_check_key(ab->k8s[i].name)) {
			push_sanitize(ab->k8s[i].value, false);
			stream_label(&w->stream, ab->k8s[i].name, ab->k8s[i].value);
		}
	}
	free(ab);
}

/* The samples of one tick into the window, under a `process PID "PROGRAM"` root. */
static void add_tick(struct agent_window *win, const struct prof_tick *t, struct spy_stack *st, const char *root)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct prof_sample *s = &t->v[i];
		spy_stack_reset(st);
		spy_stack_append(st, s->stack->v, s->stack->n);
		if (s->thread_root) {
			spy_stack_push_synthetic(st, s->thread_root);
		}
		spy_stack_push_synthetic(st, root);
		agent_window_add(win, st);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct agent *a = w->a;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	spy_strtab_set_budget(&strs, agent_names_budget());
	double rate = atomic_load(&w->cost.rate);
	/* Aligned: one timer wakes every worker, not one each. */
	struct prof_opts o = { .rate = rate, .duration = -1, .aligned = true };
	struct profiler *p = NULL;
	struct spy_err err = SPY_ERR_INIT;
	uint64_t cpu0 = spy_thread_cpu_ns();
	int orc = prof_open(&p, &o, &strs, w->pid, NULL, &err);
	/* What opening cost is the opens' (and this process's next wait), what follows its sampling's. */
	w->open_ns = agent_open_end(&a->bud, &w->cost, cpu0);
	if (orc < 0) {
		/* Gone already: nothing to say. Anything else (another tracer, no rights): one line. */
		if (err.code != SPY_ENOPROC && err.code != SPY_EGONE && err.code != SPY_ENOPY) {
			say("process %d not profiled: %s", (int)w->pid, err.msg);
		}
		prof_close(p);
		spy_strtab_release(&strs);
		atomic_store(&w->done, true);
		return (void *)(intptr_t)(err.code == SPY_ENOPY ? WORKER_NO_PYTHON : WORKER_LET_GO);
	}
	/* Ten looks a second at each process, not a hundred: exits and stops are noticed within 0.1 s. */
	prof_set_poll(p, 100 * 1000 * 1000ull);
	const struct prof_process *pp = prof_root(p);
	const char *python = prof_process_python(pp);
	push_program_name(prof_process_cmdline(pp), w->program, sizeof(w->program));
	label_series(w, prof_process_cmdline(pp), python);
	char rootname[400];
	snprintf(rootname, sizeof(rootname), "process %d \"%s\"", (int)w->pid, w->program);
	const char *root = spy_strtab_interns(&strs, rootname);
	say("profiling process %d (%s, Python %s) as %s at %g Hz", (int)w->pid,
		w->program, python, w->stream.series.app, rate);

	struct worker_window ww = { .w = w, .strs = &strs, .python = python, .rate = rate, .win_rate = rate };
	agent_window_open(&ww.win, &strs, agent_window_budget());
	struct spy_stack st = SPY_STACK_INIT;
	/* On wall-clock multiples of --push-every, as record --push's: every process's windows line up. */
	struct cmd_windows cw;
	cmd_windows_start_whole(&cw, a->sink.o.every_s, spy_now_ns(), close_window, &ww);
	struct prof_stats pst;
	for (;;) {
		struct prof_tick t;
		enum prof_event ev = prof_next(p, &t);
		if (ev == PROF_END) {
			break;
		}
		prof_stats(p, &pst);
		if (ev == PROF_TICK) {
			cmd_windows_tick(&cw, &pst, t.start_ns);
			add_tick(&ww.win, &t, &st, root);
			atomic_fetch_add(&a->ticks, 1);
			atomic_store(&w->mem_bytes, spy_strtab_bytes(&strs) + agent_window_bytes(&ww.win));
		}
		if (atomic_load(&w->shed)) {
			break;
		}
		cmd_windows_check(&cw, &pst, spy_now_ns());
		double want = atomic_load(&w->cost.rate);
		if (want != ww.rate) {
			prof_set_rate(p, want);
			/* A window sampled at two rates says the lower: its samples are at least that far apart. */
			ww.win_rate = want < ww.win_rate ? want : ww.win_rate;
			ww.rate = want;
		}
	}
	/*
	 * Still there: it replaced its program (exec), perhaps by another
	 * Python: looked at again. Asked of the tracer, which saw the exec:
	 * a process that exited may not be reaped by its parent yet, and
	 * would still answer kill(pid, 0).
	 */
	bool shed = atomic_load(&w->shed);
	bool replaced = !shed && !prof_stop_signal() && prof_execed(p);
	prof_stop(p);
	prof_detach(p);
	/* What is held goes too: the last window ends where the next would have begun. */
	prof_stats(p, &pst);
	cmd_windows_end(&cw, &pst, pst.stop_ns ? pst.stop_ns : spy_now_ns());
	agent_window_close(&ww.win);
	spy_stack_release(&st);
	prof_close(p);
	spy_strtab_release(&strs);
	if (!prof_stop_signal() && !replaced && !shed) {
		say("process %d exited, let go", (int)w->pid);
	}
	atomic_store(&w->done, true);
	return (void *)(intptr_t)(shed ? WORKER_SHED : replaced ? WORKER_EXECED : WORKER_LET_GO);
}

/* ---- choosing processes ---- */

/* Whether pid passes --uid, --match and --exclude; false also for one gone. */
static bool chosen(struct agent *a, pid_t pid)
{
	if (!a->has_uid && !a->has_match && !a->has_exclude) {
		return true;
	}
	char cmdline[AGENT_CMDLINE_MAX];
	uid_t uid;
	if (prof_fleet_owner(a->fleet, pid, &uid, cmdline, sizeof(cmdline)) < 0) {
		return false;
	}
	return (!a->has_uid || uid == a->uid) && (!a->has_match || regexec(&a->match_re, cmdline, 0, NULL, 0) == 0) &&
	       (!a->has_exclude || regexec(&a->exclude_re, cmdline, 0, NULL, 0) != 0);
}

/* A worker for pid, counted among the opens by agent_open_begin. */
static void start_worker(struct agent *a, pid_t pid)
{
	struct worker *w = spy_xcalloc(1, sizeof(*w));
	w->a = a;
	w->pid = pid;
	atomic_init(&w->done, false);
	/* At the full rate: the next period lowers it if this one proves expensive. */
	agent_cost_init(&w->cost, a->rate);
	if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
		say("process %d not profiled: no thread: %s", (int)pid, strerror(errno));
		agent_open_end(&a->bud, NULL, 0);
		free(w);
		return;
	}
	agent_cost_track(&w->cost, w->th);
	w->next = a->workers;
	a->workers = w;
	a->nworkers++;
}

static bool has_worker(const struct agent *a, pid_t pid)
{
	for (const struct worker *w = a->workers; w; w = w->next) {
		if (w->pid == pid && !atomic_load(&w->done)) {
			return true;
		}
	}
	return false;
}

/* The first retry's delay; doubled for each further one. */
static uint64_t retry_ns(void)
{
#ifdef SPY_TEST_HOOKS
	/* Tests: the whole backoff in a second, not 16. */
	const char *v = getenv("SPY_TEST_AGENT_RETRY_MS");
	if (v) {
		return (uint64_t)strtoul(v, NULL, 10) * 1000000ull;
	}
#endif
	return AGENT_RETRY_NS;
}

static struct pending *find_pending(struct agent *a, pid_t pid)
{
	for (size_t i = 0; i < a->npending; i++) {
		if (a->pending[i].pid == pid) {
			return &a->pending[i];
		}
	}
	return NULL;
}

static struct pending *get_pending(struct agent *a, pid_t pid)
{
	struct pending *pd = find_pending(a, pid);
	if (!pd) {
		SPY_GROW(a->pending, a->alloc_pending, a->npending + 1);
		pd = &a->pending[a->npending++];
		memset(pd, 0, sizeof(*pd));
		pd->pid = pid;
	}
	return pd;
}

static void drop_pending(struct agent *a, pid_t pid)
{
	struct pending *pd = find_pending(a, pid);
	if (pd) {
		*pd = a->pending[--a->npending];
	}
}

/* A worker ended (its open cost open_ns): what next for its process. */
static void worker_ended(struct agent *a, pid_t pid, enum worker_end how, uint64_t open_ns, uint64_t now)
{
	if (how == WORKER_LET_GO || prof_stop_signal()) {
		drop_pending(a, pid);
		atomic_fetch_add(&a->left, 1);
		return;
	}
	struct pending *pd = get_pending(a, pid);
	pd->given_up = false;
	if (how == WORKER_EXECED) {
		/* A new program: the tries start again, once it has had time to load its interpreter. */
		pd->tries = 0;
		pd->execed = true;
		pd->at_ns = now + retry_ns();
		return;
	}
	double age = 0;
	bool young = pd->tries > 0 || pd->execed || prof_fleet_age(a->fleet, pid, &age) < 0 || age < AGENT_YOUNG_S;
	if (how != WORKER_SHED && ++pd->tries <= AGENT_RETRIES && young) {
		/* Its own opens' cost sets its pace too: no process takes more than the opens' share. */
		uint64_t wait = retry_ns() << (pd->tries - 1), paid = agent_open_wait(&a->bud, open_ns);
		pd->at_ns = now + (wait > paid ? wait : paid);
		spy_log(SPY_LOG_DEBUG, "agent: process %d: no Python interpreter found yet; retry %u of %u in %.2f s",
			(int)pid, pd->tries, AGENT_RETRIES, (double)(pd->at_ns - now) / 1e9);
		return;
	}
	pd->given_up = true;
	pd->at_ns = UINT64_MAX;
	if (!exe_hash(a->fleet, pid, &pd->exe)) {
		drop_pending(a, pid);
		return;
	}
	if (!young) {
		pd->tries = 1;
	}
	if (how != WORKER_SHED) {
		say("process %d: no Python interpreter found in %u %s; looked at again if it "
		    "replaces its program", (int)pid, pd->tries, pd->tries == 1 ? "try" : "tries");
	}
}

/* Join the workers that ended. */
static void reap(struct agent *a, uint64_t now)
{
	for (struct worker **pw = &a->workers; *pw;) {
		struct worker *w = *pw;
		if (!atomic_load(&w->done)) {
			pw = &w->next;
			continue;
		}
		void *ret = NULL;
		pthread_join(w->th, &ret);
		worker_ended(a, w->pid, (enum worker_end)(intptr_t)ret, w->open_ns, now);
		*pw = w->next;
		a->nworkers--;
		free(w);
	}
}

/*
 * The retries due; a process given up on is tried afresh once its
 * executable changed (and it still passes the filters: its command line
 * changed too).
 */
static void retry(struct agent *a, uint64_t now)
{
	for (size_t i = 0; i < a->npending;) {
		struct pending *pd = &a->pending[i];
		if (pd->given_up) {
			uint64_t exe;
			if (!exe_hash(a->fleet, pd->pid, &exe) || exe == pd->exe) {
				i++;
				continue;
			}
			pd->given_up = false;
			pd->tries = 0;
			pd->execed = true;
			pd->at_ns = now;
			if (!chosen(a, pd->pid)) {
				*pd = a->pending[--a->npending];
				continue;
			}
		}
		if (pd->at_ns <= now && !has_worker(a, pd->pid) && agent_open_begin(&a->bud)) {
			start_worker(a, pd->pid);
			pd->at_ns = UINT64_MAX;
		}
		i++;
	}
}

/* pid to be profiled: opened now if the opens' budget allows, else first in line among the pending. */
static void open_or_queue(struct agent *a, pid_t pid, uint64_t now)
{
	if (has_worker(a, pid)) {
		return;
	}
	if (agent_open_begin(&a->bud)) {
		start_worker(a, pid);
		return;
	}
	struct pending *pd = get_pending(a, pid);
	pd->given_up = false;
	pd->at_ns = now;
}

static void scan(struct agent *a, uint64_t now)
{
	const pid_t *born, *gone;
	size_t nb = 0, ng = 0;
	if (prof_fleet_scan(a->fleet, &born, &nb, &gone, &ng) < 0) {
		return;
	}
	for (size_t i = 0; i < nb; i++) {
		if (chosen(a, born[i])) {
			open_or_queue(a, born[i], now);
		} else if (a->has_uid || a->has_match || a->has_exclude) {
			SPY_GROW(a->recheck, a->alloc_recheck, a->nrecheck + 1);
			a->recheck[a->nrecheck++] = (struct recheck){ born[i], now + AGENT_RECHECK_NS };
		}
	}
	size_t kept = 0;
	for (size_t i = 0; i < a->nrecheck; i++) {
		struct recheck rc = a->recheck[i];
		bool dead = false;
		for (size_t j = 0; j < ng; j++) {
			dead = dead || gone[j] == rc.pid;
		}
		if (dead || rc.until_ns <= now) {
			continue;
		}
		if (chosen(a, rc.pid)) {
			open_or_queue(a, rc.pid, now);
			continue;
		}
		a->recheck[kept++] = rc;
	}
	a->nrecheck = kept;
	for (size_t j = 0; j < ng; j++) {
		drop_pending(a, gone[j]);
	}
	retry(a, now);
}

/* ---- the budget and the status line ---- */

static size_t live_workers(const struct agent *a)
{
	size_t n = 0;
	for (const struct worker *w = a->workers; w; w = w->next) {
		n += !atomic_load(&w->done);
	}
	return n;
}

/* The rates for the next period (cmd/agent-budget.h), from each live process's cost. */
static void budget(struct agent *a, uint64_t now)
{
	if (!agent_budget_due(&a->bud, now)) {
		return;
	}
	struct agent_cost *few[64], **c = few;
	size_t n = 0, live = live_workers(a);
	if (live > SPY_ARRAY_SIZE(few)) {
		c = spy_xcalloc(live, sizeof(*c));
	}
	for (struct worker *w = a->workers; w && n < live; w = w->next) {
		if (!atomic_load(&w->done)) {
			c[n++] = &w->cost;
		}
	}
	agent_budget_period(&a->bud, c, n, now, cpu_ns(), atomic_load(&a->ticks));
	if (c != few) {
		free(c);
	}
}

static void status_line(struct agent *a, uint64_t since_ns, uint64_t since_cpu)
{
	struct push_status st;
	pusher_status(a->sink.pusher, &st);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	long rss_kb = (long)(agent_rss() >> 10);
	double cpu = since_ns ? 100.0 * (double)(cpu_ns() - since_cpu) / (double)(spy_now_ns() - since_ns) : 0;
	/* The heap in use against what the allocator keeps free: a leak from fragmentation, at a glance. */
	struct mallinfo2 mi = mallinfo2();
	char over[160];
	agent_memory_status(over, sizeof(over), atomic_load(&a->names_over), atomic_load(&a->stacks_over), a->mem.shed);
	/* The highest rate in use, and how many are below --rate: the expensive ones alone are lowered. */
	const struct agent_budget *b = &a->bud;
	char lowered[64] = "";
	if (b->lowered) {
		snprintf(lowered, sizeof(lowered), ", %zu lowered (to %.3g Hz at least)", b->lowered, b->lowest);
	}
	uint64_t maps_reads;
	size_t maps_waiting;
	prof_fleet_stats(a->fleet, &maps_reads, &maps_waiting);
	say("%zu processes at %.3g Hz%s, %llu samples; windows sent %llu, kept %zu, "
		"dropped %llu; cpu %.1f%% (%.0f us a sample; not sampling %.1f%%; maps read %llu, %zu waiting), "
		"rss %ld KiB (heap %zu KiB, %zu free)%s",
		live_workers(a), b->highest, lowered, (unsigned long long)atomic_load(&a->ticks),
		(unsigned long long)st.sent, st.queued, (unsigned long long)(st.dropped + st.rejected), cpu,
		b->cost_ns / 1000, b->overhead, (unsigned long long)maps_reads, maps_waiting,
		rss_kb, (mi.uordblks + mi.hblkhd) >> 10, mi.fordblks >> 10, over);
}

/*
 * Over --max-memory: the process whose names and window hold the most is
 * let go (its worker sees the word at its next tick); one at a time, a
 * second apart at least.
 */
static void memory(struct agent *a, uint64_t now)
{
	struct worker *worst = NULL;
	size_t most = 0, rss;
	for (struct worker *w = a->workers; w; w = w->next) {
		size_t c = atomic_load(&w->mem_bytes);
		if (atomic_load(&w->done)) {
			continue;
		}
		if (atomic_load(&w->shed)) {
			return; /* one still letting go: what it holds is not free yet */
		}
		if (!worst || c > most) {
			worst = w;
			most = c;
		}
	}
	if (!worst || !agent_memory_over(&a->mem, now, &rss)) {
		return;
	}
	atomic_store(&worst->shed, true);
	agent_memory_shed(&a->mem, now);
	say("process %d (%s) shed: the agent's RSS, %zu MiB, is over --max-memory %u MiB, and its names and "
	    "window held the most (%zu KiB); not profiled again unless it replaces its program",
	    (int)worst->pid, worst->program, rss >> 20, a->max_memory_mb, most >> 10);
}

/* ---- the command ---- */

static int check_args(struct agent *a)
{
	if (!a->sink.o.url) {
		return cmd_usage_error("agent", "--push URL is required");
	}
	if (!(a->rate > 0) || a->rate > 1000) {
		return cmd_usage_error("agent", "--rate must be above 0 and at most 1000 Hz");
	}
	if (!(a->max_cpu > 0) || a->max_cpu > 100 * 64) {
		return cmd_usage_error("agent", "--max-cpu must be above 0 (percent of one core)");
	}
	if (a->max_memory_mb < AGENT_MIN_MEMORY_MB || a->max_memory_mb > (1u << 20)) {
		return cmd_usage_error("agent", "--max-memory must be %d to %u MiB", AGENT_MIN_MEMORY_MB, 1u << 20);
	}
	a->mem.max_bytes = (size_t)a->max_memory_mb << 20;
	if (a->status_every < 1) {
		return cmd_usage_error("agent", "--status-every must be at least 1 second");
	}
	if (a->match && regcomp(&a->match_re, a->match, REG_EXTENDED | REG_NOSUB) != 0) {
		return cmd_usage_error("agent", "--match: '%s' is not an extended regular expression", a->match);
	}
	a->has_match = a->match != NULL;
	if (a->exclude && regcomp(&a->exclude_re, a->exclude, REG_EXTENDED | REG_NOSUB) != 0) {
		return cmd_usage_error("agent", "--exclude: '%s' is not an extended regular expression", a->exclude);
	}
	a->has_exclude = a->exclude != NULL;
	if (a->uid_text) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(a->uid_text, &end, 10);
		if (!*a->uid_text || *end || errno || v > UINT_MAX - 1) {
			return cmd_usage_error("agent", "--uid: '%s' is not a user id", a->uid_text);
		}
		a->uid = (uid_t)v;
		a->has_uid = true;
	}
	/* Any bad configuration exits 2 (doc/spy-agent.md). */
	int rc = stream_sink_check(&a->sink);
	rc = rc ? rc : stream_sink_auth(&a->sink);
	return rc ? 2 : 0;
}

/* A line of the sender's (stream_sink_lines). */
static void push_line(void *ctx, const char *line)
{
	(void)ctx;
	say("%s", line);
}

/* Until a stop signal: scan, start and reap workers, keep the budget, say how it goes. */
static void run(struct agent *a)
{
	uint64_t start = spy_now_ns(), last_status = start, status_cpu = cpu_ns();
	agent_budget_init(&a->bud, a->rate, a->max_cpu, start, status_cpu);
	while (!prof_stop_signal()) {
		uint64_t now = spy_now_ns();
		if (prof_hup_seen()) {
			say("SIGHUP ignored: nothing to reload (options are the command line, the log is stderr); "
			    "SIGTERM or SIGINT stops the agent");
		}
		reap(a, now);
		scan(a, now);
		budget(a, now);
		memory(a, now);
		stream_sink_lines(&a->sink, now, push_line, NULL);
		/* Not while stopping: the workers letting go would be counted as processes gone. */
		if (now - last_status >= (uint64_t)a->status_every * 1000000000ull && !prof_stop_signal()) {
			status_line(a, last_status, status_cpu);
			last_status = now;
			status_cpu = cpu_ns();
		}
		struct timespec ts = { 0, (long)AGENT_SCAN_NS };
		nanosleep(&ts, NULL);
	}
}

int cmd_agent(int argc, char **argv)
{
	struct agent *a = spy_xcalloc(1, sizeof(*a));
	a->rate = AGENT_RATE_HZ;
	a->max_cpu = AGENT_MAX_CPU;
	a->max_memory_mb = AGENT_MAX_MEMORY_MB;
	stream_sink_init(&a->sink, "agent");
	a->status_every = AGENT_STATUS_S;
	const struct opt opts[] = {
		STREAM_PUSH_OPTIONS(&a->sink.o, "the Pyroscope server (http:// or https://); required", ""),
		{ 'r', "rate", OPT_DOUBLE, &a->rate, "HZ", "samples per second per process (default 19)" },
		{ 0, "max-cpu", OPT_DOUBLE, &a->max_cpu, "PCT", "spy's CPU budget, % of one core (default 5): finding and opening processes under shares of it, the rate lowered for the processes that cost most" },
		{ 0, "max-memory", OPT_UINT, &a->max_memory_mb, "MIB", "the agent's memory budget, MiB of RSS (default 256): over it the process holding the most is let go" },
		{ 0, "match", OPT_STRING, &a->match, "RE", "only processes whose command line matches RE (POSIX extended)" },
		{ 0, "exclude", OPT_STRING, &a->exclude, "RE", "not the processes whose command line matches RE" },
		{ 0, "uid", OPT_STRING, &a->uid_text, "UID", "only the processes of this user id" },
		{ 0, "status-every", OPT_UINT, &a->status_every, "S", "the status line's period (default 60)" },
		{ 0 },
	};
	int rc = cmd_parse_options("agent", agent_usage, opts, argc, argv, NULL, 0, NULL);
	if (rc < 0) {
		rc = check_args(a);
		rc = rc ? rc : -1;
	}
	if (rc >= 0) {
		stream_sink_release(&a->sink);
		free(a);
		return rc;
	}
	/*
	 * One heap for every thread. glibc gives threads arenas of their own
	 * (up to 8 a core), and what a worker frees stays in its arena: each
	 * window's encoding (zlib's state, a quarter MiB) left that much free
	 * in every arena whose thread had pushed once, and the agent's RSS
	 * rose for as long as idle processes were pushing their first window
	 * (bench/agent: 3-4 MiB kept free against 0.2 with one arena, at the
	 * same CPU per sample: a worker allocates little per tick).
	 */
	mallopt(M_ARENA_MAX, 1);
	a->fleet = prof_fleet_new("/proc");
	if (!a->fleet) {
		say("cannot read /proc: %s", strerror(errno));
		return 2;
	}
	/* The scans' share of the budget; their maps reads wait past it (sampler/discover.h). */
	prof_fleet_set_budget(a->fleet, AGENT_EXAMS_PER_SCAN, a->max_cpu / 100 * AGENT_SCAN_SHARE);
	if (stream_sink_start(&a->sink)) {
		return 2;
	}
	/*
	 * SIGHUP: what a unit's reload or a closed session sends. The agent
	 * keeps no log file to reopen and its options are its command line,
	 * so there is nothing to reload; stopping would leave a
	 * Restart=on-failure unit down (the exit is 0). Said, then ignored.
	 */
	prof_ignore_hup();
	prof_install_stop_handlers();
	say("pushing to %s every %u s, %g Hz per process, at most %g%% of a core and %u MiB",
		a->sink.push->url_text, a->sink.o.every_s, a->rate, a->max_cpu, a->max_memory_mb);
	run(a);
	/* Each worker sees the stop at its next tick, lets its process go and hands over what it holds. */
	while (a->workers) {
		struct worker *w = a->workers;
		pthread_join(w->th, NULL);
		a->workers = w->next;
		free(w);
	}
	struct push_status st;
	stream_sink_finish(&a->sink, PUSH_FLUSH_NS, &st);
	say("stopped; windows sent %llu, not sent %zu, dropped %llu",
		(unsigned long long)st.sent, st.queued, (unsigned long long)(st.dropped + st.rejected));
	prof_fleet_free(a->fleet);
	agent_budget_release(&a->bud);
	if (a->has_match) {
		regfree(&a->match_re);
	}
	if (a->has_exclude) {
		regfree(&a->exclude_re);
	}
	free(a->pending);
	free(a->recheck);
	stream_sink_release(&a->sink);
	free(a);
	return 0;
}
