/*
 * The pprof format: a gzip-compressed profile.proto message
 * (github.com/google/pprof/proto/profile.proto), for `go tool pprof` and
 * the tools built on it.
 *
 * The decision a newcomer would question: protobuf is encoded by hand, not
 * through protobuf-c or nanopb. The writer needs five wire constructs
 * (varint, tag, length-delimited bytes, nested messages, packed varints),
 * about fifty lines; a code generator and a library would be a build and
 * packaging dependency for that, and flamegraph's boundary is common + zlib.
 * Nested messages are encoded into a scratch buffer first so their length
 * can be written before them.
 *
 * Mapping of the profile:
 *  - one location per frame, id = frame id + 1, with one line
 *    {function_id, line}; no mappings or addresses (frames are symbolized);
 *  - one function per distinct (func, file), name = system_name = func,
 *    filename = file ("" for synthetic roots, which stay in the stacks so
 *    pprof's -tagfocus-free views can still focus on one thread);
 *  - one sample per distinct stack, location ids leaf first as pprof
 *    expects, values {count} or, when "# rate-hz:" is known,
 *    {count, count * period} with sample types samples/count and
 *    wall/nanoseconds, period_type wall/nanoseconds, period 1e9 / rate;
 *  - duration_nanos from "# duration-s:"; every metadata entry as a
 *    "key: value" comment.
 * The string table is deduplicated by pointer (profile strings are
 * interned), starts with "" as the format requires, and holds only valid
 * UTF-8: pprof's readers are written in Go and Java, where an invalid byte
 * would at best show as garbage, so each maximal invalid subpart becomes
 * U+FFFD as in the JSON writers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/term.h"
#include "common/util.h"
#include "flamegraph/internal.h"

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

static void put_varint(struct spy_buf *b, uint64_t v)
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

static void put_uint(struct spy_buf *b, unsigned field, uint64_t v)
{
	put_varint(b, (uint64_t)field << 3 | WIRE_VARINT);
	put_varint(b, v);
}

static void put_bytes(struct spy_buf *b, unsigned field, const void *data, size_t len)
{
	put_varint(b, (uint64_t)field << 3 | WIRE_LEN);
	put_varint(b, len);
	spy_buf_add(b, data, len);
}

/* Append sub as field of b, and empty sub for the next message. */
static void put_msg(struct spy_buf *b, unsigned field, struct spy_buf *sub)
{
	put_bytes(b, field, sub->buf, sub->len);
	spy_buf_reset(sub);
}

/* A Function message's identity: its name and file, both interned. */
struct pp_func {
	const char *func, *file;
};

struct pp {
	const struct fg_profile *p;
	struct spy_buf out;       /* the Profile message */
	struct spy_buf strings;   /* string_table entries, already encoded */
	struct spy_buf sub, sub2; /* scratch for nested messages */
	struct spy_hmap strmap;   /* interned string -> string_table index */
	struct spy_hmap funcmap;  /* hash of a pp_func -> its index in funcs */
	struct pp_func *funcs;    /* Function id - 1 -> its identity */
	size_t funcs_alloc;
	uint64_t nstrings;
	uint64_t nfuncs;
	int64_t period;           /* ns per sample, 0 when the rate is unknown */
};

/* A new string_table entry for s (valid UTF-8, controls made visible); its index. */
static uint64_t string_new(struct pp *pp, const char *s)
{
	struct spy_buf *t = &pp->sub2;
	spy_buf_reset(t);
	/* pprof shows these strings in a terminal: the one terminal escaper. */
	spy_term_adds(t, s);
	put_bytes(&pp->strings, 6, t->buf, t->len);
	spy_buf_reset(t);
	return pp->nstrings++;
}

/* The index of an interned string (or of any string kept alive meanwhile). */
static uint64_t string_id(struct pp *pp, const char *s)
{
	if (!s || !*s) {
		return 0;
	}
	uint64_t id = spy_hmap_get(&pp->strmap, (uint64_t)(uintptr_t)s);
	if (id == SPY_HMAP_NONE) {
		id = string_new(pp, s);
		spy_hmap_add(&pp->strmap, (uint64_t)(uintptr_t)s, id);
	}
	return id;
}

/* The function id of a frame, writing the Function message when new. */
static uint64_t function_id(struct pp *pp, const struct fg_frame *fr)
{
	uint64_t k = ((uint64_t)(uintptr_t)fr->func * 0x9e3779b97f4a7c15ULL) ^ (uint64_t)(uintptr_t)fr->file;
	struct spy_hmap_it it;
	for (uint64_t v = spy_hmap_find(&pp->funcmap, k, &it); v != SPY_HMAP_NONE;
	     v = spy_hmap_next(&pp->funcmap, k, &it)) {
		if (pp->funcs[v].func == fr->func && pp->funcs[v].file == fr->file) {
			return v + 1;
		}
	}
	SPY_GROW(pp->funcs, pp->funcs_alloc, pp->nfuncs + 1);
	pp->funcs[pp->nfuncs] = (struct pp_func){ fr->func, fr->file };
	spy_hmap_add(&pp->funcmap, k, pp->nfuncs);
	uint64_t id = ++pp->nfuncs;
	uint64_t name = string_id(pp, fr->func);
	uint64_t file = string_id(pp, fr->file);
	put_uint(&pp->sub, 1, id);
	put_uint(&pp->sub, 2, name);
	put_uint(&pp->sub, 3, name);
	put_uint(&pp->sub, 4, file);
	put_msg(&pp->out, 5, &pp->sub);
	return id;
}

