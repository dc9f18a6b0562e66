/*
 * Code objects: type validation and the decoded-code cache.
 *
 * Every frame names a code object; decoding one costs a string read per
 * name plus the line table. Code objects are immutable once created, so we
 * decode each once and cache (qualname or name, filename, firstlineno, line
 * table bytes) by address. Addresses are reused after garbage collection,
 * so each sample re-checks a cheap fingerprint -- type pointer,
 * co_firstlineno, co_name pointer -- taken from the header the walker reads
 * anyway; a mismatch re-decodes the slot.
 *
 * Why a direct-mapped table rather than an LRU: it is bounded by
 * construction, costs no bookkeeping per hit, and a collision only costs a
 * re-decode. Hot code (what a profiler sees most) stays resident.
 *
 * Type checks: the first object claiming to be a code object has its
 * ob_type->tp_name compared with "code"; after that, the type's address is
 * remembered and compared directly. Strings and bytes get the same
 * treatment ("str", and "bytes" or 2.7's "str").
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/linetable.h"
#include "pystate/pystr.h"

void pycode_cache_init(struct pyrt *rt)
{
	/* The table itself comes with the first code object (pycode_get). */
	rt->cache = NULL;
	rt->cache_slots = 0;
}

void pycode_cache_release(struct pyrt *rt)
{
	/* Decoded frames point into what the cache decoded: they go with it. */
	pyframe_memo_release(rt);
	pysplice_release(rt);
	if (!rt->cache) {
		return;
	}
	for (size_t i = 0; i < rt->cache_slots; i++) {
		free(rt->cache[i].tab);
	}
	free(rt->cache);
	rt->cache = NULL;
	rt->cache_slots = 0;
	rt->tab_bytes = 0;
}

bool pyrt_is_type(struct pyrt *rt, spy_addr_t *cached, spy_addr_t type, const char *name)
{
	char buf[32]; /* "_asyncio.Task", "_GatheringFuture" */
	spy_addr_t tp_name;
	size_t n = strlen(name) + 1;

	if (*cached) {
		return type == *cached;
	}
	if (!spy_mem_plausible(rt->mem, type, 8) || n > sizeof(buf)) {
		return false;
	}
	if (spy_mem_read_addr(rt->mem, type + rt->off.type_name, &tp_name) < 0 ||
	    !spy_mem_plausible(rt->mem, tp_name, 1) ||
	    spy_mem_read(rt->mem, tp_name, buf, n) < 0) {
		return false;
	}
	if (memcmp(buf, name, n) != 0) {
		return false;
	}
	*cached = type;
	spy_log(SPY_LOG_DEBUG, "pystate: type '%s' at 0x%llx", name, (unsigned long long)type);
	return true;
}

static const char *str_name(struct pyrt *rt)
{
	return "str"; /* tp_name of str in 3.x and of the byte string in 2.7 */
}

static const char *bytes_name(struct pyrt *rt)
{
	return rt->off.str_model == PYSTR_BYTES27 ? "str" : "bytes";
}

/* Decode and intern one name; ob_type must be str. */
static int intern_str(struct pyrt *rt, spy_addr_t addr, const char **out)
{
	char buf[PYSTR_BUF];
	size_t len;
	int trunc;
	spy_addr_t type;
	int rc = pystr_read(rt->mem, &rt->off, addr, buf, sizeof(buf), &len, &trunc, &type);
	if (rc < 0) {
		return rc;
	}
	if (!pyrt_is_type(rt, &rt->str_type, type, str_name(rt))) {
		return -SPY_ECORRUPT;
	}
	*out = spy_strtab_intern(rt->strs, buf, len);
	return 0;
}

static size_t slot_of(const struct pyrt *rt, spy_addr_t addr)
{
	/* Code objects are 16-byte aligned heap blocks: drop the zero bits.
	 * The top bits of the product, as many as the table needs. */
	uint64_t h = (addr >> 4) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 52) & (rt->cache_slots - 1);
}

/*
 * Double the table (up to PYCODE_CACHE_SLOTS), moving every entry to its
 * new slot. Two entries that land in one slot cannot happen: a slot of
 * the new table takes only entries of one slot of the old (the new bit is
 * one more bit of the same hash).
 */
static void grow(struct pyrt *rt)
{
	size_t old = rt->cache_slots;
	struct pycode *was = rt->cache;
	rt->cache_slots = old ? old * 2 : PYCODE_CACHE_MIN;
	rt->cache = spy_xcalloc(rt->cache_slots, sizeof(*rt->cache));
	for (size_t i = 0; i < old; i++) {
		if (was[i].addr) {
			rt->cache[slot_of(rt, was[i].addr)] = was[i];
		} else {
			free(was[i].tab); /* a slot whose decode failed may keep its buffer */
			rt->tab_bytes -= was[i].tab_alloc;
		}
	}
	free(was);
}

