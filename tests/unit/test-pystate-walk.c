/*
 * pyrt_new / pyrt_threads / pyrt_stack on synthetic images (tests/lib/fakepy)
 * for every row of the generated offsets table, plus corrupt variants: a
 * frame cycle, a thread-list loop, an interpreter loop, a 2^40-character
 * name, pointers into unmapped memory, misaligned pointers, a wrong code
 * type, an oversized line table, the depth bound -- each must give a bounded
 * or truncated result or an error, never a crash or a hang. And a 3.13-style
 * image whose layout only _Py_DebugOffsets describes correctly.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/strtab.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"
#include "tests/lib/pyscene.h"

#define UNMAPPED 0x7f0000001000ull

static void test_row(const struct pyoffsets *row)
{
	struct scene s;
	struct pyrt *rt = scene_open(&s, row);
	if (!rt) {
		return;
	}
	char vs[32];
	snprintf(vs, sizeof(vs), "%u.%u.1", row->version >> 24, (row->version >> 16) & 0xff);
	CHECK_STR(pyrt_version_string(rt), vs);
	CHECK_INT(pyrt_version(rt), s.version);

	struct py_thread th[8];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 2);
	CHECK_INT(th[0].tstate, s.t1);
	CHECK_INT(th[1].tstate, s.t2);
	CHECK_INT(th[0].thread_id, fakepy_thread_id(s.fp, s.t1));
	CHECK_INT(th[1].thread_id, fakepy_thread_id(s.fp, s.t2));
	/* 3.11+ native_thread_id; before, the struct pthread tid discovery. */
	CHECK_INT(th[0].native_tid, FAKEPY_PID);
	CHECK_INT(th[1].native_tid, 4300);
	CHECK(th[0].holds_gil);
	CHECK(!th[1].holds_gil);
	CHECK_INT(th[0].interp, s.interp);

	struct spy_stack st = SPY_STACK_INIT;
	CHECK_INT(pyrt_stack(rt, &th[0], &st, NULL), 0);
	check_stack(&st, s.e1, s.n1, s.version);
	if (row->frame_model == PYFRAME_OBJECT) {
		for (size_t i = 0; i < st.n; i++) {
			CHECK(st.v[i].flags & SPY_FRAME_PY_ENTRY);
		}
	} else if (s.entry_idx != SIZE_MAX && s.entry_idx < st.n) {
		CHECK(st.v[s.entry_idx].flags & SPY_FRAME_PY_ENTRY);
		CHECK(!(st.v[0].flags & SPY_FRAME_PY_ENTRY));
	}
	/* The shim's address is the anchor of the group it ends (--native's placing). */
	const spy_addr_t *anchors;
	size_t nanchors = pyrt_stack_anchors(rt, &anchors);
	CHECK_INT(nanchors, s.shim ? 1 : 0);
	if (s.shim && nanchors == 1) {
		CHECK(anchors[0] == s.shim);
	}
	/* Steady state: the second walk decodes nothing new, and (but in a
	 * free-threaded build) reads no code object: every frame is memoized. */
	uint64_t misses = rt->cache_misses, hits = rt->cache_hits + rt->memo_hits;
	spy_stack_reset(&st);
	CHECK_INT(pyrt_stack(rt, &th[0], &st, NULL), 0);
	check_stack(&st, s.e1, s.n1, s.version);
	CHECK_INT(rt->cache_misses, misses);
	CHECK(rt->cache_hits + rt->memo_hits >= hits + s.n1);
	if (!(row->build & PYBUILD_FT)) {
		CHECK(rt->memo_hits >= s.n1);
	}

	spy_stack_reset(&st);
	CHECK_INT(pyrt_stack(rt, &th[1], &st, NULL), 0);
	check_stack(&st, s.e2, s.n2, s.version);

	/* GIL released: nobody holds it (3.12+ keeps last_holder, unlocked). */
	fakepy_set_gil(s.fp, s.interp, 0);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK(!th[0].holds_gil && !th[1].holds_gil);
	fakepy_set_gil(s.fp, s.interp, s.t2);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK(!th[0].holds_gil && th[1].holds_gil);

	/* The garbage collector's flag, where the version keeps one. */
	spy_addr_t gcf = row->interp_gc_collecting != PYOFF_NONE ? s.interp + row->interp_gc_collecting :
			 row->rt_gc_collecting != PYOFF_NONE ? fakepy_hints(s.fp)->runtime + row->rt_gc_collecting :
								0;
	if (gcf) {
		CHECK_INT(pyrt_gc_collecting(rt, s.interp), 0);
		fakepy_w32(s.fp, gcf, 1);
		CHECK_INT(pyrt_gc_collecting(rt, s.interp), 1);
		fakepy_w32(s.fp, gcf, 0);
	} else {
		CHECK_INT(pyrt_gc_collecting(rt, s.interp), -1);
		CHECK(row->version < 0x03070000);
	}

	/* A subinterpreter: listed after the main interpreter's threads. */
	spy_addr_t sub = fakepy_new_interp(s.fp, 1);
	spy_addr_t t3 = fakepy_thread(s.fp, sub, 4400);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 3);
	CHECK_INT(th[0].tstate, s.t1);
	CHECK_INT(th[2].tstate, t3);
	CHECK_INT(th[2].interp, sub);
	if (row->interp_id != PYOFF_NONE) {
		CHECK_INT(th[2].interp_id, 1);
		CHECK_INT(th[0].interp_id, 0);
	}
	/* max smaller than the count: fills max, reports all. */
	CHECK_INT(pyrt_threads(rt, th, 1, &n, NULL), 0);
	CHECK_INT(n, 3);
	CHECK_INT(th[0].tstate, s.t1);

	spy_stack_release(&st);
	pyrt_free(rt);
	scene_release(&s);
}

