/*
 * asyncio tasks of 3.8-3.13 (pystate/tasks-legacy.c) on synthetic images
 * of each of those rows: sys.modules -> asyncio.tasks -> a WeakSet of
 * weakrefs to tasks, laid out with the generated _asyncio row; coroutines
 * whose embedded frames await each other (_PyGen_yf as each version tells
 * it); an `await task` edge and a gather's. Then hostile images: a
 * coroutine chain that loops, pointers into nothing, a set that lies about
 * its size, a task type of the wrong size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/offsets.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

#define FILE_PY "/srv/app.py"

struct img {
	struct fakepy *fp;
	const struct pyoffsets *o;
	const struct pyaio_offsets *a;
	spy_addr_t interp;
	spy_addr_t task_type, coro_type, ref_type, set_type, list_type, gather_type, module_type;
	spy_addr_t frame_type;
	spy_addr_t attr_type;           /* instances keeping attributes in a managed dict */
	spy_addr_t set;                 /* WeakSet.data */
	spy_addr_t outer, inner, child, orphan; /* tasks; coroutines below */
	spy_addr_t c_outer, c_mid, c_leaf, c_child;
	spy_addr_t loop;                /* an event loop running on thread 0x7f0012345678 */
	spy_addr_t gather, kids;        /* a _GatheringFuture and its _children */
	size_t ntasks;                  /* tasks listed (pending): + "eager" in 3.12+ */
	struct spy_strtab strs;
};

/* An instance of m->attr_type whose attribute name is value (in its dict). */
static spy_addr_t mk_instance(struct img *m, const char *name, spy_addr_t value)
{
	spy_addr_t k = fakepy_str(m->fp, name);
	spy_addr_t obj = fakepy_alloc(m->fp, 0x100) + 0x40; /* room for the managed dict before it */
	fakepy_w64(m->fp, obj, 1);
	fakepy_w64(m->fp, obj + m->o->ob_type, m->attr_type);
	spy_addr_t d = fakepy_dict(m->fp, &k, &value, 1, true);
	if (m->o->idict_model == PYIDICT_OFFSET) {
		fakepy_w64(m->fp, obj + 0x18, d); /* tp_dictoffset */
	} else {
		fakepy_w64(m->fp, obj - m->o->managed_dict_off, d);
	}
	return obj;
}

/* A set holding keys (16 slots, some left empty). */
static spy_addr_t mk_set(struct img *m, const spy_addr_t *keys, size_t n)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t s = fakepy_object(m->fp, m->set_type, 0xd0);
	spy_addr_t table = fakepy_alloc(m->fp, 16 * o->setentry_size);
	for (size_t i = 0; i < n; i++) {
		fakepy_w64(m->fp, table + (2 * i + 1) * o->setentry_size + o->setentry_key, keys[i]);
	}
	fakepy_w64(m->fp, s + o->set_mask, 15);
	fakepy_w64(m->fp, s + o->set_table, table);
	return s;
}

static spy_addr_t mk_ref(struct img *m, spy_addr_t obj)
{
	spy_addr_t r = fakepy_object(m->fp, m->ref_type, 0x40);
	fakepy_w64(m->fp, r + m->o->weakref_object, obj);
	return r;
}

static spy_addr_t frame_of(struct img *m, spy_addr_t c)
{
	const struct pyoffsets *o = m->o;
	return o->gen_iframe != PYOFF_NONE ? c + o->gen_iframe : fakepy_r64(m->fp, c + o->gen_frame);
}

/*
 * A coroutine of a function `name` suspended at line (code unit 3): 3.11+
 * its embedded frame, before that a frame object of its own.
 */
