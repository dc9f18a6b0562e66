/*
 * Looking up a layout row by version. The rows themselves are generated
 * (offsets_table.c, by tools/gen-offsets); this file is the only code that
 * knows how they are keyed.
 *
 * Rows are keyed on major.minor only. CPython promises no layout stability
 * across minor versions, and in practice keeps it across micro releases; the
 * known exception (3.7.0-3.7.3 moved gilstate in _PyRuntimeState) is a
 * hand-written per-micro patch in layouts.c, applied by pyrt_new once the
 * exact version is known, because no header of those releases is installed
 * to generate a row from.
 */
#include <stddef.h>

#include "pystate/offsets.h"

const struct pyoffsets *pyoffsets_find(uint32_t version_hex)
{
	uint32_t want = version_hex & 0xffff0000u;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		if (pyoffsets_table[i].version == want) {
			return &pyoffsets_table[i];
		}
	}
	return NULL;
}
