/*
 * Unit tests for dump --locals. The reprs (pyrt_value_repr): values built by
 * hand as pystate would decode them, checked against what Python's own
 * repr() prints for the same value; big ints are given as base-2^30 digits,
 * the layout CPython uses on 64-bit builds. The reading
 * (pyrt_frame_locals): a frame of a synthetic image for every row of the
 * offsets table, with sane and hostile values and a code object claiming
 * far more locals than it names.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

static const char *repr(const struct py_value *v)
{
	static struct spy_buf b = SPY_BUF_INIT;
	spy_buf_reset(&b);
	pyrt_value_repr(v, &b);
	return b.buf;
}

static struct py_value val(uint8_t kind, const char *type)
{
	struct py_value v;
	memset(&v, 0, sizeof(v));
	v.kind = kind;
	v.type = type;
	return v;
}

static void test_scalars(void)
{
	struct py_value v = val(PYV_NONE, "NoneType");
	CHECK_STR(repr(&v), "None");
	v = val(PYV_BOOL, "bool");
	v.ival = 1;
	CHECK_STR(repr(&v), "True");
	v.ival = 0;
	CHECK_STR(repr(&v), "False");
	v = val(PYV_INT, "int");
	v.ival = -5;
	CHECK_STR(repr(&v), "-5");
	v = val(PYV_UNREADABLE, NULL);
	CHECK_STR(repr(&v), "<unreadable>");
	v = val(PYV_OTHER, "Spinner");
	CHECK_STR(repr(&v), "<Spinner>");
	v = val(PYV_CONTAINER, "dict");
	v.len = 2;
	CHECK_STR(repr(&v), "<dict len=2>");
}

/* 2**100 + 7 and -(2**64): digits least significant first, 30 bits each. */
static void test_big_ints(void)
{
	struct py_value v = val(PYV_INT, "int");
	v.shift = 30;
	v.ndigits = 4;
	v.digits[0] = 7;
	v.digits[3] = 1u << 10; /* 2**100 = 2**(3*30 + 10) */
	CHECK_STR(repr(&v), "1267650600228229401496703205383");

	v = val(PYV_INT, "int");
	v.shift = 30;
	v.ndigits = 3;
	v.negative = true;
	v.digits[2] = 1u << 4; /* 2**64 = 2**(2*30 + 4) */
	CHECK_STR(repr(&v), "-18446744073709551616");

	/* 10**18 exactly: a chunk of zeros must keep its leading zeros. */
	uint64_t x = 1000000000000000000ull;
	v = val(PYV_INT, "int");
	v.shift = 30;
	v.ndigits = 3;
	for (int i = 0; i < 3; i++) {
		v.digits[i] = (uint32_t)(x & ((1u << 30) - 1));
		x >>= 30;
	}
	CHECK_STR(repr(&v), "1000000000000000000");

	v.truncated = true;
	v.len = 100;
	CHECK_STR(repr(&v), "<int of 100 digits of 30 bits>");
}

/*
 * Each want is what CPython's repr() prints for the value (the same in 2.7
 * and 3.6-3.15), given exactly as a hex float: integral values in fixed
 * notation up to 16 digits before the point, the exponent form's two
 * digits at least, subnormals, and powers of two whose nearest short
 * decimal does not read back.
 */
