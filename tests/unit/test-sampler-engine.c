/*
 * The sampling engine's loop against a fake process and a fake walker:
 * every pause is matched by a resume and nothing is left attached; the
 * activity rule (GIL holder, R with a CPU reading, new threads); torn and
 * truncated stacks; the maps retry; a stack refused is counted; -s follows
 * descendants; the loop ends when the process does or the command says so;
 * one thread held at a time (never two, the GIL holder first, sleepers not
 * at all without -i, each walked only while held);
 * continuous mode's windows are whole seconds, contiguous, and hold every tick.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "sampler/engine.h"
#include "tests/lib/check.h"

#define MAX_FAKE_THREADS 4

struct fake_thread {
	pid_t tid;
	char state;          /* what its stat file says: 'R', 'S' */
	bool gil;
	bool truncated;      /* its walk does not reach the root */
	bool scheduled;      /* put on a CPU between any two refreshes (never slept) */
	bool runs_in_read;   /* scheduled while its stack is read running */
	bool offcpu;         /* a stop with a wait finds it off a CPU (stop_thread 1) */
};

struct fake_proc {
	pid_t pid;
	struct fake_thread th[MAX_FAKE_THREADS];
	size_t nth;
	bool paused, attached, gone_after_walks;
	int pauses, resumes, detaches, walks, maps_reads, opens_tasks;
	int walk_fails;      /* the next so many walks fail as a whole */
	int partial_walks;   /* the next so many walks come back truncated... */
	int partial_from;    /* ...from this walk on */
	pid_t children[4];
	size_t nchildren;
	bool walked_while_running;
	/* one thread at a time */
	pid_t held;          /* the thread stopped now, or 0 */
	pid_t gone_tid;      /* stop_thread says this one exited */
	int stops, tracks, first_stop_not_holder, walked_unheld, warmups;
	int stops_of[MAX_FAKE_THREADS];
	int offcpu_holds, waitless_stops;  /* stop_thread: answered 1; asked without a wait */
	bool in_tick;        /* a stop happened since the last track */
};

struct fake_world {
	struct fake_proc procs[3];
	size_t nprocs;
	bool refuse_stacks;
	int stacks, idle_stacks;
	pid_t seen_pids[8];
	size_t nseen;
	int stop_after_ticks;     /* the wait callback stops the loop after this many ticks */
	bool freeze;              /* what w_frozen_by answers */
	int frozen_asked;
};

static struct fake_proc *fp(const struct spy_process *p)
{
	return p->impl;
}

static pid_t f_pid(const struct spy_process *p)
{
	return fp(p)->pid;
}

static const char *f_cmdline(const struct spy_process *p)
{
	return "fake";
}

static int f_attach(struct spy_process *p, struct spy_err *err)
{
	fp(p)->attached = true;
	return 0;
}

static int f_pause(struct spy_process *p, struct spy_err *err)
{
	struct fake_proc *f = fp(p);
	CHECK(f->attached && !f->paused);
	f->pauses++;
	f->paused = true;
	return 0;
}

static void f_resume(struct spy_process *p)
{
	struct fake_proc *f = fp(p);
	CHECK(f->paused);
	f->resumes++;
	f->paused = false;
}

static int f_poll(struct spy_process *p)
{
	CHECK(!fp(p)->paused);
	return fp(p)->gone_after_walks && fp(p)->walks >= 3 ? -SPY_EGONE : 0;
}

static void f_detach(struct spy_process *p)
{
	fp(p)->detaches++;
	fp(p)->attached = fp(p)->paused = false;
}

static bool f_alive(struct spy_process *p)
{
	return !(fp(p)->gone_after_walks && fp(p)->walks >= 3);
}

static void f_read_maps(struct spy_process *p)
{
	fp(p)->maps_reads++;
}

static void f_task_open(const struct spy_process *p, struct proc_task *t, pid_t tid)
{
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	t->stat_fd = -1;
	fp(p)->opens_tasks++;
}

/* Only tasks.c knows the files; the fake keeps every thread's state in a table by TID. */
static struct fake_world *world;

