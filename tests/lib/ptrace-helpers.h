/*
 * Helpers for the sampler tests that trace children they fork: whether this
 * machine lets us trace at all (else the test exits 77, saying why), and a
 * seccomp filter that refuses process_vm_readv the way some containers do,
 * to drive the /proc/PID/mem fallback. Header-only, like check.h.
 */
#ifndef SPY_TESTS_PTRACE_HELPERS_H
#define SPY_TESTS_PTRACE_HELPERS_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Can we PTRACE_SEIZE a child of ours? errno says why not. */
static inline bool test_ptrace_permitted(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		pause();
		_exit(0);
	}
	bool ok = ptrace(PTRACE_SEIZE, pid, NULL, NULL) == 0;
	int e = errno;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	errno = e;
	return ok;
}

/*
 * Make process_vm_readv fail with ENOSYS in this process for good (a filter
 * cannot be removed): call it only in a forked helper. false if refused.
 */
static inline bool test_refuse_process_vm_readv(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(filter) / sizeof(filter[0]), filter };
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

#endif
