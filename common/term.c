/* The one terminal escaper and the crash restore; see term.h. */
#include <signal.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "common/json.h"
#include "common/term.h"

bool spy_term_is_control(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

static const char hex[] = "0123456789abcdef";

void spy_term_escape(struct spy_buf *out, const char *str, size_t n, size_t max, const char *also)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t used = 0;
	/* The ASCII characters of also, as a bit set for the fast path. */
	uint64_t held[2] = { 0, 0 };
	for (const char *a = also; a && *a; a++) {
		unsigned char c = (unsigned char)*a;
		if (c < 0x80) {
			held[c >> 6] |= 1ull << (c & 63);
		}
	}
	for (size_t i = 0; i < n;) {
		/* Printable ASCII is most text and stays as it is: copy each run
		 * whole instead of decoding and appending it byte by byte. */
		size_t r = i;
		while (r < n && s[r] >= 0x20 && s[r] < 0x7f && !((held[s[r] >> 6] >> (s[r] & 63)) & 1)) {
			r++;
		}
		if (r > i) {
			size_t k = r - i < max - used ? r - i : max - used;
			spy_buf_add(out, s + i, k);
			used += k;
			if (k < r - i) {
				return;
			}
			i = r;
			continue;
		}
		uint32_t cp;
		size_t len = spy_utf8_decode(s + i, n - i, &cp);
		/* U+FFFD decoded from its own three bytes is text, not an error. */
		bool invalid = cp == 0xfffd && !(len == 3 && s[i] == 0xef);
		char esc[8];
		const void *unit = s + i;
		size_t ulen = len;
		if (invalid) {
			/* One byte at a time: the next may start a valid sequence. */
			len = 1;
			esc[0] = '\\';
			esc[1] = 'x';
			esc[2] = hex[s[i] >> 4];
			esc[3] = hex[s[i] & 15];
			unit = esc;
			ulen = 4;
		} else if (cp < 0x80 && also && cp && strchr(also, (int)cp)) {
			unit = "?";
			ulen = 1;
		} else if (spy_term_is_control(cp)) {
			esc[0] = '\\';
			if (cp < 0x80) {
				esc[1] = 'x';
				esc[2] = hex[cp >> 4];
				esc[3] = hex[cp & 15];
				ulen = 4;
			} else {
				esc[1] = 'u';
				esc[2] = hex[(cp >> 12) & 15];
				esc[3] = hex[(cp >> 8) & 15];
				esc[4] = hex[(cp >> 4) & 15];
				esc[5] = hex[cp & 15];
				ulen = 6;
			}
			unit = esc;
		}
		if (ulen > max - used) {
			return;
		}
		spy_buf_add(out, unit, ulen);
		used += ulen;
		i += len;
	}
}

void spy_term_adds(struct spy_buf *out, const char *s)
{
	if (s) {
		spy_term_escape(out, s, strlen(s), (size_t)-1, NULL);
	}
}

void spy_term_vaddf(struct spy_buf *out, const char *fmt, va_list ap)
{
	struct spy_buf msg = SPY_BUF_INIT;
	spy_buf_vaddf(&msg, fmt, ap);
	spy_term_escape(out, msg.buf, msg.len, (size_t)-1, NULL);
	spy_buf_release(&msg);
}

/* ---- giving the terminal back on a crash ---- */

static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGQUIT };

static struct {
	volatile sig_atomic_t armed;
	int tio_fd, out_fd;
	bool have_tio;
	struct termios tio;
	char seq[64];
	size_t seqlen;
} crash;

static void on_fatal(int sig)
{
	if (crash.armed) {
		crash.armed = 0;
		if (crash.have_tio) {
			tcsetattr(crash.tio_fd, TCSANOW, &crash.tio);
		}
		ssize_t w = write(crash.out_fd, crash.seq, crash.seqlen);
		(void)w;
	}
	/* SA_RESETHAND made the action the default: die of it, core and all. */
	raise(sig);
}

void spy_term_crash_arm(int tio_fd, const struct termios *tio, int out_fd, const char *seq)
{
	crash.tio_fd = tio_fd;
	crash.out_fd = out_fd;
	crash.have_tio = tio != NULL;
	if (tio) {
		crash.tio = *tio;
	}
	crash.seqlen = strnlen(seq, sizeof(crash.seq) - 1);
	memcpy(crash.seq, seq, crash.seqlen);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal;
	sa.sa_flags = (int)SA_RESETHAND | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	crash.armed = 1;
	for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++) {
		sigaction(fatal_signals[i], &sa, NULL);
	}
}

void spy_term_crash_disarm(void)
{
	crash.armed = 0;
	for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++) {
		signal(fatal_signals[i], SIG_DFL);
	}
}
