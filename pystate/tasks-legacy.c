/*
 * asyncio tasks of 3.8-3.13, from the target's own structures (3.14+ has a
 * debugger interface instead: tasks.c).
 *
 * Where they are (Lib/asyncio/tasks.py, backed by Modules/_asynciomodule.c):
 *   sys.modules["asyncio.tasks"] -> its dict
 *     _all_tasks (<= 3.11) / _scheduled_tasks (3.12+): a weakref.WeakSet,
 *         whose instance attribute "data" is a set of weakrefs -> wr_object
 *     _eager_tasks (3.12+): a set of the tasks started eagerly
 *     _current_tasks: a dict event loop -> the task it is running now
 * A task is a TaskObj (or a Python subclass of _asyncio.Task), whose layout
 * no header describes: pyaio_find()'s generated row (asyncio_table.c), used
 * only once the target's _asyncio.Task agrees with it on tp_basicsize.
 *
 * A suspended task's coroutine chain: the object a coroutine awaits is on
 * top of its frame's value stack when it is suspended in an await (CPython's
 * _PyGen_yf). 3.11+ embed the frame in the coroutine (gi_iframe); 3.13 says
 * "suspended in an await" in gi_frame_state (FRAME_SUSPENDED_YIELD_FROM),
 * 3.11/3.12 by the instruction after the suspension point (RESUME with
 * oparg >= 2). 3.8-3.10 point at a frame object (gi_frame) suspended after
 * a YIELD_FROM, the top of whose stack is below f_stacktop (3.8, 3.9) or at
 * f_valuestack[f_stackdepth - 1] (3.10). The object awaited is the next
 * coroutine down, until a FutureIter (what `await future` leaves), which
 * ends the chain. A running task's coroutine frames are on its thread's
 * stack instead: the thread whose stack holds the coroutine's frame runs
 * it, and the frames inward of it are the task's chain.
 *
 * Edges: a task whose task_fut_waiter is another task awaits that task;
 * one blocked on a _GatheringFuture awaits each of its _children (through
 * nested gathers too), as 3.14's awaited_by records them.
 *
 * Everything read is hostile: task totals are bounded by PYRT_MAX_TASKS,
 * sets by TASKS_MAX_SLOTS slots, chains by PYRT_TASK_MAX_CHAIN with a cycle
 * check, gathers by GATHER_MAX_CHILDREN children and GATHER_MAX_DEPTH.
 * pyrt_tasks_legacy() walks the threads' stacks (pyrt_stack), so the frames
 * pyrt_frame_locals() sees afterwards are those of its last walk.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"

/* Slots of one set read at most (a set of PYRT_MAX_TASKS is < 2^18 slots). */
#define TASKS_MAX_SLOTS (1u << 19)
/* Set slots per read. */
#define TASKS_CHUNK 256
#define GATHER_MAX_CHILDREN 4096
#define GATHER_MAX_DEPTH 8
/* Base classes followed from a task's type to _asyncio.Task. */
#define TASKS_MAX_BASES 8
/* A frame's value stack deeper than this is not believed. */
#define TASKS_MAX_STACKTOP (1 << 16)
/* After a failed _current_tasks lookup, calls of pyrt_running_task_legacy
 * that do not retry it (the lookup scans sys.modules). */
#define PYAIO_RETRY 1024

static int read_ptr(struct pyrt *rt, spy_addr_t at, spy_addr_t *p)
{
	return spy_mem_read_addr(rt->mem, at, p);
}

static spy_addr_t type_of(struct pyrt *rt, spy_addr_t obj)
{
	spy_addr_t type = 0;
	if (!spy_mem_plausible(rt->mem, obj, 8) || read_ptr(rt, obj + rt->off.ob_type, &type) < 0) {
		return 0;
	}
	return type;
}