static spy_addr_t mk_coro(struct img *m, const char *name, int32_t line)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t code = fakepy_code(m->fp, name, FILE_PY, line - 2, 8, 3, line);
	if (o->gen_iframe == PYOFF_NONE) {
		static const uint8_t zeros[16];
		spy_addr_t c = fakepy_object(m->fp, m->coro_type, 0x80);
		spy_addr_t f = fakepy_object(m->fp, m->frame_type, o->frame_localsplus + 0x100);
		fakepy_w64(m->fp, c + o->gen_frame, f);
		fakepy_w64(m->fp, f + o->frame_code, code);
		fakepy_w64(m->fp, code + o->code_code, fakepy_bytes(m->fp, zeros, sizeof(zeros)));
		fakepy_w32(m->fp, f + o->frame_lasti, o->instr_model == PYINSTR_LASTI_UNITS ? 3 : 6);
		if (o->frame_stacktop != PYOFF_NONE) {
			fakepy_w64(m->fp, f + o->frame_stacktop, f + o->frame_localsplus); /* empty */
		} else {
			fakepy_w64(m->fp, f + o->frame_valuestack, f + o->frame_localsplus);
			fakepy_w8(m->fp, f + o->frame_state, (uint8_t)o->frame_state_suspended);
		}
		return c;
	}
	spy_addr_t c = fakepy_object(m->fp, m->coro_type, o->gen_iframe + 0x200);
	spy_addr_t f = c + o->gen_iframe;
	fakepy_w64(m->fp, f + o->iframe_code, code);
	fakepy_w64(m->fp, f + o->iframe_instr, code + o->code_adaptive + 2 * 3);
	fakepy_w8(m->fp, f + o->iframe_owner, (uint8_t)o->owner_generator);
	fakepy_w8(m->fp, c + o->gen_frame_state, (uint8_t)o->gen_state_suspended);
	return c;
}

/* Make c a coroutine that has not started. */
static void not_started(struct img *m, spy_addr_t c)
{
	const struct pyoffsets *o = m->o;
	if (o->gen_iframe != PYOFF_NONE) {
		fakepy_w8(m->fp, c + o->gen_frame_state, (uint8_t)o->gen_state_created);
	} else {
		fakepy_w32(m->fp, frame_of(m, c) + o->frame_lasti, (uint32_t)-1);
	}
}

/* Make c suspended in `await what`: what on top of its stack. */
static void await_on(struct img *m, spy_addr_t c, spy_addr_t what)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t f = frame_of(m, c);
	if (o->gen_iframe == PYOFF_NONE) {
		/* YIELD_FROM after f_lasti (byte 6), `what` on the value stack. */
		spy_addr_t bytes = fakepy_r64(m->fp, fakepy_r64(m->fp, f + o->frame_code) + o->code_code);
		fakepy_w8(m->fp, bytes + o->bytes_sval + 8, (uint8_t)o->op_yield_from);
		fakepy_w64(m->fp, f + o->frame_localsplus, what);
		if (o->frame_stacktop != PYOFF_NONE) {
			fakepy_w64(m->fp, f + o->frame_stacktop, f + o->frame_localsplus + 8);
		} else {
			fakepy_w32(m->fp, f + o->frame_stackdepth, 1);
		}
		return;
	}
	fakepy_w32(m->fp, f + o->iframe_stacktop, 1);
	fakepy_w64(m->fp, f + o->iframe_localsplus, what);
	if (o->gen_state_yield_from != PYOFF_NONE) {
		fakepy_w8(m->fp, c + o->gen_frame_state, (uint8_t)o->gen_state_yield_from);
	} else {
		/* The instruction after the YIELD_VALUE: RESUME 3, after an await. */
		spy_addr_t next = fakepy_r64(m->fp, f + o->iframe_instr) + 2;
		fakepy_w8(m->fp, next, (uint8_t)o->op_resume);
		fakepy_w8(m->fp, next + 1, 3);
	}
}

static spy_addr_t mk_task(struct img *m, const char *name, spy_addr_t coro, spy_addr_t waiter)
{
	const struct pyaio_offsets *a = m->a;
	spy_addr_t t = fakepy_object(m->fp, m->task_type, a->task_size);
	fakepy_w32(m->fp, t + a->task_state, a->state_pending);
	fakepy_w64(m->fp, t + a->task_loop, m->loop);
	fakepy_w64(m->fp, t + a->task_coro, coro);
	fakepy_w64(m->fp, t + a->task_fut_waiter, waiter);
	fakepy_w64(m->fp, t + a->task_name, fakepy_str(m->fp, name));
	return t;
}

