/*
 * Finding the runtime (pyrt_new) and listing its threads (pyrt_threads).
 *
 * pyrt_new decides the version from the target itself, in order of trust:
 *   1. the _Py_DebugOffsets cookie "xdebugpy" at _PyRuntime (3.13+), whose
 *      version word follows it; the table's own offsets then refine the row;
 *   2. the exported Py_Version word (3.11+);
 *   3. the sys.version text that Py_GetVersion() formats into a static
 *      buffer at start-up, found by scanning the writable data (scan.c):
 *      the only exact source before 3.11;
 *   4. the caller's hint (from the library's file name: major.minor only).
 * When 3 and 4 disagree on major.minor, both are tried and the first whose
 * layout validates strictly wins: a file can be misnamed, and text in .bss
 * can be something else, but the layout that fits the memory is the truth.
 *
 * It then picks the layout row (with per-micro quirks, layouts.c) and
 * strategies, and finds the interpreter (find.c's ladder), accepting it
 * only if every thread on its list points back at it (austin's check): a
 * wrong version or a stale symbol fails here rather than producing garbage
 * stacks later.
 *
 * A version newer than every row (3.14, 3.15, ...) is read from its own
 * _Py_DebugOffsets: the newest row supplies the models and the constants the
 * debug table lacks, the table every offset it has, decoded with the newest
 * table layout we know. Because that is a guess about a CPython we have
 * never seen, it must also decode a real frame before it is trusted;
 * otherwise, and when the cookie is absent, the answer is -SPY_EVERSION
 * "Python 3.N: unsupported layout (...)".
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

static const char *binary_name(const struct pyrt_hints *h)
{
	return h->binary && *h->binary ? h->binary : "the target";
}

static bool has_data(const struct pyrt_hints *h)
{
	return h->data_lo && h->data_hi > h->data_lo;
}

static size_t span_of(const uint32_t *offs, size_t n, size_t width)
{
	size_t span = 0;
	for (size_t i = 0; i < n; i++) {
		if (offs[i] != PYOFF_NONE && offs[i] + width > span) {
			span = offs[i] + width;
		}
	}
	return span;
}

/* Bytes to copy per struct: through the last field we decode, 8-byte wide. */
static void compute_spans(struct pyrt *rt)
{
	const struct pyoffsets *o = &rt->off;
	uint32_t ts[] = { o->tstate_next, o->tstate_interp, o->tstate_thread_id,
			  o->tstate_native_thread_id, o->tstate_frame, o->tstate_cframe,
			  o->tstate_current_frame, o->tstate_state };
	uint32_t fr[] = { o->frame_back, o->frame_code, o->frame_lasti, o->iframe_code,
			  o->iframe_previous, o->iframe_instr, o->iframe_owner, o->iframe_is_entry,
			  o->iframe_tlbc_index };
	uint32_t co[] = { o->ob_type, o->ob_size, o->code_firstlineno, o->code_filename,
			  o->code_name, o->code_qualname, o->code_linetable, o->code_firsttraceable,
			  o->code_tlbc };
	rt->tstate_span = span_of(ts, SPY_ARRAY_SIZE(ts), 8);
	rt->frame_span = span_of(fr, SPY_ARRAY_SIZE(fr), 8);
	rt->code_span = span_of(co, SPY_ARRAY_SIZE(co), 8);
}

static void format_version(struct pyrt *rt)
{
	uint32_t v = rt->version;
	unsigned level = (v >> 4) & 0xf, serial = v & 0xf;
	const char *lv = level == 0xa ? "a" : level == 0xb ? "b" : level == 0xc ? "rc" : "";
	if (rt->version_source && !strcmp(rt->version_source, "file name") && (v & 0xffff) == 0) {
		/* A hint from the file name knows major.minor only: do not invent ".0". */
		snprintf(rt->version_str, sizeof(rt->version_str), "%u.%u", v >> 24, (v >> 16) & 0xff);
	} else if (*lv) {
		snprintf(rt->version_str, sizeof(rt->version_str), "%u.%u.%u%s%u", v >> 24,
			 (v >> 16) & 0xff, (v >> 8) & 0xff, lv, serial);
	} else {
		snprintf(rt->version_str, sizeof(rt->version_str), "%u.%u.%u", v >> 24,
			 (v >> 16) & 0xff, (v >> 8) & 0xff);
	}
}

static bool read_cookie(const struct spy_mem *mem, spy_addr_t runtime)
{
	char cookie[8];
	return runtime && spy_mem_read(mem, runtime, cookie, sizeof(cookie)) == 0 &&
	       memcmp(cookie, PYDEBUG_COOKIE, sizeof(cookie)) == 0;
}

