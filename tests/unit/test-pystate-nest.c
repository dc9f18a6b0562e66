/*
 * A thread inside a sub-interpreter, on synthetic images (tests/lib/fakepy)
 * of every row: from 3.12 its thread states of one native TID in two
 * interpreters are listed as one thread, the one bound for PyGILState
 * innermost, and its stack is the inner one on `<interpreter 1>` on the
 * outer one; failing the bit, the one holding the GIL is innermost; a
 * recheck of the held thread chooses again (it entered or left since). Two
 * states of one TID in one interpreter, or more interpreters than
 * PYRT_MAX_NEST allows, are left as they are; a state bound to no thread
 * yet is no thread. Before 3.12 nothing merges.
 */
#include <stdlib.h>
#include <string.h>

#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"
#include "tests/lib/pyscene.h"

#define BOUND_GILSTATE 0x8u

/* Where the row's PyThreadState._status lies (as runtime.c has it). */
static uint32_t status_of(const struct pyoffsets *row)
{
	return row->tstate_interp + (row->version >= 0x030d0000 ? 16 : 8);
}

static void check_nested_stack(struct scene *s, struct pyrt *rt, const struct py_thread *t)
{
	struct spy_stack st = SPY_STACK_INIT;
	CHECK_INT(pyrt_stack(rt, t, &st, NULL), 0);
	CHECK_INT(st.n, 2 + s->n1);
	if (st.n == 2 + s->n1) {
		CHECK_STR(st.v[0].func, shown(s->row, "sub_spin"));
		CHECK_STR(st.v[1].func, "<interpreter 1>");
		CHECK_INT(st.v[1].kind, SPY_FRAME_SYNTHETIC);
		struct spy_stack outer = { st.v + 2, s->n1, s->n1, 0, st.truncated };
		check_stack(&outer, s->e1, s->n1, s->version);
	}
	spy_stack_release(&st);
}

static void test_nested(const struct pyoffsets *row)
{
	struct scene s;
	struct pyrt *rt = scene_open(&s, row);
	if (!rt) {
		return;
	}
	bool nests = row->version >= 0x030c0000;
	uint32_t so = status_of(row);
	/* The main thread entered interpreter 1: a thread state there, one frame. */
	spy_addr_t sub = fakepy_new_interp(s.fp, 1);
	spy_addr_t t3 = fakepy_thread(s.fp, sub, FAKEPY_PID);
	spy_addr_t code = fakepy_code(s.fp, "sub_spin", "<script>", 5, 8, 2, 7);
	fakepy_push_frame(s.fp, t3, code, 2, 0);
	if (nests) {
		fakepy_w32(s.fp, s.t1 + so, 0x1);
		fakepy_w32(s.fp, t3 + so, 0x1 | BOUND_GILSTATE);
	}
	struct py_thread th[8];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	if (!nests) {
		CHECK_INT(n, 3);
		CHECK_INT(th[0].nouter, 0);
		goto out;
	}
	/* One entry, at the main thread's place, the sub-interpreter's state innermost. */
	CHECK_INT(n, 2);
	CHECK_INT(th[0].tstate, t3);
	CHECK_INT(th[0].interp, sub);
	CHECK_INT(th[0].native_tid, FAKEPY_PID);
	CHECK_INT(th[0].nouter, 1);
	CHECK_INT(th[0].outer[0].tstate, s.t1);
	CHECK_INT(th[0].outer[0].interp, s.interp);
	CHECK_INT(th[1].tstate, s.t2);
	CHECK_INT(th[1].nouter, 0);
	if (row->interp_id != PYOFF_NONE) {
		CHECK_INT(th[0].interp_id, 1);
		CHECK_INT(th[0].outer[0].interp_id, 0);
	}
	check_nested_stack(&s, rt, &th[0]);

	/* No bit set (a swap under way): the GIL holder (t1, the scene's) is innermost. */
	fakepy_w32(s.fp, t3 + so, 0x1);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 2);
	CHECK_INT(th[0].tstate, s.t1);
	CHECK_INT(th[0].nouter, 1);
	CHECK_INT(th[0].outer[0].tstate, t3);
	fakepy_w32(s.fp, t3 + so, 0x1 | BOUND_GILSTATE);

	/*
	 * Listed about to enter (t1 bound, t3 made), inside once held: the
	 * recheck chooses again, t3 innermost, and its stack is the nested one.
	 */
	fakepy_w32(s.fp, s.t1 + so, 0x1 | BOUND_GILSTATE);
	fakepy_w32(s.fp, t3 + so, 0x1);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(th[0].tstate, s.t1);
	fakepy_w32(s.fp, s.t1 + so, 0x1);
	fakepy_w32(s.fp, t3 + so, 0x1 | BOUND_GILSTATE);
	struct py_thread held = th[0];
	CHECK_INT(pyrt_thread_recheck(rt, &held), 0);
	CHECK_INT(held.tstate, t3);
	CHECK_INT(held.nouter, 1);
	CHECK_INT(held.outer[0].tstate, s.t1);
	check_nested_stack(&s, rt, &held);
	/* Left and its state freed (another interpreter's now): t1 alone. */
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	held = th[0];
	CHECK_INT(held.tstate, t3);
	spy_addr_t was = fakepy_r64(s.fp, t3 + row->tstate_interp);
	fakepy_w64(s.fp, t3 + row->tstate_interp, was + 8);
	CHECK_INT(pyrt_thread_recheck(rt, &held), 0);
	CHECK_INT(held.tstate, s.t1);
	CHECK_INT(held.nouter, 0);
	fakepy_w64(s.fp, t3 + row->tstate_interp, was);

	/* A stale state of t2's TID in t2's interpreter: not merged with it. */
	fakepy_thread(s.fp, s.interp, 4300);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 3);
	CHECK_INT(th[0].tstate, t3);
	CHECK_INT(th[0].nouter, 1);

	/* A state bound to no OS thread yet (no thread ids): no thread, left out. */
	spy_addr_t t4 = fakepy_thread(s.fp, sub, 4500);
	fakepy_w64(s.fp, t4 + row->tstate_thread_id, 0);
	fakepy_w32(s.fp, t4 + row->tstate_native_thread_id, 0);
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 3);
	for (size_t i = 0; i < n && i < 8; i++) {
		CHECK(th[i].tstate != t4);
	}

	/* More interpreters than PYRT_MAX_NEST + 1: listed apart, bounded. */
	for (int64_t id = 2; id < 2 + PYRT_MAX_NEST; id++) {
		fakepy_thread(s.fp, fakepy_new_interp(s.fp, id), FAKEPY_PID);
	}
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 3 + 1 + PYRT_MAX_NEST);
	for (size_t i = 0; i < n && i < 8; i++) {
		CHECK_INT(th[i].nouter, 0);
	}
out:
	pyrt_free(rt);
	scene_release(&s);
}

int main(void)
{
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		test_nested(&pyoffsets_table[i]);
	}
	return check_done();
}
