/*
 * The process handle: how the layer above reaches one process, live or a
 * core, without knowing which. Two tables. The first, struct
 * spy_process_ops, holds what every backend does (a live process, a core,
 * a test's fake): who it is, its memory, its threads, the files it maps.
 * The second, struct spy_tracer_ops, holds what only a process that runs
 * has: seizing, stopping and watching it. A core has none (tracer NULL),
 * and spy_process_can() says so instead of a rule in each command.
 */
#ifndef SPY_SAMPLER_PROCESS_H
#define SPY_SAMPLER_PROCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/mem.h"
#include "sampler/sampler.h"

struct spy_process;

/* What every backend implements; no member is NULL. */
struct spy_process_ops {
	const char *kind;   /* "process", "core file": for messages */
	/* Its pid (a core's: of the process that dumped it). */
	pid_t (*pid)(const struct spy_process *p);
	/* Its command line, for display (spaces between arguments). */
	const char *(*cmdline)(const struct spy_process *p);
	/* Its executable's path as it saw it; "" if unknown. */
	const char *(*exe)(const struct spy_process *p);
	/* Its memory and maps, valid for the handle's life (a live process's re-read in place). */
	const struct spy_mem *(*mem)(const struct spy_process *p);
	/* A file it maps at offset 0, opened the one safe way for the backend (common/mapfile.h, core_open_file): an fd, or -errno. */
	int (*open_mapped)(const struct spy_process *p, const char *path);
	/* Every thread, at most max, with its wait (a live one's read now: before any stop); < 0 if unreadable. */
	long (*threads)(struct spy_process *p, struct proc_thread *out, size_t max, struct spy_err *err);
	/*
	 * Thread tid's registers as the backend keeps them (a core's
	 * NT_PRSTATUS, common/arch.h), with *pac_mask the bits of its code
	 * addresses that carry an authentication code; NULL where there are
	 * none kept (a live thread's are read by ptrace while it is held).
	 */
	const struct spy_regs *(*saved_regs)(const struct spy_process *p, pid_t tid, uint64_t *pac_mask);
	/* The root its paths live in as the user named it (a core's --root): a borrowed O_PATH descriptor, or -1 (none named; a live process has /proc/PID/root). */
	int (*user_root)(const struct spy_process *p);
};

/*
 * What only a running process has (see sampler.h for each proc_ call the
 * live backend maps these to). Every member is required: each tracer (the
 * live backend, the tests' fake) sets all of them, a no-op where it has
 * nothing to do, and no caller checks one for NULL. What may be absent is
 * the table itself (spy_process.tracer), for a process that does not run.
 */
