/*
 * The profiler's tick rules, through its real thread walk (pystate over a
 * synthetic 3.12 image, tests/lib/fakepy.h) and a fake backend standing in
 * for ptrace and /proc: every stop is matched by a resume and nothing is
 * left attached; never two threads held at once, the GIL holder first,
 * sleepers not stopped without -i, and with -i not when their stacks are
 * known unchanged; a process none of whose threads ran is not touched; threads frozen behind the holder's GIL walked without a
 * stop of their own (not those of an interpreter with its own GIL, nor
 * with --native); the whole-process pause where a thread has no TID, with
 * no read while the process runs; the activity rule; torn and truncated
 * stacks; the maps retry; -s follows descendants; the loop ends when the
 * process does; continuous mode's windows (cmd/session.h) are whole
 * seconds, contiguous, and hold every tick.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "cmd/session.h"
#include "common/util.h"
#include "profiler/internal.h"
#include "pystate/internal.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

#ifdef SPY_TEST_HOOKS

#define MAX_FAKE_THREADS 4

struct fake_thread {
	pid_t tid;
	char state;          /* what its stat file says: 'R', 'S' */
	bool gil;
	bool truncated;      /* its walk meets unmapped memory after its frame */
	bool scheduled;      /* put on a CPU between any two refreshes (never slept) */
	bool runs_in_read;   /* scheduled while its stack is read running */
	bool offcpu;         /* a stop with a wait finds it off a CPU (stop_thread 1) */
	bool own_interp;     /* in a subinterpreter with a GIL of its own */
	spy_addr_t tstate, frame;
};

struct fake_proc {
	pid_t pid;
	struct fake_thread th[MAX_FAKE_THREADS];
	size_t nth;
	struct fakepy *fp;
	struct spy_mem mem;        /* fakepy's, its reads counted */
	bool paused, attached, gone_after_ticks;
	int pauses, resumes, detaches, maps_reads, opens_tasks, tracks;
	int reads_running;         /* a frame read while attached, nothing stopped, in a paused-mode run */
	bool paused_mode;          /* a thread without a TID: every tick pauses the whole process */
	bool broken_until_maps;    /* th[1]'s frame chain is cut until the maps are read again */
	pid_t children[4];
	size_t nchildren;
	pid_t held;                /* the thread stopped now, or 0 */
	pid_t gone_tid;            /* stop_thread says this one exited */
	int stops, first_stop_not_holder, waitless_stops, offcpu_holds;
	int stops_of[MAX_FAKE_THREADS];
	bool in_tick;              /* a stop happened since the last track */
	bool no_still;             /* the backend cannot tell a thread stayed asleep */
	bool only_python;          /* the tracer seizes the Python threads alone (traces_only can say yes) */
	int fresh_views;
};

struct fake_world {
	struct fake_proc procs[3];
	size_t nprocs;
	int stacks, idle_stacks;
	pid_t seen_pids[8];
	size_t nseen;
	bool refuse_stacks;
};

static struct fake_world *world;

static struct fake_proc *fp_of(const struct spy_process *p)
{
	return p->impl;
}

static int counted_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	struct fake_proc *f = ctx;
	/* The listing reads thread states with the process running; frames only while it is stopped. */
	for (size_t i = 0; f->paused_mode && f->attached && !f->paused && i < f->nth; i++) {
		f->reads_running += addr >= f->th[i].frame && addr < f->th[i].frame + 0x80;
	}
	return fakepy_mem(f->fp)->read(fakepy_mem(f->fp)->ctx, addr, dst, len);
}

static pid_t f_pid(const struct spy_process *p)
{
	return fp_of(p)->pid;
}

static const char *f_cmdline(const struct spy_process *p)
{
	return "fake";
}

static const char *f_exe(const struct spy_process *p)
{
	return "/fake/python";
}

static const struct spy_mem *f_mem(const struct spy_process *p)
{
	return &fp_of(p)->mem;
}

static int f_open_mapped(const struct spy_process *p, const char *path)
{
	return -1;
}

