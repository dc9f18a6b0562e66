/*
 * asyncio tasks: every task of every event loop (dump --tasks) and the task
 * a thread is running (record --async).
 *
 * 3.14+: the _asyncio module exports _AsyncioDebug (struct
 * _Py_AsyncioModuleDebugOffsets, in an ELF section .AsyncioDebug of the
 * module: lib-dynload/_asyncio*.so, or the python binary where _asyncio is
 * built in) for debuggers. It says where a Task keeps its name, coroutine,
 * awaited_by and list node, where a thread state keeps its running loop,
 * running task and the head of its list of tasks, and where the
 * interpreter keeps the tasks of threads that ended. cmd finds the section
 * (pyrt_async_hints); every offset is the target's, validated before use.
 * A coroutine's embedded frame, its state and its value stack come from
 * _Py_DebugOffsets (gen_object, interpreter_frame.stackpointer).
 *
 * A suspended coroutine awaiting another keeps the awaited object on top of
 * its value stack (CPython's _PyGen_yf): a coroutine there continues the
 * chain; anything else (a Future's iterator, a Task) ends it. Which task
 * awaits which is what 3.14 records in Task.awaited_by (one object, or a set).
 *
 * 3.8-3.13 walk the _asyncio module's own state instead: tasks-legacy.c,
 * through the hooks declared in internal.h: pyrt_tasks_legacy() (dump
 * --tasks: fills struct pyrt_task as the 3.14 reader does, loop_thread_id
 * included), pyrt_running_task_legacy() (record --async: the running task,
 * its coroutine's frame and its name object, a few reads per sample), and
 * pyrt_tasks_legacy_ready. Shared helpers for it: pyrt_iframe_decode(),
 * pyrt_task_name(), and the row's gen_* / iframe_stacktop fields. What
 * follows the running task (matching its coroutine frame against the
 * stack, caching its name) is shared here.
 *
 * Everything read is hostile: lists are bounded by PYRT_MAX_TASKS and
 * cycle-checked (Brent), chains by PYRT_TASK_MAX_CHAIN, sets by their mask,
 * and a cut list still yields what was read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"

#define V(maj, min) (((uint32_t)(maj) << 24) | ((uint32_t)(min) << 16))

/*
 * Where each value sits in _Py_AsyncioModuleDebugOffsets (3.14, 3.15:
 * Include/internal/pycore_debug_offsets.h's layout, checked with gdb on the
 * -dbg builds): three groups of uint64 {size, fields...}.
 */
enum {
	AD_TASK_SIZE = 0, AD_TASK_NAME = 8, AD_TASK_AWAITED_BY = 16, AD_TASK_IS_TASK = 24,
	AD_TASK_AWAITED_BY_IS_SET = 32, AD_TASK_CORO = 40, AD_TASK_NODE = 48,
	AD_INTERP_SIZE = 56, AD_INTERP_TASKS_HEAD = 64,
	AD_TS_SIZE = 72, AD_TS_RUNNING_LOOP = 80, AD_TS_RUNNING_TASK = 88, AD_TS_TASKS_HEAD = 96,
	AD_SIZE = 104,
};

/* Largest Task struct we copy (3.14: 168 bytes). */
#define TASK_SPAN_MAX 0x400
/* Set slots read per task's awaited_by (a task awaited by more is unusual). */
#define AWAITED_SET_MAX 4096
/* A suspended frame's value stack: how far past localsplus its top may be. */
#define STACK_SPAN_MAX (1u << 16)
/* Task types remembered (Task and a few subclasses). */
#define TASK_TYPES 8
/* Running-task names cached for record --async. Power of two. */
#define NAME_SLOTS 64

struct pyrt_async {
	spy_addr_t dbg;              /* the section the layout below came from; 0 none */
	bool ok;
	uint32_t task_size, task_name, task_awaited_by, task_is_task, task_awaited_by_is_set,
		task_coro, task_node, task_state, task_loop;
	uint32_t interp_tasks_head;
	uint32_t ts_running_loop, ts_running_task, ts_tasks_head;
	spy_addr_t coro_type;
	spy_addr_t task_types[TASK_TYPES];
	size_t ntask_types;
	struct {
		spy_addr_t task, obj;
		const char *name;
	} names[NAME_SLOTS];
};

