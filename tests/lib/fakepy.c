/*
 * Synthetic CPython images (see fakepy.h).
 *
 * The image is laid out only from a struct pyoffsets row and the models it
 * names, never from CPython headers, so the same builder serves every row in
 * the table -- and a test can hand it a doctored row (a "future version" with
 * moved fields) to check that pystate follows _Py_DebugOffsets rather than
 * its own table. Line tables are produced by small encoders written here,
 * independently of pystate/linetable.c, so a walk test checks the decoder
 * too; the decoder's ground truth is the real-interpreter fixtures.
 *
 * Memory is one anonymous mapping: allocations never move, so fakepy_at()
 * pointers stay valid for the image's life. Not calloc: under ASan a 24 MiB
 * calloc poisons and later quarantines 3 MiB of shadow, which was 80% of
 * fuzz-pystate's time per input; a fresh mapping costs only the pages an
 * image touches.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/err.h"
#include "common/util.h"
#include "tests/lib/fakepy.h"

#define ARENA (24u << 20)
#define PTHREAD_SIZE 0x800
#define PTHREAD_TID 0x2d0
/* The "writable data section": first the tests' area (fakepy_data_alloc),
 * then the image's own statics, then the runtime struct if the row has one. */
#define DATA_FRONT 0x10000
#define DATA_STATICS 0x4000
#define SYS_VERSION_LEN 250 /* Py_GetVersion()'s static char version[250] */

struct fakepy {
	struct pyoffsets row;
	uint32_t version;
	unsigned char *mem;
	size_t used;
	struct spy_map map;
	struct spy_mem smem;
	struct pyrt_hints hints;
	spy_addr_t runtime, interp_head_var, tstate_current_var;
	spy_addr_t main_interp;
	spy_addr_t type_type, code_type, str_type, bytes_type, dict_type, frame_type, none_type, none;
	spy_addr_t trampoline;
	/* data section: [data_lo, data_hi); front and statics bump pointers */
	spy_addr_t data_lo, data_hi, front_next, statics_next, statics_end;
	spy_addr_t sys_version;
	size_t front;
	/* The builders' types, one per name (a reader may cache the first it meets). */
	struct {
		char name[16];
		spy_addr_t type;
	} named[8];
};

static int fake_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	struct fakepy *fp = ctx;
	if (addr < FAKEPY_BASE || len > ARENA || addr - FAKEPY_BASE > ARENA - len) {
		return -SPY_EMEM;
	}
	memcpy(dst, fp->mem + (addr - FAKEPY_BASE), len);
	return 0;
}

/* Within a 4 KiB line, as a page cache's. */
static const void *fake_peek(void *ctx, spy_addr_t addr, size_t len)
{
	struct fakepy *fp = ctx;
	bool in = addr >= FAKEPY_BASE && len && len <= ARENA && addr - FAKEPY_BASE <= ARENA - len;
	return in && addr / 4096 == (addr + len - 1) / 4096 ? fp->mem + (addr - FAKEPY_BASE) : NULL;
}

void fakepy_set_peek(struct fakepy *fp, bool on)
{
	fp->smem.peek = on ? fake_peek : NULL;
}

spy_addr_t fakepy_alloc(struct fakepy *fp, size_t size)
{
	size_t at = (fp->used + 15) & ~(size_t)15;
	if (at + size > ARENA) {
		SPY_BUG("fakepy: arena full");
	}
	fp->used = at + size;
	return FAKEPY_BASE + at;
}

void *fakepy_at(struct fakepy *fp, spy_addr_t addr)
{
	if (addr < FAKEPY_BASE || addr - FAKEPY_BASE >= ARENA) {
		SPY_BUG("fakepy: 0x%llx outside the image", (unsigned long long)addr);
	}
	return fp->mem + (addr - FAKEPY_BASE);
}

void fakepy_w64(struct fakepy *fp, spy_addr_t addr, uint64_t v)
{
	memcpy(fakepy_at(fp, addr), &v, 8);
}

void fakepy_w32(struct fakepy *fp, spy_addr_t addr, uint32_t v)
{
	memcpy(fakepy_at(fp, addr), &v, 4);
}

void fakepy_w8(struct fakepy *fp, spy_addr_t addr, uint8_t v)
{
	*(uint8_t *)fakepy_at(fp, addr) = v;
}

uint64_t fakepy_r64(struct fakepy *fp, spy_addr_t addr)
{
	uint64_t v;
	memcpy(&v, fakepy_at(fp, addr), 8);
	return v;
}

static spy_addr_t cstring(struct fakepy *fp, const char *s)
{
	size_t n = strlen(s) + 1;
	spy_addr_t a = fakepy_alloc(fp, n);
	memcpy(fakepy_at(fp, a), s, n);
	return a;
}

/* Static data (types, runtime, variables) goes in the data section while it
 * has room, as in a real libpython; the heap takes the overflow. */
static spy_addr_t static_alloc(struct fakepy *fp, size_t size)
{
	spy_addr_t at = (fp->statics_next + 31) & ~(spy_addr_t)31;
	if (fp->statics_end && at + size <= fp->statics_end) {
		fp->statics_next = at + size;
		return at;
	}
	return fakepy_alloc(fp, size);
}

