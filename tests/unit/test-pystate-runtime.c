/*
 * pyrt_new's ladders on synthetic images (tests/lib/fakepy): finding the
 * interpreter without its symbols (PyInterpreterState_Head decode,
 * _PyThreadState_Current, the data scan, the _PyRuntime scan, the
 * _Py_DebugOffsets cookie scan) past decoys built to fool a naive
 * back-pointer test; the exact version from the sys.version text and its
 * cross-check against the file name; per-micro quirks; and a Python newer
 * than every row, walked from its own _Py_DebugOffsets or refused.
 */
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

#define UNMAPPED 0x7f0000001000ull

struct img {
	struct fakepy *fp;
	struct pyoffsets layout;
	uint32_t version;
	bool gil; /* t1 holds the GIL (check_walk's expectation) */
	spy_addr_t interp, t1, t2;
	struct spy_strtab strs;
	struct spy_err err;
};

/*
 * t1 (the pid's thread, holding the GIL): <module> -> work -> Klass.leaf,
 * with a C-stack shim and a non-code frame where the row's model has them;
 * t2: Worker.run.
 */
static void img_init(struct img *m, const struct pyoffsets *row, uint32_t version)
{
	struct spy_strtab init = SPY_STRTAB_INIT;
	struct spy_err einit = SPY_ERR_INIT;
	memset(m, 0, sizeof(*m));
	m->strs = init;
	m->err = einit;
	m->version = version;
	m->layout = *row;
	pyoffsets_apply_quirks(&m->layout, version);
	m->fp = fakepy_new(&m->layout, version);
	struct fakepy *fp = m->fp;
	m->interp = fakepy_main_interp(fp);
	m->t1 = fakepy_thread(fp, m->interp, FAKEPY_PID);
	m->t2 = fakepy_thread(fp, m->interp, 4300);
	fakepy_push_frame(fp, m->t1, fakepy_code(fp, "<module>", "main.py", 1, 20, 3, 10), 3, 0);
	if (row->owner_shim != PYOWNER_NONE) {
		fakepy_push_shim(fp, m->t1);
	}
	fakepy_push_frame(fp, m->t1, fakepy_code(fp, "work", "main.py", 20, 40, 30, 33), 30, 0);
	fakepy_push_frame(fp, m->t1, fakepy_code(fp, "Klass.leaf", "lib.py", 100, 10, 5, 104), 5, 0);
	if (row->frame_model == PYFRAME_IFRAME_EXEC) {
		fakepy_push_frame(fp, m->t1, fakepy_str(fp, "not code"), 0, 0);
	}
	fakepy_push_frame(fp, m->t2, fakepy_code(fp, "Worker.run", "threading.py", 50, 30, 7, 60), 7, 0);
	fakepy_set_gil(fp, m->interp, m->t1);
	m->gil = true;
}

static void img_release_gil(struct img *m)
{
	fakepy_set_gil(m->fp, m->interp, 0);
	m->gil = false;
}

static void img_release(struct img *m)
{
	fakepy_free(m->fp);
	spy_strtab_release(&m->strs);
}

static int img_open(struct img *m, struct pyrt **rt)
{
	*rt = NULL;
	spy_err_clear(&m->err);
	return pyrt_new(rt, fakepy_mem(m->fp), fakepy_hints(m->fp), &m->strs, &m->err);
}

static const char *shown(const struct pyoffsets *row, const char *qual)
{
	const char *dot = strrchr(qual, '.');
	return row->code_qualname != PYOFF_NONE || !dot ? qual : dot + 1;
}

/* Threads and stacks are what img_init built. */
static void check_walk(struct img *m, struct pyrt *rt)
{
	const struct pyoffsets *row = &m->layout;
	struct py_thread th[8];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 2);
	if (n != 2) {
		return;
	}
	CHECK_INT(th[0].tstate, m->t1);
	CHECK_INT(th[1].tstate, m->t2);
	CHECK_INT(th[0].native_tid, FAKEPY_PID);
	CHECK_INT(th[1].native_tid, 4300);
	CHECK(th[0].holds_gil == m->gil);
	CHECK(!th[1].holds_gil);

	struct spy_stack st = SPY_STACK_INIT;
	CHECK_INT(pyrt_stack(rt, &th[0], &st, NULL), 0);
	CHECK_INT(st.n, 3);
	CHECK_INT(st.truncated, 0);
	if (st.n == 3) {
		CHECK_STR(st.v[0].func, shown(row, "Klass.leaf"));
		CHECK_STR(st.v[0].file, "lib.py");
		CHECK_INT(st.v[0].line, 104);
		CHECK_STR(st.v[1].func, "work");
		CHECK_INT(st.v[1].line, 33);
		CHECK_STR(st.v[2].func, "<module>");
		CHECK_STR(st.v[2].file, "main.py");
		CHECK_INT(st.v[2].line, 10);
		if (row->owner_shim != PYOWNER_NONE) {
			CHECK(st.v[1].flags & SPY_FRAME_PY_ENTRY);
		}
	}
	spy_stack_reset(&st);
	CHECK_INT(pyrt_stack(rt, &th[1], &st, NULL), 0);
	CHECK_INT(st.n, 1);
	if (st.n == 1) {
		CHECK_STR(st.v[0].func, shown(row, "Worker.run"));
		CHECK_INT(st.v[0].line, 60);
	}
	spy_stack_release(&st);
}