struct vcand {
	uint32_t version;
	const char *source;
};

/* The versions to try, most trusted first (see the top of the file). */
static size_t version_candidates(struct pyrt *rt, const struct pyrt_hints *h, spy_addr_t runtime,
				 bool cookie, struct vcand out[2])
{
	uint64_t v64;
	uint32_t v32;
	size_t n = 0;

	/* The cookie is followed by PY_VERSION_HEX as a uint64 (pycore_runtime.h 3.13). */
	if (cookie && spy_mem_read(rt->mem, runtime + 8, &v64, sizeof(v64)) == 0 && v64 <= UINT32_MAX) {
		out[0].version = (uint32_t)v64;
		out[0].source = "_Py_DebugOffsets";
		return 1;
	}
	if (h->py_version && spy_mem_read(rt->mem, h->py_version, &v32, sizeof(v32)) == 0) {
		out[0].version = v32;
		out[0].source = "Py_Version";
		return 1;
	}
	uint32_t sv = 0;
	if (has_data(h)) {
		sv = pyrt_scan_sys_version(rt->mem, h->data_lo, h->data_hi, h->version_hint);
	}
	if (sv) {
		out[n].version = sv;
		out[n++].source = "sys.version";
	}
	if (h->version_hint && (!sv || (sv & 0xffff0000u) != (h->version_hint & 0xffff0000u))) {
		if (sv) {
			spy_log(SPY_LOG_DEBUG, "pystate: sys.version 0x%08x and file name 0x%08x disagree",
				sv, h->version_hint);
		}
		out[n].version = h->version_hint;
		out[n++].source = "file name";
	}
	return n;
}

/*
 * For a layout read from a version we have never seen: decode real frames
 * before trusting it. Accepted when, among the first few threads, one
 * stack decodes whole (not truncated by bad memory) into at least one frame
 * with a line number; every code object on it passed pycode_get's "code"
 * type-name check and its names decoded as str.
 */
static bool frames_decode(struct pyrt *rt, spy_addr_t interp)
{
	const struct pyoffsets *o = &rt->off;
	struct spy_stack st = SPY_STACK_INIT;
	spy_addr_t t = 0;
	bool ok = false;

	(void)spy_mem_read_addr(rt->mem, interp + o->interp_tstate_head, &t);
	for (size_t n = 0; t && n < 16 && !ok; n++) {
		struct py_thread th;
		memset(&th, 0, sizeof(th));
		th.tstate = t;
		th.interp = interp;
		spy_stack_reset(&st);
		if (rt->walk(rt, &th, &st) == 0 && st.n > 0 && !st.truncated) {
			for (size_t i = 0; i < st.n && !ok; i++) {
				ok = st.v[i].line > 0;
			}
		}
		if (spy_mem_read_addr(rt->mem, t + o->tstate_next, &t) < 0) {
			break;
		}
	}
	spy_stack_release(&st);
	return ok;
}

static void pick_strategies(struct pyrt *rt)
{
	rt->walk = rt->off.frame_model == PYFRAME_OBJECT ? pyrt_walk_frameobj : pyrt_walk_iframe;
	switch (rt->off.gil_model) {
	case PYGIL_TSTATE_CURRENT:
		rt->gil_holder = pyrt_gil_tstate_current;
		break;
	case PYGIL_RUNTIME:
		rt->gil_holder = pyrt_gil_runtime;
		break;
	default:
		rt->gil_holder = pyrt_gil_interp;
		break;
	}
}

/* Forget one attempt's layout, so that another version can be tried. */
static void reset_attempt(struct pyrt *rt)
{
	pycode_cache_release(rt);
	memset(&rt->off, 0, sizeof(rt->off));
	rt->runtime = rt->interp_head_var = rt->interp_fixed = 0;
	rt->code_type = rt->str_type = rt->bytes_type = 0;
	rt->cache_hits = rt->cache_misses = 0;
	rt->walk = NULL;
	rt->gil_holder = NULL;
	rt->interp_source = NULL;
}

/*
 * Set rt up for one candidate version: row, debug offsets, interpreter,
 * validation. strict: also demand that the interpreter look real (find.c),
 * for when the version itself is in doubt.
 */
