/*
 * The process handle's backends (see process.h): a live process, reached
 * through ptrace and /proc, and a core file, which has nothing to pause and
 * no thread that runs, so it has no tracer table at all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/mapfile.h"
#include "sampler/process.h"

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

static const char *live_exe(const struct spy_process *p)
{
	return proc_exe(live(p));
}

static const struct spy_mem *live_mem(const struct spy_process *p)
{
	return proc_mem(live(p));
}

/* As the process has it mapped (common/mapfile.h): never a file of the same name elsewhere. */
static int live_open_mapped(const struct spy_process *p, const char *path)
{
	const struct spy_mem *mem = proc_mem(live(p));
	int fd = -ENOENT;
	for (size_t i = 0; i < mem->nmaps && fd < 0; i++) {
		if (mem->maps[i].offset == 0 && !strcmp(mem->maps[i].path, path)) {
			fd = spy_open_mapped(proc_pid(live(p)), &mem->maps[i]);
		}
	}
	return fd;
}

static long live_threads(struct spy_process *p, struct proc_thread *out, size_t max,
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
		out[i] = t[i];
		proc_task_wait(live(p), t[i].tid, &out[i].wait);
	}
	return (long)n;
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

static bool live_traces_only(struct spy_process *p, const pid_t *tids, size_t n)
{
	return proc_traces_only(live(p), tids, n);
}