static long f_threads(struct spy_process *p, struct proc_thread *out, size_t max, struct spy_err *err)
{
	return 0;
}

static const struct spy_process_ops fake_ops = {
	.kind = "fake process",
	.pid = f_pid,
	.cmdline = f_cmdline,
	.exe = f_exe,
	.mem = f_mem,
	.open_mapped = f_open_mapped,
	.threads = f_threads,
};

static int f_attach(struct spy_process *p, struct spy_err *err)
{
	fp_of(p)->attached = true;
	return 0;
}

static int f_pause(struct spy_process *p, struct spy_err *err)
{
	struct fake_proc *f = fp_of(p);
	CHECK(f->attached && !f->paused && !f->held);
	f->pauses++;
	f->paused = true;
	return 0;
}

static void f_resume(struct spy_process *p)
{
	struct fake_proc *f = fp_of(p);
	CHECK(f->paused);
	f->resumes++;
	f->paused = false;
}

static bool f_gone(const struct fake_proc *f)
{
	return f->gone_after_ticks && f->tracks + f->pauses >= 3;
}

static int f_poll(struct spy_process *p)
{
	CHECK(!fp_of(p)->paused && !fp_of(p)->held);
	return f_gone(fp_of(p)) ? -SPY_EGONE : 0;
}

static void f_detach(struct spy_process *p)
{
	struct fake_proc *f = fp_of(p);
	CHECK(!f->held);
	f->detaches++;
	f->attached = f->paused = false;
}

static bool f_alive(struct spy_process *p)
{
	return !f_gone(fp_of(p));
}

static bool f_exit_status(const struct spy_process *p, int *status)
{
	return false;
}

static bool f_execed(const struct spy_process *p)
{
	return false;
}

static void f_fresh_view(struct spy_process *p)
{
	fp_of(p)->fresh_views++;
}

/* The memory a cut chain lacked was mapped since: a new maps read finds it. */
static void f_read_maps(struct spy_process *p)
{
	struct fake_proc *f = fp_of(p);
	f->maps_reads++;
	if (f->broken_until_maps) {
		f->broken_until_maps = false;
		fakepy_w64(f->fp, fakepy_back_slot(f->fp, f->th[1].frame), 0);
	}
}

static void f_resources(struct spy_process *p, struct proc_resources *out)
{
	memset(out, 0, sizeof(*out));
}

static void f_task_open(const struct spy_process *p, struct proc_task *t, pid_t tid)
{
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	t->stat_fd = -1;
	fp_of(p)->opens_tasks++;
}

/* Only tasks.c knows the files; the fake keeps every thread's state in a table by TID. */
static const struct fake_thread *thread_by_tid(pid_t tid)
{
	for (size_t i = 0; i < world->nprocs; i++) {
		for (size_t j = 0; j < world->procs[i].nth; j++) {
			if (world->procs[i].th[j].tid == tid) {
				return &world->procs[i].th[j];
			}
		}
	}
	return NULL;
}

static void f_task_refresh(struct proc_task *t, bool with_cpu)
{
	const struct fake_thread *ft = thread_by_tid(t->tid);
	if (!ft) {
		return;
	}
	/* As tasks.c: asleep when last read, and not scheduled since. */
	t->slept = with_cpu && t->state && t->state != 'R' && ft->state != 'R' && !ft->scheduled;
	t->state = ft->state;
	t->ran = true;
	if (with_cpu && t->state == 'R') {
		t->read_ns = 1;
	}
}

static bool f_task_still(struct proc_task *t)
{
	const struct fake_thread *ft = thread_by_tid(t->tid);
	return ft && !world->procs[0].no_still && t->state != 'R' && !ft->runs_in_read;
}

static void f_task_close(struct proc_task *t)
{
	t->tid = -1;
}

static void f_task_name(const struct spy_process *p, pid_t tid, char *buf, size_t size)
{
	snprintf(buf, size, "t%d", (int)tid);
}

