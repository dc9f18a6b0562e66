/*
 * Line-number tables: byte offset of an instruction -> source line, for the
 * four formats CPython has used (see enum pyline_model in offsets.h).
 *
 * Pure functions over a local copy of the table: no remote memory, no
 * allocation. The table is hostile input: any byte string, of any length,
 * yields a line or -1, reads stay inside [tab, tab + len), and the work is
 * linear in len.
 */
#ifndef SPY_PYSTATE_LINETABLE_H
#define SPY_PYSTATE_LINETABLE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The line of the instruction at byte offset addr (addr = f_lasti for
 * 2.7-3.9, 2 * f_lasti for 3.10, 2 * code-unit index for 3.11+), computed
 * the way that version's PyCode_Addr2Line does. A negative addr (a frame
 * that has not started) gives firstlineno. Returns -1 where the table has no
 * line for addr ("no location" entries, addresses past the end, unknown
 * model). The result can be <= 0 for a garbage table; callers treat any
 * value < 1 as unknown.
 */
int32_t pyline_addr2line(int model, const uint8_t *tab, size_t len, int32_t firstlineno,
			 int64_t addr);

/*
 * Addresses [lo, hi) that all have the line addr has: the run of 3.11+
 * entries with that line holding addr, the 3.10 entry, or the addresses
 * between two lnotab pairs; lo <= addr < hi, but
 * for addr = INT64_MAX, whose span is empty (lo = hi). An end the table
 * does not bound is INT64_MIN or INT64_MAX.
 */
struct pyline_span {
	int64_t lo, hi;
};

/* pyline_addr2line, and the span of addresses sharing its answer: a sampled
 * loop's instructions fall in a few spans, so a caller that keeps the last
 * span decodes again only when the frame moves to another line. */
int32_t pyline_addr2line_span(int model, const uint8_t *tab, size_t len, int32_t firstlineno,
			      int64_t addr, struct pyline_span *sp);

#endif
