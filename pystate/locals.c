/*
 * dump --locals: the arguments and locals of one frame, each value read one
 * level deep, and their short reprs.
 *
 * A frame's slots are an array of object pointers right after the frame:
 * PyFrameObject.f_localsplus before 3.11 (names in co_varnames, co_nlocals
 * of them; cells follow and are not shown), _PyInterpreterFrame.localsplus
 * from 3.11 (names in co_localsplusnames, a kind byte each in
 * co_localspluskinds; Include/internal/pycore_code.h CO_FAST_*). Values are
 * recognised by their type's tp_name, remembered per type address: a
 * subclass of int has another name and is shown as its type only, which is
 * honest, where guessing its layout would not be.
 *
 * Why reprs are built from a decoded struct py_value rather than text
 * produced while reading: the target is paused only for the reads; the
 * formatting (a big int's decimal digits, float round-tripping) runs after
 * it is let go, and the formatting is a pure function the unit tests drive.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystr.h"

/* CO_FAST_* kinds (3.11+) and co_flags bits, the same in every version. */
#define KIND_HIDDEN 0x10
#define KIND_CELL 0x40
#define KIND_FREE 0x80
#define FLAG_VARARGS 0x4
#define FLAG_VARKEYWORDS 0x8

/* How a value of a known type is read: more cases than the public kinds. */
enum rd {
	RD_OTHER = 0,
	RD_NONE,
	RD_BOOL,
	RD_INT27,   /* 2.7 PyIntObject */
	RD_LONG,
	RD_FLOAT,
	RD_STR,     /* 3.x PEP 393 */
	RD_U27,     /* 2.7 unicode */
	RD_BYTES,   /* 3.x bytes, 2.7 str */
	RD_SEQ,     /* list, tuple: ob_size */
	RD_DICT,
	RD_SET,
	RD_CELL,
};

static enum rd kind_of_name(const struct pyrt *rt, const char *name)
{
	bool py2 = rt->off.str_model == PYSTR_BYTES27;
	static const struct {
		const char *name;
		enum rd py2, py3;
	} names[] = {
		{ "NoneType", RD_NONE, RD_NONE },  { "bool", RD_BOOL, RD_BOOL },
		{ "int", RD_INT27, RD_LONG },      { "long", RD_LONG, RD_OTHER },
		{ "float", RD_FLOAT, RD_FLOAT },   { "str", RD_BYTES, RD_STR },
		{ "unicode", RD_U27, RD_OTHER },   { "bytes", RD_OTHER, RD_BYTES },
		{ "list", RD_SEQ, RD_SEQ },        { "tuple", RD_SEQ, RD_SEQ },
		{ "dict", RD_DICT, RD_DICT },      { "set", RD_SET, RD_SET },
		{ "frozenset", RD_SET, RD_SET },   { "cell", RD_CELL, RD_CELL },
	};
	for (size_t i = 0; i < SPY_ARRAY_SIZE(names); i++) {
		if (!strcmp(names[i].name, name)) {
			return py2 ? names[i].py2 : names[i].py3;
		}
	}
	return RD_OTHER;
}

/* The memo entry of type, reading its tp_name on first sight; NULL if unreadable. */
static const struct pytype_memo *type_memo(struct pyrt *rt, spy_addr_t type)
{
	for (size_t i = 0; i < rt->ntypes; i++) {
		if (rt->types[i].type == type) {
			return &rt->types[i];
		}
	}
	char name[64];
	spy_addr_t tp_name;
	if (!spy_mem_plausible(rt->mem, type, 8) ||
	    spy_mem_read_addr(rt->mem, type + rt->off.type_name, &tp_name) < 0 ||
	    !spy_mem_plausible(rt->mem, tp_name, 1)) {
		return NULL;
	}
	/* A name near the end of a mapping: read byte-wise rather than fail. */
	size_t len = 0;
	while (len < sizeof(name) - 1 && spy_mem_read(rt->mem, tp_name + len, &name[len], 1) == 0 &&
	       name[len]) {
		len++;
	}
	name[len] = 0;
	if (len == 0) {
		return NULL;
	}
	/* A full memo is recycled from the start: types are few in practice. */
	struct pytype_memo *m = &rt->types[rt->ntypes < SPY_ARRAY_SIZE(rt->types) ? rt->ntypes++ : 0];
	m->type = type;
	m->kind = (uint8_t)kind_of_name(rt, name);
	m->name = spy_strtab_intern(rt->strs, name, len);
	return m;
}

