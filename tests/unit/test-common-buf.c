/* Unit tests for common/: spy_buf, spy_err, spy_strtab, spy_mem helpers. */
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/json.h"
#include "common/term.h"
#include "common/mem.h"
#include "common/sample.h"
#include "common/strtab.h"
#include "tests/lib/check.h"

static void test_buf(void)
{
	struct spy_buf b = SPY_BUF_INIT;
	CHECK_STR(b.buf, "");
	CHECK_INT(b.len, 0);
	spy_buf_adds(&b, "abc");
	spy_buf_addch(&b, '-');
	spy_buf_addf(&b, "%d/%s", 42, "x");
	CHECK_STR(b.buf, "abc-42/x");
	CHECK_INT(b.len, 8);
	for (int i = 0; i < 1000; i++) {
		spy_buf_addch(&b, 'z');
	}
	CHECK_INT(b.len, 1008);
	CHECK_INT(b.buf[b.len], 0);
	spy_buf_reset(&b);
	CHECK_STR(b.buf, "");
	spy_buf_adds(&b, "keep");
	size_t len;
	char *s = spy_buf_detach(&b, &len);
	CHECK_STR(s, "keep");
	CHECK_INT(len, 4);
	CHECK_STR(b.buf, "");
	free(s);
	spy_buf_release(&b);
}

static void test_err(void)
{
	struct spy_err err = SPY_ERR_INIT;
	int rc = spy_err_set(&err, SPY_ENOPROC, "process %d not found", 7);
	CHECK_INT(rc, -SPY_ENOPROC);
	CHECK_STR(err.msg, "process 7 not found");
	spy_err_prefix(&err, "attach: ");
	CHECK_STR(err.msg, "attach: process 7 not found");
	spy_err_remedy(&err, "check the pid");
	CHECK_STR(err.remedy, "check the pid");
	CHECK_INT(spy_err_set(NULL, SPY_EIO, "x"), -SPY_EIO);
	CHECK_INT(spy_err_exit_code(-SPY_EUSAGE), 2);
	CHECK_INT(spy_err_exit_code(SPY_ENOPROC), 3);
	CHECK_INT(spy_err_exit_code(SPY_EPERM), 3);
	CHECK_INT(spy_err_exit_code(SPY_ENOPY), 4);
	CHECK_INT(spy_err_exit_code(SPY_EVERSION), 4);
	CHECK_INT(spy_err_exit_code(SPY_EIO), 5);
	CHECK_INT(spy_err_exit_code(SPY_EFORMAT), 5);
}

static const char *term(struct spy_buf *b, const char *s, size_t n, size_t max, const char *also)
{
	spy_buf_reset(b);
	spy_term_escape(b, s, n, max, also);
	return b->buf;
}

/* Valid UTF-8 with no control character, as term.h promises. */
static int term_clean(const struct spy_buf *b)
{
	const unsigned char *s = (const unsigned char *)b->buf;
	for (size_t i = 0; i < b->len;) {
		uint32_t cp;
		size_t len = spy_utf8_decode(s + i, b->len - i, &cp);
		if ((cp == 0xfffd && !(len == 3 && s[i] == 0xef)) || spy_term_is_control(cp)) {
			return 0;
		}
		i += len;
	}
	return 1;
}

static void test_term(void)
{
	struct spy_buf b = SPY_BUF_INIT, again = SPY_BUF_INIT;
	CHECK_STR(term(&b, "plain é 计算 \\x41", strlen("plain é 计算 \\x41"), (size_t)-1, NULL), "plain é 计算 \\x41");
	/* OSC 52 (clipboard), BEL, a forged line, DEL, NUL. */
	CHECK_STR(term(&b, "\x1b]52;c;aGk=\x07\n    f (x.py:1)\x7f\0z", 30, (size_t)-1, NULL),
		  "\\x1b]52;c;aGk=\\x07\\x0a    f (x.py:1)\\x7f\\x00z");
	/* C1 CSI, bidi override and isolate, line separator, ALM. */
	CHECK_STR(term(&b, "a\xc2\x9b" "1m\xe2\x80\xae" "b\xe2\x81\xa6\xe2\x80\xa8\xd8\x9c", 17,
		       (size_t)-1, NULL),
		  "a\\u009b1m\\u202eb\\u2066\\u2028\\u061c");
	/* Invalid UTF-8 byte by byte; a literal U+FFFD is text. */
	CHECK_STR(term(&b, "\xff\xe2\x80x\xc0\xaf\xef\xbf\xbd\xed\xa0\x80", 12, (size_t)-1, NULL),
		  "\\xff\\xe2\\x80x\\xc0\\xaf\xef\xbf\xbd\\xed\\xa0\\x80");
	CHECK_STR(term(&b, "a;b;\n", 5, (size_t)-1, ";"), "a?b?\\x0a");
	/* The bound keeps whole units only. */
	CHECK_STR(term(&b, "ab\x1b", 3, 5, NULL), "ab");
	CHECK_STR(term(&b, "a\xe8\xae\xa1", 4, 3, NULL), "a");
	CHECK_STR(term(&b, "a\xe8\xae\xa1", 4, 4, NULL), "a\xe8\xae\xa1");
	/* Every byte pair and some triples: clean, and escaping twice is once. */
	unsigned char in[3];
	int clean = 1, stable = 1;
	for (unsigned i = 0; i < 0x10000; i++) {
		in[0] = (unsigned char)(i >> 8);
		in[1] = (unsigned char)i;
		in[2] = (unsigned char)(i * 7);
		for (size_t n = 2; n <= 3; n++) {
			term(&b, (const char *)in, n, (size_t)-1, ";");
			clean &= term_clean(&b);
			term(&again, b.buf, b.len, (size_t)-1, ";");
			stable &= again.len == b.len && !memcmp(again.buf, b.buf, b.len);
		}
	}
	CHECK(clean);
	CHECK(stable);
	spy_buf_reset(&b);
	spy_term_adds(&b, NULL);
	CHECK_STR(b.buf, "");
	spy_buf_release(&b);
	spy_buf_release(&again);
}

