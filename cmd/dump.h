/*
 * spy dump's data, shared by its collector (dump.c) and its printers
 * (dump-print.c): what was read of each thread while the target was paused,
 * plus its state, decided from /proc (or a core's registers) and from where
 * the GIL lives.
 */
#ifndef SPY_CMD_DUMP_H
#define SPY_CMD_DUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/buf.h"
#include "common/sample.h"
#include "pystate/pystate.h"
#include "sampler/sampler.h"

/* The states of the CLI contract, plus unknown (no /proc, no registers). */
enum dump_state {
	DUMP_UNKNOWN = 0,
	DUMP_RUNNING,
	DUMP_IDLE,
	DUMP_LOCK,      /* waiting on a lock */
	DUMP_GIL,       /* waiting for the GIL */
};

/* One frame's locals: [first, first + n) of the thread's locals array. */
struct dump_frame_locals {
	size_t first, n;
	bool unreadable;
	bool over_budget;     /* not (all) read: DUMP_LOCALS_BUDGET or PYRT_LOCALS_READS was spent */
};

/*
 * Memory --locals may take over all threads: a frame holds up to
 * PYRT_MAX_LOCALS values of a few hundred bytes, and frames x threads of
 * a hostile (or just deep, wide) target would multiply into gigabytes.
 * Frames past the budget print "(locals left out: ...)".
 */
#define DUMP_LOCALS_BUDGET ((size_t)32 << 20)

struct dump_thread {
	struct py_thread py;
	struct spy_stack stack;
	struct proc_wait wait;
	enum dump_state state;
	char comm[17];
	const char *name;                  /* threading's name for it (interned), or NULL */
	bool in_gil;                       /* the futex waited on is the GIL's */
	/*
	 * --locals: per Python frame of stack, in order (native frames merged
	 * in later have none), and the values they point into.
	 */
	struct dump_frame_locals *frame_locals;
	size_t nframe_locals;
	struct py_local *locals;
	size_t nlocals, alloc_locals;
};

struct dump_result {
	int pid;
	const char *cmdline, *version, *binary;
	const char *core;                  /* the core file, or NULL for a live process */
	bool free_threaded;                /* a --disable-gil build */
	bool no_gil;                       /* ... running with its GIL off: nobody holds it */
	struct dump_thread *threads;
	size_t n;
	bool locals;
	size_t locals_left;                /* of DUMP_LOCALS_BUDGET */
	/* --tasks: the asyncio tasks (tasks_total may exceed ntasks, which
	 * DUMP_MAX_TASKS bounds), or why there are none (tasks_error). */
	bool tasks;
	struct pyrt_task *task_v;
	size_t ntasks, tasks_total;
	const char *tasks_error;
};

/* Tasks dump --tasks shows at most (each carries its chain: ~3 KiB). */
#define DUMP_MAX_TASKS 4096

const char *dump_state_name(enum dump_state s);
/* The state a wait observation gives, knowing whether its futex is the GIL's. */
enum dump_state dump_classify(const struct proc_wait *w, bool gil_known, bool futex_is_gil);
/* One line of deadlock hint into out (empty when nothing looks stuck). */
void dump_hint(const struct dump_result *r, struct spy_buf *out);
void dump_print_text(const struct dump_result *r, FILE *f);
void dump_print_json(const struct dump_result *r, FILE *f);
/* dump-tasks.c: the --tasks section of the text and of the JSON document. */
void dump_print_tasks_text(const struct dump_result *r, struct spy_buf *b);
void dump_print_tasks_json(const struct dump_result *r, struct spy_buf *b);

#endif
