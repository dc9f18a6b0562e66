/*
 * Remote str and bytes objects -> local UTF-8 / bytes.
 *
 * Layouts (offsets from the generated row, bits from offsets.h):
 *   2.7 PyStringObject (Include/stringobject.h): ob_size, then the bytes
 *       inline at ob_sval (+0x24, not 8-aligned).
 *   3.x PEP 393 (Include/cpython/unicodeobject.h): length in code points,
 *       state bits {kind, compact, ascii}; compact ascii data follows
 *       PyASCIIObject, other compact data follows PyCompactUnicodeObject,
 *       and legacy (non-compact) strings keep a data pointer at that spot.
 *
 * Why cap the *remote* bytes rather than trust length: length comes from a
 * racing, possibly freed object. A torn read can claim 2^40 characters; we
 * read at most SPY_MAX_STR bytes and report truncation instead of believing
 * it. Why replace bad code points instead of failing: a profile with one
 * U+FFFD in a function name is more useful than a dropped frame.
 */
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/util.h"
#include "pystate/pystr.h"

#define REPLACEMENT 0xfffdu

int pystr_put_utf8(char *out, size_t cap, size_t *pos, uint32_t cp)
{
	unsigned char b[4];
	size_t n;
	if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
		cp = REPLACEMENT;
	}
	if (cp < 0x80) {
		b[0] = (unsigned char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xc0 | (cp >> 6));
		b[1] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xe0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		b[0] = (unsigned char)(0xf0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (unsigned char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	/* Keep one byte for the terminating NUL. */
	if (*pos + n >= cap) {
		return 0;
	}
	memcpy(out + *pos, b, n);
	*pos += n;
	return 1;
}

/*
 * Decode one UTF-8 sequence at s[0..n): returns its length and *cp, or 1
 * with *cp = U+FFFD for an invalid, overlong or truncated sequence.
 */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	size_t need;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		need = 2, v = c & 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		need = 3, v = c & 0x0f, min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		need = 4, v = c & 0x07, min = 0x10000;
	} else {
		*cp = REPLACEMENT;
		return 1;
	}
	if (need > n) {
		*cp = REPLACEMENT;
		return 1;
	}
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*cp = REPLACEMENT;
			return 1;
		}
		v = (v << 6) | (s[i] & 0x3f);
	}
	*cp = v < min ? REPLACEMENT : v; /* surrogates/range: put_utf8 */
	return need;
}

static uint64_t rd64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* Header bytes we need: the largest of the fields read, plus a data pointer. */
static size_t header_span(const struct pyoffsets *o)
{
	size_t span = o->ob_type + 8;
	if (o->str_model == PYSTR_BYTES27) {
		span = o->bytes_sval > span ? o->bytes_sval : span;
		return o->ob_size + 8 > span ? o->ob_size + 8 : span;
	}
	span = o->str_length + 8 > span ? o->str_length + 8 : span;
	span = o->str_state + 4 > span ? o->str_state + 4 : span;
	return o->str_ascii_data > span ? o->str_ascii_data : span;
}

