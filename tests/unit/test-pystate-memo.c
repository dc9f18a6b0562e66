/*
 * The frame memo and the stack splice (pystate/walk.c, splice.c) on
 * synthetic images, for every row of the generated offsets table: what
 * they keep is dropped when the frames or code objects change, and a
 * frame that runs on is taken on the memo's word only as long as it
 * trusts it.
 */
#include <stdlib.h>
#include <string.h>

#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"
#include "tests/lib/pyscene.h"

/*
 * Move s's Outer.функция frame to code unit idx (the scene puts it at 5,
 * where a 3.11+ frame's instruction pointer was instr_was).
 */
static void run_at(struct scene *s, uint64_t instr_was, unsigned idx)
{
	const struct pyoffsets *row = s->row;
	if (row->frame_model == PYFRAME_OBJECT) {
		fakepy_w32(s->fp, s->f_func + row->frame_lasti,
			   row->instr_model == PYINSTR_LASTI_UNITS ? idx : 2 * idx);
	} else {
		fakepy_w64(s->fp, s->f_func + row->iframe_instr, instr_was - 2 * (5 - (uint64_t)idx));
	}
}

/*
 * The frame memo (walk.c): a frame that changed is decoded again at once; a
 * code object changed under a byte-identical frame (freed, its address
 * reused) is decoded again within PYFRAME_MEMO_TTL walks.
 */
/*
 * With peek (a live process's cache), 3.11+ walks also splice the bottom of
 * the stack from the thread's last walk (splice.c): every check holds
 * either way, and the splice is taken.
 */
static void test_memo(const struct pyoffsets *row, bool peek)
{
	struct scene s;
	scene_init(&s, row);
	fakepy_set_peek(s.fp, peek);
	struct pyrt *rt = open_rt(&s);
	if (!rt) {
		scene_release(&s);
		return;
	}
	struct py_thread t;
	memset(&t, 0, sizeof(t));
	t.tstate = s.t1;
	t.interp = s.interp;
	struct spy_stack st = SPY_STACK_INIT;
	size_t at = s.n1 - 3; /* Outer.функция, innermost first */
	for (int i = 0; i < 2; i++) {
		spy_stack_reset(&st);
		CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
		check_stack(&st, s.e1, s.n1, s.version);
	}

	spy_addr_t instr = row->frame_model == PYFRAME_OBJECT ? 0 : s.f_func + row->iframe_instr;
	uint64_t instr_was = instr ? fakepy_r64(s.fp, instr) : 0;
	if (row->iframe_tlbc_index == PYOFF_NONE) {
		/*
		 * The frame runs on (its instruction moves, to units 2 and 3,
		 * on the code's first line): its line follows, its code object
		 * taken on the memo's word, not read, until the entry expires.
		 */
		uint64_t reads = rt->cache_hits + rt->cache_misses;
		run_at(&s, instr_was, 2);
		spy_stack_reset(&st);
		CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
		CHECK(st.n > at && !strcmp(st.v[at].func, s.e1[at].func) && st.v[at].line == 400);
		CHECK_INT(rt->cache_hits + rt->cache_misses, reads);
		bool again = false;
		for (int i = 0; i <= PYFRAME_MEMO_TTL && !again; i++) {
			run_at(&s, instr_was, i % 2 ? 2 : 3);
			spy_stack_reset(&st);
			CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
			CHECK(st.n > at && st.v[at].line == 400);
			again = rt->cache_hits + rt->cache_misses > reads;
		}
		CHECK(again);
		run_at(&s, instr_was, 5);
	}

	/* The frame now runs another code object: seen on the next walk. */
	spy_addr_t other = fakepy_code(s.fp, "other", "o.py", 400, 10, 5, 401);
	spy_addr_t slot = fakepy_code_slot(s.fp, s.f_func);
	uint64_t was = fakepy_r64(s.fp, slot);
	fakepy_w64(s.fp, slot, was - s.c_func + other); /* a 3.14+ reference keeps its tag */
	if (instr) {
		/* The same instruction of the other code object. */
		fakepy_w64(s.fp, instr, instr_was - s.c_func + other);
	}
	spy_stack_reset(&st);
	CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
	CHECK_INT(st.n, s.n1);
	CHECK(st.n > at && !strcmp(st.v[at].func, "other"));
	fakepy_w64(s.fp, slot, was);
	if (instr) {
		fakepy_w64(s.fp, instr, instr_was);
	}
	spy_stack_reset(&st);
	CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
	check_stack(&st, s.e1, s.n1, s.version);

	/* Another code object at the same address, the frame untouched. */
	spy_addr_t name = fakepy_str(s.fp, "Renamed");
	fakepy_w64(s.fp, s.c_func + row->code_name, name);
	if (has_qualname(row)) {
		fakepy_w64(s.fp, s.c_func + row->code_qualname, name);
	}
	bool renamed = false;
	for (int i = 0; i <= PYFRAME_MEMO_TTL && !renamed; i++) {
		spy_stack_reset(&st);
		CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
		CHECK_INT(st.n, s.n1);
		renamed = st.n > at && !strcmp(st.v[at].func, "Renamed");
	}
	CHECK(renamed);
	if (peek && row->frame_model != PYFRAME_OBJECT && row->iframe_tlbc_index == PYOFF_NONE) {
		CHECK(rt->splice_hits > 0);
	}
	spy_stack_release(&st);
	pyrt_free(rt);
	scene_release(&s);
}