/* ---- sys.version ---- */

static uint32_t parse(const char *s)
{
	return pyrt_parse_sys_version((const unsigned char *)s, strlen(s));
}

static void test_parse_sys_version(void)
{
	CHECK_INT(parse("3.8.18 (default, Nov 22 2025, 04:40:00) \n[GCC 12.2.0]"), 0x030812f0);
	CHECK_INT(parse("2.7.18 (default, Nov 22 2025, 04:40:00) \n[GCC 12.2.0]"), 0x020712f0);
	CHECK_INT(parse("3.10.13 (main, Nov 22 2025"), 0x030a0df0);
	CHECK_INT(parse("3.9.0rc1 (default"), 0x030900c1);
	CHECK_INT(parse("3.11.0a7 ("), 0x030b00a7);
	CHECK_INT(parse("3.12.0b4 ("), 0x030c00b4);
	CHECK_INT(parse("3.8.18+ (heads/3.8:deadbeef"), 0x030812f0);
	CHECK_INT(parse("3.8.18-local ("), 0x030812f0);
	CHECK_INT(parse("3.7.255 ("), 0x0307fff0);
	/* Not the text Py_GetVersion() writes. */
	CHECK_INT(parse("3.8 (default"), 0);
	CHECK_INT(parse("3.8.18(default"), 0);
	CHECK_INT(parse("3.8.18  (default"), 0);
	CHECK_INT(parse("3.8.18 x (default"), 0);
	CHECK_INT(parse("3.8.18"), 0);
	CHECK_INT(parse("3.8.18 "), 0);
	CHECK_INT(parse("4.0.0 ("), 0);
	CHECK_INT(parse("3.8.256 ("), 0);
	CHECK_INT(parse("3.8.1234 ("), 0);
	CHECK_INT(parse("3.123.1 ("), 0);
	CHECK_INT(parse("3.8.18verylongsuffixthatgoesonandon ("), 0);
	CHECK_INT(parse("3.8.18\x01 ("), 0);
	CHECK_INT(parse(""), 0);
}

/* Write text (with its NUL) at addr. */
static void put_text(struct fakepy *fp, spy_addr_t addr, const char *text)
{
	memcpy(fakepy_at(fp, addr), text, strlen(text) + 1);
}

static void test_scan_sys_version(void)
{
	struct fakepy *fp = fakepy_new(pyoffsets_find(0x03080000), 0x030812f0);
	const struct spy_mem *mem = fakepy_mem(fp);
	struct pyrt_hints *h = fakepy_hints(fp);

	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_hi, 0), 0x030812f0);
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_hi, 0x03080000), 0x030812f0);

	/* Look-alikes ahead of the real text: inside a longer number, after a
	 * letter, without " (". */
	spy_addr_t d = fakepy_data_alloc(fp, 256);
	put_text(fp, d, "13.9.1 (x");
	put_text(fp, d + 32, "v3.9.2 (x");
	put_text(fp, d + 64, "3.9.3 x");
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_hi, 0), 0x030812f0);
	/* A real-looking one ahead: first wins without a hint, the hint's
	 * major.minor wins with one. */
	put_text(fp, d + 96, "3.9.4 (x");
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_hi, 0), 0x030904f0);
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_hi, 0x03080000), 0x030812f0);
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_hi, 0x03070000), 0x030904f0);
	/* Nothing at all. */
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_lo, h->data_lo + 8, 0), 0);
	CHECK_INT(pyrt_scan_sys_version(mem, h->data_hi, h->data_lo, 0), 0);

	/* Straddling a chunk boundary, and past a hole: a range that runs off
	 * the end of the image is read page by page where chunks fail. */
	spy_addr_t big = fakepy_alloc(fp, 3 * PYRT_SCAN_CHUNK);
	spy_addr_t at = big + PYRT_SCAN_CHUNK - 4;
	put_text(fp, at, "2.7.18 (default");
	CHECK_INT(pyrt_scan_sys_version(mem, big, big + 3 * PYRT_SCAN_CHUNK, 0), 0x020712f0);
	CHECK_INT(pyrt_scan_sys_version(mem, big, FAKEPY_BASE + (24u << 20) + 5 * PYRT_SCAN_CHUNK, 0),
		  0x020712f0);
	put_text(fp, at, "xxxxxx");
	spy_addr_t tail = FAKEPY_BASE + (24u << 20) - 40;
	put_text(fp, tail, "3.6.15 (default, Jan");
	CHECK_INT(pyrt_scan_sys_version(mem, tail - 3 * PYRT_SCAN_CHUNK - 8,
					tail + 5 * PYRT_SCAN_CHUNK, 0), 0x03060ff0);
	/* An absurd range is capped, not read for ever. */
	CHECK_INT(pyrt_scan_sys_version(mem, FAKEPY_BASE, FAKEPY_BASE + (1ull << 40), 0x03060000),
		  0x03060ff0);
	fakepy_free(fp);
}