/* _asyncio.Task, or a Python class derived from it. */
static bool is_task(struct pyrt *rt, const struct pyaio_offsets *a, spy_addr_t obj)
{
	spy_addr_t type = type_of(rt, obj);
	for (int i = 0; i < TASKS_MAX_BASES && type && !rt->aio_layout_bad; i++) {
		bool fresh = !rt->aio_task_type;
		if (pyrt_is_type(rt, &rt->aio_task_type, type, "_asyncio.Task")) {
			int64_t size = 0;
			if (fresh && (spy_mem_read(rt->mem, type + rt->off.type_basicsize, &size,
						   sizeof(size)) < 0 ||
				      size != (int64_t)a->task_size)) {
				/* Not the layout of our row: read nothing through it. */
				spy_log(SPY_LOG_DEBUG, "pystate: _asyncio.Task is %lld bytes, row says %u",
					(long long)size, a->task_size);
				rt->aio_task_type = 0;
				rt->aio_layout_bad = true;
				return false;
			}
			return true;
		}
		if (!spy_mem_plausible(rt->mem, type, 8) || read_ptr(rt, type + rt->off.type_base, &type) < 0) {
			return false;
		}
	}
	return false;
}

/*
 * Whether obj is a coroutine (as in 3.14's reader, not a generator, even a
 * @types.coroutine one: a chain ends there), and then its frame: 3.11+ embedded in it (*state its
 * gi_frame_state), before that a frame object of its own; *frame is 0 when
 * it has finished (the frame is gone). One read.
 */
static bool coro_info(struct pyrt *rt, spy_addr_t obj, spy_addr_t *frame, uint8_t *state)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char hdr[0x100];
	bool embedded = o->gen_iframe != PYOFF_NONE;
	uint32_t span = embedded ? o->gen_frame_state + 1 : o->gen_frame + 8;
	*frame = 0;
	*state = 0;
	if (span < o->ob_type + 8) {
		span = o->ob_type + 8;
	}
	if (span > sizeof(hdr) || !spy_mem_plausible(rt->mem, obj, 8) ||
	    spy_mem_read(rt->mem, obj, hdr, span) < 0) {
		return false;
	}
	spy_addr_t type = pyrt_u64(hdr, o->ob_type);
	if (!pyrt_is_type(rt, &rt->aio_coro_type, type, "coroutine")) {
		return false;
	}
	if (!embedded) {
		*frame = pyrt_u64(hdr, o->gen_frame);
	} else if ((int8_t)(*state = hdr[o->gen_frame_state]) <= 0) {
		*frame = obj + o->gen_iframe;
	}
	return true;
}

static bool is_gather(struct pyrt *rt, spy_addr_t obj)
{
	spy_addr_t type = type_of(rt, obj);
	return type && pyrt_is_type(rt, &rt->aio_gather_type, type, "_GatheringFuture");
}

/* ---- the task registry ---- */

/* Task addresses found, in order, deduplicated by an index. */
struct taskset {
	spy_addr_t *v;
	size_t n, alloc;
	struct spy_hmap index; /* address -> index into v */
	bool cut;              /* a bound or bad memory cut the list */
};

/* Index of addr in s, or -1. */
static long ts_find(const struct taskset *s, spy_addr_t addr)
{
	uint64_t i = spy_hmap_get(&s->index, addr);
	return i == SPY_HMAP_NONE ? -1 : (long)i;
}

static void ts_add(struct taskset *s, spy_addr_t addr)
{
	if (s->n >= PYRT_MAX_TASKS) {
		s->cut = true;
		return;
	}
	if (!spy_hmap_has(&s->index, addr)) {
		SPY_GROW(s->v, s->alloc, s->n + 1);
		spy_hmap_add(&s->index, addr, s->n);
		s->v[s->n++] = addr;
	}
}

struct named {
	spy_addr_t addr;
	const char *name; /* NULL: unreadable, after every name */
};

/* Strings with runs of digits compared as numbers: "Task-2" < "Task-10". */
static int natcmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
			while (*a == '0') {
				a++;
			}
			while (*b == '0') {
				b++;
			}
			size_t la = 0, lb = 0;
			while (a[la] >= '0' && a[la] <= '9') {
				la++;
			}
			while (b[lb] >= '0' && b[lb] <= '9') {
				lb++;
			}
			if (la != lb) {
				return la < lb ? -1 : 1;
			}
			int c = strncmp(a, b, la);
			if (c) {
				return c;
			}
			a += la;
			b += lb;
			continue;
		}
		if (*a != *b) {
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		}
		a++;
		b++;
	}
	return *a ? 1 : *b ? -1 : 0;
}