static spy_addr_t named_type(struct fakepy *fp, const char *name)
{
	size_t i = 0;
	for (; i < sizeof(fp->named) / sizeof(fp->named[0]) && fp->named[i].type; i++) {
		if (!strcmp(fp->named[i].name, name)) {
			return fp->named[i].type;
		}
	}
	if (i == sizeof(fp->named) / sizeof(fp->named[0]) || strlen(name) >= sizeof(fp->named[i].name)) {
		SPY_BUG("fakepy: too many builder types, or a long name");
	}
	memcpy(fp->named[i].name, name, strlen(name) + 1);
	fp->named[i].type = fakepy_type(fp, name);
	return fp->named[i].type;
}

spy_addr_t fakepy_long(struct fakepy *fp, const char *tp, const uint32_t *d, size_t nd, uint64_t n,
		       bool neg)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t v = fakepy_object(fp, named_type(fp, tp), o->long_digit + 4 * PYV_MAX_DIGITS + 8);
	if (o->long_tag != PYOFF_NONE) {
		fakepy_w64(fp, v + o->long_tag, (n << 3) | (neg ? 2 : n == 0));
	} else {
		fakepy_w64(fp, v + o->ob_size, neg ? (uint64_t)0 - n : n);
	}
	for (uint64_t i = 0; i < n && i < nd && i < PYV_MAX_DIGITS; i++) {
		fakepy_w32(fp, v + o->long_digit + 4 * i, d[i]);
	}
	return v;
}

spy_addr_t fakepy_int(struct fakepy *fp, uint64_t v)
{
	const struct pyoffsets *o = &fp->row;
	if (o->int_ival != PYOFF_NONE) {
		spy_addr_t obj = fakepy_object(fp, named_type(fp, "int"), o->int_ival + 8);
		fakepy_w64(fp, obj + o->int_ival, v);
		return obj;
	}
	uint32_t d[3];
	size_t nd = 0;
	for (uint64_t x = v; x; x >>= o->long_shift) {
		d[nd++] = (uint32_t)(x & ((1u << o->long_shift) - 1));
	}
	return fakepy_long(fp, "int", d, nd, nd, false);
}

spy_addr_t fakepy_tuple(struct fakepy *fp, const spy_addr_t *items, size_t n)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t t = fakepy_object(fp, named_type(fp, "tuple"), o->tuple_item + 8 * n + 8);
	fakepy_w64(fp, t + o->ob_size, n);
	for (size_t i = 0; i < n; i++) {
		fakepy_w64(fp, t + o->tuple_item + 8 * i, items[i]);
	}
	return t;
}

spy_addr_t fakepy_sized(struct fakepy *fp, const char *tp, uint32_t off, int64_t n)
{
	spy_addr_t v = fakepy_object(fp, named_type(fp, tp), off + 8);
	fakepy_w64(fp, v + off, (uint64_t)n);
	return v;
}

spy_addr_t fakepy_dict_keys(struct fakepy *fp, const spy_addr_t *k, const spy_addr_t *v, size_t n,
			    bool unicode, spy_addr_t values)
{
	const struct pyoffsets *o = &fp->row;
	size_t size = 8;
	while (size < 2 * n) {
		size *= 2;
	}
	bool general = o->dict_model == PYDICT_COMPACT36 || !unicode;
	uint32_t stride = general ? o->dict_entry_size : o->dict_uentry_size;
	uint32_t koff = general ? 8 : 0, voff = general ? 16 : 8;
	spy_addr_t keys = fakepy_alloc(fp, o->dk_indices + size + n * stride + 16);
	fakepy_w64(fp, keys + o->dk_nentries, n);
	if (o->dict_model == PYDICT_COMPACT36) {
		fakepy_w64(fp, keys + o->dk_size, size);
	} else {
		unsigned lg = 0;
		while ((1u << lg) < size) {
			lg++;
		}
		fakepy_w8(fp, keys + o->dk_log2_size, (uint8_t)lg);
		fakepy_w8(fp, keys + o->dk_log2_index_bytes, (uint8_t)lg); /* 1-byte indices */
		fakepy_w8(fp, keys + o->dk_kind, (uint8_t)(general ? o->dk_kind_general : 1));
	}
	spy_addr_t e = keys + o->dk_indices + size;
	for (size_t i = 0; i < n; i++) {
		fakepy_w64(fp, e + i * stride + koff, k[i]);
		if (values) {
			fakepy_w64(fp, values + 8 * i, v[i]);
		} else {
			fakepy_w64(fp, e + i * stride + voff, v[i]);
		}
	}
	return keys;
}

spy_addr_t fakepy_dict(struct fakepy *fp, const spy_addr_t *k, const spy_addr_t *v, size_t n,
		       bool unicode)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t d = fakepy_object(fp, fp->dict_type, 0x60);
	if (o->dict_model == PYDICT_OPEN27) {
		size_t slots = 8;
		while (slots < 2 * n) {
			slots *= 2;
		}
		spy_addr_t table = fakepy_alloc(fp, slots * o->dict_entry_size);
		/* Not where a hash would put them: the reader scans, so any slot will do. */
		for (size_t i = 0; i < n; i++) {
			spy_addr_t e = table + (2 * i + 1) * o->dict_entry_size;
			fakepy_w64(fp, e + 8, k[i]);
			fakepy_w64(fp, e + 16, v[i]);
		}
		fakepy_w64(fp, d + o->dict_mask, slots - 1);
		fakepy_w64(fp, d + o->dict_table, table);
		return d;
	}
	fakepy_w64(fp, d + o->dict_keys, fakepy_dict_keys(fp, k, v, n, unicode, 0));
	return d;
}

