/*
 * Fuzzing symbolize/cfi.c: finding the negate_ra_state opcodes of a
 * function's CFI through an .eh_frame_hdr table, in memory a target wrote.
 * Whatever the bytes: no crash, no read outside the image (reads are
 * checked against its exact bounds, the sanitizers tell the rest), no
 * more opcodes than asked for, and each one found is a 0x2d byte of the
 * image.
 *
 * Input: bytes 0-3 the ip (an offset into the image, little-endian), 4-7
 * the table's count; the rest is the image, mapped at BASE, where the
 * table of (start, FDE) pairs begins, both relative to BASE.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "symbolize/symbolize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BASE 0x400000u
#define MAX_OPS 16

struct image {
	const uint8_t *v;
	size_t n;
};

static int image_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	const struct image *im = ctx;
	if (addr < BASE || addr - BASE > im->n || len > im->n - (addr - BASE)) {
		return -1;
	}
	memcpy(dst, im->v + (addr - BASE), len);
	return 0;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 8) {
		return 0;
	}
	/* An exact-size copy, so that a read past the image is the sanitizers' to see. */
	struct image im = { malloc(size - 8 ? size - 8 : 1), size - 8 };
	if (!im.v) {
		abort();
	}
	memcpy((uint8_t *)im.v, data + 8, im.n);
	struct spy_mem mem = { .read = image_read, .ctx = &im };
	spy_addr_t ops[MAX_OPS];
	size_t n = sym_cfi_ra_state_ops(&mem, BASE, BASE, le32(data + 4), BASE + le32(data),
					ops, MAX_OPS);
	if (n > MAX_OPS) {
		abort();
	}
	for (size_t i = 0; i < n; i++) {
		if (ops[i] < BASE || ops[i] - BASE >= im.n || im.v[ops[i] - BASE] != 0x2d) {
			abort();
		}
	}
	free((void *)im.v);
	return 0;
}
