/* The fake backend of test-profiler-tick (faketick.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "profiler/internal.h"
#include "pystate/internal.h"
#include "tests/lib/check.h"
#include "tests/lib/faketick.h"

#ifdef SPY_TEST_HOOKS

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
	/* A count shared by the threads of one interpreter: counted once. */
	for (size_t i = 0; !f->view && len == 8 && i < f->nth; i++) {
		if (addr == f->th[i].switches) {
			f->count_reads++;
			break;
		}
	}
	for (size_t i = 0; i < f->nth; i++) {
		struct fake_thread *t = &f->th[i];
		if (f->no_switches && addr < t->switches + 8 && addr + len > t->switches) {
			return -SPY_EMEM;
		}
		/* As a view of the real cache: the count as this view first read it. */
		if (f->view && addr == t->switches && len == 8) {
			if (!t->seen) {
				t->seen_switches = fakepy_r64(f->fp, t->switches);
				t->seen = true;
			}
			memcpy(dst, &t->seen_switches, 8);
			return 0;
		}
		/* Another thread takes the GIL while this one's frame is read running. */
		if (t->switch_reads > 0 && f->held != t->tid && !f->paused && addr < t->frame + 0x80 &&
		    addr + len > t->frame) {
			t->switch_reads--;
			fakepy_w64(f->fp, t->switches, fakepy_r64(f->fp, t->switches) + 1);
		}
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

static const struct spy_regs *f_saved_regs(const struct spy_process *p, pid_t tid, uint64_t *pac_mask)
{
	*pac_mask = 0;
	return NULL;
}

static int f_user_root(const struct spy_process *p)
{
	return -1;
}

static const struct spy_process_ops fake_ops = {
	.kind = "fake process",
	.pid = f_pid,
	.cmdline = f_cmdline,
	.exe = f_exe,
	.mem = f_mem,
	.open_mapped = f_open_mapped,
	.threads = f_threads,
	.saved_regs = f_saved_regs,
	.user_root = f_user_root,
};

static int f_attach(struct spy_process *p, struct spy_err *err)
{
	fp_of(p)->attached = true;
	fp_of(p)->attaches++;
	return 0;
}

static void view_set(struct fake_proc *f, bool on);

static int f_pause(struct spy_process *p, struct spy_err *err)
{
	struct fake_proc *f = fp_of(p);
	CHECK(f->attached && !f->paused && !f->held);
	f->pauses++;
	f->paused = true;
	view_set(f, true);
	return 0;
}

static void f_resume(struct spy_process *p)
{
	struct fake_proc *f = fp_of(p);
	CHECK(f->paused);
	f->resumes++;
	f->paused = false;
	view_set(f, false);
}

static bool f_gone(const struct fake_proc *f)
{
	return (f->gone_after_ticks && f->tracks + f->pauses >= 3) ||
	       (f->gone_after_alive && f->alive_calls >= f->gone_after_alive);
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
	fp_of(p)->alive_calls++;
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

static bool f_same_image(const struct spy_process *p)
{
	struct fake_proc *f = fp_of(p);
	f->image_checks++;
	return !f->exec_at_check || f->image_checks < f->exec_at_check;
}

/* A new view (a hold's, or one for a walk of the running process), or none. */
static void view_set(struct fake_proc *f, bool on)
{
	f->view = on;
	for (size_t i = 0; i < f->nth; i++) {
		f->th[i].seen = false;
	}
}

static void f_fresh_view(struct spy_process *p, pid_t tid)
{
	(void)tid;
	fp_of(p)->fresh_views++;
	view_set(fp_of(p), true);
}

static void f_end_view(struct spy_process *p)
{
	view_set(fp_of(p), false);
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
static struct fake_thread *thread_by_tid(pid_t tid)
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

/* The state read of a refresh (tasks.c's stat); runs: taken as running, not read. */
static void f_task_state(struct proc_task *t, bool runs)
{
	struct fake_thread *ft = thread_by_tid(t->tid);
	t->owed = false;
	if (!ft) {
		return;
	}
	if (!runs) {
		ft->state_reads++;
	}
	t->state = runs ? 'R' : ft->state;
	t->ran = true;
	if (t->owed_sched && t->state == 'R') {
		t->read_ns = 1;
	}
}

static void f_task_refresh(struct proc_task *t, unsigned how)
{
	struct fake_thread *ft = thread_by_tid(t->tid);
	if (!ft) {
		return;
	}
	bool with_cpu = how & PROC_TASK_CPU;
	/* As tasks.c: asleep when last read, and not scheduled since. */
	t->slept = with_cpu && t->state && t->state != 'R' && ft->state != 'R' && !ft->scheduled;
	t->owed = !t->slept;
	/* As if schedstat were read whenever with_cpu asks for it. */
	t->owed_sched = with_cpu;
	if (t->owed && !(how & PROC_TASK_DEFER)) {
		f_task_state(t, false);
	}
}

static void f_task_settle(struct proc_task *t, bool runs)
{
	if (t->owed) {
		f_task_state(t, runs);
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

/* The fake's tracer seizes its Python threads and its native ones. */
static size_t f_tids(const struct spy_process *p, pid_t *out, size_t max)
{
	struct fake_proc *f = fp_of(p);
	size_t n = 0;
	for (size_t i = 0; i < f->nth && n < max; i++) {
		out[n++] = f->th[i].tid;
	}
	for (size_t i = 0; i < f->nnative && n < max; i++) {
		if (i == 0 || f->cpu_reads[0] > 0) {
			out[n++] = f->native_tids[i];
		}
	}
	return n;
}

static int f_task_cpu(const struct spy_process *p, pid_t tid, uint64_t *ns)
{
	struct fake_proc *f = fp_of(p);
	for (size_t i = 0; i < f->nnative; i++) {
		if (f->native_tids[i] == tid) {
			*ns = (uint64_t)++f->cpu_reads[i] * 100000000ull;
			return 0;
		}
	}
	/* A Python thread's: counted (test_unsampled wants none), used no CPU. */
	f->python_cpu_reads++;
	*ns = 0;
	return 0;
}

static int f_task_blocked_at(const struct spy_process *p, pid_t tid, spy_addr_t *sp, spy_addr_t *pc)
{
	(void)p;
	(void)tid;
	*sp = *pc = 0;
	return 0;
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

/* One PID namespace, spy's. */
static pid_t f_ns_pid(const struct spy_process *p)
{
	return p->ops->pid(p);
}

static pid_t f_host_tid(struct spy_process *p, pid_t tid)
{
	return tid;
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
	f->tick_stops = 0;
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
		f->tick_stops++;
		f->most_tick_stops = f->tick_stops > f->most_tick_stops ? f->tick_stops : f->most_tick_stops;
		f->held = tid;
		view_set(f, true);
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
	view_set(f, false);
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
	.tids = f_tids,
	.detach = f_detach,
	.alive = f_alive,
	.exit_status = f_exit_status,
	.execed = f_execed,
	.same_image = f_same_image,
	.fresh_view = f_fresh_view,
	.end_view = f_end_view,
	.read_maps = f_read_maps,
	.resources = f_resources,
	.task_open = f_task_open,
	.task_refresh = f_task_refresh,
	.task_settle = f_task_settle,
	.task_still = f_task_still,
	.task_close = f_task_close,
	.task_name = f_task_name,
	.task_cpu = f_task_cpu,
	.task_blocked_at = f_task_blocked_at,
	.descendants = f_descendants,
	.exe_of = f_exe_of,
	.thread_wait = f_thread_wait,
	.ns_pid = f_ns_pid,
	.host_tid = f_host_tid,
};

static int fake_open(pid_t pid, struct spy_process *h, struct pyrt_hints *hints)
{
	for (size_t i = 0; i < world->nprocs; i++) {
		struct fake_proc *f = &world->procs[i];
		if (f->pid == pid && hints && f->not_python) {
			return -SPY_ENOPY;
		}
		if (f->pid == pid) {
			*h = (struct spy_process){ &fake_ops, &fake_tracer, f };
			if (hints) {
				*hints = *fakepy_hints(f->fp);
			}
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
		if (t->gil || t->last_holder) {
			fakepy_set_gil(f->fp, interp, t->tstate);
		}
		if (t->last_holder) {
			fakepy_set_gil(f->fp, interp, 0);
		}
		t->switches = fakepy_gil_switches(f->fp, interp);
	}
}

void fake_setup(struct fake_world *w)
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

void fake_teardown(struct fake_world *w, struct profiler *p, struct spy_strtab *strs)
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
	w->untrusted_stacks += s->names_untrusted;
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
struct profiler *fake_run(struct fake_world *w, struct prof_opts o, int ticks, struct spy_strtab *strs)
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

struct prof_stats fake_stats(const struct profiler *p)
{
	struct prof_stats s;
	prof_stats(p, &s);
	return s;
}

/* ---- the tests ---- */

void fake_install(struct fake_world *w)
{
	for (size_t i = 0; i < w->nprocs; i++) {
		image(&w->procs[i]);
	}
	world = w;
	prof_test_open = fake_open;
}

#endif