static int cmp_named(const void *pa, const void *pb)
{
	const struct named *a = pa, *b = pb;
	int c = !a->name || !b->name ? (a->name ? -1 : b->name ? 1 : 0) : natcmp(a->name, b->name);
	return c ? c : a->addr < b->addr ? -1 : a->addr > b->addr;
}

static void ts_free(struct taskset *s)
{
	free(s->v);
	spy_hmap_release(&s->index);
}

/*
 * Every key of the set at set: a task itself, or with weak a weakref to
 * one. A key that is neither (dummies of deleted slots, dead weakrefs,
 * whose wr_object is None) is skipped by the task check.
 */
static int set_tasks(struct pyrt *rt, const struct pyaio_offsets *a, spy_addr_t set, bool weak,
		     struct taskset *s)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char buf[TASKS_CHUNK * 32];
	int64_t mask;
	spy_addr_t table;
	if (!spy_mem_plausible(rt->mem, set, 8) ||
	    spy_mem_read(rt->mem, set + o->set_mask, &mask, sizeof(mask)) < 0 ||
	    read_ptr(rt, set + o->set_table, &table) < 0) {
		return -SPY_EMEM;
	}
	if (mask < 0 || (uint64_t)mask >= TASKS_MAX_SLOTS || ((mask + 1) & mask) ||
	    o->setentry_size == 0 || o->setentry_size > 32 || !spy_mem_plausible(rt->mem, table, 8)) {
		return -SPY_ECORRUPT;
	}
	size_t nslots = (size_t)mask + 1;
	for (size_t i = 0; i < nslots; i += TASKS_CHUNK) {
		size_t k = nslots - i < TASKS_CHUNK ? nslots - i : TASKS_CHUNK;
		if (spy_mem_read(rt->mem, table + (uint64_t)i * o->setentry_size, buf,
				 k * o->setentry_size) < 0) {
			return -SPY_EMEM;
		}
		for (size_t j = 0; j < k; j++) {
			spy_addr_t key = pyrt_u64(buf, (uint32_t)(j * o->setentry_size + o->setentry_key));
			if (!key) {
				continue;
			}
			if (weak && (!spy_mem_plausible(rt->mem, key, 8) ||
				     read_ptr(rt, key + o->weakref_object, &key) < 0)) {
				continue;
			}
			if (is_task(rt, a, key)) {
				ts_add(s, key);
			}
		}
	}
	return 0;
}

/* The dict of module name in interp's sys.modules, or 0. */
static spy_addr_t module_dict(struct pyrt *rt, spy_addr_t interp, const char *name)
{
	spy_addr_t modules, mod, md;
	if (read_ptr(rt, interp + rt->off.interp_modules, &modules) < 0 ||
	    !(mod = pyrt_dict_get(rt, modules, name)) || !spy_mem_plausible(rt->mem, mod, 8) ||
	    read_ptr(rt, mod + rt->off.module_dict, &md) < 0) {
		return 0;
	}
	return md;
}

/* ---- one task ---- */

/* 3.8-3.10: the opcode of the instruction after f_lasti, or -1. */
static int next_opcode(struct pyrt *rt, spy_addr_t frame)
{
	const struct pyoffsets *o = &rt->off;
	int32_t lasti;
	int64_t len;
	spy_addr_t code, bytes;
	uint8_t op;
	if (spy_mem_read(rt->mem, frame + o->frame_lasti, &lasti, sizeof(lasti)) < 0 || lasti < 0 ||
	    read_ptr(rt, frame + o->frame_code, &code) < 0 || !spy_mem_plausible(rt->mem, code, 8) ||
	    read_ptr(rt, code + o->code_code, &bytes) < 0 || !spy_mem_plausible(rt->mem, bytes, 8) ||
	    spy_mem_read(rt->mem, bytes + o->ob_size, &len, sizeof(len)) < 0) {
		return -1;
	}
	/* f_lasti counts bytes before 3.10, code units in 3.10. */
	int64_t at = (o->instr_model == PYINSTR_LASTI_UNITS ? 2 * (int64_t)lasti : lasti) + 2;
	if (at >= len || spy_mem_read(rt->mem, bytes + o->bytes_sval + (uint64_t)at, &op, 1) < 0) {
		return -1;
	}
	return op;
}

/*
 * What the coroutine whose frame is at frame awaits (_PyGen_yf), or 0 when
 * it is not suspended in an await.
 */