static size_t f_descendants(const struct spy_process *p, pid_t **out)
{
	struct fake_proc *f = fp_of(p);
	*out = malloc(sizeof(pid_t) * (f->nchildren ? f->nchildren : 1));
	memcpy(*out, f->children, sizeof(pid_t) * f->nchildren);
	return f->nchildren;
}

static void f_exe_of(const struct spy_process *p, pid_t pid, char *buf, size_t size)
{
	snprintf(buf, size, "/fake/python");
}

static void f_thread_wait(const struct spy_process *p, pid_t tid, struct spy_wait *out)
{
	memset(out, 0, sizeof(*out));
}

/* As ptrace.c: every thread seized is one of tids, and none is stopped. */
static bool f_traces_only(struct spy_process *p, const pid_t *tids, size_t n)
{
	struct fake_proc *f = fp_of(p);
	bool all = f->only_python && n == f->nth && !f->held && !f->paused;
	for (size_t i = 0; all && i < n; i++) {
		all = thread_by_tid(tids[i]) != NULL;
	}
	return all;
}

static int f_track(struct spy_process *p)
{
	struct fake_proc *f = fp_of(p);
	CHECK(f->attached && !f->paused && !f->held);
	f->tracks++;
	f->in_tick = false;
	return 0;
}

static int f_stop_thread(struct spy_process *p, pid_t tid, uint64_t wait_ns)
{
	struct fake_proc *f = fp_of(p);
	/* Never two at once, never while paused. */
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
	struct fake_proc *f = fp_of(p);
	CHECK(f->held != 0);
	f->held = 0;
}

static const struct spy_tracer_ops fake_tracer = {
	.attach = f_attach,
	.pause = f_pause,
	.resume = f_resume,
	.track = f_track,
	.stop_thread = f_stop_thread,
	.resume_thread = f_resume_thread,
	.poll = f_poll,
	.traces_only = f_traces_only,
	.detach = f_detach,
	.alive = f_alive,
	.exit_status = f_exit_status,
	.execed = f_execed,
	.fresh_view = f_fresh_view,
	.read_maps = f_read_maps,
	.resources = f_resources,
	.task_open = f_task_open,
	.task_refresh = f_task_refresh,
	.task_still = f_task_still,
	.task_close = f_task_close,
	.task_name = f_task_name,
	.descendants = f_descendants,
	.exe_of = f_exe_of,
	.thread_wait = f_thread_wait,
};

static int fake_open(pid_t pid, struct spy_process *h, struct pyrt_hints *hints)
{
	for (size_t i = 0; i < world->nprocs; i++) {
		struct fake_proc *f = &world->procs[i];
		if (f->pid == pid) {
			*h = (struct spy_process){ &fake_ops, &fake_tracer, f };
			*hints = *fakepy_hints(f->fp);
			return 0;
		}
	}
	return -SPY_ENOPY;
}

/* ---- the image ---- */

static struct pyoffsets layout;

/*
 * Lay f's threads out in a 3.12 image, the last one created first (so
 * listed last): each runs one frame, `work`; the GIL's holder holds its
 * interpreter's GIL.
 */
static void image(struct fake_proc *f)
{
	const struct pyoffsets *row = pyoffsets_find(0x030c0000);
	uint32_t version = row->version | 0x01f0;
	layout = *row;
	pyoffsets_apply_quirks(&layout, version);
	f->fp = fakepy_new(&layout, version);
	f->mem = *fakepy_mem(f->fp);
	f->mem.read = counted_read;
	f->mem.ctx = f;
	spy_addr_t main_interp = fakepy_main_interp(f->fp);
	spy_addr_t code = fakepy_code(f->fp, "work", "work.py", 1, 10, 2, 3);
	for (size_t k = f->nth; k-- > 0;) {
		struct fake_thread *t = &f->th[k];
		spy_addr_t interp = t->own_interp ? fakepy_new_interp(f->fp, 1) : main_interp;
		t->tstate = fakepy_thread(f->fp, interp, f->paused_mode && k == 2 ? 0 : t->tid);
		t->frame = fakepy_push_frame(f->fp, t->tstate, code, 2, 0);
		if (t->truncated || (k == 1 && f->broken_until_maps)) {
			fakepy_w64(f->fp, fakepy_back_slot(f->fp, t->frame), 0x10);
		}
		if (t->gil) {
			fakepy_set_gil(f->fp, interp, t->tstate);
		}
	}
}

