/*
 * A protobuf writer: the wire constructs spy's messages need (pprof's
 * profile.proto, Pyroscope's push.v1), appended to a buffer.
 *
 * Why by hand, not through protobuf-c or nanopb: five constructs (varint,
 * tag, length-delimited bytes, nested messages, packed varints) are about
 * forty lines; a code generator and its library would be a build and
 * packaging dependency for that. A nested message is encoded into a
 * scratch buffer first so its length can be written before it.
 */
#ifndef SPY_COMMON_PROTO_H
#define SPY_COMMON_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* A base-128 varint, no tag (an element of a packed field). */
void spy_pb_varint(struct spy_buf *b, uint64_t v);
/* Field field as a varint (wire type 0). */
void spy_pb_uint(struct spy_buf *b, unsigned field, uint64_t v);
/* Field field as length-delimited bytes (wire type 2): bytes, strings, packed fields. */
void spy_pb_bytes(struct spy_buf *b, unsigned field, const void *data, size_t len);
/* A string field (its bytes, without the NUL). */
void spy_pb_str(struct spy_buf *b, unsigned field, const char *s);
/* Append sub as message field field of b, and empty sub for the next message. */
void spy_pb_msg(struct spy_buf *b, unsigned field, struct spy_buf *sub);

#endif