static spy_addr_t awaited(struct pyrt *rt, spy_addr_t frame, uint8_t state)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t slot, obj;
	if (o->gen_iframe == PYOFF_NONE) {
		/* 3.8-3.10: suspended in YIELD_FROM (what await compiles to). */
		if (next_opcode(rt, frame) != (int)o->op_yield_from) {
			return 0;
		}
		if (o->frame_stacktop != PYOFF_NONE) {
			/* f_stacktop: NULL while the frame runs. */
			if (read_ptr(rt, frame + o->frame_stacktop, &slot) < 0 || !slot) {
				return 0;
			}
			slot -= 8;
		} else {
			int32_t depth;
			uint8_t fstate;
			spy_addr_t stack;
			if (spy_mem_read(rt->mem, frame + o->frame_state, &fstate, 1) < 0 ||
			    fstate != o->frame_state_suspended ||
			    spy_mem_read(rt->mem, frame + o->frame_stackdepth, &depth, sizeof(depth)) < 0 ||
			    depth <= 0 || depth > TASKS_MAX_STACKTOP ||
			    read_ptr(rt, frame + o->frame_valuestack, &stack) < 0) {
				return 0;
			}
			slot = stack + 8 * (uint64_t)(depth - 1);
		}
		return read_ptr(rt, slot, &obj) < 0 ? 0 : obj;
	}
	if (o->gen_state_yield_from != PYOFF_NONE) {
		if (state != o->gen_state_yield_from) {
			return 0;
		}
	} else {
		spy_addr_t instr;
		uint8_t next[2];
		if (state != o->gen_state_suspended || read_ptr(rt, frame + o->iframe_instr, &instr) < 0 ||
		    spy_mem_read(rt->mem, instr + 2, next, sizeof(next)) < 0 ||
		    (next[0] != o->op_resume && next[0] != o->op_resume_alt) || next[1] < 2) {
			return 0;
		}
	}
	int32_t top;
	if (spy_mem_read(rt->mem, frame + o->iframe_stacktop, &top, sizeof(top)) < 0 || top <= 0 ||
	    top > TASKS_MAX_STACKTOP ||
	    read_ptr(rt, frame + o->iframe_localsplus + 8 * (uint64_t)(top - 1), &obj) < 0) {
		return 0;
	}
	return obj;
}

/* The chain of coroutines from coro down, innermost first, into t. */
static void coro_chain(struct pyrt *rt, spy_addr_t coro, struct pyrt_task *t)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t seen[PYRT_TASK_MAX_CHAIN];
	size_t n = 0;
	t->nchain = 0;
	t->chain_truncated = false;
	spy_addr_t frame;
	uint8_t state;
	while (coro && coro_info(rt, coro, &frame, &state)) {
		if (n == PYRT_TASK_MAX_CHAIN) {
			t->chain_truncated = true;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			if (seen[i] == coro) {
				t->chain_truncated = true;
				goto done;
			}
		}
		if (!frame) {
			break; /* finished */
		}
		int rc = o->gen_iframe != PYOFF_NONE ? pyrt_iframe_decode(rt, frame, &t->chain[n]) :
						       pyrt_frameobj_decode(rt, frame, &t->chain[n]);
		if (rc < 0) {
			t->chain_truncated = true;
			break;
		}
		seen[n++] = coro;
		coro = awaited(rt, frame, state);
	}
done:
	/* Read outermost first; the API is innermost first. */
	for (size_t i = 0; i < n / 2; i++) {
		struct spy_frame f = t->chain[i];
		t->chain[i] = t->chain[n - 1 - i];
		t->chain[n - 1 - i] = f;
	}
	if (t->chain_truncated && n) {
		t->chain[n - 1].flags |= SPY_FRAME_TRUNCATED;
	}
	t->nchain = n;
}

static void add_awaiter(struct pyrt_task *t, spy_addr_t by)
{
	for (size_t i = 0; i < t->nawaited_by; i++) {
		if (t->awaited_by[i] == by) {
			return;
		}
	}
	if (t->nawaited_by < PYRT_TASK_MAX_AWAITERS) {
		t->awaited_by[t->nawaited_by++] = by;
	}
}