/* A Thread-like instance of tt whose attribute attr is value, kept as split says. */
static spy_addr_t thread_instance(struct fakepy *fp, spy_addr_t tt, const char *attr,
				  spy_addr_t value, bool split)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t keys[2] = { fakepy_str(fp, "_target"), fakepy_str(fp, attr) };
	spy_addr_t vals[2] = { fakepy_str(fp, "run"), value };
	const int64_t basicsize = 0x20;
	spy_addr_t obj = fakepy_alloc(fp, 0x40 + basicsize + 0x40) + 0x40; /* room before it */
	fakepy_w64(fp, obj, 1);
	fakepy_w64(fp, obj + o->ob_type, tt);
	if (!split || o->idict_model == PYIDICT_OFFSET) {
		spy_addr_t d = fakepy_dict(fp, keys, vals, 2, true);
		if (o->idict_model == PYIDICT_OFFSET) {
			fakepy_w64(fp, obj + 0x18, d); /* tp_dictoffset 0x18 */
		} else {
			fakepy_w64(fp, obj - o->managed_dict_off, d);
		}
		return obj;
	}
	/* Split: the class's shared keys, this instance's values. */
	spy_addr_t values;
	if (o->idict_model == PYIDICT_INLINE313) {
		values = obj + basicsize;
		fakepy_w8(fp, values + o->dictvalues_valid, 1);
	} else {
		values = fakepy_alloc(fp, 0x40);
	}
	spy_addr_t ck = fakepy_dict_keys(fp, keys, vals, 2, true, values + o->dictvalues_values);
	fakepy_w64(fp, tt + o->heaptype_cached_keys, ck);
	if (o->idict_model == PYIDICT_MANAGED311) {
		fakepy_w64(fp, obj - o->managed_values_off, values);
	} else if (o->idict_model == PYIDICT_TAGGED312) {
		fakepy_w64(fp, obj - o->managed_dict_off, values - 1);
	}
	return obj;
}

void fakepy_threading(struct fakepy *fp, spy_addr_t interp, const spy_addr_t *tstates,
		      const char *const *names, size_t n, bool split, struct fakepy_threading *out)
{
	const struct pyoffsets *o = &fp->row;
	if (n > FAKEPY_MAX_THREADS) {
		SPY_BUG("fakepy: %zu named threads", n);
	}
	memset(out, 0, sizeof(*out));
	spy_addr_t module_type = named_type(fp, "module");
	spy_addr_t tt = fakepy_object(fp, fp->type_type, 0x600);
	out->thread_type = tt;
	fakepy_w64(fp, tt + o->type_name, cstring(fp, "Thread"));
	uint64_t flags = 0;
	if (o->tpflags_managed_dict != PYOFF_NONE) {
		flags |= o->tpflags_managed_dict;
	}
	if (o->tpflags_inline_values != PYOFF_NONE && split) {
		flags |= o->tpflags_inline_values;
	}
	fakepy_w64(fp, tt + o->type_flags, flags);
	fakepy_w64(fp, tt + o->type_basicsize, 0x20);
	fakepy_w64(fp, tt + o->type_dictoffset, o->idict_model == PYIDICT_OFFSET ? 0x18 : 0);

	const char *attr = o->str_model == PYSTR_BYTES27 ? "_Thread__name" : "_name";
	spy_addr_t ak[FAKEPY_MAX_THREADS], av[FAKEPY_MAX_THREADS];
	for (size_t i = 0; i < n; i++) {
		ak[i] = fakepy_int(fp, fakepy_thread_id(fp, tstates[i]));
		av[i] = out->inst[i] = thread_instance(fp, tt, attr, fakepy_str(fp, names[i]), split);
	}
	out->active = fakepy_dict(fp, ak, av, n, false);
	spy_addr_t mk[2] = { fakepy_str(fp, "_active"), fakepy_str(fp, "_limbo") };
	spy_addr_t mv[2] = { out->active, fakepy_dict(fp, NULL, NULL, 0, true) };
	out->module = fakepy_object(fp, module_type, 0x80);
	fakepy_w64(fp, out->module + o->module_dict, fakepy_dict(fp, mk, mv, 2, true));
	spy_addr_t sk[3] = { fakepy_str(fp, "sys"), fakepy_str(fp, "threading"), fakepy_str(fp, "os") };
	spy_addr_t sv[3] = { fakepy_object(fp, module_type, 0x80), out->module,
			     fakepy_object(fp, module_type, 0x80) };
	fakepy_w64(fp, interp + o->interp_modules, fakepy_dict(fp, sk, sv, 3, true));
}

spy_addr_t fakepy_data_alloc(struct fakepy *fp, size_t size)
{
	spy_addr_t at = (fp->front_next + 15) & ~(spy_addr_t)15;
	if (at + size > fp->data_lo + fp->front) {
		SPY_BUG("fakepy: data front area full");
	}
	fp->front_next = at + size;
	return at;
}

spy_addr_t fakepy_type(struct fakepy *fp, const char *tp_name)
{
	spy_addr_t t = static_alloc(fp, 0x200);
	fakepy_w64(fp, t, 1);
	/* Every type's type is `type`, itself included (the first one made). */
	fakepy_w64(fp, t + fp->row.ob_type, fp->type_type ? fp->type_type : t);
	fakepy_w64(fp, t + fp->row.type_name, cstring(fp, tp_name));
	return t;
}

spy_addr_t fakepy_sys_version(struct fakepy *fp)
{
	return fp->sys_version;
}