static int attempt(struct pyrt *rt, const struct pyrt_hints *h, spy_addr_t runtime, bool cookie,
		   const struct vcand *vc, bool strict, struct spy_err *err)
{
	uint32_t v = vc->version;
	unsigned major = v >> 24, minor = (v >> 16) & 0xff;
	const struct pyoffsets *newest = pyoffsets_newest();
	bool future = false;
	int rc;

	rt->version = v;
	rt->version_source = vc->source;
	if (major != 2 && major != 3) {
		return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: cannot tell its version",
				   binary_name(h));
	}
	/* A free-threaded build says so in its table (3.13+), and has rows
	 * of its own: its object header and bytecode differ. */
	int ft = cookie ? pyrt_debug_free_threaded(rt->mem, runtime, pydebug_layout_for(v)) : 0;
	const struct pyoffsets *row = pyoffsets_find_build(v, ft == 1 ? PYBUILD_FT : PYBUILD_DEFAULT);
	if (ft == 1 && !row) {
		return spy_err_set(err, SPY_EVERSION,
				   "Python %u.%u: unsupported layout (free-threaded build; spy has no "
				   "free-threaded layout for %u.%u)", major, minor, major, minor);
	}
	if (row) {
		rt->off = *row;
		/* Quirks are keyed on the micro version: only for an exact
		 * version (a release level is set), never for a file-name guess. */
		unsigned nq = (v & 0xf0) ? pyoffsets_apply_quirks(&rt->off, v) : 0;
		if (nq) {
			spy_log(SPY_LOG_DEBUG, "pystate: %u per-micro exceptions applied for 0x%08x", nq, v);
		}
	} else if (pyoffsets_is_future(v) && pydebug_layout_for(v)) {
		rt->off = *newest;
		rt->off.version = v & 0xffff0000u;
		rt->off.source = "the newest row, refined by the target's _Py_DebugOffsets";
		rt->off.dbg = *pydebug_layout_for(v);
		future = true;
	} else {
		return spy_err_set(err, SPY_EVERSION,
				   "Python %u.%u: unsupported layout (spy knows 2.7 and 3.6-%u.%u)", major, minor, newest->version >> 24, (newest->version >> 16) & 0xff);
	}
	/* From 3.13 every layout comes from the target's own table. */
	if (rt->off.dbg.size && !cookie) {
		return spy_err_set(err, SPY_EVERSION,
				   "Python %u.%u: unsupported layout (no _Py_DebugOffsets found)", major, minor);
	}
	format_version(rt);
	if (rt->off.rt_interpreters_head != PYOFF_NONE) {
		if (!runtime && !has_data(h)) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: no _PyRuntime",
					   binary_name(h));
		}
		rt->runtime = runtime;
	} else {
		rt->interp_head_var = h->interp_head;
	}
	if (rt->off.dbg.size && (rc = pyrt_apply_debug_offsets(rt, binary_name(h), err)) < 0) {
		return rc;
	}
	compute_spans(rt);
	if (rt->tstate_span > PYRT_MAX_SPAN || rt->frame_span > PYRT_MAX_SPAN ||
	    rt->code_span > PYRT_MAX_SPAN) {
		return spy_err_set(err, SPY_EVERSION, "Python %u.%u: unsupported layout (structs too large)",
				   major, minor);
	}

	bool checked;
	spy_addr_t interp = pyrt_find_interp(rt, h, &checked);
	if (runtime && runtime != h->runtime && rt->runtime == runtime) {
		rt->interp_source = "data scan (_Py_DebugOffsets cookie)";
	}
	if (!interp || (!checked && !pyrt_interp_ok(rt, interp, strict && !future))) {
		if (future) {
			return spy_err_set(err, SPY_EVERSION,
					   "Python %u.%u: unsupported layout "
					   "(its _Py_DebugOffsets do not lead to a valid interpreter)",
					   major, minor);
		}
		if (rt->off.rt_interpreters_head != PYOFF_NONE && !rt->runtime) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: no _PyRuntime",
					   binary_name(h));
		}
		if (!interp) {
			return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: no interpreter yet",
					   binary_name(h));
		}
		return spy_err_set(err, SPY_ENOPY,
				   "no Python interpreter found in %s: Python %s interpreter at 0x%llx does not validate",
				   binary_name(h), rt->version_str, (unsigned long long)interp);
	}

	pick_strategies(rt);
	pycode_cache_init(rt);
	if (future && !frames_decode(rt, interp)) {
		return spy_err_set(err, SPY_EVERSION,
				   "Python %u.%u: unsupported layout (no frame decodes with its _Py_DebugOffsets)",
				   major, minor);
	}
	spy_log(SPY_LOG_DEBUG, "pystate: Python %s (version from %s), layout %s, interp 0x%llx via %s",
		rt->version_str, rt->version_source, rt->off.source, (unsigned long long)interp,
		rt->interp_source ? rt->interp_source : "?");
	return 0;
}

