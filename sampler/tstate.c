/*
 * What a thread is blocked in, for dump: its state letter, the syscall it
 * sleeps in (/proc/PID/task/TID/syscall: the number and raw arguments) and
 * its wchan. A futex wait is reported with the futex word's address, the
 * one fact that tells a thread waiting for the GIL (a futex inside the GIL's
 * mutex or condition variable) from one waiting on any other lock; deciding
 * which is the caller's business, since only pystate knows where the GIL is.
 *
 * Read before the target is paused: a ptrace stop interrupts the syscall,
 * and a stopped thread reads as 't' with nothing to say about its wait.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sampler/internal.h"

/* futex(2) operations that block the caller (op & FUTEX_CMD_MASK). */
static bool futex_op_waits(uint64_t op)
{
	switch (op & 127) {
	case 0:  /* FUTEX_WAIT */
	case 6:  /* FUTEX_LOCK_PI */
	case 9:  /* FUTEX_WAIT_BITSET */
	case 11: /* FUTEX_WAIT_REQUEUE_PI */
	case 13: /* FUTEX_LOCK_PI2 */
		return true;
	default:
		return false;
	}
}

void proc_classify_wait(char state, const char *syscall_text, struct spy_wait *out)
{
	uint64_t args[2] = { 0, 0 };
	char *end;
	out->state = state;
	out->nr = -1;
	out->futex = 0;
	if (!state) {
		out->kind = SPY_WAIT_UNKNOWN;
		return;
	}
	out->kind = state == 'R' ? SPY_WAIT_RUNNING : SPY_WAIT_OTHER;
	/* "running", or "-1 SP PC" outside a syscall, or "NR ARG1..ARG6 SP PC". */
	if (!syscall_text || !*syscall_text || !strncmp(syscall_text, "running", 7)) {
		return;
	}
	long nr = strtol(syscall_text, &end, 10);
	if (end == syscall_text) {
		return;
	}
	out->nr = nr;
	const char *p = end;
	for (int i = 0; i < 2; i++) {
		args[i] = strtoull(p, &end, 16);
		if (end == p) {
			return;
		}
		p = end;
	}
	if (nr == SYS_futex && futex_op_waits(args[1]) && state != 'R') {
		out->kind = SPY_WAIT_FUTEX;
		out->futex = args[0];
	}
}

static void read_task_text(const struct proc *p, pid_t tid, const char *name, char *buf,
			   size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "task/%d/%s", (int)tid, name);
	int fd = openat(p->dirfd, path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
	buf[n > 0 ? n : 0] = '\0';
	if (fd >= 0) {
		close(fd);
	}
}

void proc_task_wait(const struct proc *p, pid_t tid, struct spy_wait *out)
{
	char stat[512], sys[256];
	read_task_text(p, tid, "stat", stat, sizeof(stat));
	read_task_text(p, tid, "syscall", sys, sizeof(sys));
	proc_classify_wait(proc_parse_stat_state(stat, strlen(stat)), sys, out);
	char wchan[sizeof(out->wchan)];
	read_task_text(p, tid, "wchan", wchan, sizeof(wchan));
	proc_wait_note_wchan(out, wchan);
}

int proc_parse_blocked_at(const char *text, spy_addr_t *sp, spy_addr_t *pc)
{
	char *end;
	long nr = strtol(text, &end, 10);
	if (end == text || nr < 0) {
		return 0;
	}
	uint64_t v[8];
	const char *p = end;
	for (int i = 0; i < 8; i++) {
		v[i] = strtoull(p, &end, 16);
		if (end == p) {
			return 0;
		}
		p = end;
	}
	*sp = v[6];
	*pc = v[7];
	return 1;
}

int proc_task_blocked_at(const struct proc *p, pid_t tid, spy_addr_t *sp, spy_addr_t *pc)
{
	char sys[256];
	read_task_text(p, tid, "syscall", sys, sizeof(sys));
	return proc_parse_blocked_at(sys, sp, pc);
}

void proc_wait_note_wchan(struct spy_wait *w, const char *wchan)
{
	snprintf(w->wchan, sizeof(w->wchan), "%s", strcmp(wchan, "0") ? wchan : "");
	/*
	 * A wait that a ptrace stop interrupted (a pause of ours, an earlier
	 * dump's) goes on in restart_syscall, whose arguments say nothing;
	 * the kernel function it sleeps in still tells a futex wait, though
	 * not on which futex (futex stays 0).
	 */
	if (w->nr == SYS_restart_syscall && w->state && w->state != 'R' &&
	    !strncmp(w->wchan, "futex", 5)) {
		w->kind = SPY_WAIT_FUTEX;
		w->futex = 0;
	}
}