static void test_floats(void)
{
	static const struct {
		double f;
		const char *want;
	} cases[] = {
		{ 0x1.4000000000000p+3, "10.0" },
		{ 0x1.e000000000000p+4, "30.0" },
		{ 0x1.4000000000000p+5, "40.0" },
		{ 0x1.e000000000000p+6, "120.0" },
		{ 0x1.9000000000000p+6, "100.0" },
		{ 0x1.8000000000000p+0, "1.5" },
		{ 0x1.999999999999ap-4, "0.1" },
		{ 0x1.199999999999ap+0, "1.1" },
		{ 0x1.3333333333334p-2, "0.30000000000000004" },
		{ 0x1.8000000000000p+1, "3.0" },
		{ -0x1.0000000000000p+1, "-2.0" },
		{ 0x0.0p+0, "0.0" },
		{ -0x0.0p+0, "-0.0" },
		{ 0x1.c6bf526340000p+49, "1000000000000000.0" },
		{ -0x1.c6bf526340000p+49, "-1000000000000000.0" },
		{ 0x1.18b54f22aeb03p+50, "1234567890123456.8" },
		{ 0x1.0000000000000p+53, "9007199254740992.0" },
		{ 0x1.0000000000001p+53, "9007199254740994.0" },
		{ 0x1.1c37937e07fffp+53, "9999999999999998.0" },
		{ 0x1.1c37937e08000p+53, "1e+16" },
		{ 0x1.6345785d8a000p+56, "1e+17" },
		{ 0x1.0f0cf064dd592p+73, "1e+22" },
		{ 0x1.cb9f42cdd2850p+333, "3.14159e+100" },
		{ 0x1.fffffffffffffp+1023, "1.7976931348623157e+308" },
		{ -0x1.fffffffffffffp+1023, "-1.7976931348623157e+308" },
		{ 0x1.0624dd2f1a9fcp-10, "0.001" },
		{ 0x1.a36e2eb1c432dp-14, "0.0001" },
		{ 0x1.4f8b588e368f1p-17, "1e-05" },
		{ -0x1.3a92a30553261p-14, "-7.5e-05" },
		{ 0x1.ad7f29abcaf48p-24, "1e-07" },
		{ 0x1.5555555555555p-2, "0.3333333333333333" },
		{ 0x1.5555555555555p-1, "0.6666666666666666" },
		{ 0x1.d6f34547df3b6p+26, "123456789.123" },
		{ 0x1.0000000000000p-1017, "7.120236347223045e-307" },
		{ 0x1.0000000000000p-1018, "3.5601181736115222e-307" },
		{ 0x1.8000000000000p-1021, "6.675221575521604e-308" },
		{ 0x1.0000000000000p-1022, "2.2250738585072014e-308" },
		{ 0x0.0000000000001p-1022, "5e-324" },
		{ -0x0.0000000000001p-1022, "-5e-324" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct py_value v = val(PYV_FLOAT, "float");
		v.fval = cases[i].f;
		CHECK_STR(repr(&v), cases[i].want);
	}
	struct py_value v = val(PYV_FLOAT, "float");
	v.fval = NAN;
	CHECK_STR(repr(&v), "nan");
	v.fval = INFINITY;
	CHECK_STR(repr(&v), "inf");
	v.fval = -INFINITY;
	CHECK_STR(repr(&v), "-inf");

	/* Any double: text that reads back as it, no longer than -d.(16 d)e-NNN. */
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(&v.fval, &x, sizeof(v.fval));
		if (!isfinite(v.fval)) {
			continue;
		}
		const char *r = repr(&v);
		CHECK(strtod(r, NULL) == v.fval);
		CHECK(strlen(r) <= 24);
	}
}

static void test_text(void)
{
	struct py_value v = val(PYV_STR, "str");
	v.text = "it's a\\b\n\t\x01";
	CHECK_STR(repr(&v), "'it\\'s a\\\\b\\n\\t\\x01'");
	v.text = "\xe8\xae\xa1\xe7\xae\x97"; /* non-ASCII passes through as UTF-8 */
	CHECK_STR(repr(&v), "'\xe8\xae\xa1\xe7\xae\x97'");
	v.text = "abc";
	v.truncated = true;
	v.len = 5000;
	CHECK_STR(repr(&v), "'abc'... (len=5000)");

	/* bytes arrive escaped already; 2.7's str is bytes shown without b. */
	v = val(PYV_BYTES, "bytes");
	v.text = "x\\x00y";
	CHECK_STR(repr(&v), "b'x\\x00y'");
	v.type = "str";
	CHECK_STR(repr(&v), "'x\\x00y'");
}

/* ---- reading, on synthetic images ---- */

struct want {
	const char *name;
	bool arg;
	const char *repr;
};

static const struct want wants[] = {
	{ "n", true, "42" },
	{ "big", true, "-18446744073709551616" },
	{ "s", true, "'hi'" },
	{ "items", false, "<list len=3>" },
	{ "table", false, "<dict len=2>" },
	{ "nothing", false, "None" },
	{ "bad", false, "<unreadable>" },       /* a pointer to nowhere */
	{ "neg", false, "<unreadable>" },       /* a list of length -1 */
	{ "huge", false, "<int of 1000000000 digits of 30 bits>" },
	/* "unset" (NULL) is left out */
};

