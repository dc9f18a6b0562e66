/*
 * asyncio tasks (pystate/tasks.c) on synthetic images of the 3.14+ rows:
 * a thread's task list, coroutine chains through awaited coroutines,
 * awaited_by as one object and as a set, names as str and as the lazy
 * counter, the running task against its thread's stack (record --async).
 * Then hostile images: a list that loops without coming back, a coroutine
 * awaiting itself, a set whose mask lies, a node pointing nowhere, an
 * _AsyncioDebug with impossible values; each must end, bounded, with what
 * could be read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/offsets.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

/* Task and thread-state layout of the fake _AsyncioDebug (3.14's TaskObj). */
enum {
	T_SIZE = 0xa8, T_LOOP = 0x10, T_AWAITED_BY = 0x60, T_STATE = 0x68, T_IS_TASK = 0x6c,
	T_IS_SET = 0x6d, T_CORO = 0x80, T_NAME = 0x88, T_NODE = 0x98,
	/* Past every thread-state field the rows have (0x340 bytes in 3.14). */
	TS_LOOP = 0x300, TS_TASK = 0x308, TS_HEAD = 0x310,
	I_HEAD = 0x1000,
};

struct img {
	struct fakepy *fp;
	const struct pyoffsets *o;
	spy_addr_t interp, ts, dbg, coro_type, task_type, int_type, set_type, loop;
	struct spy_strtab strs;
	struct pyrt_async_hints h;
};

static void list_init(struct img *m, spy_addr_t head)
{
	fakepy_w64(m->fp, head, head);
	fakepy_w64(m->fp, head + 8, head);
}

/* Append node at the tail of the circular list at head. */
static void list_add(struct img *m, spy_addr_t head, spy_addr_t node)
{
	spy_addr_t last = fakepy_r64(m->fp, head + 8);
	fakepy_w64(m->fp, node, head);
	fakepy_w64(m->fp, node + 8, last);
	fakepy_w64(m->fp, last, node);
	fakepy_w64(m->fp, head + 8, node);
}

static void img_init(struct img *m, const struct pyoffsets *row)
{
	memset(m, 0, sizeof(*m));
	struct spy_strtab init = SPY_STRTAB_INIT;
	m->strs = init;
	m->o = row;
	m->fp = fakepy_new(row, row->version | 0x01f0);
	m->interp = fakepy_main_interp(m->fp);
	m->ts = fakepy_thread(m->fp, m->interp, FAKEPY_PID);
	m->coro_type = fakepy_type(m->fp, "coroutine");
	m->task_type = fakepy_type(m->fp, "_asyncio.Task");
	m->int_type = fakepy_type(m->fp, "int");
	m->set_type = fakepy_type(m->fp, "set");
	m->loop = fakepy_object(m->fp, fakepy_type(m->fp, "_UnixSelectorEventLoop"), 0x40);
	uint64_t d[13] = { T_SIZE, T_NAME, T_AWAITED_BY, T_IS_TASK, T_IS_SET, T_CORO, T_NODE,
			   I_HEAD + 0x100, I_HEAD, row->tstate_size, TS_LOOP, TS_TASK, TS_HEAD };
	m->dbg = fakepy_alloc(m->fp, sizeof(d));
	for (size_t i = 0; i < 13; i++) {
		fakepy_w64(m->fp, m->dbg + 8 * i, d[i]);
	}
	m->h.debug_offsets = m->dbg;
	list_init(m, m->ts + TS_HEAD);
	list_init(m, m->interp + I_HEAD);
	fakepy_w64(m->fp, m->ts + TS_LOOP, m->loop);
}

static struct pyrt *img_open(struct img *m)
{
	struct pyrt *rt = fakepy_open(m->fp, &m->strs);
	CHECK(rt != NULL);
	return rt;
}

static void img_release(struct img *m)
{
	fakepy_free(m->fp);
	spy_strtab_release(&m->strs);
}

/* A small int object (the lazy name counter). */
static spy_addr_t mk_int(struct img *m, uint64_t v)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t obj = fakepy_object(m->fp, m->int_type, 0x40);
	fakepy_w32(m->fp, obj + o->long_digit, (uint32_t)v);
	fakepy_w64(m->fp, obj + o->long_tag, 1u << 3);
	return obj;
}

/*
 * A coroutine running code name at line; state: its gi_frame_state (a
 * byte of the row); awaiting, when not 0, on top of its value stack.
 */