static void test_strtab(void)
{
	struct spy_strtab t = SPY_STRTAB_INIT;
	const char *a = spy_strtab_interns(&t, "hello");
	const char *b = spy_strtab_intern(&t, "hello world", 5);
	CHECK(a == b);
	CHECK_STR(a, "hello");
	char name[32];
	const char *first = NULL;
	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		const char *p = spy_strtab_interns(&t, name);
		if (i == 0) {
			first = p;
		}
	}
	CHECK_INT(spy_strtab_count(&t), 5001);
	CHECK(spy_strtab_interns(&t, "f0") == first);
	CHECK(spy_strtab_interns(&t, "hello") == a);
	spy_strtab_release(&t);

	/* A budget: 4 KiB names churned without end take what it allows, and no more. */
	spy_strtab_set_budget(&t, 64 * 1024);
	const char *kept = spy_strtab_interns(&t, "kept");
	static char big[4097];
	memset(big, 'x', sizeof(big) - 1);
	const char *over = NULL;
	for (int i = 0; i < 1000; i++) {
		big[0] = (char)('a' + i % 26), big[1] = (char)('a' + i / 26 % 26), big[2] = (char)('a' + i / 676 % 26);
		const char *p = spy_strtab_intern(&t, big, sizeof(big) - 1);
		if (!strcmp(p, SPY_STRTAB_OVER)) {
			over = over ? over : p;
			CHECK(p == over);
		}
	}
	CHECK(over != NULL);
	CHECK(spy_strtab_bytes(&t) <= 64 * 1024);
	CHECK(spy_strtab_over(&t) >= 1000 - 16);
	CHECK(spy_strtab_interns(&t, "kept") == kept);   /* what is held still matches */
	spy_strtab_release(&t);
}

static int fake_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	(void)ctx;
	if (addr < 0x1000 || addr + len > 0x3000) {
		return -SPY_EMEM;
	}
	memset(dst, (int)(addr & 0xff), len);
	return 0;
}

static void test_mem(void)
{
	struct spy_map maps[] = {
		{ .lo = 0x1000, .hi = 0x2000, .perms = SPY_MAP_R, .path = "a" },
		{ .lo = 0x2000, .hi = 0x3000, .perms = SPY_MAP_R | SPY_MAP_W, .path = "" },
		{ .lo = 0x5000, .hi = 0x6000, .perms = 0, .path = "guard" },
	};
	struct spy_mem m = { .read = fake_read, .maps = maps, .nmaps = 3 };
	CHECK(spy_mem_find_map(&m, 0x1000) == &maps[0]);
	CHECK(spy_mem_find_map(&m, 0x2fff) == &maps[1]);
	CHECK(spy_mem_find_map(&m, 0x3000) == NULL);
	CHECK(spy_mem_find_map(&m, 0x0) == NULL);
	CHECK(spy_mem_plausible(&m, 0x1008, 8));
	CHECK(!spy_mem_plausible(&m, 0x1004, 8));
	CHECK(!spy_mem_plausible(&m, 0, 8));
	CHECK(!spy_mem_plausible(&m, 0x5000, 8));
	CHECK(!spy_mem_plausible(&m, 1ULL << 50, 8));
	spy_addr_t v = 0;
	CHECK_INT(spy_mem_read_addr(&m, 0x1010, &v), 0);
	CHECK(v == 0x1010101010101010ULL);
	CHECK_INT(spy_mem_read_addr(&m, 0x2ffc, &v), -SPY_EMEM);
}

static void test_stack(void)
{
	struct spy_stack s = SPY_STACK_INIT;
	for (int i = 0; i < 100; i++) {
		struct spy_frame *f = spy_stack_push(&s);
		f->line = (uint32_t)i;
	}
	CHECK_INT(s.n, 100);
	CHECK_INT(s.v[99].line, 99);
	size_t alloc = s.alloc;
	spy_stack_reset(&s);
	CHECK_INT(s.n, 0);
	spy_stack_push(&s);
	CHECK_INT(s.alloc, alloc);
	spy_stack_release(&s);
}

int main(void)
{
	test_buf();
	test_err();
	test_term();
	test_strtab();
	test_mem();
	test_stack();
	return check_done();
}
