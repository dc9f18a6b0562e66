/*
 * The OpenTelemetry Python SDK's current span of a thread, read from
 * outside: which trace and span a sample served.
 *
 * The path, as the SDK keeps it (opentelemetry-api's context package and
 * CPython's Python/context.c, Python/hamt.c):
 *   PyThreadState.context (a PyContext) -> ctx_vars (a HAMT, immutable:
 *   a ContextVar.set() makes a new one) -> the value of the SDK's
 *   ContextVar("current_context"), found by the variable's own hash as
 *   hamt.c finds it -> an otel Context (a dict) -> the value of its key
 *   _SPAN_KEY ("current-span-<uuid>") -> the span object -> its _context
 *   (a SpanContext, a tuple: trace_id, span_id, ...) and its _name.
 * The variable and the key are two objects that live as long as the SDK
 * is loaded; they are found once, through sys.modules
 * ("opentelemetry.context"._RUNTIME_CONTEXT._current_context and
 * "opentelemetry.trace.propagation"._SPAN_KEY), and then compared by
 * address: no string is read per sample but the span's name.
 *
 * Nothing is read per sample while the SDK is not loaded: sys.modules is
 * looked at again only when it grew (an import adds an entry), at most
 * every PYRT_SPAN_LOOK_NS.
 *
 * Why no cache by context pointer: a thread keeps one PyContext all its
 * life (ctx_vars changes under it), and the HAMT an ended span's context
 * leaves is freed at once, its block free for the next HAMT of that size
 * (pymalloc): a cache by either address could label samples with a span
 * that ended, and nothing read cheaply tells the two apart. (A cache by
 * (thread state, HAMT address) passed test_spans too: the reuse is
 * argued from the allocator, not seen there.) So each held thread's chain
 * is read afresh, about 15 reads, never guessed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "pystate/pystr.h"

/* hamt.c: 32-bit hashes, 5 bits a level: 7 levels, then a collision node. */
#define HAMT_MAX_LEVELS 8
/* Entries of a bitmap or collision node we read at most (a bitmap node has 32
 * pairs). */
#define HAMT_MAX_PAIRS 64
#define HAMT_ARRAY_SIZE 32
/* Entries of an otel Context (a dict: a few keys) and of a span's attributes.
 */
#define SPAN_DICT_MAX 256
/* Bytes of a span's name kept. */
#define SPAN_NAME_MAX 128

enum hamt_kind { HAMT_UNKNOWN = 0, HAMT_BITMAP, HAMT_ARRAY, HAMT_COLLISION, HAMT_OTHER };

struct pyrt_spans {
	uint64_t looked_ns;               /* the last look at sys.modules, 0 never */
	spy_addr_t miss_modules;          /* sys.modules when the SDK was not there ... */
	int64_t miss_used;                /* ... and its ma_used then */
	spy_addr_t var;                   /* the SDK's ContextVar, 0 until found */
	int32_t var_hash;                 /* its hamt_hash */
	spy_addr_t span_key;              /* the str _SPAN_KEY */
	spy_addr_t key_name, key_context; /* the interned "_name" / "_context", once matched */
	struct {
		spy_addr_t type;
		uint8_t kind;
	} types[8];
	size_t ntypes;
	struct pyrt_span_stats st;
};

static struct pyrt_spans *spans_of(struct pyrt *rt)
{
	if (!rt->spans) {
		rt->spans = spy_xcalloc(1, sizeof(*rt->spans));
	}
	return rt->spans;
}

void pyrt_spans_free(struct pyrt *rt)
{
	const struct pyrt_spans *s = rt->spans;
	if (s) {
		spy_log(SPY_LOG_DEBUG,
			"pystate: spans: SDK %s after %llu looks at sys.modules; %llu spans read, %llu "
			"chains unreadable, "
			"%llu dicts cut; %llu remote reads",
			s->var ? "found" : "not found", (unsigned long long)s->st.looks,
			(unsigned long long)s->st.found, (unsigned long long)s->st.failed,
			(unsigned long long)s->st.cut, (unsigned long long)s->st.reads);
	}
	free(rt->spans);
	rt->spans = NULL;
}

bool pyrt_spans_supported(const struct pyrt *rt)
{
	const struct pyoffsets *o = &rt->off;
	return o->tstate_context != PYOFF_NONE && o->context_vars != PYOFF_NONE &&
	       o->hamt_root != PYOFF_NONE && o->contextvar_hash != PYOFF_NONE &&
	       o->module_dict != PYOFF_NONE && o->interp_modules != PYOFF_NONE && o->tuple_item != PYOFF_NONE;
}