static size_t live_tids(const struct spy_process *p, pid_t *out, size_t max)
{
	return proc_tids(live(p), out, max);
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

static bool live_execed(const struct spy_process *p)
{
	return proc_execed(live(p));
}

static bool live_same_image(const struct spy_process *p)
{
	return proc_same_image(live(p));
}

static void live_fresh_view(struct spy_process *p, pid_t tid)
{
	if (tid > 0) {
		proc_mem_thread_view(live(p), tid);
	} else {
		proc_mem_invalidate(live(p));
	}
}

static void live_end_view(struct spy_process *p)
{
	proc_mem_uncached(live(p));
}

static void live_read_maps(struct spy_process *p)
{
	proc_read_maps(live(p), NULL);
}

static void live_resources(struct spy_process *p, struct proc_resources *out)
{
	proc_read_resources(live(p), out);
}

static void live_task_open(const struct spy_process *p, struct proc_task *t, pid_t tid)
{
	proc_task_open(live(p), t, tid);
}

static void live_task_name(const struct spy_process *p, pid_t tid, char *buf, size_t size)
{
	proc_task_comm(live(p), tid, buf, size);
}

static int live_task_cpu(const struct spy_process *p, pid_t tid, uint64_t *ns)
{
	return proc_task_cpu(live(p), tid, ns);
}

static int live_task_blocked_at(const struct spy_process *p, pid_t tid, spy_addr_t *sp, spy_addr_t *pc)
{
	return proc_task_blocked_at(live(p), tid, sp, pc);
}

static size_t live_descendants(const struct spy_process *p, pid_t **out)
{
	return proc_list_descendants(proc_pid(live(p)), out);
}

static void live_exe_of(const struct spy_process *p, pid_t pid, char *buf, size_t size)
{
	proc_exe_of(pid, buf, size);
}

static void live_thread_wait(const struct spy_process *p, pid_t tid, struct spy_wait *out)
{
	proc_task_wait(live(p), tid, out);
}

static pid_t live_ns_pid(const struct spy_process *p)
{
	return proc_ns_pid(live(p));
}

static pid_t live_host_tid(struct spy_process *p, pid_t tid)
{
	return proc_host_tid(live(p), tid);
}

/* A live thread's registers are read while it is held. */
static const struct spy_regs *no_saved_regs(const struct spy_process *p, pid_t tid, uint64_t *pac_mask)
{
	*pac_mask = 0;
	return NULL;
}

static int no_user_root(const struct spy_process *p)
{
	return -1;
}

static const struct spy_process_ops live_ops = {
	.kind = "process",
	.pid = live_pid,
	.cmdline = live_cmdline,
	.exe = live_exe,
	.mem = live_mem,
	.open_mapped = live_open_mapped,
	.threads = live_threads,
	.saved_regs = no_saved_regs,
	.user_root = no_user_root,
};

static const struct spy_tracer_ops live_tracer = {
	.attach = live_attach,
	.pause = live_pause,
	.resume = live_resume,
	.track = live_track,
	.stop_thread = live_stop_thread,
	.resume_thread = live_resume_thread,
	.poll = live_poll,
	.traces_only = live_traces_only,
	.tids = live_tids,
	.detach = live_detach,
	.alive = live_alive,
	.exit_status = live_exit_status,
	.execed = live_execed,
	.same_image = live_same_image,
	.fresh_view = live_fresh_view,
	.end_view = live_end_view,
	.read_maps = live_read_maps,
	.resources = live_resources,
	.task_open = live_task_open,
	.task_refresh = proc_task_refresh,
	.task_settle = proc_task_settle,
	.task_still = proc_task_still,
	.task_close = proc_task_close,
	.task_name = live_task_name,
	.task_cpu = live_task_cpu,
	.task_blocked_at = live_task_blocked_at,
	.descendants = live_descendants,
	.exe_of = live_exe_of,
	.thread_wait = live_thread_wait,
	.ns_pid = live_ns_pid,
	.host_tid = live_host_tid,
};

/* ---- core ---- */

static pid_t core_pid_op(const struct spy_process *p)
{
	return core_pid(p->impl);
}

static const char *core_cmdline_op(const struct spy_process *p)
{
	return core_cmdline(p->impl);
}

static const char *core_exe_op(const struct spy_process *p)
{
	return core_exe(p->impl);
}

static const struct spy_mem *core_mem_op(const struct spy_process *p)
{
	return core_mem(p->impl);
}

static int core_open_mapped(const struct spy_process *p, const char *path)
{
	return core_open_file(p->impl, path);
}

/* Its notes: NT_PRSTATUS per thread, with what each waited on from its registers. */
static long core_threads_op(struct spy_process *p, struct proc_thread *out, size_t max,
			    struct spy_err *err)
{
	size_t n = 0;
	const struct proc_thread *t = core_threads(p->impl, &n);
	n = n < max ? n : max;
	memcpy(out, t, n * sizeof(*out));
	return (long)n;
}

static const struct spy_regs *core_regs_op(const struct spy_process *p, pid_t tid, uint64_t *pac_mask)
{
	return core_regs(p->impl, tid, pac_mask);
}

static int core_root_op(const struct spy_process *p)
{
	return core_root(p->impl);
}

static const struct spy_process_ops core_ops = {
	.kind = "core file",
	.pid = core_pid_op,
	.cmdline = core_cmdline_op,
	.exe = core_exe_op,
	.mem = core_mem_op,
	.open_mapped = core_open_mapped,
	.threads = core_threads_op,
	.saved_regs = core_regs_op,
	.user_root = core_root_op,
};

/* ---- opening ---- */

int spy_process_open_pid(struct spy_process *out, pid_t pid, struct spy_err *err)
{
	struct proc *p = NULL;
	int rc = proc_open(&p, pid, err);
	if (rc < 0) {
		return rc;
	}
	*out = (struct spy_process){ &live_ops, &live_tracer, p };
	return 0;
}

int spy_process_open_core(struct spy_process *out, const char *path, const char *exe, const char *root,
			  struct spy_err *err)
{
	struct core *c = NULL;
	int rc = core_open(&c, path, exe, root, err);
	if (rc < 0) {
		return rc;
	}
	*out = (struct spy_process){ &core_ops, NULL, c };
	return 0;
}

void spy_process_prefetch(struct spy_process *p, bool on)
{
	if (p->ops == &live_ops) {
		proc_mem_prefetch(live(p), on);
	}
}

void spy_process_trim(struct spy_process *p)
{
	if (p->ops == &live_ops) {
		proc_mem_trim(live(p));
	}
}

void spy_process_close(struct spy_process *p)
{
	if (p->ops == &live_ops) {
		proc_free(p->impl);
	} else if (p->ops == &core_ops) {
		core_free(p->impl);
	}
	memset(p, 0, sizeof(*p));
}

void spy_process_log_stats(const struct spy_process *p)
{
	if (p->ops != &live_ops) {
		return;
	}
	struct proc_mem_stats ms;
	proc_mem_stats(live(p), &ms);
	spy_log(SPY_LOG_DEBUG,
		"process %d memory: %llu reads, %llu hits, %llu misses, "
		"%llu uncached, %llu lines prefetched, %llu syscalls, %llu lines trimmed",
		(int)proc_pid(live(p)), (unsigned long long)ms.reads, (unsigned long long)ms.hits,
		(unsigned long long)ms.misses, (unsigned long long)ms.uncached,
		(unsigned long long)ms.prefetched, (unsigned long long)ms.syscalls,
		(unsigned long long)ms.trimmed);
}