static spy_addr_t mk_coro(struct img *m, const char *name, int32_t line, uint32_t state,
			  spy_addr_t awaiting)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t code = fakepy_code(m->fp, name, "/app/srv.py", line - 3, 40, 10, line);
	spy_addr_t c = fakepy_object(m->fp, m->coro_type, o->gen_iframe + o->iframe_size + 8 * 16);
	spy_addr_t f = c + o->gen_iframe;
	fakepy_w8(m->fp, c + o->gen_frame_state, (uint8_t)state);
	fakepy_w64(m->fp, f + o->iframe_code, fakepy_ref(m->fp, code));
	fakepy_w64(m->fp, f + o->iframe_instr, code + o->code_adaptive + 2 * 10);
	fakepy_w8(m->fp, f + o->iframe_owner, o->owner_generator);
	/* Two slots in use; the awaited object gen_await_depth below the top. */
	spy_addr_t sp = f + o->iframe_localsplus + 8 * 4;
	fakepy_w64(m->fp, f + o->iframe_stackpointer, sp);
	if (awaiting) {
		fakepy_w64(m->fp, sp - 8 * (uint64_t)o->gen_await_depth, fakepy_ref(m->fp, awaiting));
	}
	return c;
}

static spy_addr_t mk_task(struct img *m, spy_addr_t head, spy_addr_t name, spy_addr_t coro)
{
	spy_addr_t t = fakepy_object(m->fp, m->task_type, T_SIZE);
	fakepy_w64(m->fp, t + T_LOOP, m->loop);
	fakepy_w8(m->fp, t + T_IS_TASK, 1);
	fakepy_w64(m->fp, t + T_NAME, name);
	fakepy_w64(m->fp, t + T_CORO, coro);
	if (head) {
		list_add(m, head, t + T_NODE);
	}
	return t;
}

/* A set of n keys (table of 8 slots, key i at slot 2i + 1). */
static spy_addr_t mk_set(struct img *m, const spy_addr_t *keys, size_t n, int64_t mask)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t s = fakepy_object(m->fp, m->set_type, 0xc8);
	spy_addr_t table = fakepy_alloc(m->fp, 16 * 8);
	for (size_t i = 0; i < n; i++) {
		fakepy_w64(m->fp, table + 16 * (2 * i + 1), keys[i]);
	}
	fakepy_w64(m->fp, s + o->set_used, n);
	fakepy_w64(m->fp, s + o->set_mask, (uint64_t)mask);
	fakepy_w64(m->fp, s + o->set_table, table);
	return s;
}

static int tasks(struct pyrt *rt, struct img *m, struct pyrt_task *out, size_t max, size_t *n)
{
	struct spy_err err = SPY_ERR_INIT;
	int rc = pyrt_tasks(rt, &m->h, out, max, n, &err);
	if (rc < 0) {
		fprintf(stderr, "pyrt_tasks: %s\n", err.msg);
	}
	return rc;
}

static void test_tree(const struct pyoffsets *row)
{
	struct img m;
	img_init(&m, row);
	const struct pyoffsets *o = row;
	uint32_t susp = o->gen_state_suspended, yf = o->gen_state_yield_from;
	/* outer -> (awaits) inner -> a future; child awaited by outer's task. */
	spy_addr_t fut = fakepy_object(m.fp, fakepy_type(m.fp, "_asyncio.FutureIter"), 0x40);
	spy_addr_t inner = mk_coro(&m, "inner", 20, yf, fut);
	spy_addr_t outer = mk_coro(&m, "Handler.outer", 30, yf, inner);
	spy_addr_t head = m.ts + TS_HEAD;
	spy_addr_t t1 = mk_task(&m, head, fakepy_str(m.fp, "outer-task"), outer);
	spy_addr_t t2 = mk_task(&m, head, mk_int(&m, 7), mk_coro(&m, "child", 40, susp, 0));
	fakepy_w64(m.fp, t2 + T_AWAITED_BY, t1);
	/* A task of a thread that ended, awaited by both (a set, a dummy key). */
	spy_addr_t dummy = fakepy_object(m.fp, fakepy_type(m.fp, "dummy"), 0x80);
	spy_addr_t keys[3] = { t1, dummy, t2 };
	spy_addr_t t3 = mk_task(&m, m.interp + I_HEAD, fakepy_str(m.fp, "orphan"),
				mk_coro(&m, "orphaned", 50, susp, 0));
	fakepy_w64(m.fp, t3 + T_AWAITED_BY, mk_set(&m, keys, 3, 7));
	fakepy_w8(m.fp, t3 + T_IS_SET, 1);
	fakepy_w32(m.fp, t3 + T_STATE, 1); /* cancelled */
	struct pyrt *rt = img_open(&m);
	if (!rt) {
		img_release(&m);
		return;
	}
	struct pyrt_task out[8];
	size_t n = 0;
	CHECK_INT(tasks(rt, &m, out, 8, &n), 0);
	CHECK_INT(n, 3);
	if (n == 3) {
		CHECK_STR(out[0].name, "outer-task");
		CHECK_INT(out[0].nchain, 2);
		CHECK_STR(out[0].chain[0].func, "inner");
		CHECK_INT(out[0].chain[0].line, 20);
		CHECK_STR(out[0].chain[1].func, "Handler.outer");
		CHECK_INT(out[0].chain[1].line, 30);
		CHECK(!out[0].chain_truncated && !out[0].running);
		CHECK_INT(out[0].loop, m.loop);
		CHECK_INT(out[0].loop_thread_id, fakepy_thread_id(m.fp, m.ts));
		CHECK_INT(out[0].nawaited_by, 0);
		CHECK_STR(out[1].name, "Task-7");
		CHECK_INT(out[1].nchain, 1);
		CHECK_INT(out[1].nawaited_by, 1);
		CHECK_INT(out[1].awaited_by[0], t1);
		CHECK_STR(out[2].name, "orphan");
		CHECK_INT(out[2].state, PYRT_TASK_CANCELLED);
		CHECK_INT(out[2].nawaited_by, 2); /* the dummy is not a task */
		CHECK_INT(out[0].state, PYRT_TASK_PENDING);
	}
	/* A short out[] still counts them all. */
	CHECK_INT(tasks(rt, &m, out, 1, &n), 0);
	CHECK_INT(n, 3);
	pyrt_free(rt);
	img_release(&m);
}

