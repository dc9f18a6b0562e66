/*
 * spy record: sample a process at a fixed rate and write a profile.
 *
 * One sample is every Python thread of the process at one instant. By
 * default the process is paused for it (proc_pause), and the stopped window
 * holds only the memory walk: thread states are read from /proc before
 * pausing (a paused thread reads as 't'), and interning, filtering and
 * aggregation happen after proc_resume. With --nonblocking nothing is
 * paused, so a walk can straddle two frames; a walk that does not reach the
 * root is then counted as torn and not recorded, rather than recorded wrong.
 *
 * Ticks are absolute deadlines (sampler's ticker); between them the loop
 * calls proc_poll, because a seized thread that receives a signal stays
 * stopped until its tracer restarts it.
 *
 * With -s the descendants of the process are looked for every 100 ms
 * (/proc/PID/task/TID/children) and each Python one is sampled as well,
 * under its own `process PID "cmdline"` root.
 *
 * Every way out of the loop (duration, SIGINT/SIGTERM, the target exiting,
 * an error) detaches first and then writes what was collected.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/native.h"
#include "cmd/opts.h"
#include "cmd/output.h"
#include "cmd/record.h"
#include "cmd/sampling.h"
#include "cmd/target.h"
#include "common/bounds.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "flamegraph/flamegraph.h"

/* Longest sleep between polls of the target while waiting for a tick. */
#define POLL_NS (10 * 1000 * 1000ull)
/* The progress line is redrawn at most this often. */
#define PROGRESS_NS (250 * 1000 * 1000ull)
/* Rates above this are not samples any more, they are a busy loop. */
#define MAX_RATE_HZ 100000.0
/*
 * How often the target's maps are re-read. The walk refuses addresses
 * outside the maps it knows, and a process that grows its heap (every
 * interpreter during start-up, any program allocating) puts new frames and
 * thread states in new mappings: at once when a walk fails (at most every
 * MAPS_RETRY_NS, backing off while retries do not help), and every few
 * seconds in any case, so a slowly growing heap is followed too.
 */
#define MAPS_RETRY_NS (10 * 1000 * 1000ull)
#define MAPS_REFRESH_NS (2 * 1000 * 1000 * 1000ull)
/* Entries of the string re-interning cache (a power of two). */
#define ICACHE_SIZE 4096

/* Errors are counted by sampling.h's reasons, so record and top name them alike. */

/* One OS thread we have seen. */
struct rthread {
	struct proc_task task;
	bool seen;           /* found by this tick's walk */
	const char *root;    /* interned `thread TID "name"` frame */
};

/* One process being sampled: the one named (or launched), or with -s a descendant. */
struct rtarget {
	struct target t;
	bool attached;
	bool gone;
	const char *proc_root;   /* interned `process PID "cmdline"` frame */
	struct rthread *rt;
	size_t nrt, rt_alloc;
	uint64_t last_maps_ns;
	uint64_t maps_retry_ns;   /* how long after the last maps read a failed walk may read them again */
	uint64_t last_alive_ns;   /* --nonblocking: when proc_alive() last said so */
	struct native *nat;       /* --native; NULL without */
};

/* A descendant that was not (yet) a Python process, and when to look again. */
struct rejected {
	pid_t pid;
	char exe[256];
	int tries;
};

struct rec {
	/* options */
	double rate;
	double duration;     /* < 0: until stopped */
	bool idle, gil, threads, function, nonblocking, quiet, subprocesses;
	bool native, native_all;
	bool progress;
	double slice;        /* --slice S: window length, 0 without */
	struct fg_table_opts table_opts;   /* --table N, --sort */

	/* tg[0] is the process named or launched, kept to the end; the rest come and go (-s) */
	struct rtarget **tg;
	size_t ntg, tg_alloc;
	bool target_gone;        /* tg[0] has exited */
	struct rejected *rej;
	size_t nrej, rej_alloc;
	uint64_t last_scan_ns;

	/* per-sample scratch, reused every tick */
	struct py_thread *py;
	struct spy_stack *stacks;
	int *stack_rc;
	struct native_pcs *pcs;   /* --native: each thread's pcs, from the pause to the merge */
	char *states;
	struct spy_stack out;

	/* aggregation */
	struct spy_strtab strs;
	struct fg_profile *profile;
	struct fg_slices *slices;       /* --slice only: per-window counts */
	struct fg_timeline *timeline;   /* -f chrome only: the samples in time order */
	const char *idle_frame;   /* the synthetic leaf marking -i's idle samples */
	const char *icache_src[ICACHE_SIZE];
	const char *icache_dst[ICACHE_SIZE];

	/* counters */
	uint64_t samples;
	uint64_t errors[SMP_ERR_MAX];
	size_t threads_seen;
	struct ticker tk;
	uint64_t start_ns, end_ns, last_progress_ns;
};

