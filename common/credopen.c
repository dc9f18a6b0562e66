/*
 * Opening a file with a program's credentials (see credopen.h).
 *
 * The helper is forked from spy, not exec'ed: it needs nothing but
 * spy_open_path. Before it serves a request it closes every descriptor but
 * its socket (spy's output files and the targets' /proc/PID/mem must not
 * outlive the switch), drops the capability bounding set, takes the
 * program's groups, gid and uid with raw system calls (only the calling
 * thread exists in the child; glibc's all-threads set*id machinery is
 * neither needed nor async-signal-safe), clears any capability left, sets
 * no_new_privs and marks itself not dumpable, so the program, now of the
 * same uid, can neither trace it nor read its memory (a copy of spy's).
 * It then checks that it holds no capability and the uid it was given, and
 * exits rather than serve otherwise.
 *
 * The program can still signal the helper (same uid): a killed helper
 * fails the request, a stopped one is killed after CREDOPEN_WAIT_MS. Either
 * way spy goes on without the file; it never waits longer.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/credopen.h"
#include "common/log.h"
#include "common/mapfile.h"
#include "common/util.h"

/* /proc/PID/status is a few KiB; 65536 groups of up to 10 digits fit in this. */
#define STATUS_MAX ((size_t)1 << 20)

struct helper {
	struct spy_creds creds;
	pid_t pid;      /* 0: none */
	int sock;
	bool dead;      /* failed once: its files are not read */
	uint64_t used;  /* for replacing the oldest */
};

struct spy_credopen {
	struct helper h[CREDOPEN_HELPERS];
	uint64_t clock;
};

void spy_creds_release(struct spy_creds *c)
{
	free(c->groups);
	memset(c, 0, sizeof(*c));
}

/* The value of "Key:" at the start of a line of text, or NULL; *n its length. */
static const char *field(const char *text, size_t len, const char *key, size_t *n)
{
	size_t kl = strlen(key);
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if ((size_t)(le - p) >= kl && !memcmp(p, key, kl)) {
			*n = (size_t)(le - p - (ptrdiff_t)kl);
			return p + kl;
		}
		p = le + 1;
	}
	return NULL;
}

/* Up to max decimal numbers of s[0..n) separated by blanks; their count, or -1. */
static long numbers(const char *s, size_t n, unsigned long *out, size_t max)
{
	size_t i = 0, k = 0;
	for (;;) {
		while (i < n && (s[i] == ' ' || s[i] == '\t')) {
			i++;
		}
		if (i == n) {
			return (long)k;
		}
		if (k == max || s[i] < '0' || s[i] > '9') {
			return -1;
		}
		unsigned long v = 0;
		size_t d = 0;
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, d++) {
			v = v * 10 + (unsigned long)(s[i] - '0');
			if (d > 10 || v > 0xffffffffUL) {
				return -1;
			}
		}
		out[k++] = v;
	}
}

int spy_creds_parse(const char *text, size_t len, struct spy_creds *c)
{
	memset(c, 0, sizeof(*c));
	unsigned long ids[4];
	size_t n;
	const char *v = field(text, len, "Uid:", &n);
	if (!v || numbers(v, n, ids, 4) != 4) {
		return -EINVAL;
	}
	c->fsuid = (uid_t)ids[3];
	c->mixed = ids[0] != ids[1] || ids[1] != ids[2] || ids[2] != ids[3];
	v = field(text, len, "Gid:", &n);
	if (!v || numbers(v, n, ids, 4) != 4) {
		return -EINVAL;
	}
	c->fsgid = (gid_t)ids[3];
	c->mixed |= ids[0] != ids[1] || ids[1] != ids[2] || ids[2] != ids[3];
	v = field(text, len, "CapEff:", &n);
	if (!v) {
		return -EINVAL;
	}
	char hex[24];
	size_t h = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] != ' ' && v[i] != '\t') {
			if (h == sizeof(hex) - 1) {
				return -EINVAL;
			}
			hex[h++] = v[i];
		}
	}
	hex[h] = '\0';
	char *e;
	c->cap_eff = strtoull(hex, &e, 16);
	if (!h || *e) {
		return -EINVAL;
	}
	v = field(text, len, "Groups:", &n);
	if (!v) {
		return -EINVAL;
	}
	/* At most one group per two bytes ("1 "): allocate for that, bounded. */
	size_t max = n / 2 + 1 < CREDOPEN_MAX_GROUPS ? n / 2 + 1 : CREDOPEN_MAX_GROUPS;
	unsigned long *g = spy_xcalloc(max, sizeof(*g));
	long k = numbers(v, n, g, max);
	if (k < 0) {
		free(g);
		return -EINVAL;
	}
	c->groups = spy_xcalloc((size_t)k + 1, sizeof(*c->groups));
	for (long i = 0; i < k; i++) {
		c->groups[i] = (gid_t)g[i];
	}
	c->ngroups = (size_t)k;
	free(g);
	return 0;
}

