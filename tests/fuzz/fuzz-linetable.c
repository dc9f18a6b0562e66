/*
 * Fuzzing the line-table decoders (pystate/linetable.c): every model, any
 * table, any address. Reads must stay inside the table (the sanitizers
 * say so) and the work linear; the span of addresses that share an
 * address's line holds it, and its ends have that line too (a violation
 * aborts): code.c's memo answers from the span without decoding.
 * Input: byte 0 the model, bytes 1-4 firstlineno, 5-12 addr, the rest the
 * table (copied to a buffer of exactly its size, so a read past it is an
 * ASan report).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pystate/linetable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 13) {
		return 0;
	}
	int model = data[0] % 6;
	int32_t first;
	int64_t addr;
	memcpy(&first, data + 1, 4);
	memcpy(&addr, data + 5, 8);
	size_t len = size - 13;
	uint8_t *tab = malloc(len ? len : 1);
	if (!tab) {
		abort();
	}
	memcpy(tab, data + 13, len);
	/* Small addresses too: the interesting ones are inside the table. */
	const int64_t addrs[] = { addr, addr & 0x3ff, -1 };
	for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
		struct pyline_span sp;
		int64_t a = addrs[i];
		int32_t line = pyline_addr2line_span(model, tab, len, first, a, &sp);
		if (line != pyline_addr2line(model, tab, len, first, a)) {
			abort();
		}
		if (a == INT64_MAX ? sp.lo != sp.hi : !(sp.lo <= a && a < sp.hi)) {
			abort();
		}
		if (sp.lo < sp.hi && (pyline_addr2line(model, tab, len, first, sp.lo) != line ||
				      pyline_addr2line(model, tab, len, first, sp.hi - 1) != line)) {
			abort();
		}
	}
	free(tab);
	return 0;
}
