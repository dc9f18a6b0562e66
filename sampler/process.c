/*
 * The process handle's backends (see engine.h): a live process, reached
 * through ptrace and /proc, and a core file, which has nothing to pause and
 * no thread that runs, so most of its table is empty and spy_process_can()
 * says so instead of a rule in each command.
 */
#include <stdlib.h>
#include <string.h>

#include "sampler/engine.h"

/* ---- live ---- */

static struct proc *live(const struct spy_process *p)
{
	return p->impl;
}

static pid_t live_pid(const struct spy_process *p)
{
	return proc_pid(live(p));
}

static const char *live_cmdline(const struct spy_process *p)
{
	return proc_cmdline(live(p));
}

static int live_attach(struct spy_process *p, struct spy_err *err)
{
	int rc = proc_list_threads(live(p), err);
	return rc < 0 ? rc : proc_attach(live(p), err);
}

static int live_pause(struct spy_process *p, struct spy_err *err)
{
	return proc_pause(live(p), err);
}

static void live_resume(struct spy_process *p)
{
	proc_resume(live(p), NULL);
}

static int live_track(struct spy_process *p)
{
	return proc_track(live(p));
}

static int live_stop_thread(struct spy_process *p, pid_t tid, uint64_t wait_ns)
{
	return proc_stop_thread(live(p), tid, wait_ns);
}

static void live_resume_thread(struct spy_process *p)
{
	proc_resume_thread(live(p));
}

static int live_poll(struct spy_process *p)
{
	return proc_poll(live(p));
}

static void live_detach(struct spy_process *p)
{
	proc_detach(live(p));
}

static bool live_alive(struct spy_process *p)
{
	return proc_alive(live(p));
}

static bool live_exit_status(const struct spy_process *p, int *status)
{
	return proc_exit_status(live(p), status);
}

static void live_fresh_view(struct spy_process *p)
{
	proc_mem_invalidate(live(p));
}

static void live_read_maps(struct spy_process *p)
{
	proc_read_maps(live(p), NULL);
}

static void live_task_open(const struct spy_process *p, struct proc_task *t, pid_t tid)
{
	proc_task_open(live(p), t, tid);
}

static void live_task_name(const struct spy_process *p, pid_t tid, char *buf, size_t size)
{
	proc_task_comm(live(p), tid, buf, size);
}

static size_t live_descendants(const struct spy_process *p, pid_t **out)
{
	return proc_list_descendants(proc_pid(live(p)), out);
}

static void live_exe_of(const struct spy_process *p, pid_t pid, char *buf, size_t size)
{
	proc_exe_of(pid, buf, size);
}

static long live_threads(struct spy_process *p, struct spy_thread_info *out, size_t max,
			 struct spy_err *err)
{
	int rc = proc_list_threads(live(p), err);
	if (rc < 0) {
		return rc;
	}
	size_t n = 0;
	const struct proc_thread *t = proc_threads(live(p), &n);
	n = n < max ? n : max;
	for (size_t i = 0; i < n; i++) {
		out[i].tid = t[i].tid;
		memcpy(out[i].comm, t[i].comm, sizeof(out[i].comm));
		proc_task_wait(live(p), t[i].tid, &out[i].wait);
	}
	return (long)n;
}

static void live_thread_wait(const struct spy_process *p, pid_t tid, struct proc_wait *out)
{
	proc_task_wait(live(p), tid, out);
}

static bool live_execed(const struct spy_process *p)
{
	return proc_execed(live(p));
}

static void live_resources(struct spy_process *p, struct proc_resources *out)
{
	proc_read_resources(live(p), out);
}

static const struct spy_process_ops live_ops = {
	.kind = "process",
	.pid = live_pid,
	.cmdline = live_cmdline,
	.attach = live_attach,
	.pause = live_pause,
	.resume = live_resume,
	.poll = live_poll,
	.track = live_track,
	.stop_thread = live_stop_thread,
	.resume_thread = live_resume_thread,
	.detach = live_detach,
	.alive = live_alive,
	.exit_status = live_exit_status,
	.execed = live_execed,
	.fresh_view = live_fresh_view,
	.read_maps = live_read_maps,
	.resources = live_resources,
	.task_open = live_task_open,
	.task_refresh = proc_task_refresh,
	.task_still = proc_task_still,
	.task_close = proc_task_close,
	.task_name = live_task_name,
	.descendants = live_descendants,
	.exe_of = live_exe_of,
	.threads = live_threads,
	.thread_wait = live_thread_wait,
};

struct spy_process spy_process_live(struct proc *p)
{
	return (struct spy_process){ &live_ops, p };
}

/* ---- core ---- */

static pid_t core_pid_op(const struct spy_process *p)
{
	return core_pid(p->impl);
}

static const char *core_cmdline_op(const struct spy_process *p)
{
	return core_cmdline(p->impl);
}

/* Its notes: NT_PRSTATUS per thread, with what each waited on from its registers. */
static long core_threads_op(struct spy_process *p, struct spy_thread_info *out, size_t max,
			    struct spy_err *err)
{
	size_t n = 0;
	const struct core_thread *t = core_threads(p->impl, &n);
	n = n < max ? n : max;
	for (size_t i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].tid = t[i].tid;
		out[i].wait = t[i].wait;
	}
	return (long)n;
}

/* A core never changes: nothing to pause, watch or re-read; its threads are in its notes. */
static const struct spy_process_ops core_ops = {
	.kind = "core file",
	.pid = core_pid_op,
	.cmdline = core_cmdline_op,
	.threads = core_threads_op,
};

struct spy_process spy_process_core(struct core *c)
{
	return (struct spy_process){ &core_ops, c };
}

bool spy_process_can(const struct spy_process *p, enum spy_process_cap cap, const char *what,
		     struct spy_err *err)
{
	const struct spy_process_ops *o = p->ops;
	bool can = false;
	switch (cap) {
	case SPY_CAP_PAUSE:
	case SPY_CAP_UNWIND:
		/* Unwinding reads the registers of stopped threads. */
		can = o->attach && o->pause && o->resume;
		break;
	case SPY_CAP_WATCH:
		can = o->task_open && o->task_refresh && o->alive;
		break;
	}
	if (!can && err) {
		spy_err_set(err, SPY_EUSAGE, "%s needs a live process, and this is a %s", what, o->kind);
	}
	return can;
}