/* Each interesting version prints exactly, from the sys.version text. */
static void test_exact_versions(void)
{
	static const uint32_t versions[] = { 0x020712f0, 0x03060ff0, 0x030710f0, 0x030812f0,
					     0x030912f0, 0x030a0df0, 0x030900c1, 0x030a00b2 };
	static const char *const strs[] = { "2.7.18", "3.6.15", "3.7.16", "3.8.18",
					    "3.9.18", "3.10.13", "3.9.0rc1", "3.10.0b2" };
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		struct img m;
		struct pyrt *rt;
		img_init(&m, pyoffsets_find(versions[i]), versions[i]);
		CHECK_INT(fakepy_hints(m.fp)->version_hint, versions[i] & 0xffff0000u);
		CHECK_INT(img_open(&m, &rt), 0);
		if (rt) {
			CHECK_STR(pyrt_version_string(rt), strs[i]);
			CHECK_INT(pyrt_version(rt), versions[i]);
			CHECK_STR(rt->version_source, "sys.version");
			check_walk(&m, rt);
			pyrt_free(rt);
		}
		img_release(&m);
	}
}

/*
 * The text and the file name disagree: whichever version's layout fits the
 * memory wins, even when it is the file name's.
 */
static void test_version_disagreement(void)
{
	struct img m;
	struct pyrt *rt;

	/* Text right, file name wrong. */
	img_init(&m, pyoffsets_find(0x03080000), 0x030812f0);
	fakepy_hints(m.fp)->version_hint = 0x03090000;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(pyrt_version_string(rt), "3.8.18");
		pyrt_free(rt);
	}
	/* Text wrong (a 3.9 layout passes the 3.8 back-pointer test: only
	 * the strict checks tell them apart), file name right. */
	put_text(m.fp, fakepy_sys_version(m.fp), "3.9.18 (default, Jan  1 2024)");
	fakepy_hints(m.fp)->version_hint = 0x03080000;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(pyrt_version_string(rt), "3.8");
		CHECK_STR(rt->version_source, "file name");
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	/* Neither fits: the more trusted candidate's error is reported. */
	fakepy_hints(m.fp)->version_hint = 0x03060000;
	fakepy_w64(m.fp, m.t1 + m.layout.tstate_interp, UNMAPPED);
	CHECK_INT(img_open(&m, &rt), -SPY_ENOPY);
	CHECK(strstr(m.err.msg, "Python 3.9.18 interpreter") != NULL);
	img_release(&m);

	/* 2.7 named 3.6 (and the reverse): the 2.7 layout is the one that fits. */
	img_init(&m, pyoffsets_find(0x02070000), 0x020712f0);
	fakepy_hints(m.fp)->version_hint = 0x03060000;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(pyrt_version_string(rt), "2.7.18");
		pyrt_free(rt);
	}
	put_text(m.fp, fakepy_sys_version(m.fp), "3.6.15 (default, Jan  1 2024)");
	fakepy_hints(m.fp)->version_hint = 0x02070000;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(pyrt_version_string(rt), "2.7");
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	img_release(&m);
}

/* ---- finding the interpreter without interp_head (2.7, 3.6) ---- */

/* Put a word pointing at target in the data section's front, ahead of the statics. */
static spy_addr_t data_word(struct fakepy *fp, spy_addr_t target)
{
	spy_addr_t w = fakepy_data_alloc(fp, 8);
	fakepy_w64(fp, w, target);
	return w;
}

