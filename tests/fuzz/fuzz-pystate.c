/*
 * Fuzzing pystate: each input builds a synthetic CPython image (fakepy) of
 * one layout, hides some of the hints, then patches the image where the
 * input says -- pointers swapped for other objects, unmapped or misaligned
 * addresses, sizes and raw bytes -- and runs what a profiler and dump run:
 * pyrt_new, then pyrt_threads and pyrt_stack on every thread, and on
 * demand the locals of every frame with their reprs (pystate/locals.c) and
 * the threading names (pystate/names.c: dicts of every model, instance
 * attributes in dicts or split values). pyrt_new may fail; nothing may
 * crash, hang or read out of bounds (build with
 * -Db_sanitize=address,undefined to make the last one loud).
 *
 * The scenes carry what a hostile target bends: asyncio gathers whose
 * children fan out and hold the gathers themselves (cycles), locals read
 * under a total budget of reads, thread names found a few reads per call.
 *
 * Input: byte 0 picks the layout (every row, plus a version after the
 * newest read from its _Py_DebugOffsets), byte 1 hides hints (the HIDE_* bits), byte 2 is the
 * micro version (low 5 bits; its lowest also keeps Thread names in split
 * values, its bit 2 (4) adds asyncio tasks on versions with a task reader:
 * pyrt_tasks, and pyrt_stack_task after each stack; its bit 3 (8) lets the
 * memory answer peeks, as a live process's cache does, so that a 3.11+
 * stack's second walk splices from the first) and the WITH_* bits. With WITH_TABLE, on a row that has a
 * _Py_DebugOffsets (3.13+), the next sizeof(_Py_DebugOffsets) bytes (or
 * all there are) replace the image's table: the seeds carry the tables of
 * the real 3.13, 3.14 and 3.15 of the test root, for the fuzzer to bend.
 * Then patches of 5 to 12 bytes: op, object, a 16-bit offset into the
 * object, and a value whose form depends on op.
 *
 * Why patches on a valid scene rather than raw memory: a random byte image
 * never gets past pyrt_new, so everything after it would go untested.
 *
 * Built two ways: with -Dfuzz=true for libFuzzer (LLVMFuzzerTestOneInput);
 * otherwise with a replay main that runs each file of the seed corpus
 * given on the command line plus a fixed-seed batch of generated inputs,
 * so the unit suite exercises the same code without libFuzzer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/fakepy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
	HIDE_RUNTIME = 1,
	HIDE_HEAD = 2,
	HIDE_TSTATE_CURRENT = 4,
	HIDE_DATA = 8,
	HIDE_PY_VERSION = 16,
	HIDE_HINT = 32,
	GIL_RELEASED = 64,
	ADD_SUBINTERP = 128,
};

/* Byte 2's high bits. */
enum {
	WITH_LOCALS = 0x20,
	WITH_NAMES = 0x40,
	WITH_TABLE = 0x80,
};

enum { OP_U64, OP_U8, OP_PTR, OP_U32, OP_COUNT };

#define NOBJ 40

/*
 * Bytes of data section before the statics: little, as the fuzzer writes
 * no decoys there, and every sys.version scan reads the whole section byte
 * by byte (fakepy_new's 64 KiB made that scan most of the time per input).
 */
#define FRONT 0x400

struct scene {
	struct fakepy *fp;
	struct pyoffsets layout;
	unsigned with;
	bool tasks;
	struct pyrt_async_hints aio;
	spy_addr_t obj[NOBJ];
	size_t nobj;
};

static spy_addr_t add(struct scene *s, spy_addr_t a)
{
	if (s->nobj < NOBJ) {
		s->obj[s->nobj++] = a;
	}
	return a;
}

/*
 * A version after the newest row's, laid out as the newest row with some
 * fields moved: pyrt takes the newest row and corrects it from the image's
 * _Py_DebugOffsets (runtime.c's future path). Fields that table does not
 * carry (ht_cached_keys, managed dicts) stay the newest row's, as pyrt
 * assumes; a layout built on an older row made those disagree, so split
 * instance values were never found.
 */
static void future_layout(struct pyoffsets *o)
{
	const struct pyoffsets *row = pyoffsets_newest();
	*o = *row;
	o->version = (row->version & 0xffff0000u) + 0x10000u;
	o->dbg = *pydebug_layout_for(o->version);
	o->rt_interpreters_head += 0x100;
	o->rt_interpreters_main += 0x100;
	o->interp_next += 0x80;
	o->interp_id += 0x80;
	o->interp_tstate_head = o->interp_id + 8; /* clear of modules and sysdict */
	o->code_filename = row->code_name;
	o->code_name = row->code_filename;
	o->iframe_code = row->iframe_previous;
	o->iframe_previous = row->iframe_code;
}

