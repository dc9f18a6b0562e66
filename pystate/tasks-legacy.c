/*
 * asyncio tasks of 3.11-3.13, from the _asyncio module's own state: a
 * placeholder until that backend lands (see tasks.c for the contract).
 */
#include "common/err.h"
#include "pystate/internal.h"

const bool pyrt_tasks_legacy_ready = false;

int pyrt_tasks_legacy(struct pyrt *rt, struct pyrt_task *out, size_t max, size_t *n,
		      struct spy_err *err)
{
	(void)rt;
	(void)out;
	(void)max;
	*n = 0;
	return spy_err_set(err, SPY_EVERSION, "asyncio tasks: Python 3.11-3.13 not supported yet");
}

int pyrt_running_task_legacy(struct pyrt *rt, const struct py_thread *t, struct pyrt_running_task *r)
{
	(void)rt;
	(void)t;
	(void)r;
	return -SPY_EVERSION;
}
