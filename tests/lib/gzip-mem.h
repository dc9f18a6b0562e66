/*
 * gzip in memory, for the tests that feed spy compressed profiles (their
 * fixtures are made on the fly, so a mutation can be compressed after it is
 * made). Header-only, like check.h; the test links zlib.
 */
#ifndef SPY_TESTS_GZIP_MEM_H
#define SPY_TESTS_GZIP_MEM_H

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* data[0..len) gzipped (level 6) into a malloc'd buffer of *outlen bytes; aborts on failure. */
static inline void *gzip_mem(const void *data, size_t len, size_t *outlen)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	if (deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		abort();
	}
	size_t cap = deflateBound(&zs, (uLong)len) + 64;
	unsigned char *out = malloc(cap);
	if (!out) {
		abort();
	}
	zs.next_in = (unsigned char *)data;
	zs.avail_in = (uInt)len;
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	if (deflate(&zs, Z_FINISH) != Z_STREAM_END) {
		abort();
	}
	*outlen = cap - zs.avail_out;
	deflateEnd(&zs);
	return out;
}

#endif