/* `type`-like: an object that is its own type, refcount 0 (2.7's next == NULL). */
static spy_addr_t self_typed(struct fakepy *fp, const struct pyoffsets *o)
{
	spy_addr_t t = fakepy_data_alloc(fp, 0x200);
	fakepy_w64(fp, t + o->ob_type, t);
	fakepy_w64(fp, t + o->type_name, fakepy_str(fp, "decoy"));
	return t;
}

/* A block whose only thread points back at it: passes the naive test. */
static spy_addr_t naive_decoy(struct fakepy *fp, const struct pyoffsets *o, bool with_dicts)
{
	uint32_t top = o->interp_tstate_head;
	if (with_dicts) {
		top = top > o->interp_modules ? top : o->interp_modules;
		top = top > o->interp_sysdict ? top : o->interp_sysdict;
	}
	spy_addr_t d = fakepy_data_alloc(fp, top + 8);
	spy_addr_t t = fakepy_alloc(fp, o->tstate_size + 16);
	fakepy_w64(fp, d + o->interp_tstate_head, t);
	fakepy_w64(fp, t + o->tstate_interp, d);
	fakepy_w64(fp, t + o->tstate_thread_id, 0x7f0012345000ull);
	if (with_dicts) {
		fakepy_w64(fp, d + o->interp_modules, fakepy_object(fp, fakepy_dict_type(fp), 0x30));
		fakepy_w64(fp, d + o->interp_sysdict, fakepy_object(fp, fakepy_dict_type(fp), 0x30));
		/* ... but its thread's frame is a str, not a frame. */
		fakepy_w64(fp, t + o->tstate_frame, fakepy_str(fp, "not a frame"));
	}
	return d;
}

static void test_static_head(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt *rt;
	struct pyrt_hints *h, saved;
	uint32_t version = row->version | 0x01f0;

	/* c: _PyThreadState_Current -> interp, while t1 holds the GIL. */
	img_init(&m, row, version);
	h = fakepy_hints(m.fp);
	saved = *h;
	spy_addr_t var = h->interp_head;
	h->interp_head = 0;
	h->data_lo = h->data_hi = 0;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(rt->interp_source, "_PyThreadState_Current");
		CHECK_INT(rt->interp_fixed, m.interp);
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	/* Nobody holds the GIL (all in time.sleep): nothing to follow. */
	img_release_gil(&m);
	CHECK_INT(img_open(&m, &rt), -SPY_ENOPY);
	CHECK(strstr(m.err.msg, "no interpreter yet") != NULL);
	/* The GIL holder's interp is garbage: refused, not followed. */
	fakepy_set_gil(m.fp, m.interp, m.t2);
	spy_addr_t decoy = naive_decoy(m.fp, row, false);
	fakepy_w64(m.fp, m.t2 + row->tstate_interp, decoy);
	CHECK_INT(img_open(&m, &rt), -SPY_ENOPY);
	fakepy_w64(m.fp, m.t2 + row->tstate_interp, m.interp);
	img_release_gil(&m);

	/* d: the data scan, past decoys that precede the real variable. */
	*h = saved;
	h->interp_head = 0;
	spy_addr_t self = self_typed(m.fp, row);
	data_word(m.fp, self);
	data_word(m.fp, naive_decoy(m.fp, row, false));
	data_word(m.fp, naive_decoy(m.fp, row, true));
	data_word(m.fp, decoy);
	/* The 2.7 trap: a self-typed object passes the back-pointer test when
	 * tstate_head and tstate->interp are both at ob_type's +0x8. */
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(rt->interp_source, "data scan");
		CHECK_INT(rt->interp_head_var, var);
		if (row->interp_tstate_head == row->ob_type && row->tstate_interp == row->ob_type) {
			CHECK(pyrt_interp_ok(rt, self, false));
		}
		CHECK(!pyrt_interp_ok(rt, self, true));
		CHECK(pyrt_interp_ok(rt, decoy, false));
		CHECK(!pyrt_interp_ok(rt, decoy, true));
		check_walk(&m, rt);
		/* It found the variable, not a copy: later interpreters show. */
		spy_addr_t sub = fakepy_new_interp(m.fp, 1);
		fakepy_thread(m.fp, sub, 4400);
		struct py_thread th[8];
		size_t n = 0;
		CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
		CHECK_INT(n, 3);
		pyrt_free(rt);
	}
	/* A second word for the main interpreter ahead of interp_head (2.7's
	 * autoInterpreterState): interp_head reaches more interpreters. */
	data_word(m.fp, m.interp);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_INT(rt->interp_head_var, var);
		pyrt_free(rt);
	}
	/* A data range running into unmapped memory still finds it. */
	h->data_hi = FAKEPY_BASE + (24u << 20) + (1u << 20);
	h->data_lo = var - 0x100;
	CHECK_INT(img_open(&m, &rt), 0);
	pyrt_free(rt);
	h->data_lo = saved.data_lo;
	h->data_hi = saved.data_hi;
	/* Only decoys left: nothing, rather than a decoy. */
	fakepy_w64(m.fp, var, 0);
	for (spy_addr_t a = h->data_lo; a < h->data_hi; a += 8) {
		if (fakepy_r64(m.fp, a) == m.interp) {
			fakepy_w64(m.fp, a, 0);
		}
	}
	CHECK_INT(img_open(&m, &rt), -SPY_ENOPY);
	CHECK(rt == NULL);
	img_release(&m);

	/* b then d: a PyInterpreterState_Head whose slot holds a decoy is
	 * refused, and the scan takes over. */
	img_init(&m, row, version);
	h = fakepy_hints(m.fp);
	var = h->interp_head;
	spy_addr_t dslot = data_word(m.fp, naive_decoy(m.fp, row, false));
	spy_addr_t fn = fakepy_alloc(m.fp, 16);
	int32_t disp = (int32_t)(dslot - (fn + 7));
	unsigned char code[8] = { 0x48, 0x8b, 0x05, 0, 0, 0, 0, 0xc3 };
	memcpy(code + 3, &disp, 4);
	memcpy(fakepy_at(m.fp, fn), code, 8);
	h->interp_head = 0;
	h->interp_head_fn = fn;
	img_release_gil(&m);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(rt->interp_source, "data scan");
		CHECK_INT(rt->interp_head_var, var);
		pyrt_free(rt);
	}
	img_release(&m);
}

