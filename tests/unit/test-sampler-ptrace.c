/*
 * Unit tests for sampler's ptrace control, against children this test forks
 * itself: a busy main thread plus a sleeping thread named "sleeper", with a
 * SIGUSR1 handler that counts. Each time the count changes the child writes
 * it to a pipe, which is how we learn that a signal sent while the child was
 * seized reached it. Because the child is a fork, the addresses of the
 * globals below are the same in it, so we read them through proc_mem().
 *
 * Only processes this test started are ever signalled. Each child dies with
 * us (PR_SET_PDEATHSIG) and is killed and reaped before its test returns.
 *
 * Skips (exit 77) when ptrace is not permitted here.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/util.h"
#include "sampler/sampler.h"
#include "tests/lib/check.h"
#include "tests/lib/ptrace-helpers.h"

/* Globals the child runs on and we read remotely. */
static volatile uint64_t child_magic = 0x5350595350595350ull;
static volatile uint64_t child_counter;
static volatile sig_atomic_t child_usr1;

struct child {
	pid_t pid;
	int rfd; /* read end of the child's report pipe */
	int last_report;
};

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

static void child_on_usr1(int sig)
{
	child_usr1++;
}

static void *sleeper(void *arg)
{
	for (;;) {
		sleep_ms(10);
	}
	return NULL;
}

static void *short_lived(void *arg)
{
	sleep_ms(1);
	return NULL;
}

enum child_mode {
	CHILD_PLAIN,
	CHILD_CHURN,      /* also starts a short-lived thread every millisecond */
	CHILD_NO_MAIN,    /* the busy loop runs in a thread; the main thread exits */
	CHILD_MAIN_EXITS, /* the same, with the main thread exiting 100 ms after start */
};

static int child_wfd;
static enum child_mode child_mode;

static void *busy_loop(void *arg)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int reported = 0;
	for (;;) {
		child_counter++;
		if (child_usr1 != reported) {
			reported = child_usr1;
			if (write(child_wfd, &reported, sizeof(reported)) != sizeof(reported)) {
				_exit(1);
			}
		}
		/* Roughly every millisecond, a thread that lives for one. */
		if (child_mode == CHILD_CHURN && (child_counter & 0xfffff) == 0) {
			pthread_t t;
			pthread_create(&t, &attr, short_lived, NULL);
		}
	}
	return NULL;
}

static _Noreturn void child_main(int wfd, enum child_mode mode)
{
	struct sigaction sa;
	pthread_t th;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = child_on_usr1;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	if (pthread_create(&th, NULL, sleeper, NULL) != 0) {
		_exit(1);
	}
	pthread_setname_np(th, "sleeper");
	child_wfd = wfd;
	child_mode = mode;
	if (write(wfd, "r", 1) != 1) {
		_exit(1);
	}
	if (mode == CHILD_NO_MAIN || mode == CHILD_MAIN_EXITS) {
		if (pthread_create(&th, NULL, busy_loop, NULL) != 0) {
			_exit(1);
		}
		if (mode == CHILD_MAIN_EXITS) {
			sleep_ms(100);
		}
		pthread_exit(NULL);
	}
	busy_loop(NULL);
	_exit(1);
}

static int child_start(struct child *c, enum child_mode mode)
{
	int fds[2];
	char ready;
	if (pipe(fds) < 0) {
		return -1;
	}
	c->pid = fork();
	if (c->pid < 0) {
		return -1;
	}
	if (c->pid == 0) {
		close(fds[0]);
		child_main(fds[1], mode);
	}
	close(fds[1]);
	c->rfd = fds[0];
	c->last_report = 0;
	if (read(c->rfd, &ready, 1) != 1) {
		return -1;
	}
	/* Let the sleeper get its name and reach its sleep. */
	sleep_ms(20);
	return 0;
}

static void child_stop(struct child *c)
{
	if (c->pid > 0) {
		kill(c->pid, SIGKILL);
		/*
		 * A thread the sampler left traced would keep the dead child
		 * from being reaped (its zombie waits for its tracer, us), and
		 * a plain waitpid would hang: fail instead, then clean up.
		 */
		bool reaped = false;
		for (int i = 0; i < 500 && !reaped; i++) {
			reaped = waitpid(c->pid, NULL, WNOHANG) == c->pid;
			if (!reaped) {
				sleep_ms(10);
			}
		}
		CHECK(reaped);
		while (!reaped) {
			waitpid(-1, NULL, __WALL | WNOHANG);
			reaped = waitpid(c->pid, NULL, WNOHANG) == c->pid;
			sleep_ms(1);
		}
		c->pid = 0;
	}
	close(c->rfd);
}

/* The next count the child reports, or -1 if none comes within ms. */
static int child_report(struct child *c, int ms)
{
	struct pollfd pfd = { c->rfd, POLLIN, 0 };
	int v;
	if (poll(&pfd, 1, ms) != 1 || read(c->rfd, &v, sizeof(v)) != sizeof(v)) {
		return -1;
	}
	c->last_report = v;
	return v;
}

/* As child_report, calling proc_poll while waiting. */
static int child_report_polling(struct child *c, struct proc *p, int ms)
{
	for (int waited = 0; waited < ms; waited += 5) {
		CHECK_INT(proc_poll(p), 0);
		int v = child_report(c, 5);
		if (v >= 0) {
			return v;
		}
	}
	return -1;
}