static const char *const record_usage[] = {
	"spy record [OPTIONS] --pid PID",
	"spy record [OPTIONS] -- PROGRAM [ARGS...]",
	NULL,
};

/* ---- strings: pystate interns in the target's table, the profile wants its own ---- */

static const char *reintern(struct rec *r, const char *s)
{
	if (!s) {
		return NULL;
	}
	size_t h = ((uintptr_t)s >> 3) & (ICACHE_SIZE - 1);
	if (r->icache_src[h] == s) {
		return r->icache_dst[h];
	}
	const char *d = spy_strtab_interns(&r->strs, s);
	r->icache_src[h] = s;
	r->icache_dst[h] = d;
	return d;
}

/* ---- thread states ---- */

static struct rthread *find_thread(struct rtarget *r, pid_t tid)
{
	for (size_t i = 0; i < r->nrt; i++) {
		if (r->rt[i].task.tid == tid) {
			return &r->rt[i];
		}
	}
	return NULL;
}

static struct rthread *add_thread(struct rec *rec, struct rtarget *r, pid_t tid)
{
	char comm[64];
	SPY_GROW(r->rt, r->rt_alloc, r->nrt + 1);
	struct rthread *t = &r->rt[r->nrt++];
	memset(t, 0, sizeof(*t));
	proc_task_open(r->t.proc, &t->task, tid);
	proc_task_comm(r->t.proc, tid, comm, sizeof(comm));
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "thread %d \"%s\"", (int)tid, comm);
	t->root = spy_strtab_interns(&rec->strs, b.buf);
	spy_buf_release(&b);
	rec->threads_seen++;
	return t;
}

static void drop_threads(struct rtarget *r, bool all)
{
	size_t out = 0;
	for (size_t i = 0; i < r->nrt; i++) {
		if (all || !r->rt[i].seen) {
			proc_task_close(&r->rt[i].task);
			continue;
		}
		r->rt[out++] = r->rt[i];
	}
	r->nrt = out;
}

static uint64_t total_errors(const struct rec *r);
static double elapsed_s(const struct rec *r, uint64_t now);

/* ---- one sample ---- */

static void record_stack(struct rec *r, const struct rtarget *tg, const struct spy_stack *s,
			 const struct rthread *th, bool idle)
{
	spy_stack_reset(&r->out);
	/*
	 * -i marks an idle sample with a synthetic leaf, so the flame graph
	 * shows (and colours) time spent waiting apart from time running the
	 * same line, and the folded file keeps the distinction.
	 */
	if (idle) {
		struct spy_frame *f = spy_stack_push(&r->out);
		f->func = r->idle_frame;
		f->kind = SPY_FRAME_SYNTHETIC;
	}
	for (size_t i = 0; i < s->n; i++) {
		struct spy_frame *f = spy_stack_push(&r->out);
		*f = s->v[i];
		f->func = reintern(r, s->v[i].func);
		f->file = reintern(r, s->v[i].file);
	}
	if (r->threads && th) {
		struct spy_frame *f = spy_stack_push(&r->out);
		memset(f, 0, sizeof(*f));
		f->func = th->root;
		f->kind = SPY_FRAME_SYNTHETIC;
	}
	struct spy_frame *f = spy_stack_push(&r->out);
	memset(f, 0, sizeof(*f));
	f->func = tg->proc_root;
	f->kind = SPY_FRAME_SYNTHETIC;
	if (fg_profile_add(r->profile, &r->out, 1) < 0) {
		r->errors[SMP_ERR_DROPPED]++;
	}
	if (r->slices) {
		fg_slices_add(r->slices, r->profile, (double)(ticker_now_ns() - r->start_ns) / 1e9, 1);
	}
	if (r->timeline) {
		struct fg_track track = { (int32_t)proc_pid(tg->t.proc), th ? (int32_t)th->task.tid : 0,
					  tg->proc_root, th ? th->root : NULL };
		fg_timeline_add(r->timeline, r->profile, &track, elapsed_s(r, ticker_now_ns()));
	}
}

/*
 * Walk every thread's Python stack into r->stacks, n threads. Returns
 * pyrt_threads's error, else 1 if some stack could not be read whole, else 0.
 */
static int walk_threads(struct rec *r, struct rtarget *tg, size_t *n_out)
{
	size_t n = 0;
	/*
	 * A fresh view of the target's memory for this walk, served from
	 * sampler's page cache: pausing made one already, a --nonblocking
	 * walk needs it asked for.
	 */
	if (!tg->attached) {
		proc_mem_invalidate(tg->t.proc);
	}
	int rc = pyrt_threads(tg->t.rt, r->py, SPY_MAX_THREADS, &n, NULL);
	if (n > SPY_MAX_THREADS) {
		n = SPY_MAX_THREADS;
	}
	if (rc < 0) {
		*n_out = 0;
		return rc;
	}
	bool whole = true;
	for (size_t i = 0; i < n; i++) {
		spy_stack_reset(&r->stacks[i]);
		r->stack_rc[i] = pyrt_stack(tg->t.rt, &r->py[i], &r->stacks[i], NULL);
		whole = whole && r->stack_rc[i] == 0 && !r->stacks[i].truncated;
	}
	*n_out = n;
	return whole ? 0 : 1;
}

