/*
 * Unit tests for sampler's ptrace control: seizing, pausing and resuming,
 * signals that arrive meanwhile, detaching, and reading memory when
 * process_vm_readv is refused, against children forked by
 * tests/lib/ptrace-child.h. test-sampler-ptrace-life.c has the tests of
 * lives that end or change under the tracer.
 *
 * Skips (exit 77) when ptrace is not permitted here.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/util.h"
#include "sampler/sampler.h"
#include "tests/lib/check.h"
#include "tests/lib/ptrace-child.h"
#include "tests/lib/ptrace-helpers.h"


static void test_open_errors(void)
{
	struct proc *p = (struct proc *)&p;
	struct spy_err err = SPY_ERR_INIT;
	/* Above any pid_max (at most 2^22), so never a process. */
	CHECK_INT(proc_open(&p, INT_MAX, &err), -SPY_ENOPROC);
	CHECK_INT(err.code, SPY_ENOPROC);
	CHECK(strstr(err.msg, "not found") != NULL);
	CHECK(p == NULL);
	CHECK_INT(proc_open(&p, 0, NULL), -SPY_ENOPROC);
	CHECK_INT(proc_open(&p, -1, NULL), -SPY_ENOPROC);
	proc_free(NULL);

	/* A zombie has a /proc entry but nothing to sample. */
	pid_t pid = fork();
	if (pid == 0) {
		_exit(0);
	}
	siginfo_t si;
	CHECK_INT(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	CHECK_INT(proc_open(&p, pid, &err), -SPY_ENOPROC);
	CHECK(strstr(err.msg, "exited") != NULL);
	waitpid(pid, NULL, 0);
}

static void test_identity(struct child *c, struct proc *p)
{
	CHECK_INT(proc_pid(p), c->pid);
	CHECK(strstr(proc_cmdline(p), "test-sampler-ptrace") != NULL);
	const char *exe = proc_exe(p);
	size_t n = strlen(exe);
	CHECK(n > 19 && !strcmp(exe + n - 19, "test-sampler-ptrace"));
	CHECK(proc_mem(p)->nmaps > 0);
	CHECK(read_u64(p, &child_magic) == 0x5350595350595350ull);

	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(proc_list_threads(p, &err), 0);
	size_t nt;
	const struct proc_thread *t = proc_threads(p, &nt);
	CHECK_INT(nt, 2);
	if (nt == 2) {
		CHECK_INT(t[0].tid, c->pid);
		CHECK(t[1].tid > t[0].tid);
		CHECK_INT(t[0].state, 'R');
		CHECK_STR(t[1].comm, "sleeper");
		/* it sleeps, but may be caught just awake */
		CHECK(t[1].state == 'S' || t[1].state == 'R');
	}
	/* Unmapped memory is a failed read, not a crash. */
	uint64_t v;
	CHECK_INT(spy_mem_read(proc_mem(p), 8, &v, sizeof(v)), -SPY_EMEM);
	CHECK_INT(spy_mem_read(proc_mem(p), UINT64_MAX - 3, &v, sizeof(v)), -SPY_EMEM);
}

static void test_pause_resume(struct child *c, struct proc *p)
{
	struct spy_err err = SPY_ERR_INIT;

	CHECK_INT(proc_attach(p, &err), 0);
	CHECK_INT(proc_attach(p, &err), 0);
	CHECK(!proc_is_paused(p));
	CHECK(none_stopped(c->pid));

	for (int round = 0; round < 20; round++) {
		CHECK_INT(proc_pause(p, &err), 0);
		CHECK(proc_is_paused(p));
		CHECK(all_stopped(c->pid));
		/* Stopped means the busy loop's counter holds still. */
		uint64_t a = read_u64(p, &child_counter);
		sleep_ms(round == 0 ? 20 : 1);
		uint64_t b = read_u64(p, &child_counter);
		CHECK(a == b);
		CHECK(read_u64(p, &child_magic) == 0x5350595350595350ull);
		CHECK_INT(proc_pause(p, &err), 0);

		CHECK_INT(proc_resume(p, &err), 0);
		CHECK(!proc_is_paused(p));
		CHECK(none_stopped(c->pid));
		CHECK_INT(proc_resume(p, &err), 0);
	}
	CHECK(child_runs(p, 2000));
}

