/*
 * Finding the interpreter once the layout row is chosen: a ladder of
 * methods, most trusted first, and the checks that decide whether what a
 * method found is an interpreter at all.
 *
 *   3.7+      _PyRuntime.interpreters.head; without _PyRuntime, a scan of
 *             the writable data for the word that is interpreters.head.
 *   2.7/3.6   a. the static interp_head variable (.symtab only);
 *             b. decoding PyInterpreterState_Head() (mov rax,[rip+d]; ret);
 *             c. _PyThreadState_Current->interp (only while a thread
 *                holds the GIL);
 *             d. a scan of the writable data for a word pointing at an
 *                interpreter.
 *
 * Why two strengths of check: an address from a symbol only has to prove
 * that the layout row fits (every thread points back, austin's check). A
 * guess (b-d, the _PyRuntime scan, or choosing between two versions) must
 * also prove it is an interpreter, because in 2.7 tstate_head and
 * tstate->interp are both at +0x8, which is also ob_type: any type object
 * whose type is itself (`type`) passes the back-pointer test
 * (docs/cpython-internals.md §1.3). So a guess must have threads, its
 * modules and sysdict must be objects whose type is named "dict", and every
 * thread's innermost frame (before 3.11) must be a "frame" running a
 * "code" object. Measured on the live 2.7.18 and 3.6.15 here: 238 and 230
 * words of libpython's .data/.bss pass the back-pointer test (whole thread
 * list walked); 2 pass the strict one, interp_head and autoInterpreterState.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"

/* Does obj's type have tp_name name? No caching: candidates are hostile. */
static bool type_is(struct pyrt *rt, spy_addr_t obj, const char *name)
{
	char buf[16];
	spy_addr_t tp, s;
	size_t n = strlen(name) + 1;

	if (n > sizeof(buf) || !spy_mem_plausible(rt->mem, obj, 8) ||
	    spy_mem_read_addr(rt->mem, obj + rt->off.ob_type, &tp) < 0 ||
	    !spy_mem_plausible(rt->mem, tp, 8) ||
	    spy_mem_read_addr(rt->mem, tp + rt->off.type_name, &s) < 0 ||
	    !spy_mem_plausible(rt->mem, s, 1) || spy_mem_read(rt->mem, s, buf, n) < 0) {
		return false;
	}
	return memcmp(buf, name, n) == 0;
}

/* The field at obj + off is a pointer to an object of type name. */
static bool field_is(struct pyrt *rt, spy_addr_t obj, uint32_t off, const char *name)
{
	spy_addr_t p;
	return off == PYOFF_NONE ||
	       (spy_mem_read_addr(rt->mem, obj + off, &p) == 0 && type_is(rt, p, name));
}

/* The strict part, for one thread state. */
static bool thread_looks_real(struct pyrt *rt, spy_addr_t t)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t id, f;
	if (spy_mem_read_addr(rt->mem, t + o->tstate_thread_id, &id) < 0 || id == 0) {
		return false;
	}
	if (o->frame_model != PYFRAME_OBJECT) {
		/* Iframes need the walker's skip rules to judge; the dict checks
		 * carry the weight for 3.11+. */
		return true;
	}
	if (spy_mem_read_addr(rt->mem, t + o->tstate_frame, &f) < 0) {
		return false;
	}
	return f == 0 || (type_is(rt, f, "frame") && field_is(rt, f, o->frame_code, "code"));
}

bool pyrt_interp_ok(struct pyrt *rt, spy_addr_t interp, bool strict)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t t;
	size_t n;

	if (!spy_mem_plausible(rt->mem, interp, 8) ||
	    spy_mem_read_addr(rt->mem, interp + o->interp_tstate_head, &t) < 0) {
		return false;
	}
	pyrt_seen_reset(rt);
	for (n = 0; t; n++) {
		spy_addr_t back, next;
		if (n >= SPY_MAX_THREADS || pyrt_seen(rt, t) || !spy_mem_plausible(rt->mem, t, 8) ||
		    spy_mem_read_addr(rt->mem, t + o->tstate_interp, &back) < 0 || back != interp ||
		    spy_mem_read_addr(rt->mem, t + o->tstate_next, &next) < 0) {
			return false;
		}
		/* A few threads are proof enough; the rest only need to point back. */
		if (strict && n < 8 && !thread_looks_real(rt, t)) {
			return false;
		}
		t = next;
	}
	if (!strict) {
		return true;
	}
	return n > 0 && field_is(rt, interp, o->interp_modules, "dict") &&
	       field_is(rt, interp, o->interp_sysdict, "dict");
}