spy_addr_t fakepy_object(struct fakepy *fp, spy_addr_t type, size_t size)
{
	spy_addr_t o = fakepy_alloc(fp, size < 0x20 ? 0x20 : size);
	fakepy_w64(fp, o, 1);
	fakepy_w64(fp, o + fp->row.ob_type, type);
	return o;
}

spy_addr_t fakepy_dict_type(struct fakepy *fp)
{
	return fp->dict_type;
}

spy_addr_t fakepy_code_type(struct fakepy *fp)
{
	return fp->code_type;
}

const struct spy_mem *fakepy_mem(struct fakepy *fp)
{
	return &fp->smem;
}

struct pyrt_hints *fakepy_hints(struct fakepy *fp)
{
	return &fp->hints;
}

struct pyrt *fakepy_open(struct fakepy *fp, struct spy_strtab *strs)
{
	struct pyrt *rt = NULL;
	struct spy_err err = SPY_ERR_INIT;
	if (pyrt_new(&rt, &fp->smem, &fp->hints, strs, &err) < 0) {
		fprintf(stderr, "pyrt_new(%x): %s\n", fp->version, err.msg);
		return NULL;
	}
	return rt;
}

const struct pyoffsets *fakepy_row(struct fakepy *fp)
{
	return &fp->row;
}

/* ---- strings ---- */

static size_t utf8_decode(const char *s, uint32_t *cps, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = 0;
	while (*p && n < max) {
		uint32_t c = *p++;
		int more = 0;
		if (c >= 0xf0) {
			c &= 0x07, more = 3;
		} else if (c >= 0xe0) {
			c &= 0x0f, more = 2;
		} else if (c >= 0xc0) {
			c &= 0x1f, more = 1;
		}
		while (more-- > 0 && *p) {
			c = (c << 6) | (*p++ & 0x3f);
		}
		cps[n++] = c;
	}
	return n;
}

spy_addr_t fakepy_str_raw(struct fakepy *fp, int64_t length, uint32_t state, const void *data,
			  size_t datalen)
{
	const struct pyoffsets *o = &fp->row;
	int ascii = (state >> o->str_ascii_bit) & 1;
	uint32_t hdr = ascii ? o->str_ascii_data : o->str_compact_data;
	spy_addr_t s = fakepy_alloc(fp, hdr + datalen + 8);
	fakepy_w64(fp, s, 1);
	fakepy_w64(fp, s + o->ob_type, fp->str_type);
	fakepy_w64(fp, s + o->str_length, (uint64_t)length);
	fakepy_w32(fp, s + o->str_state, state);
	if (datalen) {
		memcpy(fakepy_at(fp, s + hdr), data, datalen);
	}
	return s;
}

spy_addr_t fakepy_str(struct fakepy *fp, const char *utf8)
{
	const struct pyoffsets *o = &fp->row;
	if (o->str_model == PYSTR_BYTES27) {
		size_t n = strlen(utf8);
		spy_addr_t s = fakepy_alloc(fp, o->bytes_sval + n + 1);
		fakepy_w64(fp, s, 1);
		fakepy_w64(fp, s + o->ob_type, fp->str_type);
		fakepy_w64(fp, s + o->ob_size, n);
		memcpy(fakepy_at(fp, s + o->bytes_sval), utf8, n + 1);
		return s;
	}
	size_t max = strlen(utf8) + 1;
	uint32_t *cps = spy_xmalloc(max * sizeof(*cps));
	size_t n = utf8_decode(utf8, cps, max);
	uint32_t top = 0;
	for (size_t i = 0; i < n; i++) {
		top = cps[i] > top ? cps[i] : top;
	}
	unsigned kind = top < 0x100 ? 1 : top < 0x10000 ? 2 : 4;
	int ascii = top < 0x80;
	unsigned char *data = spy_xcalloc(n + 1, kind);
	for (size_t i = 0; i < n; i++) {
		if (kind == 1) {
			data[i] = (unsigned char)cps[i];
		} else if (kind == 2) {
			uint16_t u = (uint16_t)cps[i];
			memcpy(data + 2 * i, &u, 2);
		} else {
			memcpy(data + 4 * i, &cps[i], 4);
		}
	}
	/* ready (after ascii, <= 3.11) is set too, as a real compact string has it. */
	uint32_t state = (kind << o->str_kind_shift) | (1u << o->str_compact_bit) |
			 ((uint32_t)ascii << o->str_ascii_bit) | (1u << (o->str_ascii_bit + 1));
	spy_addr_t s = fakepy_str_raw(fp, (int64_t)n, state, data, (n + 1) * kind);
	free(data);
	free(cps);
	return s;
}

spy_addr_t fakepy_bytes(struct fakepy *fp, const void *data, size_t len)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t b = fakepy_alloc(fp, o->bytes_sval + len + 1);
	fakepy_w64(fp, b, 1);
	fakepy_w64(fp, b + o->ob_type, fp->bytes_type);
	fakepy_w64(fp, b + o->ob_size, len);
	if (len) {
		memcpy(fakepy_at(fp, b + o->bytes_sval), data, len);
	}
	return b;
}

/* ---- line tables: encoders, one per format ---- */

static size_t put(uint8_t *out, size_t cap, size_t n, uint8_t b)
{
	if (n < cap) {
		out[n] = b;
	}
	return n + 1;
}

