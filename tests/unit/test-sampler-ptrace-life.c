/*
 * Unit tests for sampler's ptrace control when lives end or change under
 * the tracer: the tracer exiting, job control stops, a main thread that
 * exits first, threads that come and go, the target exiting, a thread
 * held off its CPU, and SIGCHLD held by the sampling thread. The
 * children are tests/lib/ptrace-child.h's.
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

/* A real-time spinner on one CPU, so that a thread kept to that CPU cannot run. */
static volatile int spin_stop;

static void *rt_spin(void *arg)
{
	uint64_t until = *(const uint64_t *)arg;
	struct timespec ts;
	do {
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (!spin_stop && (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec < until);
	return NULL;
}

/*
 * A SCHED_FIFO thread of ours spinning on CPU 0 for at most ms (until
 * spin_stop): a thread kept to CPU 0 cannot run meanwhile. 0 or an errno.
 */
static int start_spinner(pthread_t *spinner, uint64_t *until, int ms)
{
	cpu_set_t cpu0;
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	pthread_attr_t attr;
	struct sched_param prio = { .sched_priority = 1 };
	pthread_attr_init(&attr);
	pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
	pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
	pthread_attr_setschedparam(&attr, &prio);
	pthread_attr_setaffinity_np(&attr, sizeof(cpu0), &cpu0);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	*until = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000ull;
	spin_stop = 0;
	int rc = pthread_create(spinner, &attr, rt_spin, until);
	pthread_attr_destroy(&attr);
	return rc;
}

/*
 * proc_stop_thread with a wait: a thread that cannot get a CPU (kept to
 * CPU 0, where a SCHED_FIFO thread of ours spins) is not stopped within
 * it, and is held as it is (1): it runs nothing meanwhile, is not
 * restarted by proc_resume_thread (it never stopped), and once it gets a
 * CPU it stops and a poll restarts it. Needs two CPUs and the right to
 * real-time scheduling; says why it skips otherwise.
 */
static void test_offcpu_hold(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct child c;
	struct proc *p;
	cpu_set_t cpu0, cpu1;
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	CPU_ZERO(&cpu1);
	CPU_SET(1, &cpu1);
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("skip: off-CPU hold needs two CPUs\n");
		return;
	}
	if (child_start(&c, CHILD_PLAIN) < 0 || proc_open(&p, c.pid, &err) < 0) {
		CHECK(!"cannot start the child");
		child_stop(&c);
		return;
	}
	CHECK_INT(proc_attach(p, &err), 0);
	cpu_set_t mine;
	CHECK_INT(sched_getaffinity(0, sizeof(mine), &mine), 0);
	CHECK_INT(sched_setaffinity(c.pid, sizeof(cpu0), &cpu0), 0);
	CHECK_INT(sched_setaffinity(0, sizeof(cpu1), &cpu1), 0);
	pthread_t spinner;
	uint64_t until;
	int rc = start_spinner(&spinner, &until, 300);
	if (rc != 0) {
		printf("skip: off-CPU hold needs SCHED_FIFO (%s)\n", strerror(rc));
	} else {
		sleep_ms(20);
		uint64_t a = read_u64(p, &child_counter);
		CHECK_INT(proc_stop_thread(p, c.pid, 1000 * 1000), 1);
		sleep_ms(10);
		CHECK(read_u64(p, &child_counter) == a);
		proc_resume_thread(p);
		/* Still off its CPU, still interrupted: held as it is again, without a wait. */
		CHECK_INT(proc_stop_thread(p, c.pid, 1000 * 1000), 1);
		proc_resume_thread(p);
		sleep_ms(10);
		CHECK(read_u64(p, &child_counter) == a);
		spin_stop = 1;
		pthread_join(spinner, NULL);
		/* Its CPU back, it stops; a poll restarts it. */
		CHECK(child_runs(p, 500));
		/* And a thread that gets its CPU is stopped as before. The wait is
		 * long: on a loaded machine "at once" can be milliseconds. */
		CHECK_INT(proc_stop_thread(p, c.pid, 200 * 1000 * 1000), 0);
		proc_resume_thread(p);
		CHECK(child_runs(p, 500));
		/* Detaching waits for a thread held off a CPU to stop, and lets it go. */
		if (start_spinner(&spinner, &until, 100) == 0) {
			sleep_ms(20);
			CHECK_INT(proc_stop_thread(p, c.pid, 1000 * 1000), 1);
			proc_resume_thread(p);
			proc_detach(p);
			CHECK(none_traced(c.pid));
			spin_stop = 1;
			pthread_join(spinner, NULL);
		}
	}
	sched_setaffinity(0, sizeof(mine), &mine);
	proc_detach(p);
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));
	proc_free(p);
	child_stop(&c);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool chld_blocked_here(void)
{
	sigset_t cur;
	return pthread_sigmask(SIG_BLOCK, NULL, &cur) == 0 && sigismember(&cur, SIGCHLD) == 1;
}

