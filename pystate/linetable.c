/*
 * Decoders for CPython's line tables, each a re-implementation of that
 * version's PyCode_Addr2Line (Objects/codeobject.c) over a bounded buffer:
 *
 *   2.7      co_lnotab: (addr_delta u8, line_delta u8) pairs
 *   3.6-3.9  co_lnotab: (addr_delta u8, line_delta s8) pairs
 *   3.10     co_linetable: (length u8, line_delta s8), -128 = no line
 *   3.11+    co_linetable: the location table (Include/internal/pycore_code.h,
 *            Objects/locations.md): entries of (header, payload) bytes
 *
 * Why decode from the start for every lookup instead of building an index:
 * tables are short (the largest 3.13 stdlib table is ~40 KB, most are under
 * 100 bytes), lookups are a few per sample, and a linear scan over an
 * untrusted buffer is easy to make obviously bounded. The code cache keeps
 * the table bytes and the last answer with the span of addresses sharing
 * it (pyline_addr2line_span), which covers the steady state.
 *
 * Where CPython would read past a truncated table (a varint whose
 * continuation bit runs off the end, an odd trailing byte), we stop instead:
 * the answer for garbage only has to be "some line or -1".
 */
#include "pystate/linetable.h"
#include "pystate/offsets.h"

/* Clamp a computed line into int32 range; garbage tables can drift far. */
static int32_t clamp_line(int64_t line)
{
	if (line > INT32_MAX) {
		return INT32_MAX;
	}
	if (line < INT32_MIN + 1) {
		return INT32_MIN + 1;
	}
	return (int32_t)line;
}

/*
 * 2.7-3.9: stop at the first pair whose cumulative address passes addr;
 * until then every pair's line delta applies. A trailing odd byte is
 * ignored, as CPython does (it counts size / 2 pairs).
 */
static int32_t lnotab(const uint8_t *tab, size_t len, int32_t first, int64_t addr, int is_signed,
		      struct pyline_span *sp)
{
	int64_t line = first, a = 0;
	for (size_t i = 0; i + 1 < len; i += 2) {
		a += tab[i];
		if (a > addr) {
			sp->hi = a;
			break;
		}
		/* No pair's address lies between this one and addr. */
		sp->lo = a;
		line += is_signed ? (int64_t)(int8_t)tab[i + 1] : (int64_t)tab[i + 1];
	}
	return clamp_line(line);
}

/* 3.10: ranges [start, end) covered contiguously from 0. */
static int32_t linetable310(const uint8_t *tab, size_t len, int32_t first, int64_t addr,
			    struct pyline_span *sp)
{
	if (addr < 0) {
		sp->hi = 0;
		return first;
	}
	int64_t line = first, end = 0;
	for (size_t i = 0; i + 1 < len; i += 2) {
		int64_t start = end;
		int8_t delta = (int8_t)tab[i + 1];
		end += tab[i];
		int64_t eline = -1;
		if (delta != -128) {
			line += delta;
			eline = line;
		}
		if (start <= addr && addr < end) {
			sp->lo = start;
			sp->hi = end;
			return clamp_line(eline);
		}
	}
	sp->lo = end;
	return -1;
}

/*
 * Unsigned varint of the location table: 6-bit groups, least significant
 * first, 0x40 = more follows. *p advances; never past end. Groups beyond 32
 * bits are consumed but ignored (CPython would shift into undefined land).
 */
static uint32_t varint(const uint8_t **p, const uint8_t *end)
{
	uint32_t val = 0;
	unsigned shift = 0;
	while (*p < end) {
		uint8_t b = *(*p)++;
		if (shift < 32) {
			val |= (uint32_t)(b & 63) << shift;
		}
		shift += 6;
		if (!(b & 64)) {
			break;
		}
	}
	return val;
}

static int64_t svarint(const uint8_t **p, const uint8_t *end)
{
	uint32_t v = varint(p, end);
	return (v & 1) ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
}

/*
 * 3.11+: entries of n = (h & 7) + 1 code units. Only the header's line
 * effect matters here; column payloads are skipped by resyncing on the next
 * byte with bit 7 set, exactly how CPython's advance() moves on. So a
 * damaged payload costs one entry, not the rest of the table.
 */
static int32_t locations(const uint8_t *tab, size_t len, int32_t first, int64_t addr,
			 struct pyline_span *sp)
{
	if (addr < 0) {
		sp->hi = 0;
		return first;
	}
	int64_t idx = addr / 2;
	int64_t line = first, unit = 0;
	/* The run of entries with the same answer that unit is in: a line's
	 * instructions come in several entries (one per expression's columns),
	 * and the span covers the run, not just addr's entry. */
	int64_t run = 0, run_answer = INT64_MIN, found = INT64_MIN;
	const uint8_t *p = tab, *end = tab + len;
	while (p < end) {
		uint8_t h = *p;
		unsigned code = (h >> 3) & 15;
		int64_t n = (h & 7) + 1;
		const uint8_t *q = p + 1;
		int no_line = 0;
		if (code == 15) {
			no_line = 1;
		} else if (code == 13 || code == 14) {
			line += svarint(&q, end);
		} else if (code >= 10) {
			line += code - 10;
		}
		int64_t answer = no_line ? -1 : clamp_line(line);
		if (answer != run_answer) {
			if (found != INT64_MIN) {
				break; /* the run holding idx ended */
			}
			run = unit;
			run_answer = answer;
		}
		if (found == INT64_MIN && unit <= idx && idx < unit + n) {
			found = answer;
			sp->lo = 2 * run;
		}
		unit += n;
		p++;
		while (p < end && !(*p & 128)) {
			p++;
		}
	}
	if (found != INT64_MIN) {
		sp->hi = 2 * unit;
		return (int32_t)found;
	}
	sp->lo = 2 * unit;
	return -1;
}

int32_t pyline_addr2line_span(int model, const uint8_t *tab, size_t len, int32_t firstlineno,
			      int64_t addr, struct pyline_span *sp)
{
	if (!tab) {
		len = 0;
	}
	sp->lo = INT64_MIN;
	sp->hi = INT64_MAX;
	int32_t line;
	switch (model) {
	case PYLINE_LNOTAB_U8:
		line = lnotab(tab, len, firstlineno, addr, 0, sp);
		break;
	case PYLINE_LNOTAB_S8:
		line = lnotab(tab, len, firstlineno, addr, 1, sp);
		break;
	case PYLINE_LINETABLE_310:
		line = linetable310(tab, len, firstlineno, addr, sp);
		break;
	case PYLINE_LOCATIONS:
		line = locations(tab, len, firstlineno, addr, sp);
		break;
	default:
		line = -1;
		break;
	}
	/* Only addr = INT64_MAX falls outside: no span to keep. */
	if (!(sp->lo <= addr && addr < sp->hi)) {
		sp->lo = sp->hi = addr;
	}
	return line;
}

int32_t pyline_addr2line(int model, const uint8_t *tab, size_t len, int32_t firstlineno,
			 int64_t addr)
{
	struct pyline_span sp;
	return pyline_addr2line_span(model, tab, len, firstlineno, addr, &sp);
}