/* ---- finding _PyRuntime without its symbol (3.7+) ---- */

static void test_runtime_scan(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt *rt;
	uint32_t version = row->version | 0x05f0;

	img_init(&m, row, version);
	struct pyrt_hints *h = fakepy_hints(m.fp);
	spy_addr_t runtime = h->runtime;
	/* Other words that point at the main interpreter come first (3.7-3.11
	 * gilstate.autoInterpreterState; any static), and a naive decoy. */
	data_word(m.fp, m.interp);
	data_word(m.fp, m.interp);
	data_word(m.fp, naive_decoy(m.fp, row, false));
	h->runtime = 0;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_INT(rt->runtime, runtime);
		CHECK_INT(pyrt_version(rt), version);
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	/* Without data either, nothing to go on. */
	h->data_lo = h->data_hi = 0;
	if (!h->py_version) {
		h->version_hint = row->version;
	}
	CHECK_INT(img_open(&m, &rt), -SPY_ENOPY);
	CHECK(!strncmp(m.err.msg, "no Python interpreter found in fakepy", 37));
	img_release(&m);
}

/* ---- the GIL's switch count ---- */

/*
 * pyrt_gil_switches for every row: on a GIL build of 3.7+ the count moves
 * when the GIL goes to another thread than its last holder, not on a
 * release nor a take by the same thread, and the last holder is read with
 * it; elsewhere (2.7, 3.6, free-threaded, 3.7.0-3.7.3) there is none.
 */
static void test_gil_switches(const struct pyoffsets *row, uint32_t version)
{
	struct img m;
	struct pyrt *rt;
	img_init(&m, row, version);
	CHECK_INT(img_open(&m, &rt), 0);
	if (!rt) {
		img_release(&m);
		return;
	}
	bool counted = !(row->build & PYBUILD_FT) && version >= 0x03070400;
	uint64_t c0 = 0, c;
	spy_addr_t last = 0;
	CHECK_INT(pyrt_gil_switches(rt, m.interp, &c0, &last), counted ? 0 : -1);
	if (counted) {
		CHECK_INT(last, m.t1);
		static const struct {
			int holder;   /* 1: t1, 2: t2, 0: released */
			uint64_t moved;
		} steps[] = { { 2, 1 }, { 0, 1 }, { 2, 1 }, { 0, 1 }, { 1, 2 } };
		for (size_t i = 0; i < SPY_ARRAY_SIZE(steps); i++) {
			spy_addr_t t = steps[i].holder == 1 ? m.t1 : steps[i].holder == 2 ? m.t2 : 0;
			fakepy_set_gil(m.fp, m.interp, t);
			CHECK_INT(pyrt_gil_switches(rt, m.interp, &c, &last), 0);
			CHECK_INT(c - c0, steps[i].moved);
			CHECK_INT(last, steps[i].holder == 1 ? m.t1 : m.t2);
		}
		/* The count where the headers put it: the int locked, then the unsigned long. */
		CHECK_INT(row->gil_model == PYGIL_RUNTIME ? row->rt_gil_switch_number - row->rt_gil_locked
			  : row->gil_switch_number - row->gil_locked, 8);
	}
	pyrt_free(rt);
	img_release(&m);
}