static void setup(struct fake_world *w)
{
	memset(w, 0, sizeof(*w));
	w->nprocs = 1;
	struct fake_proc *f = &w->procs[0];
	f->pid = 100;
	f->nth = 3;
	f->th[0] = (struct fake_thread){ .tid = 100, .state = 'S', .gil = true };   /* the GIL holder, sleeping or not */
	f->th[1] = (struct fake_thread){ .tid = 101, .state = 'R' };                /* running without the GIL */
	f->th[2] = (struct fake_thread){ .tid = 102, .state = 'S' };                /* idle */
}

static void teardown(struct fake_world *w, struct profiler *p, struct spy_strtab *strs)
{
	prof_close(p);
	for (size_t i = 0; i < w->nprocs; i++) {
		if (w->procs[i].fp) {
			fakepy_free(w->procs[i].fp);
		}
	}
	spy_strtab_release(strs);
}

static void on_stack(struct fake_world *w, const struct prof_sample *s)
{
	w->stacks++;
	w->idle_stacks += s->idle;
	bool known = false;
	for (size_t i = 0; i < w->nseen; i++) {
		known |= w->seen_pids[i] == s->pid;
	}
	if (!known && w->nseen < 8) {
		w->seen_pids[w->nseen++] = s->pid;
	}
	/* The real walk's stack: the one frame each thread runs. */
	CHECK(s->stack->n >= 1 && !strcmp(s->stack->v[0].func, "work"));
	CHECK(s->proc_root && !strncmp(s->proc_root, "process ", 8));
	CHECK(s->thread_root && !strncmp(s->thread_root, "thread ", 7));
}

/* Images for w's processes, then ticks ticks at 1 kHz (0: until the loop ends by itself). */
static struct profiler *run(struct fake_world *w, struct prof_opts o, int ticks, struct spy_strtab *strs)
{
	for (size_t i = 0; i < w->nprocs; i++) {
		image(&w->procs[i]);
	}
	o.rate = 1000;
	o.duration = o.duration > 0 ? o.duration : -1;
	world = w;
	prof_test_open = fake_open;
	struct profiler *p = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(prof_open(&p, &o, strs, w->procs[0].pid, NULL, &err), 0);
	struct prof_tick tk;
	enum prof_event ev;
	int n = 0;
	while ((!ticks || n < ticks) && (ev = prof_next(p, &tk)) != PROF_END) {
		n += ev == PROF_TICK;
		for (size_t i = 0; i < tk.n; i++) {
			on_stack(w, &tk.v[i]);
			if (w->refuse_stacks) {
				prof_dropped(p);
			}
		}
	}
	prof_detach(p);
	return p;
}

static struct prof_stats stats(const struct profiler *p)
{
	struct prof_stats s;
	prof_stats(p, &s);
	return s;
}

/* ---- the tests ---- */