/*
 * Arguments and locals for frames running code: one value of each kind
 * locals.c reads (small and big int, str, bytes, float, list, dict, None,
 * unbound), more slots claimed than named.
 */
static void locals(struct scene *s, spy_addr_t code, const spy_addr_t *frames, size_t nframes)
{
	struct fakepy *fp = s->fp;
	const struct pyoffsets *o = &s->layout;
	static const char *const names[] = { "n", "big", "s", "b", "x", "items", "table", "nothing",
					     "unset" };
	enum { NL = sizeof(names) / sizeof(names[0]) };
	uint32_t big[3] = { 5, 0, 16 };
	spy_addr_t vals[NL] = {
		fakepy_int(fp, 42),
		fakepy_long(fp, o->int_ival != PYOFF_NONE ? "long" : "int", big, 3, 3, true),
		fakepy_str(fp, "h\xc3\xa9\x1b]52;"),
		fakepy_bytes(fp, "\x00\xff'", 3),
		fakepy_sized(fp, "float", o->float_fval, 0x3ff8000000000000ll),
		fakepy_sized(fp, "list", o->ob_size, 3),
		fakepy_sized(fp, "dict", o->dict_used, 2),
		fakepy_object(fp, fakepy_type(fp, "NoneType"), 16),
		0,
	};
	spy_addr_t name_objs[NL];
	for (size_t i = 0; i < NL; i++) {
		name_objs[i] = fakepy_str(fp, names[i]);
		if (vals[i]) {
			add(s, vals[i]);
		}
		for (size_t f = 0; f < nframes; f++) {
			fakepy_w64(fp, fakepy_local_slot(fp, frames[f], i), fakepy_ref(fp, vals[i]));
		}
	}
	add(s, fakepy_tuple(fp, name_objs, NL));
	fakepy_w64(fp, code + o->code_varnames, s->obj[s->nobj - 1]);
	fakepy_w32(fp, code + o->code_argcount, 2);
	if (o->code_nlocalsplus != PYOFF_NONE) {
		uint8_t kinds[NL];
		memset(kinds, 0x20, sizeof(kinds)); /* CO_FAST_LOCAL */
		fakepy_w32(fp, code + o->code_nlocalsplus, NL + 4);
		fakepy_w64(fp, code + o->code_localspluskinds, add(s, fakepy_bytes(fp, kinds, NL)));
	} else {
		fakepy_w32(fp, code + o->code_nlocals, NL + 4);
	}
}

/* ---- asyncio tasks (pystate/tasks.c, tasks-legacy.c) ---- */

/* The fake _AsyncioDebug of 3.14+ (test-pystate-tasks.c's: 3.14's TaskObj). */
enum {
	T_SIZE = 0xa8, T_LOOP = 0x10, T_AWAITED_BY = 0x60, T_IS_TASK = 0x6c, T_IS_SET = 0x6d,
	T_CORO = 0x80, T_NAME = 0x88, T_NODE = 0x98,
	TS_LOOP = 0x300, TS_TASK = 0x308, TS_HEAD = 0x310, I_HEAD = 0x1000,
};

static void list_add(struct fakepy *fp, spy_addr_t head, spy_addr_t node)
{
	if (!fakepy_r64(fp, head)) {
		fakepy_w64(fp, head, head);
		fakepy_w64(fp, head + 8, head);
	}
	spy_addr_t last = fakepy_r64(fp, head + 8);
	fakepy_w64(fp, node, head);
	fakepy_w64(fp, node + 8, last);
	fakepy_w64(fp, last, node);
	fakepy_w64(fp, head + 8, node);
}

/*
 * A coroutine suspended in function name, awaiting what (0: nothing):
 * 3.11+ its embedded frame (3.14+ the awaited object gen_await_depth below
 * the top of its stack; 3.11-3.13 on top, the state or the next RESUME
 * saying so), before that a frame object of its own with YIELD_FROM next.
 */
