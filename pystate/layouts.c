/*
 * Choosing layout data beyond a plain row lookup:
 *
 *   - for a version newer than every generated row, the newest row's models
 *     and its _Py_DebugOffsets layout, which the target's own table must
 *     then validate (pyrt_new);
 *   - per-micro exceptions to a minor version's row (3.7.0-3.7.3), which
 *     tools/gen-offsets cannot produce because no headers of those releases
 *     are installed here.
 *
 * Why hand-written data rather than code: the walker picks strategies from
 * the row's models and never tests version numbers (offsets.h), so an
 * exception is a patch to a row's numbers, applied once in pyrt_new. Every
 * entry says where its numbers came from and whether they were verified.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "common/util.h"
#include "pystate/internal.h"

const struct pyoffsets *pyoffsets_newest(void)
{
	const struct pyoffsets *best = NULL;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		if (pyoffsets_table[i].build != PYBUILD_DEFAULT) {
			continue;
		}
		if (!best || pyoffsets_table[i].version > best->version) {
			best = &pyoffsets_table[i];
		}
	}
	return best;
}

const struct pydebug_layout *pydebug_layout_for(uint32_t version)
{
	const struct pyoffsets *row = pyoffsets_find(version);
	if (row) {
		return row->dbg.size ? &row->dbg : NULL;
	}
	/* Newer than every row: the newest table layout we know. The table is
	 * only promised stable across micro releases, so this is a guess that
	 * pyrt_new must validate. */
	const struct pyoffsets *newest = pyoffsets_newest();
	if (pyoffsets_is_future(version) && newest->dbg.size) {
		return &newest->dbg;
	}
	return NULL;
}

bool pyoffsets_is_future(uint32_t version)
{
	const struct pyoffsets *newest = pyoffsets_newest();
	return newest && (version >> 24) == (newest->version >> 24) &&
	       (version & 0xffff0000u) > newest->version;
}

/*
 * Per-micro exceptions. Each patches one field of a minor version's row for
 * the PY_VERSION_HEX range [from, to] (micro precision: 0x030700f0 is 3.7.0):
 * marks it absent, or moves it by shift bytes from where the row has it.
 * A shift rather than an offset because the rows are per architecture
 * (offsets_table*.c), the releases' difference is not.
 */
struct pyquirk {
	uint32_t from, to;
	size_t field;      /* offsetof(struct pyoffsets, ...) of a uint32_t */
	bool absent;
	int32_t shift;
};

/*
 * 3.7.0-3.7.3: _PyRuntimeState.gilstate.tstate_current is 0x58 bytes
 * before where 3.7.4+ have it (something in _PyRuntimeState before gilstate
 * grew in 3.7.4): at 0x570 on x86-64, not 0x5c8. Taken from
 * docs/cpython-internals.md §1.4, which quotes py-spy's (x86-64) table;
 * UNVERIFIED here, since only 3.7.16 is installed, and so is that what
 * grew holds no pthread type, whose size would make the shift differ on
 * arm64. ceval.gil.* precede gilstate but where they sat in 3.7.0-3.7.3
 * is not known, so those are marked absent (spy reads the holder from
 * tstate_current anyway); interpreters.head (0x18) precedes everything
 * that moved.
 */
static const struct pyquirk quirks[] = {
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gilstate_tstate_current), false, -0x58 },
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gil_last_holder), true, 0 },
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gil_locked), true, 0 },
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gil_switch_number), true, 0 },
};

unsigned pyoffsets_apply_quirks(struct pyoffsets *o, uint32_t version)
{
	unsigned n = 0;
	for (size_t i = 0; i < SPY_ARRAY_SIZE(quirks); i++) {
		const struct pyquirk *q = &quirks[i];
		if (version >= q->from && version <= q->to) {
			uint32_t v;
			memcpy(&v, (unsigned char *)o + q->field, sizeof(v));
			if (q->absent) {
				v = PYOFF_NONE;
			} else if (v != PYOFF_NONE) {
				v = (uint32_t)((int64_t)v + q->shift);
			}
			memcpy((unsigned char *)o + q->field, &v, sizeof(v));
			n++;
		}
	}
	return n;
}