static void sample_target(struct rec *r, struct rtarget *tg)
{
	size_t n = 0;
	int rc;

	/*
	 * Paused, every thread reads 't', so a pausing sampler reads states
	 * first, for every thread it knows. One that does not pause reads them
	 * after the walk, and only where the walk leaves the question open.
	 */
	for (size_t i = 0; i < tg->nrt; i++) {
		if (tg->attached) {
			proc_task_refresh(&tg->rt[i].task, true);
		}
		tg->rt[i].seen = false;
	}
	if (tg->attached) {
		rc = proc_pause(tg->t.proc, NULL);
		if (rc == -SPY_EINTR) {
			return;
		}
		if (rc == -SPY_EGONE) {
			tg->gone = true;
			return;
		}
		if (rc < 0) {
			r->errors[SMP_ERR_PAUSE]++;
			return;
		}
	}
	rc = walk_threads(r, tg, &n);
	/*
	 * A walk that met trouble may only have met memory mapped since the
	 * maps were read (every interpreter grows its heap while it starts):
	 * read them again and walk once more before the target moves on. A
	 * retry that does not help makes the next one wait longer, so a stack
	 * truncated for good (deeper than the bound) does not cost a maps read
	 * every tick.
	 */
	uint64_t now = ticker_now_ns();
	if (rc != 0 && now - tg->last_maps_ns >= tg->maps_retry_ns) {
		proc_read_maps(tg->t.proc, NULL);
		tg->last_maps_ns = now;
		rc = walk_threads(r, tg, &n);
		tg->maps_retry_ns = rc == 0 ? MAPS_RETRY_NS
			: tg->maps_retry_ns < MAPS_REFRESH_NS / 2 ? 2 * tg->maps_retry_ns : MAPS_REFRESH_NS;
	}
	for (size_t i = 0; i < n && tg->nat; i++) {
		native_unwind(tg->nat, &tg->t, r->py[i].native_tid, &r->pcs[i]);
	}
	if (tg->attached) {
		proc_resume(tg->t.proc, NULL);
	}

	/* The target runs again; everything below is ours alone. */
	if (rc < 0) {
		r->errors[SMP_ERR_THREADS]++;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const struct py_thread *pt = &r->py[i];
		struct spy_stack *s = &r->stacks[i];
		struct rthread *th = NULL;
		bool fresh = false;
		if (pt->native_tid > 0) {
			th = find_thread(tg, pt->native_tid);
			fresh = !th;
			if (fresh) {
				th = add_thread(r, tg, pt->native_tid);
			}
			th->seen = true;
		}
		if (r->stack_rc[i] < 0) {
			r->errors[SMP_ERR_GONE]++;
			continue;
		}
		if (s->truncated) {
			if (r->nonblocking) {
				r->errors[SMP_ERR_TORN]++;
				continue;
			}
			r->errors[SMP_ERR_TRUNCATED]++;
		}
		if (r->gil && !pt->holds_gil) {
			continue;
		}
		/*
		 * Waiting for the GIL looks like sleeping (S), so the holder is
		 * active whatever its state. Without a TID there is no state, and
		 * a thread without the GIL is then taken as idle: it is not running
		 * Python code.
		 */
		if (th && !pt->holds_gil && (fresh || !tg->attached)) {
			proc_task_refresh(&th->task, tg->attached);
		}
		bool active = pt->holds_gil || (th && proc_task_active(&th->task));
		if (!active && !r->idle) {
			continue;
		}
		if (s->n == 0) {
			continue;
		}
		/* Symbols and merging only for the stacks kept, and with the target running. */
		if (tg->nat && native_merge(tg->nat, &tg->t, &r->pcs[i], s) < 0) {
			r->errors[SMP_ERR_NATIVE]++;
		}
		record_stack(r, tg, s, th, !active);
	}
	/* Forget threads that are gone, so their stat files do not pile up. */
	drop_threads(tg, false);
	/* A slowly growing heap is followed even where no walk fails. */
	if (now - tg->last_maps_ns >= MAPS_REFRESH_NS) {
		proc_read_maps(tg->t.proc, NULL);
		tg->last_maps_ns = now;
	}
}

/* One sample: every process, one after the other. */
static void sample_once(struct rec *r)
{
	r->samples++;
	for (size_t i = 0; i < r->ntg && !proc_stop_requested; i++) {
		if (!r->tg[i]->gone) {
			sample_target(r, r->tg[i]);
		}
	}
}

/* ---- progress and summary ---- */