/*
 * 3.14+ free-threaded rows: a thread running its own copy of the bytecode
 * (co_tlbc->entries[tlbc_index]) gets the same lines as one running
 * co_code_adaptive; a bad index truncates instead of guessing.
 */
static void check_tlbc(struct scene *s, struct pyrt *rt, const struct pyoffsets *row,
		       const struct py_thread *t, struct spy_stack *st)
{
	/* Every frame of t1 moves to thread-local copy 2 of its code. */
	size_t moved = 0;
	spy_addr_t first = 0;
	for (spy_addr_t f = fakepy_r64(s->fp, fakepy_top_slot(s->fp, s->t1)); f && moved < 64;
	     f = fakepy_r64(s->fp, fakepy_back_slot(s->fp, f)), moved++) {
		spy_addr_t code = fakepy_r64(s->fp, fakepy_code_slot(s->fp, f)) & ~(uint64_t)3;
		if (!code || fakepy_r64(s->fp, code + row->ob_type) != fakepy_code_type(s->fp)) {
			continue; /* a shim */
		}
		spy_addr_t instr = fakepy_r64(s->fp, f + row->iframe_instr);
		uint64_t units = instr - (code + row->code_adaptive);
		spy_addr_t copy = fakepy_alloc(s->fp, units + 64);
		spy_addr_t arr = fakepy_alloc(s->fp, row->codearray_entries + 3 * 8);
		fakepy_w64(s->fp, arr + row->codearray_size, 3);
		fakepy_w64(s->fp, arr + row->codearray_entries, code + row->code_adaptive);
		fakepy_w64(s->fp, arr + row->codearray_entries + 8, 0);
		fakepy_w64(s->fp, arr + row->codearray_entries + 16, copy);
		fakepy_w64(s->fp, code + row->code_tlbc, arr);
		fakepy_w32(s->fp, f + row->iframe_tlbc_index, 2);
		first = first ? first : f;
		fakepy_w64(s->fp, f + row->iframe_instr, copy + units);
	}
	/* The code cache would hide nothing here: it keys on the code object,
	 * and the index is read from the frame on every walk. */
	spy_stack_reset(st);
	CHECK_INT(pyrt_stack(rt, t, st, NULL), 0);
	check_stack(st, s->e1, s->n1, s->version);

	/* An index past the array: the walk stops there, truncated. */
	CHECK(first != 0);
	fakepy_w32(s->fp, first + row->iframe_tlbc_index, 7);
	spy_stack_reset(st);
	CHECK_INT(pyrt_stack(rt, t, st, NULL), 0);
	CHECK_INT(st->truncated, 1);
	fakepy_w32(s->fp, first + row->iframe_tlbc_index, 2);
}

