/*
 * OpenTelemetry spans (pystate/spans.c) on synthetic images of every row
 * from 3.8: the chain tstate -> context -> HAMT -> the SDK's ContextVar ->
 * otel Context -> _SPAN_KEY -> span -> _context (trace id, span id) and
 * _name, found through sys.modules; the HAMT found by the variable's
 * hash at its root bitmap node, and under an array node. Then hostile
 * images: a HAMT node that is its own child (a cycle), a bogus context
 * pointer, a bitmap node claiming 2^40 entries, an otel Context of 5000
 * entries with the span key last: each a quick answer, no span guessed.
 * And no SDK: sys.modules is read once, then not again while it does not
 * grow.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/offsets.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

/* The SDK's ids of the span in the image. */
static const uint8_t TRACE[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
				   0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 };
static const uint8_t SPAN[8] = { 0x5e, 0xed, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55 };
/* The variable's var_hash: hamt_hash folds it to 0x00000025 (level 0 index 5, level 1 index 1). */
#define VAR_HASH 0x0000000000000025ll

struct img {
	struct fakepy *fp;
	const struct pyoffsets *o;
	spy_addr_t interp, tstate, ctx, hamt, var, other_var, otel, span_key, modules;
	spy_addr_t bitmap_type, array_type;
	struct spy_strtab strs;
};

/* An int of the n big-endian bytes at b, in the row's digits. */
static spy_addr_t id_int(struct img *m, const uint8_t *b, size_t n)
{
	unsigned __int128 x = 0;
	for (size_t i = 0; i < n; i++) {
		x = (x << 8) | b[i];
	}
	uint32_t d[8], shift = m->o->long_shift;
	size_t nd = 0;
	while (x && nd < 8) {
		d[nd++] = (uint32_t)(x & ((1u << shift) - 1));
		x >>= shift;
	}
	return fakepy_long(m->fp, "int", d, nd, nd, false);
}

/* An instance of a plain class keeping its attributes in a dict at a tp_dictoffset past its head. */
static spy_addr_t instance(struct img *m, const char *cls, const spy_addr_t *k, const spy_addr_t *v, size_t n)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t t = fakepy_type(m->fp, cls);
	fakepy_w64(m->fp, t + o->type_flags, 0);
	fakepy_w64(m->fp, t + o->type_basicsize, o->object_size + 0x10);
	fakepy_w64(m->fp, t + o->type_dictoffset, o->object_size + 0x8);
	spy_addr_t obj = fakepy_object(m->fp, t, 0x60);
	fakepy_w64(m->fp, obj + o->object_size + 0x8, fakepy_dict(m->fp, k, v, n, true));
	return obj;
}

static spy_addr_t module(struct img *m, spy_addr_t dict)
{
	spy_addr_t mod = fakepy_object(m->fp, fakepy_type(m->fp, "module"), 0x80);
	fakepy_w64(m->fp, mod + m->o->module_dict, dict);
	return mod;
}

/* A bitmap node of the pairs (k[i], v[i]) at the bit positions idx[i] (ascending). */
static spy_addr_t bitmap_node(struct img *m, const uint32_t *idx, const spy_addr_t *k, const spy_addr_t *v,
			      size_t n)
{
	const struct pyoffsets *o = m->o;
	uint32_t arr = (o->varobject_size + 4 + 7) & ~7u, bitmap = 0;
	spy_addr_t node = fakepy_object(m->fp, m->bitmap_type, arr + 16 * n + 16);
	fakepy_w64(m->fp, node + o->ob_size, 2 * n);
	for (size_t i = 0; i < n; i++) {
		bitmap |= 1u << idx[i];
		fakepy_w64(m->fp, node + arr + 16 * i, k[i]);
		fakepy_w64(m->fp, node + arr + 16 * i + 8, v[i]);
	}
	fakepy_w32(m->fp, node + o->varobject_size, bitmap);
	return node;
}

static void set_root(struct img *m, spy_addr_t node)
{
	fakepy_w64(m->fp, m->hamt + m->o->hamt_root, node);
}

