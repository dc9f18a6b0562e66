/*
 * Remote string decoding (pystate/pystr.c) on synthetic objects built by
 * fakepy in each row's string layout: PEP 393 kinds 1/2/4, ASCII, legacy
 * non-compact strings, 2.7 byte strings, and corrupt headers.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "pystate/pystr.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

static int rd(struct fakepy *fp, spy_addr_t s, char *out, size_t cap, int *trunc)
{
	size_t len;
	spy_addr_t type;
	int t = 0;
	int rc = pystr_read(fakepy_mem(fp), fakepy_row(fp), s, out, cap, &len, &t, &type);
	if (trunc) {
		*trunc = t;
	}
	if (rc == 0) {
		CHECK_INT(len, strlen(out));
		CHECK(len < cap);
	}
	return rc;
}

static void roundtrip(struct fakepy *fp, const char *utf8)
{
	char out[PYSTR_BUF];
	int trunc;
	CHECK_INT(rd(fp, fakepy_str(fp, utf8), out, sizeof(out), &trunc), 0);
	CHECK_STR(out, utf8);
	CHECK_INT(trunc, 0);
}

static uint32_t state(const struct pyoffsets *o, unsigned kind, int compact, int ascii)
{
	return (kind << o->str_kind_shift) | ((uint32_t)compact << o->str_compact_bit) |
	       ((uint32_t)ascii << o->str_ascii_bit);
}

static void test_pep393(uint32_t version)
{
	const struct pyoffsets *row = pyoffsets_find(version);
	struct fakepy *fp = fakepy_new(row, version);
	char out[PYSTR_BUF];
	int trunc;

	roundtrip(fp, "hello");
	roundtrip(fp, "");
	roundtrip(fp, "café");        /* kind 1, not ASCII */
	roundtrip(fp, "функция");     /* kind 2 */
	roundtrip(fp, "计算");        /* kind 2, 3-byte UTF-8 */
	roundtrip(fp, "𠀀");          /* kind 4 */
	roundtrip(fp, "a𠀀ü");        /* kind 4 mixing widths */

	/* Legacy (non-compact) string: data pointer after the compact header. */
	uint16_t u16[] = { 0x0444, 0x0443, 0x043d };
	spy_addr_t data = fakepy_alloc(fp, sizeof(u16));
	memcpy(fakepy_at(fp, data), u16, sizeof(u16));
	spy_addr_t legacy = fakepy_str_raw(fp, 3, state(row, 2, 0, 0), NULL, 0);
	fakepy_w64(fp, legacy + row->str_compact_data, data);
	CHECK_INT(rd(fp, legacy, out, sizeof(out), NULL), 0);
	CHECK_STR(out, "фун");

	/* Invalid code points become U+FFFD: surrogates, > U+10FFFF, NUL. */
	uint32_t bad4[] = { 'a', 0xd800, 0x110000, 0, 'b' };
	CHECK_INT(rd(fp, fakepy_str_raw(fp, 5, state(row, 4, 1, 0), bad4, sizeof(bad4)), out, sizeof(out), NULL), 0);
	CHECK_STR(out, "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "b");
	uint16_t bad2[] = { 0xdc00, 'x' };
	CHECK_INT(rd(fp, fakepy_str_raw(fp, 2, state(row, 2, 1, 0), bad2, sizeof(bad2)), out, sizeof(out), NULL), 0);
	CHECK_STR(out, "\xef\xbf\xbdx");
	/* An "ASCII" string with a high byte. */
	CHECK_INT(rd(fp, fakepy_str_raw(fp, 2, state(row, 1, 1, 1), "\xe9z", 2), out, sizeof(out), NULL), 0);
	CHECK_STR(out, "\xef\xbf\xbdz");

	/* 2^40 characters: read at most SPY_MAX_STR bytes, report truncation. */
	spy_addr_t huge = fakepy_str_raw(fp, 1LL << 40, state(row, 1, 1, 1), "abc", 3);
	CHECK_INT(rd(fp, huge, out, sizeof(out), &trunc), 0);
	CHECK_INT(trunc, 1);
	CHECK(strlen(out) <= SPY_MAX_STR);
	CHECK(!strncmp(out, "abc", 3));
	spy_addr_t huge4 = fakepy_str_raw(fp, 1LL << 40, state(row, 4, 1, 0), bad4, sizeof(bad4));
	CHECK_INT(rd(fp, huge4, out, sizeof(out), &trunc), 0);
	CHECK_INT(trunc, 1);

	/* Impossible headers. */
	CHECK_INT(rd(fp, fakepy_str_raw(fp, -1, state(row, 1, 1, 1), NULL, 0), out, sizeof(out), NULL), -SPY_ECORRUPT);
	CHECK_INT(rd(fp, fakepy_str_raw(fp, 1, state(row, 3, 1, 0), "x", 1), out, sizeof(out), NULL), -SPY_ECORRUPT);
	CHECK_INT(rd(fp, fakepy_str_raw(fp, 1, state(row, 0, 1, 0), "x", 1), out, sizeof(out), NULL), -SPY_ECORRUPT);
	CHECK_INT(rd(fp, fakepy_str_raw(fp, 1, state(row, 2, 1, 1), "xx", 2), out, sizeof(out), NULL), -SPY_ECORRUPT);
	/* Legacy string whose data pointer is garbage. */
	spy_addr_t badleg = fakepy_str_raw(fp, 3, state(row, 2, 0, 0), NULL, 0);
	fakepy_w64(fp, badleg + row->str_compact_data, 0x7f0000000000ull);
	CHECK(rd(fp, badleg, out, sizeof(out), NULL) < 0);

	/* Bad object pointers. */
	CHECK_INT(rd(fp, 0, out, sizeof(out), NULL), -SPY_EMEM);
	CHECK_INT(rd(fp, 0x7f0000001000ull, out, sizeof(out), NULL), -SPY_EMEM);
	CHECK_INT(rd(fp, fakepy_str(fp, "x") + 3, out, sizeof(out), NULL), -SPY_EMEM);
	/* A string at the very end of the mapping: the data read fails cleanly. */
	CHECK(rd(fp, FAKEPY_BASE + (24u << 20) - 0x18, out, sizeof(out), NULL) < 0);

	/* A small output buffer cuts at a character boundary. */
	spy_addr_t cyr = fakepy_str(fp, "функция");
	CHECK_INT(rd(fp, cyr, out, 8, &trunc), 0);
	CHECK_STR(out, "фун");
	CHECK_INT(trunc, 1);

	fakepy_free(fp);
}

