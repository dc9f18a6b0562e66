/*
 * Thread names as Python knows them: the name a program gave each
 * threading.Thread ("MainThread", "ThreadPoolExecutor-0_3", "heartbeat"),
 * where the kernel only knows "python3.11".
 *
 * The path, as the threading module keeps it (Lib/threading.py):
 *   interp->modules (sys.modules) ["threading"] -> the module's md_dict
 *   ["_active"]: a dict from the thread ident (threading.get_ident(), the
 *   tstate's thread_id) to the Thread object -> its "_name" attribute
 *   (2.7 name-mangles it: "_Thread__name").
 * That takes reading dicts of three layouts (offsets.h enum pydict_model)
 * and instance attributes of four (enum pyidict_model), each decoded from
 * a copy of the target's memory with every count and pointer checked: the
 * dicts are scanned, never hashed into, and a scan stops at
 * PYRT_DICT_MAX_ENTRIES entries.
 *
 * Threads started from C that never touched threading are not in _active:
 * they get no name here and keep the kernel's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "pystate/pystr.h"

/* Entries read from one dict at most (sys.modules of a big service: ~2000). */

/* Entries read per process_vm_readv. */
#define NAMES_CHUNK 128
/* The longest key we compare against (ours are short). */
#define NAMES_KEY_MAX 32


static int read_u8(struct pyrt *rt, spy_addr_t at, uint8_t *v)
{
	return spy_mem_read(rt->mem, at, v, 1);
}

static int read_i64(struct pyrt *rt, spy_addr_t at, int64_t *v)
{
	return spy_mem_read(rt->mem, at, v, sizeof(*v));
}

static int read_ptr(struct pyrt *rt, spy_addr_t at, spy_addr_t *p)
{
	return spy_mem_read_addr(rt->mem, at, p);
}

/*
 * The entries of a PyDictKeysObject (3.6+), values apart: values is the
 * split table's array (an instance's or a split dict's), else 0.
 */
static int keys_view(struct pyrt *rt, spy_addr_t keys, spy_addr_t values, struct dview *v)
{
	const struct pyoffsets *o = &rt->off;
	/* The header before the indices, in one read (samplers call this). */
	unsigned char hdr[64];
	if (o->dk_indices > sizeof(hdr) || !spy_mem_plausible(rt->mem, keys, 8) ||
	    spy_mem_read(rt->mem, keys, hdr, o->dk_indices) < 0) {
		return -SPY_ECORRUPT;
	}
	int64_t n = (int64_t)pyrt_u64(hdr, o->dk_nentries);
	if (n < 0 || n > PYRT_DICT_MAX_ENTRIES) {
		return -SPY_ECORRUPT;
	}
	memset(v, 0, sizeof(*v));
	v->n = (size_t)n;
	v->values = values;
	if (o->dict_model == PYDICT_COMPACT36) {
		int64_t size = (int64_t)pyrt_u64(hdr, o->dk_size);
		if (size <= 0 || size > 4 * PYRT_DICT_MAX_ENTRIES || (size & (size - 1))) {
			return -SPY_ECORRUPT;
		}
		/* DK_IXSIZE: the width of one index grows with the table. */
		uint64_t ix = size <= 0xff ? 1 : size <= 0xffff ? 2 : 4;
		v->entries = keys + o->dk_indices + (uint64_t)size * ix;
		v->stride = o->dict_entry_size;
		v->key_off = 8; /* me_hash, me_key, me_value */
		v->value_off = 16;
		return 0;
	}
	uint8_t log2_index_bytes = hdr[o->dk_log2_index_bytes], kind = hdr[o->dk_kind];
	if (log2_index_bytes > 20) {
		return -SPY_ECORRUPT;
	}
	v->entries = keys + o->dk_indices + ((uint64_t)1 << log2_index_bytes);
	if (kind == o->dk_kind_general) {
		v->stride = o->dict_entry_size;
		v->key_off = 8;
		v->value_off = 16;
	} else {
		v->stride = o->dict_uentry_size; /* me_key, me_value */
		v->key_off = 0;
		v->value_off = 8;
	}
	return 0;
}