static spy_addr_t coro(struct scene *s, spy_addr_t type, const char *name, int32_t line,
		       spy_addr_t what)
{
	struct fakepy *fp = s->fp;
	const struct pyoffsets *o = &s->layout;
	spy_addr_t code = add(s, fakepy_code(fp, name, "/srv/app.py", line - 3, 40, 10, line));
	if (o->gen_iframe == PYOFF_NONE) {
		static const uint8_t zeros[16];
		spy_addr_t c = fakepy_object(fp, type, 0x80);
		spy_addr_t ft = fakepy_type(fp, "frame");
		spy_addr_t f = add(s, fakepy_object(fp, ft, o->frame_localsplus + 0x100));
		spy_addr_t bytes = fakepy_bytes(fp, zeros, sizeof(zeros));
		fakepy_w64(fp, c + o->gen_frame, f);
		fakepy_w64(fp, f + o->frame_code, code);
		fakepy_w64(fp, code + o->code_code, bytes);
		fakepy_w32(fp, f + o->frame_lasti, o->instr_model == PYINSTR_LASTI_UNITS ? 3 : 6);
		spy_addr_t top = f + o->frame_localsplus + (what ? 8 : 0);
		if (what) {
			fakepy_w8(fp, bytes + o->bytes_sval + 8, (uint8_t)o->op_yield_from);
			fakepy_w64(fp, f + o->frame_localsplus, what);
		}
		if (o->frame_stacktop != PYOFF_NONE) {
			fakepy_w64(fp, f + o->frame_stacktop, top);
		} else if (o->frame_stackdepth != PYOFF_NONE && what) {
			fakepy_w32(fp, f + o->frame_stackdepth, 1);
		} else {
			fakepy_w64(fp, f + o->frame_valuestack, f + o->frame_localsplus);
			fakepy_w8(fp, f + o->frame_state, (uint8_t)o->frame_state_suspended);
		}
		return add(s, c);
	}
	spy_addr_t c = fakepy_object(fp, type, o->gen_iframe + o->iframe_size + 0x200);
	spy_addr_t f = c + o->gen_iframe;
	fakepy_w64(fp, f + o->iframe_code, fakepy_ref(fp, code));
	fakepy_w64(fp, f + o->iframe_instr, code + o->code_adaptive + 2 * 10);
	fakepy_w8(fp, f + o->iframe_owner, (uint8_t)o->owner_generator);
	bool yf = what && o->gen_state_yield_from != PYOFF_NONE;
	fakepy_w8(fp, c + o->gen_frame_state,
		  (uint8_t)(yf ? o->gen_state_yield_from : o->gen_state_suspended));
	if (what && o->iframe_stackpointer != PYOFF_NONE) {
		spy_addr_t sp = f + o->iframe_localsplus + 8 * 4;
		fakepy_w64(fp, f + o->iframe_stackpointer, sp);
		fakepy_w64(fp, sp - 8 * (uint64_t)o->gen_await_depth, fakepy_ref(fp, what));
	} else if (what) {
		fakepy_w32(fp, f + o->iframe_stacktop, 1);
		fakepy_w64(fp, f + o->iframe_localsplus, what);
		if (!yf) {
			/* The instruction after the YIELD_VALUE: RESUME 3, after an await. */
			fakepy_w8(fp, code + o->code_adaptive + 2 * 11, (uint8_t)o->op_resume);
			fakepy_w8(fp, code + o->code_adaptive + 2 * 11 + 1, 3);
		}
	}
	return add(s, c);
}

/* Put coroutine c's frame on top of thread ts: the task it runs is running. */
static void run_on(struct scene *s, spy_addr_t ts, spy_addr_t c)
{
	const struct pyoffsets *o = &s->layout;
	spy_addr_t f = o->gen_iframe != PYOFF_NONE ? c + o->gen_iframe : fakepy_r64(s->fp, c + o->gen_frame);
	fakepy_w64(s->fp, fakepy_back_slot(s->fp, f), fakepy_r64(s->fp, fakepy_top_slot(s->fp, ts)));
	fakepy_w64(s->fp, fakepy_top_slot(s->fp, ts), f);
}

/*
 * 3.14+: the _AsyncioDebug table, t1's tasks in its thread state's list
 * (outer awaiting inner's coroutine, a child awaited by outer), one task
 * of an ended thread in the interpreter's list awaited by a set, outer
 * running on t1.
 */