/* co_lnotab: advance to the address, then step the line (2.7 unsigned, 3.x signed). */
static size_t enc_lnotab(int is_signed, int32_t delta, uint32_t addr, uint8_t *out, size_t cap)
{
	size_t n = 0;
	int lim_hi = is_signed ? 127 : 255, lim_lo = is_signed ? -128 : 0;
	if (!is_signed && delta < 0) {
		delta = 0; /* 2.7 tables cannot go backwards */
	}
	while (addr > 255) {
		n = put(out, cap, n, 255);
		n = put(out, cap, n, 0);
		addr -= 255;
	}
	do {
		int step = delta > lim_hi ? lim_hi : delta < lim_lo ? lim_lo : delta;
		n = put(out, cap, n, (uint8_t)addr);
		n = put(out, cap, n, (uint8_t)(int8_t)step);
		delta -= step;
		addr = 0;
	} while (delta != 0);
	return n;
}

/* 3.10: cover [0, a) on the first line, then [a, a+2) on the target line. */
static size_t enc_310(int32_t delta, uint32_t a, uint32_t end, uint8_t *out, size_t cap)
{
	size_t n = 0;
	end = end > a ? end - a : 0;
	while (a > 0) {
		uint32_t len = a > 254 ? 254 : a;
		n = put(out, cap, n, (uint8_t)len);
		n = put(out, cap, n, 0);
		a -= len;
	}
	while (delta > 127 || delta < -127) {
		int step = delta > 0 ? 127 : -127;
		n = put(out, cap, n, 0);
		n = put(out, cap, n, (uint8_t)(int8_t)step);
		delta -= step;
	}
	n = put(out, cap, n, 2);
	n = put(out, cap, n, (uint8_t)(int8_t)delta);
	end = end > 2 ? end - 2 : 0;
	while (end > 0) {
		uint32_t len = end > 254 ? 254 : end;
		n = put(out, cap, n, (uint8_t)len);
		n = put(out, cap, n, 0);
		end -= len;
	}
	return n;
}

static size_t enc_varint(uint32_t v, uint8_t *out, size_t cap, size_t n)
{
	while (v >= 64) {
		n = put(out, cap, n, (uint8_t)(0x40 | (v & 63)));
		v >>= 6;
	}
	return put(out, cap, n, (uint8_t)v);
}

/* 3.11+: short-form entries up to idx, then a "no columns" entry with the delta. */
static size_t enc_locations(int32_t delta, uint32_t idx, uint32_t ncode, uint8_t *out, size_t cap)
{
	size_t n = 0;
	uint32_t u = 0;
	while (u < idx) {
		uint32_t k = idx - u > 8 ? 8 : idx - u;
		n = put(out, cap, n, (uint8_t)(0x80 | (0 << 3) | (k - 1)));
		n = put(out, cap, n, 0x01);
		u += k;
	}
	n = put(out, cap, n, (uint8_t)(0x80 | (13 << 3) | 0));
	uint32_t sv = delta < 0 ? ((uint32_t)(-delta) << 1) | 1 : (uint32_t)delta << 1;
	n = enc_varint(sv, out, cap, n);
	u++;
	while (u < ncode) {
		uint32_t k = ncode - u > 8 ? 8 : ncode - u;
		n = put(out, cap, n, (uint8_t)(0x80 | (0 << 3) | (k - 1)));
		n = put(out, cap, n, 0x01);
		u += k;
	}
	return n;
}

size_t fakepy_linetable(int model, int32_t firstlineno, uint32_t ncode, uint32_t idx, int32_t line,
			uint8_t *out, size_t cap)
{
	int32_t delta = line - firstlineno;
	switch (model) {
	case PYLINE_LNOTAB_U8:
		return enc_lnotab(0, delta, 2 * idx, out, cap);
	case PYLINE_LNOTAB_S8:
		return enc_lnotab(1, delta, 2 * idx, out, cap);
	case PYLINE_LINETABLE_310:
		return enc_310(delta, 2 * idx, 2 * ncode, out, cap);
	case PYLINE_LOCATIONS:
		return enc_locations(delta, idx, ncode, out, cap);
	default:
		return 0;
	}
}

spy_addr_t fakepy_code(struct fakepy *fp, const char *name, const char *file, int32_t firstlineno,
		       uint32_t ncode, uint32_t idx, int32_t line)
{
	const struct pyoffsets *o = &fp->row;
	uint8_t tab[8192];
	size_t tlen = fakepy_linetable(o->line_model, firstlineno, ncode, idx, line, tab, sizeof(tab));
	if (tlen > sizeof(tab)) {
		SPY_BUG("fakepy: line table too long");
	}
	size_t extra = o->code_adaptive != PYOFF_NONE ? 2 * (size_t)ncode : 0;
	spy_addr_t c = fakepy_alloc(fp, o->code_size + extra + 16);
	fakepy_w64(fp, c, 1);
	fakepy_w64(fp, c + o->ob_type, fp->code_type);
	if (o->code_adaptive != PYOFF_NONE) {
		/* 3.11+ code objects are var-sized: ob_size counts code units. */
		fakepy_w64(fp, c + o->ob_size, ncode);
		fakepy_w32(fp, c + o->code_firsttraceable, 0);
	}
	fakepy_w32(fp, c + o->code_firstlineno, (uint32_t)firstlineno);
	const char *dot = strrchr(name, '.');
	fakepy_w64(fp, c + o->code_name, fakepy_str(fp, dot ? dot + 1 : name));
	if (o->code_qualname != PYOFF_NONE) {
		fakepy_w64(fp, c + o->code_qualname, fakepy_str(fp, name));
	}
	fakepy_w64(fp, c + o->code_filename, fakepy_str(fp, file));
	fakepy_w64(fp, c + o->code_linetable, fakepy_bytes(fp, tab, tlen));
	return c;
}