/* The image with the SDK loaded and one thread inside span "GET /users/{id}". */
static void img_init(struct img *m, const struct pyoffsets *row, bool sdk)
{
	memset(m, 0, sizeof(*m));
	m->o = row;
	m->fp = fakepy_new(row, row->version | 0x01f0);
	struct spy_strtab init = SPY_STRTAB_INIT;
	m->strs = init;
	const struct pyoffsets *o = row;
	struct fakepy *fp = m->fp;
	m->interp = fakepy_main_interp(fp);
	m->tstate = fakepy_thread(fp, m->interp, FAKEPY_PID);
	m->bitmap_type = fakepy_type(fp, "hamt_bitmap_node");
	m->array_type = fakepy_type(fp, "hamt_array_node");
	spy_addr_t cv_type = fakepy_type(fp, "_contextvars.ContextVar");
	m->var = fakepy_object(fp, cv_type, 0x60);
	fakepy_w64(fp, m->var + o->contextvar_hash, (uint64_t)VAR_HASH);
	m->other_var = fakepy_object(fp, cv_type, 0x60);

	/* The span: its _context a tuple (trace_id, span_id, ...), its _name. */
	spy_addr_t ids[3] = { id_int(m, TRACE, 16), id_int(m, SPAN, 8), fakepy_int(fp, 0) };
	spy_addr_t sk[3] = { fakepy_str(fp, "_kind"), fakepy_str(fp, "_context"), fakepy_str(fp, "_name") };
	spy_addr_t sv[3] = { fakepy_int(fp, 1), fakepy_tuple(fp, ids, 3), fakepy_str(fp, "GET /users/{id}") };
	spy_addr_t span = instance(m, "_Span", sk, sv, 3);
	m->span_key = fakepy_str(fp, "current-span-8957dad2");
	spy_addr_t ok[2] = { fakepy_str(fp, "current-baggage-1"), m->span_key };
	spy_addr_t ov[2] = { fakepy_int(fp, 7), span };
	m->otel = fakepy_dict(fp, ok, ov, 2, true);

	spy_addr_t ctx_type = fakepy_type(fp, "_contextvars.Context");
	m->ctx = fakepy_object(fp, ctx_type, 0x60);
	m->hamt = fakepy_object(fp, fakepy_type(fp, "hamt"), 0x40);
	fakepy_w64(fp, m->ctx + o->context_vars, m->hamt);
	fakepy_w64(fp, m->tstate + o->tstate_context, m->ctx);
	uint32_t idx[2] = { 3, 5 };
	spy_addr_t hk[2] = { m->other_var, m->var }, hv[2] = { fakepy_int(fp, 1), m->otel };
	set_root(m, bitmap_node(m, idx, hk, hv, 2));

	/* sys.modules: opentelemetry.context._RUNTIME_CONTEXT._current_context, and the key. */
	spy_addr_t mk[3] = { fakepy_str(fp, "sys"), fakepy_str(fp, "opentelemetry.context"),
			     fakepy_str(fp, "opentelemetry.trace.propagation") };
	spy_addr_t mv[3] = { module(m, fakepy_dict(fp, NULL, NULL, 0, true)), 0, 0 };
	if (sdk) {
		spy_addr_t rk = fakepy_str(fp, "_current_context");
		spy_addr_t rc = instance(m, "ContextVarsRuntimeContext", &rk, &m->var, 1);
		spy_addr_t ck = fakepy_str(fp, "_RUNTIME_CONTEXT"), pk = fakepy_str(fp, "_SPAN_KEY");
		mv[1] = module(m, fakepy_dict(fp, &ck, &rc, 1, true));
		mv[2] = module(m, fakepy_dict(fp, &pk, &m->span_key, 1, true));
	}
	m->modules = fakepy_dict(fp, mk, mv, sdk ? 3 : 1, true);
	fakepy_w64(fp, m->interp + o->interp_modules, m->modules);
}

static struct pyrt *img_open(struct img *m)
{
	struct pyrt *rt = fakepy_open(m->fp, &m->strs);
	CHECK(rt != NULL);
	return rt;
}

static void img_release(struct img *m)
{
	fakepy_free(m->fp);
	spy_strtab_release(&m->strs);
}

static int span_of(struct pyrt *rt, struct img *m, uint64_t now, struct pyrt_span *sp)
{
	struct py_thread th[4];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 4, &n, NULL), 0);
	CHECK_INT(n, 1);
	memset(sp, 0, sizeof(*sp));
	return pyrt_thread_span(rt, &th[0], now, sp);
}

static void check_span(const struct pyrt_span *sp)
{
	CHECK(!memcmp(sp->trace_id, TRACE, 16));
	CHECK(!memcmp(sp->span_id, SPAN, 8));
	CHECK(sp->name && !strcmp(sp->name, "GET /users/{id}"));
}

