/* Logging to stderr, gated by SPY_LOG (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/term.h"

int spy_log_level = SPY_LOG_WARN;

void spy_log_init_from_env(void)
{
	static const char *names[] = { "error", "warn", "info", "debug", "trace" };
	const char *v = getenv("SPY_LOG");
	if (!v) {
		return;
	}
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
		if (!strcmp(v, names[i])) {
			spy_log_level = i;
			return;
		}
	}
}

void spy_log_write(int level, const char *fmt, ...)
{
	static const char *tags[] = { "error", "warn", "info", "debug", "trace" };
	va_list ap;
	struct spy_buf msg = SPY_BUF_INIT, b = SPY_BUF_INIT;
	va_start(ap, fmt);
	spy_buf_vaddf(&msg, fmt, ap);
	va_end(ap);
	/* Log lines quote target strings too. */
	spy_term_escape(&b, msg.buf, msg.len, (size_t)-1, NULL);
	fprintf(stderr, "spy[%s]: %s\n", tags[level < 0 ? 0 : level > 4 ? 4 : level], b.buf);
	spy_buf_release(&msg);
	spy_buf_release(&b);
}