static int read_i64(struct pyrt *rt, spy_addr_t addr, int64_t *v)
{
	return spy_mem_read(rt->mem, addr, v, sizeof(*v));
}

/* A PyLongObject: small values in ival, bigger ones as bounded digits. */
static void read_long(struct pyrt *rt, spy_addr_t obj, struct py_value *v)
{
	const struct pyoffsets *o = &rt->off;
	int64_t size;
	uint64_t n;
	bool neg;
	if (o->long_tag != PYOFF_NONE) {
		/* 3.12+ lv_tag: digit count << 3, sign in the low bits (2 = negative). */
		uint64_t tag;
		if (spy_mem_read(rt->mem, obj + o->long_tag, &tag, sizeof(tag)) < 0) {
			v->kind = PYV_UNREADABLE;
			return;
		}
		n = tag >> 3;
		neg = (tag & 3) == 2;
	} else {
		if (read_i64(rt, obj + o->ob_size, &size) < 0) {
			v->kind = PYV_UNREADABLE;
			return;
		}
		neg = size < 0;
		n = neg ? (uint64_t)0 - (uint64_t)size : (uint64_t)size;
	}
	v->kind = PYV_INT;
	v->shift = o->long_shift;
	v->negative = neg;
	v->len = (int64_t)n;
	size_t take = n > PYV_MAX_DIGITS ? PYV_MAX_DIGITS : (size_t)n;
	if (o->long_shift == 0 || o->long_shift > 31 ||
	    spy_mem_read(rt->mem, obj + o->long_digit, v->digits, take * sizeof(uint32_t)) < 0) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	v->ndigits = (uint32_t)take;
	v->truncated = take < n;
	if (n * o->long_shift <= 62) {
		uint64_t x = 0;
		for (size_t i = take; i-- > 0;) {
			x = (x << o->long_shift) | (v->digits[i] & ((1u << o->long_shift) - 1));
		}
		v->ival = neg ? -(int64_t)x : (int64_t)x;
		v->ndigits = 0;
	}
}

/* Bytes as printable ASCII with \xNN escapes (what a repr shows), capped. */
static void read_bytes(struct pyrt *rt, spy_addr_t obj, struct py_value *v)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char raw[PYV_MAX_TEXT];
	char esc[PYV_MAX_TEXT * 4 + 1];
	int64_t len;
	if (read_i64(rt, obj + o->ob_size, &len) < 0 || len < 0) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	size_t take = len > PYV_MAX_TEXT ? PYV_MAX_TEXT : (size_t)len;
	if (spy_mem_read(rt->mem, obj + o->bytes_sval, raw, take) < 0) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < take; i++) {
		unsigned char c = raw[i];
		if (c == '\\' || c == '\'') {
			esc[k++] = '\\';
			esc[k++] = (char)c;
		} else if (c >= 0x20 && c < 0x7f) {
			esc[k++] = (char)c;
		} else {
			k += (size_t)snprintf(esc + k, sizeof(esc) - k, "\\x%02x", c);
		}
	}
	v->kind = PYV_BYTES;
	v->len = len;
	v->truncated = take < (size_t)len;
	v->text = spy_strtab_intern(rt->strs, esc, k);
}

static void read_str(struct pyrt *rt, spy_addr_t obj, struct py_value *v)
{
	char buf[PYSTR_BUF];
	size_t len;
	int trunc = 0;
	int64_t chars = 0;
	if (pystr_read(rt->mem, &rt->off, obj, buf, sizeof(buf), &len, &trunc, NULL) < 0) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	read_i64(rt, obj + rt->off.str_length, &chars);
	/* Cut at a character boundary at most PYV_MAX_TEXT bytes in. */
	if (len > PYV_MAX_TEXT) {
		len = PYV_MAX_TEXT;
		while (len > 0 && ((unsigned char)buf[len] & 0xc0) == 0x80) {
			len--;
		}
		trunc = 1;
	}
	v->kind = PYV_STR;
	v->len = chars;
	v->truncated = trunc != 0;
	v->text = spy_strtab_intern(rt->strs, buf, len);
}