int pyrt_new(struct pyrt **out, const struct spy_mem *mem, const struct pyrt_hints *hints,
	     struct spy_strtab *strs, struct spy_err *err)
{
	struct pyrt *rt = spy_xcalloc(1, sizeof(*rt));
	struct spy_err first = SPY_ERR_INIT;
	int rc = 0, first_rc = 0;

	*out = NULL;
	rt->mem = mem;
	rt->strs = strs;
	rt->pid = hints->pid;
	rt->tstate_current = hints->tstate_current;
	memcpy(rt->gil_static, hints->gil_static, sizeof(rt->gil_static));
	memcpy(rt->gil_static_size, hints->gil_static_size, sizeof(rt->gil_static_size));
	rt->gil_lock_ptr = hints->gil_lock_ptr;
	rt->gil_lock_size = hints->gil_lock_size;

	if (!hints->runtime && !hints->interp_head && !hints->interp_head_fn && !hints->tstate_current &&
	    !has_data(hints)) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s", binary_name(hints));
		goto fail;
	}
	/* 3.13+ without _PyRuntime's symbol or section: its cookie is in .data. */
	spy_addr_t runtime = hints->runtime;
	if (!runtime && has_data(hints)) {
		runtime = pyrt_scan_cookie(mem, hints->data_lo, hints->data_hi);
	}
	bool cookie = read_cookie(mem, runtime);
	struct vcand vc[2];
	size_t nv = version_candidates(rt, hints, runtime, cookie, vc);
	if (nv == 0) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: cannot tell its version",
				 binary_name(hints));
		goto fail;
	}
	for (size_t i = 0; i < nv; i++) {
		struct spy_err e = SPY_ERR_INIT;
		rc = attempt(rt, hints, runtime, cookie, &vc[i], nv > 1, &e);
		if (rc == 0) {
			break;
		}
		if (i == 0) {
			/* The most trusted candidate's failure is the one to report. */
			first = e;
			first_rc = rc;
		}
		reset_attempt(rt);
	}
	if (rc < 0) {
		if (err) {
			*err = first;
		}
		rc = first_rc;
		goto fail;
	}
	rt->unknown = spy_strtab_interns(strs, "<unknown>");
	*out = rt;
	return 0;
fail:
	pycode_cache_release(rt);
	spy_hmap_release(&rt->seen);
	free(rt);
	return rc;
}

static int counted_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	struct pyrt_counted *c = ctx;
	c->reads++;
	return c->in->read(c->in->ctx, addr, dst, len);
}

static const void *counted_peek(void *ctx, spy_addr_t addr, size_t len)
{
	struct pyrt_counted *c = ctx;
	c->reads++;
	return spy_mem_peek(c->in, addr, len);
}

void pyrt_count_begin(struct pyrt *rt, struct pyrt_counted *c)
{
	*c = (struct pyrt_counted){ { .read = counted_read, .peek = counted_peek, .ctx = c,
				      .maps = rt->mem->maps, .nmaps = rt->mem->nmaps },
				    rt->mem, 0 };
	rt->mem = &c->m;
}

void pyrt_count_end(struct pyrt *rt, struct pyrt_counted *c)
{
	rt->mem = c->in;
}

void pyrt_free(struct pyrt *rt)
{
	if (!rt) {
		return;
	}
	if (rt->walks) {
		spy_log(SPY_LOG_DEBUG, "pystate: %llu stacks walked, %llu spliced; frames memoized %llu, decoded %llu; code objects cached %llu, read %llu",
			(unsigned long long)rt->walks, (unsigned long long)rt->splice_hits,
			(unsigned long long)rt->memo_hits,
			(unsigned long long)rt->memo_misses, (unsigned long long)rt->cache_hits,
			(unsigned long long)rt->cache_misses);
	}
	pycode_cache_release(rt);
	free(rt->names);
	spy_hmap_release(&rt->name_index);
	free(rt->async);
	pyrt_spans_free(rt);
	free(rt->tmp);
	free(rt->nest);
	spy_stack_release(&rt->outer_stack);
	free(rt->frames);
	free(rt->anchors);
	free(rt->splice_shims);
	spy_hmap_release(&rt->seen);
	free(rt);
}

uint32_t pyrt_version(const struct pyrt *rt)
{
	return rt->version;
}

const char *pyrt_version_string(const struct pyrt *rt)
{
	return rt->version_str;
}