/* Interpreters reachable from ip through ->next (bounded); 0 if ip is 0. */
static size_t chain_len(struct pyrt *rt, spy_addr_t ip, spy_addr_t want, bool *has_want)
{
	size_t n = 0;
	*has_want = false;
	while (ip && n < SPY_MAX_INTERPS) {
		*has_want = *has_want || ip == want;
		n++;
		if (!spy_mem_plausible(rt->mem, ip, 8) ||
		    spy_mem_read_addr(rt->mem, ip + rt->off.interp_next, &ip) < 0) {
			break;
		}
	}
	return n;
}

/* ---- the rungs ---- */

static spy_addr_t read_ptr(struct pyrt *rt, spy_addr_t at)
{
	spy_addr_t p = 0;
	if (!at || spy_mem_read_addr(rt->mem, at, &p) < 0) {
		return 0;
	}
	return p;
}

/*
 * PyInterpreterState_Head() compiles to `mov rax, [rip+disp32]; ret`
 * (48 8b 05 d32 c3) in the 2.7 and 3.6 builds; its slot is interp_head.
 * Checked byte for byte: -O0 or instrumented builds simply do not match.
 */
static spy_addr_t slot_from_fn(struct pyrt *rt, spy_addr_t fn)
{
	unsigned char code[8];
	int32_t disp;
	if (!fn || spy_mem_read(rt->mem, fn, code, sizeof(code)) < 0 || code[0] != 0x48 ||
	    code[1] != 0x8b || code[2] != 0x05 || code[7] != 0xc3) {
		return 0;
	}
	memcpy(&disp, code + 3, 4);
	return fn + 7 + (spy_addr_t)(int64_t)disp;
}

/* ---- the scan rung ---- */

#define SCAN_CANDS 8
#define SCAN_REJECTS 512

struct interp_scan {
	struct pyrt *rt;
	bool runtime;                 /* looking for _PyRuntime.interpreters.head */
	spy_addr_t rejected[SCAN_REJECTS];
	struct {
		spy_addr_t slot, interp;
		size_t chain;
	} cand[SCAN_CANDS];
	size_t ncand;
	size_t checked;
};

/*
 * The number of interpreters the word at slot (holding p) reaches, 0 to
 * reject. *p_bad: rejected for what p is, not for where it was found, so p
 * need not be checked again.
 */
static size_t accept_word(struct interp_scan *s, spy_addr_t slot, spy_addr_t p, bool *p_bad)
{
	struct pyrt *rt = s->rt;
	const struct pyoffsets *o = &rt->off;
	spy_addr_t main = p;
	bool has_main;

	*p_bad = !pyrt_interp_ok(rt, p, true);
	if (*p_bad) {
		return 0;
	}
	if (s->runtime) {
		/* The word must sit where interpreters.head sits in a
		 * _PyRuntime whose interpreters.main is on the same list:
		 * that rules out every other pointer to the interpreter. */
		if (slot < o->rt_interpreters_head) {
			return 0;
		}
		spy_addr_t runtime = slot - o->rt_interpreters_head;
		if (o->rt_interpreters_main != PYOFF_NONE) {
			main = read_ptr(rt, runtime + o->rt_interpreters_main);
		}
	}
	size_t chain = chain_len(rt, p, main, &has_main);
	return has_main ? chain : 0;
}

