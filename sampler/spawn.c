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
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

int spawn_start(struct spawn *s, char *const argv[], struct spy_err *err)
{
	int fds[2];
	memset(s, 0, sizeof(*s));
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
		execvp(argv[0], argv);
		int e = errno;
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