static int read_ptr(struct pyrt *rt, spy_addr_t at, spy_addr_t *p)
{
	rt->spans->st.reads++;
	return spy_mem_read_addr(rt->mem, at, p);
}

static int read_n(struct pyrt *rt, spy_addr_t at, void *buf, size_t n)
{
	rt->spans->st.reads++;
	return spy_mem_read(rt->mem, at, buf, n);
}

/* Which HAMT node type is at type: by tp_name once, then by address. */
static enum hamt_kind node_kind(struct pyrt *rt, spy_addr_t type)
{
	struct pyrt_spans *s = rt->spans;
	for (size_t i = 0; i < s->ntypes; i++) {
		if (s->types[i].type == type) {
			return s->types[i].kind;
		}
	}
	spy_addr_t name;
	char buf[32];
	if (!spy_mem_plausible(rt->mem, type, 8) || read_ptr(rt, type + rt->off.type_name, &name) < 0 ||
	    read_n(rt, name, buf, sizeof(buf)) < 0) {
		return HAMT_UNKNOWN;
	}
	buf[sizeof(buf) - 1] = 0;
	enum hamt_kind k = !strcmp(buf, "hamt_bitmap_node")      ? HAMT_BITMAP
			   : !strcmp(buf, "hamt_array_node")     ? HAMT_ARRAY
			   : !strcmp(buf, "hamt_collision_node") ? HAMT_COLLISION
								 : HAMT_OTHER;
	if (s->ntypes < SPY_ARRAY_SIZE(s->types)) {
		s->types[s->ntypes].type = type;
		s->types[s->ntypes++].kind = (uint8_t)k;
	}
	return k;
}

/*
 * The value of key (hash h) in the HAMT at hamt, as hamt.c's find: 1 and
 * *value, 0 absent, < 0 unreadable or not a HAMT's shape. At most
 * HAMT_MAX_LEVELS nodes, each read once: a cycle or a bogus pointer ends it.
 */
int pyrt_hamt_find(struct pyrt *rt, spy_addr_t hamt, spy_addr_t key, int32_t h, spy_addr_t *value)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t node;
	uint32_t arr = (o->varobject_size + 4 + 7) & ~7u;
	if (!spy_mem_plausible(rt->mem, hamt, 8) || read_ptr(rt, hamt + o->hamt_root, &node) < 0) {
		return -SPY_EMEM;
	}
	for (uint32_t level = 0, shift = 0; level < HAMT_MAX_LEVELS; level++, shift += 5) {
		unsigned char hdr[64];
		if (!spy_mem_plausible(rt->mem, node, 8) || arr + 8 > sizeof(hdr) ||
		    read_n(rt, node, hdr, arr) < 0) {
			return -SPY_EMEM;
		}
		enum hamt_kind k = node_kind(rt, pyrt_u64(hdr, o->ob_type));
		uint32_t idx = shift < 32 ? ((uint32_t)h >> shift) & 0x1f : 0;
		if (k == HAMT_ARRAY) {
			if (read_ptr(rt, node + o->object_size + 8u * idx, &node) < 0) {
				return -SPY_EMEM;
			}
			if (!node) {
				return 0;
			}
			continue;
		}
		int64_t size = (int64_t)pyrt_u64(hdr, o->ob_size);
		if (size < 0 || size > 2 * HAMT_MAX_PAIRS || (size & 1)) {
			return -SPY_ECORRUPT;
		}
		spy_addr_t pair[2];
		if (k == HAMT_BITMAP) {
			uint32_t bitmap = pyrt_u32(hdr, o->varobject_size), bit = 1u << idx;
			if (!(bitmap & bit)) {
				return 0;
			}
			uint32_t at = (uint32_t)__builtin_popcount(bitmap & (bit - 1));
			if (2 * (int64_t)at + 1 >= size ||
			    read_n(rt, node + arr + 16ull * at, pair, sizeof(pair)) < 0) {
				return -SPY_ECORRUPT;
			}
			if (!pair[0]) {
				node = pair[1]; /* a sub-node */
				continue;
			}
			*value = pair[1];
			return pair[0] == key && pair[1] ? 1 : 0;
		}
		if (k == HAMT_COLLISION) {
			spy_addr_t pairs[2 * HAMT_MAX_PAIRS];
			if (size && read_n(rt, node + arr, pairs, (size_t)size * 8) < 0) {
				return -SPY_EMEM;
			}
			for (int64_t i = 0; i + 1 < size; i += 2) {
				if (pairs[i] == key && pairs[i + 1]) {
					*value = pairs[i + 1];
					return 1;
				}
			}
			return 0;
		}
		return -SPY_ECORRUPT;
	}
	return -SPY_ECORRUPT;
}