/*
 * Free-threaded rows: the walk is the release build's (3.13t: one copy of
 * the bytecode) or per-thread bytecode's (3.14+), and with the GIL off
 * nobody holds it.
 */
static void test_free_threaded(const struct pyoffsets *row)
{
	struct scene s;
	struct pyrt *rt = scene_open(&s, row);
	if (!rt) {
		return;
	}
	CHECK(pyrt_free_threaded(rt));
	struct py_thread t;
	memset(&t, 0, sizeof(t));
	t.tstate = s.t1;
	t.interp = s.interp;
	struct spy_stack st = SPY_STACK_INIT;

	/* 3.13t runs co_code_adaptive like a release build; 3.14t+ always has
	 * its thread-local bytecode fields. */
	CHECK((row->version >= 0x030e0000) == (row->code_tlbc != PYOFF_NONE));
	if (row->code_tlbc != PYOFF_NONE) {
		check_tlbc(&s, rt, row, &t, &st);
	} else {
		CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
		check_stack(&st, s.e1, s.n1, s.version);
	}

	/* GIL switched off (a free-threaded build's default). */
	CHECK(pyrt_has_gil(rt));
	spy_addr_t g = fakepy_r64(s.fp, s.interp + row->interp_ceval_gil);
	fakepy_w32(s.fp, g + row->gil_enabled, 0);
	CHECK(!pyrt_has_gil(rt));
	struct py_thread th[4];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 4, &n, NULL), 0);
	CHECK(n == 2 && !th[0].holds_gil && !th[1].holds_gil);

	/* Without a GIL, the thread attached to the interpreter (tstate->state
	 * _Py_THREAD_ATTACHED) is the running one; detached (0) or suspended
	 * (2, stopped for the collector) are not; a recheck reads it again. */
	CHECK(row->tstate_state != PYOFF_NONE);
	fakepy_w32(s.fp, s.t1 + row->tstate_state, 1);
	fakepy_w32(s.fp, s.t2 + row->tstate_state, 2);
	CHECK_INT(pyrt_threads(rt, th, 4, &n, NULL), 0);
	for (size_t i = 0; i < n && n == 2; i++) {
		CHECK(th[i].attached == (th[i].tstate == s.t1));
	}
	fakepy_w32(s.fp, s.t1 + row->tstate_state, 0);
	struct py_thread again = th[0].tstate == s.t1 ? th[0] : th[1];
	CHECK_INT(pyrt_thread_recheck(rt, &again), 0);
	CHECK(!again.attached);

	spy_stack_release(&st);
	pyrt_free(rt);
	scene_release(&s);
}

/*
 * The name cache: a thread is looked up when first seen, a lookup that
 * found nothing (this image has no threading module) is not retried until
 * the refresh period passes, and then every thread is looked up again.
 */