static uint64_t total_errors(const struct rec *r)
{
	uint64_t e = 0;
	for (int i = 0; i < SMP_ERR_MAX; i++) {
		e += r->errors[i];
	}
	return e;
}

static void format_errors(const struct rec *r, struct spy_buf *b)
{
	spy_buf_addf(b, "%llu", (unsigned long long)total_errors(r));
	bool first = true;
	for (int i = 0; i < SMP_ERR_MAX; i++) {
		if (r->errors[i]) {
			spy_buf_addf(b, "%s%s %llu", first ? " (" : ", ", smp_error_names[i],
				     (unsigned long long)r->errors[i]);
			first = false;
		}
	}
	if (!first) {
		spy_buf_add(b, ")", 1);
	}
}

static double elapsed_s(const struct rec *r, uint64_t now)
{
	return (double)(now - r->start_ns) / 1e9;
}

static void show_progress(struct rec *r, uint64_t now, bool force)
{
	if (!r->progress || (!force && now - r->last_progress_ns < PROGRESS_NS)) {
		return;
	}
	r->last_progress_ns = now;
	double el = elapsed_s(r, now);
	fprintf(stderr, "\rspy: %.1f s, %llu samples (%.1f Hz), %llu errors, %zu threads\033[K",
		el, (unsigned long long)r->samples, el > 0 ? (double)r->samples / el : 0.0,
		(unsigned long long)total_errors(r), r->threads_seen);
}

static void clear_progress(struct rec *r)
{
	if (r->progress) {
		fputs("\r\033[K", stderr);
	}
}

/* ---- output ---- */

static void set_metadata(struct rec *r, uint64_t now)
{
	struct fg_profile *p = r->profile;
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_meta_set(p, FG_META_SPY_VERSION, SPY_VERSION);
	const struct target *t = &r->tg[0]->t;
	fg_profile_meta_setf(p, FG_META_PID, "%d", (int)proc_pid(t->proc));
	fg_profile_meta_set(p, FG_META_PYTHON, pyrt_version_string(t->rt));
	fg_profile_meta_setf(p, FG_META_RATE_HZ, "%g", r->rate);
	fg_profile_meta_setf(p, FG_META_DURATION_S, "%.3f", elapsed_s(r, now));
	fg_profile_meta_setf(p, FG_META_SAMPLES, "%llu", (unsigned long long)r->samples);
	format_errors(r, &b);
	fg_profile_meta_set(p, FG_META_ERRORS, b.buf);
	fg_profile_meta_set(p, FG_META_COMMAND, proc_cmdline(t->proc));
	fg_profile_meta_setf(p, "missed-ticks", "%llu", (unsigned long long)r->tk.missed);
	fg_profile_meta_set(p, "mode", r->nonblocking ? "nonblocking" : "blocking");
	if (r->slices) {
		fg_slices_store(r->slices, p);
	}
	spy_buf_release(&b);
}

/* ---- the processes ---- */

static struct rtarget *target_add(struct rec *r)
{
	struct rtarget *tg = spy_xcalloc(1, sizeof(*tg));
	SPY_GROW(r->tg, r->tg_alloc, r->ntg + 1);
	r->tg[r->ntg++] = tg;
	return tg;
}

/* After target_open_pid: name the process root and, unless --nonblocking, seize it. */
static int target_start(struct rec *r, struct rtarget *tg, struct spy_err *err)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "process %d \"%s\"", (int)proc_pid(tg->t.proc), proc_cmdline(tg->t.proc));
	tg->proc_root = spy_strtab_interns(&r->strs, b.buf);
	spy_buf_release(&b);
	tg->last_maps_ns = ticker_now_ns();
	tg->maps_retry_ns = MAPS_RETRY_NS;
	proc_mem_prefetch(tg->t.proc, true);
	if (r->nonblocking) {
		return 0;
	}
	if (r->native) {
		tg->nat = spy_xcalloc(1, sizeof(*tg->nat));
		int nrc = native_init(tg->nat, &tg->t, r->native_all, err);
		if (nrc < 0) {
			free(tg->nat);
			tg->nat = NULL;
			return nrc;
		}
	}
	int rc = proc_list_threads(tg->t.proc, err);
	if (rc == 0) {
		rc = proc_attach(tg->t.proc, err);
	}
	if (rc == 0) {
		tg->attached = true;
	}
	return rc;
}

static void target_stop(struct rec *r, struct rtarget *tg)
{
	if (tg->attached) {
		proc_detach(tg->t.proc);
		tg->attached = false;
	}
	drop_threads(tg, true);
}