static void tasks_debug(struct scene *s, spy_addr_t ip, spy_addr_t t1)
{
	struct fakepy *fp = s->fp;
	const struct pyoffsets *o = &s->layout;
	spy_addr_t ct = fakepy_type(fp, "coroutine"), tt = fakepy_type(fp, "_asyncio.Task");
	spy_addr_t loop = add(s, fakepy_object(fp, fakepy_type(fp, "_UnixSelectorEventLoop"), 0x40));
	uint64_t d[13] = { T_SIZE, T_NAME, T_AWAITED_BY, T_IS_TASK, T_IS_SET, T_CORO, T_NODE,
			   I_HEAD + 0x100, I_HEAD, o->tstate_size, TS_LOOP, TS_TASK, TS_HEAD };
	s->aio.debug_offsets = add(s, fakepy_alloc(fp, sizeof(d)));
	for (size_t i = 0; i < 13; i++) {
		fakepy_w64(fp, s->aio.debug_offsets + 8 * i, d[i]);
	}
	fakepy_w64(fp, t1 + TS_LOOP, loop);
	spy_addr_t fut = add(s, fakepy_object(fp, fakepy_type(fp, "_asyncio.FutureIter"), 0x40));
	spy_addr_t inner = coro(s, ct, "inner", 20, fut);
	spy_addr_t outer = coro(s, ct, "Handler.outer", 30, inner);
	spy_addr_t task[3];
	spy_addr_t name[3] = { fakepy_str(fp, "outer-task"), fakepy_int(fp, 7),
			       fakepy_str(fp, "orphan\x1b[2J") };
	spy_addr_t co[3] = { outer, coro(s, ct, "child", 40, 0), coro(s, ct, "orphaned", 50, 0) };
	for (size_t i = 0; i < 3; i++) {
		task[i] = add(s, fakepy_object(fp, tt, T_SIZE));
		fakepy_w64(fp, task[i] + T_LOOP, loop);
		fakepy_w8(fp, task[i] + T_IS_TASK, 1);
		fakepy_w64(fp, task[i] + T_NAME, name[i]);
		fakepy_w64(fp, task[i] + T_CORO, co[i]);
		list_add(fp, i < 2 ? t1 + TS_HEAD : ip + I_HEAD, task[i] + T_NODE);
	}
	fakepy_w64(fp, task[1] + T_AWAITED_BY, task[0]);
	spy_addr_t set = add(s, fakepy_object(fp, fakepy_type(fp, "set"), 0xc8));
	spy_addr_t table = fakepy_alloc(fp, 16 * 8);
	fakepy_w64(fp, table + 16, task[0]);
	fakepy_w64(fp, table + 48, task[1]);
	fakepy_w64(fp, set + o->set_used, 2);
	fakepy_w64(fp, set + o->set_mask, 7);
	fakepy_w64(fp, set + o->set_table, table);
	fakepy_w64(fp, task[2] + T_AWAITED_BY, set);
	fakepy_w8(fp, task[2] + T_IS_SET, 1);
	fakepy_w64(fp, t1 + TS_TASK, task[0]);
	run_on(s, t1, outer);
}

/* An instance of type whose attribute name is value, in its dict. */
static spy_addr_t instance(struct scene *s, spy_addr_t type, const char *name, spy_addr_t value)
{
	struct fakepy *fp = s->fp;
	const struct pyoffsets *o = &s->layout;
	spy_addr_t k = fakepy_str(fp, name);
	spy_addr_t obj = fakepy_alloc(fp, 0x100) + 0x40; /* room for the managed dict before it */
	fakepy_w64(fp, obj, 1);
	fakepy_w64(fp, obj + o->ob_type, type);
	spy_addr_t d = fakepy_dict(fp, &k, &value, 1, true);
	fakepy_w64(fp, o->idict_model == PYIDICT_OFFSET ? obj + 0x18 : obj - o->managed_dict_off, d);
	return add(s, obj);
}

/* A set of n keys (16 slots, every other one used). */
static spy_addr_t set_of(struct scene *s, const spy_addr_t *keys, size_t n)
{
	struct fakepy *fp = s->fp;
	const struct pyoffsets *o = &s->layout;
	spy_addr_t set = fakepy_object(fp, fakepy_type(fp, "set"), 0xd0);
	spy_addr_t table = fakepy_alloc(fp, 16 * o->setentry_size);
	for (size_t i = 0; i < n && i < 8; i++) {
		fakepy_w64(fp, table + (2 * i + 1) * o->setentry_size + o->setentry_key, keys[i]);
	}
	fakepy_w64(fp, set + o->set_mask, 15);
	fakepy_w64(fp, set + o->set_table, table);
	return add(s, set);
}

