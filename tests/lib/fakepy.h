/*
 * Synthetic CPython process images for unit tests and fuzzers.
 *
 * A fakepy is one block of zeroed memory posing as a target's address space
 * (one readable mapping at a realistic address), laid out with the offsets of
 * a struct pyoffsets row: runtime, interpreters, thread states, frames of the
 * row's frame model, code objects with line tables in the row's format, and
 * str/bytes objects in the row's string model. It is served through a
 * struct spy_mem, and fakepy_hints() gives the anchors profiler/open.c would
 * find, so pystate runs on it unchanged.
 *
 * Tests corrupt an image with fakepy_w64() and friends: nothing here checks
 * that what you write makes sense. All addresses are remote (spy_addr_t).
 *
 * Like a real libpython, the image has a writable data section (hints'
 * data_lo..data_hi) holding its statics: the type objects, the runtime
 * struct or the interp_head / _PyThreadState_Current variables, and the
 * sys.version text. Its first bytes are the tests' own (fakepy_data_alloc),
 * so a scan meets whatever a test puts there -- decoys -- before the real
 * statics.
 */
#ifndef SPY_TESTS_LIB_FAKEPY_H
#define SPY_TESTS_LIB_FAKEPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"
#include "pystate/offsets.h"
#include "pystate/pystate.h"

struct fakepy;

/* The pid fakepy pretends the target has (the main thread's tid). */
#define FAKEPY_PID 4242

/* Where the image lives in the fake address space. */
#define FAKEPY_BASE 0x555500000000ull

/*
 * A new image for row, claiming to be version (full PY_VERSION_HEX, e.g.
 * 0x030b07f0). It has one interpreter (with sys.modules and sys dicts) and
 * no threads yet. Rows with dbg.size get a _Py_DebugOffsets table at the
 * runtime's start, laid out as row->dbg says, with row's offsets in it.
 * Before 3.11 the hints carry only major.minor as version_hint, as a file
 * name would; the exact version is in the sys.version text.
 */
struct fakepy *fakepy_new(const struct pyoffsets *row, uint32_t version);
/*
 * The same with front bytes of fakepy_data_alloc room before the statics
 * (fakepy_new: 64 KiB, one scan chunk, so that a scan crosses a chunk
 * boundary before it meets them). Fuzzers take a small front: every scan
 * of the data section then costs a fraction.
 */
struct fakepy *fakepy_new_front(const struct pyoffsets *row, uint32_t version, size_t front);
void fakepy_free(struct fakepy *fp);

const struct spy_mem *fakepy_mem(struct fakepy *fp);
/* Whether the memory also answers peeks, as a live process's cache does (off at first). */
void fakepy_set_peek(struct fakepy *fp, bool on);
/* The anchors. Tests may edit the returned struct before pyrt_new. */
struct pyrt_hints *fakepy_hints(struct fakepy *fp);
const struct pyoffsets *fakepy_row(struct fakepy *fp);
/* pyrt_new on the image with its anchors; NULL, the error on stderr, if it fails. */
struct pyrt *fakepy_open(struct fakepy *fp, struct spy_strtab *strs);

/* Raw memory: zeroed, 16-aligned allocations inside the image. */
spy_addr_t fakepy_alloc(struct fakepy *fp, size_t size);
void *fakepy_at(struct fakepy *fp, spy_addr_t addr);
void fakepy_w64(struct fakepy *fp, spy_addr_t addr, uint64_t v);
void fakepy_w32(struct fakepy *fp, spy_addr_t addr, uint32_t v);
void fakepy_w8(struct fakepy *fp, spy_addr_t addr, uint8_t v);
uint64_t fakepy_r64(struct fakepy *fp, spy_addr_t addr);

/* Objects. Strings are given in UTF-8; the image stores them in the row's model. */
spy_addr_t fakepy_str(struct fakepy *fp, const char *utf8);
/* A PEP 393 str with an explicit header (for corrupt variants); data copied after the header. */
spy_addr_t fakepy_str_raw(struct fakepy *fp, int64_t length, uint32_t state, const void *data,
			  size_t datalen);
spy_addr_t fakepy_bytes(struct fakepy *fp, const void *data, size_t len);
spy_addr_t fakepy_type(struct fakepy *fp, const char *tp_name);
spy_addr_t fakepy_code_type(struct fakepy *fp);
/* `type`, the type of every type object, itself included. */
spy_addr_t fakepy_dict_type(struct fakepy *fp);
/* A heap object of size bytes (at least a header) whose ob_type is type. */
spy_addr_t fakepy_object(struct fakepy *fp, spy_addr_t type, size_t size);

/*
 * Ints, tuples, dicts in the row's layouts. fakepy_long: an int of n digits
 * of long_shift bits, the first nd of them from d (an n larger than nd
 * claims digits that are not written), of type tp ("int", or 2.7's "long").
 * fakepy_int: v as the row stores a plain int (2.7's small int, else long).
 * fakepy_sized: an object of type tp whose 64-bit word at off is n (a list's
 * ob_size, a dict's ma_used). fakepy_dict: keys k[i] -> v[i]; unicode says
 * every key is a str (3.11+ then uses the str-only entries).
 */