/*
 * SIGCHLD held (proc_chld_hold), as the profiler's sampling thread holds
 * it: a hold works as before; once drained, the SIGCHLD its stop raised
 * does not cut the next sleep short, which runs its length (1); a report
 * of the target's (a signal it was sent) ends the sleep at once (0), and
 * a poll delivers that signal; releasing unblocks SIGCHLD again, unless
 * it was blocked before.
 */
static void test_chld_held(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct child c;
	struct proc *p;
	if (child_start(&c, CHILD_PLAIN) < 0 || proc_open(&p, c.pid, &err) < 0) {
		CHECK(!"cannot start the child");
		child_stop(&c);
		return;
	}
	CHECK_INT(proc_attach(p, &err), 0);
	CHECK(!chld_blocked_here());
	CHECK(proc_chld_hold(true));
	CHECK(proc_chld_held() && chld_blocked_here());
	for (int i = 0; i < 3; i++) {
		CHECK_INT(proc_stop_thread(p, c.pid, 0), 0);
		proc_resume_thread(p);
	}
	/*
	 * A stop nobody waited for: the thread held off its CPU (as in
	 * test_offcpu_hold) stops once it gets it back, and its SIGCHLD
	 * stays pending until the drain.
	 */
	pthread_t spinner;
	uint64_t until;
	cpu_set_t mine, cpu0, cpu1;
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	CPU_ZERO(&cpu1);
	CPU_SET(1, &cpu1);
	CHECK_INT(sched_getaffinity(0, sizeof(mine), &mine), 0);
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("skip: SIGCHLD of a stop nobody waited for: needs two CPUs\n");
	} else if (sched_setaffinity(c.pid, sizeof(cpu0), &cpu0) != 0 ||
		   sched_setaffinity(0, sizeof(cpu1), &cpu1) != 0 || start_spinner(&spinner, &until, 300) != 0) {
		printf("skip: SIGCHLD of a stop nobody waited for: needs SCHED_FIFO and CPU affinity\n");
	} else {
		sleep_ms(20);
		CHECK_INT(proc_stop_thread(p, c.pid, 1000 * 1000), 1);
		proc_resume_thread(p);
		spin_stop = 1;
		pthread_join(spinner, NULL);
		sleep_ms(20);
	}
	sched_setaffinity(0, sizeof(mine), &mine);
	sched_setaffinity(c.pid, sizeof(mine), &mine);
	/* A stop's SIGCHLD may be raised just after waitpid saw the stop. */
	sleep_ms(5);
	proc_chld_drain();
	CHECK_INT(proc_poll(p), 0);
	CHECK(child_runs(p, 500));
	uint64_t t0 = mono_ns();
	CHECK_INT(proc_chld_sleep(20 * 1000 * 1000), 1);
	CHECK(mono_ns() - t0 >= 20 * 1000 * 1000);
	int before = read_int(p, &child_usr1);
	/*
	 * A look that found nothing stands for a while (LOOK_FRESH_NS), but
	 * not past a SIGCHLD the sleep took: the very next poll looks, and
	 * restarts the thread the signal stopped.
	 */
	CHECK_INT(proc_poll(p), 0);
	CHECK_INT(kill(c.pid, SIGUSR1), 0);
	t0 = mono_ns();
	CHECK_INT(proc_chld_sleep(2000ull * 1000 * 1000), 0);
	CHECK(mono_ns() - t0 < 1000ull * 1000 * 1000);
	CHECK_INT(proc_poll(p), 0);
	struct task_census tc;
	census(c.pid, &tc);
	CHECK_INT(tc.stopped, 0);
	CHECK(none_stopped_polling(c.pid, p));
	int after = before;
	for (int i = 0; i < 50 && after == before; i++) {
		sleep_ms(10);
		after = read_int(p, &child_usr1);
	}
	CHECK_INT(after, before + 1);
	/* A report whose SIGCHLD nobody took waits at most that while. */
	CHECK_INT(proc_poll(p), 0);
	CHECK_INT(kill(c.pid, SIGUSR1), 0);
	CHECK(some_stopped(c.pid));
	sleep_ms(2);
	CHECK_INT(proc_poll(p), 0);
	census(c.pid, &tc);
	CHECK_INT(tc.stopped, 0);
	before = after;
	for (int i = 0; i < 50 && after == before; i++) {
		sleep_ms(10);
		after = read_int(p, &child_usr1);
	}
	CHECK_INT(after, before + 1);
	proc_chld_drain();
	CHECK(!proc_chld_hold(false));
	CHECK(!proc_chld_held() && !chld_blocked_here());
	/* Blocked before: left blocked. */
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	CHECK_INT(pthread_sigmask(SIG_BLOCK, &chld, NULL), 0);
	CHECK(proc_chld_hold(true));
	CHECK(!proc_chld_hold(false));
	CHECK(chld_blocked_here());
	CHECK_INT(pthread_sigmask(SIG_UNBLOCK, &chld, NULL), 0);
	proc_detach(p);
	CHECK(none_traced(c.pid));
	proc_free(p);
	child_stop(&c);
}