static void test_bytes27(void)
{
	const struct pyoffsets *row = pyoffsets_find(0x02070000);
	struct fakepy *fp = fakepy_new(row, 0x020712f0);
	char out[PYSTR_BUF];
	int trunc;

	CHECK(row->str_model == PYSTR_BYTES27);
	roundtrip(fp, "plain");
	roundtrip(fp, "caf\xc3\xa9"); /* UTF-8 source bytes pass through */
	roundtrip(fp, "计算");
	/* Invalid UTF-8: each bad byte becomes U+FFFD. */
	CHECK_INT(rd(fp, fakepy_str(fp, "a\xff\xc3z"), out, sizeof(out), NULL), 0);
	CHECK_STR(out, "a\xef\xbf\xbd\xef\xbf\xbdz");
	/* Overlong and surrogate encodings are not let through. */
	CHECK_INT(rd(fp, fakepy_str(fp, "\xc0\xaf\xed\xa0\x80"), out, sizeof(out), NULL), 0);
	CHECK(strstr(out, "\xed\xa0\x80") == NULL);
	/* 2^40 bytes claimed. */
	spy_addr_t s = fakepy_str(fp, "abc");
	fakepy_w64(fp, s + row->ob_size, 1ull << 40);
	CHECK_INT(rd(fp, s, out, sizeof(out), &trunc), 0);
	CHECK_INT(trunc, 1);
	CHECK(strlen(out) <= SPY_MAX_STR);
	fakepy_w64(fp, s + row->ob_size, (uint64_t)-5);
	CHECK_INT(rd(fp, s, out, sizeof(out), NULL), -SPY_ECORRUPT);
	fakepy_free(fp);
}

static void test_bytes(void)
{
	const struct pyoffsets *row = pyoffsets_find(0x030b0000);
	struct fakepy *fp = fakepy_new(row, 0x030b07f0);
	uint8_t *buf = NULL;
	size_t alloc = 0, len;
	spy_addr_t type;
	spy_addr_t b = fakepy_bytes(fp, "\x01\x02\x03", 3);
	CHECK_INT(pybytes_read(fakepy_mem(fp), row, b, 100, &buf, &alloc, &len, &type), 0);
	CHECK_INT(len, 3);
	CHECK(buf && buf[0] == 1 && buf[2] == 3);
	CHECK_INT(pybytes_read(fakepy_mem(fp), row, b, 2, &buf, &alloc, &len, &type), -SPY_ECORRUPT);
	fakepy_w64(fp, b + row->ob_size, 1ull << 40);
	CHECK_INT(pybytes_read(fakepy_mem(fp), row, b, SPY_MAX_LINETABLE, &buf, &alloc, &len, &type),
		  -SPY_ECORRUPT);
	CHECK_INT(pybytes_read(fakepy_mem(fp), row, 0x7f0000001000ull, 100, &buf, &alloc, &len, &type),
		  -SPY_EMEM);
	free(buf);
	fakepy_free(fp);
}

static void test_put_utf8(void)
{
	char out[8];
	size_t pos = 0;
	CHECK(pystr_put_utf8(out, sizeof(out), &pos, 0x20000));
	CHECK_INT(pos, 4);
	CHECK(pystr_put_utf8(out, sizeof(out), &pos, 'a'));
	CHECK(pystr_put_utf8(out, sizeof(out), &pos, 0x444));
	CHECK_INT(pos, 7);
	CHECK(!pystr_put_utf8(out, sizeof(out), &pos, 'b')); /* would leave no room for NUL */
	CHECK_INT(pos, 7);
	pos = 0;
	CHECK(pystr_put_utf8(out, sizeof(out), &pos, 0)); /* NUL is replaced */
	CHECK_INT(pos, 3);
}

int main(void)
{
	/* One row per distinct string layout: 3.6-3.11 (0x30/0x48), 3.12+ (0x28/0x38). */
	test_pep393(0x030607f0);
	test_pep393(0x030b07f0);
	test_pep393(0x030c01f0);
	test_pep393(0x030d00f0);
	test_bytes27();
	test_bytes();
	test_put_utf8();
	return check_done();
}
