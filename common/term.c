/* The one terminal escaper; see term.h for the contract. */
#include <string.h>

#include "common/json.h"
#include "common/term.h"

bool spy_term_is_control(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

static const char hex[] = "0123456789abcdef";

void spy_term_escape(struct spy_buf *out, const char *str, size_t n, size_t max, const char *also)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t used = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t len = spy_utf8_decode(s + i, n - i, &cp);
		/* U+FFFD decoded from its own three bytes is text, not an error. */
		bool invalid = cp == 0xfffd && !(len == 3 && s[i] == 0xef);
		char esc[8];
		const void *unit = s + i;
		size_t ulen = len;
		if (invalid) {
			/* One byte at a time: the next may start a valid sequence. */
			len = 1;
			esc[0] = '\\';
			esc[1] = 'x';
			esc[2] = hex[s[i] >> 4];
			esc[3] = hex[s[i] & 15];
			unit = esc;
			ulen = 4;
		} else if (cp < 0x80 && also && cp && strchr(also, (int)cp)) {
			unit = "?";
			ulen = 1;
		} else if (spy_term_is_control(cp)) {
			esc[0] = '\\';
			if (cp < 0x80) {
				esc[1] = 'x';
				esc[2] = hex[cp >> 4];
				esc[3] = hex[cp & 15];
				ulen = 4;
			} else {
				esc[1] = 'u';
				esc[2] = hex[(cp >> 12) & 15];
				esc[3] = hex[(cp >> 8) & 15];
				esc[4] = hex[(cp >> 4) & 15];
				esc[5] = hex[cp & 15];
				ulen = 6;
			}
			unit = esc;
		}
		if (ulen > max - used) {
			return;
		}
		spy_buf_add(out, unit, ulen);
		used += ulen;
		i += len;
	}
}

void spy_term_adds(struct spy_buf *out, const char *s)
{
	if (s) {
		spy_term_escape(out, s, strlen(s), (size_t)-1, NULL);
	}
}
