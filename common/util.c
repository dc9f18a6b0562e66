/* Allocation wrappers: abort on out-of-memory (see util.h for why). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/util.h"

static _Noreturn void oom(size_t n)
{
	fprintf(stderr, "spy: out of memory allocating %zu bytes\n", n);
	abort();
}

void *spy_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		oom(n);
	}
	return p;
}

void *spy_xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
	if (!p) {
		oom(nmemb * size);
	}
	return p;
}

void *spy_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q) {
		oom(n);
	}
	return q;
}

char *spy_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = spy_xmalloc(n);
	memcpy(d, s, n);
	return d;
}

uint64_t spy_s_to_ns(double s)
{
	if (!(s > 0)) {
		return 0;
	}
	double ns = s * 1e9 + 0.5;
	return ns < (double)SPY_NS_MAX ? (uint64_t)ns : SPY_NS_MAX;
}

void spy_grow(void **v, size_t *alloc, size_t need, size_t elsize)
{
	if (need <= *alloc) {
		return;
	}
	size_t n = *alloc ? *alloc : 8;
	while (n < need) {
		if (n > ((size_t)-1) / 2 / elsize) {
			oom(need * elsize);
		}
		n *= 2;
	}
	*v = spy_xrealloc(*v, n * elsize);
	*alloc = n;
}

void spy_bug(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "spy: BUG at %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

bool spy_ends_with(const char *s, const char *suffix)
{
	if (!s) {
		return false;
	}
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !memcmp(s + n - m, suffix, m);
}

bool spy_ends_with_nocase(const char *s, const char *suffix)
{
	if (!s) {
		return false;
	}
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcasecmp(s + n - m, suffix);
}

const char *spy_basename(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

bool spy_is_libpython(const char *path)
{
	const char *b = spy_basename(path);
	if (strncmp(b, "libpython", 9)) {
		return false;
	}
	const char *p = b + 9;
	/* A digit after the dot: libpython3.so is the stable-ABI stub, not the interpreter. */
	if ((p[0] != '2' && p[0] != '3') || p[1] != '.' || p[2] < '0' || p[2] > '9') {
		return false;
	}
	return strstr(p, ".so") != NULL;
}

uint64_t spy_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t spy_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t spy_hash_bytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 1099511628211ULL;
	}
	return h;
}