int pyrt_dict_view(struct pyrt *rt, spy_addr_t dict, struct dview *v)
{
	const struct pyoffsets *o = &rt->off;
	if (!spy_mem_plausible(rt->mem, dict, 8)) {
		return -SPY_ECORRUPT;
	}
	if (o->dict_model == PYDICT_OPEN27) {
		int64_t mask;
		spy_addr_t table;
		if (read_i64(rt, dict + o->dict_mask, &mask) < 0 || mask < 0 ||
		    mask >= 4 * PYRT_DICT_MAX_ENTRIES || read_ptr(rt, dict + o->dict_table, &table) < 0) {
			return -SPY_ECORRUPT;
		}
		memset(v, 0, sizeof(*v));
		v->entries = table;
		v->n = (size_t)mask + 1;
		v->stride = o->dict_entry_size;
		v->key_off = 8;
		v->value_off = 16;
		return 0;
	}
	unsigned char hdr[64];
	uint32_t span = (o->dict_keys > o->dict_values ? o->dict_keys : o->dict_values) + 8;
	if (span > sizeof(hdr) || spy_mem_read(rt->mem, dict, hdr, span) < 0) {
		return -SPY_EMEM;
	}
	spy_addr_t keys = pyrt_u64(hdr, o->dict_keys), values = pyrt_u64(hdr, o->dict_values);
	if (values && o->dictvalues_values != PYOFF_NONE) {
		values += o->dictvalues_values;
	}
	return keys_view(rt, keys, values, v);
}

/* Reads NAMES_CHUNK entries at a time. */
int pyrt_dict_each(struct pyrt *rt, const struct dview *v, pyrt_entry_fn fn, void *ctx)
{
	unsigned char buf[NAMES_CHUNK * 24];
	spy_addr_t vals[NAMES_CHUNK];
	if (v->stride == 0 || v->stride > 24 || v->n > 4 * PYRT_DICT_MAX_ENTRIES ||
	    !spy_mem_plausible(rt->mem, v->entries, 8)) {
		return -SPY_ECORRUPT;
	}
	for (size_t i = 0; i < v->n; i += NAMES_CHUNK) {
		size_t k = v->n - i < NAMES_CHUNK ? v->n - i : NAMES_CHUNK;
		if (spy_mem_read(rt->mem, v->entries + (uint64_t)i * v->stride, buf, k * v->stride) < 0 ||
		    (v->values && spy_mem_read(rt->mem, v->values + 8 * (uint64_t)i, vals, k * 8) < 0)) {
			return -SPY_EMEM;
		}
		for (size_t j = 0; j < k; j++) {
			spy_addr_t key = pyrt_u64(buf, (uint32_t)(j * v->stride + v->key_off));
			spy_addr_t value = v->values ? vals[j] :
						       pyrt_u64(buf, (uint32_t)(j * v->stride + v->value_off));
			int rc;
			if (key && value && (rc = fn(rt, ctx, key, value)) != 0) {
				return rc;
			}
		}
	}
	return 0;
}

struct find_str {
	const char *want;
	spy_addr_t value;
};

static int match_str(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t value)
{
	struct find_str *f = ctx;
	char buf[NAMES_KEY_MAX];
	size_t len;
	int trunc;
	if (pystr_read(rt->mem, &rt->off, key, buf, sizeof(buf), &len, &trunc, NULL) == 0 && !trunc &&
	    len == strlen(f->want) && memcmp(buf, f->want, len) == 0) {
		f->value = value;
		return 1;
	}
	return 0;
}

/* The value of str key want in the view, or 0. */
static spy_addr_t view_get(struct pyrt *rt, const struct dview *v, const char *want)
{
	struct find_str f = { want, 0 };
	return pyrt_dict_each(rt, v, match_str, &f) == 1 ? f.value : 0;
}

spy_addr_t pyrt_dict_get(struct pyrt *rt, spy_addr_t dict, const char *want)
{
	struct dview v;
	return pyrt_dict_view(rt, dict, &v) < 0 ? 0 : view_get(rt, &v, want);
}