int spy_creds_read(pid_t pid, struct spy_creds *c)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return -errno;
	}
	char *buf = spy_xmalloc(STATUS_MAX);
	size_t n = 0;
	while (n < STATUS_MAX) {
		ssize_t r = read(fd, buf + n, STATUS_MAX - n);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r <= 0) {
			break;
		}
		n += (size_t)r;
	}
	close(fd);
	int rc = spy_creds_parse(buf, n, c);
	free(buf);
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	if (rc == 0 && stat(path, &st) == 0) {
		c->exe_dev = (uint64_t)st.st_dev;
		c->exe_ino = (uint64_t)st.st_ino;
	}
	return rc;
}

static bool same_user_ns(pid_t pid)
{
	char path[64];
	struct stat a, b;
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	return stat(path, &a) == 0 && stat("/proc/self/ns/user", &b) == 0 && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

/* The capabilities that pass over a file's modes: holding one, a process reads what its user cannot. */
#define DAC_CAPS ((1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_DAC_READ_SEARCH))

/*
 * Whether spy reads more than its user may: root, or any user holding a
 * DAC capability (a setcap'd copy, the agent's unit). Such a spy must not
 * open a target's files with its own rights.
 */
static bool spy_privileged(void)
{
	if (geteuid() == 0) {
		return true;
	}
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) != 0) {
		return true;   /* unknown: the careful side */
	}
	uint64_t eff = (uint64_t)data[0].effective | (uint64_t)data[1].effective << 32;
	return (eff & DAC_CAPS) != 0;
}

/* Whether c could read any file of its root: fs uid 0 with a DAC capability. */
static bool reads_all(const struct spy_creds *c)
{
	return c->fsuid == 0 && (c->cap_eff & DAC_CAPS);
}

static bool same_creds(const struct spy_creds *a, const struct spy_creds *b)
{
	return a->fsuid == b->fsuid && a->fsgid == b->fsgid && a->ngroups == b->ngroups &&
	       !memcmp(a->groups, b->groups, a->ngroups * sizeof(*a->groups));
}

/*
 * Whose rights open a file pid named (see credopen.h): now's or then's,
 * NULL for nobody's; *direct when spy may open it itself.
 */
static const struct spy_creds *whose(pid_t pid, const struct spy_creds *then, const struct spy_creds *now,
				     bool *direct)
{
	*direct = false;
	if (!spy_privileged()) {
		*direct = true;   /* spy's own rights are no more than its user's */
		return now;
	}
	bool moved = then && (!same_creds(then, now) || reads_all(then) != reads_all(now) ||
			      then->exe_dev != now->exe_dev || then->exe_ino != now->exe_ino);
	const struct spy_creds *c = now;
	if (moved && reads_all(now) && !reads_all(then)) {
		c = then;
	} else if (moved && !reads_all(now) && !reads_all(then) && !same_creds(then, now)) {
		return NULL;
	}
	*direct = !moved && !now->mixed && reads_all(now) && same_user_ns(pid);
	return c;
}

struct spy_credopen *spy_credopen_new(void)
{
	struct spy_credopen *co = spy_xcalloc(1, sizeof(*co));
	for (size_t i = 0; i < CREDOPEN_HELPERS; i++) {
		co->h[i].sock = -1;
	}
	return co;
}

static void end_helper(struct helper *h)
{
	if (h->sock >= 0) {
		close(h->sock);
	}
	if (h->pid > 0) {
		kill(h->pid, SIGKILL);
		while (waitpid(h->pid, NULL, __WALL) < 0 && errno == EINTR) {
		}
	}
	h->sock = -1;
	h->pid = 0;
}

void spy_credopen_free(struct spy_credopen *co)
{
	if (!co) {
		return;
	}
	for (size_t i = 0; i < CREDOPEN_HELPERS; i++) {
		end_helper(&co->h[i]);
		spy_creds_release(&co->h[i].creds);
	}
	free(co);
}

/* ---- the helper's side ---- */

static void helper_fail(void)
{
	_exit(111);
}

