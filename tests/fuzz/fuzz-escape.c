/*
 * Fuzzing the escapers: common/term.c (terminal text; through fg_escape,
 * folded/table/diff/top names and metadata values), common/json.c and
 * pprof's strings. Whatever the bytes:
 *  - spy_term_escape's output is valid UTF-8 with no control character (C0,
 *    DEL, C1, bidi, line separators), at most max bytes, and escaping it
 *    again changes nothing;
 *  - fg_escape's is the same, without ';', at most SPY_MAX_STR bytes;
 *  - spy_json_string's is valid UTF-8, quoted, with no raw byte < 0x20;
 *  - the HTML report's (flamegraph/html.c): fg_html_json_string's is
 *    printable ASCII, quoted, without '<', '>' or '&'; fg_html_text's is
 *    printable ASCII without '<', '>', '"' or '\''.
 * A violation aborts (the fuzzer's crash). Input: byte 0 picks max (for
 * spy_term_escape), the rest is the string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/json.h"
#include "common/term.h"
#include "flamegraph/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_clean(const struct spy_buf *b, const char *semi)
{
	const unsigned char *s = (const unsigned char *)b->buf;
	for (size_t i = 0; i < b->len;) {
		uint32_t cp;
		size_t len = spy_utf8_decode(s + i, b->len - i, &cp);
		if (cp == 0xfffd && !(len == 3 && s[i] == 0xef)) {
			abort(); /* invalid UTF-8 written */
		}
		if (spy_term_is_control(cp) || (semi && cp == (uint32_t)*semi)) {
			abort();
		}
		i += len;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1) {
		return 0;
	}
	size_t max = data[0] == 0xff ? (size_t)-1 : (size_t)data[0] * 4;
	const char *s = (const char *)data + 1;
	size_t n = size - 1;

	struct spy_buf a = SPY_BUF_INIT, b = SPY_BUF_INIT;
	spy_term_escape(&a, s, n, max, NULL);
	if (a.len > max) {
		abort();
	}
	check_clean(&a, NULL);
	spy_term_escape(&b, a.buf, a.len, (size_t)-1, NULL);
	if (b.len != a.len || memcmp(a.buf, b.buf, a.len)) {
		abort(); /* not idempotent */
	}

	/* fg_escape and spy_json_string take C strings. */
	char *z = malloc(n + 1);
	if (!z) {
		abort();
	}
	memcpy(z, s, n);
	z[n] = '\0';
	spy_buf_reset(&a);
	fg_escape(&a, z);
	if (a.len > SPY_MAX_STR) {
		abort();
	}
	check_clean(&a, ";");

	spy_buf_reset(&a);
	spy_json_string(&a, z);
	const unsigned char *j = (const unsigned char *)a.buf;
	if (a.len < 2 || j[0] != '"' || j[a.len - 1] != '"') {
		abort();
	}
	for (size_t i = 0; i < a.len;) {
		uint32_t cp;
		size_t len = spy_utf8_decode(j + i, a.len - i, &cp);
		if ((cp == 0xfffd && !(len == 3 && j[i] == 0xef)) || cp < 0x20) {
			abort();
		}
		i += len;
	}

	spy_buf_reset(&a);
	fg_html_json_string(&a, z);
	if (a.len < 2 || a.buf[0] != '"' || a.buf[a.len - 1] != '"') {
		abort();
	}
	for (size_t i = 0; i < a.len; i++) {
		unsigned char c = (unsigned char)a.buf[i];
		if (c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&') {
			abort(); /* could end the script element or reach a parser raw */
		}
	}
	spy_buf_reset(&a);
	fg_html_text(&a, z);
	for (size_t i = 0; i < a.len; i++) {
		unsigned char c = (unsigned char)a.buf[i];
		if (c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '"' || c == '\'') {
			abort();
		}
	}
	free(z);
	spy_buf_release(&a);
	spy_buf_release(&b);
	return 0;
}