static void test_running(const struct pyoffsets *row)
{
	struct img m;
	img_init(&m, row);
	const struct pyoffsets *o = row;
	spy_addr_t loopc = fakepy_code(m.fp, "run_forever", "/usr/lib/asyncio/base_events.py", 600, 40, 5, 678);
	spy_addr_t runc = fakepy_code(m.fp, "Handle._run", "/usr/lib/asyncio/events.py", 80, 40, 5, 94);
	fakepy_push_frame(m.fp, m.ts, loopc, 5, 0);
	fakepy_push_frame(m.fp, m.ts, runc, 5, 0);
	/* The task's coroutine, running: its embedded frame linked in by hand. */
	spy_addr_t coro = mk_coro(&m, "crunch", 62, o->gen_state_executing, 0);
	spy_addr_t f = coro + o->gen_iframe;
	spy_addr_t top = fakepy_top_slot(m.fp, m.ts);
	fakepy_w64(m.fp, fakepy_back_slot(m.fp, f), fakepy_r64(m.fp, top));
	fakepy_w64(m.fp, top, f);
	fakepy_push_frame(m.fp, m.ts, fakepy_code(m.fp, "spin", "/app/srv.py", 50, 40, 5, 54), 5, 0);
	spy_addr_t t = mk_task(&m, m.ts + TS_HEAD, fakepy_str(m.fp, "cruncher"), coro);
	fakepy_w64(m.fp, m.ts + TS_TASK, t);
	struct pyrt *rt = img_open(&m);
	if (!rt) {
		img_release(&m);
		return;
	}
	struct py_thread th[4];
	size_t nth = 0;
	CHECK_INT(pyrt_threads(rt, th, 4, &nth, NULL), 0);
	struct spy_stack st = SPY_STACK_INIT;
	CHECK_INT(pyrt_stack(rt, &th[0], &st, NULL), 0);
	CHECK_INT(st.n, 4);
	const char *name = NULL;
	size_t keep = 0;
	CHECK_INT(pyrt_stack_task(rt, &m.h, &th[0], &name, &keep), 1);
	CHECK_STR(name, "cruncher");
	CHECK_INT(keep, 2);
	/* Without the section (asyncio not imported yet): no task, no error. */
	struct pyrt_async_hints none = { 0 };
	CHECK_INT(pyrt_stack_task(rt, &none, &th[0], &name, &keep), 0);
	/* Not running any more: nothing to attribute. */
	fakepy_w64(m.fp, m.ts + TS_TASK, 0);
	CHECK_INT(pyrt_stack_task(rt, &m.h, &th[0], &name, &keep), 0);
	fakepy_w64(m.fp, m.ts + TS_TASK, t);
	/* The running task's chain is its thread's coroutine frames. */
	struct pyrt_task out[2];
	size_t n = 0;
	CHECK_INT(tasks(rt, &m, out, 2, &n), 0);
	CHECK_INT(n, 1);
	CHECK(out[0].running);
	CHECK_INT(out[0].thread_id, th[0].thread_id);
	CHECK_INT(out[0].nchain, 1);
	CHECK_STR(out[0].chain[0].func, "crunch");
	spy_stack_release(&st);
	pyrt_free(rt);
	img_release(&m);
}