static int pp_sample(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	struct pp *pp = ctx;
	struct spy_buf *packed = &pp->sub2;
	spy_buf_reset(packed);
	for (size_t i = depth; i-- > 0;) {
		put_varint(packed, (uint64_t)frames[i] + 1);
	}
	put_bytes(&pp->sub, 1, packed->buf, packed->len);
	spy_buf_reset(packed);
	put_varint(packed, count);
	if (pp->period) {
		put_varint(packed, count * (uint64_t)pp->period);
	}
	put_bytes(&pp->sub, 2, packed->buf, packed->len);
	spy_buf_reset(packed);
	put_msg(&pp->out, 2, &pp->sub);
	return 0;
}

/* A ValueType {type, unit} as field of the Profile. */
static void value_type(struct pp *pp, unsigned field, const char *type, const char *unit)
{
	uint64_t t = string_new(pp, type);
	uint64_t u = string_new(pp, unit);
	put_uint(&pp->sub, 1, t);
	put_uint(&pp->sub, 2, u);
	put_msg(&pp->out, field, &pp->sub);
}

/* Compress the message as one gzip member to f. */
static int gzip_out(const struct spy_buf *msg, FILE *f, struct spy_err *err)
{
	z_stream z;
	memset(&z, 0, sizeof(z));
	/* 15 + 16: a gzip header and trailer (mtime 0, so output is deterministic). */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		return spy_err_set(err, SPY_EIO, "writing the pprof profile: zlib init failed");
	}
	unsigned char out[65536];
	const unsigned char *in = (const unsigned char *)msg->buf;
	size_t left = msg->len;
	int rc = 0, zr;
	do {
		/* avail_in is 32-bit: feed a huge message in slices. */
		if (z.avail_in == 0 && left) {
			size_t chunk = left > (1u << 30) ? (1u << 30) : left;
			z.next_in = (unsigned char *)(uintptr_t)in;
			z.avail_in = (uInt)chunk;
			in += chunk;
			left -= chunk;
		}
		z.next_out = out;
		z.avail_out = sizeof(out);
		zr = deflate(&z, left ? Z_NO_FLUSH : Z_FINISH);
		size_t have = sizeof(out) - z.avail_out;
		if (have && fwrite(out, 1, have, f) != have) {
			rc = spy_err_set(err, SPY_EIO, "writing the pprof profile: %s", strerror(errno));
			break;
		}
	} while (zr != Z_STREAM_END && zr != Z_STREAM_ERROR);
	if (!rc && zr != Z_STREAM_END) {
		rc = spy_err_set(err, SPY_EIO, "writing the pprof profile: zlib error %d", zr);
	}
	deflateEnd(&z);
	if (!rc && fflush(f) != 0) {
		rc = spy_err_set(err, SPY_EIO, "writing the pprof profile: %s", strerror(errno));
	}
	return rc;
}

/* A metadata number, or 0 when unset or not a plain positive finite number. */
static double meta_number(const struct fg_profile *p, const char *key)
{
	const char *s = fg_profile_meta_get(p, key);
	double v = s ? strtod(s, NULL) : 0;
	return v > 0 && v < 1e15 ? v : 0;
}

int fg_profile_write_pprof(const struct fg_profile *p, FILE *f, struct spy_err *err)
{
	struct pp pp;
	memset(&pp, 0, sizeof(pp));
	pp.p = p;
	/* string_table[0] must be "". */
	put_bytes(&pp.strings, 6, "", 0);
	pp.nstrings = 1;

	double rate = meta_number(p, FG_META_RATE_HZ);
	if (rate > 0 && rate < 1e9) {
		/* A crafted "# rate-hz: 1e-300" saturates, never overflows. */
		pp.period = (int64_t)spy_s_to_ns(1.0 / rate);
	}
	value_type(&pp, 1, "samples", "count");
	if (pp.period) {
		value_type(&pp, 1, "wall", "nanoseconds");
		value_type(&pp, 11, "wall", "nanoseconds");
		put_uint(&pp.out, 12, (uint64_t)pp.period);
	}
	/* Saturated too: "# duration-s: 1e14" is past 2^64 ns. */
	uint64_t duration = spy_s_to_ns(meta_number(p, FG_META_DURATION_S));
	if (duration) {
		put_uint(&pp.out, 10, duration);
	}

	size_t nframes = fg_profile_frame_count(p);
	for (uint32_t id = 0; id < nframes; id++) {
		const struct fg_frame *fr = fg_profile_frame(p, id);
		uint64_t fid = function_id(&pp, fr);
		put_uint(&pp.sub2, 1, fid);
		if (fr->line) {
			put_uint(&pp.sub2, 2, fr->line);
		}
		put_uint(&pp.sub, 1, (uint64_t)id + 1);
		put_msg(&pp.sub, 4, &pp.sub2);
		put_msg(&pp.out, 4, &pp.sub);
	}
	fg_profile_foreach_stack(p, pp_sample, &pp);

	/* Comments are string indices, written unpacked (readers take both forms). */
	size_t nmeta = fg_profile_meta_count(p);
	struct spy_buf text = SPY_BUF_INIT;
	for (size_t i = 0; i < nmeta; i++) {
		const char *key, *value;
		fg_profile_meta_at(p, i, &key, &value);
		spy_buf_reset(&text);
		spy_buf_addf(&text, "%s: %s", key, value);
		put_uint(&pp.out, 13, string_new(&pp, text.buf));
	}
	spy_buf_release(&text);

	spy_buf_add(&pp.out, pp.strings.buf, pp.strings.len);
	int rc = gzip_out(&pp.out, f, err);
	spy_buf_release(&pp.out);
	spy_buf_release(&pp.strings);
	spy_buf_release(&pp.sub);
	spy_buf_release(&pp.sub2);
	spy_hmap_release(&pp.strmap);
	spy_hmap_release(&pp.funcmap);
	free(pp.funcs);
	return rc;
}
