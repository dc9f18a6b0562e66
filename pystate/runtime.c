/*
 * Finding the runtime (pyrt_new) and listing its threads (pyrt_threads).
 *
 * pyrt_new decides the version from the target itself, in order of trust:
 *   1. the _Py_DebugOffsets cookie "xdebugpy" at _PyRuntime (3.13+), whose
 *      version word follows it; the table's own offsets then refine the row;
 *   2. the exported Py_Version word (3.11+);
 *   3. the caller's hint (from the library's file name).
 * It then picks the layout row and strategies, finds the interpreter list
 * head, and accepts it only if every thread on the interpreter's list points
 * back at it (austin's check): a wrong version or a stale symbol fails here
 * rather than producing garbage stacks later.
 *
 * Why the interpreter-head lookup is a ladder of small functions: 3.7+ read
 * _PyRuntime.interpreters.head, but 2.7/3.6 keep a static interp_head that
 * stripped builds hide. The methods that work without it (decoding
 * PyInterpreterState_Head, following _PyThreadState_Current, and a .bss
 * scan) each slot in as one more rung without touching the walk.
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
			  o->tstate_current_frame };
	uint32_t fr[] = { o->frame_back, o->frame_code, o->frame_lasti, o->iframe_code,
			  o->iframe_previous, o->iframe_instr, o->iframe_owner, o->iframe_is_entry };
	uint32_t co[] = { o->ob_type, o->ob_size, o->code_firstlineno, o->code_filename,
			  o->code_name, o->code_qualname, o->code_linetable, o->code_firsttraceable };
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

/* The version ladder. Returns 0 with rt->version set, or 0 with it 0. */
static bool read_cookie(struct pyrt *rt, const struct pyrt_hints *h)
{
	char cookie[8];
	return h->runtime && spy_mem_read(rt->mem, h->runtime, cookie, sizeof(cookie)) == 0 &&
	       memcmp(cookie, PYDEBUG_COOKIE, sizeof(cookie)) == 0;
}

static void detect_version(struct pyrt *rt, const struct pyrt_hints *h, bool cookie)
{
	uint64_t v64;
	uint32_t v32;
	/* The cookie is followed by PY_VERSION_HEX as a uint64 (pycore_runtime.h 3.13). */
	if (cookie && spy_mem_read(rt->mem, h->runtime + 8, &v64, sizeof(v64)) == 0 &&
	    v64 <= UINT32_MAX) {
		rt->version = (uint32_t)v64;
		rt->version_source = "_Py_DebugOffsets";
		return;
	}
	if (h->py_version && spy_mem_read(rt->mem, h->py_version, &v32, sizeof(v32)) == 0) {
		rt->version = v32;
		rt->version_source = "Py_Version";
		return;
	}
	rt->version = h->version_hint;
	rt->version_source = "file name";
}

/*
 * 3.13+: take the layout from the target's own _Py_DebugOffsets where it
 * has one, so a micro release that moved a field still walks. Fields the
 * table lacks (cframe, _co_firsttraceable, str kinds) stay from the row.
 */
static int apply_debug_offsets(struct pyrt *rt, struct spy_err *err, const struct pyrt_hints *h)
{
	const struct pydebug_layout *d = &rt->off.dbg;
	unsigned char buf[0x400];
	if (d->size == 0 || d->size > sizeof(buf)) {
		return 0;
	}
	if (spy_mem_read(rt->mem, rt->runtime, buf, d->size) < 0) {
		return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: cannot read _Py_DebugOffsets",
				   binary_name(h));
	}
	if (pyrt_u64(buf, d->free_threaded)) {
		return spy_err_set(err, SPY_EVERSION, "Python %u.%u: unsupported layout (free-threaded build)",
				   rt->version >> 24, (rt->version >> 16) & 0xff);
	}
	struct pyoffsets *o = &rt->off;
	int changed = 0;
	/* Each value is a uint64 offset; anything past 1 MiB is not a layout. */
#define DBG(field, dst)                                                        \
	do {                                                                   \
		uint64_t v_ = pyrt_u64(buf, d->field);                         \
		if (d->field != PYOFF_NONE && v_ < (1u << 20) && v_ != (dst)) { \
			spy_log(SPY_LOG_DEBUG, "pystate: debug offsets: " #dst " 0x%x -> 0x%llx", \
				(unsigned)(dst), (unsigned long long)v_);      \
			(dst) = (uint32_t)v_;                                  \
			changed++;                                             \
		}                                                              \
	} while (0)
	DBG(rt_interpreters_head, o->rt_interpreters_head);
	DBG(interp_id, o->interp_id);
	DBG(interp_next, o->interp_next);
	DBG(interp_tstate_head, o->interp_tstate_head);
	DBG(interp_ceval_gil, o->interp_ceval_gil);
	DBG(tstate_next, o->tstate_next);
	DBG(tstate_interp, o->tstate_interp);
	DBG(tstate_current_frame, o->tstate_current_frame);
	DBG(tstate_thread_id, o->tstate_thread_id);
	DBG(tstate_native_thread_id, o->tstate_native_thread_id);
	DBG(iframe_previous, o->iframe_previous);
	DBG(iframe_code, o->iframe_code);
	DBG(iframe_instr, o->iframe_instr);
	DBG(iframe_owner, o->iframe_owner);
	DBG(code_filename, o->code_filename);
	DBG(code_name, o->code_name);
	DBG(code_qualname, o->code_qualname);
	DBG(code_linetable, o->code_linetable);
	DBG(code_firstlineno, o->code_firstlineno);
	DBG(code_adaptive, o->code_adaptive);
	DBG(ob_type, o->ob_type);
	DBG(type_name, o->type_name);
	DBG(bytes_sval, o->bytes_sval);
	DBG(str_state, o->str_state);
	DBG(str_length, o->str_length);
