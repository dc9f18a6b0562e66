/*
 * A target in another PID namespace (a container's, `unshare -p`'s)
 * numbers its threads its own way: CPython's native_thread_id and glibc's
 * struct pthread hold TIDs of that namespace, where /proc, ptrace and
 * tgkill take spy's. Each task's status says both (NSpid: spy's procfs's
 * number first, the innermost namespace's last); a target in spy's own
 * namespace has one number and costs nothing more.
 */
#include <stdio.h>

#include "common/hashmap.h"
#include "common/log.h"
#include "sampler/internal.h"

/* The table is read again for a TID it lacks (a new thread) at most this often. */
#define NS_REREAD_NS (100 * 1000 * 1000ull)

void proc_ns_init(struct proc *p)
{
	pid_t first = 0, last = 0;
	p->ns_pid = p->pid;
	if (procfs_nspid(p->dirfd, "status", &first, &last) > 1) {
		p->ns_other = true;
		p->ns_pid = last;
		spy_log(SPY_LOG_DEBUG, "process %d is process %d of its own PID namespace: its TIDs are translated",
			(int)p->pid, (int)last);
	}
}

void proc_ns_free(struct proc *p)
{
	spy_hmap_release(&p->ns_tids);
}

pid_t proc_ns_pid(const struct proc *p)
{
	return p->ns_pid;
}

static void ns_read(struct proc *p)
{
	size_t n = 0;
	spy_hmap_clear(&p->ns_tids);
	if (procfs_list_tids(p, &n) < 0) {
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char name[64];
		pid_t first = 0, last = 0;
		snprintf(name, sizeof(name), "task/%d/status", (int)p->tids[i]);
		if (procfs_nspid(p->dirfd, name, &first, &last) > 0) {
			spy_hmap_put(&p->ns_tids, (uint64_t)last, (uint64_t)p->tids[i]);
		}
	}
}

pid_t proc_host_tid(struct proc *p, pid_t tid)
{
	if (!p->ns_other || tid <= 0) {
		return tid;
	}
	uint64_t v = spy_hmap_get(&p->ns_tids, (uint64_t)tid);
	if (v == SPY_HMAP_NONE) {
		uint64_t now = spy_now_ns();
		if (p->ns_read_ns && now - p->ns_read_ns < NS_REREAD_NS) {
			return 0;
		}
		p->ns_read_ns = now;
		ns_read(p);
		v = spy_hmap_get(&p->ns_tids, (uint64_t)tid);
	}
	return v == SPY_HMAP_NONE ? 0 : (pid_t)v;
}
