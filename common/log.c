/* Logging to stderr, gated by SPY_LOG (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/term.h"
#include "common/util.h"

int spy_log_level = SPY_LOG_WARN;

/* SPY_LOG's values, and each line's tag, by level. */
static const char *const names[] = { "error", "warn", "info", "debug", "trace" };

void spy_log_init_from_env(void)
{
	const char *v = getenv("SPY_LOG");
	if (!v) {
		return;
	}
	for (int i = 0; i < (int)SPY_ARRAY_SIZE(names); i++) {
		if (!strcmp(v, names[i])) {
			spy_log_level = i;
			return;
		}
	}
}

void spy_log_write(int level, const char *fmt, ...)
{
	va_list ap;
	struct spy_buf b = SPY_BUF_INIT;
	/* Log lines quote target strings too. */
	va_start(ap, fmt);
	spy_term_vaddf(&b, fmt, ap);
	va_end(ap);
	fprintf(stderr, "spy[%s]: %s\n", names[level < 0 ? 0 : level > 4 ? 4 : level], b.buf);
	spy_buf_release(&b);
}