/*
 * A helper process (a fork of this test, so the target is not its child)
 * attaches and pauses, then leaves by the given road without detaching.
 */
static void test_tracer_exit(int how)
{
	struct child c;
	CHECK_INT(child_start(&c, CHILD_PLAIN), 0);
	fflush(stdout);
	pid_t helper = fork();
	if (helper == 0) {
		struct proc *p;
		if (proc_open(&p, c.pid, NULL) < 0 || proc_attach(p, NULL) < 0 ||
		    proc_pause(p, NULL) < 0) {
			_exit(1);
		}
		if (how == 0) {
			exit(0);      /* the atexit() registry detaches */
		} else {
			raise(SIGKILL); /* the kernel detaches and restarts */
		}
		_exit(2);
	}
	int st;
	CHECK_INT(waitpid(helper, &st, 0), helper);
	if (how == 0) {
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	} else {
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	}
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));
	/* And it runs. */
	struct proc *p;
	CHECK_INT(proc_open(&p, c.pid, NULL), 0);
	CHECK(child_runs(p, 2000));
	proc_free(p);
	child_stop(&c);
}

/*
 * Job control while seized: SIGSTOP must stop the target for real (we resume
 * a group-stop with PTRACE_LISTEN, not PTRACE_CONT), SIGCONT must restart it,
 * and detaching from a stopped target must leave it stopped.
 */
