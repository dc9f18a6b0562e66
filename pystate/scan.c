/*
 * Scanning the target's writable data (.data/.bss of libpython, or of a
 * python executable with libpython linked in) for what symbols would have
 * told us: the sys.version text (the exact version before 3.11), the
 * _Py_DebugOffsets cookie (3.13+ _PyRuntime), and words that point at an
 * interpreter state (static interp_head of a stripped 2.7/3.6).
 *
 * Why chunks: a word-by-word scan of ~1 MiB would be 130k reads (each a
 * process_vm_readv); PYRT_SCAN_CHUNK-sized reads make it a few dozen. A chunk
 * that cannot be read whole (a hole the section headers did not predict, a
 * core file missing a page) is retried page by page, so one bad page does
 * not hide the rest. The range is capped at PYRT_SCAN_MAX because it comes
 * from section headers, which a corrupt ELF can make any size.
 *
 * Every candidate is only a candidate: callers validate what a scan finds
 * (find.c), and a scan never follows a pointer on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "pystate/internal.h"

#define SCAN_PAGE 4096u

void pyrt_scan(const struct spy_mem *mem, spy_addr_t lo, spy_addr_t hi, size_t overlap,
	       pyrt_scan_fn fn, void *ctx)
{
	lo = (lo + 7) & ~(spy_addr_t)7;
	if (hi <= lo || overlap > SCAN_PAGE) {
		return;
	}
	if (hi - lo > PYRT_SCAN_MAX) {
		spy_log(SPY_LOG_DEBUG, "pystate: scan of 0x%llx bytes cut to 0x%x",
			(unsigned long long)(hi - lo), PYRT_SCAN_MAX);
		hi = lo + PYRT_SCAN_MAX;
	}
	/* Sized to the range: a small section should not cost a 64 KiB buffer. */
	size_t chunk = hi - lo < PYRT_SCAN_CHUNK ? (size_t)(hi - lo) : PYRT_SCAN_CHUNK;
	unsigned char *buf = spy_xmalloc(chunk + overlap);
	for (spy_addr_t a = lo; a < hi; a += chunk) {
		size_t n = hi - a < chunk ? (size_t)(hi - a) : chunk;
		size_t avail = hi - a < n + overlap ? (size_t)(hi - a) : n + overlap;
		if (spy_mem_read(mem, a, buf, avail) == 0) {
			if (fn(ctx, a, buf, n, avail)) {
				break;
			}
			continue;
		}
		/* Page by page, on page boundaries: a read straddling into a
		 * hole would fail for the good page too. */
		bool stop = false;
		for (spy_addr_t p = a; p < a + n && !stop;) {
			spy_addr_t pend = (p & ~(spy_addr_t)(SCAN_PAGE - 1)) + SCAN_PAGE;
			if (pend > a + n) {
				pend = a + n;
			}
			size_t pn = (size_t)(pend - p);
			size_t pavail = hi - p < pn + overlap ? (size_t)(hi - p) : pn + overlap;
			if (spy_mem_read(mem, p, buf, pavail) == 0 ||
			    (pavail > pn && spy_mem_read(mem, p, buf, (pavail = pn)) == 0)) {
				stop = fn(ctx, p, buf, pn, pavail);
			}
			p = pend;
		}
		if (stop) {
			break;
		}
	}
	free(buf);
}

/* ---- sys.version ---- */

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

/* Up to max digits at s[*i], as a number; false when there are none. */
static bool digits(const unsigned char *s, size_t len, size_t *i, unsigned max, unsigned *out)
{
	unsigned v = 0, n = 0;
	while (*i < len && is_digit(s[*i]) && n < max) {
		v = v * 10 + (unsigned)(s[*i] - '0');
		(*i)++;
		n++;
	}
	*out = v;
	return n > 0 && !(*i < len && is_digit(s[*i]));
}

uint32_t pyrt_parse_sys_version(const unsigned char *s, size_t len)
{
	size_t i = 0;
	unsigned major, minor, micro, serial = 0, level = 0xf;

	if (!digits(s, len, &i, 1, &major) || (major != 2 && major != 3) || i >= len || s[i++] != '.' ||
	    !digits(s, len, &i, 2, &minor) || i >= len || s[i++] != '.' ||
	    !digits(s, len, &i, 3, &micro) || micro > 0xff) {
		return 0;
	}
	/* PY_VERSION's suffix: a1, b2, rc1 for pre-releases, "+" for builds
	 * past a release; then Py_GetVersion() appends " (". */
	size_t suffix = i;
	while (i < len && i - suffix < PYRT_VERSION_SUFFIX_MAX && s[i] > ' ' && s[i] < 0x7f &&
	       s[i] != '(') {
		i++;
	}
	if (i + 1 >= len || s[i] != ' ' || s[i + 1] != '(') {
		return 0;
	}
	size_t k = suffix;
	if (k < i && (s[k] == 'a' || s[k] == 'b')) {
		level = s[k] == 'a' ? 0xa : 0xb;
		k++;
	} else if (k + 1 < i && s[k] == 'r' && s[k + 1] == 'c') {
		level = 0xc;
		k += 2;
	}
	if (level != 0xf && !(digits(s, i, &k, 2, &serial) && serial <= 0xf)) {
		level = 0xf; /* not a pre-release tag after all: a local suffix */
		serial = 0;
	}
	return (major << 24) | (minor << 16) | (micro << 8) | (level << 4) | serial;
}