spy_addr_t pyrt_attr_get(struct pyrt *rt, spy_addr_t obj, const char *want)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t type, dict = 0, values = 0, keys = 0;
	uint64_t flags;
	int64_t basicsize, dictoffset;
	if (!spy_mem_plausible(rt->mem, obj, 8) || read_ptr(rt, obj + o->ob_type, &type) < 0 ||
	    !spy_mem_plausible(rt->mem, type, 8) ||
	    spy_mem_read(rt->mem, type + o->type_flags, &flags, sizeof(flags)) < 0 ||
	    read_i64(rt, type + o->type_basicsize, &basicsize) < 0 ||
	    read_i64(rt, type + o->type_dictoffset, &dictoffset) < 0 || basicsize <= 0 ||
	    basicsize > (1 << 20)) {
		return 0;
	}
	bool managed = o->tpflags_managed_dict != PYOFF_NONE && (flags & o->tpflags_managed_dict);
	switch (o->idict_model) {
	case PYIDICT_OFFSET:
		if (dictoffset > 0 && dictoffset < (1 << 20)) {
			(void)read_ptr(rt, obj + (uint64_t)dictoffset, &dict);
		}
		break;
	case PYIDICT_MANAGED311:
		if (managed) {
			(void)read_ptr(rt, obj - o->managed_values_off, &values);
			if (!values) {
				(void)read_ptr(rt, obj - o->managed_dict_off, &dict);
			}
		}
		break;
	case PYIDICT_TAGGED312:
		if (managed) {
			spy_addr_t w = 0;
			(void)read_ptr(rt, obj - o->managed_dict_off, &w);
			/* pycore_object.h _PyDictOrValues_GetValues: the word is
			 * the values' address minus one byte. */
			if (w & 1) {
				values = w + 1;
			} else {
				dict = w;
			}
		}
		break;
	default: { /* PYIDICT_INLINE313 */
		uint8_t valid = 0;
		if ((flags & o->tpflags_inline_values) &&
		    read_u8(rt, obj + (uint64_t)basicsize + o->dictvalues_valid, &valid) == 0 && valid) {
			values = obj + (uint64_t)basicsize;
		} else if (managed || (flags & o->tpflags_inline_values)) {
			(void)read_ptr(rt, obj - o->managed_dict_off, &dict);
		}
		break;
	}
	}
	if (!values && !dict && !managed && o->idict_model != PYIDICT_OFFSET && dictoffset > 0 &&
	    dictoffset < (1 << 20)) {
		/* 3.11+: a class derived from a C type that has its own dict
		 * slot (asyncio's _GatheringFuture) keeps it there. */
		(void)read_ptr(rt, obj + (uint64_t)dictoffset, &dict);
	}
	if (values) {
		/* Split: the keys are shared by every instance of the class. */
		struct dview v;
		if (read_ptr(rt, type + o->heaptype_cached_keys, &keys) < 0 || !keys ||
		    keys_view(rt, keys, values + (o->dictvalues_values != PYOFF_NONE ?
							  o->dictvalues_values : 0), &v) < 0) {
			return 0;
		}
		return view_get(rt, &v, want);
	}
	return dict ? pyrt_dict_get(rt, dict, want) : 0;
}

struct by_ident {
	const struct py_thread *th;
	size_t n;
	spy_addr_t interp;
	const char **names;
	const char *attr;
	size_t found;
};

static int name_one(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t thread)
{
	struct by_ident *b = ctx;
	struct py_value k;
	pyrt_read_value(rt, key, &k);
	if (k.kind != PYV_INT || k.ndigits) {
		return 0;
	}
	for (size_t i = 0; i < b->n; i++) {
		if (b->th[i].interp != b->interp || b->th[i].thread_id != (uint64_t)k.ival || b->names[i]) {
			continue;
		}
		spy_addr_t obj = pyrt_attr_get(rt, thread, b->attr);
		struct py_value name;
		pyrt_read_value(rt, obj, &name);
		if (name.kind == PYV_BYTES) {
			/* 2.7 str: its raw bytes, as function names are kept. */
			char buf[PYSTR_BUF];
			size_t len;
			int trunc;
			if (pystr_read(rt->mem, &rt->off, obj, buf, sizeof(buf), &len, &trunc, NULL) == 0) {
				name.kind = PYV_STR;
				name.text = spy_strtab_intern(rt->strs, buf, len);
			}
		}
		if (name.kind == PYV_STR && name.text && *name.text) {
			b->names[i] = name.text;
			b->found++;
		}
	}
	return 0;
}