/* Record that task `by` awaits fut: a task, or the children of a gather. */
static void awaits(struct pyrt *rt, const struct taskset *s, struct pyrt_task *out, size_t nout,
		   spy_addr_t by, spy_addr_t fut, int depth)
{
	long i = ts_find(s, fut);
	if (i >= 0) {
		if ((size_t)i < nout && fut != by) {
			add_awaiter(&out[i], by);
		}
		return;
	}
	if (depth >= GATHER_MAX_DEPTH || !is_gather(rt, fut)) {
		return;
	}
	spy_addr_t children = pyrt_attr_get(rt, fut, "_children"), items;
	int64_t len;
	if (!children || !spy_mem_plausible(rt->mem, children, 8) ||
	    spy_mem_read(rt->mem, children + rt->off.ob_size, &len, sizeof(len)) < 0 || len < 0 ||
	    len > GATHER_MAX_CHILDREN || read_ptr(rt, children + rt->off.list_item, &items) < 0) {
		return;
	}
	for (int64_t k = 0; k < len; k++) {
		spy_addr_t child;
		if (read_ptr(rt, items + 8 * (uint64_t)k, &child) < 0) {
			return;
		}
		awaits(rt, s, out, nout, by, child, depth + 1);
	}
}

/* Fill t from the task object at addr; false if its fields do not read. */
static bool read_task(struct pyrt *rt, const struct pyaio_offsets *a, spy_addr_t addr,
		      struct pyrt_task *t, spy_addr_t *coro, spy_addr_t *waiter)
{
	int32_t state;
	spy_addr_t name;
	memset(t, 0, offsetof(struct pyrt_task, chain));
	t->nawaited_by = 0;
	t->addr = addr;
	if (spy_mem_read(rt->mem, addr + a->task_state, &state, sizeof(state)) < 0 ||
	    read_ptr(rt, addr + a->task_loop, &t->loop) < 0 ||
	    read_ptr(rt, addr + a->task_coro, coro) < 0 ||
	    read_ptr(rt, addr + a->task_fut_waiter, waiter) < 0 ||
	    read_ptr(rt, addr + a->task_name, &name) < 0) {
		return false;
	}
	if ((uint32_t)state == a->state_pending) {
		t->state = PYRT_TASK_PENDING;
	} else if ((uint32_t)state == a->state_cancelled) {
		t->state = PYRT_TASK_CANCELLED;
	} else if ((uint32_t)state == a->state_finished) {
		t->state = PYRT_TASK_DONE;
	} else {
		return false;
	}
	t->name = pyrt_task_name(rt, name);
	if (!t->name) {
		t->name = rt->unknown;
	}
	return true;
}

/* Whether the frame at f, one of a thread's (pyrt_stack), is a coroutine's own. */
static bool coro_owns(struct pyrt *rt, spy_addr_t f)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t gen = 0, frame;
	uint8_t owner, state;
	if (o->gen_iframe != PYOFF_NONE) {
		if (spy_mem_read(rt->mem, f + o->iframe_owner, &owner, 1) < 0 || owner != o->owner_generator) {
			return false;
		}
		gen = f - o->gen_iframe;
	} else if (o->frame_gen == PYOFF_NONE || read_ptr(rt, f + o->frame_gen, &gen) < 0 || !gen) {
		return false;
	}
	return coro_info(rt, gen, &frame, &state) && frame == f;
}

/* The frame of the coroutine coro of a task (what a thread's stack shows), or 0. */
static spy_addr_t task_frame(struct pyrt *rt, spy_addr_t coro)
{
	spy_addr_t frame;
	uint8_t state;
	return coro_info(rt, coro, &frame, &state) ? frame : 0;
}

static const struct pyaio_offsets *row(struct pyrt *rt, struct spy_err *err)
{
	const struct pyaio_offsets *a = pyaio_find(rt->version, rt->off.build & PYBUILD_FT);
	const struct pyoffsets *o = &rt->off;
	if (!a || !((o->gen_iframe != PYOFF_NONE && o->iframe_stacktop != PYOFF_NONE) ||
		    (o->gen_frame != PYOFF_NONE && o->code_code != PYOFF_NONE))) {
		spy_err_set(err, SPY_EVERSION, "asyncio tasks: no _asyncio layout for Python %u.%u",
			    rt->version >> 24, (rt->version >> 16) & 0xff);
		return NULL;
	}
	return a;
}

