/*
 * spy dump: print every Python thread's stack once.
 *
 * The order of work is what keeps the stopped window short: thread states are
 * read from /proc *before* pausing (once paused every thread reads as 't'),
 * the target is stopped only for the memory walk, and everything that formats
 * or prints happens after it is running again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/opts.h"
#include "cmd/target.h"
#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"

struct dump_thread {
	struct py_thread py;
	struct spy_stack stack;
	char state;     /* /proc state letter before pausing; 0 if unknown */
	char comm[17];
};

static const char *const dump_usage[] = {
	"spy dump [OPTIONS] --pid PID",
	NULL,
};

static int thread_order(const void *a, const void *b)
{
	const struct dump_thread *x = a, *y = b;
	/* Unknown TIDs (0) sort last; otherwise ascending, so the main thread (TID == PID) leads. */
	uint32_t tx = x->py.native_tid > 0 ? (uint32_t)x->py.native_tid : UINT32_MAX;
	uint32_t ty = y->py.native_tid > 0 ? (uint32_t)y->py.native_tid : UINT32_MAX;
	return tx < ty ? -1 : tx > ty;
}

/*
 * Tests need to signal spy while it holds the target stopped, to prove the
 * target is released on every exit path; a real dump's stopped window is a
 * few milliseconds, far too short to hit. SPY_TEST_HOLD_PAUSED_MS widens it.
 */
static void hold_paused_for_tests(void)
{
	const char *v = getenv("SPY_TEST_HOLD_PAUSED_MS");
	if (!v) {
		return;
	}
	long ms = strtol(v, NULL, 10);
	for (long waited = 0; waited < ms && !proc_stop_requested; waited += 10) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static const char *state_name(char state)
{
	switch (state) {
	case 0:
		return "unknown";
	case 'R':
		return "running";
	default:
		return "idle";
	}
}

static void print_dump(const struct target *t, struct dump_thread *threads, size_t n)
{
	printf("Process %d: %s\n", (int)proc_pid(t->proc), proc_cmdline(t->proc));
	printf("Python %s (%s)\n", pyrt_version_string(t->rt), t->binary);
	for (size_t i = 0; i < n; i++) {
		const struct dump_thread *d = &threads[i];
		printf("\nThread %d (python 0x%llx) \"%s\" %s%s\n", (int)d->py.native_tid,
		       (unsigned long long)d->py.thread_id, d->comm, state_name(d->state),
		       d->py.holds_gil ? ", holds the GIL" : "");
		if (d->stack.n == 0) {
			printf("    (no Python frames)\n");
		}
		for (size_t j = 0; j < d->stack.n; j++) {
			const struct spy_frame *f = &d->stack.v[j];
			if (f->line) {
				printf("    %s (%s:%u)\n", f->func, f->file, f->line);
			} else {
				printf("    %s (%s)\n", f->func, f->file);
			}
		}
		if (d->stack.truncated) {
			printf("    ... (stack truncated: the walk stopped at an unreadable or bounded frame)\n");
		}
	}
	fflush(stdout);
}

/* States and names of the OS threads, read before the target is paused. */
static void fill_thread_info(struct proc *p, struct dump_thread *threads, size_t n)
{
	size_t ntasks = 0;
	const struct proc_thread *tasks = proc_threads(p, &ntasks);
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < ntasks; j++) {
			if (tasks[j].tid == threads[i].py.native_tid) {
				threads[i].state = tasks[j].state;
				memcpy(threads[i].comm, tasks[j].comm, sizeof(threads[i].comm));
				break;
			}
		}
	}
}

int cmd_dump(int argc, char **argv)
{
	int pid = 0;
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &pid, "PID", "the process to dump" },
		{ 0 },
	};
	struct spy_err err = SPY_ERR_INIT;
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	int nrest = 0;
	int rc = opts_parse(opts, argc, argv, rest, &nrest, &err);
	const char *extra = nrest > 0 ? rest[0] : NULL;
	free(rest);
	if (rc == OPTS_HELP) {
		opts_usage(stdout, dump_usage, opts);
		return 0;
	}
	if (rc < 0) {
		cmd_usage_error("dump", "%s", err.msg);
		opts_usage(stderr, dump_usage, opts);
		return 2;
	}
	if (extra) {
		return cmd_usage_error("dump", "unexpected argument '%s'", extra);
	}
	if (!pid) {
		return cmd_usage_error("dump", "--pid is required");
	}

	proc_install_stop_handlers();
	struct target t;
	rc = target_open_pid(&t, pid, &err);
	if (rc < 0) {
		return cmd_fail(&err);
	}

	struct dump_thread *threads = spy_xcalloc(SPY_MAX_THREADS, sizeof(*threads));
	struct py_thread *py = spy_xcalloc(SPY_MAX_THREADS, sizeof(*py));
	size_t n = 0;
	int exit_code = 0;

	rc = proc_list_threads(t.proc, &err);
	if (rc == 0) {
		rc = proc_attach(t.proc, &err);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (rc == 0) {
		rc = proc_pause(t.proc, &err);
	}
	if (rc == 0) {
		hold_paused_for_tests();
		if (!proc_stop_requested) {
			rc = pyrt_threads(t.rt, py, SPY_MAX_THREADS, &n, &err);
		}
		for (size_t i = 0; rc == 0 && i < n && !proc_stop_requested; i++) {
			threads[i].py = py[i];
			/* A thread whose walk fails still gets printed, with what was read. */
			pyrt_stack(t.rt, &py[i], &threads[i].stack, NULL);
		}
	}
	proc_detach(t.proc);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	spy_log(SPY_LOG_DEBUG, "dump: target paused for %.3f ms (%zu threads)",
		(double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6, n);

	if (proc_stop_requested) {
		/* The shell's convention for death by a signal, after a clean detach. */
		exit_code = 128 + (int)proc_stop_requested;
	} else if (rc < 0) {
		exit_code = cmd_fail(&err);
	} else {
		fill_thread_info(t.proc, threads, n);
		qsort(threads, n, sizeof(*threads), thread_order);
		print_dump(&t, threads, n);
	}
	for (size_t i = 0; i < n; i++) {
		spy_stack_release(&threads[i].stack);
	}
	free(threads);
	free(py);
	target_release(&t);
	return exit_code;
}