#undef DBG
	/* The GIL values are relative to the interpreter; ours to the GIL struct. */
	uint64_t gs = pyrt_u64(buf, d->interp_gil_state);
	uint64_t lk = pyrt_u64(buf, d->interp_gil_locked), hd = pyrt_u64(buf, d->interp_gil_holder);
	if (gs && lk >= gs && hd >= gs && lk - gs < 0x1000 && hd - gs < 0x1000) {
		o->gil_locked = (uint32_t)(lk - gs);
		o->gil_last_holder = (uint32_t)(hd - gs);
	}
	/* Only the ASCII data offset is in the table; the compact header is
	 * PyASCIIObject + {utf8_length, utf8} in 3.13 (cpython/unicodeobject.h). */
	uint64_t asz = pyrt_u64(buf, d->str_ascii_size);
	if (asz && asz < 0x100 && asz != o->str_ascii_data) {
		o->str_compact_data = (uint32_t)(asz + (o->str_compact_data - o->str_ascii_data));
		o->str_ascii_data = (uint32_t)asz;
		changed++;
	}
	spy_log(SPY_LOG_DEBUG, "pystate: _Py_DebugOffsets read, %d fields differ from the table", changed);
	return 0;
}

/* ---- the interpreter-head ladder ---- */

/* 3.7+: _PyRuntime.interpreters.head. */
static spy_addr_t head_from_runtime(struct pyrt *rt)
{
	spy_addr_t p = 0;
	if (rt->runtime && rt->off.rt_interpreters_head != PYOFF_NONE) {
		if (spy_mem_read_addr(rt->mem, rt->runtime + rt->off.rt_interpreters_head, &p) < 0) {
			return 0;
		}
	}
	return p;
}

/* 2.7/3.6: the static interp_head pointer variable. */
static spy_addr_t head_from_var(struct pyrt *rt)
{
	spy_addr_t p = 0;
	if (rt->interp_head_var && spy_mem_read_addr(rt->mem, rt->interp_head_var, &p) < 0) {
		return 0;
	}
	return p;
}

/*
 * 2.7/3.6 without .symtab: PyInterpreterState_Head() compiles to
 * `mov rax, [rip+disp32]; ret` (48 8b 05 d32 c3); its slot is interp_head.
 * Checked byte for byte: -O0 or instrumented builds simply do not match.
 */
static spy_addr_t head_from_fn(struct pyrt *rt, spy_addr_t fn)
{
	unsigned char code[8];
	int32_t disp;
	spy_addr_t p = 0;
	if (!fn || spy_mem_read(rt->mem, fn, code, sizeof(code)) < 0 || code[0] != 0x48 ||
	    code[1] != 0x8b || code[2] != 0x05 || code[7] != 0xc3) {
		return 0;
	}
	memcpy(&disp, code + 3, 4);
	spy_addr_t slot = fn + 7 + (spy_addr_t)(int64_t)disp;
	if (spy_mem_read_addr(rt->mem, slot, &p) < 0) {
		return 0;
	}
	rt->interp_head_var = slot;
	return p;
}

/* Does every thread of interp point back at it? Bounded, cycle-checked. */
static bool interp_valid(struct pyrt *rt, spy_addr_t interp)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t t;
	if (!spy_mem_plausible(rt->mem, interp, 8) ||
	    spy_mem_read_addr(rt->mem, interp + o->interp_tstate_head, &t) < 0) {
		return false;
	}
	pyrt_seen_reset(rt);
	for (size_t n = 0; t; n++) {
		spy_addr_t back, next;
		if (n >= SPY_MAX_THREADS || pyrt_seen(rt, t) || !spy_mem_plausible(rt->mem, t, 8) ||
		    spy_mem_read_addr(rt->mem, t + o->tstate_interp, &back) < 0 || back != interp ||
		    spy_mem_read_addr(rt->mem, t + o->tstate_next, &next) < 0) {
			return false;
		}
		t = next;
	}
	return true;
}

static spy_addr_t first_interp(struct pyrt *rt)
{
	return rt->runtime && rt->off.rt_interpreters_head != PYOFF_NONE ? head_from_runtime(rt)
									 : head_from_var(rt);
}