/* ---- runtime, interpreters, threads ---- */

static void write_debug_offsets(struct fakepy *fp)
{
	const struct pyoffsets *o = &fp->row;
	const struct pydebug_layout *d = &o->dbg;
	spy_addr_t r = fp->runtime;
	memcpy(fakepy_at(fp, r), PYDEBUG_COOKIE, 8);
#define W(field, val)                                            \
	do {                                                     \
		if (d->field != PYOFF_NONE) {                    \
			fakepy_w64(fp, r + d->field, (val));     \
		}                                                \
	} while (0)
	W(version, fp->version);
	W(free_threaded, (o->build & PYBUILD_FT) != 0);
#define W_SAME(field) W(field, o->field);
	PYDEBUG_FIELDS(W_SAME)
	PYDEBUG_TASK_FIELDS(W_SAME)
	if (o->build & PYBUILD_FT) {
		PYDEBUG_FT_FIELDS(W_SAME)
	}
#undef W_SAME
	/* _gil placed at an arbitrary interp offset; only the differences matter. */
	W(interp_gil_state, 0x1000);
	W(interp_gil_locked, 0x1000 + o->gil_locked);
	W(interp_gil_holder, 0x1000 + o->gil_last_holder);
	if (o->build & PYBUILD_FT) {
		/* Unlike locked and holder, CPython gives this one relative to
		 * the _gil_runtime_state (offsetof(struct _gil_runtime_state,
		 * enabled)), not to the interpreter. */
		W(interp_gil_enabled, o->gil_enabled);
	}
	/* The gc state at an arbitrary place before the flag: only the sum matters. */
	W(interp_gc, o->interp_gc_collecting - 0x20);
	W(gc_collecting, 0x20);
	W(tstate_size, o->tstate_size);
	W(iframe_size, o->iframe_size);
	W(code_size, o->code_size);
	W(str_ascii_size, o->str_ascii_data);
#undef W
}

static spy_addr_t head_slot(struct fakepy *fp)
{
	return fp->runtime ? fp->runtime + fp->row.rt_interpreters_head : fp->interp_head_var;
}

spy_addr_t fakepy_new_interp(struct fakepy *fp, int64_t id)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t ip = fakepy_alloc(fp, o->interp_size);
	if (o->interp_id != PYOFF_NONE) {
		fakepy_w64(fp, ip + o->interp_id, (uint64_t)id);
	}
	if (o->interp_ceval_gil != PYOFF_NONE) {
		spy_addr_t g = fakepy_alloc(fp, 0x100);
		fakepy_w64(fp, ip + o->interp_ceval_gil, g);
		/* A free-threaded build with its GIL switched on, so that the
		 * holder tests mean the same for every row (fakepy_gil_off). */
		if (o->gil_enabled != PYOFF_NONE) {
			fakepy_w32(fp, g + o->gil_enabled, 1);
		}
	}
	/* sys.modules and the sys dict: what a guessed interpreter must have
	 * (sys.modules empty, its keys not NULL: a real dict's never are). */
	if (o->interp_modules != PYOFF_NONE) {
		fakepy_w64(fp, ip + o->interp_modules, fakepy_dict(fp, NULL, NULL, 0, true));
	}
	if (o->interp_sysdict != PYOFF_NONE) {
		fakepy_w64(fp, ip + o->interp_sysdict, fakepy_object(fp, fp->dict_type, 0x30));
	}
	fakepy_w64(fp, ip + o->interp_next, fakepy_r64(fp, head_slot(fp)));
	fakepy_w64(fp, head_slot(fp), ip);
	return ip;
}

spy_addr_t fakepy_main_interp(struct fakepy *fp)
{
	return fp->main_interp;
}

/* What Py_GetVersion() leaves in .bss: "X.Y.Z[level N] (build) [compiler]". */
static void write_sys_version(struct fakepy *fp)
{
	uint32_t v = fp->version;
	unsigned level = (v >> 4) & 0xf;
	const char *lv = level == 0xa ? "a" : level == 0xb ? "b" : level == 0xc ? "rc" : "";
	char text[SYS_VERSION_LEN];
	char serial[8] = "";
	if (*lv) {
		snprintf(serial, sizeof(serial), "%u", v & 0xf);
	}
	snprintf(text, sizeof(text), "%u.%u.%u%s%s (default, Jan  1 2024, 00:00:00) \n[GCC 12.2.0]",
		 v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, lv, serial);
	fp->sys_version = static_alloc(fp, SYS_VERSION_LEN);
	memcpy(fakepy_at(fp, fp->sys_version), text, strlen(text) + 1);
}

struct fakepy *fakepy_new(const struct pyoffsets *row, uint32_t version)
{
	return fakepy_new_front(row, version, DATA_FRONT);
}

struct fakepy *fakepy_new_front(const struct pyoffsets *row, uint32_t version, size_t front)
{
	struct fakepy *fp = spy_xcalloc(1, sizeof(*fp));
	fp->front = (front + 15) & ~(size_t)15;
	const struct pyoffsets *o = &fp->row;
	fp->row = *row;
	fp->version = version;
	fp->mem = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (fp->mem == MAP_FAILED) {
		SPY_BUG("fakepy: no memory for a %u MiB image", ARENA >> 20);
	}
	fp->used = 0x1000; /* keep the base itself unused, like a real heap */
	fp->map.lo = FAKEPY_BASE;
	fp->map.hi = FAKEPY_BASE + ARENA;
	fp->map.perms = SPY_MAP_R | SPY_MAP_W;
	fp->map.path = "";
	fp->smem.read = fake_read;
	fp->smem.ctx = fp;
	fp->smem.maps = &fp->map;
	fp->smem.nmaps = 1;
	fp->hints.binary = "fakepy";
	fp->hints.pid = FAKEPY_PID;