/* hamt.c's hamt_hash of a ContextVar: its var_hash folded to 32 bits. */
static int32_t hamt_hash(int64_t hash)
{
	int32_t x = (int32_t)((uint64_t)hash & 0xffffffffu) ^ (int32_t)((uint64_t)hash >> 32);
	return x == -1 ? -2 : x;
}

static spy_addr_t module_dict(struct pyrt *rt, spy_addr_t modules, const char *name)
{
	spy_addr_t mod = pyrt_dict_get(rt, modules, name), md = 0;
	if (mod) {
		(void)read_ptr(rt, mod + rt->off.module_dict, &md);
	}
	return md;
}

/* Find the SDK's variable and key in interp's sys.modules, when it grew since
 * the last miss. */
static void find_sdk(struct pyrt *rt, spy_addr_t interp, uint64_t now_ns)
{
	struct pyrt_spans *s = rt->spans;
	const struct pyoffsets *o = &rt->off;
	if (s->looked_ns && now_ns - s->looked_ns < PYRT_SPAN_LOOK_NS) {
		return;
	}
	s->looked_ns = now_ns ? now_ns : 1;
	spy_addr_t modules;
	int64_t used = -1;
	if (read_ptr(rt, interp + o->interp_modules, &modules) < 0 || !modules ||
	    (o->dict_used != PYOFF_NONE && read_n(rt, modules + o->dict_used, &used, sizeof(used)) < 0)) {
		return;
	}
	if (modules == s->miss_modules && used == s->miss_used) {
		return;
	}
	s->st.looks++;
	s->miss_modules = modules;
	s->miss_used = used;
	spy_addr_t ctxmod = module_dict(rt, modules, "opentelemetry.context");
	spy_addr_t propmod = ctxmod ? module_dict(rt, modules, "opentelemetry.trace.propagation") : 0;
	spy_addr_t runtime = ctxmod ? pyrt_dict_get(rt, ctxmod, "_RUNTIME_CONTEXT") : 0;
	spy_addr_t var = runtime ? pyrt_attr_get(rt, runtime, "_current_context") : 0;
	spy_addr_t key = propmod ? pyrt_dict_get(rt, propmod, "_SPAN_KEY") : 0;
	int64_t hash;
	if (!var || !key || read_n(rt, var + o->contextvar_hash, &hash, sizeof(hash)) < 0) {
		return;
	}
	s->var = var;
	s->var_hash = hamt_hash(hash);
	s->span_key = key;
}

struct find_ptr {
	spy_addr_t key, value;
};

static int match_ptr(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t value)
{
	(void)rt;
	struct find_ptr *f = ctx;
	if (key == f->key) {
		f->value = value;
		return 1;
	}
	return 0;
}

/* The value of the entry whose key is the object at key, in dict (or in obj's
 * attributes). */
static spy_addr_t get_by_ptr(struct pyrt *rt, spy_addr_t obj, spy_addr_t key, bool attrs)
{
	struct dview v;
	struct find_ptr f = { key, 0 };
	int rc = attrs ? pyrt_attr_view(rt, obj, &v, SPAN_DICT_MAX)
		       : pyrt_dict_view_max(rt, obj, &v, SPAN_DICT_MAX);
	rt->spans->st.reads += 2;
	if (rc < 0) {
		return 0;
	}
	rt->spans->st.reads += 1 + v.n / 128;
	rt->spans->st.cut += v.cut;
	return pyrt_dict_each(rt, &v, match_ptr, &f) == 1 ? f.value : 0;
}