static void test_name_cache(const struct pyoffsets *row)
{
	struct scene s;
	struct pyrt *rt = scene_open(&s, row);
	if (!rt) {
		return;
	}
	const uint64_t sec = 1000000000ull;
	struct py_thread th[8];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 2);
	CHECK(pyrt_thread_name(rt, &th[0]) == NULL);
	pyrt_names_update(rt, th, 1, 5 * sec, sec, PYRT_NAMES_TICK_READS);
	CHECK_INT(rt->names_scans, 1);
	pyrt_names_update(rt, th, 1, 5 * sec + sec / 2, sec, PYRT_NAMES_TICK_READS);
	CHECK_INT(rt->names_scans, 1); /* the miss is remembered */
	pyrt_names_update(rt, th, 2, 5 * sec + sec / 2, sec, PYRT_NAMES_TICK_READS);
	CHECK_INT(rt->names_scans, 2); /* a thread not seen before */
	pyrt_names_update(rt, th, 2, 5 * sec + sec - 1, sec, PYRT_NAMES_TICK_READS);
	CHECK_INT(rt->names_scans, 2);
	pyrt_names_update(rt, th, 2, 6 * sec + sec / 2, sec, PYRT_NAMES_TICK_READS);
	CHECK_INT(rt->names_scans, 3); /* the refresh */
	CHECK(pyrt_thread_name(rt, &th[0]) == NULL && pyrt_thread_name(rt, &th[1]) == NULL);
	pyrt_free(rt);
	scene_release(&s);
}

/* Walk t1 after corrupting the image with fn; check the result is bounded. */
static void walk_t1(struct scene *s, struct pyrt *rt, struct spy_stack *st, int *rc)
{
	if (!rt) {
		SPY_BUG("no runtime");
	}
	struct py_thread t;
	memset(&t, 0, sizeof(t));
	t.tstate = s->t1;
	t.interp = s->interp;
	spy_stack_reset(st);
	*rc = pyrt_stack(rt, &t, st, NULL);
}

/* Frame cycles, bad caller, top, tstate and code pointers. */
static void test_corrupt(const struct pyoffsets *row)
{
	struct spy_stack st = SPY_STACK_INIT;
	int rc;
	struct scene s;
	struct pyrt *rt;

	/* Frame cycle: <module>'s caller is the innermost real frame. */
	scene_init(&s, row);
	rt = open_rt(&s);
	fakepy_w64(s.fp, fakepy_back_slot(s.fp, s.f_module), s.f_klass);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.truncated, 1);
	CHECK_INT(st.n, s.n1); /* every frame once, then the repeat is noticed */
	CHECK(st.v[st.n - 1].flags & SPY_FRAME_TRUNCATED);
	pyrt_free(rt);
	scene_release(&s);

	/* A self-loop. */
	scene_init(&s, row);
	rt = open_rt(&s);
	fakepy_w64(s.fp, fakepy_back_slot(s.fp, s.f_module), s.f_module);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.truncated, 1);
	CHECK_INT(st.n, s.n1);
	pyrt_free(rt);
	scene_release(&s);

	/* Caller pointer into unmapped memory: keep the frames above. */
	scene_init(&s, row);
	rt = open_rt(&s);
	fakepy_w64(s.fp, fakepy_back_slot(s.fp, s.f_func), UNMAPPED);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.truncated, 1);
	CHECK_INT(st.n, s.n1 - 2);
	CHECK(st.n && (st.v[st.n - 1].flags & SPY_FRAME_TRUNCATED));
	/* Misaligned caller pointer. */
	fakepy_w64(s.fp, fakepy_back_slot(s.fp, s.f_func), s.f_cafe + 3);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.truncated, 1);
	CHECK_INT(st.n, s.n1 - 2);
	/* Top-of-stack pointer unmapped: nothing, truncated. */
	fakepy_w64(s.fp, fakepy_top_slot(s.fp, s.t1), UNMAPPED);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.n, 0);
	CHECK_INT(st.truncated, 1);
	/* tstate itself unmapped: an error, not a crash. */
	struct py_thread bad;
	memset(&bad, 0, sizeof(bad));
	bad.tstate = UNMAPPED;
	spy_stack_reset(&st);
	CHECK(pyrt_stack(rt, &bad, &st, NULL) < 0);
	pyrt_free(rt);
	scene_release(&s);

	/* Wrong code type: truncated before 3.13, skipped in 3.13+. */
	scene_init(&s, row);
	rt = open_rt(&s);
	spy_addr_t str_type = fakepy_r64(s.fp, fakepy_str(s.fp, "x") + row->ob_type);
	fakepy_w64(s.fp, s.c_func + row->ob_type, str_type);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	if (row->frame_model == PYFRAME_IFRAME_EXEC) {
		CHECK_INT(st.truncated, 0);
		CHECK_INT(st.n, s.n1 - 1);
	} else {
		CHECK_INT(st.truncated, 1);
		CHECK_INT(st.n, s.n1 - 3);
	}
	/* Code pointer into unmapped memory and misaligned. */
	fakepy_w64(s.fp, fakepy_code_slot(s.fp, s.f_func), UNMAPPED);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK(st.n < s.n1);
	fakepy_w64(s.fp, fakepy_code_slot(s.fp, s.f_func), s.c_func + 1);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK(st.n < s.n1);
	pyrt_free(rt);
	scene_release(&s);

	spy_stack_release(&st);
}