/*
 * 3.8-3.13 (test-pystate-tasks-legacy.c's scene, smaller): sys.modules ->
 * asyncio.tasks -> a WeakSet of weakrefs to tasks (3.12+ also the eager
 * set), outer awaiting inner through a FutureIter, inner waiting on a
 * gather of a child, the loop's _thread_id t1's, outer current and
 * running on t1. threading stays in sys.modules when names are built.
 */
static void tasks_legacy(struct scene *s, const struct pyaio_offsets *a, spy_addr_t ip,
			 spy_addr_t t1, spy_addr_t threading)
{
	struct fakepy *fp = s->fp;
	const struct pyoffsets *o = &s->layout;
	spy_addr_t ct = fakepy_type(fp, "coroutine"), mt = fakepy_type(fp, "module");
	spy_addr_t tt = add(s, fakepy_type(fp, "_asyncio.Task"));
	fakepy_w64(fp, tt + o->type_basicsize, a->task_size);
	spy_addr_t at = fakepy_type(fp, "WeakSet");
	fakepy_w64(fp, o->idict_model == PYIDICT_OFFSET ? at + o->type_dictoffset : at + o->type_flags,
		   o->idict_model == PYIDICT_OFFSET ? 0x18 : o->tpflags_managed_dict);
	fakepy_w64(fp, at + o->type_basicsize, 0x20);
	spy_addr_t gt = fakepy_type(fp, "_GatheringFuture");
	fakepy_w64(fp, gt + o->type_basicsize, a->fut_size);
	fakepy_w64(fp, gt + o->type_dictoffset, 0x68);
	spy_addr_t loop = instance(s, at, "_thread_id", fakepy_int(fp, fakepy_thread_id(fp, t1)));

	spy_addr_t task[4];
	const char *names[4] = { "child", "inner", "outer\n", "eager" };
	spy_addr_t leaf = 0;
	for (size_t i = 0; i < 4; i++) {
		task[i] = add(s, fakepy_object(fp, tt, a->task_size));
		fakepy_w32(fp, task[i] + a->task_state, a->state_pending);
		fakepy_w64(fp, task[i] + a->task_loop, loop);
		fakepy_w64(fp, task[i] + a->task_name, fakepy_str(fp, names[i]));
	}
	spy_addr_t it = add(s, fakepy_object(fp, fakepy_type(fp, "_asyncio.FutureIter"), 0x20));
	fakepy_w64(fp, it + a->futureiter_future, task[1]);
	leaf = coro(s, ct, "leaf", 25, it);
	spy_addr_t outer = coro(s, ct, "main", 10, coro(s, ct, "mid", 20, leaf));
	fakepy_w64(fp, task[2] + a->task_coro, outer);
	fakepy_w64(fp, task[2] + a->task_fut_waiter, task[1]);
	fakepy_w64(fp, task[1] + a->task_coro, coro(s, ct, "inner_fn", 30, 0));
	fakepy_w64(fp, task[0] + a->task_coro, coro(s, ct, "child_fn", 40, 0));
	fakepy_w64(fp, task[3] + a->task_coro, coro(s, ct, "eager_fn", 60, 0));
	/*
	 * The gather inner waits on: fan-out and cycles. Its children are
	 * child, itself, a second gather whose children are the first gather
	 * and eager, then child and both gathers again: the walk must expand
	 * each gather once per awaiting task and end.
	 */
	spy_addr_t lt = fakepy_type(fp, "list"), k = fakepy_str(fp, "_children");
	spy_addr_t gather = add(s, fakepy_object(fp, gt, a->fut_size));
	spy_addr_t gather2 = add(s, fakepy_object(fp, gt, a->fut_size));
	spy_addr_t fan[7] = { task[0], gather, gather2, gather, task[0], gather2, gather };
	spy_addr_t back[2] = { gather, task[3] };
	spy_addr_t lists[2] = { add(s, fakepy_object(fp, lt, 0x40)), add(s, fakepy_object(fp, lt, 0x40)) };
	spy_addr_t items[2] = { add(s, fakepy_alloc(fp, sizeof(fan))), add(s, fakepy_alloc(fp, sizeof(back))) };
	for (size_t i = 0; i < 7; i++) {
		fakepy_w64(fp, items[0] + 8 * i, fan[i]);
	}
	fakepy_w64(fp, items[1], back[0]);
	fakepy_w64(fp, items[1] + 8, back[1]);
	for (size_t i = 0; i < 2; i++) {
		fakepy_w64(fp, lists[i] + o->ob_size, i == 0 ? 7 : 2);
		fakepy_w64(fp, lists[i] + o->list_item, items[i]);
		fakepy_w64(fp, (i == 0 ? gather : gather2) + 0x68, add(s, fakepy_dict(fp, &k, &lists[i], 1, true)));
	}
	fakepy_w64(fp, task[1] + a->task_fut_waiter, gather);

	spy_addr_t reft = fakepy_type(fp, "weakref.ReferenceType");
	spy_addr_t refs[3];
	for (size_t i = 0; i < 3; i++) {
		refs[i] = fakepy_object(fp, reft, 0x40);
		fakepy_w64(fp, refs[i] + o->weakref_object, task[i]);
	}
	spy_addr_t ws = instance(s, at, "data", set_of(s, refs, 3));
	spy_addr_t mk[3] = { fakepy_str(fp, o->version < 0x030c0000 ? "_all_tasks" : "_scheduled_tasks"),
			     fakepy_str(fp, "_current_tasks"), fakepy_str(fp, "_eager_tasks") };
	spy_addr_t mv[3] = { ws, add(s, fakepy_dict(fp, &loop, &task[2], 1, false)),
			     set_of(s, &task[3], 1) };
	spy_addr_t module = add(s, fakepy_object(fp, mt, 0x80));
	fakepy_w64(fp, module + o->module_dict,
		   add(s, fakepy_dict(fp, mk, mv, o->version >= 0x030c0000 ? 3 : 2, true)));
	spy_addr_t sk[3] = { fakepy_str(fp, "asyncio.tasks"), fakepy_str(fp, "sys"),
			     fakepy_str(fp, "threading") };
	spy_addr_t sv[3] = { module, fakepy_object(fp, mt, 0x80), threading };
	fakepy_w64(fp, ip + o->interp_modules, fakepy_dict(fp, sk, sv, threading ? 3 : 2, true));
	run_on(s, t1, outer);
}