/* An attribute of the span: by the key's address once it matched by text. */
static spy_addr_t span_attr(struct pyrt *rt, spy_addr_t span, spy_addr_t *key, const char *name)
{
	if (*key) {
		spy_addr_t v = get_by_ptr(rt, span, *key, true);
		if (v) {
			return v;
		}
	}
	struct dview dv;
	if (pyrt_attr_view(rt, span, &dv, SPAN_DICT_MAX) < 0) {
		return 0;
	}
	/* Learn the key: the first entry whose key reads as name. */
	struct {
		const char *want;
		spy_addr_t key, value;
	} f = { name, 0, 0 };
	for (size_t i = 0; i < dv.n && i < SPAN_DICT_MAX; i++) {
		unsigned char e[24];
		spy_addr_t k, val;
		if (dv.stride > sizeof(e) ||
		    read_n(rt, dv.entries + (uint64_t)i * dv.stride, e, dv.stride) < 0) {
			return 0;
		}
		k = pyrt_u64(e, dv.key_off);
		if (dv.values) {
			if (read_ptr(rt, dv.values + 8 * (uint64_t)i, &val) < 0) {
				return 0;
			}
		} else {
			val = pyrt_u64(e, dv.value_off);
		}
		char buf[16];
		size_t len;
		int trunc;
		rt->spans->st.reads++;
		if (k && val && pystr_read(rt->mem, &rt->off, k, buf, sizeof(buf), &len, &trunc, NULL) == 0 &&
		    !trunc && len == strlen(f.want) && !memcmp(buf, f.want, len)) {
			f.key = k;
			f.value = val;
			break;
		}
	}
	if (f.key) {
		*key = f.key;
	}
	return f.value;
}

/* The int at obj as big-endian bytes (n of them); false unless a non-negative
 * int that fits. */
static bool read_id(struct pyrt *rt, spy_addr_t obj, uint8_t *out, size_t n)
{
	struct py_value v;
	rt->spans->st.reads += 2;
	pyrt_read_value(rt, obj, &v);
	if (v.kind != PYV_INT || v.negative || v.truncated) {
		return false;
	}
	unsigned __int128 x = 0;
	if (v.ndigits) {
		for (size_t i = v.ndigits; i-- > 0;) {
			if (x >> (128 - v.shift)) {
				return false;
			}
			x = (x << v.shift) | (v.digits[i] & ((1u << v.shift) - 1));
		}
	} else {
		x = (uint64_t)v.ival;
	}
	if (n < 16 && (x >> (8 * n))) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		out[n - 1 - i] = (uint8_t)(x >> (8 * i));
	}
	return true;
}

int pyrt_thread_span(struct pyrt *rt, const struct py_thread *t, uint64_t now_ns, struct pyrt_span *out)
{
	if (!pyrt_spans_supported(rt)) {
		return 0;
	}
	struct pyrt_spans *s = spans_of(rt);
	const struct pyoffsets *o = &rt->off;
	if (!s->var) {
		find_sdk(rt, t->interp, now_ns);
		if (!s->var) {
			return 0;
		}
	}
	spy_addr_t ctx, hamt, otel, span, sctx, items[2], name_obj;
	if (read_ptr(rt, t->tstate + o->tstate_context, &ctx) < 0) {
		goto bad;
	}
	if (!ctx) {
		return 0; /* a thread that never touched contextvars */
	}
	if (read_ptr(rt, ctx + o->context_vars, &hamt) < 0 || !hamt) {
		goto bad;
	}
	int rc = pyrt_hamt_find(rt, hamt, s->var, s->var_hash, &otel);
	if (rc < 0) {
		goto bad;
	}
	if (rc == 0) {
		return 0; /* the variable never set in this context: its default, no span */
	}
	span = get_by_ptr(rt, otel, s->span_key, false);
	if (!span) {
		return 0;
	}
	memset(out, 0, sizeof(*out));
	sctx = span_attr(rt, span, &s->key_context, "_context");
	if (!sctx || read_n(rt, sctx + o->tuple_item, items, sizeof(items)) < 0 ||
	    !read_id(rt, items[0], out->trace_id, sizeof(out->trace_id)) ||
	    !read_id(rt, items[1], out->span_id, sizeof(out->span_id))) {
		goto bad;
	}
	static const uint8_t zero[16];
	if (!memcmp(out->span_id, zero, sizeof(out->span_id)) ||
	    !memcmp(out->trace_id, zero, sizeof(out->trace_id))) {
		return 0; /* INVALID_SPAN: the SDK's "no span" */
	}
	name_obj = span_attr(rt, span, &s->key_name, "_name");
	if (name_obj) {
		char buf[SPAN_NAME_MAX];
		size_t len;
		int trunc;
		rt->spans->st.reads++;
		if (pystr_read(rt->mem, o, name_obj, buf, sizeof(buf), &len, &trunc, NULL) == 0) {
			out->name = spy_strtab_intern(rt->strs, buf, len);
		}
	}
	s->st.found++;
	return 1;
bad:
	s->st.failed++;
	return -SPY_ECORRUPT;
}

void pyrt_span_stats(const struct pyrt *rt, struct pyrt_span_stats *out)
{
	if (rt->spans) {
		*out = rt->spans->st;
		out->sdk = rt->spans->var != 0;
	} else {
		memset(out, 0, sizeof(*out));
	}
}