static void test_hostile(const struct pyoffsets *row)
{
	struct img m;
	img_init(&m, row);
	const struct pyoffsets *o = row;
	spy_addr_t head = m.ts + TS_HEAD;
	/* A coroutine awaiting itself: the chain stops at its bound. */
	spy_addr_t self = mk_coro(&m, "loop", 10, o->gen_state_yield_from, 0);
	spy_addr_t sp = fakepy_r64(m.fp, self + o->gen_iframe + o->iframe_stackpointer);
	fakepy_w64(m.fp, sp - 8 * (uint64_t)o->gen_await_depth, fakepy_ref(m.fp, self));
	spy_addr_t t1 = mk_task(&m, head, fakepy_str(m.fp, "selfish"), self);
	/* A set whose mask claims 2^40 slots; one whose table points nowhere. */
	spy_addr_t t2 = mk_task(&m, head, fakepy_str(m.fp, "liar"), 0);
	fakepy_w64(m.fp, t2 + T_AWAITED_BY, mk_set(&m, &t1, 1, ((int64_t)1 << 40) - 1));
	fakepy_w8(m.fp, t2 + T_IS_SET, 1);
	spy_addr_t t3 = mk_task(&m, head, fakepy_str(m.fp, "lost"), 0x10);
	spy_addr_t bad = mk_set(&m, &t1, 1, 7);
	fakepy_w64(m.fp, bad + o->set_table, 0xdead0000);
	fakepy_w64(m.fp, t3 + T_AWAITED_BY, bad);
	fakepy_w8(m.fp, t3 + T_IS_SET, 1);
	/* The last node loops back to the second, never to the head. */
	fakepy_w64(m.fp, t3 + T_NODE, t2 + T_NODE);
	struct pyrt *rt = img_open(&m);
	if (!rt) {
		img_release(&m);
		return;
	}
	struct pyrt_task *out = calloc(16, sizeof(*out));
	size_t n = 0;
	CHECK_INT(tasks(rt, &m, out, 16, &n), 0);
	CHECK(n >= 3 && n <= 6);
	CHECK_STR(out[0].name, "selfish");
	CHECK_INT(out[0].nchain, PYRT_TASK_MAX_CHAIN);
	CHECK(out[0].chain_truncated);
	CHECK_INT(out[1].nawaited_by, 0);
	CHECK_INT(out[2].nawaited_by, 0);
	CHECK_INT(out[2].nchain, 0);
	/* A node pointing into unmapped memory: what came before is kept. */
	fakepy_w64(m.fp, t2 + T_NODE, 0x7fff00000000ull);
	CHECK_INT(tasks(rt, &m, out, 16, &n), 0);
	CHECK_INT(n, 2);
	/* An _AsyncioDebug that lies is refused, as a whole; none at all is "not loaded". */
	struct spy_err err = SPY_ERR_INIT;
	struct img m2;
	img_init(&m2, row);
	fakepy_w64(m2.fp, m2.dbg, 0x100000); /* task size */
	struct pyrt *rt2 = img_open(&m2);
	if (rt2) {
		CHECK_INT(pyrt_tasks(rt2, &m2.h, out, 16, &n, &err), -SPY_EVERSION);
		struct pyrt_async_hints none = { 0 };
		CHECK_INT(pyrt_tasks(rt2, &none, out, 16, &n, &err), -SPY_ENOPY);
		pyrt_free(rt2);
	}
	img_release(&m2);
	free(out);
	pyrt_free(rt);
	img_release(&m);
}

/* Versions without a reader say so, before reading anything. */
static void test_refused(void)
{
	static const uint32_t old[] = { 0x02070000, 0x03060000, 0x03070000 };
	for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++) {
		const struct pyoffsets *row = pyoffsets_find(old[i]);
		if (!row) {
			continue;
		}
		struct fakepy *fp = fakepy_new(row, row->version | 0x01f0);
		struct spy_strtab strs = SPY_STRTAB_INIT;
		struct pyrt *rt = NULL;
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(pyrt_new(&rt, fakepy_mem(fp), fakepy_hints(fp), &strs, &err), 0);
		if (rt) {
			CHECK_INT(pyrt_tasks_supported(rt, &err), -SPY_EVERSION);
			CHECK(strstr(err.msg, "need Python 3.8 or newer") != NULL);
			pyrt_free(rt);
		}
		fakepy_free(fp);
		spy_strtab_release(&strs);
	}
}

int main(void)
{
	int rows = 0;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		if (row->version < 0x030e0000 || (row->build & PYBUILD_FT)) {
			continue;
		}
		rows++;
		test_tree(row);
		test_running(row);
		test_hostile(row);
	}
	CHECK(rows >= 2);
	test_refused();
	return check_done();
}
