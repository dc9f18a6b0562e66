/*
 * spy dump: print every Python thread's stack once, from a live process
 * (--pid) or a core file (--core).
 *
 * The look is the profiler's (prof_look: the same thread walk record's
 * ticks use, with the target stopped for a bounded time); everything that
 * formats or prints happens after it runs again (dump-print.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd/cmd.h"
#include "cmd/dump.h"
#include "cmd/opts.h"
#include "common/util.h"

struct dump_opts {
	struct prof_look_opts look;
	bool json;
};

static const char *const dump_usage[] = {
	"spy dump [OPTIONS] --pid PID",
	"spy dump [OPTIONS] --core COREFILE [--exe PYTHON] [--root DIR]",
	NULL,
};

static int thread_order(const void *a, const void *b)
{
	const struct prof_look_thread *x = a, *y = b;
	/* Unknown TIDs (0) sort last; otherwise ascending, so the main thread (TID == PID) leads. */
	uint32_t tx = x->py.native_tid > 0 ? (uint32_t)x->py.native_tid : UINT32_MAX;
	uint32_t ty = y->py.native_tid > 0 ? (uint32_t)y->py.native_tid : UINT32_MAX;
	return tx < ty ? -1 : tx > ty;
}

static int parse_args(int argc, char **argv, struct dump_opts *o, bool *help)
{
	const struct opt opts[] = {
		{ 'p', "pid", OPT_PID, &o->look.pid, "PID", "the process to dump" },
		{ 0, "core", OPT_STRING, &o->look.core, "COREFILE", "dump a core file instead of a process" },
		{ 0, "exe", OPT_STRING, &o->look.exe, "PYTHON",
		  "with --core: the executable that dumped it (default: from the core's notes)" },
		{ 0, "root", OPT_STRING, &o->look.root, "DIR",
		  "with --core: the root filesystem the core's paths live in (a container's)" },
		{ 'l', "locals", OPT_BOOL, &o->look.locals, NULL,
		  "show each frame's arguments and locals (short reprs)" },
		{ 'j', "json", OPT_BOOL, &o->json, NULL, "print one JSON document (doc/dump-json.md)" },
		{ 'n', "native", OPT_BOOL, &o->look.native, NULL,
		  "interleave native (C/C++) frames with the Python frames" },
		{ 0, "native-all", OPT_BOOL, &o->look.native_all, NULL,
		  "with --native, also show the interpreter's own frames (eval loop, call trampolines)" },
		{ 0, "tasks", OPT_BOOL, &o->look.tasks, NULL,
		  "also list each event loop's asyncio tasks: name, state, coroutine chain, await tree "
		  "(Python 3.8+; older: refused)" },
		{ 0 },
	};
	int rc = cmd_parse_options("dump", dump_usage, opts, argc, argv, NULL, 0, NULL);
	*help = rc == 0;
	if (rc >= 0) {
		return rc;
	}
	if (!o->look.pid == !o->look.core) {
		return cmd_usage_error("dump", o->look.pid ? "--pid and --core exclude each other"
						      : "--pid or --core is required");
	}
	if (o->look.exe && !o->look.core) {
		return cmd_usage_error("dump", "--exe goes with --core");
	}
	if (o->look.root && !o->look.core) {
		return cmd_usage_error("dump", "--root goes with --core");
	}
	o->look.native |= o->look.native_all;
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
	prof_install_stop_handlers();
	struct spy_err err = SPY_ERR_INIT;
	struct prof_look l;
	rc = prof_look(&l, &o.look, &err);
	int exit_code = 0;
	if (prof_stop_signal()) {
		/* The shell's convention for death by a signal, after a clean detach. */
		exit_code = 128 + prof_stop_signal();
	} else if (rc < 0) {
		exit_code = cmd_fail(&err);
	} else if (l.tasks_error && l.tasks_err.code == SPY_EVERSION) {
		/* A version whose tasks cannot be read is refused, as a whole. */
		exit_code = cmd_fail(&l.tasks_err);
	} else {
		qsort(l.threads, l.n, sizeof(*l.threads), thread_order);
		if (o.json) {
			dump_print_json(&l, stdout);
		} else {
			dump_print_text(&l, stdout);
		}
		if (ferror(stdout)) {
			spy_err_set(&err, SPY_EIO, "writing the dump to stdout failed");
			exit_code = cmd_fail(&err);
		}
	}
	prof_look_release(&l);
	return exit_code;
}
