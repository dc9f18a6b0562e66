/* The protobuf writer (see proto.h). */
#include <string.h>

#include "common/proto.h"

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

void spy_pb_varint(struct spy_buf *b, uint64_t v)
{
	unsigned char tmp[10];
	size_t n = 0;
	while (v >= 0x80) {
		tmp[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (unsigned char)v;
	spy_buf_add(b, tmp, n);
}

void spy_pb_uint(struct spy_buf *b, unsigned field, uint64_t v)
{
	spy_pb_varint(b, (uint64_t)field << 3 | WIRE_VARINT);
	spy_pb_varint(b, v);
}

void spy_pb_bytes(struct spy_buf *b, unsigned field, const void *data, size_t len)
{
	spy_pb_varint(b, (uint64_t)field << 3 | WIRE_LEN);
	spy_pb_varint(b, len);
	spy_buf_add(b, data, len);
}

void spy_pb_str(struct spy_buf *b, unsigned field, const char *s)
{
	spy_pb_bytes(b, field, s, strlen(s));
}

void spy_pb_msg(struct spy_buf *b, unsigned field, struct spy_buf *sub)
{
	spy_pb_bytes(b, field, sub->buf, sub->len);
	spy_buf_reset(sub);
}