static bool interp_cb(void *ctx, spy_addr_t base, const unsigned char *buf, size_t n, size_t avail)
{
	struct interp_scan *s = ctx;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		spy_addr_t p = pyrt_u64(buf, (uint32_t)i);
		if (!p || !spy_mem_plausible(s->rt->mem, p, 8)) { /* most of .bss is zero */
			continue;
		}
		/* Many words point at the same few objects (types, None):
		 * remember rejections so each is checked about once. */
		size_t h = (size_t)(((p >> 3) * 0x9e3779b97f4a7c15ull) >> 55) & (SCAN_REJECTS - 1);
		if (s->rejected[h] == p) {
			continue;
		}
		s->checked++;
		bool p_bad;
		size_t chain = accept_word(s, base + i, p, &p_bad);
		if (!chain) {
			if (p_bad) {
				s->rejected[h] = p;
			}
			continue;
		}
		s->cand[s->ncand].chain = chain;
		s->cand[s->ncand].slot = base + i;
		s->cand[s->ncand].interp = p;
		if (++s->ncand == SCAN_CANDS) {
			return true;
		}
	}
	return false;
}

/*
 * Scan [lo, hi) for the variable holding the interpreter list head. Of the
 * words that validate, the one that reaches the most interpreters wins: in
 * 2.7 autoInterpreterState points at the main interpreter too, but only
 * interp_head also reaches subinterpreters. Returns the slot, or 0.
 */
static spy_addr_t scan_for_slot(struct pyrt *rt, const struct pyrt_hints *h, bool runtime)
{
	struct interp_scan *s = spy_xcalloc(1, sizeof(*s));
	spy_addr_t best = 0;
	size_t best_chain = 0;

	s->rt = rt;
	s->runtime = runtime;
	pyrt_scan(rt->mem, h->data_lo, h->data_hi, 0, interp_cb, s);
	for (size_t i = 0; i < s->ncand; i++) {
		if (s->cand[i].chain > best_chain) {
			best = s->cand[i].slot;
			best_chain = s->cand[i].chain;
		}
	}
	spy_log(SPY_LOG_DEBUG, "pystate: data scan: %zu words checked, %zu valid, slot 0x%llx",
		s->checked, s->ncand, (unsigned long long)best);
	free(s);
	return best;
}

spy_addr_t pyrt_first_interp(struct pyrt *rt)
{
	if (rt->runtime && rt->off.rt_interpreters_head != PYOFF_NONE) {
		return read_ptr(rt, rt->runtime + rt->off.rt_interpreters_head);
	}
	if (rt->interp_head_var) {
		return read_ptr(rt, rt->interp_head_var);
	}
	return rt->interp_fixed;
}

spy_addr_t pyrt_find_interp(struct pyrt *rt, const struct pyrt_hints *h, bool *checked)
{
	const struct pyoffsets *o = &rt->off;
	bool data = h->data_lo && h->data_hi > h->data_lo;
	spy_addr_t p;

	*checked = false;
	if (o->rt_interpreters_head != PYOFF_NONE) {
		if (!rt->runtime && data) {
			spy_addr_t slot = scan_for_slot(rt, h, true);
			if (slot) {
				rt->runtime = slot - o->rt_interpreters_head;
				rt->interp_source = "data scan (_PyRuntime)";
				*checked = true;
			}
		} else {
			rt->interp_source = "_PyRuntime";
		}
		return pyrt_first_interp(rt);
	}
	/* a: a symbol is authoritative, even when it says "none yet". */
	if (rt->interp_head_var) {
		rt->interp_source = "interp_head";
		return pyrt_first_interp(rt);
	}
	/* b */
	spy_addr_t slot = slot_from_fn(rt, h->interp_head_fn);
	if ((p = read_ptr(rt, slot)) && pyrt_interp_ok(rt, p, true)) {
		rt->interp_head_var = slot;
		rt->interp_source = "PyInterpreterState_Head";
		*checked = true;
		return p;
	}
	/* c: NULL whenever no thread holds the GIL, e.g. all in time.sleep. */
	spy_addr_t t = read_ptr(rt, h->tstate_current);
	if (t && spy_mem_plausible(rt->mem, t, 8) && (p = read_ptr(rt, t + o->tstate_interp)) &&
	    pyrt_interp_ok(rt, p, true)) {
		rt->interp_fixed = p;
		rt->interp_source = "_PyThreadState_Current";
		*checked = true;
		return p;
	}
	/* d */
	if (data && (slot = scan_for_slot(rt, h, false))) {
		rt->interp_head_var = slot;
		rt->interp_source = "data scan";
		*checked = true;
		return pyrt_first_interp(rt);
	}
	return 0;
}
