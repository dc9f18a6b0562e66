/*
 * Looking up a layout row by version. The rows themselves are generated
 * (offsets_table.c, by tools/gen-offsets); this file is the only code that
 * knows how they are keyed.
 *
 * Rows are keyed on major.minor and the build flavour (debug, free-threaded). CPython promises no layout stability
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
	return pyoffsets_find_build(version_hex, PYBUILD_DEFAULT);
}

const struct pyoffsets *pyoffsets_find_build(uint32_t version_hex, unsigned build)
{
	uint32_t want = version_hex & 0xffff0000u;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		if (pyoffsets_table[i].version == want && pyoffsets_table[i].build == build) {
			return &pyoffsets_table[i];
		}
	}
	return NULL;
}

const struct pyaio_offsets *pyaio_find(uint32_t version_hex, unsigned build)
{
	uint32_t want = version_hex & 0xffff0000u;
	for (unsigned i = 0; i < pyaio_count; i++) {
		if (pyaio_table[i].version == want && pyaio_table[i].build == build) {
			return &pyaio_table[i];
		}
	}
	return NULL;
}