static void f_task_refresh(struct proc_task *t, bool with_cpu)
{
	for (size_t i = 0; i < world->nprocs; i++) {
		struct fake_proc *f = &world->procs[i];
		for (size_t j = 0; j < f->nth; j++) {
			if (f->th[j].tid == t->tid) {
				/* As tasks.c: asleep when last read, and not scheduled since. */
				t->slept = with_cpu && t->state && t->state != 'R' && f->th[j].state != 'R' &&
					   !f->th[j].scheduled;
				t->state = f->th[j].state;
				t->ran = true;
				if (with_cpu && t->state == 'R') {
					t->read_ns = 1;
				}
			}
		}
	}
}

static bool f_task_still(struct proc_task *t)
{
	for (size_t j = 0; j < world->procs[0].nth; j++) {
		const struct fake_thread *ft = &world->procs[0].th[j];
		if (ft->tid == t->tid) {
			return t->state != 'R' && !ft->runs_in_read;
		}
	}
	return false;
}

static void f_task_close(struct proc_task *t)
{
	t->tid = -1;
}

static size_t f_descendants(const struct spy_process *p, pid_t **out)
{
	struct fake_proc *f = fp(p);
	*out = malloc(sizeof(pid_t) * (f->nchildren ? f->nchildren : 1));
	memcpy(*out, f->children, sizeof(pid_t) * f->nchildren);
	return f->nchildren;
}

static void f_exe_of(const struct spy_process *p, pid_t pid, char *buf, size_t size)
{
	snprintf(buf, size, "/fake/python");
}

static const struct spy_process_ops fake_ops = {
	.kind = "fake process",
	.pid = f_pid,
	.cmdline = f_cmdline,
	.attach = f_attach,
	.pause = f_pause,
	.resume = f_resume,
	.poll = f_poll,
	.detach = f_detach,
	.alive = f_alive,
	.read_maps = f_read_maps,
	.task_open = f_task_open,
	.task_refresh = f_task_refresh,
	.task_close = f_task_close,
	.descendants = f_descendants,
	.exe_of = f_exe_of,
};

/* ---- the walker ---- */

static int w_open(void *ctx, pid_t pid, struct spy_process *proc, void **py, struct spy_err *err)
{
	struct fake_world *w = ctx;
	for (size_t i = 0; i < w->nprocs; i++) {
		if (w->procs[i].pid == pid) {
			*proc = (struct spy_process){ &fake_ops, &w->procs[i] };
			*py = &w->procs[i];
			return 0;
		}
	}
	return spy_err_set(err, SPY_ENOPY, "no Python in %d", (int)pid);
}

static int w_walk(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n)
{
	struct fake_proc *f = py;
	f->walks++;
	f->walked_while_running |= f->attached && !f->paused;
	if (f->walk_fails > 0) {
		f->walk_fails--;
		return -SPY_EMEM;
	}
	bool partial = f->partial_walks > 0 && f->walks > f->partial_from;
	f->partial_walks -= partial;
	for (size_t i = 0; i < f->nth && i < max; i++) {
		th[i].tid = f->th[i].tid;
		th[i].holds_gil = f->th[i].gil;
		th[i].rc = 0;
		spy_stack_reset(&th[i].stack);
		struct spy_frame *fr = spy_stack_push(&th[i].stack);
		memset(fr, 0, sizeof(*fr));
		fr->func = "work";
		th[i].stack.truncated = f->th[i].truncated || partial;
	}
	*n = f->nth;
	return 0;
}

static void w_close(void *ctx, void *py)
{
}

static const struct eng_walker fake_walker_ops = {
	.open = w_open,
	.walk = w_walk,
	.close = w_close,
};

static int on_stack(void *ctx, struct engine *e, const struct spy_stack *s, const struct eng_sample *info)
{
	struct fake_world *w = ctx;
	w->stacks++;
	w->idle_stacks += info->idle;
	bool known = false;
	for (size_t i = 0; i < w->nseen; i++) {
		known |= w->seen_pids[i] == info->proc->pid;
	}
	if (!known && w->nseen < 8) {
		w->seen_pids[w->nseen++] = info->proc->pid;
	}
	CHECK(s->n == 1 && !strcmp(s->v[0].func, "work"));
	CHECK(info->proc->root && !strncmp(info->proc->root, "process ", 8));
	return w->refuse_stacks ? -1 : 0;
}

static bool on_wait(void *ctx, struct engine *e, uint64_t now)
{
	struct fake_world *w = ctx;
	return !w->stop_after_ticks || e->samples < (uint64_t)w->stop_after_ticks;
}