/* ---- per-micro quirks ---- */

static void test_quirks(void)
{
	const struct pyoffsets *r37 = pyoffsets_find(0x03070000);
	struct pyoffsets o = *r37;
	CHECK_INT(pyoffsets_apply_quirks(&o, 0x030710f0), 0);
	CHECK_INT(o.rt_gilstate_tstate_current, r37->rt_gilstate_tstate_current);
	CHECK_INT(pyoffsets_apply_quirks(&o, 0x030704f0), 0);
	CHECK_INT(pyoffsets_apply_quirks(&o, 0x030703f0), 4);
	/* 0x570 on x86-64 (py-spy's number); the same shift on arm64. */
	CHECK_INT(o.rt_gilstate_tstate_current, r37->rt_gilstate_tstate_current - 0x58);
	CHECK_INT(o.rt_gil_last_holder, PYOFF_NONE);
	CHECK_INT(o.rt_gil_switch_number, PYOFF_NONE);
	CHECK_INT(o.rt_interpreters_head, r37->rt_interpreters_head);
	o = *r37;
	CHECK_INT(pyoffsets_apply_quirks(&o, 0x030700a1), 4);
	CHECK_INT(pyoffsets_apply_quirks(&o, 0x030800f0), 0);

	/* A 3.7.2 image has its GIL holder there; pyrt finds it there. */
	uint32_t holder_372 = r37->rt_gilstate_tstate_current - 0x58;
	struct img m;
	struct pyrt *rt;
	img_init(&m, r37, 0x030702f0);
	CHECK_INT(m.layout.rt_gilstate_tstate_current, holder_372);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_INT(rt->off.rt_gilstate_tstate_current, holder_372);
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	/* Known only as "3.7" from a file name: the row as generated. */
	fakepy_w8(m.fp, fakepy_sys_version(m.fp), 0);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(pyrt_version_string(rt), "3.7");
		CHECK_INT(rt->off.rt_gilstate_tstate_current, r37->rt_gilstate_tstate_current);
		pyrt_free(rt);
	}
	img_release(&m);
}

/* ---- 3.13+: layouts from the target's own _Py_DebugOffsets ---- */

/* Every generated table layout: positions 8-aligned, distinct, inside the table. */
static void test_debug_layouts(void)
{
	const struct pyoffsets *newest = pyoffsets_newest();
	uint32_t next = (newest->version & 0xffff0000u) + 0x10000u;
	CHECK(newest != NULL && newest->dbg.size != 0);
	CHECK(pydebug_layout_for(0x03070000) == NULL);
	CHECK(pydebug_layout_for(0x030d0000) == &pyoffsets_find(0x030d0000)->dbg);
	CHECK(pydebug_layout_for(0x030e00f0) == &pyoffsets_find(0x030e0000)->dbg);
	CHECK(pydebug_layout_for(next | 0xf0) == &newest->dbg);
	CHECK(pyoffsets_is_future(next | 0xf0));
	CHECK(pyoffsets_is_future(0x031f00f0));
	CHECK(!pyoffsets_is_future(newest->version | 0xf0));
	CHECK(!pyoffsets_is_future(0x040000f0));
	for (unsigned r = 0; r < pyoffsets_count; r++) {
		const struct pydebug_layout *d = &pyoffsets_table[r].dbg;
		if (!d->size) {
			continue;
		}
		const uint32_t *f = (const uint32_t *)d;
		size_t nf = sizeof(*d) / sizeof(uint32_t);
		for (size_t i = 1; i < nf; i++) {
			if (f[i] == PYOFF_NONE) {
				continue;
			}
			CHECK(f[i] % 8 == 0 && f[i] >= 8 && f[i] + 8 <= d->size);
			for (size_t j = 1; j < i; j++) {
				CHECK(f[i] != f[j]);
			}
		}
	}
}

/*
 * An image of the newest generated version's model whose fields sit
 * elsewhere than in that row (what a patch release does, or the next minor
 * version), with _Py_DebugOffsets laid out as the newest row's and telling
 * the truth about where they are.
 */
