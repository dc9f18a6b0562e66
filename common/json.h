/*
 * JSON strings (json.c). spy_utf8_decode reads one code point of s[0..n),
 * n >= 1: returns the bytes used and sets *cp, or U+FFFD for a maximal
 * invalid subpart (1 to 3 bytes). spy_json_string appends str (NULL reads
 * as "") as a quoted JSON string: valid UTF-8 whatever the input.
 */
#ifndef SPY_COMMON_JSON_H
#define SPY_COMMON_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

size_t spy_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
void spy_json_string(struct spy_buf *out, const char *str);

#endif