/* ---- running tasks: _current_tasks ---- */

struct running {
	const struct pyaio_offsets *a;
	size_t n;
	struct {
		spy_addr_t task, coro, name;
	} v[64];
};

/* One read of each task, since samplers call this for every thread. */
static int collect_running(struct pyrt *rt, void *ctx, spy_addr_t loop, spy_addr_t task)
{
	struct running *r = ctx;
	const struct pyaio_offsets *a = r->a;
	unsigned char hdr[0x100];
	uint32_t span = (a->task_coro > a->task_name ? a->task_coro : a->task_name) + 8;
	(void)loop;
	if (r->n >= SPY_ARRAY_SIZE(r->v) || span > sizeof(hdr) || span < rt->off.ob_type + 8 ||
	    !spy_mem_plausible(rt->mem, task, 8) || spy_mem_read(rt->mem, task, hdr, span) < 0) {
		return 0;
	}
	spy_addr_t type = pyrt_u64(hdr, rt->off.ob_type);
	if (type != rt->aio_task_type && !is_task(rt, a, task)) {
		return 0;
	}
	r->v[r->n].task = task;
	r->v[r->n].coro = pyrt_u64(hdr, a->task_coro);
	r->v[r->n].name = pyrt_u64(hdr, a->task_name);
	r->n++;
	return 0;
}

static void current_tasks(struct pyrt *rt, spy_addr_t md, struct running *r)
{
	spy_addr_t ct = md ? pyrt_dict_get(rt, md, "_current_tasks") : 0;
	struct dview v;
	if (ct && pyrt_dict_view(rt, ct, &v) == 0) {
		(void)pyrt_dict_each(rt, &v, collect_running, r);
	}
}

/*
 * The thread running each task's event loop: the loop's _thread_id
 * attribute (BaseEventLoop sets it to threading.get_ident() in
 * run_forever, None otherwise). Looked up once per loop.
 */
static void loop_threads(struct pyrt *rt, struct pyrt_task *out, size_t n)
{
	struct {
		spy_addr_t loop;
		uint64_t tid;
	} memo[16];
	size_t nmemo = 0;
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		while (k < nmemo && memo[k].loop != out[i].loop) {
			k++;
		}
		if (k == nmemo) {
			struct py_value v;
			pyrt_read_value(rt, out[i].loop ? pyrt_attr_get(rt, out[i].loop, "_thread_id") : 0, &v);
			/* A pthread_t (a user-space address) fits ival, as in names.c. */
			uint64_t tid = v.kind == PYV_INT && !v.ndigits && !v.negative ? (uint64_t)v.ival : 0;
			if (nmemo == SPY_ARRAY_SIZE(memo)) {
				out[i].loop_thread_id = tid;
				continue;
			}
			memo[nmemo].loop = out[i].loop;
			memo[nmemo++].tid = tid;
		}
		out[i].loop_thread_id = memo[k].tid;
	}
}

/* ---- the hooks tasks.c calls ---- */

const bool pyrt_tasks_legacy_ready = true;

/*
 * Every interpreter's registry of tasks into s, and the running ones into
 * run. Each interpreter has its own sys.modules, so its own asyncio.
 * Returns whether any interpreter has asyncio loaded.
 */
static bool registries(struct pyrt *rt, const struct pyaio_offsets *a, const struct py_thread *th,
		       size_t nth, struct taskset *s, struct running *run)
{
	bool asyncio = false;
	for (size_t i = 0; i < nth; i++) {
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++) {
			seen = th[j].interp == th[i].interp;
		}
		spy_addr_t md;
		if (seen || !(md = module_dict(rt, th[i].interp, "asyncio.tasks"))) {
			continue;
		}
		asyncio = true;
		spy_addr_t ws = pyrt_dict_get(rt, md, "_scheduled_tasks"), eager, data;
		if (!ws) {
			ws = pyrt_dict_get(rt, md, "_all_tasks");
		}
		if (!ws || !(data = pyrt_attr_get(rt, ws, "data")) || set_tasks(rt, a, data, true, s) < 0) {
			s->cut = true;
		}
		if ((eager = pyrt_dict_get(rt, md, "_eager_tasks")) && set_tasks(rt, a, eager, false, s) < 0) {
			s->cut = true;
		}
		current_tasks(rt, md, run);
	}
	return asyncio;
}