static void target_free(struct rec *r, struct rtarget *tg)
{
	if (tg->t.proc) {
		struct proc_mem_stats ms;
		proc_mem_stats(tg->t.proc, &ms);
		spy_log(SPY_LOG_DEBUG,
			"record: process %d memory: %llu reads, %llu hits, %llu misses, "
			"%llu uncached, %llu lines prefetched, %llu syscalls",
			(int)proc_pid(tg->t.proc), (unsigned long long)ms.reads,
			(unsigned long long)ms.hits, (unsigned long long)ms.misses,
			(unsigned long long)ms.uncached, (unsigned long long)ms.prefetched,
			(unsigned long long)ms.syscalls);
	}
	target_stop(r, tg);
	if (tg->nat) {
		native_log_stats(tg->nat);
		native_release(tg->nat);
		free(tg->nat);
	}
	free(tg->rt);
	target_release(&tg->t);
	free(tg);
	/* Its strings are gone, and their addresses may come back for another process's. */
	memset(r->icache_src, 0, sizeof(r->icache_src));
}

/* Forget the descendants that have exited; tg[0] stays to the end. */
static void reap_targets(struct rec *r)
{
	size_t out = 1;
	for (size_t i = 1; i < r->ntg; i++) {
		if (r->tg[i]->gone) {
			target_free(r, r->tg[i]);
			continue;
		}
		r->tg[out++] = r->tg[i];
	}
	if (r->ntg > 1) {
		r->ntg = out;
	}
}

static bool is_target(const struct rec *r, pid_t pid)
{
	for (size_t i = 0; i < r->ntg; i++) {
		if (!r->tg[i]->gone && proc_pid(r->tg[i]->t.proc) == pid) {
			return true;
		}
	}
	return false;
}

/*
 * A descendant that is not a Python process now may become one: a fork of
 * a shell that execs python, or a python that has not finished starting.
 * It is tried again while its executable stays the same for REJECT_TRIES
 * scans, and again whenever its executable changes (an exec).
 */
#define REJECT_TRIES 20
/* How often -s looks for new descendants. */
#define SCAN_NS (100 * 1000 * 1000ull)

static bool worth_trying(struct rec *r, pid_t pid)
{
	char exe[256];
	proc_exe_of(pid, exe, sizeof(exe));
	for (size_t i = 0; i < r->nrej; i++) {
		struct rejected *j = &r->rej[i];
		if (j->pid != pid) {
			continue;
		}
		if (strcmp(j->exe, exe)) {
			memcpy(j->exe, exe, sizeof(j->exe));
			j->tries = 0;
		}
		return ++j->tries <= REJECT_TRIES;
	}
	SPY_GROW(r->rej, r->rej_alloc, r->nrej + 1);
	struct rejected *j = &r->rej[r->nrej++];
	j->pid = pid;
	memcpy(j->exe, exe, sizeof(j->exe));
	j->tries = 1;
	return true;
}

static void forget_rejected(struct rec *r, pid_t pid)
{
	for (size_t i = 0; i < r->nrej; i++) {
		if (r->rej[i].pid == pid) {
			r->rej[i] = r->rej[--r->nrej];
			return;
		}
	}
}

/* -s: find the descendants of tg[0] and start sampling the Python ones. */
static void scan_descendants(struct rec *r)
{
	pid_t *v = NULL;
	size_t n = proc_list_descendants(proc_pid(r->tg[0]->t.proc), &v);
	for (size_t i = 0; i < n; i++) {
		pid_t pid = v[i];
		if (is_target(r, pid) || !worth_trying(r, pid)) {
			continue;
		}
		/* Opened in place: the pyrt keeps a pointer to the target's string table. */
		struct rtarget *tg = target_add(r);
		if (target_open_pid(&tg->t, pid, NULL) < 0) {
			tg->gone = true;
			continue;
		}
		forget_rejected(r, pid);
		if (target_start(r, tg, NULL) < 0) {
			tg->gone = true;
		}
		spy_log(SPY_LOG_DEBUG, "record: following process %d (%s)", (int)pid,
			proc_cmdline(tg->t.proc));
	}
	free(v);
}

/* Notice which processes have exited, without blocking. */
static void poll_targets(struct rec *r, struct spawn *sp)
{
	uint64_t now = ticker_now_ns();
	for (size_t i = 0; i < r->ntg; i++) {
		struct rtarget *tg = r->tg[i];
		if (tg->gone) {
			continue;
		}
		if (tg->attached) {
			tg->gone = proc_poll(tg->t.proc) == -SPY_EGONE;
		} else if (i == 0 && sp) {
			/* --nonblocking launch: our child, so only our wait tells its exit. */
			tg->gone = spawn_reap(sp, false);
		} else if (now - tg->last_alive_ns >= POLL_NS) {
			/* A /proc read each tick would cost more than the sample; exit can wait 10 ms. */
			tg->gone = !proc_alive(tg->t.proc);
			tg->last_alive_ns = now;
		}
	}
	r->target_gone = r->tg[0]->gone;
}

/* ---- the loop ---- */

