/*
 * The one terminal escaper. Names, command lines, reprs and messages that
 * quote them come from targets and files spy does not trust, and are read
 * in terminals: a function named "\x1b]52;..." would write the user's
 * clipboard in some terminals, a "\n" forges a frame, U+202E reorders what
 * the eye sees. Every text output passes such strings through here.
 *
 * spy_term_escape appends s[0..n) with everything a terminal could act on
 * made visible, code point by code point:
 *   - C0 controls and DEL, and each byte of invalid UTF-8: \xNN;
 *   - C1 controls (U+0080..U+009F), bidi controls (U+061C, U+200E, U+200F,
 *     U+202A..U+202E, U+2066..U+2069) and the line and paragraph
 *     separators U+2028/U+2029: \uNNNN;
 *   - bytes listed in `also` (ASCII, may be NULL): '?' (folded text's ';').
 * The result is valid UTF-8 without a control byte, and escaping it again
 * changes nothing. A backslash in the input stays as it is: the output is
 * for eyes, not to be parsed back. At most max bytes are appended, never a
 * part of an escape or of a code point.
 *
 * spy_term_adds: a C string (NULL reads as ""), unbounded, nothing in also.
 */
#ifndef SPY_COMMON_TERM_H
#define SPY_COMMON_TERM_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

void spy_term_escape(struct spy_buf *out, const char *s, size_t n, size_t max, const char *also);
void spy_term_adds(struct spy_buf *out, const char *s);
/* printf's fmt with ap, escaped as spy_term_adds does: a message that quotes names. */
void spy_term_vaddf(struct spy_buf *out, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));
/* True for a code point spy_term_escape shows as \uNNNN or \xNN. */
bool spy_term_is_control(uint32_t cp);

/*
 * A terminal to give back if spy dies of a fatal signal (SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL, SIGABRT, SIGQUIT) while it has changed it: top's raw keys
 * and alternate screen. spy_term_crash_arm keeps tio (may be NULL) to set
 * on tio_fd and seq (at most 63 bytes) to write to out_fd; the handler does
 * just that, async-signal-safely, then dies of the signal as it would have.
 * spy_term_crash_disarm puts the default actions back. The normal ways out
 * restore the terminal themselves; SIGKILL cannot be caught.
 */
struct termios;
void spy_term_crash_arm(int tio_fd, const struct termios *tio, int out_fd, const char *seq);
void spy_term_crash_disarm(void);

#endif