/* 2.7 unicode: Py_UNICODE units (2 or 4 bytes) behind a pointer. */
static void read_u27(struct pyrt *rt, spy_addr_t obj, struct py_value *v)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char raw[PYV_MAX_TEXT * 4];
	char out[PYV_MAX_TEXT * 4 + 8];
	int64_t len;
	spy_addr_t data;
	uint32_t unit = o->u27_unit;
	if ((unit != 2 && unit != 4) || read_i64(rt, obj + o->u27_length, &len) < 0 || len < 0 ||
	    spy_mem_read_addr(rt->mem, obj + o->u27_str, &data) < 0) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	size_t take = len > PYV_MAX_TEXT ? PYV_MAX_TEXT : (size_t)len;
	if (take && spy_mem_read(rt->mem, data, raw, take * unit) < 0) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	size_t pos = 0;
	for (size_t i = 0; i < take; i++) {
		uint32_t cp = 0;
		memcpy(&cp, raw + i * unit, unit);
		pystr_put_utf8(out, sizeof(out), &pos, cp);
	}
	v->kind = PYV_STR;
	v->len = len;
	v->truncated = take < (size_t)len;
	v->text = spy_strtab_intern(rt->strs, out, pos);
}

static void read_value(struct pyrt *rt, spy_addr_t obj, struct py_value *v, bool deref_cell);

static void read_by_kind(struct pyrt *rt, spy_addr_t obj, enum rd rd, struct py_value *v,
			 bool deref_cell)
{
	const struct pyoffsets *o = &rt->off;
	int64_t n = 0;
	switch (rd) {
	case RD_NONE:
		v->kind = PYV_NONE;
		break;
	case RD_BOOL:
	case RD_LONG:
		if (rd == RD_BOOL && o->int_ival != PYOFF_NONE) {
			/* 2.7's bool is a PyIntObject. */
			v->kind = read_i64(rt, obj + o->int_ival, &v->ival) < 0 ? PYV_UNREADABLE : PYV_BOOL;
			break;
		}
		read_long(rt, obj, v);
		if (rd == RD_BOOL && v->kind == PYV_INT) {
			v->kind = PYV_BOOL;
			v->ival = v->ival != 0;
		}
		break;
	case RD_INT27:
		v->kind = read_i64(rt, obj + o->int_ival, &v->ival) < 0 ? PYV_UNREADABLE : PYV_INT;
		break;
	case RD_FLOAT:
		v->kind = spy_mem_read(rt->mem, obj + o->float_fval, &v->fval, sizeof(v->fval)) < 0 ?
				  PYV_UNREADABLE : PYV_FLOAT;
		break;
	case RD_STR:
		read_str(rt, obj, v);
		break;
	case RD_U27:
		read_u27(rt, obj, v);
		break;
	case RD_BYTES:
		read_bytes(rt, obj, v);
		break;
	case RD_SEQ:
	case RD_DICT:
	case RD_SET: {
		uint32_t off = rd == RD_SEQ ? o->ob_size : rd == RD_DICT ? o->dict_used : o->set_used;
		bool ok = off != PYOFF_NONE && read_i64(rt, obj + off, &n) == 0 && n >= 0;
		v->kind = ok ? PYV_CONTAINER : PYV_UNREADABLE;
		v->len = n;
		break;
	}
	case RD_CELL: {
		spy_addr_t ref;
		if (deref_cell && spy_mem_read_addr(rt->mem, obj + o->cell_ref, &ref) == 0) {
			/* A captured variable: show what the cell holds, one level only. */
			read_value(rt, ref, v, false);
			return;
		}
		v->kind = PYV_OTHER;
		break;
	}
	case RD_OTHER:
		v->kind = PYV_OTHER;
		break;
	}
}