/*
 * outer: main -> mid -> leaf, leaf awaiting the task `inner`;
 * inner: child_fn, awaiting a gather of `child` and `orphan`;
 * child, orphan: not started (FRAME_CREATED) and done (cancelled: not
 * listed, as 3.14 unregisters a task when it finishes).
 */
static void img_init(struct img *m, const struct pyoffsets *row)
{
	memset(m, 0, sizeof(*m));
	struct spy_strtab init = SPY_STRTAB_INIT;
	m->strs = init;
	m->o = row;
	m->a = pyaio_find(row->version, row->build & PYBUILD_FT);
	m->fp = fakepy_new(row, row->version | 0x01f0);
	const struct pyoffsets *o = row;
	m->interp = fakepy_main_interp(m->fp);
	(void)fakepy_thread(m->fp, m->interp, FAKEPY_PID);
	m->task_type = fakepy_type(m->fp, "_asyncio.Task");
	fakepy_w64(m->fp, m->task_type + o->type_basicsize, m->a->task_size);
	m->coro_type = fakepy_type(m->fp, "coroutine");
	m->frame_type = fakepy_type(m->fp, "frame");
	m->ref_type = fakepy_type(m->fp, "weakref.ReferenceType");
	m->set_type = fakepy_type(m->fp, "set");
	m->list_type = fakepy_type(m->fp, "list");
	m->module_type = fakepy_type(m->fp, "module");
	m->attr_type = fakepy_type(m->fp, "WeakSet");
	if (o->idict_model == PYIDICT_OFFSET) {
		fakepy_w64(m->fp, m->attr_type + o->type_dictoffset, 0x18);
	} else {
		fakepy_w64(m->fp, m->attr_type + o->type_flags, o->tpflags_managed_dict);
	}
	fakepy_w64(m->fp, m->attr_type + o->type_basicsize, 0x20);
	/* A Python subclass of the C Future, whose dict is the C type's slot. */
	m->gather_type = fakepy_type(m->fp, "_GatheringFuture");
	fakepy_w64(m->fp, m->gather_type + o->type_basicsize, m->a->fut_size);
	fakepy_w64(m->fp, m->gather_type + o->type_dictoffset, 0x68);

	m->loop = mk_instance(m, "_thread_id", fakepy_int(m->fp, 0x7f0012345678));
	m->c_child = mk_coro(m, "child_fn", 40);
	not_started(m, m->c_child);
	m->child = mk_task(m, "child", m->c_child, 0);
	m->orphan = mk_task(m, "orphan", mk_coro(m, "gone", 50), 0);
	fakepy_w32(m->fp, m->orphan + m->a->task_state, m->a->state_cancelled);
	spy_addr_t kids = m->kids = fakepy_object(m->fp, m->list_type, 0x40);
	spy_addr_t items = fakepy_alloc(m->fp, 16);
	fakepy_w64(m->fp, items, m->child);
	fakepy_w64(m->fp, items + 8, m->orphan);
	fakepy_w64(m->fp, kids + o->ob_size, 2);
	fakepy_w64(m->fp, kids + o->list_item, items);
	m->gather = fakepy_object(m->fp, m->gather_type, m->a->fut_size);
	spy_addr_t k = fakepy_str(m->fp, "_children");
	fakepy_w64(m->fp, m->gather + 0x68, fakepy_dict(m->fp, &k, &kids, 1, true));
	spy_addr_t c_inner = mk_coro(m, "inner_fn", 30);
	m->inner = mk_task(m, "inner", c_inner, m->gather);

	m->c_outer = mk_coro(m, "main", 10);
	m->c_mid = mk_coro(m, "mid", 20);
	m->c_leaf = mk_coro(m, "leaf", 25);
	await_on(m, m->c_outer, m->c_mid);
	await_on(m, m->c_mid, m->c_leaf);
	/* What `await task` leaves: a FutureIter, which ends the chain. */
	spy_addr_t it = fakepy_object(m->fp, fakepy_type(m->fp, "_asyncio.FutureIter"), 0x20);
	fakepy_w64(m->fp, it + m->a->futureiter_future, m->inner);
	await_on(m, m->c_leaf, it);
	m->outer = mk_task(m, "outer", m->c_outer, m->inner);

	spy_addr_t refs[4] = { mk_ref(m, m->outer), mk_ref(m, m->inner), mk_ref(m, m->child),
			       mk_ref(m, m->orphan) };
	m->set = mk_set(m, refs, 4);
	spy_addr_t ws = mk_instance(m, "data", m->set);
	/* 3.12+: a task started eagerly is in a plain set of its own. */
	spy_addr_t eager = mk_task(m, "eager", mk_coro(m, "eager_fn", 60), 0);
	spy_addr_t mk[3] = { fakepy_str(m->fp, row->version < 0x030c0000 ? "_all_tasks" :
									  "_scheduled_tasks"),
			     fakepy_str(m->fp, "_current_tasks"), fakepy_str(m->fp, "_eager_tasks") };
	spy_addr_t mv[3] = { ws, fakepy_dict(m->fp, NULL, NULL, 0, false), mk_set(m, &eager, 1) };
	bool eager_set = row->version >= 0x030c0000;
	m->ntasks = eager_set ? 4 : 3;
	spy_addr_t module = fakepy_object(m->fp, m->module_type, 0x80);
	fakepy_w64(m->fp, module + o->module_dict, fakepy_dict(m->fp, mk, mv, eager_set ? 3 : 2, true));
	spy_addr_t sk[2] = { fakepy_str(m->fp, "sys"), fakepy_str(m->fp, "asyncio.tasks") };
	spy_addr_t sv[2] = { fakepy_object(m->fp, m->module_type, 0x80), module };
	fakepy_w64(m->fp, m->interp + o->interp_modules, fakepy_dict(m->fp, sk, sv, 2, true));
}