struct version_scan {
	uint32_t hint;  /* major.minor to prefer, 0 for none */
	uint32_t first, agreeing;
	spy_addr_t first_at;
};

static bool version_cb(void *ctx, spy_addr_t base, const unsigned char *buf, size_t n, size_t avail)
{
	struct version_scan *vs = ctx;
	/* Candidates are a '2' or '3' before a '.': find the dots with
	 * memchr rather than testing every byte (most bytes are not dots). */
	size_t end = n < avail ? n + 1 : avail;
	for (const unsigned char *dot = buf; end > 1;) {
		dot = memchr(dot + 1, '.', end - (size_t)(dot + 1 - buf));
		if (!dot) {
			break;
		}
		size_t i = (size_t)(dot - buf) - 1;
		unsigned char c = buf[i];
		if (c != '2' && c != '3') {
			continue;
		}
		/* The buffer starts with PY_VERSION: a digit, letter or dot
		 * before it means we are inside some other text. */
		if (i > 0 && (is_digit(buf[i - 1]) || buf[i - 1] == '.' ||
			      ((buf[i - 1] | 0x20) >= 'a' && (buf[i - 1] | 0x20) <= 'z'))) {
			continue;
		}
		uint32_t v = pyrt_parse_sys_version(buf + i, avail - i);
		if (!v) {
			continue;
		}
		if (!vs->first) {
			vs->first = v;
			vs->first_at = base + i;
		}
		if (!vs->hint || (v & 0xffff0000u) == vs->hint) {
			vs->agreeing = v;
			return true;
		}
	}
	return false;
}

uint32_t pyrt_scan_sys_version(const struct spy_mem *mem, spy_addr_t lo, spy_addr_t hi,
			       uint32_t hint)
{
	struct version_scan vs = { .hint = hint & 0xffff0000u };
	pyrt_scan(mem, lo, hi, 64, version_cb, &vs);
	uint32_t v = vs.agreeing ? vs.agreeing : vs.first;
	if (v) {
		spy_log(SPY_LOG_DEBUG, "pystate: sys.version says 0x%08x (first match at 0x%llx)", v,
			(unsigned long long)vs.first_at);
	}
	return v;
}

/* ---- the _Py_DebugOffsets cookie ---- */

struct cookie_scan {
	spy_addr_t found;
};

static bool cookie_cb(void *ctx, spy_addr_t base, const unsigned char *buf, size_t n, size_t avail)
{
	struct cookie_scan *cs = ctx;
	uint64_t cookie;
	memcpy(&cookie, PYDEBUG_COOKIE, 8);
	/* Jump from one first byte of the cookie to the next with memchr
	 * (most data holds none), then compare the aligned word. */
	size_t end = n < avail ? n : avail;
	for (const unsigned char *p = buf; (p = memchr(p, PYDEBUG_COOKIE[0], end - (size_t)(p - buf)));
	     p++) {
		size_t i = (size_t)(p - buf);
		if (i % 8 || i + 16 > avail || pyrt_u64(buf, (uint32_t)i) != cookie) {
			continue;
		}
		/* The version word follows: a 3.13+ PY_VERSION_HEX, or it is a
		 * stray copy of the text. */
		uint64_t v = pyrt_u64(buf, (uint32_t)i + 8);
		if (v >= 0x030d0000u && v < 0x04000000u) {
			cs->found = base + i;
			return true;
		}
	}
	return false;
}

spy_addr_t pyrt_scan_cookie(const struct spy_mem *mem, spy_addr_t lo, spy_addr_t hi)
{
	struct cookie_scan cs = { 0 };
	pyrt_scan(mem, lo, hi, 16, cookie_cb, &cs);
	if (cs.found) {
		spy_log(SPY_LOG_DEBUG, "pystate: _Py_DebugOffsets cookie at 0x%llx",
			(unsigned long long)cs.found);
	}
	return cs.found;
}