int pyrt_tasks_supported(const struct pyrt *rt, struct spy_err *err)
{
	uint32_t mm = rt->version & 0xffff0000u;
	if (mm >= V(3, 14) && (rt->off.build & PYBUILD_FT)) {
		/* Untested: no free-threaded 3.14+ build to verify the walk
		 * against (3.13t's is tools/pyroot build-ft's). */
		return spy_err_set(err, SPY_EVERSION,
				   "asyncio tasks: not supported on a free-threaded Python %u.%u",
				   rt->version >> 24, (rt->version >> 16) & 0xff);
	}
	if (mm >= V(3, 8) && mm < V(3, 14)) {
		return pyrt_tasks_legacy_ready ? 0 :
		       spy_err_set(err, SPY_EVERSION, "asyncio tasks: Python 3.8-3.13 not supported yet");
	}
	if (mm >= V(3, 14) && rt->off.gen_iframe != PYOFF_NONE &&
	    rt->off.iframe_stackpointer != PYOFF_NONE && rt->off.set_table != PYOFF_NONE) {
		return 0;
	}
	return spy_err_set(err, SPY_EVERSION,
			   "asyncio tasks need Python 3.8 or newer (this is Python %u.%u)",
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

static bool is_newer(const struct pyrt *rt)
{
	return (rt->version & 0xffff0000u) >= V(3, 14);
}

static struct pyrt_async *async_state(struct pyrt *rt)
{
	if (!rt->async) {
		rt->async = spy_xcalloc(1, sizeof(*rt->async));
	}
	return rt->async;
}

/*
 * Decode and check the target's _AsyncioDebug at addr, once per address:
 * every field inside its struct, the struct sizes plausible. The Task's
 * state and loop are not in the table: they are the FutureObj_HEAD fields
 * around it (loop first after the object header; state, an enum, between
 * awaited_by and is_task), and the table must agree with that.
 */
static int async_layout(struct pyrt *rt, spy_addr_t addr, struct spy_err *err)
{
	struct pyrt_async *a = async_state(rt);
	uint64_t d[AD_SIZE / 8];
	if (!addr) {
		return spy_err_set(err, SPY_ENOPY,
				   "asyncio is not loaded in the target (no _asyncio module, or its "
				   ".AsyncioDebug section was not found)");
	}
	if (a->dbg == addr) {
		return a->ok ? 0 : spy_err_set(err, SPY_EVERSION,
					       "asyncio tasks: the target's _AsyncioDebug holds impossible values");
	}
	a->dbg = addr;
	a->ok = false;
	if (spy_mem_read(rt->mem, addr, d, sizeof(d)) < 0) {
		return spy_err_set(err, SPY_EMEM, "asyncio tasks: cannot read _AsyncioDebug at 0x%llx",
				   (unsigned long long)addr);
	}
#define F(off) d[(off) / 8]
	uint64_t tsz = F(AD_TASK_SIZE), isz = F(AD_INTERP_SIZE), ssz = F(AD_TS_SIZE);
	uint64_t name = F(AD_TASK_NAME), ab = F(AD_TASK_AWAITED_BY), is_task = F(AD_TASK_IS_TASK);
	uint64_t is_set = F(AD_TASK_AWAITED_BY_IS_SET), coro = F(AD_TASK_CORO), node = F(AD_TASK_NODE);
	uint64_t ihead = F(AD_INTERP_TASKS_HEAD), rloop = F(AD_TS_RUNNING_LOOP);
	uint64_t rtask = F(AD_TS_RUNNING_TASK), thead = F(AD_TS_TASKS_HEAD);
#undef F
	uint64_t loop = (uint64_t)rt->off.ob_type + 8;
	/*
	 * Every field is the target's: "off + n <= size" wraps for an offset near
	 * 2^64 (and a wrapped ab from "is_task - 12") and let it through, to index
	 * a stack buffer ~4 GiB out. Compare as "off <= size - n" instead: the
	 * size's lower bound is checked first, so the subtraction cannot wrap.
	 */
	bool sane = tsz >= 0x40 && tsz <= TASK_SPAN_MAX && name <= tsz - 8 && ab <= tsz - 8 &&
		    coro <= tsz - 8 && node <= tsz - 16 && is_task < tsz && is_set < tsz &&
		    ab + 12 == is_task && loop + 8 <= ab &&
		    isz >= 0x100 && isz <= (64u << 20) && ihead <= isz - 16 &&
		    ssz >= 0x40 && ssz <= 0x10000 && rloop <= ssz - 8 && rtask <= ssz - 8 &&
		    thead <= ssz - 16;
	spy_log(SPY_LOG_DEBUG, "pystate: _AsyncioDebug at 0x%llx: task size %llu, %s",
		(unsigned long long)addr, (unsigned long long)tsz, sane ? "sane" : "insane");
	if (!sane) {
		return spy_err_set(err, SPY_EVERSION,
				   "asyncio tasks: the target's _AsyncioDebug holds impossible values");
	}
	a->task_size = (uint32_t)tsz;
	a->task_name = (uint32_t)name;
	a->task_awaited_by = (uint32_t)ab;
	a->task_state = (uint32_t)ab + 8;
	a->task_is_task = (uint32_t)is_task;
	a->task_awaited_by_is_set = (uint32_t)is_set;
	a->task_coro = (uint32_t)coro;
	a->task_node = (uint32_t)node;
	a->task_loop = (uint32_t)loop;
	a->interp_tasks_head = (uint32_t)ihead;
	a->ts_running_loop = (uint32_t)rloop;
	a->ts_running_task = (uint32_t)rtask;
	a->ts_tasks_head = (uint32_t)thead;
	a->ok = true;
	return 0;
}

/* The int8 frame state of the coroutine at coro, as a row's byte. */
static int8_t state_of(uint32_t byte)
{
	return (int8_t)(uint8_t)byte;
}

static bool is_coroutine(struct pyrt *rt, spy_addr_t obj)
{
	spy_addr_t type;
	return spy_mem_plausible(rt->mem, obj, 8) &&
	       spy_mem_read_addr(rt->mem, obj + rt->off.ob_type, &type) == 0 &&
	       pyrt_is_type(rt, &rt->async->coro_type, type, "coroutine");
}

/*
 * The chain of a suspended task from its coroutine inward (outermost
 * first: the caller reverses it): each suspended
 * (or not yet started) coroutine's frame, then what it awaits while that is
 * a coroutine. A running coroutine (its frames are on a thread's stack)
 * ends the walk: running_chain() reads those.
 */
static void coro_chain(struct pyrt *rt, spy_addr_t coro, struct pyrt_task *t)
{
	const struct pyoffsets *o = &rt->off;
	int8_t suspended = state_of(o->gen_state_suspended), executing = state_of(o->gen_state_executing);
	int8_t yield_from = o->gen_state_yield_from != PYOFF_NONE ? state_of(o->gen_state_yield_from) :
								     executing;
	while (coro) {
		int8_t st;
		if (t->nchain >= PYRT_TASK_MAX_CHAIN) {
			t->chain_truncated = true;
			return;
		}
		if (!is_coroutine(rt, coro) ||
		    spy_mem_read(rt->mem, coro + o->gen_frame_state, &st, 1) < 0) {
			return; /* a Future, a Task, or another awaitable: an edge, not a frame */
		}
		/* FRAME_CREATED is one below FRAME_SUSPENDED in 3.11-3.15 alike. */
		if (st < suspended - 1 || st >= executing) {
			return;
		}
		spy_addr_t frame = coro + o->gen_iframe;
		if (pyrt_iframe_decode(rt, frame, &t->chain[t->nchain]) < 0) {
			t->chain_truncated = true;
			return;
		}
		t->nchain++;
		if (st < yield_from) {
			return;
		}
		/* _PyGen_yf: the awaited object is at the top of the value stack
		 * (3.15: one below it). */
		spy_addr_t sp, base = frame + o->iframe_localsplus;
		uint64_t top, depth = 8 * (uint64_t)o->gen_await_depth;
		if (!depth || spy_mem_read_addr(rt->mem, frame + o->iframe_stackpointer, &sp) < 0 ||
		    sp < base + depth || sp - base > STACK_SPAN_MAX || (sp & 7) ||
		    spy_mem_read(rt->mem, sp - depth, &top, sizeof(top)) < 0) {
			t->chain_truncated = true;
			return;
		}
		coro = pyrt_ref(o, top);
	}
}

/*
 * A running task's chain: the coroutine frames of its thread's stack, from
 * the innermost one out to the task's own coroutine (frame). Uses the
 * thread's stack as pyrt_stack() reads it (and so replaces the last walk).
 */
static void running_chain(struct pyrt *rt, const struct py_thread *th, spy_addr_t frame,
			  struct pyrt_task *t)
{
	struct spy_stack st = SPY_STACK_INIT;
	if (pyrt_stack(rt, th, &st, NULL) == 0) {
		size_t k = 0;
		while (k < rt->nframes && k < st.n && rt->frames[k] != frame) {
			k++;
		}
		for (size_t i = 0; k < rt->nframes && k < st.n && i <= k; i++) {
			uint8_t owner;
			/* A generator's frame is owned the same way: keep coroutines'. */
			if (spy_mem_read(rt->mem, rt->frames[i] + rt->off.iframe_owner, &owner, 1) < 0 ||
			    owner != rt->off.owner_generator ||
			    !is_coroutine(rt, rt->frames[i] - rt->off.gen_iframe)) {
				continue;
			}
			if (t->nchain >= PYRT_TASK_MAX_CHAIN) {
				t->chain_truncated = true;
				break;
			}
			t->chain[t->nchain++] = st.v[i];
		}
	}
	spy_stack_release(&st);
}

static void add_awaiter(struct pyrt_task *t, spy_addr_t obj)
{
	for (size_t i = 0; i < t->nawaited_by; i++) {
		if (t->awaited_by[i] == obj) {
			return;
		}
	}
	if (obj && t->nawaited_by < PYRT_TASK_MAX_AWAITERS) {
		t->awaited_by[t->nawaited_by++] = obj;
	}
}

/* The members of the set at set (Task.awaited_by when it holds several). */
static void awaiter_set(struct pyrt *rt, spy_addr_t set, struct pyrt_task *t)
{
	const struct pyoffsets *o = &rt->off;
	int64_t mask, used;
	spy_addr_t table;
	if (!spy_mem_plausible(rt->mem, set, 8) ||
	    spy_mem_read(rt->mem, set + o->set_mask, &mask, sizeof(mask)) < 0 ||
	    spy_mem_read(rt->mem, set + o->set_used, &used, sizeof(used)) < 0 ||
	    spy_mem_read_addr(rt->mem, set + o->set_table, &table) < 0 || mask < 0 ||
	    mask >= AWAITED_SET_MAX || ((mask + 1) & mask) || used < 0 || used > mask + 1) {
		return;
	}
	uint64_t ent[2 * 64];
	for (int64_t i = 0; i <= mask; i += 64) {
		int64_t k = mask + 1 - i < 64 ? mask + 1 - i : 64;
		if (spy_mem_read(rt->mem, table + 16 * (uint64_t)i, ent, 16 * (size_t)k) < 0) {
			return;
		}
		/* setentry {key, hash}; the dummy of deleted slots is dropped later
		 * with everything else that is not a task. */
		for (int64_t j = 0; j < k; j++) {
			add_awaiter(t, ent[2 * j]);
		}
	}
}

struct walk {
	struct pyrt *rt;
	struct pyrt_task *out;
	size_t max, n;
	bool cut;
	const struct py_thread *th;
	size_t nth;
	spy_addr_t *run_task, *run_loop; /* per thread */
};

static void remember_type(struct pyrt_async *a, spy_addr_t type)
{
	for (size_t i = 0; i < a->ntask_types; i++) {
		if (a->task_types[i] == type) {
			return;
		}
	}
	if (a->ntask_types < TASK_TYPES) {
		a->task_types[a->ntask_types++] = type;
	}
}

/* Read the Task at task into w->out[w->n] (when it fits); count it either way. */
static void read_task(struct walk *w, spy_addr_t task)
{
	struct pyrt *rt = w->rt;
	struct pyrt_async *a = rt->async;
	unsigned char buf[TASK_SPAN_MAX];
	if (w->n >= w->max) {
		w->n++;
		return;
	}
	if (spy_mem_read(rt->mem, task, buf, a->task_size) < 0 || buf[a->task_is_task] != 1) {
		w->cut = true;
		return;
	}
	struct pyrt_task *t = &w->out[w->n++];
	memset(t, 0, sizeof(*t));
	t->addr = task;
	t->loop = pyrt_u64(buf, a->task_loop);
	const char *name = pyrt_task_name(rt, pyrt_u64(buf, a->task_name));
	t->name = name ? name : rt->unknown;
	switch (pyrt_u32(buf, a->task_state)) {
	case 1: t->state = PYRT_TASK_CANCELLED; break; /* fut_state: PENDING, CANCELLED, FINISHED */
	case 2: t->state = PYRT_TASK_DONE; break;
	default: t->state = PYRT_TASK_PENDING; break;
	}
	remember_type(a, pyrt_u64(buf, rt->off.ob_type));
	spy_addr_t coro = pyrt_u64(buf, a->task_coro);
	for (size_t i = 0; i < w->nth; i++) {
		if (w->run_loop[i] && w->run_loop[i] == t->loop) {
			t->loop_thread_id = w->th[i].thread_id;
		}
		if (w->run_task[i] == task) {
			t->running = true;
			t->thread_id = w->th[i].thread_id;
			if (coro) {
				running_chain(rt, &w->th[i], coro + rt->off.gen_iframe, t);
			}
		}
	}
	if (!t->running) {
		coro_chain(rt, coro, t);
		/* Read from the task's coroutine inward; kept innermost first. */
		for (size_t i = 0; i < t->nchain / 2; i++) {
			struct spy_frame f = t->chain[i];
			t->chain[i] = t->chain[t->nchain - 1 - i];
			t->chain[t->nchain - 1 - i] = f;
		}
	}
	spy_addr_t ab = pyrt_u64(buf, a->task_awaited_by);
	if (ab && buf[a->task_awaited_by_is_set]) {
		awaiter_set(rt, ab, t);
	} else if (ab) {
		add_awaiter(t, ab);
	}
}

/* The tasks of one list (a thread's or the interpreter's), head a struct llist_node. */
static void walk_list(struct walk *w, spy_addr_t head)
{
	struct pyrt *rt = w->rt;
	spy_addr_t node, mark;
	size_t power = 1, lam = 0;
	if (spy_mem_read_addr(rt->mem, head, &node) < 0) {
		w->cut = true;
		return;
	}
	/* Brent's cycle check: a loop that never comes back to head ends. */
	mark = head;
	while (node != head) {
		if (w->n >= PYRT_MAX_TASKS || node == mark || !spy_mem_plausible(rt->mem, node, 8) ||
		    node < rt->async->task_node) {
			w->cut = true;
			return;
		}
		read_task(w, node - rt->async->task_node);
		if (++lam == power) {
			mark = node;
			power *= 2;
			lam = 0;
		}
		if (spy_mem_read_addr(rt->mem, node, &node) < 0) {
			w->cut = true;
			return;
		}
	}
}

/* awaited_by keeps only tasks: a Future awaiting (gather's), a set's dummy entry go. */
static void keep_task_awaiters(struct pyrt *rt, struct pyrt_task *t)
{
	struct pyrt_async *a = rt->async;
	size_t k = 0;
	for (size_t i = 0; i < t->nawaited_by; i++) {
		spy_addr_t type;
		uint8_t is_task;
		bool keep = false;
		if (spy_mem_plausible(rt->mem, t->awaited_by[i], 8) &&
		    spy_mem_read_addr(rt->mem, t->awaited_by[i] + rt->off.ob_type, &type) == 0 &&
		    spy_mem_read(rt->mem, t->awaited_by[i] + a->task_is_task, &is_task, 1) == 0 &&
		    is_task == 1) {
			for (size_t j = 0; j < a->ntask_types && !keep; j++) {
				keep = a->task_types[j] == type;
			}
		}
		if (keep) {
			t->awaited_by[k++] = t->awaited_by[i];
		}
	}
	t->nawaited_by = k;
}

static int tasks_new(struct pyrt *rt, const struct pyrt_async_hints *h, struct pyrt_task *out,
		     size_t max, size_t *n, struct spy_err *err)
{
	int rc = async_layout(rt, h ? h->debug_offsets : 0, err);
	if (rc < 0) {
		return rc;
	}
	struct pyrt_async *a = rt->async;
	size_t nth = 0;
	struct py_thread *th = spy_xcalloc(SPY_MAX_THREADS, sizeof(*th));
	rc = pyrt_threads(rt, th, SPY_MAX_THREADS, &nth, err);
	if (rc < 0) {
		free(th);
		return rc;
	}
	nth = nth < SPY_MAX_THREADS ? nth : SPY_MAX_THREADS;
	struct walk w = { rt, out, max, 0, false, th, nth, spy_xcalloc(nth + 1, sizeof(spy_addr_t)),
			  spy_xcalloc(nth + 1, sizeof(spy_addr_t)) };
	for (size_t i = 0; i < nth; i++) {
		(void)spy_mem_read_addr(rt->mem, th[i].tstate + a->ts_running_task, &w.run_task[i]);
		(void)spy_mem_read_addr(rt->mem, th[i].tstate + a->ts_running_loop, &w.run_loop[i]);
	}
	for (size_t i = 0; i < nth; i++) {
		walk_list(&w, th[i].tstate + a->ts_tasks_head);
	}
	/* Tasks of threads that ended move to their interpreter's list. */
	for (size_t i = 0; i < nth; i++) {
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++) {
			seen = th[j].interp == th[i].interp;
		}
		if (!seen) {
			walk_list(&w, th[i].interp + a->interp_tasks_head);
		}
	}
	size_t filled = w.n < max ? w.n : max;
	for (size_t i = 0; i < filled; i++) {
		keep_task_awaiters(rt, &out[i]);
	}
	if (w.cut) {
		spy_log(SPY_LOG_DEBUG, "pystate: asyncio task list cut after %zu tasks", w.n);
	}
	*n = w.n;
	free(w.run_task);
	free(w.run_loop);
	free(th);
	return 0;
}

int pyrt_tasks(struct pyrt *rt, const struct pyrt_async_hints *h, struct pyrt_task *out, size_t max,
	       size_t *n, struct spy_err *err)
{
	*n = 0;
	int rc = pyrt_tasks_supported(rt, err);
	if (rc < 0) {
		return rc;
	}
	if (!is_newer(rt)) {
		return pyrt_tasks_legacy(rt, out, max, n, err);
	}
	return tasks_new(rt, h, out, max, n, err);
}

/* 3.14+: the running task of t, from its thread state (two reads). */
static int running_new(struct pyrt *rt, const struct pyrt_async_hints *h, const struct py_thread *t,
		       struct pyrt_running_task *r)
{
	if (async_layout(rt, h ? h->debug_offsets : 0, NULL) < 0) {
		return 0; /* asyncio not loaded (yet): no task runs */
	}
	struct pyrt_async *a = rt->async;
	unsigned char buf[TASK_SPAN_MAX];
	spy_addr_t task;
	if (spy_mem_read_addr(rt->mem, t->tstate + a->ts_running_task, &task) < 0) {
		return -SPY_EMEM;
	}
	if (!task) {
		return 0;
	}
	if (!spy_mem_plausible(rt->mem, task, 8) || spy_mem_read(rt->mem, task, buf, a->task_size) < 0 ||
	    buf[a->task_is_task] != 1) {
		return -SPY_ECORRUPT;
	}
	spy_addr_t coro = pyrt_u64(buf, a->task_coro);
	r->task = task;
	r->frame = coro ? coro + rt->off.gen_iframe : 0;
	r->name = pyrt_u64(buf, a->task_name);
	return 1;
}

int pyrt_stack_task(struct pyrt *rt, const struct pyrt_async_hints *h, const struct py_thread *t,
		    const char **name, size_t *nframes)
{
	struct pyrt_running_task r = { 0, 0, 0 };
	int rc;
	if (pyrt_tasks_supported(rt, NULL) < 0) {
		return -SPY_EVERSION;
	}
	async_state(rt);
	rc = is_newer(rt) ? running_new(rt, h, t, &r) : pyrt_running_task_legacy(rt, t, &r);
	if (rc <= 0 || !r.task || !r.frame || !rt->frames) {
		return rc < 0 ? rc : 0;
	}
	size_t i = 0;
	while (i < rt->nframes && rt->frames[i] != r.frame) {
		i++;
	}
	if (i == rt->nframes) {
		return 0;
	}
	/* The name object of a task changes only with set_name(): decode on change. */
	struct pyrt_async *a = rt->async;
	size_t s = (size_t)((r.task >> 4) * 0x9e3779b97f4a7c15ull >> 58) & (NAME_SLOTS - 1);
	if (a->names[s].task != r.task || a->names[s].obj != r.name || !a->names[s].name) {
		const char *nm = pyrt_task_name(rt, r.name);
		a->names[s].task = r.task;
		a->names[s].obj = r.name;
		a->names[s].name = nm ? nm : rt->unknown;
	}
	*name = a->names[s].name;
	*nframes = i + 1;
	return 1;
}