static void test_row(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt_span sp;
	struct pyrt_span_stats st;
	img_init(&m, row, true);
	struct pyrt *rt = img_open(&m);
	CHECK_INT(span_of(rt, &m, 1, &sp), 1);
	check_span(&sp);
	/* Again: the variable, the key and the attribute names by address now. */
	CHECK_INT(span_of(rt, &m, 2, &sp), 1);
	check_span(&sp);
	pyrt_span_stats(rt, &st);
	CHECK(st.sdk);
	CHECK_INT(st.looks, 1);
	CHECK_INT(st.found, 2);

	/* Under an array node: index 5 at level 0, then a bitmap node's index 1. */
	uint32_t arr_size = m.o->object_size + 8 * 32 + 8;
	spy_addr_t arr = fakepy_object(m.fp, m.array_type, arr_size);
	uint32_t i1 = 1;
	fakepy_w64(m.fp, arr + m.o->object_size + 8 * 5, bitmap_node(&m, &i1, &m.var, &m.otel, 1));
	set_root(&m, arr);
	CHECK_INT(span_of(rt, &m, 3, &sp), 1);
	check_span(&sp);
	/* The variable not set in this context: no span. */
	fakepy_w64(m.fp, arr + m.o->object_size + 8 * 5, 0);
	CHECK_INT(span_of(rt, &m, 4, &sp), 0);
	/* A thread that never touched contextvars: no span, nothing more read. */
	fakepy_w64(m.fp, m.tstate + m.o->tstate_context, 0);
	CHECK_INT(span_of(rt, &m, 5, &sp), 0);
	pyrt_free(rt);
	img_release(&m);
}

static void test_hostile(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt_span sp;
	img_init(&m, row, true);
	struct pyrt *rt = img_open(&m);
	const struct pyoffsets *o = m.o;
	/* A cycle: every entry of the root is a sub-node (NULL key), the root itself. */
	uint32_t all[32];
	spy_addr_t nulls[32] = { 0 }, selfs[32] = { 0 };
	for (uint32_t i = 0; i < 32; i++) {
		all[i] = i;
	}
	spy_addr_t node = bitmap_node(&m, all, nulls, selfs, 32);
	for (uint32_t i = 0; i < 32; i++) {
		fakepy_w64(m.fp, node + ((o->varobject_size + 4 + 7) & ~7u) + 16 * i + 8, node);
	}
	set_root(&m, node);
	CHECK(span_of(rt, &m, 1, &sp) < 0);
	uint32_t idx = 5;
	/* A bitmap node claiming 2^40 entries. */
	spy_addr_t hk = m.var;
	node = bitmap_node(&m, &idx, &hk, &m.otel, 1);
	fakepy_w64(m.fp, node + o->ob_size, 1ull << 40);
	set_root(&m, node);
	CHECK(span_of(rt, &m, 2, &sp) < 0);
	/* A bogus context pointer. */
	fakepy_w64(m.fp, m.tstate + o->tstate_context, 0xdead0000beefull);
	CHECK(span_of(rt, &m, 3, &sp) < 0);
	/* An otel Context of 5000 entries, the span key last: cut at the bound, no span, counted. */
	fakepy_w64(m.fp, m.tstate + o->tstate_context, m.ctx);
	enum { BIG = 5000 };
	spy_addr_t *k = calloc(BIG, sizeof(*k)), *v = calloc(BIG, sizeof(*v));
	for (size_t i = 0; i < BIG; i++) {
		k[i] = fakepy_str(m.fp, "key");
		v[i] = fakepy_int(m.fp, i);
	}
	k[BIG - 1] = m.span_key;
	spy_addr_t big = fakepy_dict(m.fp, k, v, BIG, true);
	free(k);
	free(v);
	node = bitmap_node(&m, &idx, &hk, &big, 1);
	set_root(&m, node);
	struct pyrt_span_stats before, after;
	pyrt_span_stats(rt, &before);
	CHECK_INT(span_of(rt, &m, 4, &sp), 0);
	pyrt_span_stats(rt, &after);
	CHECK_INT(after.cut, before.cut + 1);
	CHECK(after.reads - before.reads < 64);
	pyrt_free(rt);
	img_release(&m);
}

/* No SDK: one look at sys.modules, then none while it keeps its size. */
static void test_absent(const struct pyoffsets *row)
{
	struct img m;
	struct pyrt_span sp;
	struct pyrt_span_stats st;
	img_init(&m, row, false);
	struct pyrt *rt = img_open(&m);
	CHECK_INT(span_of(rt, &m, 1, &sp), 0);
	pyrt_span_stats(rt, &st);
	CHECK(!st.sdk);
	CHECK_INT(st.looks, 1);
	uint64_t reads = st.reads;
	CHECK_INT(span_of(rt, &m, 2, &sp), 0); /* within PYRT_SPAN_LOOK_NS: nothing read */
	pyrt_span_stats(rt, &st);
	CHECK_INT(st.reads, reads);
	CHECK_INT(span_of(rt, &m, 2 + PYRT_SPAN_LOOK_NS, &sp), 0); /* sys.modules unchanged: not scanned */
	pyrt_span_stats(rt, &st);
	CHECK_INT(st.looks, 1);
	CHECK(st.reads - reads <= 2);
	pyrt_free(rt);
	img_release(&m);
}

int main(void)
{
	unsigned rows = 0;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		if (row->context_vars == PYOFF_NONE) {
			continue;
		}
		rows++;
		test_row(row);
		test_hostile(row);
		test_absent(row);
	}
	CHECK(rows >= 8);
	return check_done();
}