int pyrt_new(struct pyrt **out, const struct spy_mem *mem, const struct pyrt_hints *hints,
	     struct spy_strtab *strs, struct spy_err *err)
{
	struct pyrt *rt = spy_xcalloc(1, sizeof(*rt));
	int rc;
	rt->seen = spy_xcalloc(PYRT_SEEN_SLOTS, sizeof(*rt->seen));
	*out = NULL;
	rt->mem = mem;
	rt->strs = strs;
	rt->pid = hints->pid;
	rt->tstate_current = hints->tstate_current;

	bool cookie = read_cookie(rt, hints);
	detect_version(rt, hints, cookie);
	uint32_t major = rt->version >> 24, minor = (rt->version >> 16) & 0xff;
	if (!hints->runtime && !hints->interp_head && !hints->interp_head_fn) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s", binary_name(hints));
		goto fail;
	}
	if (major != 2 && major != 3) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: cannot tell its version",
				 binary_name(hints));
		goto fail;
	}
	const struct pyoffsets *row = pyoffsets_find(rt->version);
	if (!row) {
		rc = spy_err_set(err, SPY_EVERSION, "Python %u.%u: unsupported layout (spy knows 2.7 and 3.6-3.13)",
				 major, minor);
		goto fail;
	}
	rt->off = *row;
	format_version(rt);
	if (rt->off.rt_interpreters_head != PYOFF_NONE) {
		if (!hints->runtime) {
			rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: no _PyRuntime",
					 binary_name(hints));
			goto fail;
		}
		rt->runtime = hints->runtime;
	}
	if (cookie && (rc = apply_debug_offsets(rt, err, hints)) < 0) {
		goto fail;
	}
	rt->interp_head_var = hints->interp_head;
	compute_spans(rt);
	if (rt->tstate_span > PYRT_MAX_SPAN || rt->frame_span > PYRT_MAX_SPAN ||
	    rt->code_span > PYRT_MAX_SPAN) {
		rc = spy_err_set(err, SPY_EVERSION, "Python %u.%u: unsupported layout (structs too large)",
				 major, minor);
		goto fail;
	}

	spy_addr_t interp = first_interp(rt);
	if (!interp && !rt->runtime && hints->interp_head_fn) {
		interp = head_from_fn(rt, hints->interp_head_fn);
	}
	/* Later rungs (.bss scan over hints->data_lo..data_hi) go here. */
	if (!interp) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in %s: no interpreter yet",
				 binary_name(hints));
		goto fail;
	}
	if (!interp_valid(rt, interp)) {
		rc = spy_err_set(err, SPY_ENOPY,
				 "no Python interpreter found in %s: Python %s interpreter at 0x%llx does not validate",
				 binary_name(hints), rt->version_str, (unsigned long long)interp);
		goto fail;
	}

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
	pycode_cache_init(rt);
	rt->unknown = spy_strtab_interns(strs, "<unknown>");
	spy_log(SPY_LOG_DEBUG, "pystate: Python %s (version from %s), layout %s, interp 0x%llx",
		rt->version_str, rt->version_source, rt->off.source, (unsigned long long)interp);
	*out = rt;
	return 0;
fail:
	free(rt->seen);
	free(rt);
	return rc;
}

void pyrt_free(struct pyrt *rt)
{
	if (!rt) {
		return;
	}
	pycode_cache_release(rt);
	free(rt->tmp);
	free(rt->seen);
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
			th[i].native_tid = v;
		}
	}
}

/*
 * One interpreter's threads, appended to rt->tmp from *k, newest first as
 * the list keeps them. Returns false when the list was cut (bad pointer,
 * back-pointer mismatch, cycle, bound).
 */
static bool interp_threads(struct pyrt *rt, spy_addr_t interp, size_t *k)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char buf[PYRT_MAX_SPAN];
	spy_addr_t t, holder = rt->gil_holder(rt, interp);
	int64_t id = 0;

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
		}
		p->holds_gil = holder && holder == t;
		t = pyrt_u64(buf, o->tstate_next);
	}
	return true;
}

int pyrt_threads(struct pyrt *rt, struct py_thread *out, size_t max, size_t *n, struct spy_err *err)
{
	spy_addr_t interps[SPY_MAX_INTERPS];
	size_t ni = 0, k = 0;
	bool cut = false;

	*n = 0;
	spy_addr_t ip = first_interp(rt);
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
	memcpy(out, rt->tmp, (k < max ? k : max) * sizeof(*out));
	*n = k;
	if (cut) {
		spy_log(SPY_LOG_DEBUG, "pystate: thread walk cut short after %zu threads", k);
		if (k == 0) {
			return spy_err_set(err, SPY_ECORRUPT, "cannot walk the Python thread list");
		}
	}
	return 0;
}

int pyrt_stack(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out, struct spy_err *err)
{
	int rc = rt->walk(rt, t, out);
	if (rc < 0) {
		return spy_err_set(err, -rc, "cannot read the frames of thread %llu",
				   (unsigned long long)t->thread_id);
	}
	return 0;
}