/* The names of the threads th[0..n) that run in interp (names of others untouched). */
static int names_of_interp(struct pyrt *rt, spy_addr_t interp, const struct py_thread *th, size_t n,
			   const char **names, struct spy_err *err)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t modules, threading, md, active;
	if (read_ptr(rt, interp + o->interp_modules, &modules) < 0 ||
	    !(threading = pyrt_dict_get(rt, modules, "threading"))) {
		return spy_err_set(err, SPY_ECORRUPT, "threading module not found in sys.modules");
	}
	if (read_ptr(rt, threading + o->module_dict, &md) < 0 || !(active = pyrt_dict_get(rt, md, "_active"))) {
		return spy_err_set(err, SPY_ECORRUPT, "threading._active not found");
	}
	struct by_ident b = { th, n, interp, names,
			      o->str_model == PYSTR_BYTES27 ? "_Thread__name" : "_name", 0 };
	struct dview v;
	int rc = pyrt_dict_view(rt, active, &v);
	if (rc == 0) {
		rc = pyrt_dict_each(rt, &v, name_one, &b);
	}
	if (rc < 0) {
		return spy_err_set(err, -rc, "threading._active cannot be read");
	}
	return (int)b.found;
}

int pyrt_thread_names(struct pyrt *rt, const struct py_thread *th, size_t n, const char **names,
		      struct spy_err *err)
{
	const struct pyoffsets *o = &rt->off;
	int found = 0, rc = 0;
	for (size_t i = 0; i < n; i++) {
		names[i] = NULL;
	}
	if (o->interp_modules == PYOFF_NONE || o->module_dict == PYOFF_NONE) {
		return 0;
	}
	/* Each interpreter has its own sys.modules, so its own threading. */
	for (size_t i = 0; i < n; i++) {
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++) {
			seen = th[j].interp == th[i].interp;
		}
		if (seen) {
			continue;
		}
		int r = names_of_interp(rt, th[i].interp, th, n, names, err);
		if (r < 0) {
			rc = r;
		} else {
			found += r;
		}
	}
	return found ? found : rc;
}

/* ---- the cache ---- */

static uint64_t name_key(uint64_t ident, spy_addr_t tstate)
{
	return spy_hmap_pair(tstate, ident);
}

/* The remembered name of (ident, tstate), or NULL when none is. */
static struct pyname_ent *name_find(const struct pyrt *rt, uint64_t ident, spy_addr_t tstate)
{
	uint64_t k = name_key(ident, tstate);
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&rt->name_index, k, it, v) {
		if (rt->names[v].ident == ident && rt->names[v].tstate == tstate) {
			return &rt->names[v];
		}
	}
	return NULL;
}

const char *pyrt_thread_name(const struct pyrt *rt, const struct py_thread *t)
{
	const struct pyname_ent *e = name_find(rt, t->thread_id, t->tstate);
	return e ? e->name : NULL;
}

void pyrt_names_update(struct pyrt *rt, const struct py_thread *th, size_t n, uint64_t now_ns,
		       uint64_t refresh_ns)
{
	/* Ended threads stay until a full scan forgets them; one is due too
	 * when the threads at hand might not fit beside them. */
	bool full = !rt->names_scans || now_ns - rt->names_scanned_ns >= refresh_ns ||
		    rt->nnames + n > PYRT_NAME_MAX;
	bool missing = false;
	for (size_t i = 0; i < n && !full && !missing; i++) {
		missing = !name_find(rt, th[i].thread_id, th[i].tstate);
	}
	if (!full && !missing) {
		return;
	}
	if (full) {
		rt->nnames = 0;
		spy_hmap_clear(&rt->name_index);
		rt->names_scanned_ns = now_ns;
	}
	const char **names = spy_xcalloc(n ? n : 1, sizeof(*names));
	rt->names_scans++;
	(void)pyrt_thread_names(rt, th, n, names, NULL);
	for (size_t i = 0; i < n; i++) {
		struct pyname_ent *e = name_find(rt, th[i].thread_id, th[i].tstate);
		if (e) {
			if (names[i]) {
				e->name = names[i]; /* else keep what an earlier scan found */
			}
			continue;
		}
		if (rt->nnames == PYRT_NAME_MAX) {
			continue;
		}
		SPY_GROW(rt->names, rt->names_alloc, rt->nnames + 1);
		rt->names[rt->nnames] = (struct pyname_ent){ th[i].thread_id, th[i].tstate, names[i] };
		spy_hmap_add(&rt->name_index, name_key(th[i].thread_id, th[i].tstate), rt->nnames++);
	}
	free(names);
}