/*
 * Before 3.11 the tstate has only pthread_t, which on glibc is the address
 * of the thread's struct pthread. Its tid field's offset depends on the libc
 * build, so find it: the main thread's struct holds the process pid as its
 * tid. An offset where *another* thread also holds the pid is a pid field
 * (old glibc), not the tid. glibc 2.36's 0x2d0 is preferred when it fits.
 */
#define PTHREAD_SCAN 0x800

static void discover_tid_off(struct pyrt *rt, const struct py_thread *th, size_t n)
{
	unsigned char buf[PTHREAD_SCAN];
	uint32_t cand[PTHREAD_SCAN / 4];
	size_t ncand = 0;
	size_t main_i = n;

	rt->tid_tried = true;
	if (rt->pid <= 0 || n == 0) {
		return;
	}
	for (size_t i = 0; i < n && main_i == n; i++) {
		if (!spy_mem_plausible(rt->mem, th[i].thread_id, 8) ||
		    spy_mem_read(rt->mem, th[i].thread_id, buf, sizeof(buf)) < 0) {
			continue;
		}
		for (uint32_t off = 0; off < sizeof(buf); off += 4) {
			if ((int32_t)pyrt_u32(buf, off) == rt->pid) {
				cand[ncand++] = off;
			}
		}
		if (ncand) {
			main_i = i;
		}
	}
	for (size_t k = 0; k < ncand; k++) {
		bool ok = true;
		for (size_t i = 0; i < n && ok; i++) {
			int32_t v;
			if (i == main_i) {
				continue;
			}
			if (spy_mem_read(rt->mem, th[i].thread_id + cand[k], &v, sizeof(v)) < 0 ||
			    v == rt->pid || v <= 0 || v > (1 << 22)) {
				ok = false;
			}
		}
		if (!ok) {
			continue;
		}
		if (!rt->tid_off || cand[k] == 0x2d0) {
			rt->tid_off = cand[k];
		}
	}
	spy_log(SPY_LOG_DEBUG, "pystate: pthread tid offset 0x%x", rt->tid_off);
}

static void fill_native_tids(struct pyrt *rt, struct py_thread *th, size_t n)
{
	if (rt->off.tstate_native_thread_id != PYOFF_NONE) {
		return;
	}
	if (!rt->tid_tried) {
		discover_tid_off(rt, th, n);
	}
	if (!rt->tid_off) {
		return;
	}
	for (size_t i = 0; i < n; i++) {
		int32_t v;
		if (spy_mem_plausible(rt->mem, th[i].thread_id, 8) &&
		    spy_mem_read(rt->mem, th[i].thread_id + rt->tid_off, &v, sizeof(v)) == 0 && v > 0) {
			th[i].native_tid = th[i].own_tid = v;
		}
	}
}

/*
 * One interpreter's threads, appended to rt->tmp from *k, newest first as
 * the list keeps them. Returns false when the list was cut (bad pointer,
 * back-pointer mismatch, cycle, bound).
 */
/* tstate (copied to buf) of a free-threaded build is attached (_Py_THREAD_ATTACHED). */
static bool attached(const struct pyrt *rt, const unsigned char *buf)
{
	return (rt->off.build & PYBUILD_FT) && rt->off.tstate_state != PYOFF_NONE &&
	       pyrt_u32(buf, rt->off.tstate_state) == 1;
}

/*
 * PyThreadState._status (3.12+), a bit field the offsets table does not
 * carry: right after interp on 3.12, after eval_breaker from 3.13 (the
 * headers of 3.12-3.15 and 3.13t agree), its bound_gilstate bit the
 * fourth. PYOFF_NONE before 3.12 or where the span does not reach it.
 */
#define STATUS_BOUND_GILSTATE 0x8u

static uint32_t status_off(const struct pyrt *rt)
{
	uint32_t off = rt->off.tstate_interp + (pyrt_version(rt) >= 0x030d0000 ? 16 : 8);
	if (pyrt_version(rt) < 0x030c0000 || rt->off.tstate_interp == PYOFF_NONE ||
	    off + 4 > rt->tstate_span) {
		return PYOFF_NONE;
	}
	return off;
}