/* Run the engine over w's first process for ticks ticks (at 1 kHz). */
static void run(struct fake_world *w, const struct eng_opts *extra, int ticks, struct engine *e,
		struct spy_strtab *strs)
{
	struct eng_opts o = *extra;
	o.rate = 1000;
	o.duration = -1;
	struct eng_walker wk = fake_walker_ops;
	wk.ctx = w;
	world = w;
	w->stop_after_ticks = ticks;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(eng_open(e, &o, &wk, strs, w->procs[0].pid, NULL, &err), 0);
	const struct eng_callbacks cb = { w, on_stack, on_wait, NULL };
	eng_run(e, &cb);
	eng_detach(e);
}

static void setup(struct fake_world *w)
{
	memset(w, 0, sizeof(*w));
	w->nprocs = 1;
	struct fake_proc *f = &w->procs[0];
	f->pid = 100;
	f->nth = 3;
	f->th[0] = (struct fake_thread){ 100, 'S', true, false, false, false, false };   /* the GIL holder, sleeping or not */
	f->th[1] = (struct fake_thread){ 101, 'R', false, false, false, false, false };  /* running without the GIL */
	f->th[2] = (struct fake_thread){ 102, 'S', false, false, false, false, false };  /* idle */
}

static void test_blocking(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { 0 };
	setup(&w);
	run(&w, &o, 10, &e, &strs);
	struct fake_proc *f = &w.procs[0];
	CHECK_INT(e.samples, 10);
	CHECK_INT(f->pauses, 10);
	CHECK_INT(f->resumes, 10);
	CHECK(!f->walked_while_running);
	CHECK_INT(f->detaches, 1);
	CHECK(!f->attached);
	/*
	 * The GIL holder every tick; the R thread from its second tick on (its
	 * first R reading has nothing before it: a pause may just have woken
	 * it); the sleeper never.
	 */
	CHECK_INT(w.stacks, 10 + 9);
	CHECK_INT(w.idle_stacks, 0);
	CHECK_INT(e.thread_samples, 30);
	CHECK_INT(e.active_samples, 19);
	CHECK_INT(e.gil_ticks, 10);
	CHECK_INT(e.threads_seen, 3);
	CHECK_INT(f->opens_tasks, 3);
	CHECK_INT(eng_errors(&e), 0);
	eng_release(&e);
	spy_strtab_release(&strs);

	/* -i: every thread, the inactive ones marked idle; -g: the holder alone. */
	setup(&w);
	o.idle = true;
	run(&w, &o, 5, &e, &strs);
	CHECK_INT(w.stacks, 15);
	CHECK_INT(w.idle_stacks, 5 + 1);
	eng_release(&e);
	setup(&w);
	o.idle = false;
	o.gil = true;
	run(&w, &o, 5, &e, &strs);
	CHECK_INT(w.stacks, 5);
	eng_release(&e);
	spy_strtab_release(&strs);
}

static void test_nonblocking(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { .nonblocking = true };
	setup(&w);
	w.procs[0].th[1].truncated = true;
	run(&w, &o, 6, &e, &strs);
	/* Never paused; a walk that does not reach the root is torn and not kept. */
	CHECK_INT(w.procs[0].pauses, 0);
	CHECK(!w.procs[0].attached);
	CHECK_INT(e.errors[ENG_ERR_TORN], 6);
	CHECK_INT(w.stacks, 6);
	eng_release(&e);

	/* Paused, a truncated stack is counted and kept. */
	setup(&w);
	w.procs[0].th[1].truncated = true;
	o.nonblocking = false;
	run(&w, &o, 6, &e, &strs);
	CHECK_INT(e.errors[ENG_ERR_TRUNCATED], 6);
	CHECK_INT(e.errors[ENG_ERR_TORN], 0);
	CHECK_INT(w.stacks, 6 + 5);
	eng_release(&e);
	spy_strtab_release(&strs);
}