static void read_value(struct pyrt *rt, spy_addr_t obj, struct py_value *v, bool deref_cell)
{
	memset(v, 0, offsetof(struct py_value, digits));
	if (!obj) {
		v->kind = PYV_UNBOUND;
		return;
	}
	spy_addr_t type;
	const struct pytype_memo *m;
	if (!spy_mem_plausible(rt->mem, obj, 8) ||
	    spy_mem_read_addr(rt->mem, obj + rt->off.ob_type, &type) < 0 ||
	    !(m = type_memo(rt, type))) {
		v->kind = PYV_UNREADABLE;
		return;
	}
	v->type = m->name;
	read_by_kind(rt, obj, (enum rd)m->kind, v, deref_cell);
}

void pyrt_read_value(struct pyrt *rt, spy_addr_t obj, struct py_value *v)
{
	read_value(rt, obj, v, false);
}

/*
 * A run of a frame's slots named by one tuple: all of them from 3.11 (with
 * a kind byte each), the locals then the cells then the free variables
 * before (each run its own names tuple, cells holding PyCellObject).
 */
struct run {
	spy_addr_t slots;       /* first slot */
	size_t count;
	spy_addr_t names;       /* tuple of str */
	spy_addr_t kinds;       /* bytes (3.11+), or 0 */
	bool cells;             /* every slot is a cell (cellvars/freevars before 3.11) */
};

/* What a frame holds: up to three runs, and how many leading names are arguments. */
struct frame_slots {
	struct run run[3];
	size_t nruns, nargs;
};

static size_t tuple_len(struct pyrt *rt, spy_addr_t t)
{
	int64_t n;
	if (!spy_mem_plausible(rt->mem, t, 8) || read_i64(rt, t + rt->off.ob_size, &n) < 0 || n < 0) {
		return 0;
	}
	return n > PYRT_MAX_LOCALS ? PYRT_MAX_LOCALS : (size_t)n;
}

static int frame_slots(struct pyrt *rt, spy_addr_t frame, struct frame_slots *s)
{
	const struct pyoffsets *o = &rt->off;
	bool iframe = o->frame_model != PYFRAME_OBJECT;
	unsigned char code[PYRT_MAX_SPAN];
	spy_addr_t c;
	uint32_t code_off = iframe ? o->iframe_code : o->frame_code;
	uint32_t lp = iframe ? o->iframe_localsplus : o->frame_localsplus;
	uint32_t cnt = iframe ? o->code_nlocalsplus : o->code_nlocals;
	if (lp == PYOFF_NONE || cnt == PYOFF_NONE || o->code_size > sizeof(code) ||
	    spy_mem_read_addr(rt->mem, frame + code_off, &c) < 0 || !(c = pyrt_ref(o, c)) ||
	    !spy_mem_plausible(rt->mem, c, 8) ||
	    spy_mem_read(rt->mem, c, code, o->code_size) < 0) {
		return -SPY_EMEM;
	}
	if (!pyrt_is_type(rt, &rt->code_type, pyrt_u64(code, o->ob_type), "code")) {
		return -SPY_ECORRUPT;
	}
	int32_t count = (int32_t)pyrt_u32(code, cnt);
	int32_t argc = (int32_t)pyrt_u32(code, o->code_argcount);
	int32_t kwonly = o->code_kwonlyargcount != PYOFF_NONE ?
				 (int32_t)pyrt_u32(code, o->code_kwonlyargcount) : 0;
	uint32_t flags = pyrt_u32(code, o->code_flags);
	if (count < 0 || argc < 0 || kwonly < 0) {
		return -SPY_ECORRUPT;
	}
	s->nargs = (size_t)argc + (size_t)kwonly + !!(flags & FLAG_VARARGS) +
		   !!(flags & FLAG_VARKEYWORDS);
	s->run[0] = (struct run){ frame + lp, (size_t)count, pyrt_u64(code, o->code_varnames),
				  iframe ? pyrt_u64(code, o->code_localspluskinds) : 0, false };
	s->nruns = 1;
	if (!iframe && o->code_cellvars != PYOFF_NONE && o->code_freevars != PYOFF_NONE) {
		/* Before 3.11 cells follow the locals, then the free variables. */
		spy_addr_t at = frame + lp + (uint64_t)count * 8;
		spy_addr_t cells = pyrt_u64(code, o->code_cellvars);
		spy_addr_t frees = pyrt_u64(code, o->code_freevars);
		size_t ncells = tuple_len(rt, cells);
		s->run[1] = (struct run){ at, ncells, cells, 0, true };
		s->run[2] = (struct run){ at + ncells * 8, tuple_len(rt, frees), frees, 0, true };
		s->nruns = 3;
	}
	return 0;
}

