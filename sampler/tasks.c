/*
 * Watching threads across samples: whether each one is running, for
 * record's idle detection, and whether the process is still alive.
 *
 * A sampler asks these questions every tick, so the files stay open and
 * each answer is one pread(): opening /proc/PID/task/TID/stat costs three
 * syscalls and a path walk, reading a kept-open one only the read. Every
 * path is relative to the /proc/PID descriptor proc_open() keeps, so a
 * reused PID never answers for the process we opened.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/bounds.h"
#include "common/util.h"
#include "sampler/internal.h"

/*
 * A thread that reads R but ran less than this share of the wall time
 * since its previous R reading, and was not R at the previous refresh, is
 * taken as idle (see proc_task_ran).
 */
#define ACTIVE_MIN_SHARE 0.05

/* A proc_task descriptor for a file this kernel does not have (schedstat without CONFIG_SCHED_INFO). */
#define TASK_FILE_ABSENT (-2)

static int open_task_file_at(int dirfd, pid_t tid, const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "task/%d/%s", (int)tid, name);
	return openat(dirfd, path, O_RDONLY | O_CLOEXEC);
}

static int open_task_file(const struct proc *p, pid_t tid, const char *name)
{
	return open_task_file_at(p->dirfd, tid, name);
}

/* ---- descriptors ---- */

/*
 * A target with thousands of threads needs thousands of descriptors, and
 * the default soft limit is often 1024 (or a user's `ulimit -n 64`): the
 * soft limit goes up to the hard one once, and the child of a launch gets
 * the original back (proc_fd_limit_restore).
 */
static struct {
	bool raised;
	struct rlimit orig;
	rlim_t soft;
} fdlim;

void proc_fd_limit_raise(void)
{
	if (fdlim.raised) {
		return;
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		return;
	}
	fdlim.raised = true;
	fdlim.orig = rl;
	fdlim.soft = rl.rlim_cur;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
			fdlim.soft = rl.rlim_max;
		}
	}
}

void proc_fd_limit_restore(void)
{
	if (fdlim.raised && fdlim.orig.rlim_cur != fdlim.soft) {
		setrlimit(RLIMIT_NOFILE, &fdlim.orig);
	}
}

/* Whether fd may stay open for a thread: it leaves PROC_FD_RESERVE free. */
static bool fd_within_budget(int fd)
{
	rlim_t soft = fdlim.raised ? fdlim.soft : 1024;
	return soft == RLIM_INFINITY || (rlim_t)fd + PROC_FD_RESERVE < soft;
}

static ssize_t pread_text(int fd, char *buf, size_t size)
{
	ssize_t n = fd >= 0 ? pread(fd, buf, size - 1, 0) : -1;
	buf[n > 0 ? n : 0] = '\0';
	return n;
}

void proc_task_open(const struct proc *p, struct proc_task *t, pid_t tid)
{
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	t->dirfd = p->dirfd;
	/* Opened on first use (read_task_file): an idle thread of a pool never needs its stat. */
	t->stat_fd = -1;
	t->sched_fd = -1;
}

void proc_task_close(struct proc_task *t)
{
	if (t->stat_fd >= 0) {
		close(t->stat_fd);
	}
	if (t->sched_fd >= 0) {
		close(t->sched_fd);
	}
	t->stat_fd = -1;
	t->sched_fd = -1;
}

/*
 * Read a task file through *keep, opening it (and keeping it, within the
 * budget) when it is not open yet; keep NULL: a descriptor just for the read.
 */
static ssize_t read_task_file(struct proc_task *t, int *keep, const char *name, char *buf,
			      size_t size)
{
	if (keep && *keep >= 0) {
		return pread_text(*keep, buf, size);
	}
	if (keep && *keep == TASK_FILE_ABSENT) {
		buf[0] = '\0';
		return -1;
	}
	int fd = open_task_file_at(t->dirfd, t->tid, name);
	if (fd < 0) {
		/* The thread gone (ENOENT) is no failure of ours; anything else is. */
		t->failed = errno != ENOENT && errno != ESRCH;
		buf[0] = '\0';
		return -1;
	}
	ssize_t n = pread_text(fd, buf, size);
	if (keep && fd_within_budget(fd)) {
		*keep = fd;
	} else {
		close(fd);
	}
	return n;
}

bool proc_task_slept(const struct proc_task *t, uint64_t run_ns, uint64_t pcount)
{
	/* pcount 0: never read (or a kernel that does not count), no witness. */
	return t->state && t->state != 'R' && t->pcount && t->pcount == pcount && t->run_ns == run_ns;
}

bool proc_task_ran(char was, uint64_t ran_ns, uint64_t elapsed_ns)
{
	double floor = ACTIVE_MIN_SHARE * (double)elapsed_ns;
	return was == 'R' || (double)ran_ns >= floor;
}