static void build(struct scene *s, const uint8_t *data, size_t size)
{
	unsigned pick = size > 0 ? data[0] % (pyoffsets_count + 1) : 0;
	unsigned flags = size > 1 ? data[1] : 0;
	unsigned micro = size > 2 ? data[2] % 32 : 1;
	s->with = size > 2 ? data[2] & ~31u : 0;
	uint32_t version;

	if (pick == pyoffsets_count) {
		future_layout(&s->layout);
	} else {
		s->layout = pyoffsets_table[pick];
	}
	version = s->layout.version | (micro << 8) | 0xf0;
	pyoffsets_apply_quirks(&s->layout, version);
	s->fp = fakepy_new_front(&s->layout, version, FRONT);
	struct fakepy *fp = s->fp;
	fakepy_set_peek(fp, micro & 8);
	struct pyrt_hints *h = fakepy_hints(fp);
	const struct pyoffsets *o = &s->layout;

	spy_addr_t ip = add(s, fakepy_main_interp(fp));
	spy_addr_t t1 = add(s, fakepy_thread(fp, ip, FAKEPY_PID));
	spy_addr_t t2 = add(s, fakepy_thread(fp, ip, 4300));
	spy_addr_t c1 = add(s, fakepy_code(fp, "<module>", "main.py", 1, 20, 3, 10));
	spy_addr_t c2 = add(s, fakepy_code(fp, "Klass.f", "lib.py", 40, 300, 260, 90));
	add(s, fakepy_push_frame(fp, t1, c1, 3, 0));
	if (o->owner_shim != PYOWNER_NONE) {
		add(s, fakepy_push_shim(fp, t1));
	}
	spy_addr_t f2[2];
	f2[0] = add(s, fakepy_push_frame(fp, t1, c2, 260, 0));
	uint8_t gen = o->owner_generator == PYOWNER_NONE ? 0 : o->owner_generator;
	f2[1] = add(s, fakepy_push_frame(fp, t2, c2, 7, gen));
	add(s, h->runtime ? h->runtime : h->interp_head);
	add(s, h->data_lo);
	add(s, fakepy_sys_version(fp));
	add(s, fakepy_code_type(fp));
	add(s, fakepy_r64(fp, c2 + o->code_linetable));
	add(s, fakepy_r64(fp, c2 + (o->code_qualname != PYOFF_NONE ? o->code_qualname : o->code_name)));
	if (flags & ADD_SUBINTERP) {
		spy_addr_t sub = add(s, fakepy_new_interp(fp, 1));
		add(s, fakepy_thread(fp, sub, 4400));
	}
	fakepy_set_gil(fp, ip, flags & GIL_RELEASED ? 0 : t1);
	if (s->with & WITH_LOCALS) {
		locals(s, c2, f2, 2);
	}
	spy_addr_t tg_module = 0;
	if (s->with & WITH_NAMES) {
		static const char *const names[] = { "MainThread", "w\x1b[2J\xe2\x80\xae" };
		spy_addr_t ts[2] = { t1, t2 };
		struct fakepy_threading tg;
		fakepy_threading(fp, ip, ts, names, 2, micro & 1, &tg);
		add(s, tg.active);
		tg_module = add(s, tg.module);
		add(s, tg.thread_type);
		add(s, tg.inst[0]);
		add(s, tg.inst[1]);
		add(s, fakepy_r64(fp, ip + o->interp_modules));
		add(s, fakepy_r64(fp, tg.module + o->module_dict));
		if (o->dict_model != PYDICT_OPEN27) {
			add(s, fakepy_r64(fp, tg.active + o->dict_keys));
		}
	}
	/* micro's bit 2: asyncio tasks, where the version has a reader. */
	const struct pyaio_offsets *aio = pyaio_find(o->version, o->build & PYBUILD_FT);
	if ((micro & 4) && o->version >= 0x030e0000) {
		tasks_debug(s, ip, t1);
		s->tasks = true;
	} else if ((micro & 4) && aio) {
		tasks_legacy(s, aio, ip, t1, tg_module);
		s->tasks = true;
	}

	if (flags & HIDE_RUNTIME) {
		h->runtime = 0;
	}
	if (flags & HIDE_HEAD) {
		h->interp_head = 0;
	}
	if (flags & HIDE_TSTATE_CURRENT) {
		h->tstate_current = 0;
	}
	if (flags & HIDE_DATA) {
		h->data_lo = h->data_hi = 0;
	}
	if (flags & HIDE_PY_VERSION) {
		h->py_version = 0;
	}
	if (flags & HIDE_HINT) {
		h->version_hint = 0;
	}
}

