/*
 * The children the sampler's ptrace tests fork and trace: a busy main
 * thread plus a sleeping thread named "sleeper", with a SIGUSR1 handler
 * that counts. Each time the count changes the child writes it to a pipe,
 * which is how a test learns that a signal sent while the child was seized
 * reached it. Because the child is a fork, the addresses of the globals
 * below are the same in it, so tests read them through proc_mem(); and
 * /proc censuses of its threads' states.
 *
 * Only processes a test started are ever signalled. Each child dies with
 * its test (PR_SET_PDEATHSIG) and is killed and reaped before the test
 * returns. Header-only, like check.h, so that its CHECKs count in the test
 * that includes it.
 */
#ifndef SPY_TESTS_PTRACE_CHILD_H
#define SPY_TESTS_PTRACE_CHILD_H

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

static inline void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

static inline void child_on_usr1(int sig)
{
	child_usr1++;
}

static inline void *sleeper(void *arg)
{
	for (;;) {
		sleep_ms(10);
	}
	return NULL;
}

static inline void *short_lived(void *arg)
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

static inline void *busy_loop(void *arg)
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

static inline _Noreturn void child_main(int wfd, enum child_mode mode)
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

static inline int child_start(struct child *c, enum child_mode mode)
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

static inline void child_stop(struct child *c)
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
static inline int child_report(struct child *c, int ms)
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
static inline int child_report_polling(struct child *c, struct proc *p, int ms)
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
static inline void census_show(pid_t pid, struct task_census *tc, bool show)
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

static inline void census(pid_t pid, struct task_census *tc)
{
	census_show(pid, tc, false);
}

static inline bool all_stopped(pid_t pid)
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
static inline bool none_stopped(pid_t pid)
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
static inline bool none_stopped_polling(pid_t pid, struct proc *p)
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
static inline bool some_stopped(pid_t pid)
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

static inline bool none_traced(pid_t pid)
{
	struct task_census tc;
	census(pid, &tc);
	return tc.threads > 0 && tc.traced == 0;
}

static inline uint64_t read_u64(struct proc *p, const volatile void *addr)
{
	uint64_t v = 0;
	int rc = spy_mem_read(proc_mem(p), (spy_addr_t)(uintptr_t)addr, &v, sizeof(v));
	CHECK_INT(rc, 0);
	return v;
}

static inline int read_int(struct proc *p, const volatile sig_atomic_t *addr)
{
	sig_atomic_t v = -1;
	int rc = spy_mem_read(proc_mem(p), (spy_addr_t)(uintptr_t)addr, &v, sizeof(v));
	CHECK_INT(rc, 0);
	return (int)v;
}

/* Poll for up to ms until the child's busy loop has moved; true if it did. */
static inline bool child_runs(struct proc *p, int ms)
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

#endif
