/* Growable buffer; invariants are stated in buf.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/util.h"

char spy_buf_empty[1];

void spy_buf_init(struct spy_buf *b)
{
	b->alloc = 0;
	b->len = 0;
	b->buf = spy_buf_empty;
}

void spy_buf_release(struct spy_buf *b)
{
	if (b->alloc) {
		free(b->buf);
	}
	spy_buf_init(b);
}

char *spy_buf_detach(struct spy_buf *b, size_t *len)
{
	char *s;
	if (len) {
		*len = b->len;
	}
	if (!b->alloc) {
		s = spy_xstrdup("");
	} else {
		s = b->buf;
	}
	spy_buf_init(b);
	return s;
}

void spy_buf_grow(struct spy_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;
	if (need < b->len) {
		SPY_BUG("spy_buf size overflow");
	}
	if (need <= b->alloc) {
		return;
	}
	size_t n = b->alloc ? b->alloc : 64;
	while (n < need) {
		n *= 2;
	}
	if (!b->alloc) {
		b->buf = spy_xmalloc(n);
		b->buf[0] = '\0';
	} else {
		b->buf = spy_xrealloc(b->buf, n);
	}
	b->alloc = n;
}

void spy_buf_reset(struct spy_buf *b)
{
	b->len = 0;
	if (b->alloc) {
		b->buf[0] = '\0';
	}
}

void spy_buf_add(struct spy_buf *b, const void *data, size_t len)
{
	spy_buf_grow(b, len);
	memcpy(b->buf + b->len, data, len);
	b->len += len;
	b->buf[b->len] = '\0';
}

void spy_buf_adds(struct spy_buf *b, const char *s)
{
	spy_buf_add(b, s, strlen(s));
}

void spy_buf_addch(struct spy_buf *b, char c)
{
	spy_buf_grow(b, 1);
	b->buf[b->len++] = c;
	b->buf[b->len] = '\0';
}

void spy_buf_vaddf(struct spy_buf *b, const char *fmt, va_list ap)
{
	/* Format straight into the spare room; only a long result formats twice. */
	va_list cp;
	spy_buf_grow(b, 64);
	va_copy(cp, ap);
	int n = vsnprintf(b->buf + b->len, b->alloc - b->len, fmt, cp);
	va_end(cp);
	if (n < 0) {
		b->buf[b->len] = '\0';
		return;
	}
	if ((size_t)n >= b->alloc - b->len) {
		spy_buf_grow(b, (size_t)n);
		vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
	}
	b->len += (size_t)n;
}

void spy_buf_addf(struct spy_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	spy_buf_vaddf(b, fmt, ap);
	va_end(ap);
}
