/*
 * sampler: reaching a live target. A struct proc is one process: its
 * identity (/proc/PID/{cmdline,exe,root}), its mappings, its threads, a
 * struct spy_mem that reads its memory (process_vm_readv, falling back to
 * /proc/PID/mem), and ptrace control to pause and resume every thread.
 *
 * Ptrace discipline: threads are attached with PTRACE_SEIZE and stopped with
 * PTRACE_INTERRUPT, never PTRACE_ATTACH/SIGSTOP. ptrace(2) guarantees that
 * when the tracer dies its tracees are detached and restarted unless they are
 * in group-stop, and a SIGSTOP-based attach is how they would get there; so
 * even a SIGKILL of spy leaves the target running. SIGINT and SIGTERM only set
 * proc_stop_requested (see proc_install_stop_handlers); whoever holds a paused
 * proc checks it and calls proc_detach(), and proc_free() always detaches.
 */
#ifndef SPY_SAMPLER_SAMPLER_H
#define SPY_SAMPLER_SAMPLER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/mem.h"

struct proc;

struct proc_thread {
	pid_t tid;
	char state;      /* the state letter of /proc/PID/task/TID/stat: R, S, D, t, ... */
	char comm[17];   /* /proc/PID/task/TID/comm, without the newline */
};

/* Set by the SIGINT/SIGTERM handler; the one stop flag spy allows. */
extern volatile sig_atomic_t proc_stop_requested;

/*
 * Install SIGINT and SIGTERM handlers that only set proc_stop_requested.
 * Installed without SA_RESTART so that a blocking wait returns EINTR and the
 * caller can notice the flag.
 */
void proc_install_stop_handlers(void);

/*
 * Open pid: check that it exists (else -SPY_ENOPROC), read its command line,
 * executable and mappings, and check that its memory can be read (else
 * -SPY_EPERM with a remedy naming ptrace_scope / CAP_SYS_PTRACE).
 */
int proc_open(struct proc **out, pid_t pid, struct spy_err *err);
/* Detach from every thread if attached, then free. NULL is a no-op. */
void proc_free(struct proc *p);

pid_t proc_pid(const struct proc *p);
/* The arguments joined by single spaces ("" for kernel threads). */
const char *proc_cmdline(const struct proc *p);
/* readlink(/proc/PID/exe), " (deleted)" stripped; "" if unreadable. */
const char *proc_exe(const struct proc *p);
/* "/proc/PID/root": prefix for opening the target's files from its own mount namespace. */
const char *proc_root(const struct proc *p);

/*
 * The memory reader. Valid until proc_free(); its maps are the ones read by
 * the last proc_open()/proc_read_maps().
 */
const struct spy_mem *proc_mem(const struct proc *p);
int proc_read_maps(struct proc *p, struct spy_err *err);

/* Re-read the thread list from /proc/PID/task (tids ascending). */
int proc_list_threads(struct proc *p, struct spy_err *err);
/* The list read by the last proc_list_threads(); valid until the next call. */
const struct proc_thread *proc_threads(const struct proc *p, size_t *n);
/* Re-read one thread's state letter and comm; -SPY_EGONE if it exited. */
int proc_thread_refresh(struct proc *p, struct proc_thread *t);

/* PTRACE_SEIZE every thread. -SPY_EPERM (with remedy) if refused. */
int proc_attach(struct proc *p, struct spy_err *err);
/*
 * Stop every seized thread (PTRACE_INTERRUPT, then wait for each stop).
 * Threads that appear while pausing are seized and stopped too; threads that
 * exit are dropped. Returns -SPY_EINTR if proc_stop_requested was set while
 * waiting (the threads are then resumed before returning).
 */
int proc_pause(struct proc *p, struct spy_err *err);
/* Restart every stopped thread, re-delivering any signal that arrived while it was stopped. */
int proc_resume(struct proc *p, struct spy_err *err);
/* Detach from every thread (resuming any that is stopped). Idempotent. */
void proc_detach(struct proc *p);
bool proc_is_paused(const struct proc *p);

/* Parse the text of /proc/.../stat: state letter, or 0 if malformed. Exposed for unit tests. */
char proc_parse_stat_state(const char *text, size_t len);
/*
 * Parse /proc/PID/maps text into a sorted array of spy_map (paths copied into
 * *paths_out storage owned by the caller, freed with free()). Exposed for unit
 * tests. Returns number of maps or a negative code.
 */
int proc_parse_maps(const char *text, size_t len, struct spy_map **maps_out, size_t *n_out,
		    char **paths_out, struct spy_err *err);

#endif