static struct pyoffsets moved_layout(uint32_t version)
{
	const struct pyoffsets *row = pyoffsets_newest();
	struct pyoffsets o = *row;
	o.version = version & 0xffff0000u;
	o.rt_interpreters_head += 0x100;
	o.rt_interpreters_main += 0x100;
	o.interp_next += 0x80;
	o.interp_id += 0x80;
	o.interp_tstate_head = o.interp_id + 8; /* clear of modules and sysdict */
	o.tstate_current_frame = row->tstate_current_frame + 8;
	o.tstate_thread_id = row->tstate_native_thread_id + 0x10;
	o.tstate_native_thread_id = row->tstate_thread_id + 0x10;
	o.iframe_code = row->iframe_previous;
	o.iframe_previous = row->iframe_code;
	o.iframe_owner = 0x44;
	o.code_filename = row->code_name;
	o.code_name = row->code_filename;
	o.code_qualname = 0x90;
	o.code_linetable = 0x98;
	o.code_size = row->code_size + 0x10;
	o.code_adaptive = row->code_adaptive + 0x10;
	o.code_firsttraceable = row->code_firsttraceable + 0x10; /* the same gap */
	o.gil_locked = row->gil_last_holder + 0x10;
	o.gil_last_holder = row->gil_locked + 0x10;
	o.str_ascii_data = row->str_ascii_data + 8;
	o.str_compact_data = row->str_compact_data + 8;
	return o;
}

static void check_refused(struct img *m, const char *minor)
{
	struct pyrt *rt;
	char want[64];
	snprintf(want, sizeof(want), "Python %s: unsupported layout (", minor);
	CHECK_INT(img_open(m, &rt), -SPY_EVERSION);
	CHECK(!strncmp(m->err.msg, want, strlen(want)));
	if (strncmp(m->err.msg, want, strlen(want))) {
		fprintf(stderr, "  got: %s\n", m->err.msg);
	}
}

/*
 * A known version (the newest row) whose debug offsets move the fields the
 * compiled row would read: walked right, from the table alone. Then the
 * same image's table corrupted in each way that must be refused.
 */
static void test_moved_known(void)
{
	const struct pyoffsets *newest = pyoffsets_newest();
	uint32_t v = newest->version | 0x02f0;
	char minor[16], exact[24];
	snprintf(minor, sizeof(minor), "%u.%u", v >> 24, (v >> 16) & 0xff);
	snprintf(exact, sizeof(exact), "%s.2", minor);
	struct img m;
	struct pyrt *rt;
	struct pyoffsets o = moved_layout(v);

	img_init(&m, &o, v);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_STR(pyrt_version_string(rt), exact);
		CHECK_STR(rt->version_source, "_Py_DebugOffsets");
		CHECK_INT(rt->off.code_firsttraceable, o.code_firsttraceable);
		CHECK_INT(rt->off.str_compact_data, o.str_compact_data);
		CHECK_INT(rt->off.tstate_thread_id, o.tstate_thread_id);
		check_walk(&m, rt);
		pyrt_free(rt);
	} else {
		fprintf(stderr, "%s: %s\n", exact, m.err.msg);
	}
	/* Found without _PyRuntime's symbol: the cookie is in the data. */
	struct pyrt_hints saved = *fakepy_hints(m.fp);
	fakepy_hints(m.fp)->runtime = 0;
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		CHECK_INT(rt->runtime, saved.runtime);
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	*fakepy_hints(m.fp) = saved;

	/* Impossible values, even for a version spy has a row for: refused,
	 * never quietly replaced by the row's numbers. */
	spy_addr_t dbg_ln = saved.runtime + o.dbg.code_linetable;
	uint64_t ln = fakepy_r64(m.fp, dbg_ln);
	fakepy_w64(m.fp, dbg_ln, 1ull << 40);
	check_refused(&m, minor);
	CHECK(strstr(m.err.msg, "impossible") != NULL);
	fakepy_w64(m.fp, dbg_ln, ln);
	spy_addr_t dbg_tsz = saved.runtime + o.dbg.tstate_size;
	fakepy_w64(m.fp, dbg_tsz, 0x10);
	check_refused(&m, minor);
	fakepy_w64(m.fp, dbg_tsz, o.tstate_size);
	/* A field past the end of its struct. */
	spy_addr_t dbg_cf = saved.runtime + o.dbg.tstate_current_frame;
	fakepy_w64(m.fp, dbg_cf, o.tstate_size + 8);
	check_refused(&m, minor);
	fakepy_w64(m.fp, dbg_cf, o.tstate_current_frame);
	/* A str header size no PyASCIIObject has. */
	spy_addr_t dbg_asz = saved.runtime + o.dbg.str_ascii_size;
	fakepy_w64(m.fp, dbg_asz, 0);
	check_refused(&m, minor);
	fakepy_w64(m.fp, dbg_asz, o.str_ascii_data);
	/* No cookie: a 3.13+ layout is never taken from the row alone. */
	fakepy_w8(m.fp, saved.runtime, 'X');
	check_refused(&m, minor);
	CHECK(strstr(m.err.msg, "no _Py_DebugOffsets found") != NULL);
	fakepy_w8(m.fp, saved.runtime, 'x');
	CHECK_INT(img_open(&m, &rt), 0);
	pyrt_free(rt);
	img_release(&m);
}