/* The state part of a refresh: stat read (or, for a known runner, not), then what it decides. */
static void task_settle(struct proc_task *t, bool runs)
{
	/* A prefix is enough: nothing after the state letter contains ')'. */
	char buf[128];
	/* sched: schedstat was read, so with_cpu was asked. */
	uint64_t now = t->owed_now, cpu = t->owed_cpu;
	bool sched = t->owed_sched;
	char was = t->state;
	t->owed = false;
	if (runs) {
		t->state = 'R';
	} else {
		/*
		 * With schedstat, stat is read only for a thread that ran since the
		 * last refresh: kept open for one found running last time (it runs
		 * often), opened for the read otherwise, so a thread that sleeps
		 * holds one descriptor, not two. Without, it is read every time.
		 */
		bool keep = !sched || t->state == 'R' || t->stat_fd >= 0;
		ssize_t n = read_task_file(t, keep ? &t->stat_fd : NULL, "stat", buf, sizeof(buf));
		t->state = n > 0 ? proc_parse_stat_state(buf, (size_t)n) : 0;
		if (t->owed_sched_gone && t->state) {
			/* stat is there and schedstat is not: this kernel has none; not asked again. */
			t->sched_fd = TASK_FILE_ABSENT;
		}
	}
	/*
	 * Attached, a tracing stop (t) is spy's own: a thread left interrupted
	 * by a hold traps as it gets a CPU, until the next poll restarts it.
	 * But a sleeper a hold woke traps too, having waited for a CPU, and
	 * held every tick (-i) it traps every tick: neither its wait nor its
	 * state before vouches for it. Only a real share of CPU time makes it
	 * an R; else it stays t (not active).
	 */
	if (t->state == 't' && sched && t->read_ns && now > t->read_ns && cpu >= t->cpu_ns &&
	    proc_task_ran(0, cpu - t->cpu_ns, now - t->read_ns)) {
		t->state = 'R';
	}
	/* Only R is ambiguous; any other state decides alone. */
	if (t->state != 'R' || !sched) {
		t->ran = true;
		return;
	}
	/* The first read has nothing to compare with; a known runner runs. */
	t->ran = runs || !t->read_ns || now <= t->read_ns || cpu < t->cpu_ns ||
		 proc_task_ran(was, cpu - t->cpu_ns, now - t->read_ns);
	t->cpu_ns = cpu;
	t->read_ns = now;
}

void proc_task_refresh(struct proc_task *t, unsigned how)
{
	char buf[128];
	bool with_cpu = how & PROC_TASK_CPU;
	t->failed = false;
	t->slept = false;
	t->owed = false;
	uint64_t now = 0, cpu = 0, delay = 0, pcount = 0;
	bool sched = false;
	if (with_cpu) {
		/* Before stat: a schedule-in after this read shows at the next one. */
		now = spy_now_ns();
		ssize_t n = read_task_file(t, &t->sched_fd, "schedstat", buf, sizeof(buf));
		sched = n > 0 && proc_parse_schedstat(buf, (size_t)n, &cpu, &delay, &pcount);
		if (sched && proc_task_slept(t, cpu, pcount)) {
			/* Not run since it was read asleep: the state letter is the same. */
			t->slept = true;
			t->ran = true;
			return;
		}
		t->run_ns = sched ? cpu : 0;
		t->pcount = sched ? pcount : 0;
	}
	/* Without schedstat the thread is judged by its state, as without with_cpu: no failure. */
	t->owed_sched_gone = with_cpu && !sched && !t->failed && t->sched_fd == -1;
	t->failed = false;
	t->owed_now = now;
	t->owed_cpu = cpu;
	t->owed_sched = sched;
	t->owed = true;
	if (!(how & PROC_TASK_DEFER)) {
		task_settle(t, false);
	}
}

void proc_task_settle(struct proc_task *t, bool runs)
{
	if (t->owed) {
		task_settle(t, runs);
	}
}

bool proc_task_still(struct proc_task *t)
{
	char buf[128];
	uint64_t cpu, delay, pcount;
	bool failed = t->failed;
	ssize_t n = read_task_file(t, &t->sched_fd, "schedstat", buf, sizeof(buf));
	t->failed = failed;
	return n > 0 && proc_parse_schedstat(buf, (size_t)n, &cpu, &delay, &pcount) &&
	       proc_task_slept(t, cpu, pcount);
}

bool proc_task_active(const struct proc_task *t)
{
	return (t->state == 'R' && t->ran) || t->failed;
}

/* Clock ticks (stat's utime, stime) in ns; 0 where the tick rate is unknown. */
static uint64_t ticks_ns(uint64_t v)
{
	static long tck;
	if (!tck) {
		tck = sysconf(_SC_CLK_TCK);
	}
	if (tck <= 0) {
		return 0;
	}
	return v / (uint64_t)tck * 1000000000u + v % (uint64_t)tck * 1000000000u / (uint64_t)tck;
}

int proc_task_cpu(const struct proc *p, pid_t tid, uint64_t *ns)
{
	char buf[1024];
	int fd = open_task_file(p, tid, "stat");
	if (fd < 0) {
		return errno == ENOENT || errno == ESRCH ? -SPY_EGONE : -SPY_EIO;
	}
	ssize_t n = pread_text(fd, buf, sizeof(buf));
	close(fd);
	struct proc_resources r = { 0 };
	if (n <= 0 || !(proc_parse_stat_resources(buf, (size_t)n, &r) & PROC_RES_CPU)) {
		return -SPY_EIO;
	}
	*ns = ticks_ns(r.utime) + ticks_ns(r.stime);
	return 0;
}