static void test_read_row(const struct pyoffsets *row)
{
	uint32_t version = row->version | 0x01f0;
	struct fakepy *fp = fakepy_new(row, version);
	const struct pyoffsets *o = fakepy_row(fp);
	struct spy_strtab strs = SPY_STRTAB_INIT;
	spy_addr_t interp = fakepy_main_interp(fp);
	spy_addr_t t = fakepy_thread(fp, interp, FAKEPY_PID);
	spy_addr_t code = fakepy_code(fp, "work", "w.py", 1, 8, 2, 3);
	spy_addr_t f = fakepy_push_frame(fp, t, code, 2, 0);

	static const char *const names[] = { "n", "big", "s", "items", "table", "nothing",
					     "bad", "neg", "huge", "unset" };
	size_t nn = sizeof(names) / sizeof(names[0]);
	spy_addr_t name_objs[16];
	for (size_t i = 0; i < nn; i++) {
		name_objs[i] = fakepy_str(fp, names[i]);
	}
	uint32_t big[3] = { 0, 0, 16 };
	const char *long_name = o->int_ival != PYOFF_NONE ? "long" : "int"; /* 2.7's int is small */
	spy_addr_t vals[] = {
		fakepy_int(fp, 42),
		fakepy_long(fp, long_name, big, 3, 3, true),
		fakepy_str(fp, "hi"),
		fakepy_sized(fp, "list", o->ob_size, 3),
		fakepy_sized(fp, "dict", o->dict_used, 2),
		fakepy_object(fp, fakepy_type(fp, "NoneType"), 16),
		0xdead0000,
		fakepy_sized(fp, "list", o->ob_size, -1),
		fakepy_long(fp, long_name, big, 3, 1000000000, false),
		0,
	};
	for (size_t i = 0; i < nn; i++) {
		fakepy_w64(fp, fakepy_local_slot(fp, f, i), fakepy_ref(fp, vals[i]));
	}
	fakepy_w64(fp, code + o->code_varnames, fakepy_tuple(fp, name_objs, nn));
	fakepy_w32(fp, code + o->code_argcount, 3);
	fakepy_w32(fp, code + o->code_flags, 0);
	/* Far more slots than names: only the named ones may be read. */
	if (o->code_nlocalsplus != PYOFF_NONE) {
		uint8_t kinds[16];
		memset(kinds, 0x20, sizeof(kinds));
		fakepy_w32(fp, code + o->code_nlocalsplus, 100000);
		fakepy_w64(fp, code + o->code_localspluskinds, fakepy_bytes(fp, kinds, nn));
	} else {
		fakepy_w32(fp, code + o->code_nlocals, 100000);
	}

	struct pyrt *rt = NULL;
	struct spy_err err = SPY_ERR_INIT;
	struct py_thread th[2];
	struct spy_stack st = SPY_STACK_INIT;
	struct py_local *l = calloc(PYRT_MAX_LOCALS, sizeof(*l));
	size_t n = 0, nt = 0;
	CHECK_INT(pyrt_new(&rt, fakepy_mem(fp), fakepy_hints(fp), &strs, &err), 0);
	if (rt && pyrt_threads(rt, th, 2, &nt, NULL) == 0 && nt == 1 &&
	    pyrt_stack(rt, &th[0], &st, NULL) == 0 && st.n == 1) {
		CHECK_INT(pyrt_frame_locals(rt, 0, l, PYRT_MAX_LOCALS, &n), 0);
		CHECK_INT(n, sizeof(wants) / sizeof(wants[0]));
		for (size_t i = 0; i < n && i < sizeof(wants) / sizeof(wants[0]); i++) {
			struct spy_buf b = SPY_BUF_INIT;
			pyrt_value_repr(&l[i].v, &b);
			CHECK_STR(l[i].name, wants[i].name);
			CHECK_INT(l[i].is_arg, wants[i].arg);
			CHECK_STR(b.buf, wants[i].repr);
			spy_buf_release(&b);
		}
		/* Out of range: the stack had one frame. */
		CHECK(pyrt_frame_locals(rt, 1, l, PYRT_MAX_LOCALS, &n) < 0);
		/* A total budget of reads: cut inside the frame, then nothing more is read. */
		size_t all = sizeof(wants) / sizeof(wants[0]);
		pyrt_locals_budget(rt, 8);
		CHECK_INT(pyrt_frame_locals(rt, 0, l, PYRT_MAX_LOCALS, &n), -SPY_EBOUND);
		CHECK(n < all);
		CHECK(rt->locals_reads < 8 + 16); /* one local past the budget at most */
		CHECK_INT(pyrt_frame_locals(rt, 0, l, PYRT_MAX_LOCALS, &n), -SPY_EBOUND);
		CHECK_INT(n, 0);
		pyrt_locals_budget(rt, 0);
		CHECK_INT(pyrt_frame_locals(rt, 0, l, PYRT_MAX_LOCALS, &n), 0);
		CHECK_INT(n, all);
	} else {
		CHECK(!"no stack to read locals from");
		fprintf(stderr, "  row %x: %s\n", row->version, err.msg);
	}
	free(l);
	spy_stack_release(&st);
	pyrt_free(rt);
	fakepy_free(fp);
	spy_strtab_release(&strs);
}

int main(void)
{
	test_scalars();
	test_big_ints();
	test_floats();
	test_text();
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		test_read_row(&pyoffsets_table[i]);
	}
	return check_done();
}
