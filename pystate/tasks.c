/*
 * asyncio tasks: every task of every event loop (dump --tasks) and the task
 * a thread is running (record --async).
 *
 * 3.14+: the _asyncio module exports _AsyncioDebug (struct
 * _Py_AsyncioModuleDebugOffsets, in its own ELF section .AsyncioDebug) for
 * debuggers: where a Task keeps its name, coroutine, state and awaited_by,
 * and where a thread state keeps its running loop and task and the head of
 * its list of tasks. cmd finds the section (pyrt_async_hints) and we read
 * every offset from the target, never from a table of ours.
 *
 * 3.11-3.13 walk the _asyncio module's own state instead: tasks-legacy.c,
 * through two hooks declared in internal.h, pyrt_tasks_legacy() and
 * pyrt_running_task_legacy(). Everything past the running task (matching
 * its coroutine frame against the stack, caching its name) is shared here.
 *
 * Everything read is hostile: lists are bounded by PYRT_MAX_TASKS and
 * cycle-checked, chains by PYRT_TASK_MAX_CHAIN, and a cut list still yields
 * what was read.
 */
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"

#define V(maj, min) (((uint32_t)(maj) << 24) | ((uint32_t)(min) << 16))

int pyrt_tasks_supported(const struct pyrt *rt, struct spy_err *err)
{
	uint32_t mm = rt->version & 0xffff0000u;
	if (mm >= V(3, 11) && mm < V(3, 14) && (rt->off.build & PYBUILD_FT) == 0) {
		return 0;
	}
	if (mm >= V(3, 14) && rt->off.frame_model == PYFRAME_IFRAME_EXEC) {
		return 0;
	}
	return spy_err_set(err, SPY_EVERSION,
			   "asyncio tasks need Python 3.11 or newer (this is Python %u.%u)",
			   rt->version >> 24, (rt->version >> 16) & 0xff);
}

const char *pyrt_task_name(struct pyrt *rt, spy_addr_t name_obj)
{
	struct py_value v;
	if (!name_obj) {
		return NULL;
	}
	pyrt_read_value(rt, name_obj, &v);
	if (v.kind == PYV_STR && v.text) {
		return v.text;
	}
	if (v.kind == PYV_INT && !v.ndigits) {
		/* 3.13+ names a task lazily: the counter, formatted by get_name(). */
		char buf[32];
		int len = snprintf(buf, sizeof(buf), "Task-%lld", (long long)v.ival);
		return spy_strtab_intern(rt->strs, buf, (size_t)len);
	}
	return NULL;
}

int pyrt_tasks(struct pyrt *rt, const struct pyrt_async_hints *h, struct pyrt_task *out, size_t max,
	       size_t *n, struct spy_err *err)
{
	*n = 0;
	int rc = pyrt_tasks_supported(rt, err);
	if (rc < 0) {
		return rc;
	}
	if ((rt->version & 0xffff0000u) < V(3, 14)) {
		return pyrt_tasks_legacy(rt, out, max, n, err);
	}
	(void)h;
	return spy_err_set(err, SPY_EVERSION, "asyncio tasks: 3.14+ reader not written yet");
}

int pyrt_stack_task(struct pyrt *rt, const struct pyrt_async_hints *h, const struct py_thread *t,
		    const char **name, size_t *nframes)
{
	struct pyrt_running_task r = { 0, 0, 0 };
	int rc;
	(void)h;
	if (pyrt_tasks_supported(rt, NULL) < 0) {
		return -SPY_EVERSION;
	}
	if ((rt->version & 0xffff0000u) < V(3, 14)) {
		rc = pyrt_running_task_legacy(rt, t, &r);
	} else {
		rc = -SPY_EVERSION;
	}
	if (rc <= 0 || !r.task || !r.frame || !rt->frames) {
		return rc;
	}
	size_t i = 0;
	while (i < rt->nframes && rt->frames[i] != r.frame) {
		i++;
	}
	if (i == rt->nframes) {
		return 0;
	}
	const char *nm = pyrt_task_name(rt, r.name);
	*name = nm ? nm : rt->unknown;
	*nframes = i + 1;
	return 1;
}
