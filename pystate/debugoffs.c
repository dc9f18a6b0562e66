/*
 * Reading the target's own _Py_DebugOffsets (3.13+): the table CPython
 * fills with offsetof/sizeof of its own structures at the start of
 * _PyRuntime (docs/cpython-internals.md §4), decoded with a descriptor of
 * the table's layout (the row's own, generated from that version's headers,
 * or for a version newer than every row the newest one we have).
 *
 * Every value the table has is taken from the target, never from the row:
 * patch releases move fields (3.13.18's thread state is 8 bytes larger than
 * 3.13.0's), and the target knows its own build (debug, free-threaded). So
 * the table must be sane: one impossible value or struct size refuses the
 * whole layout, before anything is followed. The row supplies only what the
 * table lacks (models, enum values, _PyStackRef tags, fields for locals).
 */
#include <string.h>

#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"

/* The end of the last 8-byte field among offs (absent ones skipped). */
static size_t end_of(const uint32_t *offs, size_t n)
{
	size_t end = 0;
	for (size_t i = 0; i < n; i++) {
		if (offs[i] != PYOFF_NONE && offs[i] + 8 > end) {
			end = offs[i] + 8;
		}
	}
	return end;
}

/*
 * Sanity of the layout the target's table describes: struct sizes in range,
 * and every field we read inside its struct.
 */
static bool debug_sizes_sane(const struct pyoffsets *o, uint64_t tsz, uint64_t fsz, uint64_t csz)
{
	uint32_t ts[] = { o->tstate_next, o->tstate_interp, o->tstate_current_frame,
			  o->tstate_thread_id, o->tstate_native_thread_id };
	uint32_t fr[] = { o->iframe_previous, o->iframe_code, o->iframe_instr };
	/* Every field read out of a code object's copy (code.c, locals.c), the
	 * table's own included: a target's small code size must cover them all. */
	uint32_t co[] = { o->code_filename, o->code_name, o->code_qualname, o->code_linetable,
			  o->code_argcount, o->code_flags, o->code_varnames, o->code_nlocals,
			  o->code_kwonlyargcount, o->code_cellvars, o->code_freevars,
			  o->code_nlocalsplus, o->code_localspluskinds, o->code_firsttraceable,
			  o->code_code, o->code_tlbc };
	if (tsz < 0x40 || tsz > 0x10000 || fsz < 0x20 || fsz > PYRT_MAX_SPAN || csz < 0x40 ||
	    csz > PYRT_MAX_SPAN) {
		return false;
	}
	return end_of(ts, SPY_ARRAY_SIZE(ts)) <= tsz && end_of(fr, SPY_ARRAY_SIZE(fr)) <= fsz &&
	       o->iframe_owner < fsz && end_of(co, SPY_ARRAY_SIZE(co)) <= csz &&
	       o->code_firstlineno + 4 <= csz && o->code_adaptive <= csz;
}

int pyrt_debug_free_threaded(const struct spy_mem *mem, spy_addr_t runtime,
			     const struct pydebug_layout *d)
{
	uint64_t v;
	if (!d || d->free_threaded == PYOFF_NONE ||
	    spy_mem_read(mem, runtime + d->free_threaded, &v, sizeof(v)) < 0 || v > 1) {
		return -1;
	}
	return (int)v;
}

/*
 * 3.13+: take the layout from the target's own _Py_DebugOffsets, so a micro
 * release that moved a field still walks, and a newer minor release can walk
 * at all. Fields the table lacks stay from the row.
 */