void proc_task_comm(const struct proc *p, pid_t tid, char *buf, size_t size)
{
	int fd = open_task_file(p, tid, "comm");
	pread_text(fd, buf, size);
	if (fd >= 0) {
		close(fd);
	}
	buf[strcspn(buf, "\n")] = '\0';
}

bool proc_alive(struct proc *p)
{
	char buf[128];
	if (p->statfd < 0) {
		p->statfd = openat(p->dirfd, "stat", O_RDONLY | O_CLOEXEC);
	}
	ssize_t n = pread_text(p->statfd, buf, sizeof(buf));
	char st = n > 0 ? proc_parse_stat_state(buf, (size_t)n) : 0;
	return st != 0 && st != 'Z' && st != 'X' && st != 'x';
}

/* Voluntary + involuntary switches of every live thread; false if none could be read. */
static bool sum_ctxsw(struct proc *p, uint64_t *sum)
{
	int tfd = openat(p->dirfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = tfd >= 0 ? fdopendir(tfd) : NULL;
	if (!d) {
		if (tfd >= 0) {
			close(tfd);
		}
		return false;
	}
	bool any = false;
	size_t n = 0;
	char buf[4096];
	*sum = 0;
	for (struct dirent *de; n < SPY_MAX_THREADS && (de = readdir(d));) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9' || strlen(de->d_name) > 10) {
			continue;
		}
		n++;
		char name[32];
		snprintf(name, sizeof(name), "%s/status", de->d_name);
		int fd = openat(dirfd(d), name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		ssize_t len = pread_text(fd, buf, sizeof(buf));
		if (fd >= 0) {
			close(fd);
		}
		uint64_t v;
		/* A thread gone since the listing is simply not counted. */
		if (len > 0 && proc_parse_status_ctxsw(buf, (size_t)len, &v)) {
			*sum += v;
			any = true;
		}
	}
	closedir(d);
	return any;
}

void proc_read_resources(struct proc *p, struct proc_resources *out)
{
	memset(out, 0, sizeof(*out));
	char buf[1024];
	if (p->statfd < 0) {
		p->statfd = openat(p->dirfd, "stat", O_RDONLY | O_CLOEXEC);
	}
	ssize_t n = pread_text(p->statfd, buf, sizeof(buf));
	if (n > 0) {
		out->known |= proc_parse_stat_resources(buf, (size_t)n, out);
	}
	static long page;
	if (!page) {
		page = sysconf(_SC_PAGESIZE);
	}
	if (sysconf(_SC_CLK_TCK) <= 0 || page <= 0) {
		out->known &= ~(unsigned)(PROC_RES_CPU | PROC_RES_RSS);
	} else {
		out->utime = ticks_ns(out->utime);
		out->stime = ticks_ns(out->stime);
		out->rss *= (uint64_t)page;
	}
	if (sum_ctxsw(p, &out->ctxsw)) {
		out->known |= PROC_RES_CTXSW;
	}
	/* io needs ptrace-read access: refused once, it is not asked for again. */
	if (p->iofd == -1) {
		p->iofd = openat(p->dirfd, "io", O_RDONLY | O_CLOEXEC);
		if (p->iofd < 0) {
			p->iofd = -2;
		}
	}
	n = p->iofd >= 0 ? pread_text(p->iofd, buf, sizeof(buf)) : -1;
	if (n > 0) {
		out->known |= proc_parse_io(buf, (size_t)n, &out->read_bytes, &out->write_bytes);
	}
}

/* Append the children of pid, from /proc/PID/task/TID/children (each thread's own). */
static void list_children(pid_t pid, pid_t **v, size_t *n, size_t *alloc)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d) {
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)) && *n < SPY_MAX_THREADS) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9') {
			continue;
		}
		char name[300], buf[4096];
		snprintf(name, sizeof(name), "%s/children", e->d_name);
		int fd = openat(dirfd(d), name, O_RDONLY | O_CLOEXEC);
		pread_text(fd, buf, sizeof(buf));
		if (fd >= 0) {
			close(fd);
		}
		for (char *p = buf, *end; *n < SPY_MAX_THREADS; p = end) {
			long c = strtol(p, &end, 10);
			if (end == p) {
				break;
			}
			if (c > 0) {
				SPY_GROW(*v, *alloc, *n + 1);
				(*v)[(*n)++] = (pid_t)c;
			}
		}
	}
	closedir(d);
}

size_t proc_list_descendants(pid_t pid, pid_t **out)
{
	pid_t *v = NULL;
	size_t n = 0, alloc = 0;
	list_children(pid, &v, &n, &alloc);
	/* Breadth first: v grows while it is walked. */
	for (size_t i = 0; i < n; i++) {
		list_children(v[i], &v, &n, &alloc);
	}
	*out = v;
	return n;
}

void proc_exe_of(pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	ssize_t n = size > 1 ? readlink(path, buf, size - 1) : -1;
	if (size > 0) {
		buf[n > 0 ? n : 0] = '\0';
	}
}