/* Values a patch may write: the scene's own pointers, bent. */
static uint64_t pointer_value(struct scene *s, uint8_t sel)
{
	static const uint64_t odd[] = { 0, 1, 0x7f0000001000ull, 0xffffffffffffffffull,
					(1ull << 47), FAKEPY_BASE - 8 };
	if (sel < sizeof(odd) / sizeof(odd[0])) {
		return odd[sel];
	}
	spy_addr_t a = s->obj[sel % s->nobj];
	switch ((sel >> 4) & 3) {
	case 0:
		return a;
	case 1:
		return a + 1;
	case 2:
		return a + 8;
	default:
		return a - 8;
	}
}

static void patch(struct scene *s, const uint8_t *p, size_t n)
{
	while (n >= 5) {
		unsigned op = p[0] % OP_COUNT;
		spy_addr_t at = s->obj[p[1] % s->nobj] + (uint16_t)(p[2] | (p[3] << 8));
		size_t need = op == OP_U64 ? 12 : op == OP_U32 ? 8 : 5;
		if (n < need) {
			break;
		}
		/* Stay inside the image: fakepy itself SPY_BUGs on wild writes. */
		if (at >= FAKEPY_BASE + 0x1000 && at + 8 <= FAKEPY_BASE + (24u << 20)) {
			switch (op) {
			case OP_U64: {
				uint64_t v;
				memcpy(&v, p + 4, 8);
				fakepy_w64(s->fp, at, v);
				break;
			}
			case OP_U32: {
				uint32_t v;
				memcpy(&v, p + 4, 4);
				fakepy_w32(s->fp, at, v);
				break;
			}
			case OP_U8:
				fakepy_w8(s->fp, at, p[4]);
				break;
			default:
				fakepy_w64(s->fp, at, pointer_value(s, p[4]));
				break;
			}
		}
		p += need;
		n -= need;
	}
}

/* WITH_TABLE: the input's bytes over the image's _Py_DebugOffsets; how many taken. */
static size_t table(struct scene *s, const uint8_t *p, size_t n)
{
	spy_addr_t rt = fakepy_hints(s->fp)->runtime;
	size_t size = s->layout.dbg.size;
	if (!(s->with & WITH_TABLE) || !size || !rt) {
		return 0;
	}
	if (n > size) {
		n = size;
	}
	memcpy(fakepy_at(s->fp, rt), p, n);
	return n;
}