int pyrt_apply_debug_offsets(struct pyrt *rt, const char *binary, struct spy_err *err)
{
	const struct pydebug_layout *d = &rt->off.dbg;
	unsigned major = rt->version >> 24, minor = (rt->version >> 16) & 0xff;
	unsigned char buf[0x400];
	if (d->size == 0 || d->size > sizeof(buf)) {
		return 0;
	}
	if (spy_mem_read(rt->mem, rt->runtime, buf, d->size) < 0) {
		return spy_err_set(err, SPY_ENOPY,
				   "no Python interpreter found in %s: cannot read _Py_DebugOffsets", binary);
	}
	if (pyrt_u64(buf, d->free_threaded) != ((rt->off.build & PYBUILD_FT) != 0)) {
		return spy_err_set(err, SPY_EVERSION,
				   "Python %u.%u: unsupported layout (its _Py_DebugOffsets hold impossible values)",
				   major, minor);
	}
	struct pyoffsets *o = &rt->off;
	uint32_t adaptive_was = o->code_adaptive;
	int changed = 0, bad = 0;
	/* Each value is a uint64 offset; anything past 1 MiB is not a layout. */
#define DBG(field, dst)                                                        \
	do {                                                                   \
		if (d->field == PYOFF_NONE || d->field + 8 > d->size) {       \
			break;                                                 \
		}                                                              \
		uint64_t v_ = pyrt_u64(buf, d->field);                         \
		if (v_ >= (1u << 20)) {                                        \
			spy_log(SPY_LOG_DEBUG, "pystate: debug offsets: " #dst " impossible: 0x%llx", \
				(unsigned long long)v_);                       \
			bad++;                                                 \
		} else if (v_ != (dst)) {                                      \
			spy_log(SPY_LOG_DEBUG, "pystate: debug offsets: " #dst " 0x%x -> 0x%llx", \
				(unsigned)(dst), (unsigned long long)v_);      \
			(dst) = (uint32_t)v_;                                  \
			changed++;                                             \
		}                                                              \
	} while (0)
#define DBG_SAME(field) DBG(field, o->field);
	PYDEBUG_FIELDS(DBG_SAME)
	PYDEBUG_TASK_FIELDS(DBG_SAME)
	if (o->build & PYBUILD_FT) {
		/* A release build's table holds 0 for these: only read them where
		 * the row says the build has them. */
		PYDEBUG_FT_FIELDS(DBG_SAME)
	}
#undef DBG_SAME
#undef DBG
	/*
	 * _co_firsttraceable is not in the table. In 3.11, 3.12 and 3.13 alike
	 * it sits 0x10 before co_code_adaptive (int, padding, co_extra), so
	 * when the table moves co_code_adaptive, keep that relation.
	 */
	if (o->code_firsttraceable != PYOFF_NONE && o->code_adaptive != adaptive_was &&
	    o->code_firsttraceable < adaptive_was) {
		uint32_t gap = adaptive_was - o->code_firsttraceable;
		if (o->code_adaptive >= gap) {
			o->code_firsttraceable = o->code_adaptive - gap;
		}
	}
	/* The GIL values are relative to the interpreter; ours to the GIL struct. */
	uint64_t gs = pyrt_u64(buf, d->interp_gil_state);
	uint64_t lk = pyrt_u64(buf, d->interp_gil_locked), hd = pyrt_u64(buf, d->interp_gil_holder);
	if (gs && lk >= gs && hd >= gs && lk - gs < 0x1000 && hd - gs < 0x1000) {
		/* switch_number is not in the table: the row's stands while locked stays where the row has it. */
		if (lk - gs != o->gil_locked) {
			o->gil_switch_number = PYOFF_NONE;
		}
		o->gil_locked = (uint32_t)(lk - gs);
		o->gil_last_holder = (uint32_t)(hd - gs);
	} else {
		bad++;
	}
	/* Free-threaded: whether the GIL is on at all is another int of _gil,
	 * which the table gives relative to _gil itself (3.13-3.15:
	 * offsetof(struct _gil_runtime_state, enabled)), unlike the two above. */
	if (o->build & PYBUILD_FT) {
		uint64_t en = pyrt_u64(buf, d->interp_gil_enabled);
		if (en + 4 <= o->gil_size || (o->gil_size == PYOFF_NONE && en < 0x1000)) {
			o->gil_enabled = (uint32_t)en;
		} else {
			bad++;
		}
	}
	/* gc.collecting, relative to the gc state: ours is relative to the interp. */
	uint64_t gcs = pyrt_u64(buf, d->interp_gc), gcc = pyrt_u64(buf, d->gc_collecting);
	if (gcs && gcs < (1u << 20) && gcc < 0x1000) {
		o->interp_gc_collecting = (uint32_t)(gcs + gcc);
	} else {
		bad++;
	}
	/* Only the ASCII data offset is in the table; the compact header is
	 * PyASCIIObject + {utf8_length, utf8} in 3.12/3.13 (cpython/unicodeobject.h). */
	uint64_t asz = pyrt_u64(buf, d->str_ascii_size);
	if (asz && asz < 0x100 && asz != o->str_ascii_data) {
		o->str_compact_data = (uint32_t)(asz + (o->str_compact_data - o->str_ascii_data));
		o->str_ascii_data = (uint32_t)asz;
		changed++;
	} else if (asz == 0 || asz >= 0x100) {
		bad++;
	}
	uint64_t tsz = pyrt_u64(buf, d->tstate_size), fsz = pyrt_u64(buf, d->iframe_size);
	uint64_t csz = pyrt_u64(buf, d->code_size);
	bool sane = debug_sizes_sane(o, tsz, fsz, csz);
	spy_log(SPY_LOG_DEBUG,
		"pystate: _Py_DebugOffsets read, %d fields differ from the table, %d impossible, sizes %s",
		changed, bad, sane ? "sane" : "insane");
	if (bad || !sane) {
		return spy_err_set(err, SPY_EVERSION,
				   "Python %u.%u: unsupported layout (its _Py_DebugOffsets hold impossible values)",
				   major, minor);
	}
	o->tstate_size = (uint32_t)tsz;
	o->iframe_size = (uint32_t)fsz;
	o->code_size = (uint32_t)csz;
	return 0;
}