/* Hostile sizes, looping thread and interpreter lists, the depth bound. */
static void test_corrupt_bounds(const struct pyoffsets *row)
{
	struct spy_stack st = SPY_STACK_INIT;
	struct py_thread th[16];
	size_t n;
	int rc;
	struct scene s;
	struct pyrt *rt;

	/* A 2^40-character name, and an oversized line table. */
	scene_init(&s, row);
	rt = open_rt(&s);
	uint32_t name_off = has_qualname(row) ? row->code_qualname : row->code_name;
	spy_addr_t name = fakepy_r64(s.fp, s.c_func + name_off);
	fakepy_w64(s.fp, name + (row->str_model == PYSTR_BYTES27 ? row->ob_size : row->str_length), 1ull << 40);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.n, s.n1);
	for (size_t i = 0; i < st.n; i++) {
		CHECK(strlen(st.v[i].func) <= SPY_MAX_STR);
	}
	pyrt_free(rt);
	scene_release(&s);

	scene_init(&s, row);
	rt = open_rt(&s);
	spy_addr_t tab = fakepy_r64(s.fp, s.c_func + row->code_linetable);
	fakepy_w64(s.fp, tab + row->ob_size, (uint64_t)SPY_MAX_LINETABLE + 1);
	walk_t1(&s, rt, &st, &rc);
	CHECK_INT(rc, 0);
	CHECK_INT(st.truncated, 1);
	CHECK(st.n < s.n1);
	pyrt_free(rt);
	scene_release(&s);

	/* Thread-list loop: pyrt_new refuses it, pyrt_threads stays bounded. */
	scene_init(&s, row);
	rt = open_rt(&s);
	fakepy_w64(s.fp, s.t1 + row->tstate_next, s.t2);
	CHECK_INT(pyrt_threads(rt, th, 16, &n, NULL), 0);
	CHECK(n >= 2 && n <= 16);
	struct pyrt *rt2 = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(pyrt_new(&rt2, fakepy_mem(s.fp), fakepy_hints(s.fp), &s.strs, &err), -SPY_ENOPY);
	CHECK(rt2 == NULL);
	/* A thread whose interp does not point back: the list is cut there. */
	fakepy_w64(s.fp, s.t1 + row->tstate_next, 0);
	fakepy_w64(s.fp, s.t1 + row->tstate_interp, UNMAPPED);
	CHECK_INT(pyrt_threads(rt, th, 16, &n, NULL), 0);
	CHECK_INT(n, 1);
	CHECK_INT(th[0].tstate, s.t2);
	/* Head thread unmapped: no thread at all is an error. */
	fakepy_w64(s.fp, s.interp + row->interp_tstate_head, UNMAPPED);
	CHECK_INT(pyrt_threads(rt, th, 16, &n, NULL), -SPY_ECORRUPT);
	CHECK_INT(n, 0);
	pyrt_free(rt);
	scene_release(&s);

	/* Interpreter loop. */
	scene_init(&s, row);
	rt = open_rt(&s);
	fakepy_w64(s.fp, s.interp + row->interp_next, s.interp);
	CHECK_INT(pyrt_threads(rt, th, 16, &n, NULL), 0);
	CHECK(n >= 2 && n <= 16);
	pyrt_free(rt);
	scene_release(&s);

	/* Depth bound: a chain longer than SPY_MAX_PY_DEPTH. */
	scene_init(&s, row);
	rt = open_rt(&s);
	spy_addr_t deep = fakepy_thread(s.fp, s.interp, 4500);
	spy_addr_t code = fakepy_code(s.fp, "rec", "deep.py", 1, 4, 1, 2);
	for (int i = 0; i < SPY_MAX_PY_DEPTH + 10; i++) {
		fakepy_push_frame(s.fp, deep, code, 1, 0);
	}
	struct py_thread dt;
	memset(&dt, 0, sizeof(dt));
	dt.tstate = deep;
	spy_stack_reset(&st);
	CHECK_INT(pyrt_stack(rt, &dt, &st, NULL), 0);
	CHECK_INT(st.n, SPY_MAX_PY_DEPTH);
	CHECK_INT(st.truncated, 1);
	CHECK_STR(st.v[0].func, "rec");
	CHECK_INT(st.v[0].line, 2);
	pyrt_free(rt);
	scene_release(&s);

	spy_stack_release(&st);
}

