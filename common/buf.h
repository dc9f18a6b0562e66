/*
 * struct spy_buf: a growable byte buffer, a trimmed copy of git's strbuf idea.
 *
 * Invariants:
 *  - buf is never NULL: an empty buffer points at a shared "" until the first
 *    append, so it can always be printed;
 *  - buf[len] == '\0' always, so the content is a C string unless it holds
 *    NUL bytes itself;
 *  - alloc is private: only the functions below look at it.
 *
 * spy_buf_release frees and resets to empty; spy_buf_detach hands the caller a
 * malloc'd string it must free and resets the buffer.
 */
#ifndef SPY_COMMON_BUF_H
#define SPY_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

extern char spy_buf_empty[];

struct spy_buf {
	size_t alloc;
	size_t len;
	char *buf;
};

#define SPY_BUF_INIT { 0, 0, spy_buf_empty }

void spy_buf_init(struct spy_buf *b);
void spy_buf_release(struct spy_buf *b);
char *spy_buf_detach(struct spy_buf *b, size_t *len);
void spy_buf_grow(struct spy_buf *b, size_t extra);
void spy_buf_reset(struct spy_buf *b);
void spy_buf_add(struct spy_buf *b, const void *data, size_t len);
void spy_buf_adds(struct spy_buf *b, const char *s);
void spy_buf_addch(struct spy_buf *b, char c);
void spy_buf_addf(struct spy_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void spy_buf_vaddf(struct spy_buf *b, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

#endif