static bool interp_threads(struct pyrt *rt, spy_addr_t interp, size_t *k)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char buf[PYRT_MAX_SPAN];
	spy_addr_t t, holder = rt->gil_holder(rt, interp);
	int64_t id = 0;
	uint32_t status = status_off(rt);

	if (o->interp_id != PYOFF_NONE) {
		(void)spy_mem_read(rt->mem, interp + o->interp_id, &id, sizeof(id));
	}
	if (spy_mem_read_addr(rt->mem, interp + o->interp_tstate_head, &t) < 0) {
		return false;
	}
	while (t) {
		if (*k >= SPY_MAX_THREADS || pyrt_seen(rt, t) || !spy_mem_plausible(rt->mem, t, 8) ||
		    spy_mem_read(rt->mem, t, buf, rt->tstate_span) < 0 ||
		    pyrt_u64(buf, o->tstate_interp) != interp) {
			return false;
		}
		SPY_GROW(rt->tmp, rt->tmp_alloc, *k + 1);
		struct py_thread *p = &rt->tmp[(*k)++];
		memset(p, 0, sizeof(*p));
		p->tstate = t;
		p->interp = interp;
		p->interp_id = id;
		p->thread_id = pyrt_u64(buf, o->tstate_thread_id);
		if (o->tstate_native_thread_id != PYOFF_NONE) {
			p->native_tid = (int32_t)pyrt_u32(buf, o->tstate_native_thread_id);
			p->own_tid = p->native_tid;
		}
		p->holds_gil = holder && holder == t;
		p->attached = attached(rt, buf);
		p->gilstate = status != PYOFF_NONE && (pyrt_u32(buf, status) & STATUS_BOUND_GILSTATE);
		/*
		 * Not bound to an OS thread yet (a thread starting: threading
		 * makes its state before the thread runs; a sub-interpreter's
		 * being entered), so no thread of its own: left out, or it
		 * would be a TID-0 thread with no frames, and cost a tick the
		 * whole-process pause.
		 */
		if (status != PYOFF_NONE && !p->thread_id && !p->native_tid) {
			(*k)--;
		}
		t = pyrt_u64(buf, o->tstate_next);
	}
	return true;
}

static int nest_cmp(const void *a, const void *b)
{
	const struct pynest_key *x = a, *y = b;
	if (x->tid != y->tid) {
		return x->tid < y->tid ? -1 : 1;
	}
	return x->at < y->at ? -1 : x->at > y->at;
}

/*
 * Which of the thread states g[0..m) of one OS thread it runs in now.
 * Attaching a thread state binds it for PyGILState, unbinding the one
 * before, and detaching (a wait, a sleep) leaves it bound: the one bound
 * is the one entered last, whether or not it runs. Failing that (a
 * thread state being swapped), the one holding its GIL or attached, else
 * the newest interpreter's.
 */
static size_t innermost(const struct py_thread *v, const struct pynest_key *g, size_t m)
{
	size_t pick = m, bound = 0;
	for (size_t i = 0; i < m; i++) {
		if (v[g[i].at].gilstate) {
			pick = i;
			bound++;
		}
	}
	if (bound == 1) {
		return pick;
	}
	for (size_t i = 0; i < m; i++) {
		if (v[g[i].at].holds_gil || v[g[i].at].attached) {
			return i;
		}
	}
	pick = 0;
	for (size_t i = 1; i < m; i++) {
		pick = v[g[i].at].interp_id > v[g[pick].at].interp_id ? i : pick;
	}
	return pick;
}

/*
 * The m thread states g[0..m) (m <= PYRT_MAX_NEST + 1, of distinct
 * interpreters) of one OS thread become one entry, at the first one's
 * place: the innermost, the others its outer[], nearest first. Which of
 * those was entered from which the thread states do not say; more than two
 * levels are taken to go from the newest interpreter outward (a
 * sub-interpreter is most often entered from the main one, id 0). The
 * entries merged away are marked with tstate 0.
 */
static void nest_group(struct py_thread *v, const struct pynest_key *g, size_t m)
{
	size_t in = innermost(v, g, m);
	bool used[PYRT_MAX_NEST + 1] = { false };
	struct py_thread t = v[g[in].at];
	used[in] = true;
	t.nouter = 0;
	for (size_t r = 1; r < m; r++) {
		size_t best = m;
		for (size_t i = 0; i < m; i++) {
			if (!used[i] && (best == m || v[g[i].at].interp_id > v[g[best].at].interp_id)) {
				best = i;
			}
		}
		used[best] = true;
		const struct py_thread *o = &v[g[best].at];
		t.outer[t.nouter++] = (struct py_outer){ o->tstate, o->interp, o->interp_id };
	}
	for (size_t i = 1; i < m; i++) {
		v[g[i].at].tstate = 0;
	}
	v[g[0].at] = t;
}

/* Whether the thread states g[0..m) are each of another interpreter. */
static bool distinct_interps(const struct py_thread *v, const struct pynest_key *g, size_t m)
{
	for (size_t i = 0; i < m; i++) {
		for (size_t j = i + 1; j < m; j++) {
			if (v[g[i].at].interp == v[g[j].at].interp) {
				return false;
			}
		}
	}
	return true;
}