static void test_job_control(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct task_census tc;
	struct child c;
	struct proc *p;

	CHECK_INT(child_start(&c, CHILD_PLAIN), 0);
	CHECK_INT(proc_open(&p, c.pid, &err), 0);
	CHECK_INT(proc_attach(p, &err), 0);

	/* SIGSTOP acts when a thread dequeues it, and that stops the thread for us first. */
	kill(c.pid, SIGSTOP);
	CHECK(some_stopped(c.pid));
	CHECK_INT(proc_pause(p, &err), 0);
	CHECK(all_stopped(c.pid));
	CHECK_INT(proc_resume(p, &err), 0);
	CHECK(!child_runs(p, 100));
	for (int i = 0; i < 5; i++) {
		CHECK_INT(proc_pause(p, &err), 0);
		CHECK_INT(proc_resume(p, &err), 0);
		CHECK(!child_runs(p, 10));
	}

	kill(c.pid, SIGCONT);
	CHECK(child_runs(p, 2000));
	CHECK(none_stopped_polling(c.pid, p));
	CHECK_INT(proc_pause(p, &err), 0);
	CHECK_INT(proc_resume(p, &err), 0);
	CHECK(child_runs(p, 2000));

	/* Detaching from a stopped target leaves it stopped, and SIGCONT still works. */
	kill(c.pid, SIGSTOP);
	CHECK(some_stopped(c.pid));
	bool frozen = false;
	for (int i = 0; i < 40 && !frozen; i++) {
		frozen = !child_runs(p, 50);
	}
	CHECK(frozen);
	proc_detach(p);
	/* Each thread re-enters the stop on its own once released; give it a moment. */
	for (int i = 0; i < 100; i++) {
		census(c.pid, &tc);
		if (tc.jobstop == tc.threads) {
			break;
		}
		sleep_ms(10);
	}
	CHECK_INT(tc.jobstop, tc.threads);
	CHECK(none_traced(c.pid));
	CHECK(!child_runs(p, 50));
	kill(c.pid, SIGCONT);
	CHECK(child_runs(p, 2000));
	CHECK(none_stopped(c.pid));

	proc_free(p);
	child_stop(&c);
}

/*
 * The main thread has exited and only its zombie is left, while two threads
 * run on: reads and maps must go through a live thread, the zombie must not
 * be mistaken for a thread to seize, and pausing must not wait for it.
 */
static void test_exited_main_thread(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct task_census tc;
	struct child c;
	struct proc *p;

	CHECK_INT(child_start(&c, CHILD_NO_MAIN), 0);
	for (int i = 0; i < 200; i++) {
		census(c.pid, &tc);
		if (tc.zombies == 1) {
			break;
		}
		sleep_ms(10);
	}
	CHECK_INT(tc.zombies, 1);
	CHECK_INT(proc_open(&p, c.pid, &err), 0);
	if (err.code) {
		fprintf(stderr, "%s\n", err.msg);
	}
	if (p) {
		CHECK(proc_mem(p)->nmaps > 0);
		CHECK(strstr(proc_cmdline(p), "test-sampler-ptrace") != NULL);
		CHECK(strstr(proc_exe(p), "test-sampler-ptrace") != NULL);
		CHECK(read_u64(p, &child_magic) == 0x5350595350595350ull);
		CHECK_INT(proc_attach(p, &err), 0);
		for (int i = 0; i < 10; i++) {
			CHECK_INT(proc_pause(p, &err), 0);
			CHECK(all_stopped(c.pid));
			uint64_t a = read_u64(p, &child_counter);
			sleep_ms(1);
			CHECK(read_u64(p, &child_counter) == a);
			CHECK_INT(proc_resume(p, &err), 0);
			CHECK(none_stopped(c.pid));
		}
		CHECK(child_runs(p, 1000));
		proc_detach(p);
		CHECK(none_traced(c.pid));
		proc_free(p);
	}
	child_stop(&c);
}

/*
 * The main thread exits while seized. Its zombie is not reported to waitpid
 * while the other threads live, so pause must notice it some other way
 * rather than wait on it for ever.
 */