static void test_errors(const struct pyoffsets *row)
{
	struct scene s;
	struct pyrt *rt = NULL;
	struct spy_err err = SPY_ERR_INIT;
	struct pyrt_hints h;

	scene_init(&s, row);
	h = *fakepy_hints(s.fp);

	/* No anchors at all. */
	struct pyrt_hints none;
	memset(&none, 0, sizeof(none));
	none.binary = "/usr/bin/nothing";
	CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), &none, &s.strs, &err), -SPY_ENOPY);
	CHECK_STR(err.msg, "no Python interpreter found in /usr/bin/nothing");

	/* An unknown version. */
	struct pyrt_hints *hp = fakepy_hints(s.fp);
	if (hp->py_version && !row->dbg.size) {
		fakepy_w32(s.fp, hp->py_version, 0x031400f0);
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), -SPY_EVERSION);
		CHECK(!strncmp(err.msg, "Python 3.20: unsupported layout", 31));
		fakepy_w32(s.fp, hp->py_version, s.version);
	} else if (!hp->py_version) {
		/* A file name that disagrees with sys.version loses to it:
		 * the layout of the sys.version version is the one that fits. */
		hp->version_hint = 0x030500f0;
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), 0);
		if (rt) {
			CHECK_INT(pyrt_version(rt), s.version);
			pyrt_free(rt);
			rt = NULL;
		}
		/* Without the sys.version text, the file name is all there is. */
		spy_addr_t sv = fakepy_sys_version(s.fp);
		uint8_t c0 = *(uint8_t *)fakepy_at(s.fp, sv);
		fakepy_w8(s.fp, sv, 0);
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), -SPY_EVERSION);
		CHECK(!strncmp(err.msg, "Python 3.5: unsupported layout", 30));
		hp->version_hint = 0;
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), -SPY_ENOPY);
		fakepy_w8(s.fp, sv, c0);
		*hp = h;
	}

	/* No interpreter yet. */
	spy_addr_t slot = h.runtime ? h.runtime + row->rt_interpreters_head : h.interp_head;
	fakepy_w64(s.fp, slot, 0);
	CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), -SPY_ENOPY);
	/* Interpreter pointer into nowhere. */
	fakepy_w64(s.fp, slot, UNMAPPED);
	CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), -SPY_ENOPY);
	CHECK(strstr(err.msg, "does not validate") != NULL);
	fakepy_w64(s.fp, slot, s.interp);
	CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), 0);
	pyrt_free(rt);

	/* 2.7/3.6 without interp_head: decode PyInterpreterState_Head(). */
	if (!h.runtime) {
		spy_addr_t fn = fakepy_alloc(s.fp, 16);
		int32_t disp = (int32_t)(h.interp_head - (fn + 7));
		unsigned char code[8] = { 0x48, 0x8b, 0x05, 0, 0, 0, 0, 0xc3 };
		memcpy(code + 3, &disp, 4);
		memcpy(fakepy_at(s.fp, fn), code, 8);
		hp->interp_head = 0;
		hp->interp_head_fn = fn;
		rt = NULL;
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), 0);
		struct py_thread th[4];
		size_t n;
		if (rt) {
			CHECK_INT(pyrt_threads(rt, th, 4, &n, NULL), 0);
			CHECK_INT(n, 2);
			pyrt_free(rt);
		}
		/* A function that is not the expected pattern is not trusted
		 * (with the later rungs -- GIL holder, data scan -- hidden). */
		fakepy_w8(s.fp, fn + 7, 0x90);
		hp->tstate_current = 0;
		hp->data_lo = hp->data_hi = 0;
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), -SPY_ENOPY);
		*hp = h;
	}

	/* Without a pid, old versions cannot find TIDs: 0, not garbage. */
	if (row->tstate_native_thread_id == PYOFF_NONE) {
		hp->pid = 0;
		CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), hp, &s.strs, &err), 0);
		struct py_thread th[4];
		size_t n;
		CHECK_INT(pyrt_threads(rt, th, 4, &n, NULL), 0);
		CHECK_INT(th[0].native_tid, 0);
		pyrt_free(rt);
		*hp = h;
	}
	scene_release(&s);
}