static void test_errors_and_maps(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { 0 };

	/* A failed walk (past the first maps read's 10 ms) reads the maps and walks again before resuming. */
	setup(&w);
	w.procs[0].partial_walks = 1;
	w.procs[0].partial_from = 30;
	run(&w, &o, 40, &e, &strs);
	CHECK_INT(w.procs[0].maps_reads, 1);
	CHECK_INT(w.procs[0].walks, 40 + 1);
	CHECK_INT(w.procs[0].pauses, w.procs[0].resumes);
	CHECK_INT(eng_errors(&e), 0);
	eng_release(&e);

	/* A thread list that cannot be read counts once per tick; the process is still resumed. */
	setup(&w);
	w.procs[0].walk_fails = 4;
	run(&w, &o, 3, &e, &strs);
	CHECK(e.errors[ENG_ERR_THREADS] >= 1);
	CHECK_INT(w.procs[0].pauses, w.procs[0].resumes);
	eng_release(&e);

	/* A stack the command refuses is counted as dropped. */
	setup(&w);
	w.refuse_stacks = true;
	run(&w, &o, 4, &e, &strs);
	CHECK_INT(e.errors[ENG_ERR_DROPPED], (uint64_t)w.stacks);
	struct spy_buf b = SPY_BUF_INIT;
	eng_format_errors(&e, &b);
	CHECK(strstr(b.buf, "dropped") != NULL);
	spy_buf_release(&b);
	eng_release(&e);
	spy_strtab_release(&strs);
}

static void test_end_and_descendants(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { 0 };

	/* The process exits: the loop ends by itself. */
	setup(&w);
	w.procs[0].gone_after_walks = true;
	run(&w, &o, 0, &e, &strs);
	CHECK(eng_root_gone(&e));
	CHECK_INT(e.samples, 3);
	eng_release(&e);

	/* -s: a Python child is found, attached, sampled under its own root, and detached. */
	setup(&w);
	w.nprocs = 2;
	w.procs[0].children[0] = 200;
	w.procs[0].children[1] = 300;   /* not Python: retried a while, never opened */
	w.procs[0].nchildren = 2;
	w.procs[1].pid = 200;
	w.procs[1].nth = 1;
	w.procs[1].th[0] = (struct fake_thread){ 200, 'R', true, false, false, false, false };
	o.subprocesses = true;
	run(&w, &o, 20, &e, &strs);
	CHECK_INT(e.nprocs, 2);
	CHECK(w.procs[1].pauses > 0 && w.procs[1].pauses == w.procs[1].resumes);
	CHECK_INT(w.procs[1].detaches, 1);
	CHECK_INT(w.nseen, 2);
	CHECK(e.procs[0]->root != e.procs[1]->root);
	eng_release(&e);
	spy_strtab_release(&strs);
}

/* What the window callback saw. */
#define MAX_WINDOWS 8
static struct eng_window windows[MAX_WINDOWS];
static size_t nwindows;
static int stacks_at_window[MAX_WINDOWS];

static void on_window(void *ctx, struct engine *e, const struct eng_window *win)
{
	struct fake_world *w = ctx;
	if (nwindows < MAX_WINDOWS) {
		stacks_at_window[nwindows] = w->stacks;
		windows[nwindows++] = *win;
	}
}

static void test_windows(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { 0 };
	setup(&w);
	o.rate = 1000;
	o.duration = 1.3;
	o.window_s = 1;
	struct eng_walker wk = fake_walker_ops;
	wk.ctx = &w;
	world = &w;
	struct spy_err err = SPY_ERR_INIT;
	struct timespec t0;
	clock_gettime(CLOCK_REALTIME, &t0);
	CHECK_INT(eng_open(&e, &o, &wk, &strs, w.procs[0].pid, NULL, &err), 0);
	const struct eng_callbacks cb = { &w, on_stack, NULL, on_window };
	eng_run(&e, &cb);
	eng_detach(&e);
	/* 1.3 s of 1 s windows aligned to whole seconds: two or three of them. */
	CHECK(nwindows >= 2 && nwindows <= 3);
	uint64_t ticks = 0;
	for (size_t i = 0; i < nwindows; i++) {
		CHECK_INT(windows[i].seq, i);
		CHECK(windows[i].until_s > windows[i].from_s);
		CHECK(windows[i].last == (i + 1 == nwindows));
		if (i > 0) {
			CHECK_INT(windows[i].from_s, windows[i - 1].until_s);
			CHECK_INT(windows[i].until_s - windows[i].from_s, 1);
		}
		ticks += windows[i].ticks;
	}
	CHECK(windows[0].from_s == t0.tv_sec || windows[0].from_s == t0.tv_sec + 1);
	CHECK_INT(ticks, e.samples);
	/* Every stack was handed on before its window closed: the last saw them all. */
	CHECK_INT(stacks_at_window[nwindows - 1], w.stacks);
	eng_release(&e);
	spy_strtab_release(&strs);
}