/* Wait for the next tick, polling the targets meanwhile. Returns false to stop. */
static bool wait_tick(struct rec *r, struct spawn *sp)
{
	for (;;) {
		poll_targets(r, sp);
		if (proc_stop_requested || r->target_gone) {
			return false;
		}
		uint64_t now = ticker_now_ns();
		if (r->subprocesses && now - r->last_scan_ns >= SCAN_NS) {
			reap_targets(r);
			scan_descendants(r);
			r->last_scan_ns = now;
		}
		if (r->duration >= 0 && ticker_deadline(&r->tk) >= r->end_ns) {
			return false;
		}
		show_progress(r, now, false);
		if (ticker_wait(&r->tk, POLL_NS) == 1) {
			return true;
		}
	}
}

static void run_loop(struct rec *r, struct spawn *sp)
{
	r->start_ns = ticker_now_ns();
	r->end_ns = r->duration >= 0 ? r->start_ns + (uint64_t)(r->duration * 1e9) : UINT64_MAX;
	ticker_init(&r->tk, r->rate, r->start_ns);
	while (wait_tick(r, sp)) {
		sample_once(r);
		/* Deadlines past the end were never due: a late last sample must not count them missed. */
		uint64_t now = ticker_now_ns();
		ticker_take(&r->tk, now < r->end_ns ? now : r->end_ns);
	}
}

/* ---- setting up ---- */

static void rec_release(struct rec *r)
{
	fg_slices_free(r->slices);
	for (size_t i = 0; i < r->ntg; i++) {
		target_free(r, r->tg[i]);
	}
	free(r->tg);
	free(r->rej);
	for (size_t i = 0; r->stacks && i < SPY_MAX_THREADS; i++) {
		spy_stack_release(&r->stacks[i]);
	}
	free(r->stacks);
	free(r->stack_rc);
	for (size_t i = 0; r->pcs && i < SPY_MAX_THREADS; i++) {
		native_pcs_release(&r->pcs[i]);
	}
	free(r->pcs);
	free(r->py);
	spy_stack_release(&r->out);
	fg_timeline_free(r->timeline);
	fg_profile_free(r->profile);
	spy_strtab_release(&r->strs);
}

static bool all_digits(const char *s)
{
	if (!*s) {
		return false;
	}
	for (; *s; s++) {
		if (*s < '0' || *s > '9') {
			return false;
		}
	}
	return true;
}