/*
 * 3.13-style: an image whose real layout differs from our 3.13 row in many
 * fields, described correctly only by its _Py_DebugOffsets. pyrt must follow
 * the debug offsets; with the cookie broken, the same image must not walk.
 */
static void test_debug_offsets(void)
{
	const struct pyoffsets *row = pyoffsets_find(0x030d0000);
	if (!row || !row->dbg.size) {
		return;
	}
	struct pyoffsets moved = *row;
	moved.rt_interpreters_head += 0x100;
	moved.interp_tstate_head += 0x100;
	moved.interp_next += 0x80;
	moved.tstate_thread_id = row->tstate_native_thread_id;
	moved.tstate_native_thread_id = row->tstate_thread_id;
	moved.code_filename = row->code_name;
	moved.code_name = row->code_filename;
	moved.iframe_code = row->iframe_previous;
	moved.iframe_previous = row->iframe_code;
	moved.gil_locked = row->gil_last_holder;
	moved.gil_last_holder = row->gil_locked + 8;

	struct scene s;
	scene_init(&s, &moved);
	struct pyrt *rt = open_rt(&s);
	if (rt) {
		struct py_thread th[4];
		size_t n;
		CHECK_INT(pyrt_threads(rt, th, 4, &n, NULL), 0);
		CHECK_INT(n, 2);
		CHECK_INT(th[0].native_tid, FAKEPY_PID);
		CHECK(th[0].holds_gil);
		struct spy_stack st = SPY_STACK_INIT;
		CHECK_INT(pyrt_stack(rt, &th[0], &st, NULL), 0);
		check_stack(&st, s.e1, s.n1, s.version);
		spy_stack_release(&st);
		pyrt_free(rt);
	}
	/* Same image, cookie broken: falls back to Py_Version and the table row,
	 * which does not describe this image. */
	fakepy_w8(s.fp, fakepy_hints(s.fp)->runtime + 7, 'X');
	struct spy_err err = SPY_ERR_INIT;
	rt = NULL;
	CHECK(pyrt_new(&rt, fakepy_mem(s.fp), fakepy_hints(s.fp), &s.strs, &err) < 0);
	pyrt_free(rt);
	scene_release(&s);

	/* A 3.14 cookie: the version comes from the debug offsets, and is refused. */
	scene_init(&s, row);
	fakepy_w64(s.fp, fakepy_hints(s.fp)->runtime + 8, 0x030e00f0);
	rt = NULL;
	CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), fakepy_hints(s.fp), &s.strs, &err), -SPY_EVERSION);
	CHECK(!strncmp(err.msg, "Python 3.14: unsupported layout", 31));
	/* The table's free-threaded flag picks the free-threaded row (3.13t
	 * has one), whose layout the same table then refines. */
	fakepy_w64(s.fp, fakepy_hints(s.fp)->runtime + 8, s.version);
	fakepy_w64(s.fp, fakepy_hints(s.fp)->runtime + row->dbg.free_threaded, 1);
	rt = NULL;
	CHECK_INT(pyrt_new(&rt, fakepy_mem(s.fp), fakepy_hints(s.fp), &s.strs, &err), 0);
	CHECK(rt && pyrt_free_threaded(rt));
	pyrt_free(rt);
	scene_release(&s);
}