/*
 * s in name order ("Task-2" before "Task-10"), then address: the
 * registry is a hash set and nothing before 3.14 keeps the order tasks
 * were made in (3.14's per-thread lists do), so the next best is an
 * order a reader can follow, the same on every dump. s's index is stale
 * afterwards: s is a list from here on.
 */
static void sort_by_name(struct pyrt *rt, const struct pyaio_offsets *a, struct taskset *s)
{
	if (!s->n) {
		return;
	}
	struct named *nv = spy_xcalloc(s->n, sizeof(*nv));
	for (size_t i = 0; i < s->n; i++) {
		spy_addr_t name = 0;
		nv[i].addr = s->v[i];
		nv[i].name = read_ptr(rt, s->v[i] + a->task_name, &name) == 0 ? pyrt_task_name(rt, name) : NULL;
	}
	qsort(nv, s->n, sizeof(*nv), cmp_named);
	for (size_t i = 0; i < s->n; i++) {
		s->v[i] = nv[i].addr;
	}
	free(nv);
}

/*
 * The running tasks (those of run that kept indexes into out): the thread
 * whose stack holds the coroutine's frame runs it, and the coroutine
 * frames of that stack inward of it are its chain. Each thread's stack is
 * walked once, and searched for every frame.
 */
static void running_chains(struct pyrt *rt, const struct running *run, const struct taskset *kept,
			   const struct py_thread *th, size_t nth, struct pyrt_task *out)
{
	long idx[SPY_ARRAY_SIZE(run->v)];
	spy_addr_t frame[SPY_ARRAY_SIZE(run->v)];
	size_t left = 0;
	for (size_t r = 0; r < run->n; r++) {
		idx[r] = ts_find(kept, run->v[r].task);
		frame[r] = idx[r] < 0 ? 0 : task_frame(rt, run->v[r].coro);
		if (idx[r] >= 0) {
			out[idx[r]].running = true;
		}
		left += frame[r] != 0;
	}
	struct spy_stack st = SPY_STACK_INIT;
	for (size_t t = 0; t < nth && left; t++) {
		spy_stack_reset(&st);
		if (pyrt_stack(rt, &th[t], &st, NULL) < 0) {
			continue;
		}
		for (size_t r = 0; r < run->n; r++) {
			size_t f = 0;
			while (frame[r] && f < rt->nframes && f < st.n && rt->frames[f] != frame[r]) {
				f++;
			}
			if (!frame[r] || f == rt->nframes || f == st.n) {
				continue;
			}
			/* The coroutines' frames of it, as a suspended task's chain
			 * (what they call is the thread's stack). */
			struct pyrt_task *rk = &out[idx[r]];
			rk->thread_id = th[t].thread_id;
			rk->nchain = 0;
			rk->chain_truncated = false;
			for (size_t j = 0; j <= f; j++) {
				if (!coro_owns(rt, rt->frames[j])) {
					continue;
				}
				if (rk->nchain == PYRT_TASK_MAX_CHAIN) {
					rk->chain_truncated = true;
					break;
				}
				rk->chain[rk->nchain] = st.v[j];
				rk->chain[rk->nchain++].flags = 0;
			}
			frame[r] = 0;
			left--;
		}
	}
	spy_stack_release(&st);
}