static void test_backends(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct spy_process core = spy_process_core(NULL);
	struct spy_process fake = { &fake_ops, NULL };
	/* A core says what it cannot do, in the words of an error. */
	CHECK(!spy_process_can(&core, SPY_CAP_UNWIND, "--native", &err));
	CHECK_INT(err.code, SPY_EUSAGE);
	CHECK(strstr(err.msg, "--native") && strstr(err.msg, "core file"));
	CHECK(!spy_process_can(&core, SPY_CAP_PAUSE, "pausing", NULL));
	CHECK(spy_process_can(&fake, SPY_CAP_PAUSE, "pausing", NULL));
	CHECK(spy_process_can(&fake, SPY_CAP_WATCH, "watching", NULL));
}


/* ---- one thread at a time ---- */

static int f_track(struct spy_process *p)
{
	struct fake_proc *f = fp(p);
	CHECK(f->attached && !f->paused && !f->held);
	f->tracks++;
	f->in_tick = false;
	return 0;
}

static int f_stop_thread(struct spy_process *p, pid_t tid, uint64_t wait_ns)
{
	struct fake_proc *f = fp(p);
	CHECK(f->attached && !f->paused && !f->held);
	if (tid == f->gone_tid) {
		return -SPY_EGONE;
	}
	for (size_t i = 0; i < f->nth; i++) {
		if (f->th[i].tid != tid) {
			continue;
		}
		f->first_stop_not_holder += !f->in_tick && !f->th[i].gil;
		f->in_tick = true;
		f->stops++;
		f->stops_of[i]++;
		f->held = tid;
		f->waitless_stops += wait_ns == 0;
		if (wait_ns && f->th[i].offcpu) {
			f->offcpu_holds++;
			return 1;
		}
		return 0;
	}
	return -SPY_ENOPROC;
}

static void f_resume_thread(struct spy_process *p)
{
	struct fake_proc *f = fp(p);
	CHECK(f->held != 0);
	f->held = 0;
}

static int w_list(void *ctx, void *py, struct eng_thread *th, size_t max, size_t *n)
{
	struct fake_proc *f = py;
	CHECK(!f->held && !f->paused);
	f->walks++;
	for (size_t i = 0; i < f->nth && i < max; i++) {
		th[i].tid = f->th[i].tid;
		th[i].holds_gil = f->th[i].gil;
		th[i].rc = 0;
		spy_stack_reset(&th[i].stack);
	}
	*n = f->nth;
	return 0;
}

static void w_walk_thread(void *ctx, void *py, size_t i, struct eng_thread *t, bool held)
{
	struct fake_proc *f = py;
	/* A walk told it is held must be; unheld ones warm a new thread's first walk up. */
	f->walked_unheld += held && f->held != f->th[i].tid;
	f->warmups += !held;
	spy_stack_reset(&t->stack);
	struct spy_frame *fr = spy_stack_push(&t->stack);
	memset(fr, 0, sizeof(*fr));
	fr->func = "work";
	t->rc = 0;
}

static bool w_frozen_by(void *ctx, void *py, size_t h, size_t j)
{
	struct fake_proc *f = py;
	struct fake_world *w = ctx;
	/* Asked while h, and h alone, is held: its GIL is what freezes j. */
	CHECK_INT(f->held, f->th[h].tid);
	CHECK(h != j);
	w->frozen_asked++;
	return w->freeze;
}

/* The fake process's operations for holding one thread at a time. */
static struct spy_process_ops held_ops(void)
{
	struct spy_process_ops ops = fake_ops;
	ops.track = f_track;
	ops.stop_thread = f_stop_thread;
	ops.resume_thread = f_resume_thread;
	return ops;
}