static void test_table(void)
{
	CHECK(pyoffsets_count >= 9);
	CHECK(pyoffsets_find(0x02070000) != NULL);
	CHECK(pyoffsets_find(0x030b07f0) == pyoffsets_find(0x030b0000));
	CHECK(pyoffsets_find(0x03050000) == NULL);
	CHECK(pyoffsets_find(0x03140000) == NULL);
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *r = &pyoffsets_table[i];
		CHECK(r->source && *r->source);
		CHECK(r->interp_tstate_head != PYOFF_NONE);
		CHECK(r->tstate_next != PYOFF_NONE && r->tstate_interp != PYOFF_NONE);
		CHECK(r->code_filename != PYOFF_NONE && r->code_name != PYOFF_NONE);
		CHECK(r->code_linetable != PYOFF_NONE && r->code_firstlineno != PYOFF_NONE);
		if (r->frame_model == PYFRAME_OBJECT) {
			CHECK(r->tstate_frame != PYOFF_NONE && r->frame_lasti != PYOFF_NONE);
		} else {
			CHECK(r->iframe_previous != PYOFF_NONE && r->code_adaptive != PYOFF_NONE);
			CHECK(r->tstate_current_frame != PYOFF_NONE || r->tstate_cframe != PYOFF_NONE);
		}
	}
}

/*
 * 100 code objects sharing one line table of almost SPY_MAX_LINETABLE
 * bytes: the cache copies each, 100 MiB, unless its budget stops it. The
 * frames past the budget keep their names and lose their lines.
 */
static void test_table_budget(const struct pyoffsets *row)
{
	struct scene s;
	scene_init(&s, row);
	size_t big = SPY_MAX_LINETABLE - 64;
	uint8_t *zeros = calloc(1, big);
	spy_addr_t tab = fakepy_bytes(s.fp, zeros, big);
	free(zeros);
	for (int i = 0; i < 100; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		spy_addr_t c = fakepy_code(s.fp, name, "big.py", 1, 4, 0, 1);
		fakepy_w64(s.fp, c + row->code_linetable, tab);
		fakepy_push_frame(s.fp, s.t2, c, 0, 0);
	}
	struct pyrt *rt = open_rt(&s);
	if (rt) {
		struct py_thread th[8];
		size_t n = 0;
		CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
		struct spy_stack st = SPY_STACK_INIT;
		CHECK_INT(pyrt_stack(rt, &th[1], &st, NULL), 0);
		CHECK_INT(st.n, 102);
		CHECK(rt->tab_bytes <= PYCODE_TAB_BUDGET);
		CHECK(rt->tab_over_budget > 0);
		CHECK_STR(st.n ? st.v[0].func : NULL, "f99");
		spy_stack_release(&st);
		pyrt_free(rt);
	}
	scene_release(&s);
}

int main(void)
{
	test_table();
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		test_row(row);
		test_corrupt(row);
		test_corrupt_bounds(row);
		test_errors(row);
		if (row->build & PYBUILD_FT) {
			test_free_threaded(row);
		}
		test_name_cache(row);
	}
	test_debug_offsets();
	test_table_budget(pyoffsets_find(0x030d0000));
	return check_done();
}