static const struct pyrt_task *by_name(const struct pyrt_task *t, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (t[i].name && !strcmp(t[i].name, name)) {
			return &t[i];
		}
	}
	return NULL;
}

static bool frame_is(const struct spy_frame *f, const char *func, uint32_t line)
{
	return f->func && !strcmp(f->func, func) && f->file && !strcmp(f->file, FILE_PY) &&
	       f->line == line;
}

static struct pyrt_task out[8];

static int tasks_max(struct pyrt *rt, size_t max, size_t *n)
{
	struct pyrt_async_hints h = { 0 };
	struct spy_err err = SPY_ERR_INIT;
	memset(out, 0xa5, sizeof(out));
	return pyrt_tasks(rt, &h, out, max, n, &err);
}

static int tasks(struct pyrt *rt, size_t *n)
{
	return tasks_max(rt, SPY_ARRAY_SIZE(out), n);
}

static void test_row(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt *rt = NULL;
	size_t n = 0;
	img_init(&m, row);
	int rc = pyrt_new(&rt, fakepy_mem(m.fp), fakepy_hints(m.fp), &m.strs, NULL);
	CHECK_INT(rc, 0);
	if (rc < 0) {
		goto out;
	}
	CHECK_INT(tasks(rt, &n), 0);
	CHECK_INT(n, m.ntasks);
	/* In name order: nothing before 3.14 keeps the order they were made in. */
	CHECK(n >= 3 && !strcmp(out[0].name, "child") && !strcmp(out[n - 1].name, "outer"));
	const struct pyrt_task *eager = by_name(out, n, "eager");
	CHECK(m.ntasks == 3 || (eager && eager->nchain == 1 && frame_is(&eager->chain[0], "eager_fn", 60)));
	const struct pyrt_task *outer = by_name(out, n, "outer"), *inner = by_name(out, n, "inner"),
			       *child = by_name(out, n, "child"), *orphan = by_name(out, n, "orphan");
	CHECK(outer && inner && child && !orphan);
	if (!outer || !inner || !child) {
		fprintf(stderr, "  row %x\n", row->version);
		goto out;
	}
	/* Innermost first. */
	CHECK_INT(outer->nchain, 3);
	CHECK(!outer->chain_truncated);
	CHECK(outer->nchain == 3 && frame_is(&outer->chain[0], "leaf", 25) &&
	      frame_is(&outer->chain[1], "mid", 20) && frame_is(&outer->chain[2], "main", 10));
	CHECK_INT(outer->state, PYRT_TASK_PENDING);
	CHECK(!outer->running && outer->thread_id == 0 && outer->loop == m.loop &&
	      outer->loop_thread_id == 0x7f0012345678);
	CHECK_INT(outer->nawaited_by, 0);
	/* inner is awaited by outer (await task); child by inner (gather). */
	CHECK(inner->nawaited_by == 1 && inner->awaited_by[0] == m.outer);
	CHECK(inner->nchain == 1 && frame_is(&inner->chain[0], "inner_fn", 30));
	CHECK(child->nawaited_by == 1 && child->awaited_by[0] == m.inner);
	/* Not started: its frame, wherever the line table puts instruction -1. */
	CHECK(child->nchain == 1 && child->chain[0].func && !strcmp(child->chain[0].func, "child_fn"));

	/* Room for one: all are counted, one is filled. */
	CHECK_INT(tasks_max(rt, 1, &n), 0);
	CHECK_INT(n, m.ntasks);
	CHECK(out[0].name != NULL && out[1].addr == 0xa5a5a5a5a5a5a5a5ull);

	/* A cycle: leaf awaits main again. The chain stops, says it is cut. */
	await_on(&m, m.c_leaf, m.c_outer);
	CHECK_INT(tasks(rt, &n), 0);
	outer = by_name(out, n, "outer");
	CHECK(outer && outer->nchain == 3 && outer->chain_truncated &&
	      (outer->chain[2].flags & SPY_FRAME_TRUNCATED));
	/* ... and a pointer into nothing instead. */
	await_on(&m, m.c_leaf, 0xdead0000beef);
	CHECK_INT(tasks(rt, &n), 0);
	outer = by_name(out, n, "outer");
	CHECK(outer && outer->nchain == 3 && !outer->chain_truncated);
	/* A task whose coroutine pointer is wild: listed, with no chain. */
	fakepy_w64(m.fp, m.outer + m.a->task_coro, 0x10);
	CHECK_INT(tasks(rt, &n), 0);
	outer = by_name(out, n, "outer");
	CHECK(outer && outer->nchain == 0);
	fakepy_w64(m.fp, m.outer + m.a->task_coro, m.c_outer);
	/* A gather whose children list claims 2^40 items: no edge, no hang. */
	fakepy_w64(m.fp, m.kids + row->ob_size, 1ull << 40);
	CHECK_INT(tasks(rt, &n), 0);
	child = by_name(out, n, "child");
	CHECK(n == m.ntasks && child && child->nawaited_by == 0);
	fakepy_w64(m.fp, m.kids + row->ob_size, 2);
	/* The WeakSet's table: a mask that lies, then a table into nothing. */
	spy_addr_t mask = fakepy_r64(m.fp, m.set + row->set_mask);
	fakepy_w64(m.fp, m.set + row->set_mask, (1ull << 40) - 1);
	CHECK_INT(tasks(rt, &n), 0);
	CHECK_INT(n, m.ntasks - 3); /* the eager one still */
	fakepy_w64(m.fp, m.set + row->set_mask, mask);
	spy_addr_t table = fakepy_r64(m.fp, m.set + row->set_table);
	fakepy_w64(m.fp, m.set + row->set_table, 0xdead00000000);
	CHECK_INT(tasks(rt, &n), 0);
	CHECK_INT(n, m.ntasks - 3);
	fakepy_w64(m.fp, m.set + row->set_table, table);
	/* The same task twice (two weakrefs to it) is one task. */
	spy_addr_t dup = mk_ref(&m, m.outer);
	fakepy_w64(m.fp, table + 10 * row->setentry_size + row->setentry_key, dup);
	CHECK_INT(tasks(rt, &n), 0);
	CHECK_INT(n, m.ntasks);
	pyrt_free(rt);

	/* A _asyncio.Task of another size is another layout: refused, not read. */
	fakepy_w64(m.fp, m.task_type + row->type_basicsize, m.a->task_size + 8);
	rt = NULL;
	CHECK_INT(pyrt_new(&rt, fakepy_mem(m.fp), fakepy_hints(m.fp), &m.strs, NULL), 0);
	if (rt) {
		CHECK_INT(tasks(rt, &n), -SPY_EVERSION);
		CHECK_INT(n, 0);
	}
out:
	pyrt_free(rt);
	fakepy_free(m.fp);
	spy_strtab_release(&m.strs);
}

