/*
 * Decoding strings and bytes objects out of a target's memory.
 *
 * Names and file names become UTF-8 whatever their remote representation:
 * 2.7 PyStringObject bytes (validated as UTF-8), or 3.x PEP 393 str of kind
 * 1/2/4. Invalid code points and bytes, and NUL, become U+FFFD, so the result
 * is always valid UTF-8 without NULs (what spy_strtab_intern requires).
 *
 * No allocation for strings: the caller supplies the output buffer, and at
 * most SPY_MAX_STR bytes of character data are read from the target.
 */
#ifndef SPY_PYSTATE_PYSTR_H
#define SPY_PYSTATE_PYSTR_H

#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"
#include "pystate/offsets.h"

/* Output buffer size that holds any decoded string plus its NUL. */
#define PYSTR_BUF (SPY_MAX_STR + 8)

/*
 * Decode the str (or 2.7 str/bytes) object at addr into out (cap bytes,
 * cap >= 8), NUL-terminated; *len is the UTF-8 length, at most SPY_MAX_STR.
 * Text beyond SPY_MAX_STR bytes of remote data or of output is cut at a character
 * boundary and *truncated is set. *type receives the object's ob_type, for
 * the caller's type check; it may be NULL. Returns 0, -SPY_EMEM when a read
 * fails, -SPY_ECORRUPT when the header is impossible (negative length, a
 * kind other than 1/2/4, ascii with kind != 1, unknown model).
 */
int pystr_read(const struct spy_mem *mem, const struct pyoffsets *o, spy_addr_t addr,
	       char *out, size_t cap, size_t *len, int *truncated, spy_addr_t *type);

/*
 * Read the bytes object (2.7 str) at addr into *buf, grown with SPY_GROW as
 * needed and reused across calls. Objects larger than max are refused with
 * -SPY_ECORRUPT (for line tables max is SPY_MAX_LINETABLE).
 */
int pybytes_read(const struct spy_mem *mem, const struct pyoffsets *o, spy_addr_t addr,
		 size_t max, uint8_t **buf, size_t *alloc, size_t *len, spy_addr_t *type);

/*
 * Encode code points to UTF-8 into out[*pos..cap-1): returns 0 when cp did
 * not fit (nothing written). Invalid code points (surrogates, > U+10FFFF)
 * and NUL are written as U+FFFD.
 */
int pystr_put_utf8(char *out, size_t cap, size_t *pos, uint32_t cp);

#endif