/*
 * Read every /proc/PID/task/TID/<file> of pid and count threads whose state
 * (or TracerPid) matches. Test code may allocate as it pleases.
 */
struct task_census {
	int threads;
	int stopped;   /* state 't' */
	int jobstop;   /* state 'T' */
	int zombies;   /* 'Z' or 'X' */
	/*
	 * TracerPid != 0, among live threads: a zombie main thread cannot be
	 * detached, and stays ours until the process ends or we exit.
	 */
	int traced;
	/* Live, not in a tracing stop, and seized: pause gave up waiting for it. */
	int slow;
};

/* With show, name each thread that is not in a tracing stop on stderr. */
static void census_show(pid_t pid, struct task_census *tc, bool show)
{
	char path[64];
	memset(tc, 0, sizeof(*tc));
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d) {
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9') {
			continue;
		}
		char file[512], buf[4096];
		snprintf(file, sizeof(file), "%s/%s/stat", path, e->d_name);
		int fd = open(file, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0) {
			close(fd);
		}
		if (n <= 0) {
			continue;
		}
		char st = proc_parse_stat_state(buf, (size_t)n);
		if (st != 't' && show) {
			fprintf(stderr, "%s: state %c\n", file, st ? st : '?');
		}
		tc->threads++;
		tc->stopped += st == 't';
		tc->jobstop += st == 'T';
		tc->zombies += st == 'Z' || st == 'X';
		snprintf(file, sizeof(file), "%s/%s/status", path, e->d_name);
		fd = open(file, O_RDONLY);
		n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0) {
			close(fd);
		}
		if (n > 0) {
			buf[n] = '\0';
			const char *tp = strstr(buf, "TracerPid:");
			bool live = st != 'Z' && st != 'X';
			bool ours = tp && atoi(tp + strlen("TracerPid:")) != 0;
			tc->traced += ours && live;
			tc->slow += ours && live && st != 't';
		}
	}
	closedir(d);
}

static void census(pid_t pid, struct task_census *tc)
{
	census_show(pid, tc, false);
}

static bool all_stopped(pid_t pid)
{
	struct task_census tc;
	census(pid, &tc);
	return tc.threads > 0 && tc.stopped + tc.zombies == tc.threads;
}

/*
 * No thread in a tracing stop, re-checked for a while: a trap that fires
 * after resume with nobody waiting would leave a thread 't' for good, so
 * waiting does not hide one.
 */
static bool none_stopped(pid_t pid)
{
	struct task_census tc;
	for (int i = 0; i < 50; i++) {
		census(pid, &tc);
		if (tc.stopped == 0) {
			return true;
		}
		sleep_ms(10);
	}
	fprintf(stderr, "%d of %d threads of %d still in tracing stop\n", tc.stopped, tc.threads,
		(int)pid);
	return false;
}

/*
 * As none_stopped, for a target that was sent job-control signals while
 * seized: each thread may need proc_poll more than once (a SIGCONT wakes
 * a listening thread into a trap, and then the SIGCONT itself stops one).
 */
static bool none_stopped_polling(pid_t pid, struct proc *p)
{
	struct task_census tc;
	for (int i = 0; i < 100; i++) {
		CHECK_INT(proc_poll(p), 0);
		census(pid, &tc);
		if (tc.stopped == 0) {
			return true;
		}
		sleep_ms(10);
	}
	return none_stopped(pid);
}

/* Until some thread of pid sits in a tracing stop (a signal reached it), up to 2 s. */
static bool some_stopped(pid_t pid)
{
	struct task_census tc;
	for (int i = 0; i < 200; i++) {
		census(pid, &tc);
		if (tc.stopped > 0) {
			return true;
		}
		sleep_ms(10);
	}
	return false;
}

static bool none_traced(pid_t pid)
{
	struct task_census tc;
	census(pid, &tc);
	return tc.threads > 0 && tc.traced == 0;
}

static uint64_t read_u64(struct proc *p, const volatile void *addr)
{
	uint64_t v = 0;
	int rc = spy_mem_read(proc_mem(p), (spy_addr_t)(uintptr_t)addr, &v, sizeof(v));
	CHECK_INT(rc, 0);
	return v;
}

static int read_int(struct proc *p, const volatile sig_atomic_t *addr)
{
	sig_atomic_t v = -1;
	int rc = spy_mem_read(proc_mem(p), (spy_addr_t)(uintptr_t)addr, &v, sizeof(v));
	CHECK_INT(rc, 0);
	return (int)v;
}

/* Poll for up to ms until the child's busy loop has moved; true if it did. */
static bool child_runs(struct proc *p, int ms)
{
	uint64_t a = read_u64(p, &child_counter);
	for (int waited = 0; waited < ms; waited += 5) {
		if (!proc_is_paused(p)) {
			proc_poll(p);
		}
		sleep_ms(5);
		if (read_u64(p, &child_counter) != a) {
			return true;
		}
	}
	return false;
}

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
		/* And a thread that gets its CPU at once is stopped as before. */
		CHECK_INT(proc_stop_thread(p, c.pid, 1000 * 1000), 0);
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
	test_tracer_exit(0);
	test_tracer_exit(1);
	test_job_control();
	test_exited_main_thread();
	test_main_thread_exits();
	test_thread_churn();
	test_target_exit();
	test_offcpu_hold();
	return check_done();
}