static void test_one_at_a_time(void)
{
	for (int idle = 0; idle < 2; idle++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		setup(&w);
		/* The holder listed last: it must still be stopped first. */
		struct fake_thread holder = w.procs[0].th[0];
		w.procs[0].th[0] = w.procs[0].th[2];
		w.procs[0].th[2] = holder;
		/* The other two in interpreters of their own: nothing frozen behind the holder. */
		w.procs[0].th[0].own_interp = w.procs[0].th[1].own_interp = true;
		/* Nothing tells the sleeper stayed asleep: -i stops it for its walk (see test_sleepers_not_stopped). */
		w.procs[0].no_still = true;
		struct prof_opts o = { .idle = idle };
		struct profiler *p = run(&w, o, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		struct prof_stats s = stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(f->pauses, 0);
		CHECK_INT(f->tracks, 10);
		CHECK_INT(f->first_stop_not_holder, 0);
		CHECK(!f->held);
		/* The holder and the R thread every tick; the sleeper only with -i. */
		CHECK_INT(f->stops_of[2], 10);
		CHECK_INT(f->stops_of[1], 10);
		CHECK_INT(f->stops_of[0], idle ? 10 : 0);
		/*
		 * The holder every tick; the R thread from its second on (its
		 * first R reading has nothing before it); the sleeper only with
		 * -i, marked idle (and the R thread's first).
		 */
		CHECK_INT(w.stacks, idle ? 30 : 10 + 9);
		CHECK_INT(w.idle_stacks, idle ? 10 + 1 : 0);
		CHECK_INT(s.gil_ticks, 10);
		CHECK_INT(s.thread_samples, 30);
		CHECK_INT(s.threads_seen, 3);
		CHECK_INT(prof_errors(&s), 0);
		CHECK_INT(f->detaches, 1);
		CHECK(!f->attached);
		teardown(&w, p, &strs);
	}

	/* -g: the holder's stacks alone. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	struct profiler *p = run(&w, (struct prof_opts){ .gil = true }, 5, &strs);
	CHECK_INT(w.stacks, 5);
	teardown(&w, p, &strs);

	/* A thread that exits before it is stopped is counted gone, not walked. */
	setup(&w);
	w.procs[0].gone_tid = 101;
	w.procs[0].th[1].own_interp = true;
	p = run(&w, (struct prof_opts){ 0 }, 5, &strs);
	CHECK_INT(w.stacks, 5);
	CHECK_INT(stats(p).errors[PROF_ERR_GONE], 5);
	teardown(&w, p, &strs);
}

/*
 * Behind the GIL holder's hold, a thread its GIL freezes is walked without
 * a stop of its own; not one of an interpreter with its own GIL, nor when
 * walks need the thread stopped (--native).
 */
static void test_frozen_behind_holder(void)
{
	static const struct {
		bool own_interp, native;
	} cases[] = { { false, false }, { true, false }, { false, true } };
	/* --native's unwinds fail at once here (there is no thread to unwind): the Python stacks stay. */
	setenv("SPY_TEST_NATIVE_FAIL", "1", 1);
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		setup(&w);
		w.procs[0].th[1].own_interp = cases[c].own_interp;
		struct profiler *p = run(&w, (struct prof_opts){ .native = cases[c].native }, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		bool frozen = !cases[c].own_interp && !cases[c].native;
		struct prof_stats s = stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(f->stops_of[0], 10);
		/* The R thread: stopped only when not frozen, or the first time (its first walk is too long for another's hold). */
		CHECK_INT(f->stops_of[1], frozen ? 1 : 10);
		CHECK_INT(f->stops_of[2], 0);
		/* --native: the stop waits for nothing, each thread being unwound. */
		CHECK_INT(f->waitless_stops, cases[c].native ? f->stops : 0);
		/* The same stacks either way. */
		CHECK_INT(w.stacks, 10 + 9);
		CHECK_INT(prof_errors(&s), cases[c].native ? s.errors[PROF_ERR_NATIVE] : 0);
		CHECK(!f->held);
		teardown(&w, p, &strs);
	}
	unsetenv("SPY_TEST_NATIVE_FAIL");
}

/* A thread the stop finds off a CPU is walked as held, and let go as any held thread. */
static void test_offcpu_held(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	w.procs[0].th[1].offcpu = true;
	w.procs[0].th[1].own_interp = true;
	struct profiler *p = run(&w, (struct prof_opts){ 0 }, 10, &strs);
	struct fake_proc *f = &w.procs[0];
	CHECK_INT(f->stops_of[1], 10);
	CHECK_INT(f->offcpu_holds, 10);
	CHECK_INT(w.stacks, 10 + 9);
	struct prof_stats s = stats(p);
	CHECK_INT(prof_errors(&s), 0);
	CHECK(!f->held);
	teardown(&w, p, &strs);
}

/*
 * -i: a sleeper (th[2]) is not stopped. Its stack is read running once and
 * kept while it sleeps; read running every tick when it is scheduled
 * between ticks; stopped for its walk when it is scheduled during the
 * read, or when the backend cannot tell it stayed asleep.
 */
static void test_sleepers_not_stopped(void)
{
	static const struct {
		bool scheduled, runs_in_read, no_still;
		int stops;
	} cases[] = {
		{ false, false, false, 0 },
		{ true, false, false, 0 },
		{ false, true, false, 10 },
		{ false, false, true, 10 },
	};
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		setup(&w);
		w.procs[0].th[1].own_interp = w.procs[0].th[2].own_interp = true;
		w.procs[0].th[2].scheduled = cases[c].scheduled;
		w.procs[0].th[2].runs_in_read = cases[c].runs_in_read;
		w.procs[0].no_still = cases[c].no_still;
		struct profiler *p = run(&w, (struct prof_opts){ .idle = true }, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(f->stops_of[2], cases[c].stops);
		/* The holder and the R thread are stopped every tick, whatever the sleeper does. */
		CHECK_INT(f->stops_of[0], 10);
		CHECK_INT(f->stops_of[1], 10);
		/* Every thread's stack every tick, the sleeper's (and the R thread's first) marked idle. */
		CHECK_INT(w.stacks, 30);
		CHECK_INT(w.idle_stacks, 10 + 1);
		struct prof_stats s = stats(p);
		CHECK_INT(prof_errors(&s), 0);
		teardown(&w, p, &strs);
	}
}

/*
 * A process none of whose threads ran since the last tick: the tick is the
 * last one again, with nothing stopped, listed or read (only schedstat);
 * not when one ran, nor when the tracer seizes a thread that is not
 * Python's (it may have run unseen).
 */
static void test_still_process_repeated(void)
{
	static const struct {
		bool scheduled, only_python;
		int full;
	} cases[] = {
		{ false, true, 1 },
		{ true, true, 10 },
		{ false, false, 10 },
	};
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		setup(&w);
		/* Two threads asleep, the first holding the GIL (its stack is kept every tick). */
		w.procs[0].nth = 2;
		w.procs[0].th[1].state = 'S';
		w.procs[0].th[1].scheduled = cases[c].scheduled;
		w.procs[0].only_python = cases[c].only_python;
		struct profiler *p = run(&w, (struct prof_opts){ 0 }, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(f->tracks, cases[c].full);
		CHECK_INT(f->fresh_views, cases[c].full);
		CHECK_INT(f->stops_of[0], cases[c].full);
		CHECK_INT(f->stops_of[1], 0);
		/* The same samples either way: the holder's stack every tick, the sleeper's never. */
		CHECK_INT(w.stacks, 10);
		struct prof_stats s = stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(s.thread_samples, 20);
		CHECK_INT(s.active_samples, 10);
		CHECK_INT(s.gil_ticks, 10);
		CHECK_INT(prof_errors(&s), 0);
		CHECK_INT(f->detaches, 1);
		teardown(&w, p, &strs);
	}
}

/* A thread without a TID cannot be held alone: the whole process is paused, and read only then. */
static void test_whole_pause(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	w.procs[0].paused_mode = true;
	struct profiler *p = run(&w, (struct prof_opts){ 0 }, 10, &strs);
	struct fake_proc *f = &w.procs[0];
	CHECK_INT(stats(p).samples, 10);
	CHECK_INT(f->pauses, 10);
	CHECK_INT(f->resumes, 10);
	CHECK_INT(f->reads_running, 0);
	CHECK_INT(f->detaches, 1);
	/* The holder every tick, the R thread from its second; the TID-less sleeper has no thread root and is idle. */
	CHECK_INT(w.stacks, 10 + 9);
	teardown(&w, p, &strs);
}

static void test_nonblocking_and_truncated(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	w.procs[0].th[1].truncated = true;
	struct profiler *p = run(&w, (struct prof_opts){ .nonblocking = true }, 6, &strs);
	/* Never stopped; a walk that does not reach the root is torn and not kept. */
	CHECK_INT(w.procs[0].pauses + w.procs[0].stops, 0);
	CHECK(!w.procs[0].attached);
	struct prof_stats s = stats(p);
	CHECK_INT(s.errors[PROF_ERR_TORN], 6);
	CHECK_INT(w.stacks, 6);
	teardown(&w, p, &strs);

	/* Held, a truncated stack is counted and kept. */
	setup(&w);
	w.procs[0].th[1].truncated = true;
	w.procs[0].th[1].own_interp = true;
	p = run(&w, (struct prof_opts){ 0 }, 6, &strs);
	s = stats(p);
	CHECK_INT(s.errors[PROF_ERR_TRUNCATED], 6);
	CHECK_INT(s.errors[PROF_ERR_TORN], 0);
	CHECK_INT(w.stacks, 6 + 5);
	teardown(&w, p, &strs);
}

static void test_maps_and_dropped(void)
{
	/* A walk cut short by memory mapped since reads the maps and walks again, while still held. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	w.procs[0].th[1].own_interp = true;
	w.procs[0].broken_until_maps = true;
	/* The opening counts as a maps read: a retry waits 10 ms past it, truncated meanwhile. */
	struct profiler *p = run(&w, (struct prof_opts){ 0 }, 40, &strs);
	struct prof_stats s = stats(p);
	CHECK_INT(w.procs[0].maps_reads, 1);
	CHECK(!w.procs[0].broken_until_maps);
	CHECK(s.errors[PROF_ERR_TRUNCATED] > 0 && s.errors[PROF_ERR_TRUNCATED] < 15);
	CHECK_INT(w.stacks, 40 + 39);
	teardown(&w, p, &strs);

	/* A stack the command refuses is counted as dropped. */
	setup(&w);
	w.refuse_stacks = true;
	p = run(&w, (struct prof_opts){ 0 }, 4, &strs);
	s = stats(p);
	CHECK_INT(s.errors[PROF_ERR_DROPPED], (uint64_t)w.stacks);
	struct spy_buf b = SPY_BUF_INIT;
	prof_format_errors(&s, &b);
	CHECK(strstr(b.buf, "dropped") != NULL);
	spy_buf_release(&b);
	teardown(&w, p, &strs);
}

static void test_end_and_descendants(void)
{
	/* The process exits: the loop ends by itself. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	w.procs[0].gone_after_ticks = true;
	struct profiler *p = run(&w, (struct prof_opts){ 0 }, 0, &strs);
	CHECK_INT(stats(p).samples, 3);
	teardown(&w, p, &strs);

	/* -s: a Python child is found, attached, sampled under its own root, and detached. */
	setup(&w);
	w.nprocs = 2;
	w.procs[0].children[0] = 200;
	w.procs[0].children[1] = 300;   /* not Python: retried a while, never opened */
	w.procs[0].nchildren = 2;
	w.procs[1].pid = 200;
	w.procs[1].nth = 1;
	w.procs[1].th[0] = (struct fake_thread){ .tid = 200, .state = 'R', .gil = true };
	p = run(&w, (struct prof_opts){ .subprocesses = true }, 20, &strs);
	CHECK_INT(stats(p).processes, 2);
	CHECK(w.procs[1].stops > 0);
	CHECK_INT(w.procs[1].detaches, 1);
	CHECK_INT(w.nseen, 2);
	teardown(&w, p, &strs);
}

/* What the window callback saw. */
#define MAX_WINDOWS 8
static struct cmd_window windows[MAX_WINDOWS];
static size_t nwindows;

static void on_window(void *ctx, const struct cmd_window *win)
{
	if (nwindows < MAX_WINDOWS) {
		windows[nwindows++] = *win;
	}
}

static void test_windows(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	image(&w.procs[0]);
	world = &w;
	prof_test_open = fake_open;
	struct prof_opts o = { .rate = 1000, .duration = 1.3 };
	struct profiler *p = NULL;
	struct spy_err err = SPY_ERR_INIT;
	struct timespec t0;
	clock_gettime(CLOCK_REALTIME, &t0);
	CHECK_INT(prof_open(&p, &o, &strs, 100, NULL, &err), 0);
	struct cmd_windows win;
	cmd_windows_start(&win, 1, prof_now_ns(), on_window, NULL);
	struct prof_tick tk;
	enum prof_event ev;
	while ((ev = prof_next(p, &tk)) != PROF_END) {
		struct prof_stats s = stats(p);
		if (ev == PROF_TICK) {
			cmd_windows_tick(&win, &s, tk.start_ns);
		}
		cmd_windows_check(&win, &s, prof_now_ns());
	}
	struct prof_stats s = stats(p);
	cmd_windows_end(&win, &s, s.stop_ns);
	prof_detach(p);
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
	CHECK_INT(ticks, s.samples);
	teardown(&w, p, &strs);
}

/*
 * What a profiled process costs spy's heap is sized to the process, not
 * to spy's bounds: an agent holds hundreds of processes for days, and
 * tables of SPY_MAX_THREADS threads and SPY_MAX_PY_DEPTH frames each (700
 * KiB a process, and cleared, so resident, wherever the heap reused
 * memory) made its RSS grow with every process it had walked once. A
 * process of three threads one frame deep, walked every tick, holds under
 * PROCESS_HEAP_MAX; closed, it holds nothing.
 */
#define PROCESS_HEAP_MAX (192u << 10)

/* Where the probe's block goes: a block nobody reads would be optimized away, and mallinfo2 with it. */
static void *volatile heap_probe;

static size_t heap_in_use(void)
{
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}

static void test_heap_per_process(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	setup(&w);
	image(&w.procs[0]);
	world = &w;
	prof_test_open = fake_open;
	/* Whether mallinfo2 sees this process's allocations (a sanitizer's allocator is not glibc's). */
	size_t base = heap_in_use();
	heap_probe = malloc(PROCESS_HEAP_MAX);
	bool counted = heap_in_use() >= base + PROCESS_HEAP_MAX;
	free(heap_probe);
	if (!counted) {
		printf("note: mallinfo2 does not see this build's allocations (a sanitizer's allocator): "
		       "the heap bound is not checked\n");
	}
	/* A first run warms what lives as long as spy (the logger, stdio). */
	for (int round = 0; round < 2 && counted; round++) {
		size_t before = heap_in_use();
		struct profiler *p = NULL;
		struct spy_err err = SPY_ERR_INIT;
		struct prof_opts o = { .rate = 1000, .duration = -1 };
		CHECK_INT(prof_open(&p, &o, &strs, w.procs[0].pid, NULL, &err), 0);
		struct prof_tick tk;
		for (int n = 0; n < 20;) {
			n += prof_next(p, &tk) == PROF_TICK;
		}
		size_t held = heap_in_use() - before;
		prof_detach(p);
		prof_close(p);
		spy_strtab_release(&strs);
		size_t after = heap_in_use();
		if (round == 1) {
			printf("heap per process: %zu KiB while profiled, %zd bytes left after closing\n", held >> 10,
			       (ssize_t)(after - before));
			CHECK(held < PROCESS_HEAP_MAX);
			CHECK(after <= before);
		}
	}
	fakepy_free(w.procs[0].fp);
}

int main(void)
{
	test_one_at_a_time();
	test_frozen_behind_holder();
	test_offcpu_held();
	test_sleepers_not_stopped();
	test_still_process_repeated();
	test_whole_pause();
	test_nonblocking_and_truncated();
	test_maps_and_dropped();
	test_end_and_descendants();
	test_windows();
	test_heap_per_process();
	return check_done();
}

#else

#include <stdio.h>

int main(void)
{
	printf("SKIP: the profiler's fake backend needs a build with -Dtest_hooks=true\n");
	return 77;
}

#endif