static void test_main_thread_exits(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct task_census tc;
	struct child c;
	struct proc *p;

	CHECK_INT(child_start(&c, CHILD_MAIN_EXITS), 0);
	CHECK_INT(proc_open(&p, c.pid, &err), 0);
	CHECK_INT(proc_attach(p, &err), 0);
	/*
	 * Waiting on the zombie would cost every pause its whole 250 ms
	 * deadline. A loaded machine may make a few pauses slow anyway; a
	 * regression makes nearly all of them slow.
	 */
	int slow = 0;
	for (int i = 0; i < 100; i++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		CHECK_INT(proc_pause(p, &err), 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
		census(c.pid, &tc);
		CHECK_INT(tc.stopped + tc.zombies + tc.slow, tc.threads);
		slow += ms >= 200 || tc.slow > 0;
		CHECK_INT(proc_resume(p, &err), 0);
		sleep_ms(3);
	}
	CHECK(slow <= 5);
	census(c.pid, &tc);
	CHECK_INT(tc.zombies, 1);
	proc_detach(p);
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));
	proc_free(p);
	child_stop(&c);
}

/* Threads come and go every millisecond while we pause and resume. */
static void test_thread_churn(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct child c;
	struct proc *p;

	CHECK_INT(child_start(&c, CHILD_CHURN), 0);
	CHECK_INT(proc_open(&p, c.pid, &err), 0);
	CHECK_INT(proc_attach(p, &err), 0);
	int missed = 0, slow = 0;
	for (int round = 0; round < 100; round++) {
		struct task_census tc;
		int rc = proc_pause(p, &err);
		if (rc != 0) {
			fprintf(stderr, "pause: %s\n", err.msg);
		}
		CHECK_INT(rc, 0);
		census(c.pid, &tc);
		/*
		 * A thread we never seized is a bug. One seized but still
		 * running is pause's deadline at work on a starved machine
		 * (see PAUSE_TIMEOUT_NS): tolerated, if rare.
		 */
		if (tc.stopped + tc.zombies + tc.slow != tc.threads) {
			missed++;
			census_show(c.pid, &tc, true);
		} else if (tc.slow) {
			slow++;
			census_show(c.pid, &tc, true);
		}
		uint64_t a = read_u64(p, &child_counter);
		uint64_t b = read_u64(p, &child_counter);
		CHECK(a == b);
		CHECK_INT(proc_resume(p, &err), 0);
		sleep_ms(2);
	}
	CHECK_INT(missed, 0);
	CHECK(slow <= 5);
	proc_detach(p);
	CHECK(none_stopped(c.pid));
	CHECK(none_traced(c.pid));
	CHECK(child_runs(p, 2000));
	proc_free(p);
	child_stop(&c);
}

/* The target exits while attached: pause says so, and the exit status is kept. */
static void test_target_exit(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct proc *p;
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		sleep_ms(100);
		_exit(7);
	}
	CHECK_INT(proc_open(&p, pid, &err), 0);
	CHECK_INT(proc_attach(p, &err), 0);
	int rc = 0;
	for (int i = 0; i < 500 && rc == 0; i++) {
		rc = proc_pause(p, &err);
		if (rc == 0) {
			CHECK_INT(proc_resume(p, &err), 0);
			sleep_ms(5);
		}
	}
	CHECK_INT(rc, -SPY_EGONE);
	int st = 0;
	CHECK(proc_exit_status(p, &st));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7);
	proc_free(p);
	/* The tracer's wait consumed the status; make sure nothing is left either way. */
	waitpid(pid, NULL, WNOHANG);
}

int main(void)
{
	spy_log_init_from_env();
	if (!test_ptrace_permitted()) {
		printf("skipped: ptrace is not permitted here (%s)\n", strerror(errno));
		return 77;
	}
	test_tracer_exit(0);
	test_tracer_exit(1);
	test_job_control();
	test_exited_main_thread();
	test_main_thread_exits();
	test_thread_churn();
	test_target_exit();
	test_offcpu_hold();
	test_chld_held();
	return check_done();
}