struct spy_tracer_ops {
	/* Seize every thread; -SPY_EPERM with a remedy if refused. */
	int (*attach)(struct spy_process *p, struct spy_err *err);
	/* Stop every thread: 0, -SPY_EINTR (stop requested), -SPY_EGONE, other < 0 (err may be NULL). */
	int (*pause)(struct spy_process *p, struct spy_err *err);
	void (*resume)(struct spy_process *p);
	/* Once a tick before stop_thread: restart self-stopped threads, seize new ones; -SPY_EGONE once gone. */
	int (*track)(struct spy_process *p);
	/* Hold tid alone: 0, 1 (off a CPU, held as it is after wait_ns), -SPY_ENOPROC, -SPY_EGONE, -SPY_EINTR, other < 0. */
	int (*stop_thread)(struct spy_process *p, pid_t tid, uint64_t wait_ns);
	void (*resume_thread)(struct spy_process *p);
	/* Attached, between stops: let self-stopped threads go on; -SPY_EGONE once gone. */
	int (*poll)(struct spy_process *p);
	/* Whether the threads seized are exactly tids, none stopped or owed a signal (proc_traces_only). */
	bool (*traces_only)(struct spy_process *p, const pid_t *tids, size_t n);
	/* The threads seized, Python or not (proc_tids): at most max into out. */
	size_t (*tids)(const struct spy_process *p, pid_t *out, size_t max);
	void (*detach)(struct spy_process *p);
	/* Not attached: whether it still runs (one cheap read). */
	bool (*alive)(struct spy_process *p);
	/* The exit status reaped while tracing. */
	bool (*exit_status)(const struct spy_process *p, int *status);
	/* Whether it exec'd while traced. */
	bool (*execed)(const struct spy_process *p);
	/* Whether no exec replaced the image it had when opened, traced or not (proc_same_image). */
	bool (*same_image)(const struct spy_process *p);
	/*
	 * A fresh memory view: tid 0, for a walk of the running process (its
	 * prefetch, the last such view's lines); a TID, for that thread alone
	 * (the lines its last view read, as when it is held).
	 */
	void (*fresh_view)(struct spy_process *p, pid_t tid);
	/* No view: each read goes to the target until the next (proc_mem_uncached). */
	void (*end_view)(struct spy_process *p);
	void (*read_maps)(struct spy_process *p);
	/* CPU time, RSS, threads, switches and I/O now. */
	void (*resources)(struct spy_process *p, struct proc_resources *out);
	/* A thread's state watched across ticks (struct proc_task); its kernel name. */
	void (*task_open)(const struct spy_process *p, struct proc_task *t, pid_t tid);
	void (*task_refresh)(struct proc_task *t, unsigned how);   /* PROC_TASK_CPU, PROC_TASK_DEFER */
	void (*task_settle)(struct proc_task *t, bool runs);
	bool (*task_still)(struct proc_task *t);
	void (*task_close)(struct proc_task *t);
	void (*task_name)(const struct spy_process *p, pid_t tid, char *buf, size_t size);
	/* A thread's CPU time (utime + stime, ns) from its stat; < 0 if unread. */
	int (*task_cpu)(const struct spy_process *p, pid_t tid, uint64_t *ns);
	/* Where a thread sleeps in a syscall (proc_task_blocked_at): 1, else 0. */
	int (*task_blocked_at)(const struct spy_process *p, pid_t tid, spy_addr_t *sp, spy_addr_t *pc);
	/* -s: every descendant's pid (into *out, free()); a pid's executable, to notice an exec. */
	size_t (*descendants)(const struct spy_process *p, pid_t **out);
	void (*exe_of)(const struct spy_process *p, pid_t pid, char *buf, size_t size);
	/* Look again at one thread's wait. */
	void (*thread_wait)(const struct spy_process *p, pid_t tid, struct spy_wait *out);
	/*
	 * In another PID namespace (a container's): its pid and its threads'
	 * TIDs as it numbers them, which its memory holds, and a TID of its to
	 * spy's (0: none); in spy's, the same numbers.
	 */
	pid_t (*ns_pid)(const struct spy_process *p);
	pid_t (*host_tid)(struct spy_process *p, pid_t tid);
};

struct spy_process {
	const struct spy_process_ops *ops;
	const struct spy_tracer_ops *tracer;   /* NULL: it does not run (a core) */
	void *impl;   /* the backend's: struct proc, struct core, a test's fake */
};

/* Open pid (live) or a core file (see core_open) into a handle; spy_process_close frees it. */
int spy_process_open_pid(struct spy_process *out, pid_t pid, struct spy_err *err);
/* A live process's memory reads fetch the lines a walk goes on to need (see proc_mem_prefetch); nothing for others. */
void spy_process_prefetch(struct spy_process *p, bool on);
/* A live process's memory cache gives back what no read used since the last call (proc_mem_trim); nothing for others. */
void spy_process_trim(struct spy_process *p);
int spy_process_open_core(struct spy_process *out, const char *path, const char *exe, const char *root,
			  struct spy_err *err);
void spy_process_close(struct spy_process *p);
/* Log the memory cache's counters (debug); nothing for a core or a fake. */
void spy_process_log_stats(const struct spy_process *p);

#endif
