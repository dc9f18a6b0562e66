/* Error carrier; see err.h for the contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/util.h"

int spy_err_set(struct spy_err *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		err->code = code;
		err->remedy[0] = '\0';
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return -code;
}

void spy_err_remedy(struct spy_err *err, const char *fmt, ...)
{
	if (!err) {
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->remedy, sizeof(err->remedy), fmt, ap);
	va_end(ap);
}

void spy_err_prefix(struct spy_err *err, const char *fmt, ...)
{
	if (!err) {
		return;
	}
	char pre[256], old[sizeof(err->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_adds(&b, pre);
	spy_buf_adds(&b, old);
	size_t n = b.len < sizeof(err->msg) - 1 ? b.len : sizeof(err->msg) - 1;
	memcpy(err->msg, b.buf, n);
	err->msg[n] = '\0';
	spy_buf_release(&b);
}

void spy_err_clear(struct spy_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
		err->remedy[0] = '\0';
	}
}

int spy_err_exit_code(int code)
{
	if (code < 0) {
		code = -code;
	}
	switch (code) {
	case SPY_OK:
		return 0;
	case SPY_EUSAGE:
		return 2;
	case SPY_ENOPROC:
	case SPY_EPERM:
	case SPY_EGONE:
		return 3;
	case SPY_ENOPY:
	case SPY_EVERSION:
	case SPY_ECORRUPT:
	case SPY_EBOUND:
		return 4;
	case SPY_EIO:
	case SPY_EFORMAT:
		return 5;
	case SPY_EMEM:
		return 3;
	case SPY_EINTR:
		return 130;
	default:
		return 1;
	}
}