spy_addr_t fakepy_long(struct fakepy *fp, const char *tp, const uint32_t *d, size_t nd, uint64_t n,
		       bool neg);
spy_addr_t fakepy_int(struct fakepy *fp, uint64_t v);
spy_addr_t fakepy_tuple(struct fakepy *fp, const spy_addr_t *items, size_t n);
spy_addr_t fakepy_sized(struct fakepy *fp, const char *tp, uint32_t off, int64_t n);
spy_addr_t fakepy_dict(struct fakepy *fp, const spy_addr_t *k, const spy_addr_t *v, size_t n,
		       bool unicode);
/* A 3.6+ keys object of n entries: values in the entries, or at values[] (split). */
spy_addr_t fakepy_dict_keys(struct fakepy *fp, const spy_addr_t *k, const spy_addr_t *v, size_t n,
			    bool unicode, spy_addr_t values);

/*
 * The threading module as names.c finds it: sys.modules["threading"]
 * ._active maps thread ids of tstates[i] to Thread instances whose _name
 * (2.7: _Thread__name) is names[i], kept in an instance dict or, with
 * split on rows that have them, in the instance's values under the class's
 * shared keys (3.11 managed values, 3.12 tagged word, 3.13+ inline values).
 * n <= FAKEPY_MAX_THREADS.
 */
#define FAKEPY_MAX_THREADS 4
struct fakepy_threading {
	spy_addr_t module, active, thread_type;
	spy_addr_t inst[FAKEPY_MAX_THREADS];
};
void fakepy_threading(struct fakepy *fp, spy_addr_t interp, const spy_addr_t *tstates,
		      const char *const *names, size_t n, bool split, struct fakepy_threading *out);

/* Zeroed bytes at the front of the data section, before every static. */
spy_addr_t fakepy_data_alloc(struct fakepy *fp, size_t size);
/* The sys.version buffer ("X.Y.Z (default, ...) \n[GCC ...]", 250 bytes). */
spy_addr_t fakepy_sys_version(struct fakepy *fp);

/*
 * A code object named name (qualname where the row has one; then co_name is
 * the part after the last '.'), in file, starting at firstlineno, of ncode
 * code units, whose line table maps code unit idx to line.
 */
spy_addr_t fakepy_code(struct fakepy *fp, const char *name, const char *file, int32_t firstlineno,
		       uint32_t ncode, uint32_t idx, int32_t line);
/* Encode a table in model mapping byte offset 2*idx to line; returns its length. */
size_t fakepy_linetable(int model, int32_t firstlineno, uint32_t ncode, uint32_t idx, int32_t line,
			uint8_t *out, size_t cap);

/* The first interpreter, and new (sub)interpreters pushed at the list head. */
spy_addr_t fakepy_main_interp(struct fakepy *fp);
spy_addr_t fakepy_new_interp(struct fakepy *fp, int64_t id);
/*
 * A new thread state pushed at the head of interp's list. Its thread_id
 * points at a fake struct pthread holding tid at glibc's 0x2d0 (pass
 * FAKEPY_PID for the main thread); native_thread_id is tid where the row has
 * it. Returns the tstate.
 */
spy_addr_t fakepy_thread(struct fakepy *fp, spy_addr_t interp, int32_t tid);
uint64_t fakepy_thread_id(struct fakepy *fp, spy_addr_t tstate);
/* Mark tstate (or 0) as holding the GIL, per the row's GIL model (a holder counts a switch). */
void fakepy_set_gil(struct fakepy *fp, spy_addr_t interp, spy_addr_t tstate);
/* Where the GIL interp runs under counts its switches (switch_number, 3.7+), or 0. */
spy_addr_t fakepy_gil_switches(struct fakepy *fp, spy_addr_t interp);

/*
 * Push a new innermost frame running code at code unit idx (the current
 * instruction). owner is the iframe owner (0 thread, 1 generator, ...);
 * ignored for frame objects. Returns the frame's address.
 */
spy_addr_t fakepy_push_frame(struct fakepy *fp, spy_addr_t tstate, spy_addr_t code, uint32_t idx,
			     uint8_t owner);
/* Slots every frame has room for after its fixed part (f_localsplus / localsplus). */
#define FAKEPY_LOCALS 16
/* The address of local slot i of frame (i < FAKEPY_LOCALS). */
spy_addr_t fakepy_local_slot(struct fakepy *fp, spy_addr_t frame, size_t i);
/* What a frame slot holds for obj: a tagged _PyStackRef on 3.14+ rows. */
uint64_t fakepy_ref(struct fakepy *fp, spy_addr_t obj);
/* A 3.12+ C-stack shim frame (owner_shim), whose code is a trampoline. */
spy_addr_t fakepy_push_shim(struct fakepy *fp, spy_addr_t tstate);
/* Where tstate's top-frame pointer lives (to corrupt it). */
spy_addr_t fakepy_top_slot(struct fakepy *fp, spy_addr_t tstate);
/* The address of a frame's link to its caller (f_back / previous). */
spy_addr_t fakepy_back_slot(struct fakepy *fp, spy_addr_t frame);
/* The address of a frame's code pointer. */
spy_addr_t fakepy_code_slot(struct fakepy *fp, spy_addr_t frame);

#endif
