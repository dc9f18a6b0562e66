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
#include "profiler/profiler.h"

struct dump_result {
	int pid;
	const char *cmdline, *version, *binary;
	const char *core;                  /* the core file, or NULL for a live process */
	bool free_threaded;                /* a --disable-gil build */
	bool no_gil;                       /* ... running with its GIL off: nobody holds it */
	struct prof_look_thread *threads;
	size_t n;
	bool locals;
	size_t locals_left;                /* of PROF_LOCALS_BUDGET */
	/* --tasks: the asyncio tasks (tasks_total may exceed ntasks, which
	 * PROF_MAX_TASKS bounds), or why there are none (tasks_error). */
	bool tasks;
	struct pyrt_task *task_v;
	size_t ntasks, tasks_total;
	const char *tasks_error;
	bool incomplete;                   /* the target was let go before everything was read */
	double stopped_ms;
};

const char *dump_state_name(enum prof_state s);
/* One line of deadlock hint into out (empty when nothing looks stuck). */
void dump_hint(const struct dump_result *r, struct spy_buf *out);
void dump_print_text(const struct dump_result *r, FILE *f);
void dump_print_json(const struct dump_result *r, FILE *f);
/* dump-tasks.c: the --tasks section of the text and of the JSON document. */
void dump_print_tasks_text(const struct dump_result *r, struct spy_buf *b);
void dump_print_tasks_json(const struct dump_result *r, struct spy_buf *b);

#endif