/* The race of the file comment in ptrace.c, and its neighbours. */
static void test_signals(struct child *c, struct proc *p)
{
	struct spy_err err = SPY_ERR_INIT;
	struct task_census tc;

	/*
	 * 1. A signal sent while paused cannot be taken until we resume; the
	 *    thread that dequeues it then stops for us, and proc_poll delivers it.
	 */
	CHECK_INT(proc_pause(p, &err), 0);
	kill(c->pid, SIGUSR1);
	sleep_ms(20);
	CHECK(all_stopped(c->pid));
	CHECK_INT(read_int(p, &child_usr1), 0);
	CHECK_INT(proc_resume(p, &err), 0);
	CHECK_INT(child_report_polling(c, p, 2000), 1);
	CHECK(none_stopped(c->pid));

	/*
	 * 2. A signal that arrives while the target runs leaves the receiving
	 *    thread in a signal-delivery-stop; the next pause must find it,
	 *    deliver the signal, and leave no interrupt behind to stop the
	 *    thread again after resume.
	 */
	kill(c->pid, SIGUSR1);
	CHECK(some_stopped(c->pid));
	census(c->pid, &tc);
	CHECK_INT(tc.stopped, 1);
	CHECK_INT(proc_pause(p, &err), 0);
	CHECK(all_stopped(c->pid));
	CHECK_INT(proc_resume(p, &err), 0);
	CHECK_INT(child_report(c, 2000), 2);
	CHECK(none_stopped(c->pid));

	/*
	 * 3. The same with the signal racing the interrupt itself: it may be
	 *    taken before the interrupt, be caught in its delivery-stop by
	 *    pause, or still be pending at resume. Each way it runs exactly once.
	 */
	for (int i = 0; i < 20; i++) {
		kill(c->pid, SIGUSR1);
		CHECK_INT(proc_pause(p, &err), 0);
		CHECK(all_stopped(c->pid));
		CHECK_INT(proc_resume(p, &err), 0);
		CHECK_INT(child_report_polling(c, p, 2000), 3 + i);
		CHECK(none_stopped(c->pid));
	}
	CHECK_INT(read_int(p, &child_usr1), c->last_report);
}

static void test_stop_flag(struct child *c, struct proc *p)
{
	struct spy_err err = SPY_ERR_INIT;
	struct sigaction old;

	proc_install_stop_handlers();
	CHECK_INT(sigaction(SIGINT, NULL, &old), 0);
	CHECK(old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN);
	CHECK(!(old.sa_flags & SA_RESTART));
	CHECK_INT(sigaction(SIGTERM, NULL, &old), 0);
	CHECK(!(old.sa_flags & SA_RESTART));
	raise(SIGTERM);
	CHECK_INT(proc_stop_requested, SIGTERM);

	CHECK_INT(proc_pause(p, &err), -SPY_EINTR);
	CHECK_INT(err.code, SPY_EINTR);
	CHECK(!proc_is_paused(p));
	CHECK(none_stopped(c->pid));
	proc_stop_requested = 0;
	CHECK_INT(proc_pause(p, &err), 0);
	CHECK_INT(proc_resume(p, &err), 0);

	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
}

static void test_second_tracer(struct child *c, struct proc *p)
{
	struct spy_err err = SPY_ERR_INIT;
	struct proc *q;

	CHECK_INT(proc_open(&q, c->pid, &err), 0);
	CHECK_INT(proc_attach(q, &err), -SPY_EPERM);
	CHECK_INT(err.code, SPY_EPERM);
	CHECK(strstr(err.msg, "already traced") != NULL);
	CHECK(err.remedy[0] != '\0');
	proc_free(q);
	/* The failed attach must not have touched the first tracer's threads. */
	CHECK_INT(proc_pause(p, &err), 0);
	CHECK(all_stopped(c->pid));
	CHECK_INT(proc_resume(p, &err), 0);
}