/* A version newer than every row, read from its own table. */
static void test_future(void)
{
	const struct pyoffsets *newest = pyoffsets_newest();
	uint32_t next = (newest->version & 0xffff0000u) + 0x10000u;
	char minor[16], exact[24];
	snprintf(minor, sizeof(minor), "%u.%u", next >> 24, (next >> 16) & 0xff);
	struct img m;
	struct pyrt *rt;
	struct pyoffsets o = moved_layout(next);

	img_init(&m, &o, next | 0x01f0);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		snprintf(exact, sizeof(exact), "%s.1", minor);
		CHECK_STR(pyrt_version_string(rt), exact);
		check_walk(&m, rt);
		pyrt_free(rt);
	}
	struct pyrt_hints saved = *fakepy_hints(m.fp);

	/* Idle threads only: nothing to prove the guessed layout with. */
	spy_addr_t top1 = fakepy_r64(m.fp, fakepy_top_slot(m.fp, m.t1));
	spy_addr_t top2 = fakepy_r64(m.fp, fakepy_top_slot(m.fp, m.t2));
	fakepy_w64(m.fp, fakepy_top_slot(m.fp, m.t1), 0);
	fakepy_w64(m.fp, fakepy_top_slot(m.fp, m.t2), 0);
	check_refused(&m, minor);
	fakepy_w64(m.fp, fakepy_top_slot(m.fp, m.t1), top1);
	fakepy_w64(m.fp, fakepy_top_slot(m.fp, m.t2), top2);

	/* A table that lies (filename where the linetable is): refused. */
	spy_addr_t dbg_ln = saved.runtime + o.dbg.code_linetable;
	uint64_t ln = fakepy_r64(m.fp, dbg_ln);
	fakepy_w64(m.fp, dbg_ln, o.code_filename);
	check_refused(&m, minor);
	fakepy_w64(m.fp, dbg_ln, ln);
	/* An interpreter head that leads nowhere. */
	spy_addr_t dbg_head = saved.runtime + o.dbg.rt_interpreters_head;
	fakepy_w64(m.fp, dbg_head, o.rt_interpreters_head + 0x10);
	check_refused(&m, minor);
	fakepy_w64(m.fp, dbg_head, o.rt_interpreters_head);
	/* Free-threaded: every known version has a free-threaded row; a new
	 * one has none to take its object header from, so it is refused,
	 * saying so. */
	CHECK(!pyoffsets_find_build(next, PYBUILD_FT));
	fakepy_w64(m.fp, saved.runtime + o.dbg.free_threaded, 1);
	check_refused(&m, minor);
	CHECK(strstr(m.err.msg, "free-threaded") != NULL);
	fakepy_w64(m.fp, saved.runtime + o.dbg.free_threaded, 0);
	CHECK_INT(img_open(&m, &rt), 0);
	pyrt_free(rt);
	img_release(&m);

	/* A 3.14 cookie on a table laid out as 3.13's (a wrong guess of the
	 * table's own layout): refused. */
	img_init(&m, pyoffsets_find(0x030d0000), 0x030e00f0);
	check_refused(&m, "3.14");
	img_release(&m);

	/* A pre-release of a future version prints as one. */
	o = moved_layout(next | 0xa1);
	img_init(&m, &o, next | 0xa1);
	CHECK_INT(img_open(&m, &rt), 0);
	if (rt) {
		snprintf(exact, sizeof(exact), "%s.0a1", minor);
		CHECK_STR(pyrt_version_string(rt), exact);
		pyrt_free(rt);
	}
	img_release(&m);
}

int main(void)
{
	spy_log_init_from_env();
	test_parse_sys_version();
	test_scan_sys_version();
	test_exact_versions();
	test_version_disagreement();
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		if (row->rt_interpreters_head == PYOFF_NONE) {
			test_static_head(row);
		} else {
			test_runtime_scan(row);
		}
		test_gil_switches(row, row->version | 0x05f0);
	}
	test_gil_switches(pyoffsets_find(0x03070000), 0x030702f0);
	test_quirks();
	test_debug_layouts();
	test_moved_known();
	test_future();
	return check_done();
}