/* Run the engine over w for ticks ticks, one thread held at a time (ops), walker wk. */
static void run_held(struct fake_world *w, struct eng_walker *wk, struct eng_opts *o,
		     const struct spy_process_ops *ops, int ticks, struct engine *e,
		     struct spy_strtab *strs)
{
	o->rate = 1000;
	o->duration = -1;
	wk->ctx = w;
	world = w;
	w->stop_after_ticks = ticks;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(eng_open(e, o, wk, strs, w->procs[0].pid, NULL, &err), 0);
	e->procs[0]->proc.ops = ops;
	const struct eng_callbacks cb = { w, on_stack, on_wait, NULL };
	eng_run(e, &cb);
	eng_detach(e);
}

/*
 * After 10 ticks of setup()'s threads held one at a time, without -i:
 * every walk told it is held was, the holder's 10 stacks and the R
 * thread's 9 (not its first tick) kept, no error, nothing left held.
 */
static void check_held_run(const struct fake_world *w, const struct engine *e)
{
	const struct fake_proc *f = &w->procs[0];
	CHECK_INT(f->walked_unheld, 0);
	CHECK_INT(w->stacks, 10 + 9);
	CHECK_INT(eng_errors(e), 0);
	CHECK(!f->held);
}

/*
 * Behind the GIL holder's hold, a thread its GIL freezes is walked without
 * a stop of its own; not when the walker says it is not frozen, nor when
 * walks need the thread stopped (--native).
 */
static void test_frozen_behind_holder(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { 0 };
	struct spy_process_ops ops = held_ops();
	static const struct {
		bool freeze, held_only;
	} cases[] = { { true, false }, { false, false }, { true, true } };
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct eng_walker wk = fake_walker_ops;
		wk.list = w_list;
		wk.walk_thread = w_walk_thread;
		wk.frozen_by = w_frozen_by;
		wk.held_only = cases[c].held_only;
		setup(&w);
		w.freeze = cases[c].freeze;
		run_held(&w, &wk, &o, &ops, 10, &e, &strs);
		struct fake_proc *f = &w.procs[0];
		bool frozen = cases[c].freeze && !cases[c].held_only;
		CHECK_INT(e.samples, 10);
		CHECK_INT(f->stops_of[0], 10);
		/*
		 * The R thread: walked every tick, stopped only when not frozen,
		 * or the first time (its first walk is too long for another's
		 * hold); the sleeper, not worth a walk without -i, is never
		 * walked, so never asked about either.
		 */
		CHECK_INT(f->stops_of[1], frozen ? 1 : 10);
		CHECK_INT((int)e.holds.frozen, frozen ? 9 : 0);
		CHECK_INT(f->stops_of[2], 0);
		CHECK_INT(w.frozen_asked, cases[c].held_only ? 0 : 9);
		/* The same stacks either way. */
		check_held_run(&w, &e);
		eng_release(&e);
	}
	spy_strtab_release(&strs);
}

/*
 * A thread the stop finds off a CPU (stop_thread 1, only when asked with
 * a wait, which it is unless walks need the thread stopped) is walked as
 * held, not counted a stop, and let go as any held thread.
 */