static void test_detach(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct child c;
	struct proc *p;

	CHECK_INT(child_start(&c, CHILD_PLAIN), 0);
	CHECK_INT(proc_open(&p, c.pid, &err), 0);

	/* Detach while paused, with a signal pending: it must arrive. */
	CHECK_INT(proc_attach(p, &err), 0);
	CHECK_INT(proc_pause(p, &err), 0);
	kill(c.pid, SIGUSR1);
	proc_detach(p);
	CHECK(!proc_is_paused(p));
	CHECK_INT(child_report(&c, 2000), 1);
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));
	proc_detach(p);

	/* Detach while running, with a thread sitting in a signal-delivery-stop. */
	CHECK_INT(proc_attach(p, &err), 0);
	kill(c.pid, SIGUSR1);
	CHECK(some_stopped(c.pid));
	proc_detach(p);
	CHECK_INT(child_report(&c, 2000), 2);
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));

	/* Detach while running, plain. */
	CHECK_INT(proc_attach(p, &err), 0);
	proc_detach(p);
	CHECK(none_traced(c.pid));

	/* proc_free of a paused proc detaches. */
	CHECK_INT(proc_attach(p, &err), 0);
	CHECK_INT(proc_pause(p, &err), 0);
	proc_free(p);
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));

	child_stop(&c);
}

/*
 * A seccomp filter (as some containers have) refuses process_vm_readv with
 * ENOSYS: proc_open must fall back to /proc/PID/mem. The filter cannot be
 * taken off again, so a helper process installs it and reports by exit code.
 */
static void test_mem_fallback(void)
{
	struct child c;
	CHECK_INT(child_start(&c, CHILD_PLAIN), 0);
	fflush(stdout);
	pid_t helper = fork();
	if (helper == 0) {
		if (!test_refuse_process_vm_readv()) {
			_exit(10);
		}
		uint64_t v = 0;
		struct iovec l = { &v, sizeof(v) }, r = { (void *)&child_magic, sizeof(v) };
		if (process_vm_readv(c.pid, &l, 1, &r, 1, 0) >= 0 || errno != ENOSYS) {
			_exit(11);
		}
		struct proc *p;
		if (proc_open(&p, c.pid, NULL) < 0) {
			_exit(12);
		}
		const struct spy_mem *m = proc_mem(p);
		if (spy_mem_read(m, (spy_addr_t)(uintptr_t)&child_magic, &v, sizeof(v)) < 0 ||
		    v != 0x5350595350595350ull) {
			_exit(13);
		}
		if (spy_mem_read(m, 8, &v, sizeof(v)) != -SPY_EMEM ||
		    spy_mem_read(m, UINT64_MAX - 3, &v, sizeof(v)) != -SPY_EMEM) {
			_exit(14);
		}
		proc_free(p);
		_exit(0);
	}
	int st = -1;
	CHECK_INT(waitpid(helper, &st, 0), helper);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
	child_stop(&c);
}
int main(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct child c;
	struct proc *p;

	spy_log_init_from_env();
	test_open_errors();
	if (!test_ptrace_permitted()) {
		printf("skipped: ptrace is not permitted here (%s)\n", strerror(errno));
		return 77;
	}
	if (child_start(&c, CHILD_PLAIN) < 0) {
		fprintf(stderr, "cannot start the child\n");
		return 1;
	}
	int rc = proc_open(&p, c.pid, &err);
	CHECK_INT(rc, 0);
	if (rc == 0) {
		test_identity(&c, p);
		test_pause_resume(&c, p);
		test_signals(&c, p);
		test_stop_flag(&c, p);
		test_second_tracer(&c, p);
		proc_detach(p);
		CHECK(none_stopped(c.pid));
		CHECK(none_traced(c.pid));
		proc_detach(p);
		proc_free(p);
	}
	child_stop(&c);

	test_detach();
	test_mem_fallback();
	return check_done();
}