static bool has_name(const struct py_local *l, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (l[i].name == name) { /* interned: equal strings are one pointer */
			return true;
		}
	}
	return false;
}

/*
 * Decode one run into out[*n..max). argnames collects the names of the
 * first nargs slots of the first run (bound or not): a captured argument
 * lives in a cell, its own slot cleared (3.x) or kept (2.7, then the cell
 * is a duplicate and skipped).
 */
static int read_run(struct pyrt *rt, const struct run *r, size_t nargs, const char **argnames,
		    struct py_local *out, size_t max, size_t *n, const struct pyrt_counted *c)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t ptrs[PYRT_MAX_LOCALS], names[PYRT_MAX_LOCALS];
	uint8_t kinds[PYRT_MAX_LOCALS];
	size_t count = tuple_len(rt, r->names);
	if (r->count < count) {
		count = r->count; /* never name a slot past the names tuple, nor past the slots */
	}
	memset(kinds, r->cells ? KIND_CELL : 0x20, sizeof(kinds));
	if (count && (spy_mem_read(rt->mem, r->slots, ptrs, count * 8) < 0 ||
		      spy_mem_read(rt->mem, r->names + o->tuple_item, names, count * 8) < 0 ||
		      (r->kinds && spy_mem_read(rt->mem, r->kinds + o->bytes_sval, kinds, count) < 0))) {
		return -SPY_EMEM;
	}
	for (size_t k = 0; k < count; k++) {
		ptrs[k] = pyrt_ref(o, ptrs[k]); /* 3.14+: a tagged int is no local's value */
	}
	for (size_t k = 0; k < count && *n < max; k++) {
		if (rt->locals_budget && rt->locals_reads + c->reads >= rt->locals_budget) {
			return -SPY_EBOUND;
		}
		char name[PYSTR_BUF];
		size_t len;
		int trunc;
		bool arg_slot = !r->cells && argnames && k < nargs;
		if ((kinds[k] & KIND_HIDDEN) || (!ptrs[k] && !arg_slot) ||
		    pystr_read(rt->mem, o, names[k], name, sizeof(name), &len, &trunc, NULL) < 0) {
			continue; /* comprehension temporaries (3.13), unbound names */
		}
		const char *interned = spy_strtab_intern(rt->strs, name, len);
		if (arg_slot) {
			argnames[k] = interned;
		}
		if (!ptrs[k] || (r->cells && has_name(out, *n, interned))) {
			continue;
		}
		struct py_local *l = &out[(*n)++];
		l->name = interned;
		l->is_arg = arg_slot;
		for (size_t a = 0; r->cells && argnames && a < nargs && !l->is_arg; a++) {
			l->is_arg = argnames[a] == interned;
		}
		read_value(rt, ptrs[k], &l->v, (kinds[k] & (KIND_CELL | KIND_FREE)) != 0);
	}
	return 0;
}

static size_t order_key(const struct py_local *l, size_t pos, const char **argnames, size_t nargs)
{
	for (size_t a = 0; l->is_arg && a < nargs; a++) {
		if (argnames[a] == l->name) {
			return a;
		}
	}
	return nargs + pos;
}

/*
 * Arguments first, in their declared order (a captured one comes from a
 * cell, after the locals), then the locals as found. An insertion sort: at
 * most PYRT_MAX_LOCALS entries, nearly always already in order.
 */
static void order_args_first(struct py_local *l, size_t n, const char **argnames, size_t nargs)
{
	size_t keys[PYRT_MAX_LOCALS];
	for (size_t i = 0; i < n && i < PYRT_MAX_LOCALS; i++) {
		keys[i] = order_key(&l[i], i, argnames, nargs);
	}
	for (size_t i = 1; i < n && i < PYRT_MAX_LOCALS; i++) {
		struct py_local tmp = l[i];
		size_t key = keys[i], j = i;
		for (; j > 0 && keys[j - 1] > key; j--) {
			l[j] = l[j - 1];
			keys[j] = keys[j - 1];
		}
		l[j] = tmp;
		keys[j] = key;
	}
}

