/*
 * The one JSON string escaper, used by flamegraph's JSON writers (json,
 * speedscope) and by `spy dump --json`.
 *
 * Target strings are hostile and may not be UTF-8. JSON requires UTF-8 (RFC
 * 8259), so the escaper decodes and replaces each maximal invalid subpart
 * by U+FFFD, as Python's and the WHATWG decoders do; valid text passes
 * through unchanged except for quotes, backslash, control characters and
 * U+2028/U+2029 (legal JSON but line terminators to older JavaScript, which
 * breaks anyone who pastes the file into a script).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "common/json.h"

size_t spy_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	size_t need;
	unsigned char lo = 0x80, hi = 0xbf;
	uint32_t v;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 1;
		v = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2;
		v = c & 0x0f;
		/* No overlong forms, no UTF-16 surrogates. */
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3;
		v = c & 0x07;
		/* No overlong forms, nothing above U+10FFFF. */
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else {
		*cp = 0xfffd;
		return 1;
	}
	size_t i = 1;
	for (; i <= need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			/* The maximal subpart so far becomes one U+FFFD. */
			*cp = 0xfffd;
			return i;
		}
		v = (v << 6) | (s[i] & 0x3f);
		lo = 0x80;
		hi = 0xbf;
	}
	*cp = v;
	return i;
}

void spy_json_string(struct spy_buf *out, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t n = strlen((const char *)s);
	spy_buf_addch(out, '"');
	size_t i = 0, run = 0;
	while (i < n) {
		uint32_t cp;
		size_t len = spy_utf8_decode(s + i, n - i, &cp);
		bool plain = cp != 0xfffd && cp >= 0x20 && cp != '"' && cp != '\\' &&
			     cp != 0x7f && cp != 0x2028 && cp != 0x2029;
		if (plain || (cp == 0xfffd && len == 3 && s[i] == 0xef)) {
			/* Valid, needs no escape (a literal U+FFFD included). */
			i += len;
			continue;
		}
		spy_buf_add(out, s + run, i - run);
		switch (cp) {
		case '"':
			spy_buf_adds(out, "\\\"");
			break;
		case '\\':
			spy_buf_adds(out, "\\\\");
			break;
		case '\n':
			spy_buf_adds(out, "\\n");
			break;
		case '\t':
			spy_buf_adds(out, "\\t");
			break;
		case '\r':
			spy_buf_adds(out, "\\r");
			break;
		default:
			spy_buf_addf(out, "\\u%04" PRIx32, cp);
			break;
		}
		i += len;
		run = i;
	}
	spy_buf_add(out, s + run, i - run);
	spy_buf_addch(out, '"');
}