/*
 * One entry per OS thread: the thread states rt->tmp[0..*k) of one
 * native TID in several interpreters (a thread that entered a
 * sub-interpreter, 3.12+) are merged (nest_group); *k shrinks to match.
 * Two of one interpreter (a dead thread's state, its TID reused) are left
 * alone, as are more than PYRT_MAX_NEST + 1.
 */
static void nest_threads(struct pyrt *rt, size_t *k)
{
	size_t n = *k, m = 0;
	struct py_thread *v = rt->tmp;
	if (n < 2 || status_off(rt) == PYOFF_NONE) {
		return;
	}
	SPY_GROW(rt->nest, rt->nest_alloc, n);
	for (size_t i = 0; i < n; i++) {
		if (v[i].native_tid > 0) {
			rt->nest[m++] = (struct pynest_key){ v[i].native_tid, (uint32_t)i };
		}
	}
	qsort(rt->nest, m, sizeof(*rt->nest), nest_cmp);
	bool merged = false;
	for (size_t a = 0, b; a < m; a = b) {
		for (b = a + 1; b < m && rt->nest[b].tid == rt->nest[a].tid; b++) {
		}
		if (b - a > 1 && b - a <= PYRT_MAX_NEST + 1 && distinct_interps(v, rt->nest + a, b - a)) {
			nest_group(v, rt->nest + a, b - a);
			merged = true;
		}
	}
	if (!merged) {
		return;
	}
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i].tstate) {
			v[kept++] = v[i];
		}
	}
	*k = kept;
}

int pyrt_threads(struct pyrt *rt, struct py_thread *out, size_t max, size_t *n, struct spy_err *err)
{
	spy_addr_t interps[SPY_MAX_INTERPS];
	size_t ni = 0, k = 0;
	bool cut = false;

	*n = 0;
	spy_addr_t ip = pyrt_first_interp(rt);
	while (ip) {
		spy_addr_t next;
		bool loop = false;
		for (size_t i = 0; i < ni && !loop; i++) {
			loop = interps[i] == ip;
		}
		if (ni >= SPY_MAX_INTERPS || loop || !spy_mem_plausible(rt->mem, ip, 8) ||
		    spy_mem_read_addr(rt->mem, ip + rt->off.interp_next, &next) < 0) {
			cut = true;
			break;
		}
		interps[ni++] = ip;
		ip = next;
	}
	/* New interpreters and threads are pushed at the head: reverse both
	 * so the main interpreter and its oldest thread come first. One seen-set
	 * generation for all lists: a tstate on two lists is a loop too. */
	pyrt_seen_reset(rt);
	for (size_t i = ni; i-- > 0;) {
		size_t from = k;
		if (!interp_threads(rt, interps[i], &k)) {
			cut = true;
		}
		for (size_t a = from, b = k; a + 1 < b; a++, b--) {
			struct py_thread tmp = rt->tmp[a];
			rt->tmp[a] = rt->tmp[b - 1];
			rt->tmp[b - 1] = tmp;
		}
	}
	fill_native_tids(rt, rt->tmp, k);
	if (ni > 1) {
		nest_threads(rt, &k);
	}
	if (k && max) {
		/* rt->tmp is still NULL when no thread was ever found */
		memcpy(out, rt->tmp, (k < max ? k : max) * sizeof(*out));
	}
	*n = k;
	if (cut) {
		spy_log(SPY_LOG_DEBUG, "pystate: thread walk cut short after %zu threads", k);
		if (k == 0) {
			return spy_err_set(err, SPY_ECORRUPT, "cannot walk the Python thread list");
		}
	}
	return 0;
}

/*
 * t's thread state read again: still t's (else -SPY_EGONE), its GIL,
 * attached and bound bits as they are now. An outer state (!own_id) is
 * known by its interpreter and TID only, its thread id read here.
 */
static int recheck_one(struct pyrt *rt, struct py_thread *t, bool own_id)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char buf[PYRT_MAX_SPAN];
	if (!spy_mem_plausible(rt->mem, t->tstate, 8) ||
	    spy_mem_read(rt->mem, t->tstate, buf, rt->tstate_span) < 0 ||
	    pyrt_u64(buf, o->tstate_interp) != t->interp ||
	    (own_id && pyrt_u64(buf, o->tstate_thread_id) != t->thread_id) ||
	    (o->tstate_native_thread_id != PYOFF_NONE &&
	     (int32_t)pyrt_u32(buf, o->tstate_native_thread_id) != t->own_tid)) {
		return -SPY_EGONE;
	}
	t->thread_id = pyrt_u64(buf, o->tstate_thread_id);
	/* A held thread can neither take the GIL nor release it. */
	spy_addr_t holder = rt->gil_holder(rt, t->interp);
	t->holds_gil = holder && holder == t->tstate;
	t->attached = attached(rt, buf);
	uint32_t status = status_off(rt);
	t->gilstate = status != PYOFF_NONE && (pyrt_u32(buf, status) & STATUS_BOUND_GILSTATE);
	return 0;
}