/* What a 3.11+ frame's decode needs of the header besides the fingerprint (walk.c, decode_iframe). */
static void sizes(const struct pyrt *rt, struct pycode *c, const unsigned char *hdr)
{
	const struct pyoffsets *o = &rt->off;
	c->nunits = (int64_t)pyrt_u64(hdr, o->ob_size);
	c->firsttraceable = o->code_firsttraceable != PYOFF_NONE ? (int32_t)pyrt_u32(hdr, o->code_firsttraceable) : 0;
}

static int decode(struct pyrt *rt, struct pycode *c, spy_addr_t addr, const unsigned char *hdr)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t name = pyrt_u64(hdr, o->code_qualname != PYOFF_NONE ? o->code_qualname : o->code_name);
	spy_addr_t file = pyrt_u64(hdr, o->code_filename);
	spy_addr_t tab = pyrt_u64(hdr, o->code_linetable);
	spy_addr_t type;
	int rc;

	c->addr = 0; /* invalid until fully decoded */
	if ((rc = intern_str(rt, name, &c->func)) < 0 || (rc = intern_str(rt, file, &c->file)) < 0) {
		return rc;
	}
	size_t had = c->tab_alloc;
	rc = pybytes_read(rt->mem, o, tab, SPY_MAX_LINETABLE, &c->tab, &c->tab_alloc, &c->tab_len, &type);
	rt->tab_bytes += c->tab_alloc - had;
	if (rc < 0) {
		return rc;
	}
	if (!pyrt_is_type(rt, &rt->bytes_type, type, bytes_name(rt))) {
		return -SPY_ECORRUPT;
	}
	if (rt->tab_bytes > PYCODE_TAB_BUDGET) {
		/* Name and file without lines rather than gigabytes of tables. */
		if (!rt->tab_over_budget++) {
			spy_log(SPY_LOG_DEBUG, "pystate: line tables over their budget of %zu MiB: "
				"lines left out", PYCODE_TAB_BUDGET >> 20);
		}
		rt->tab_bytes -= c->tab_alloc;
		free(c->tab);
		c->tab = NULL;
		c->tab_alloc = c->tab_len = 0;
	}
	c->type = pyrt_u64(hdr, o->ob_type);
	c->name_ptr = pyrt_u64(hdr, o->code_name);
	c->firstlineno = (int32_t)pyrt_u32(hdr, o->code_firstlineno);
	sizes(rt, c, hdr);
	c->memo.lo = c->memo.hi = 0;
	c->addr = addr;
	return 0;
}

struct pycode *pycode_cached(struct pyrt *rt, spy_addr_t addr)
{
	if (!rt->cache || !addr) {
		return NULL;
	}
	struct pycode *c = &rt->cache[slot_of(rt, addr)];
	return c->addr == addr ? c : NULL;
}

int pycode_get(struct pyrt *rt, spy_addr_t addr, const unsigned char *hdr, struct pycode **out)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t type = pyrt_u64(hdr, o->ob_type);

	if (!pyrt_is_type(rt, &rt->code_type, type, "code")) {
		return -SPY_ECORRUPT;
	}
	if (!rt->cache) {
		grow(rt);
	}
	struct pycode *c = &rt->cache[slot_of(rt, addr)];
	if (c->addr == addr && c->type == type && c->name_ptr == pyrt_u64(hdr, o->code_name) &&
	    c->firstlineno == (int32_t)pyrt_u32(hdr, o->code_firstlineno)) {
		rt->cache_hits++;
		sizes(rt, c, hdr);
		*out = c;
		return 0;
	}
	rt->cache_misses++;
	while (c->addr && c->addr != addr && rt->cache_slots < PYCODE_CACHE_SLOTS) {
		/* Another code object lives here: room before eviction (the two
		 * may share the next size's slot too). */
		grow(rt);
		c = &rt->cache[slot_of(rt, addr)];
	}
	int rc = decode(rt, c, addr, hdr);
	if (rc < 0) {
		return rc;
	}
	*out = c;
	return 0;
}

uint32_t pycode_line(struct pyrt *rt, struct pycode *c, int64_t addr)
{
	if (addr < c->memo.lo || addr >= c->memo.hi) {
		c->memo_line = pyline_addr2line_span(rt->off.line_model, c->tab, c->tab_len, c->firstlineno,
						     addr, &c->memo);
	}
	return c->memo_line > 0 ? (uint32_t)c->memo_line : 0;
}