int pyrt_tasks_legacy(struct pyrt *rt, struct pyrt_task *out, size_t max, size_t *n,
		      struct spy_err *err)
{
	const struct pyaio_offsets *a = row(rt, err);
	struct taskset s = { 0 };
	struct py_thread *th = spy_xcalloc(SPY_MAX_THREADS, sizeof(*th));
	size_t nth = 0;
	*n = 0;
	if (!a) {
		free(th);
		return -SPY_EVERSION;
	}
	int rc = pyrt_threads(rt, th, SPY_MAX_THREADS, &nth, err);
	if (rc < 0) {
		free(th);
		return rc;
	}
	if (nth > SPY_MAX_THREADS) {
		nth = SPY_MAX_THREADS;
	}
	struct running run = { .a = a };
	bool asyncio = registries(rt, a, th, nth, &s, &run);
	if (!asyncio) {
		ts_free(&s);
		free(th);
		return spy_err_set(err, SPY_ENOPY,
				   "asyncio is not loaded in the target (no asyncio.tasks in sys.modules)");
	}
	if (rt->aio_layout_bad) {
		ts_free(&s);
		free(th);
		return spy_err_set(err, SPY_EVERSION,
				   "asyncio tasks: _asyncio.Task of this Python %s does not have the layout "
				   "spy knows for %u.%u", rt->version_str, rt->version >> 24,
				   (rt->version >> 16) & 0xff);
	}
	sort_by_name(rt, a, &s);
	/*
	 * Pending tasks only: the registry keeps a finished task until it is
	 * collected, where 3.14 unregisters it when it finishes (and
	 * asyncio.all_tasks() leaves it out). Past max, pending tasks are
	 * only counted.
	 */
	spy_addr_t *waiter = spy_xcalloc(max ? max : 1, sizeof(*waiter));
	size_t k = 0, pending = 0;
	for (size_t i = 0; i < s.n; i++) {
		int32_t state;
		spy_addr_t coro;
		if (k == max) {
			pending += spy_mem_read(rt->mem, s.v[i] + a->task_state, &state, sizeof(state)) == 0 &&
				   (uint32_t)state == a->state_pending;
			continue;
		}
		/* A task that does not read (freed since it was listed) is left out. */
		if (!read_task(rt, a, s.v[i], &out[k], &coro, &waiter[k]) ||
		    out[k].state != PYRT_TASK_PENDING) {
			continue;
		}
		coro_chain(rt, coro, &out[k]);
		k++;
		pending++;
	}
	/* Re-index what was kept, for the edges. */
	struct taskset kept = { 0 };
	for (size_t i = 0; i < k; i++) {
		ts_add(&kept, out[i].addr);
	}
	for (size_t i = 0; i < k; i++) {
		if (waiter[i]) {
			awaits(rt, &kept, out, k, out[i].addr, waiter[i], 0);
		}
	}
	loop_threads(rt, out, k);
	running_chains(rt, &run, &kept, th, nth, out);
	*n = pending;
	free(waiter);
	free(th);
	ts_free(&kept);
	ts_free(&s);
	if (s.cut) {
		spy_log(SPY_LOG_DEBUG, "pystate: the task list was cut by a bound or bad memory");
	}
	return 0;
}

static bool on_stack(const struct pyrt *rt, spy_addr_t frame)
{
	for (size_t i = 0; frame && rt->frames && i < rt->nframes; i++) {
		if (rt->frames[i] == frame) {
			return true;
		}
	}
	return false;
}

int pyrt_running_task_legacy(struct pyrt *rt, const struct py_thread *t, struct pyrt_running_task *r)
{
	const struct pyaio_offsets *a = row(rt, NULL);
	if (!a) {
		return -SPY_EVERSION;
	}
	/*
	 * The dict, found once: it lives as long as asyncio.tasks does, and
	 * is read as hostile memory each time anyway (a stale one could only
	 * name a task whose coroutine frame is on this very stack).
	 */
	spy_addr_t ct = rt->aio_interp == t->interp ? rt->aio_current_tasks : 0;
	if (!ct) {
		if (rt->aio_retry) {
			rt->aio_retry--;
			return 0;
		}
		spy_addr_t md = module_dict(rt, t->interp, "asyncio.tasks");
		ct = md ? pyrt_dict_get(rt, md, "_current_tasks") : 0;
		if (!ct || !pyrt_is_type(rt, &rt->aio_dict_type, type_of(rt, ct), "dict")) {
			rt->aio_retry = PYAIO_RETRY;
			return 0;
		}
		rt->aio_interp = t->interp;
		rt->aio_current_tasks = ct;
	}
	struct running run = { .a = a };
	struct dview v;
	if (pyrt_dict_view(rt, ct, &v) < 0 || pyrt_dict_each(rt, &v, collect_running, &run) < 0) {
		return -SPY_EMEM;
	}
	if (rt->aio_layout_bad) {
		return -SPY_EVERSION;
	}
	for (size_t i = 0; i < run.n; i++) {
		spy_addr_t frame = task_frame(rt, run.v[i].coro);
		if (on_stack(rt, frame)) {
			*r = (struct pyrt_running_task){ run.v[i].task, frame, run.v[i].name };
			return 1;
		}
	}
	return 0;
}