static void test_offcpu_held(void)
{
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct spy_process_ops ops = held_ops();
	for (int held_only = 0; held_only < 2; held_only++) {
		struct fake_world w;
		struct engine e;
		struct eng_opts o = { 0 };
		struct eng_walker wk = fake_walker_ops;
		wk.list = w_list;
		wk.walk_thread = w_walk_thread;
		wk.held_only = held_only;
		setup(&w);
		w.procs[0].th[1].offcpu = true;
		run_held(&w, &wk, &o, &ops, 10, &e, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(f->stops_of[0], 10);
		CHECK_INT(f->stops_of[1], 10);
		CHECK_INT(f->offcpu_holds, held_only ? 0 : 10);
		CHECK_INT((int)e.holds.offcpu, held_only ? 0 : 10);
		CHECK_INT((int)e.holds.stops, held_only ? 20 : 10);
		CHECK_INT(f->waitless_stops, held_only ? 20 : 0);
		/* The same stacks either way. */
		check_held_run(&w, &e);
		eng_release(&e);
	}
	spy_strtab_release(&strs);
}

static void test_one_at_a_time(void)
{
	struct fake_world w;
	struct engine e;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct eng_opts o = { 0 };
	struct spy_process_ops ops = held_ops();
	struct eng_walker wk = fake_walker_ops;
	wk.list = w_list;
	wk.walk_thread = w_walk_thread;

	for (int idle = 0; idle < 2; idle++) {
		setup(&w);
		/* The holder listed last: it must still be stopped first. */
		struct fake_thread holder = w.procs[0].th[0];
		w.procs[0].th[0] = w.procs[0].th[2];
		w.procs[0].th[2] = holder;
		o.idle = idle;
		run_held(&w, &wk, &o, &ops, 10, &e, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(e.samples, 10);
		CHECK_INT(f->pauses, 0);
		CHECK_INT(f->tracks, 10);
		CHECK_INT(f->walked_unheld, 0);
		/* Once for each thread walked, when first seen. */
		CHECK_INT(f->warmups, idle ? 3 : 2);
		CHECK_INT(f->first_stop_not_holder, 0);
		CHECK(!f->held);
		/* The holder and the R thread every tick; the sleeper only with -i. */
		CHECK_INT(f->stops_of[2], 10);
		CHECK_INT(f->stops_of[1], 10);
		CHECK_INT(f->stops_of[0], idle ? 10 : 0);
		/* The same stacks kept as with the whole-process pause. */
		CHECK_INT(w.stacks, idle ? 30 : 10 + 9);
		CHECK_INT(e.gil_ticks, 10);
		CHECK_INT(e.holds.ticks, 10);
		CHECK_INT(e.holds.whole_ticks, 0);
		CHECK_INT(eng_errors(&e), 0);
		CHECK_INT(f->detaches, 1);
		eng_release(&e);
	}

	/* A thread that exits before it is stopped is counted gone, not walked. */
	setup(&w);
	w.procs[0].gone_tid = 101;
	o.idle = false;
	run_held(&w, &wk, &o, &ops, 5, &e, &strs);
	CHECK_INT(w.stacks, 5);
	CHECK_INT(e.errors[ENG_ERR_GONE], 5);
	eng_release(&e);
	spy_strtab_release(&strs);
}

/*
 * -i: a sleeper (th[2]) is not stopped. Its stack is read running once and
 * kept while it sleeps; read running every tick when it is scheduled
 * between ticks; stopped for its walk when it is scheduled during the read,
 * when the walker needs it stopped (--native), or without schedstat.
 */
static void test_sleepers_not_stopped(void)
{
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct spy_process_ops ops = held_ops();
	ops.task_still = f_task_still;
	static const struct {
		bool scheduled, runs_in_read, held_only, no_still;
		int stops, kept, read;
	} cases[] = {
		{ false, false, false, false, 0, 9, 1 },
		{ true, false, false, false, 0, 0, 10 },
		{ false, true, false, false, 10, 0, 0 },
		{ false, false, true, false, 10, 0, 0 },
		{ false, false, false, true, 10, 0, 0 },
	};
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct engine e;
		setup(&w);
		w.procs[0].th[2].scheduled = cases[c].scheduled;
		w.procs[0].th[2].runs_in_read = cases[c].runs_in_read;
		ops.task_still = cases[c].no_still ? NULL : f_task_still;
		struct eng_walker wk = fake_walker_ops;
		wk.list = w_list;
		wk.walk_thread = w_walk_thread;
		wk.held_only = cases[c].held_only;
		struct eng_opts o = { 0 };
		o.idle = true;
		run_held(&w, &wk, &o, &ops, 10, &e, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(e.samples, 10);
		CHECK_INT(f->stops_of[2], cases[c].stops);
		CHECK_INT(e.still.kept, cases[c].kept);
		CHECK_INT(e.still.read, cases[c].read);
		/* The holder and the R thread are stopped every tick, whatever the sleeper does. */
		CHECK_INT(f->stops_of[0], 10);
		CHECK_INT(f->stops_of[1], 10);
		CHECK_INT(f->walked_unheld, 0);
		/* Every thread's stack every tick, the sleeper's (and the R thread's first) marked idle. */
		CHECK_INT(w.stacks, 30);
		CHECK_INT(w.idle_stacks, 10 + 1);
		CHECK_INT(eng_errors(&e), 0);
		eng_release(&e);
	}
	spy_strtab_release(&strs);
}

int main(void)
{
	test_blocking();
	test_nonblocking();
	test_errors_and_maps();
	test_end_and_descendants();
	test_windows();
	test_backends();
	test_one_at_a_time();
	test_frozen_behind_holder();
	test_offcpu_held();
	test_sleepers_not_stopped();
	return check_done();
}