/*
 * Threads whose frames lie at the same offset modulo the memo's span (as
 * threads' frame chunks often do): walked in turn, each keeps its frames
 * memoized, up to PYFRAME_MEMO_WAYS of them.
 */
static void test_memo_threads(const struct pyoffsets *row)
{
	if (row->build & PYBUILD_FT) {
		return; /* no memo there */
	}
	struct scene s;
	struct pyrt *rt = scene_open(&s, row);
	if (!rt) {
		return;
	}
	enum { NT = 4, DEPTH = 8 };
	_Static_assert(NT <= PYFRAME_MEMO_WAYS && NT <= FAKEPY_MAX_THREADS, "threads");
	const spy_addr_t span = (spy_addr_t)PYFRAME_MEMO_SETS * 64 * 2;
	spy_addr_t code = fakepy_code(s.fp, "leaf", "l.py", 1, 20, 3, 2);
	/* t1 and t2 are the scene's; their own frames stay above the new ones. */
	spy_addr_t ts[NT] = { s.t1, s.t2, fakepy_thread(s.fp, s.interp, 4301), fakepy_thread(s.fp, s.interp, 4302) };
	spy_addr_t first = 0;
	for (size_t j = 0; j < NT; j++) {
		spy_addr_t next = fakepy_alloc(s.fp, 0);
		if (first) {
			/* Thread j's first frame at first + j * span: the same sets as thread 0's. */
			CHECK(first + j * span > next);
			fakepy_alloc(s.fp, (size_t)(first + j * span - next));
		}
		for (size_t d = 0; d < DEPTH; d++) {
			spy_addr_t f = fakepy_push_frame(s.fp, ts[j], code, 3, 0);
			if (!first) {
				first = f;
			}
			CHECK(d || f == first + j * span);
		}
	}
	struct py_thread t;
	memset(&t, 0, sizeof(t));
	t.interp = s.interp;
	struct spy_stack st = SPY_STACK_INIT;
	uint64_t hits = 0;
	for (int round = 0; round < 2; round++) {
		hits = rt->memo_hits;
		for (size_t j = 0; j < NT; j++) {
			t.tstate = ts[j];
			spy_stack_reset(&st);
			CHECK_INT(pyrt_stack(rt, &t, &st, NULL), 0);
			CHECK(st.n >= DEPTH && !strcmp(st.v[0].func, "leaf"));
		}
	}
	/* The second round found every thread's new frames memoized. */
	CHECK(rt->memo_hits - hits >= (uint64_t)NT * DEPTH);
	spy_stack_release(&st);
	pyrt_free(rt);
	scene_release(&s);
}

int main(void)
{
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		test_memo(row, false);
		test_memo(row, true);
		test_memo_threads(row);
	}
	return check_done();
}