/*
 * Whether this process's ids are c's already: a non-root spy with DAC
 * capabilities, for a program of its own user, needs only to give those
 * up (it could not take other ids: no CAP_SETUID). Async-signal-safe.
 */
static bool has_ids(const struct spy_creds *c)
{
	uid_t r, e, s;
	gid_t gr, ge, gs;
	gid_t g[256];
	long n = syscall(SYS_getgroups, 256, g);
	if (getresuid(&r, &e, &s) != 0 || getresgid(&gr, &ge, &gs) != 0 || n < 0 || (size_t)n != c->ngroups) {
		return false;
	}
	if (r != c->fsuid || e != c->fsuid || s != c->fsuid || gr != c->fsgid || ge != c->fsgid || gs != c->fsgid) {
		return false;
	}
	for (long i = 0; i < n; i++) {
		if (g[i] != c->groups[i]) {
			return false;
		}
	}
	return true;
}

/*
 * Take c's ids and give up every capability; returns only if all of it
 * held. A spy that cannot take them (not root, no CAP_SETUID) fails here,
 * and the program's files are not read: never read with spy's own rights.
 */
static void become(const struct spy_creds *c, pid_t parent)
{
	bool same = has_ids(c);
	for (int cap = 0; cap < 64; cap++) {
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL) {
			break;  /* past the kernel's last capability */
		}
	}
	if (!same && (syscall(SYS_setgroups, c->ngroups, c->groups) != 0 ||
		      syscall(SYS_setresgid, c->fsgid, c->fsgid, c->fsgid) != 0 ||
		      syscall(SYS_setresuid, c->fsuid, c->fsuid, c->fsuid) != 0)) {
		helper_fail();
	}
	/* A uid 0 without the read capabilities keeps its other ones through setresuid. */
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) != 0) {
		helper_fail();
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 ||
	    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent) {
		helper_fail();
	}
	uid_t r, e, s;
	memset(data, 0xff, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) != 0 || data[0].effective || data[1].effective ||
	    data[0].permitted || data[1].permitted || getresuid(&r, &e, &s) != 0 || r != c->fsuid ||
	    e != c->fsuid || s != c->fsuid) {
		helper_fail();
	}
}

/* Serve requests until spy closes the socket: a path (the message) and a directory (SCM_RIGHTS). */
static void serve(int sock)
{
	char path[4097];
	for (;;) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} cm;
		struct iovec iov = { path, sizeof(path) - 1 };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				    .msg_controllen = sizeof(cm.b) };
		ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			_exit(0);
		}
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		int dirfd = -1;
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int))) {
			memcpy(&dirfd, CMSG_DATA(c), sizeof(int));
		}
		int32_t rc = -EINVAL;
		int fd = -1;
		if (dirfd >= 0 && !(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
			path[n] = '\0';
			fd = spy_open_path(dirfd, path, SPY_OPEN_IN_ROOT, NULL);
			rc = fd < 0 ? fd : 0;
		}
		if (dirfd >= 0) {
			close(dirfd);
		}
		iov = (struct iovec){ &rc, sizeof(rc) };
		m = (struct msghdr){ .msg_iov = &iov, .msg_iovlen = 1 };
		if (fd >= 0) {
			m.msg_control = cm.b;
			m.msg_controllen = sizeof(cm.b);
			c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
		}
		ssize_t w;
		while ((w = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
		}
		if (fd >= 0) {
			close(fd);
		}
		if (w < 0) {
			_exit(0);
		}
	}
}

static void helper_main(int sock, const struct spy_creds *c, pid_t parent)
{
	/* Only async-signal-safe calls from here: spy may have other threads. */
	sigset_t all;
	sigfillset(&all);
	for (int sig = 1; sig < NSIG; sig++) {
		signal(sig, SIG_DFL);
	}
	/* The terminal's Ctrl-C reaches the whole group; spy decides when the helper ends. */
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigprocmask(SIG_UNBLOCK, &all, NULL);
	if (sock != 3 && (dup2(sock, 3) != 3)) {
		helper_fail();
	}
	int null = open("/dev/null", O_RDWR);
	for (int fd = 0; fd < 3 && null >= 0; fd++) {
		dup2(null, fd);
	}
	if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
		/* Before Linux 5.9: one by one, up to the limit. */
		long max = sysconf(_SC_OPEN_MAX);
		for (long fd = 4; fd < (max > 0 && max < 1048576 ? max : 65536); fd++) {
			close((int)fd);
		}
	}
	become(c, parent);
	serve(3);
}