	bool has_rt = o->rt_interpreters_head != PYOFF_NONE;
	size_t dsize = fp->front + DATA_STATICS + (has_rt ? o->rt_size : 0);
	fp->data_lo = fakepy_alloc(fp, dsize);
	fp->data_hi = fp->data_lo + dsize;
	fp->front_next = fp->data_lo;
	fp->statics_next = fp->data_lo + fp->front;
	fp->statics_end = fp->data_hi;
	fp->hints.data_lo = fp->data_lo;
	fp->hints.data_hi = fp->data_hi;

	fp->type_type = fakepy_type(fp, "type");
	fp->code_type = fakepy_type(fp, "code");
	fp->str_type = fakepy_type(fp, "str");
	fp->bytes_type = o->str_model == PYSTR_BYTES27 ? fp->str_type : fakepy_type(fp, "bytes");
	fp->dict_type = fakepy_type(fp, "dict");
	fp->frame_type = fakepy_type(fp, "frame");
	fp->none_type = fakepy_type(fp, "NoneType");
	fp->none = static_alloc(fp, 16);
	fakepy_w64(fp, fp->none, 1);
	fakepy_w64(fp, fp->none + o->ob_type, fp->none_type);
	write_sys_version(fp);

	if (has_rt) {
		fp->runtime = static_alloc(fp, o->rt_size);
		fp->hints.runtime = fp->runtime;
	} else {
		fp->interp_head_var = static_alloc(fp, 8);
		fp->hints.interp_head = fp->interp_head_var;
	}
	if (o->gil_model == PYGIL_TSTATE_CURRENT) {
		fp->tstate_current_var = static_alloc(fp, 8);
		fp->hints.tstate_current = fp->tstate_current_var;
	}
	if (version >= 0x030b0000) {
		/* Py_Version is in .rodata: outside the data section. */
		spy_addr_t pv = fakepy_alloc(fp, 4);
		fakepy_w32(fp, pv, version);
		fp->hints.py_version = pv;
	} else {
		/* What profiler/open.c gets from a file name: major.minor only. */
		fp->hints.version_hint = version & 0xffff0000u;
	}
	if (o->dbg.size) {
		write_debug_offsets(fp);
	}
	fp->main_interp = fakepy_new_interp(fp, 0);
	if (fp->runtime && o->rt_interpreters_main != PYOFF_NONE) {
		fakepy_w64(fp, fp->runtime + o->rt_interpreters_main, fp->main_interp);
	}
	return fp;
}

void fakepy_free(struct fakepy *fp)
{
	if (!fp) {
		return;
	}
	munmap(fp->mem, ARENA);
	free(fp);
}

spy_addr_t fakepy_thread(struct fakepy *fp, spy_addr_t interp, int32_t tid)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t t = fakepy_alloc(fp, o->tstate_size);
	spy_addr_t pt = fakepy_alloc(fp, PTHREAD_SIZE);
	fakepy_w32(fp, pt + PTHREAD_TID, (uint32_t)tid);
	fakepy_w64(fp, pt, pt); /* glibc's header.self, like the real thing */
	fakepy_w64(fp, t + o->tstate_thread_id, pt);
	if (o->tstate_native_thread_id != PYOFF_NONE) {
		fakepy_w64(fp, t + o->tstate_native_thread_id, (uint64_t)tid);
	}
	fakepy_w64(fp, t + o->tstate_interp, interp);
	if (o->tstate_cframe != PYOFF_NONE) {
		fakepy_w64(fp, t + o->tstate_cframe, fakepy_alloc(fp, 0x40));
	}
	spy_addr_t old = fakepy_r64(fp, interp + o->interp_tstate_head);
	fakepy_w64(fp, t + o->tstate_next, old);
	if (old && o->tstate_prev != PYOFF_NONE) {
		fakepy_w64(fp, old + o->tstate_prev, t);
	}
	fakepy_w64(fp, interp + o->interp_tstate_head, t);
	return t;
}

uint64_t fakepy_thread_id(struct fakepy *fp, spy_addr_t tstate)
{
	return fakepy_r64(fp, tstate + fp->row.tstate_thread_id);
}

spy_addr_t fakepy_gil_switches(struct fakepy *fp, spy_addr_t interp)
{
	const struct pyoffsets *o = &fp->row;
	if (o->gil_model == PYGIL_RUNTIME && o->rt_gil_switch_number != PYOFF_NONE) {
		return fp->runtime + o->rt_gil_switch_number;
	}
	if (o->gil_model == PYGIL_INTERP && o->gil_switch_number != PYOFF_NONE) {
		return fakepy_r64(fp, interp + o->interp_ceval_gil) + o->gil_switch_number;
	}
	return 0;
}

