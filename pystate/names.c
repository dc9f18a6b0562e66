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
static int keys_view(struct pyrt *rt, spy_addr_t keys, spy_addr_t values, struct dview *v, size_t max)
{
	const struct pyoffsets *o = &rt->off;
	/* The header before the indices, in one read (samplers call this). */
	unsigned char hdr[64];
	if (o->dk_indices > sizeof(hdr) || !spy_mem_plausible(rt->mem, keys, 8) ||
	    spy_mem_read(rt->mem, keys, hdr, o->dk_indices) < 0) {
		return -SPY_ECORRUPT;
	}
	int64_t n = (int64_t)pyrt_u64(hdr, o->dk_nentries);
	if (n < 0) {
		return -SPY_ECORRUPT;
	}
	memset(v, 0, sizeof(*v));
	/* Past max, the first max entries: what a caller may read of it. */
	v->cut = (uint64_t)n > max;
	v->n = v->cut ? max : (size_t)n;
	v->values = values;
	if (o->dict_model == PYDICT_COMPACT36) {
		int64_t size = (int64_t)pyrt_u64(hdr, o->dk_size);
		if (size <= 0 || size > ((int64_t)1 << 32) || (size & (size - 1))) {
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
	if (log2_index_bytes > 34) {
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

int pyrt_dict_view_max(struct pyrt *rt, spy_addr_t dict, struct dview *v, size_t max)
{
	const struct pyoffsets *o = &rt->off;
	if (!spy_mem_plausible(rt->mem, dict, 8)) {
		return -SPY_ECORRUPT;
	}
	if (o->dict_model == PYDICT_OPEN27) {
		int64_t mask;
		spy_addr_t table;
		if (read_i64(rt, dict + o->dict_mask, &mask) < 0 || mask < 0 ||
		    read_ptr(rt, dict + o->dict_table, &table) < 0) {
			return -SPY_ECORRUPT;
		}
		memset(v, 0, sizeof(*v));
		v->entries = table;
		/* 2.7's slots: a table of more than 4 x max slots is cut to that. */
		v->cut = (uint64_t)mask >= 4 * (uint64_t)max;
		v->n = v->cut ? 4 * max : (size_t)mask + 1;
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
	return keys_view(rt, keys, values, v, max);
}

int pyrt_dict_view(struct pyrt *rt, spy_addr_t dict, struct dview *v)
{
	int rc = pyrt_dict_view_max(rt, dict, v, PYRT_DICT_MAX_ENTRIES);
	return rc == 0 && v->cut ? -SPY_ECORRUPT : rc;
}

/* Reads NAMES_CHUNK entries at a time. */
int pyrt_dict_each(struct pyrt *rt, const struct dview *v, pyrt_entry_fn fn, void *ctx)
{
	return pyrt_dict_each_from(rt, v, 0, fn, ctx, NULL);
}

int pyrt_dict_each_from(struct pyrt *rt, const struct dview *v, size_t from, pyrt_entry_fn fn, void *ctx,
			size_t *stopped)
{
	unsigned char buf[NAMES_CHUNK * 24];
	spy_addr_t vals[NAMES_CHUNK];
	if (v->stride == 0 || v->stride > 24 || !spy_mem_plausible(rt->mem, v->entries, 8)) {
		return -SPY_ECORRUPT;
	}
	for (size_t i = from; i < v->n; i += NAMES_CHUNK) {
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
				if (stopped) {
					*stopped = i + j;
				}
				return rc;
			}
		}
	}
	return 0;
}

struct find_str {
	const char *want;
	spy_addr_t value;
	bool unread;    /* a key could not be read: want may be that one */
};

static int match_str(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t value)
{
	struct find_str *f = ctx;
	char buf[NAMES_KEY_MAX];
	size_t len;
	int trunc;
	int rc = pystr_read(rt->mem, &rt->off, key, buf, sizeof(buf), &len, &trunc, NULL);
	if (rc == 0 && !trunc && len == strlen(f->want) && memcmp(buf, f->want, len) == 0) {
		f->value = value;
		return 1;
	}
	/* A key that is no str is not want; one that could not be read may be. */
	f->unread |= rc == -SPY_EMEM;
	return 0;
}

/* 1 and *value when str key want is in the view, 0 when it is not, < 0 when that is unknown. */
static int view_find(struct pyrt *rt, const struct dview *v, const char *want, spy_addr_t *value)
{
	struct find_str f = { want, 0, false };
	int rc = pyrt_dict_each(rt, v, match_str, &f);
	*value = rc == 1 ? f.value : 0;
	return rc != 0 ? rc : f.unread ? -SPY_EMEM : 0;
}

int pyrt_dict_find(struct pyrt *rt, spy_addr_t dict, const char *want, spy_addr_t *value)
{
	struct dview v;
	int rc = pyrt_dict_view(rt, dict, &v);
	*value = 0;
	return rc < 0 ? rc : view_find(rt, &v, want, value);
}

spy_addr_t pyrt_dict_get(struct pyrt *rt, spy_addr_t dict, const char *want)
{
	spy_addr_t value;
	return pyrt_dict_find(rt, dict, want, &value) == 1 ? value : 0;
}

int pyrt_attr_view(struct pyrt *rt, spy_addr_t obj, struct dview *v, size_t max)
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
		return -SPY_ECORRUPT;
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
		if (read_ptr(rt, type + o->heaptype_cached_keys, &keys) < 0 || !keys) {
			return -SPY_ECORRUPT;
		}
		return keys_view(rt, keys, values + (o->dictvalues_values != PYOFF_NONE ? o->dictvalues_values : 0),
				 v, max);
	}
	return dict ? pyrt_dict_view_max(rt, dict, v, max) : -SPY_ENOPY;
}

spy_addr_t pyrt_attr_get(struct pyrt *rt, spy_addr_t obj, const char *want)
{
	struct dview v;
	spy_addr_t value;
	if (pyrt_attr_view(rt, obj, &v, PYRT_DICT_MAX_ENTRIES) < 0 || v.cut) {
		return 0;
	}
	return view_find(rt, &v, want, &value) == 1 ? value : 0;
}
