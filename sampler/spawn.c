/*
 * Launching `spy record -- PROGRAM ARGS`.
 *
 * The child stays in spy's process group, in the foreground of the terminal:
 * an interactive program must still read its terminal, and Ctrl-C then
 * reaches it directly from the tty driver. That is why SIGINT is not simply
 * forwarded: a second copy would interrupt the program's own clean-up. The
 * handler notes where the signal came from (si_code SI_KERNEL means the
 * terminal, which signalled the whole group) and only a signal sent to spy
 * alone is passed on.
 *
 * An exec failure comes back through a close-on-exec pipe, so "no such
 * program" is an error of spy's with the reason, not a child exiting 127.
 *
 * `sudo spy record -- prog` must not run prog as root: when spy runs as
 * root with SUDO_UID set, the child takes SUDO_UID, SUDO_GID and that
 * user's supplementary groups before exec (spy itself keeps root, which it
 * needs to trace). The credentials are worked out before the fork; a drop
 * that fails comes back through the same pipe, and nothing is run.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sampler/internal.h"
#include "sampler/sampler.h"

/* Whether the last stop signal came from the terminal (see the top). */
static volatile sig_atomic_t stop_from_tty;

static void on_stop(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	stop_from_tty = si && si->si_code == SI_KERNEL;
	proc_stop_requested = sig;
}

void spawn_install_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_stop;
	/* No SA_RESTART: a blocking wait must return EINTR so the loop sees the flag. */
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* A closed terminal or ssh session must not lose the recording. */
	sigaction(SIGHUP, &sa, NULL);
}

/* A decimal id as sudo writes it: digits only, no sign, in range. */
static bool parse_id(const char *s, unsigned long *out)
{
	if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10) {
		return false;
	}
	*out = strtoul(s, NULL, 10);
	return *out < 0xffffffffu;
}

/*
 * Who the launched program runs as (spawn.c): spy run as root by sudo
 * (getuid() 0, SUDO_UID set and not 0) drops the child to SUDO_UID,
 * SUDO_GID and the user's supplementary groups; otherwise drop is false.
 * -SPY_EUSAGE when SUDO_UID/SUDO_GID are malformed. spawn_start calls it.
 */
#define SPAWN_MAX_GROUPS 65536
struct spawn_creds {
	bool drop;
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[SPAWN_MAX_GROUPS];
};

static int spawn_sudo_creds(struct spawn_creds *c, struct spy_err *err)
{
	memset(c, 0, sizeof(*c));
	const char *su = getenv("SUDO_UID"), *sg = getenv("SUDO_GID");
	if (getuid() != 0 || !su) {
		return 0;
	}
	unsigned long uid, gid;
	if (!parse_id(su, &uid) || !parse_id(sg, &gid)) {
		return spy_err_set(err, SPY_EUSAGE,
				   "SUDO_UID/SUDO_GID ('%s'/'%s') are not user and group ids: not running the program as root",
				   su, sg ? sg : "");
	}
	if (uid == 0) {
		return 0; /* sudo from root: root it is */
	}
	c->drop = true;
	c->uid = (uid_t)uid;
	c->gid = (gid_t)gid;
	/* Supplementary groups of the user, when it has an entry; else gid alone. */
	struct passwd *pw = getpwuid(c->uid);
	int n = SPAWN_MAX_GROUPS;
	if (!pw || getgrouplist(pw->pw_name, c->gid, c->groups, &n) < 0) {
		c->groups[0] = c->gid;
		n = 1;
	}
	c->ngroups = n;
	return 0;
}

/* In the child: become c's user for good, or return the errno. */
static int drop_to(const struct spawn_creds *c)
{
	if (setgroups((size_t)c->ngroups, c->groups) != 0 || setgid(c->gid) != 0 ||
	    setuid(c->uid) != 0) {
		return errno ? errno : EPERM;
	}
	/* All three ids changed for a process that was root: no way back. */
	if (setuid(0) == 0 || getegid() != c->gid) {
		return EPERM;
	}
	return 0;
}

int spawn_start(struct spawn *s, char *const argv[], struct spy_err *err)
{
	int fds[2];
	memset(s, 0, sizeof(*s));
	/* Static: a user's groups can number thousands, too many for the stack. */
	static struct spawn_creds creds;
	int rc = spawn_sudo_creds(&creds, err);
	if (rc < 0) {
		return rc;
	}
	if (pipe2(fds, O_CLOEXEC) < 0) {
		return spy_err_set(err, SPY_EIO, "cannot create a pipe: %s", strerror(errno));
	}
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(fds[0]);
		close(fds[1]);
		return spy_err_set(err, SPY_EIO, "cannot fork: %s", strerror(e));
	}
	if (pid == 0) {
		close(fds[0]);
		/* The program gets the limits it would have had without spy. */
		proc_fd_limit_restore();
		/* A failed drop is sent negated: the parent tells it from exec's. */
		int e = creds.drop ? -drop_to(&creds) : 0;
		if (!e) {
			execvp(argv[0], argv);
			e = errno;
		}
		ssize_t w = write(fds[1], &e, sizeof(e));
		(void)w;
		_exit(127);
	}
	close(fds[1]);
	int e = 0;
	ssize_t n;
	do {
		n = read(fds[0], &e, sizeof(e));
	} while (n < 0 && errno == EINTR);
	close(fds[0]);
	s->pid = pid;
	if (n == (ssize_t)sizeof(e)) {
		spawn_reap(s, true);
		if (e < 0) {
			return spy_err_set(err, SPY_EPERM,
					   "cannot run '%s' as user %d (SUDO_UID): %s; not running it as root",
					   argv[0], (int)creds.uid, strerror(-e));
		}
		return spy_err_set(err, SPY_ENOPROC, "cannot run '%s': %s", argv[0], strerror(e));
	}
	return 0;
}

void spawn_forward(struct spawn *s)
{
	int sig = proc_stop_requested;
	if (!sig || s->reaped || stop_from_tty) {
		return;
	}
	kill(s->pid, sig);
}

bool spawn_reap(struct spawn *s, bool block)
{
	if (s->reaped) {
		return true;
	}
	int st;
	pid_t r = waitpid(s->pid, &st, block ? 0 : WNOHANG);
	if (r == s->pid) {
		s->reaped = true;
		s->status = st;
		return true;
	}
	/*
	 * ECHILD: someone else reaped it. While spy traces the child the
	 * sampler's own waits do, and proc_exit_status() has the status.
	 */
	if (r < 0 && errno == ECHILD) {
		s->reaped = true;
		s->status = -1;
		return true;
	}
	return false;
}

void spawn_abandon(struct spawn *s)
{
	if (!s->pid || s->reaped) {
		return;
	}
	kill(s->pid, SIGTERM);
	for (int i = 0; i <= 100; i++) {
		int st;
		pid_t r = waitpid(s->pid, &st, WNOHANG | __WALL);
		if (r == s->pid && (WIFEXITED(st) || WIFSIGNALED(st))) {
			s->reaped = true;
			s->status = st;
			return;
		}
		if (r < 0 && errno != EINTR) {
			s->reaped = true; /* ECHILD: gone already */
			s->status = -1;
			return;
		}
		if (i == 100) {
			/* Still there after a second (or stopped, traced): no more asking. */
			kill(s->pid, SIGKILL);
			while ((r = waitpid(s->pid, &st, __WALL)) == s->pid && !WIFEXITED(st) &&
			       !WIFSIGNALED(st)) {
			}
			s->reaped = true;
			s->status = r == s->pid ? st : -1;
			return;
		}
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}