int cmd_record(int argc, char **argv)
{
	struct rec *r = spy_xcalloc(1, sizeof(*r));
	int pid = 0;
	const char *output = NULL, *format = NULL, *sort = NULL, *table = NULL;
	double rate = 100, duration = -1;
	struct spy_err err = SPY_ERR_INIT;
	struct spawn sp;
	bool launched = false;
	int exit_code = 0;
	struct cmd_output out = { .fd = -1 };
	enum rec_format fmt = REC_SVG;

	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &pid, "PID", "attach to a running process" },
		{ 'o', "output", OPT_STRING, &output, "FILE", "where to write (default spy-<pid>.svg; with -f, that format's extension)" },
		{ 'f', "format", OPT_STRING, &format, "F",
		  "svg, folded, table, speedscope, chrome, pprof, json" },
		{ 'r', "rate", OPT_DOUBLE, &rate, "HZ", "samples per second (default 100)" },
		{ 'd', "duration", OPT_DOUBLE, &duration, "S", "stop after S seconds" },
		{ 'n', "native", OPT_BOOL, &r->native, NULL, "merge native (C/C++) frames with the Python frames" },
		{ 0, "native-all", OPT_BOOL, &r->native_all, NULL,
		  "with --native, also keep the interpreter's own frames (eval loop, call trampolines)" },
		{ 'i', "idle", OPT_BOOL, &r->idle, NULL, "keep samples of idle threads" },
		{ 'g', "gil", OPT_BOOL, &r->gil, NULL, "keep only the thread holding the GIL" },
		{ 's', "subprocesses", OPT_BOOL, &r->subprocesses, NULL, "also profile child processes, present and future" },
		{ 't', "threads", OPT_BOOL, &r->threads, NULL, "a root frame per thread" },
		{ 'F', "function", OPT_BOOL, &r->function, NULL, "aggregate by function, not line" },
		{ 0, "nonblocking", OPT_BOOL, &r->nonblocking, NULL, "never pause the target" },
		{ 0, "table", OPT_STRING, &table, "[N]", "print the top N functions (default 20) after recording" },
		{ 0, "sort", OPT_STRING, &sort, "KEY", "table order: cumtime, tottime or name" },
		{ 'q', "quiet", OPT_BOOL, &r->quiet, NULL, "no progress line" },
		{ 0, "slice", OPT_DOUBLE, &r->slice, "S", "also count samples per S-second window, kept in a folded profile (for report --trend)" },
		{ 0 },
	};

	/*
	 * Two things the option parser does not do: `--table` takes an optional
	 * value, and everything after `--` is the program, even if it looks
	 * like an option of ours.
	 */
	char **av = spy_xcalloc((size_t)argc + 1, sizeof(*av));
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	char **program = NULL;
	char table_arg[32];
	int ac = 0, nrest = 0;
	for (int i = 0; i < argc; i++) {
		if (i > 0 && !strcmp(argv[i], "--")) {
			program = &argv[i + 1];
			break;
		}
		if (i > 0 && !strcmp(argv[i], "--table")) {
			if (i + 1 < argc && all_digits(argv[i + 1]) && strlen(argv[i + 1]) < 20) {
				snprintf(table_arg, sizeof(table_arg), "--table=%s", argv[++i]);
				av[ac++] = table_arg;
			} else {
				av[ac++] = "--table=20";
			}
			continue;
		}
		av[ac++] = argv[i];
	}
	int rc = cmd_parse_options("record", record_usage, opts, ac, av, rest, &nrest);
	if (rc >= 0) {
		exit_code = rc;
		goto out;
	}
	if (nrest > 0) {
		exit_code = cmd_usage_error("record", "unexpected argument '%s' (a program to run goes after '--')",
					    rest[0]);
		goto out;
	}
	if (program && !program[0]) {
		program = NULL;
		if (!pid) {
			exit_code = cmd_usage_error("record", "no program after '--'");
			goto out;
		}
	}
	if (!pid && !program) {
		exit_code = cmd_usage_error("record", "--pid PID or -- PROGRAM [ARGS...] is required");
		goto out;
	}
	if (pid && program) {
		exit_code = cmd_usage_error("record", "--pid and a program to run are exclusive");
		goto out;
	}
	if (!(rate > 0) || rate > MAX_RATE_HZ) {
		exit_code = cmd_usage_error("record", "--rate must be above 0 and at most %g", MAX_RATE_HZ);
		goto out;
	}
	if (duration == 0) {
		exit_code = cmd_usage_error("record", "--duration must be above 0");
		goto out;
	}
	r->native |= r->native_all;
	if (r->native && r->nonblocking) {
		exit_code = cmd_usage_error("record", "--native unwinds paused threads: it cannot go with --nonblocking");
		goto out;
	}
	if (sort && !fg_sort_parse(sort, &r->table_opts.sort)) {
		exit_code = cmd_usage_error("record", "--sort: '%s' is not cumtime, tottime or name", sort);
		goto out;
	}
	bool want_table = false;
	if (table) {
		errno = 0;
		unsigned long nrows = strtoul(table, NULL, 10);
		if (!all_digits(table) || errno || nrows > UINT_MAX) {
			exit_code = cmd_usage_error("record", "--table: '%s' is not a number of rows", table);
			goto out;
		}
		r->table_opts.top = nrows;
		want_table = true;
	} else {
		r->table_opts.top = 20;
		want_table = isatty(STDOUT_FILENO);
	}
	if (format && !record_format_parse(format, &fmt)) {
		exit_code = cmd_usage_error("record", "--format: unknown format '%s'", format);
		goto out;
	}
	if (!format && output) {
		fmt = record_format_from_path(output);
	}
	/* A table with no file named goes to stdout, once. */
	bool table_to_stdout = fmt == REC_TABLE && !output;
	if (table_to_stdout) {
		want_table = true;
	}
	if (r->slice > 0 && fmt != REC_FOLDED) {
		exit_code = cmd_usage_error("record", "--slice keeps its windows in a folded profile: use -o FILE.folded");
		goto out;
	}
	r->slices = r->slice > 0 ? fg_slices_new(r->slice) : NULL;
	r->rate = rate;
	r->duration = duration;
	r->progress = !r->quiet && isatty(STDERR_FILENO);

	/* The output must be writable before anything is started or attached. */
	struct spy_buf default_out = SPY_BUF_INIT;
	if (!table_to_stdout) {
		if (!output && pid) {
			spy_buf_addf(&default_out, "spy-%d%s", pid, record_format_ext(fmt));
			output = default_out.buf;
		}
		if (output) {
			if (cmd_output_open(&out, output, &err) < 0) {
				exit_code = cmd_fail(&err);
				goto out_buf;
			}
		}
	}

	if (program && !output && access(".", W_OK) != 0) {
		/* The default name needs the child's pid; the directory can be checked now. */
		spy_err_set(&err, SPY_EIO, "cannot write spy-<pid>%s in the current directory: %s",
			    record_format_ext(fmt), strerror(errno));
		exit_code = cmd_fail(&err);
		goto out_buf;
	}
	if (program) {
		spawn_install_signals();
		launched = true;
		rc = sampling_launch(&sp, &target_add(r)->t, program, &err);
		if (rc < 0) {
			exit_code = rc == -SPY_EINTR ? 128 + (int)proc_stop_requested : cmd_fail(&err);
			cmd_output_abandon(&out);
			goto out_buf;
		}
		if (!output) {
			spy_buf_addf(&default_out, "spy-%d%s", (int)sp.pid, record_format_ext(fmt));
			output = default_out.buf;
			if (cmd_output_open(&out, output, &err) < 0) {
				exit_code = cmd_fail(&err);
				goto out_buf;
			}
		}
	} else {
		proc_install_stop_handlers();
		rc = target_open_pid(&target_add(r)->t, pid, &err);
		if (rc < 0) {
			exit_code = cmd_fail(&err);
			cmd_output_abandon(&out);
			goto out_buf;
		}
	}

	r->profile = fg_profile_new(&r->strs, r->function ? FG_FUNCTION : 0);
	if (fmt == REC_CHROME) {
		r->timeline = fg_timeline_new(r->rate);
	}
	r->idle_frame = spy_strtab_interns(&r->strs, "idle");
	r->py = spy_xcalloc(SPY_MAX_THREADS, sizeof(*r->py));
	r->stacks = spy_xcalloc(SPY_MAX_THREADS, sizeof(*r->stacks));
	r->stack_rc = spy_xcalloc(SPY_MAX_THREADS, sizeof(*r->stack_rc));
	r->pcs = spy_xcalloc(SPY_MAX_THREADS, sizeof(*r->pcs));
	rc = target_start(r, r->tg[0], &err);
	if (rc < 0) {
		exit_code = cmd_fail(&err);
		cmd_output_abandon(&out);
		goto out_buf;
	}

	run_loop(r, launched ? &sp : NULL);

	uint64_t end = ticker_now_ns();
	int status = -1;
	bool have_status = false;
	if (r->tg[0]->attached) {
		have_status = proc_exit_status(r->tg[0]->t.proc, &status);
	}
	for (size_t i = 0; i < r->ntg; i++) {
		target_stop(r, r->tg[i]);
	}
	clear_progress(r);
	if (launched && proc_stop_requested) {
		spawn_forward(&sp);
	}

	/* Detached: from here on nothing can leave the target stopped. */
	set_metadata(r, end);
	struct spy_err werr = SPY_ERR_INIT;
	int wrc = 0;
	struct fg_table_opts topts = r->table_opts;
	topts.rate_hz = r->rate;
	struct fg_svg_opts sopts = { NULL, false };
	struct rec_writer w = { fmt, r->profile, r->timeline, &topts, &sopts };
	if (table_to_stdout) {
		/* Printed below. */
	} else if (fmt == REC_FOLDED) {
		/* save_folded has its own temporary-and-rename (and gzip): ours only proved the directory writable. */
		cmd_output_abandon(&out);
		wrc = fg_profile_save_folded(r->profile, output, &werr);
	} else {
		wrc = cmd_output_commit(&out, record_format_write, &w, &werr);
	}
	if (want_table && wrc == 0) {
		w.format = REC_TABLE;
		record_format_write(&w, stdout, "<stdout>", NULL);
		fflush(stdout);
	}

	bool left_running = false;
	if (launched && !have_status && !r->target_gone && !proc_stop_requested) {
		/* --duration ended the recording: the program goes on, as with --pid. */
		have_status = spawn_reap(&sp, false);
		status = sp.status;
		left_running = !have_status;
	} else if (launched && !have_status) {
		/*
		 * The program was told to stop (forwarded SIGINT/SIGTERM, or the
		 * terminal's Ctrl-C) or has exited: spy ends when it does, so the
		 * summary can give its status. A second signal stops the wait and
		 * leaves it running.
		 */
		int signals = proc_stop_requested ? 1 : 0;
		for (;;) {
			proc_stop_requested = 0;
			if (spawn_reap(&sp, true)) {
				break;
			}
			if (proc_stop_requested) {
				if (++signals >= 2) {
					break;
				}
				spawn_forward(&sp);
			}
		}
		if (sp.reaped) {
			have_status = true;
			status = sp.status;
		} else {
			left_running = true;
		}
	}

	struct spy_buf sum = SPY_BUF_INIT;
	double el = elapsed_s(r, end);
	spy_buf_addf(&sum, "spy: %llu samples in %.2f s (%.1f Hz), %llu missed ticks, errors: ",
		     (unsigned long long)r->samples, el, el > 0 ? (double)r->samples / el : 0.0,
		     (unsigned long long)r->tk.missed);
	format_errors(r, &sum);
	if (wrc == 0 && out.path) {
		spy_buf_addf(&sum, "; wrote %s", out.path);
	}
	if (launched && have_status) {
		spy_buf_addf(&sum, "; %s ", program[0]);
		sampling_describe_exit(&sum, status);
	} else if (launched && left_running) {
		spy_buf_addf(&sum, "; %s (process %d) is still running", program[0], (int)sp.pid);
	}
	fprintf(stderr, "%s\n", sum.buf);
	spy_buf_release(&sum);
	if (wrc < 0) {
		exit_code = cmd_fail(&werr);
	}

out_buf:
	spy_buf_release(&default_out);
out:
	free(av);
	free(rest);
	rec_release(r);
	free(r);
	return exit_code;
}