int pystr_read(const struct spy_mem *mem, const struct pyoffsets *o, spy_addr_t addr,
	       char *out, size_t cap, size_t *len, int *truncated, spy_addr_t *type)
{
	unsigned char hdr[256];
	unsigned char data[SPY_MAX_STR];
	size_t pos = 0;
	int rc;

	*len = 0;
	*truncated = 0;
	if (cap) {
		out[0] = '\0';
	}
	if (cap < 8) {
		return -SPY_ECORRUPT;
	}
	/* The decoded text is bounded too, not only the remote bytes. */
	if (cap > SPY_MAX_STR + 1) {
		cap = SPY_MAX_STR + 1;
	}
	size_t span = header_span(o);
	if (span > sizeof(hdr)) {
		return -SPY_ECORRUPT;
	}
	if (!spy_mem_plausible(mem, addr, 8)) {
		return -SPY_EMEM;
	}
	rc = spy_mem_read(mem, addr, hdr, span);
	if (rc < 0) {
		return -SPY_EMEM;
	}
	if (type) {
		*type = rd64(hdr + o->ob_type);
	}

	if (o->str_model == PYSTR_BYTES27) {
		int64_t n = (int64_t)rd64(hdr + o->ob_size);
		if (n < 0) {
			return -SPY_ECORRUPT;
		}
		size_t nread = (uint64_t)n > SPY_MAX_STR ? SPY_MAX_STR : (size_t)n;
		*truncated = (uint64_t)n > nread;
		if (nread && spy_mem_read(mem, addr + o->bytes_sval, data, nread) < 0) {
			return -SPY_EMEM;
		}
		for (size_t i = 0; i < nread;) {
			uint32_t cp;
			size_t step = utf8_next(data + i, nread - i, &cp);
			if (!pystr_put_utf8(out, cap, &pos, cp)) {
				*truncated = 1;
				break;
			}
			i += step;
		}
		out[pos] = '\0';
		*len = pos;
		return 0;
	}
	if (o->str_model != PYSTR_PEP393) {
		return -SPY_ECORRUPT;
	}

	int64_t n = (int64_t)rd64(hdr + o->str_length);
	uint32_t state = rd32(hdr + o->str_state);
	unsigned kind = (state >> o->str_kind_shift) & PYSTR_STATE_KIND_MASK;
	int compact = (state >> o->str_compact_bit) & 1;
	int ascii = (state >> o->str_ascii_bit) & 1;
	if (n < 0 || (kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1)) {
		return -SPY_ECORRUPT;
	}
	spy_addr_t data_addr;
	if (compact) {
		data_addr = addr + (ascii ? o->str_ascii_data : o->str_compact_data);
	} else {
		/* Legacy string: PyUnicodeObject.data.any follows the compact header. */
		if (spy_mem_read_addr(mem, addr + o->str_compact_data, &data_addr) < 0) {
			return -SPY_EMEM;
		}
		if (!spy_mem_plausible(mem, data_addr, kind)) {
			return -SPY_ECORRUPT;
		}
	}
	uint64_t want = (uint64_t)n;
	uint64_t maxchars = SPY_MAX_STR / kind;
	if (want > maxchars) {
		want = maxchars;
		*truncated = 1;
	}
	size_t nbytes = (size_t)want * kind;
	if (nbytes && spy_mem_read(mem, data_addr, data, nbytes) < 0) {
		return -SPY_EMEM;
	}
	for (size_t i = 0; i < (size_t)want; i++) {
		uint32_t cp;
		if (kind == 1) {
			cp = data[i];
			if (ascii && cp >= 0x80) {
				cp = REPLACEMENT;
			}
		} else if (kind == 2) {
			uint16_t u;
			memcpy(&u, data + 2 * i, 2);
			cp = u;
		} else {
			memcpy(&cp, data + 4 * i, 4);
		}
		if (!pystr_put_utf8(out, cap, &pos, cp)) {
			*truncated = 1;
			break;
		}
	}
	out[pos] = '\0';
	*len = pos;
	return 0;
}

int pybytes_read(const struct spy_mem *mem, const struct pyoffsets *o, spy_addr_t addr,
		 size_t max, uint8_t **buf, size_t *alloc, size_t *len, spy_addr_t *type)
{
	unsigned char hdr[64];
	size_t span = o->ob_size + 8;
	if (o->ob_type + 8 > span) {
		span = o->ob_type + 8;
	}
	*len = 0;
	if (span > sizeof(hdr)) {
		return -SPY_ECORRUPT;
	}
	if (!spy_mem_plausible(mem, addr, 8)) {
		return -SPY_EMEM;
	}
	if (spy_mem_read(mem, addr, hdr, span) < 0) {
		return -SPY_EMEM;
	}
	if (type) {
		*type = rd64(hdr + o->ob_type);
	}
	int64_t n = (int64_t)rd64(hdr + o->ob_size);
	if (n < 0 || (uint64_t)n > max) {
		return -SPY_ECORRUPT;
	}
	SPY_GROW(*buf, *alloc, (size_t)n + 1);
	if (n && spy_mem_read(mem, addr + o->bytes_sval, *buf, (size_t)n) < 0) {
		return -SPY_EMEM;
	}
	*len = (size_t)n;
	return 0;
}
