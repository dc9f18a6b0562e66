/*
 * spy dump: print every Python thread's stack once, from a live process
 * (--pid) or a core file (--core).
 *
 * The order of work is what keeps the stopped window short: what each thread
 * is blocked in is read from /proc *before* pausing (once paused every
 * thread reads as 't' and its syscall is interrupted), the target is
 * stopped only for the memory walk (stacks, locals, where the GIL is), and
 * everything that classifies, formats or prints happens after it runs
 * again (dump-print.c). A core file needs no pausing: the same collection
 * runs over its memory, and each thread's wait comes from its registers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/dump.h"
#include "cmd/native.h"
#include "cmd/opts.h"
#include "cmd/target.h"
#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"

/* The GIL is a mutex and a condition variable or two: few ranges. */
#define DUMP_GIL_RANGES 6

struct dump_opts {
	int pid;
	const char *core, *exe, *root;
	bool locals, json;
	bool native, native_all;
	bool tasks;
	struct pyrt_async_hints ah; /* --tasks: found before pausing */
	struct spy_err tasks_err;
	struct native *nat;        /* --native: set up once the target is open */
	struct native_pcs *pcs;    /* per collected thread, in collection order */
};

static const char *const dump_usage[] = {
	"spy dump [OPTIONS] --pid PID",
	"spy dump [OPTIONS] --core COREFILE [--exe PYTHON] [--root DIR]",
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
 * few milliseconds, far too short to hit. SPY_TEST_HOLD_PAUSED_MS widens it,
 * in test builds only (-Dtest_hooks=true): a knob that holds a production
 * target stopped has no business in an installed spy.
 */
static void hold_paused_for_tests(void)
{
#ifndef SPY_TEST_HOOKS
	const char *v = NULL;
#else
	const char *v = getenv("SPY_TEST_HOLD_PAUSED_MS");
#endif
	if (!v) {
		return;
	}
	long ms = strtol(v, NULL, 10);
	for (long waited = 0; waited < ms && !proc_stop_requested; waited += 10) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/*
 * A thread waiting for the GIL wakes every switch interval (5 ms) to ask
 * the holder to let go, and reads R for that moment; the more so right
 * after a pause, which interrupts every wait. And a wait that a pause
 * interrupted goes on in restart_syscall, which does not say on which
 * futex. Threads that read either way are looked at again, a little later,
 * a few times, over more than a switch interval: by then a GIL waiter has
 * waited again, on the GIL's own futex.
 */
#define WAIT_LOOKS 4
#define WAIT_LOOK_GAP_NS (2 * 1000 * 1000)

static bool look_again(const struct proc_wait *w)
{
	return w->kind == PROC_WAIT_RUNNING || (w->kind == PROC_WAIT_FUTEX && !w->futex);
}

/*
 * Every thread and what it waits on, before pausing (see the top of this
 * file): from /proc for a live process, from the notes for a core, which
 * never changes and is not looked at again.
 */
static long read_os_threads(struct spy_process *p, struct spy_thread_info *out, size_t max,
			    struct spy_err *err)
{
	long n = p->ops->threads(p, out, max, err);
	for (int look = 1; look < WAIT_LOOKS && n > 0 && p->ops->thread_wait; look++) {
		bool again = false;
		for (long i = 0; i < n && !again; i++) {
			again = look_again(&out[i].wait);
		}
		if (!again) {
			break;
		}
		struct timespec gap = { 0, WAIT_LOOK_GAP_NS };
		nanosleep(&gap, NULL);
		for (long i = 0; i < n; i++) {
			if (look_again(&out[i].wait)) {
				p->ops->thread_wait(p, out[i].tid, &out[i].wait);
			}
		}
	}
	return n;
}

static const struct spy_thread_info *find_os_thread(const struct spy_thread_info *os, size_t n, pid_t tid)
{
	for (size_t i = 0; i < n; i++) {
		if (os[i].tid == tid) {
			return &os[i];
		}
	}
	return NULL;
}

static void collect_locals(struct pyrt *rt, struct dump_thread *d, size_t *left)
{
	d->frame_locals = spy_xcalloc(d->stack.n ? d->stack.n : 1, sizeof(*d->frame_locals));
	for (size_t j = 0; j < d->stack.n; j++) {
		struct dump_frame_locals *fl = &d->frame_locals[j];
		/* What the array may grow by for this frame (doubling: twice). */
		size_t worst = 2 * PYRT_MAX_LOCALS * sizeof(*d->locals);
		if (*left < worst) {
			fl->first = d->nlocals;
			fl->unreadable = fl->over_budget = true;
			continue;
		}
		size_t had = d->alloc_locals;
		SPY_GROW(d->locals, d->alloc_locals, d->nlocals + PYRT_MAX_LOCALS);
		size_t grown = (d->alloc_locals - had) * sizeof(*d->locals);
		*left -= grown < *left ? grown : *left;
		fl->first = d->nlocals;
		int rc = pyrt_frame_locals(rt, j, d->locals + d->nlocals, PYRT_MAX_LOCALS, &fl->n);
		fl->unreadable = rc < 0;
		fl->over_budget = rc == -SPY_EBOUND;
		d->nlocals += fl->n;
	}
	d->nframe_locals = d->stack.n;
}

/*
 * Everything read of one thread while the target is held: its Python stack
 * (and locals), and whether the futex it waits on is the GIL. Kept apart
 * from printing so that other per-thread readings (native frames) can join.
 */
static void collect_thread(struct pyrt *rt, struct dump_thread *d, const struct dump_opts *o,
			   size_t *locals_left)
{
	struct pyrt_range gil[DUMP_GIL_RANGES];
	/* A thread whose walk fails still gets printed, with what was read. */
	pyrt_stack(rt, &d->py, &d->stack, NULL);
	if (o->locals) {
		collect_locals(rt, d, locals_left);
	}
	size_t ng = pyrt_gil_ranges(rt, d->py.interp, gil, DUMP_GIL_RANGES);
	bool in_gil = false;
	for (size_t k = 0; k < ng && d->wait.kind == PROC_WAIT_FUTEX; k++) {
		in_gil |= d->wait.futex >= gil[k].lo && d->wait.futex < gil[k].hi;
	}
	d->in_gil = in_gil;
	d->state = dump_classify(&d->wait, ng > 0, in_gil);
}

/* The Python threads, each matched with its OS thread and collected. */
static int collect(struct target *t, const struct spy_thread_info *os, size_t nos,
		   struct dump_result *r, const struct dump_opts *o, struct spy_err *err)
{
	struct py_thread *py = spy_xcalloc(SPY_MAX_THREADS, sizeof(*py));
	size_t n = 0;
	int rc = pyrt_threads(t->rt, py, SPY_MAX_THREADS, &n, err);
	if (n > SPY_MAX_THREADS) {
		n = SPY_MAX_THREADS;
	}
	if (rc == 0 && n) {
		spy_log(SPY_LOG_DEBUG, "dump: garbage collector collecting: %d (-1: unknown)",
			pyrt_gc_collecting(t->rt, py[0].interp));
	}
	const char **names = spy_xcalloc(n ? n : 1, sizeof(*names));
	if (rc == 0 && n) {
		struct spy_err nerr = SPY_ERR_INIT;
		if (pyrt_thread_names(t->rt, py, n, names, &nerr) < 0) {
			spy_log(SPY_LOG_DEBUG, "dump: no thread names: %s", nerr.msg);
		}
	}
	if (o->locals) {
		pyrt_locals_budget(t->rt, PYRT_LOCALS_READS);
	}
	for (size_t i = 0; rc == 0 && i < n && !proc_stop_requested; i++) {
		struct dump_thread *d = &r->threads[r->n++];
		d->py = py[i];
		d->name = names[i];
		const struct spy_thread_info *ot = find_os_thread(os, nos, d->py.native_tid);
		if (ot) {
			memcpy(d->comm, ot->comm, sizeof(d->comm));
			d->wait = ot->wait;
		}
		collect_thread(t->rt, d, o, &r->locals_left);
		if (o->nat) {
			native_note_anchors(t, &o->pcs[r->n - 1]);
			native_unwind(o->nat, t, d->py.native_tid, &o->pcs[r->n - 1]);
		}
	}
	free(names);
	free(py);
	return rc;
}

/* What the stopped window needs, for eng_look. */
struct look {
	struct target *t;
	const struct spy_thread_info *os;
	size_t nos;
	struct dump_result *r;
	struct dump_opts *o;
};

/* --tasks: after the threads (a running task's walk reuses pyrt_stack's scratch). */
static void collect_tasks(struct target *t, struct dump_result *r, struct dump_opts *o)
{
	r->task_v = spy_xcalloc(DUMP_MAX_TASKS, sizeof(*r->task_v));
	int rc = pyrt_tasks(t->rt, &o->ah, r->task_v, DUMP_MAX_TASKS, &r->tasks_total, &o->tasks_err);
	if (rc < 0) {
		r->tasks_error = o->tasks_err.msg;
		r->tasks_total = 0;
	}
	r->ntasks = r->tasks_total < DUMP_MAX_TASKS ? r->tasks_total : DUMP_MAX_TASKS;
}

static int look_paused(void *ctx, struct spy_err *err)
{
	struct look *l = ctx;
	hold_paused_for_tests();
	int rc = proc_stop_requested ? 0 : collect(l->t, l->os, l->nos, l->r, l->o, err);
	if (rc == 0 && l->o->tasks && !proc_stop_requested) {
		collect_tasks(l->t, l->r, l->o);
	}
	return rc;
}

/* The threads' waits, then one look with the target held (a core: as it is). */
static int dump_target(struct target *t, struct dump_result *r, struct dump_opts *o,
		       struct spy_err *err)
{
	struct spy_process p = target_process(t);
	struct spy_thread_info *os = spy_xcalloc(SPY_MAX_THREADS, sizeof(*os));
	long nos = read_os_threads(&p, os, SPY_MAX_THREADS, err);
	struct look l = { t, os, nos > 0 ? (size_t)nos : 0, r, o };
	uint64_t t0 = ticker_now_ns();
	int rc = nos < 0 ? (int)nos : eng_look(&p, look_paused, &l, err);
	spy_log(SPY_LOG_DEBUG, "dump: target paused for %.3f ms (%zu threads)",
		(double)(ticker_now_ns() - t0) / 1e6, r->n);
	free(os);
	return rc;
}

static void release_result(struct dump_result *r)
{
	for (size_t i = 0; i < r->n; i++) {
		spy_stack_release(&r->threads[i].stack);
		free(r->threads[i].frame_locals);
		free(r->threads[i].locals);
	}
	free(r->threads);
	free(r->task_v);
}

static int parse_args(int argc, char **argv, struct dump_opts *o, bool *help)
{
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &o->pid, "PID", "the process to dump" },
		{ 0, "core", OPT_STRING, &o->core, "COREFILE", "dump a core file instead of a process" },
		{ 0, "exe", OPT_STRING, &o->exe, "PYTHON",
		  "with --core: the executable that dumped it (default: from the core's notes)" },
		{ 0, "root", OPT_STRING, &o->root, "DIR",
		  "with --core: the root filesystem the core's paths live in (a container's)" },
		{ 'l', "locals", OPT_BOOL, &o->locals, NULL,
		  "show each frame's arguments and locals (short reprs)" },
		{ 'j', "json", OPT_BOOL, &o->json, NULL, "print one JSON document (doc/dump-json.md)" },
		{ 'n', "native", OPT_BOOL, &o->native, NULL,
		  "interleave native (C/C++) frames with the Python frames" },
		{ 0, "native-all", OPT_BOOL, &o->native_all, NULL,
		  "with --native, also show the interpreter's own frames (eval loop, call trampolines)" },
		{ 0, "tasks", OPT_BOOL, &o->tasks, NULL,
		  "also list each event loop's asyncio tasks: name, state, coroutine chain, await tree "
		  "(Python 3.8+; older: refused)" },
		{ 0 },
	};
	char **rest = spy_xcalloc((size_t)argc + 1, sizeof(*rest));
	int nrest = 0;
	int rc = cmd_parse_options("dump", dump_usage, opts, argc, argv, rest, &nrest);
	const char *extra = nrest > 0 ? rest[0] : NULL;
	free(rest);
	*help = rc == 0;
	if (rc >= 0) {
		return rc;
	}
	if (extra) {
		return cmd_usage_error("dump", "unexpected argument '%s'", extra);
	}
	if (!o->pid == !o->core) {
		return cmd_usage_error("dump", o->pid ? "--pid and --core exclude each other"
						      : "--pid or --core is required");
	}
	if (o->exe && !o->core) {
		return cmd_usage_error("dump", "--exe goes with --core");
	}
	if (o->root && !o->core) {
		return cmd_usage_error("dump", "--root goes with --core");
	}
	o->native |= o->native_all;
	return 0;
}