void fakepy_set_gil(struct fakepy *fp, spy_addr_t interp, spy_addr_t tstate)
{
	const struct pyoffsets *o = &fp->row;
	/* As take_gil(): a switch counted when the GIL goes to another thread than the last. */
	spy_addr_t sw = fakepy_gil_switches(fp, interp);
	spy_addr_t last = o->gil_model == PYGIL_INTERP ? sw - o->gil_switch_number + o->gil_last_holder
			  : fp->runtime + o->rt_gil_last_holder;
	if (sw && tstate && fakepy_r64(fp, last) != tstate) {
		fakepy_w64(fp, sw, fakepy_r64(fp, sw) + 1);
	}
	switch (o->gil_model) {
	case PYGIL_TSTATE_CURRENT:
		fakepy_w64(fp, fp->tstate_current_var, tstate);
		break;
	case PYGIL_RUNTIME:
		fakepy_w64(fp, fp->runtime + o->rt_gilstate_tstate_current, tstate);
		/* Absent in rows patched for 3.7.0-3.7.3 (pystate/layouts.c). */
		if (tstate && o->rt_gil_last_holder != PYOFF_NONE) {
			fakepy_w64(fp, fp->runtime + o->rt_gil_last_holder, tstate);
		}
		if (o->rt_gil_locked != PYOFF_NONE) {
			fakepy_w32(fp, fp->runtime + o->rt_gil_locked, tstate != 0);
		}
		break;
	case PYGIL_INTERP: {
		spy_addr_t g = fakepy_r64(fp, interp + o->interp_ceval_gil);
		if (tstate) {
			fakepy_w64(fp, g + o->gil_last_holder, tstate);
		}
		fakepy_w32(fp, g + o->gil_locked, tstate != 0);
		break;
	}
	}
}

spy_addr_t fakepy_top_slot(struct fakepy *fp, spy_addr_t tstate)
{
	const struct pyoffsets *o = &fp->row;
	if (o->frame_model == PYFRAME_OBJECT) {
		return tstate + o->tstate_frame;
	}
	if (o->tstate_current_frame != PYOFF_NONE) {
		return tstate + o->tstate_current_frame;
	}
	return fakepy_r64(fp, tstate + o->tstate_cframe) + o->cframe_current_frame;
}

spy_addr_t fakepy_back_slot(struct fakepy *fp, spy_addr_t frame)
{
	const struct pyoffsets *o = &fp->row;
	return frame + (o->frame_model == PYFRAME_OBJECT ? o->frame_back : o->iframe_previous);
}

spy_addr_t fakepy_code_slot(struct fakepy *fp, spy_addr_t frame)
{
	const struct pyoffsets *o = &fp->row;
	return frame + (o->frame_model == PYFRAME_OBJECT ? o->frame_code : o->iframe_code);
}

uint64_t fakepy_ref(struct fakepy *fp, spy_addr_t obj)
{
	/* Tagged as CPython 3.14+ tags a deferred reference (Py_TAG_REFCNT,
	 * the low bit), so every walk over such a row must clear the tag. */
	return obj && fp->row.stackref_tag_bits != PYOFF_NONE ? obj | 1 : obj;
}

spy_addr_t fakepy_push_frame(struct fakepy *fp, spy_addr_t tstate, spy_addr_t code, uint32_t idx,
			     uint8_t owner)
{
	const struct pyoffsets *o = &fp->row;
	spy_addr_t slot = fakepy_top_slot(fp, tstate);
	spy_addr_t f;
	if (o->frame_model == PYFRAME_OBJECT) {
		f = fakepy_object(fp, fp->frame_type, o->frame_localsplus + 8 * FAKEPY_LOCALS);
		fakepy_w32(fp, f + o->frame_lasti,
			   o->instr_model == PYINSTR_LASTI_UNITS ? idx : 2 * idx);
	} else {
		f = fakepy_alloc(fp, o->iframe_size + 8 * FAKEPY_LOCALS);
		/* prev_instr (3.11/3.12) points at the instruction being run during a
		 * call, instr_ptr (3.13) too: both give code unit idx. */
		fakepy_w64(fp, f + o->iframe_instr, code + o->code_adaptive + 2 * (uint64_t)idx);
		fakepy_w8(fp, f + o->iframe_owner, owner);
	}
	fakepy_w64(fp, fakepy_code_slot(fp, f), fakepy_ref(fp, code));
	fakepy_w64(fp, fakepy_back_slot(fp, f), fakepy_r64(fp, slot));
	fakepy_w64(fp, slot, f);
	return f;
}

spy_addr_t fakepy_local_slot(struct fakepy *fp, spy_addr_t frame, size_t i)
{
	const struct pyoffsets *o = &fp->row;
	if (i >= FAKEPY_LOCALS) {
		SPY_BUG("fakepy: local slot %zu out of %d", i, FAKEPY_LOCALS);
	}
	return frame + 8 * i +
	       (o->frame_model == PYFRAME_OBJECT ? o->frame_localsplus : o->iframe_localsplus);
}

spy_addr_t fakepy_push_shim(struct fakepy *fp, spy_addr_t tstate)
{
	const struct pyoffsets *o = &fp->row;
	if (o->owner_shim == PYOWNER_NONE) {
		SPY_BUG("fakepy: this row has no C-stack shims");
	}
	spy_addr_t code;
	if (o->frame_model == PYFRAME_IFRAME_EXEC) {
		code = fp->none; /* 3.13: the shim's f_executable is None */
	} else {
		if (!fp->trampoline) {
			fp->trampoline = fakepy_code(fp, "<interpreter trampoline>", "<shim>", 0, 4, 0, 0);
		}
		code = fp->trampoline;
	}
	return fakepy_push_frame(fp, tstate, code, 0, o->owner_shim);
}