/*
 * A thread listed inside a sub-interpreter may have left it, or one listed
 * about to enter (its new thread state made, not yet swapped in) be inside
 * now: which of its thread states is innermost is chosen again from their
 * bits as they are while it is held. Those freed since the listing (a
 * sub-interpreter's left: 3.13 frees its state each time) drop out.
 */
int pyrt_thread_recheck(struct pyrt *rt, struct py_thread *t)
{
	if (!t->nouter) {
		return recheck_one(rt, t, true);
	}
	struct py_thread v[PYRT_MAX_NEST + 1];
	struct pynest_key g[PYRT_MAX_NEST + 1];
	size_t m = 0;
	for (size_t k = 0; k <= t->nouter && k <= PYRT_MAX_NEST; k++) {
		v[m] = *t;
		v[m].nouter = 0;
		if (k) {
			v[m].tstate = t->outer[k - 1].tstate;
			v[m].interp = t->outer[k - 1].interp;
			v[m].interp_id = t->outer[k - 1].interp_id;
		}
		if (recheck_one(rt, &v[m], k == 0) == 0) {
			g[m] = (struct pynest_key){ t->native_tid, (uint32_t)m };
			m++;
		}
	}
	if (!m) {
		return -SPY_EGONE;
	}
	nest_group(v, g, m);
	*t = v[0];
	return 0;
}

bool pyrt_gil_freezes(struct pyrt *rt, const struct py_thread *holder, const struct py_thread *t)
{
	if (!holder->holds_gil || !holder->tstate || !rt->gil_holder) {
		return false;
	}
	return t->interp == holder->interp || rt->gil_holder(rt, t->interp) == holder->tstate;
}

/* The `<interpreter N>` frame for interpreter id. */
static const char *interp_frame(struct pyrt *rt, int64_t id)
{
	char b[48];
	snprintf(b, sizeof(b), "<interpreter %lld>", (long long)id);
	return spy_strtab_interns(rt->strs, b);
}

/*
 * Thread t's k-th outer thread state (see py_thread), entered from into
 * interpreter id: its stack appended to out below an `<interpreter ID>`
 * frame, which rt->frames (the Python frames) does not count. Walked apart, as a thread of its own (the frame memo and
 * the splice keep a record per thread state). A stack that cannot be read
 * leaves out truncated at the marker.
 */
static void walk_outer(struct pyrt *rt, const struct py_thread *t, size_t k, int64_t id, struct spy_stack *out)
{
	struct py_thread o = *t;
	o.tstate = t->outer[k].tstate;
	o.interp = t->outer[k].interp;
	o.interp_id = t->outer[k].interp_id;
	o.nouter = 0;
	o.holds_gil = o.attached = false;
	struct spy_frame *f = spy_stack_push_synthetic(out, interp_frame(rt, id));
	spy_stack_reset(&rt->outer_stack);
	if (rt->walk(rt, &o, &rt->outer_stack) < 0) {
		f->flags |= SPY_FRAME_TRUNCATED;
		out->truncated = 1;
		return;
	}
	spy_stack_append(out, rt->outer_stack.v, rt->outer_stack.n);
	out->truncated = rt->outer_stack.truncated;
}

int pyrt_stack(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out, struct spy_err *err)
{
	rt->keep_frames = true;
	rt->nframes = 0;
	rt->nanchors = 0;
	int rc = rt->walk(rt, t, out);
	if (rc < 0) {
		return spy_err_set(err, -rc, "cannot read the frames of thread %llu",
				   (unsigned long long)t->thread_id);
	}
	int64_t id = t->interp_id;
	for (size_t k = 0; k < t->nouter && k < PYRT_MAX_NEST && !out->truncated; k++) {
		walk_outer(rt, t, k, id, out);
		id = t->outer[k].interp_id;
	}
	return 0;
}

size_t pyrt_stack_anchors(const struct pyrt *rt, const spy_addr_t **out)
{
	*out = rt->anchors;
	return rt->anchors ? rt->nanchors : 0;
}
