/*
 * What outlives one proc: the registry of the procs attached, which an
 * atexit() handler detaches from on any exit() path, and the handlers of
 * the signals that ask a sampling loop to stop (proc_stop_requested).
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/internal.h"

volatile sig_atomic_t proc_stop_requested;

/* ---- the registry of attached procs, for atexit() ---- */

static struct proc *attached_procs;
/* An agent profiles each process from a thread of its own: the registry is shared. */
static pthread_mutex_t attached_mu = PTHREAD_MUTEX_INITIALIZER;

static void detach_all_at_exit(void)
{
	pthread_mutex_lock(&attached_mu);
	struct proc *left = attached_procs;
	pthread_mutex_unlock(&attached_mu);
	while (left) {
		struct proc *p = left;
		proc_detach(p);
		/* A thread that would not stop keeps p attached; the kernel frees it when we exit. */
		tracer_forget(p);
		pthread_mutex_lock(&attached_mu);
		left = attached_procs;
		pthread_mutex_unlock(&attached_mu);
	}
}

void tracer_remember(struct proc *p)
{
	static bool installed;
	pthread_mutex_lock(&attached_mu);
	if (!installed) {
		installed = atexit(detach_all_at_exit) == 0;
	}
	bool known = false;
	for (struct proc *q = attached_procs; q && !known; q = q->next_attached) {
		known = q == p;
	}
	if (!known) {
		p->next_attached = attached_procs;
		attached_procs = p;
	}
	pthread_mutex_unlock(&attached_mu);
}

void tracer_forget(struct proc *p)
{
	pthread_mutex_lock(&attached_mu);
	for (struct proc **pp = &attached_procs; *pp; pp = &(*pp)->next_attached) {
		if (*pp == p) {
			*pp = p->next_attached;
			p->next_attached = NULL;
			break;
		}
	}
	pthread_mutex_unlock(&attached_mu);
}

/* ---- stop handlers ---- */

static void on_stop_signal(int sig)
{
	/* The signal number, so that cmd can exit with 128 + sig. */
	proc_stop_requested = sig;
}

static volatile sig_atomic_t hup_ignored, hup_seen;

static void on_hup(int sig)
{
	(void)sig;
	hup_seen = 1;
}

void proc_ignore_hup(void)
{
	hup_ignored = 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_hup;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGHUP, &sa, NULL);
}

bool proc_hup_seen(void)
{
	bool seen = hup_seen;
	hup_seen = 0;
	return seen;
}

void proc_install_stop_handlers(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a blocking call must return EINTR so its caller sees the flag. */
	sa.sa_flags = 0;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* A closed terminal or ssh session must not lose the recording. */
	if (!hup_ignored) {
		sigaction(SIGHUP, &sa, NULL);
	}
}