/*
 * Random damage, a fixed seed: words of the scene's objects overwritten with
 * junk, small numbers or pointers to other objects (cycles among them), a
 * few at a time, then every reader run on it. Nothing may crash, hang or
 * return more than the bounds allow.
 */
static void test_damage(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt *rt = NULL;
	uint64_t seed = 0x9e3779b97f4a7c15ull ^ row->version;
	for (int round = 0; round < 40; round++) {
		img_init(&m, row);
		if (pyrt_new(&rt, fakepy_mem(m.fp), fakepy_hints(m.fp), &m.strs, NULL) < 0) {
			CHECK(0);
			fakepy_free(m.fp);
			spy_strtab_release(&m.strs);
			return;
		}
		spy_addr_t obj[] = { m.outer, m.inner, m.child, m.orphan, m.c_outer, m.c_mid, m.c_leaf,
				     m.c_child, frame_of(&m, m.c_outer), frame_of(&m, m.c_leaf), m.set,
				     fakepy_r64(m.fp, m.set + row->set_table), m.gather, m.kids, m.loop };
		struct py_thread th[4];
		size_t nth = 0;
		(void)pyrt_threads(rt, th, 4, &nth, NULL);
		for (int k = 0; k < 8; k++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			spy_addr_t at = obj[(seed >> 33) % SPY_ARRAY_SIZE(obj)] + 8 * ((seed >> 20) % 24);
			uint64_t v = (seed >> 8) % 3 == 0 ? obj[(seed >> 40) % SPY_ARRAY_SIZE(obj)] :
				     (seed >> 8) % 3 == 1 ? (seed >> 50) : seed;
			fakepy_w64(m.fp, at, v);
			size_t n = 0;
			int rc = tasks(rt, &n);
			CHECK(rc == 0 || rc == -SPY_EVERSION || rc == -SPY_ENOPY || rc == -SPY_ECORRUPT ||
			      rc == -SPY_EMEM);
			CHECK(n <= PYRT_MAX_TASKS);
			for (size_t i = 0; rc == 0 && i < n && i < SPY_ARRAY_SIZE(out); i++) {
				CHECK(out[i].nchain <= PYRT_TASK_MAX_CHAIN &&
				      out[i].nawaited_by <= PYRT_TASK_MAX_AWAITERS && out[i].name);
			}
			for (size_t i = 0; i < nth && i < 4; i++) {
				struct spy_stack st = SPY_STACK_INIT;
				struct pyrt_async_hints h = { 0 };
				const char *name = NULL;
				size_t nf = 0;
				(void)pyrt_stack(rt, &th[i], &st, NULL);
				if (pyrt_stack_task(rt, &h, &th[i], &name, &nf) == 1) {
					CHECK(name && nf <= st.n);
				}
				spy_stack_release(&st);
			}
		}
		pyrt_free(rt);
		rt = NULL;
		fakepy_free(m.fp);
		spy_strtab_release(&m.strs);
	}
}

int main(void)
{
	unsigned rows = 0;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		if ((row->gen_iframe != PYOFF_NONE || row->gen_frame != PYOFF_NONE) &&
		    pyaio_find(row->version, row->build & PYBUILD_FT)) {
			test_row(row);
			test_damage(row);
			rows++;
		}
	}
	CHECK_INT(rows, 7); /* 3.8 to 3.13, and 3.13t */
	return check_done();
}
