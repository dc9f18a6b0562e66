/*
 * Fuzzing the line-table decoders (pystate/linetable.c): every model, any
 * table, any address. Reads must stay inside the table (the sanitizers
 * say so) and the work linear: nothing else is promised for garbage.
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
	(void)pyline_addr2line(model, tab, len, first, addr);
	/* Small addresses too: the interesting ones are inside the table. */
	(void)pyline_addr2line(model, tab, len, first, addr & 0x3ff);
	(void)pyline_addr2line(model, tab, len, first, -1);
	free(tab);
	return 0;
}
