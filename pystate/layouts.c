/*
 * Layout data that tools/gen-offsets cannot produce, because no headers of
 * the versions it describes are installed here:
 *
 *   - where each value sits inside _Py_DebugOffsets for table layouts newer
 *     than the newest generated row (3.14 onwards), so a target newer than
 *     spy can still be read from its own debug offsets;
 *   - per-micro exceptions to a minor version's row (3.7.0-3.7.3).
 *
 * Why hand-written data rather than code: the walker picks strategies from
 * the row's models and never tests version numbers (offsets.h), so an
 * exception is a patch to a row's numbers, applied once in pyrt_new. Every
 * entry says where its numbers came from and whether they were verified.
 */
#include <stddef.h>
#include <string.h>

#include "common/util.h"
#include "pystate/internal.h"

/*
 * The 3.14 _Py_DebugOffsets layout, UNVERIFIED: no 3.14 is installed here.
 * Positions were computed by hand from the member order of 3.14's
 * Include/internal/pycore_debug_offsets.h as read in a 3.14-era copy of that
 * header (every member a uint64), and agree with the changes
 * docs/cpython-internals.md §4 lists from py-spy's 3.14 bindings:
 * interpreter_state gains threads_main after threads_head and
 * code_object_generation, tlbc_generation after the GIL values;
 * interpreter_frame gains stackpointer, tlbc_index; code_object gains
 * co_tlbc; a set_object group precedes dict_object; gen_object, llist_node
 * and debugger_support are appended. The same arithmetic applied to 3.13's
 * member list reproduces the generated 3.13 row's positions exactly.
 * pyrt_new validates what it reads through this (sizes, back-pointers, a
 * decoded frame) before trusting it.
 */
static const struct pydebug_layout debug_layout_314 = {
	.size = 0x2f8,
	.version = 0x8,
	.free_threaded = 0x10,
	.rt_interpreters_head = 0x28,
	.interp_id = 0x38,
	.interp_next = 0x40,
	.interp_tstate_head = 0x48,
	.interp_ceval_gil = 0x78,
	.interp_gil_state = 0x80,
	.interp_gil_locked = 0x90,
	.interp_gil_holder = 0x98,
	.tstate_size = 0xb0,
	.tstate_next = 0xc0,
	.tstate_interp = 0xc8,
	.tstate_current_frame = 0xd0,
	.tstate_thread_id = 0xd8,
	.tstate_native_thread_id = 0xe0,
	.iframe_size = 0xf8,
	.iframe_previous = 0x100,
	.iframe_code = 0x108,
	.iframe_instr = 0x110,
	.iframe_localsplus = 0x118,
	.iframe_owner = 0x120,
	.code_size = 0x138,
	.code_filename = 0x140,
	.code_name = 0x148,
	.code_qualname = 0x150,
	.code_linetable = 0x158,
	.code_firstlineno = 0x160,
	.code_adaptive = 0x180,
	.ob_type = 0x198,
	.type_name = 0x1a8,
	.tuple_item = 0x1c8,
	.bytes_sval = 0x260,
	.str_state = 0x270,
	.str_length = 0x278,
	.str_ascii_size = 0x280,
};

const struct pyoffsets *pyoffsets_newest(void)
{
	const struct pyoffsets *best = NULL;
	for (unsigned i = 0; i < pyoffsets_count; i++) {
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
	if ((version & 0xffff0000u) >= 0x030e0000u) {
		return &debug_layout_314;
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
 * the PY_VERSION_HEX range [from, to] (micro precision: 0x030700f0 is 3.7.0).
 */
struct pyquirk {
	uint32_t from, to;
	size_t field;      /* offsetof(struct pyoffsets, ...) of a uint32_t */
	uint32_t value;
};

/*
 * 3.7.0-3.7.3: _PyRuntimeState.gilstate.tstate_current is at 0x570, not
 * 0x5c8 as from 3.7.4 (something in _PyRuntimeState before gilstate grew by
 * 0x58 bytes in 3.7.4). Taken from docs/cpython-internals.md §1.4, which
 * quotes py-spy's table; UNVERIFIED here, since only 3.7.16 is installed.
 * ceval.gil.* precede gilstate but where they sat in 3.7.0-3.7.3 is not
 * known, so those are marked absent (spy reads the holder from
 * tstate_current anyway); interpreters.head (0x18) precedes everything
 * that moved.
 */
static const struct pyquirk quirks[] = {
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gilstate_tstate_current), 0x570 },
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gil_last_holder), PYOFF_NONE },
	{ 0x03070000, 0x030703ff, offsetof(struct pyoffsets, rt_gil_locked), PYOFF_NONE },
};

unsigned pyoffsets_apply_quirks(struct pyoffsets *o, uint32_t version)
{
	unsigned n = 0;
	for (size_t i = 0; i < SPY_ARRAY_SIZE(quirks); i++) {
		const struct pyquirk *q = &quirks[i];
		if (version >= q->from && version <= q->to) {
			memcpy((unsigned char *)o + q->field, &q->value, sizeof(q->value));
			n++;
		}
	}
	return n;
}