static int start_helper(struct helper *h, const struct spy_creds *c)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		return -errno;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(sv[0]);
		close(sv[1]);
		return -e;
	}
	if (pid == 0) {
		helper_main(sv[1], c, parent);
		_exit(0);
	}
	close(sv[1]);
	h->pid = pid;
	h->sock = sv[0];
	h->dead = false;
	spy_creds_release(&h->creds);
	h->creds = *c;
	h->creds.groups = spy_xcalloc(c->ngroups + 1, sizeof(gid_t));
	memcpy(h->creds.groups, c->groups, c->ngroups * sizeof(gid_t));
	spy_log(SPY_LOG_DEBUG, "credopen: helper %d for uid %u gid %u (%zu groups)", (int)pid,
		(unsigned)c->fsuid, (unsigned)c->fsgid, c->ngroups);
	return 0;
}

/* The helper for c: a running one, a new one, or NULL (one for c failed before). */
static struct helper *helper_for(struct spy_credopen *co, const struct spy_creds *c, int *err)
{
	struct helper *oldest = &co->h[0];
	for (size_t i = 0; i < CREDOPEN_HELPERS; i++) {
		struct helper *h = &co->h[i];
		if ((h->pid || h->dead) && same_creds(&h->creds, c)) {
			h->used = ++co->clock;
			*err = -EIO;
			return h->dead ? NULL : h;
		}
		if (h->used < oldest->used) {
			oldest = h;
		}
	}
	end_helper(oldest);
	*err = start_helper(oldest, c);
	if (*err < 0) {
		return NULL;
	}
	oldest->used = ++co->clock;
	return oldest;
}

static int64_t now_ms(void)
{
	return (int64_t)(spy_now_ns() / 1000000);
}

/* Wait for h's reply, at most CREDOPEN_WAIT_MS in all. */
static int await_reply(struct helper *h)
{
	int64_t deadline = now_ms() + CREDOPEN_WAIT_MS;
	struct pollfd pfd = { h->sock, POLLIN, 0 };
	for (;;) {
		int64_t left = deadline - now_ms();
		int r = left > 0 ? poll(&pfd, 1, (int)left) : 0;
		if (r > 0) {
			break;
		}
		if (r < 0 && errno == EINTR) {
			continue;
		}
		return -ETIMEDOUT;
	}
	int32_t rc;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { &rc, sizeof(rc) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			    .msg_controllen = sizeof(cm.b) };
	ssize_t n;
	while ((n = recvmsg(h->sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT)) < 0 && errno == EINTR) {
	}
	if (n != (ssize_t)sizeof(rc)) {
		return -EIO;
	}
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	int fd = -1;
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int))) {
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	}
	if (rc == 0 && fd >= 0) {
		return fd;
	}
	if (fd >= 0) {
		close(fd);
	}
	return rc < 0 && rc > -4096 ? rc : -EIO;
}

static int ask(struct helper *h, int dirfd, const char *path)
{
	size_t len = strlen(path);
	if (len > 4096) {
		return -ENAMETOOLONG;
	}
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	memset(&cm, 0, sizeof(cm));
	struct iovec iov = { (void *)path, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			    .msg_controllen = sizeof(cm.b) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &dirfd, sizeof(int));
	ssize_t w;
	while ((w = sendmsg(h->sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
	}
	return w < 0 ? -EIO : await_reply(h);
}

int spy_credopen(struct spy_credopen *co, pid_t pid, const struct spy_creds *then, int dirfd,
		 const char *path)
{
	struct spy_creds now;
	int rc = spy_creds_read(pid, &now);
	if (rc < 0) {
		/* The program is gone or its status unreadable: whose file it is cannot be known. */
		return rc;
	}
	bool direct;
	const struct spy_creds *c = whose(pid, then, &now, &direct);
	if (!c || direct) {
		spy_creds_release(&now);
		return c ? spy_open_path(dirfd, path, SPY_OPEN_IN_ROOT, NULL) : -EPERM;
	}
	struct helper *h = helper_for(co, c, &rc);
	spy_creds_release(&now);
	if (!h) {
		return rc;
	}
	rc = ask(h, dirfd, path);
	if (rc == -EIO || rc == -ETIMEDOUT) {
		spy_log(SPY_LOG_DEBUG, "credopen: helper %d failed (%s); its files are not read", (int)h->pid,
			strerror(-rc));
		end_helper(h);
		h->dead = true;
	}
	return rc;
}
