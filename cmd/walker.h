/*
 * The engine's walker (sampler/engine.h) for a Python process: opening it
 * finds its runtime (target.c), a walk reads every thread's Python stack
 * (pystate), and with --native each thread's native stack is unwound in
 * the stopped window and merged once the process runs again (native.c).
 * The engine knows none of this; record and top hand it walker_ops().
 */
#ifndef SPY_CMD_WALKER_H
#define SPY_CMD_WALKER_H

#include <stdbool.h>

#include "cmd/native.h"
#include "cmd/target.h"
#include "sampler/engine.h"

/* One per invocation: the options and the scratch every process's walk shares. */
struct walker {
	struct spy_strtab *strs;     /* the command's */
	bool native, native_all;
	bool async;                  /* --async: a `task "NAME"` frame for the running task */
	bool gc;                     /* mark the thread collecting garbage (eng_thread.gc); set after walker_init */
	bool gc_known;               /* with gc: the runtime said at least once whether it was collecting */
	struct py_thread *py;        /* per tick, reused */
	/* --async: the root frame of each task name (names are interned:
	 * compared by pointer), so a sample interns nothing. */
	struct {
		const char *name, *frame;
	} task_frames[64];
	struct native_pcs *pcs;      /* --native: each thread's pcs, from the pause to the merge */
	/* --async --native: each thread's running task, from the walk to the
	 * merge (the merge needs the whole Python stack); name NULL: none. */
	struct walker_task {
		const char *name;
		size_t keep;
	} *task;
};

/* One process, the engine's eng_process.py. */
struct walked {
	struct target t;
	struct native *nat;          /* --native; NULL without */
	struct pyrt_async_hints ah;  /* --async: found when asyncio is loaded */
	uint64_t ah_looked_ns;       /* when the maps were last searched for it */
	bool names_cut_told;         /* the warning that thread names are incomplete, given */
};

void walker_init(struct walker *w, struct spy_strtab *strs, bool native, bool native_all, bool async);
struct eng_walker walker_ops(struct walker *w);
void walker_release(struct walker *w);
/* The target of a process the engine opened through the walker. */
const struct target *walker_target(const struct eng_process *p);
/*
 * -g on the opened process: -SPY_EUSAGE when it runs without a GIL (a
 * free-threaded build whose GIL is off), where no thread ever holds one
 * and -g would keep nothing.
 */
int walker_check_gil(const struct engine *e, bool gil, struct spy_err *err);
/* --async on the opened process: -SPY_EVERSION when its version's tasks cannot be read. */
int walker_check_async(const struct engine *e, struct spy_err *err);

#endif