int cmd_dump(int argc, char **argv)
{
	struct dump_opts o = { 0 };
	bool help;
	int rc = parse_args(argc, argv, &o, &help);
	if (rc || help) {
		return rc;
	}

	proc_install_stop_handlers();
	struct spy_err err = SPY_ERR_INIT;
	/* What a kind of process cannot do, its backend says: a core cannot be unwound. */
	struct spy_process kind = o.core ? spy_process_core(NULL) : spy_process_live(NULL);
	if (o.native && !spy_process_can(&kind, SPY_CAP_UNWIND, "--native", &err)) {
		return cmd_fail(&err);
	}
	struct target t;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	rc = o.core ? target_open_core(&t, o.core, o.exe, o.root, &strs, &err)
		    : target_open_pid(&t, o.pid, &strs, &err);
	if (rc < 0) {
		spy_strtab_release(&strs);
		return cmd_fail(&err);
	}
	if (o.tasks && (pyrt_tasks_supported(t.rt, &err) < 0 ||
			target_async_hints(&t, false, &o.ah) < 0)) {
		target_release(&t);
		spy_strtab_release(&strs);
		return cmd_fail(&err);
	}
	struct dump_result r = {
		.pid = target_pid(&t),
		.cmdline = target_cmdline(&t),
		.version = pyrt_version_string(t.rt),
		.free_threaded = pyrt_free_threaded(t.rt),
		.no_gil = !pyrt_has_gil(t.rt),
		.binary = t.binary,
		.core = o.core,
		.threads = spy_xcalloc(SPY_MAX_THREADS, sizeof(*r.threads)),
		.locals = o.locals,
		.locals_left = DUMP_LOCALS_BUDGET,
		.tasks = o.tasks,
	};
	struct native nat;
	if (o.native) {
		if (native_init(&nat, &t, o.native_all, &err) < 0) {
			release_result(&r);
			target_release(&t);
			spy_strtab_release(&strs);
			return cmd_fail(&err);
		}
		o.nat = &nat;
		o.pcs = spy_xcalloc(SPY_MAX_THREADS, sizeof(*o.pcs));
	}
	rc = dump_target(&t, &r, &o, &err);
	/* Symbols and merging after the target runs again, before sorting reorders threads. */
	for (size_t i = 0; o.nat && i < r.n; i++) {
		native_merge(o.nat, &t, &o.pcs[i], &r.threads[i].stack);
	}

	int exit_code = 0;
	if (proc_stop_requested) {
		/* The shell's convention for death by a signal, after a clean detach. */
		exit_code = 128 + (int)proc_stop_requested;
	} else if (rc < 0) {
		exit_code = cmd_fail(&err);
	} else if (r.tasks_error && o.tasks_err.code == SPY_EVERSION) {
		/* A version whose tasks cannot be read is refused, as a whole. */
		exit_code = cmd_fail(&o.tasks_err);
	} else {
		qsort(r.threads, r.n, sizeof(*r.threads), thread_order);
		if (o.json) {
			dump_print_json(&r, stdout);
		} else {
			dump_print_text(&r, stdout);
		}
		if (ferror(stdout)) {
			spy_err_set(&err, SPY_EIO, "writing the dump to stdout failed");
			exit_code = cmd_fail(&err);
		}
	}
	release_result(&r);
	if (o.nat) {
		native_log_stats(o.nat);
		for (size_t i = 0; i < SPY_MAX_THREADS; i++) {
			native_pcs_release(&o.pcs[i]);
		}
		free(o.pcs);
		native_release(o.nat);
	}
	target_release(&t);
	spy_strtab_release(&strs);
	return exit_code;
}