/* What dump --locals does with a frame: read it, print every value. */
static void frame_locals(struct pyrt *rt, size_t nframes)
{
	static struct py_local l[PYRT_MAX_LOCALS];
	struct spy_buf b = SPY_BUF_INIT;
	for (size_t f = 0; f < nframes; f++) {
		size_t n = 0;
		if (pyrt_frame_locals(rt, f, l, PYRT_MAX_LOCALS, &n) < 0) {
			continue;
		}
		for (size_t i = 0; i < n && i < PYRT_MAX_LOCALS; i++) {
			spy_buf_reset(&b);
			pyrt_value_repr(&l[i].v, &b);
		}
	}
	spy_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct scene s;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct pyrt *rt = NULL;

	memset(&s, 0, sizeof(s));
	build(&s, data, size);
	if (size > 3) {
		size_t used = table(&s, data + 3, size - 3);
		patch(&s, data + 3 + used, size - 3 - used);
	}
	if (pyrt_new(&rt, fakepy_mem(s.fp), fakepy_hints(s.fp), &strs, NULL) == 0) {
		struct py_thread th[32];
		size_t n = 0;
		(void)pyrt_version_string(rt);
		if (pyrt_threads(rt, th, 32, &n, NULL) == 0) {
			struct spy_stack st = SPY_STACK_INIT;
			for (size_t i = 0; i < n && i < 32; i++) {
				spy_stack_reset(&st);
				(void)pyrt_stack(rt, &th[i], &st, NULL);
				/* Twice: the second walk goes through the code cache (and splices, with peeks). */
				spy_stack_reset(&st);
				int rc = pyrt_stack(rt, &th[i], &st, NULL);
				if (rc == 0 && (s.with & WITH_LOCALS)) {
					/* Half the time under a total budget of a few reads, as dump sets one. */
					pyrt_locals_budget(rt, data[1] & 1 ? 1 + data[1] % 64 : 0);
					frame_locals(rt, st.n);
				}
				if (rc == 0 && s.tasks) {
					/* record --async: right after the thread's stack. */
					const char *name = NULL;
					size_t nf = 0;
					(void)pyrt_stack_task(rt, &s.aio, &th[i], &name, &nf);
				}
			}
			if (s.tasks) {
				static struct pyrt_task tasks[16];
				size_t nt = 0;
				(void)pyrt_tasks(rt, &s.aio, tasks, 16, &nt, NULL);
			}
			spy_stack_release(&st);
			if (s.with & WITH_NAMES) {
				const char *names[32];
				(void)pyrt_thread_names(rt, th, n < 32 ? n : 32, names, NULL);
				/* The sampler's cached path: a pass a few reads at a time, resumed
				 * where it stopped, then lookups. */
				for (uint64_t call = 1; call <= 16; call++) {
					pyrt_names_update(rt, th, n < 32 ? n : 32, call, 1000, 1 + data[2] % 8);
				}
				for (size_t i = 0; i < n && i < 32; i++) {
					(void)pyrt_thread_name(rt, &th[i]);
				}
			}
		}
		pyrt_free(rt);
	}
	fakepy_free(s.fp);
	spy_strtab_release(&strs);
	return 0;
}

#ifdef SPY_FUZZ_REPLAY
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	uint8_t buf[4096];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	return 0;
}

static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

/*
 * Replay: every file under each argument (a corpus directory or a file),
 * then SPY_FUZZ_ITERS (default 300) generated inputs from SPY_FUZZ_SEED.
 * A crash is the failure; the count line matches the unit tests'.
 */
int main(int argc, char **argv)
{
	int ran = 0, failed = 0;
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			failed += run_file(argv[i]) < 0;
			ran++;
			continue;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.') {
				continue;
			}
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			failed += run_file(path) < 0;
			ran++;
		}
		closedir(d);
	}
	const char *seed = getenv("SPY_FUZZ_SEED"), *iters = getenv("SPY_FUZZ_ITERS");
	rng = seed ? strtoull(seed, NULL, 0) : 0x5eed5eedull;
	long nit = iters ? strtol(iters, NULL, 0) : 300;
	for (long k = 0; k < nit; k++) {
		uint8_t buf[3 + 12 * 8];
		size_t len = 3 + (size_t)(rnd() % (sizeof(buf) - 2));
		for (size_t j = 0; j < len; j++) {
			buf[j] = (uint8_t)rnd();
		}
		LLVMFuzzerTestOneInput(buf, len);
		ran++;
	}
	printf("%d passed, %d failed\n", ran - failed, failed);
	return failed ? 1 : 0;
}
#endif