void pyrt_locals_budget(struct pyrt *rt, size_t reads)
{
	rt->locals_budget = reads;
	rt->locals_reads = 0;
}

int pyrt_frame_locals(struct pyrt *rt, size_t i, struct py_local *out, size_t max, size_t *n)
{
	struct frame_slots s;
	const char *argnames[PYRT_MAX_LOCALS] = { 0 };
	*n = 0;
	if (i >= rt->nframes) {
		return -SPY_EMEM;
	}
	if (rt->locals_budget && rt->locals_reads >= rt->locals_budget) {
		return -SPY_EBOUND;
	}
	struct pyrt_counted c;
	pyrt_count_begin(rt, &c);
	int rc = frame_slots(rt, rt->frames[i], &s);
	size_t nargs = rc < 0 ? 0 : s.nargs < PYRT_MAX_LOCALS ? s.nargs : PYRT_MAX_LOCALS;
	for (size_t k = 0; rc == 0 && k < s.nruns; k++) {
		rc = read_run(rt, &s.run[k], nargs, argnames, out, max, n, &c);
	}
	pyrt_count_end(rt, &c);
	rt->locals_reads += c.reads;
	order_args_first(out, *n, argnames, nargs);
	return rc;
}

/* ---- reprs: pure functions of a decoded value ---- */

/* Decimal digits of a big int given as base 2^shift digits (least significant first). */
static void add_big_int(const struct py_value *v, struct spy_buf *out)
{
	uint32_t d[PYV_MAX_DIGITS];
	uint32_t chunks[PYV_MAX_DIGITS * 2];
	size_t nd = v->ndigits, nc = 0;
	uint32_t mask = (1u << v->shift) - 1;
	for (size_t i = 0; i < nd; i++) {
		d[i] = v->digits[i] & mask;
	}
	/* Repeated division by 10^9; each pass drops at least 29 bits. */
	while (nd > 0 && nc < SPY_ARRAY_SIZE(chunks)) {
		uint64_t rem = 0;
		for (size_t i = nd; i-- > 0;) {
			uint64_t cur = (rem << v->shift) | d[i];
			d[i] = (uint32_t)(cur / 1000000000u);
			rem = cur % 1000000000u;
		}
		chunks[nc++] = (uint32_t)rem;
		while (nd > 0 && d[nd - 1] == 0) {
			nd--;
		}
	}
	if (v->negative) {
		spy_buf_addch(out, '-');
	}
	if (nc == 0) {
		spy_buf_addch(out, '0');
		return;
	}
	spy_buf_addf(out, "%" PRIu32, chunks[nc - 1]);
	for (size_t i = nc - 1; i-- > 0;) {
		spy_buf_addf(out, "%09" PRIu32, chunks[i]);
	}
}

/*
 * A finite double's shortest round-tripping decimal, as digits (no trailing
 * zeros, at most 17) and decpt, the decimal point's place relative to them:
 * the value is 0.DIGITS * 10^decpt. This is what CPython's repr asks dtoa
 * for (mode 0). printf's %.*e gives the p-digit decimal nearest to f; when
 * f is a power of two the doubles below it are twice as dense as those
 * above, so the nearest can miss while the one on the other side of f reads
 * back (2**-1017 is 7.120236347223045e-307; the nearest 16 digits,
 * ...044, miss), hence its two neighbours are tried too before growing p.
 */
static int float_digits(double f, char dig[20], int *decpt)
{
	char tmp[40];
	for (int p = 1;; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, fabs(f));
		uint64_t m = 0;
		const char *s = tmp;
		for (; *s && *s != 'e'; s++) {
			if (*s != '.') {
				m = m * 10 + (uint64_t)(*s - '0');
			}
		}
		int q = atoi(s + 1) - (p - 1); /* |f| ~ m * 10^q */
		const uint64_t cand[3] = { m, m + 1, m - 1 };
		for (int i = 0; i < 3; i++) {
			snprintf(tmp, sizeof(tmp), "%" PRIu64 "e%d", cand[i], q);
			/* 17 significant digits always read back: p ends there. */
			if ((p >= 17 && i == 0) || strtod(tmp, NULL) == fabs(f)) {
				int n = snprintf(dig, 20, "%" PRIu64, cand[i]);
				*decpt = q + n;
				while (n > 1 && dig[n - 1] == '0') {
					dig[--n] = '\0';
				}
				return n;
			}
		}
	}
}

/*
 * Python's float repr (float_repr_style 'short', Python/pystrtod.c
 * format_float_short with mode 'r'; the same in 2.7 and 3.x): fixed
 * notation when -4 < decpt <= 16, with ".0" for an integral value, else
 * d.ddde+XX with at least two exponent digits.
 */
static void add_float(double f, struct spy_buf *out)
{
	char dig[20];
	int decpt;
	if (isnan(f)) {
		spy_buf_adds(out, "nan");
		return;
	}
	if (isinf(f)) {
		spy_buf_adds(out, f < 0 ? "-inf" : "inf");
		return;
	}
	int n = float_digits(f, dig, &decpt);
	if (signbit(f)) {
		spy_buf_addch(out, '-');
	}
	if (decpt <= -4 || decpt > 16) {
		spy_buf_addch(out, dig[0]);
		if (n > 1) {
			spy_buf_addf(out, ".%s", dig + 1);
		}
		spy_buf_addf(out, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
	} else if (decpt <= 0) {
		spy_buf_adds(out, "0.");
		for (int i = decpt; i < 0; i++) {
			spy_buf_addch(out, '0');
		}
		spy_buf_adds(out, dig);
	} else if (decpt < n) {
		spy_buf_add(out, dig, (size_t)decpt);
		spy_buf_addf(out, ".%s", dig + decpt);
	} else {
		spy_buf_adds(out, dig);
		for (int i = n; i < decpt; i++) {
			spy_buf_addch(out, '0');
		}
		spy_buf_adds(out, ".0");
	}
}

/* A str value quoted as Python does, with quote, backslash and controls escaped. */
static void add_quoted(const char *s, struct spy_buf *out)
{
	spy_buf_addch(out, '\'');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '\'':
		case '\\':
			spy_buf_addch(out, '\\');
			spy_buf_addch(out, (char)*p);
			break;
		case '\n':
			spy_buf_adds(out, "\\n");
			break;
		case '\r':
			spy_buf_adds(out, "\\r");
			break;
		case '\t':
			spy_buf_adds(out, "\\t");
			break;
		default:
			if (*p < 0x20 || *p == 0x7f) {
				spy_buf_addf(out, "\\x%02x", *p);
			} else {
				spy_buf_addch(out, (char)*p);
			}
		}
	}
	spy_buf_addch(out, '\'');
}

void pyrt_value_repr(const struct py_value *v, struct spy_buf *out)
{
	switch (v->kind) {
	case PYV_UNBOUND:
		spy_buf_adds(out, "<unbound>");
		break;
	case PYV_NONE:
		spy_buf_adds(out, "None");
		break;
	case PYV_BOOL:
		spy_buf_adds(out, v->ival ? "True" : "False");
		break;
	case PYV_INT:
		if (v->truncated) {
			spy_buf_addf(out, "<int of %" PRId64 " digits of %u bits>", v->len, v->shift);
		} else if (v->ndigits) {
			add_big_int(v, out);
		} else {
			spy_buf_addf(out, "%" PRId64, v->ival);
		}
		break;
	case PYV_FLOAT:
		add_float(v->fval, out);
		break;
	case PYV_STR:
		add_quoted(v->text ? v->text : "", out);
		break;
	case PYV_BYTES:
		/* 2.7's str is bytes too, shown as Python 2 shows it: no b prefix. */
		spy_buf_adds(out, v->type && !strcmp(v->type, "bytes") ? "b'" : "'");
		spy_buf_adds(out, v->text ? v->text : "");
		spy_buf_addch(out, '\'');
		break;
	case PYV_CONTAINER:
		spy_buf_addf(out, "<%s len=%" PRId64 ">", v->type, v->len);
		break;
	case PYV_OTHER:
		spy_buf_addf(out, "<%s>", v->type);
		break;
	default:
		spy_buf_adds(out, "<unreadable>");
		break;
	}
	if (v->truncated && (v->kind == PYV_STR || v->kind == PYV_BYTES)) {
		spy_buf_addf(out, "... (len=%" PRId64 ")", v->len);
	}
}
