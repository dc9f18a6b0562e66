/*
 * The pprof format: a gzip-compressed profile.proto message
 * (github.com/google/pprof/proto/profile.proto), for `go tool pprof` and
 * the tools built on it.
 *
 * Protobuf is encoded by common/proto.h's writer (why by hand: there).
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
 *    wall/nanoseconds, period_type wall/nanoseconds, period 1e9 / rate
 *    ("cpu" for "wall" when asked: Pyroscope's process_cpu profile, as Go's
 *    own CPU profiles name them);
 *  - duration_nanos from "# duration-s:", time_nanos when given; every metadata entry as a
 *    "key: value" comment.
 * The message is encoded and compressed as it is written: each top-level
 * field goes into a small buffer, which is deflated to f whenever it
 * holds FLUSH_AT bytes, so a profile of many megabytes of names never
 * exists whole, uncompressed, in memory (an agent writes one a window for
 * every process: issue #37). Top-level fields may come in any order and
 * a repeated field's elements are read in the order written, so each
 * string_table entry is written when first used, not gathered for the
 * end.
 *
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

#include "common/proto.h"
#include "common/term.h"
#include "common/util.h"
#include "flamegraph/internal.h"

/* A Function message's identity: its name and file, both interned. */
struct pp_func {
	const char *func, *file;
};

/* The Profile's top-level fields gathered here are deflated to f past this many bytes. */
#define FLUSH_AT (64 * 1024)

struct pp {
	const struct fg_profile *p;
	struct spy_buf out;       /* the Profile message's fields not deflated yet */
	z_stream z;
	FILE *f;
	int rc;                   /* the first failure: nothing more is written */
	struct spy_err *err;
	struct spy_buf sub, sub2, sub3; /* scratch for nested messages */
	/* The stack pp_sample writes now: its frames, and its count not labelled yet. */
	const uint32_t *frames;
	size_t depth;
	uint64_t rest;
	struct spy_hmap strmap;   /* interned string -> string_table index */
	struct spy_hmap funcmap;  /* hash of a pp_func -> its index in funcs */
	struct pp_func *funcs;    /* Function id - 1 -> its identity */
	size_t funcs_alloc;
	uint64_t nstrings;
	uint64_t nfuncs;
	int64_t period;           /* ns per sample, 0 when the rate is unknown */
};

static void maybe_flush(struct pp *pp);

/* A new string_table entry for s (valid UTF-8, controls made visible); its index. */
static uint64_t string_new(struct pp *pp, const char *s)
{
	struct spy_buf *t = &pp->sub2;
	spy_buf_reset(t);
	/* pprof shows these strings in a terminal: the one terminal escaper. */
	spy_term_adds(t, s);
	spy_pb_bytes(&pp->out, 6, t->buf, t->len);
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
	uint64_t k = spy_hmap_pair((uint64_t)(uintptr_t)fr->func, (uint64_t)(uintptr_t)fr->file);
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&pp->funcmap, k, it, v) {
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
	spy_pb_uint(&pp->sub, 1, id);
	spy_pb_uint(&pp->sub, 2, name);
	spy_pb_uint(&pp->sub, 3, name);
	spy_pb_uint(&pp->sub, 4, file);
	spy_pb_msg(&pp->out, 5, &pp->sub);
	return id;
}

/* One Sample message: the stack, count samples, labels l[0..n). */
static void pp_sample_msg(struct pp *pp, const uint32_t *frames, size_t depth, uint64_t count,
			  const struct fg_label *l, size_t n)
{
	struct spy_buf *packed = &pp->sub2;
	spy_buf_reset(packed);
	for (size_t i = depth; i-- > 0;) {
		spy_pb_varint(packed, (uint64_t)frames[i] + 1);
	}
	spy_pb_bytes(&pp->sub, 1, packed->buf, packed->len);
	spy_buf_reset(packed);
	spy_pb_varint(packed, count);
	if (pp->period) {
		spy_pb_varint(packed, count * (uint64_t)pp->period);
	}
	spy_pb_bytes(&pp->sub, 2, packed->buf, packed->len);
	spy_buf_reset(packed);
	/* Label {key, str}: the way Pyroscope's span profiles read span_id. */
	for (size_t i = 0; i < n; i++) {
		spy_pb_uint(&pp->sub3, 1, string_id(pp, l[i].key));
		spy_pb_uint(&pp->sub3, 2, string_id(pp, l[i].value));
		spy_pb_msg(&pp->sub, 3, &pp->sub3);
	}
	spy_pb_msg(&pp->out, 2, &pp->sub);
	maybe_flush(pp);
}

static int pp_labelled(void *ctx, const struct fg_label *l, size_t n, uint64_t count)
{
	struct pp *pp = ctx;
	count = count < pp->rest ? count : pp->rest;
	pp->rest -= count;
	if (count) {
		pp_sample_msg(pp, pp->frames, pp->depth, count, l, n);
	}
	return pp->rc;
}

/* A stack's samples: one Sample per label set they carried, one for those that carried none. */
static int pp_sample(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	struct pp *pp = ctx;
	pp->frames = frames;
	pp->depth = depth;
	pp->rest = count;
	int rc = fg_profile_stack_labels(pp->p, frames, pp_labelled, pp);
	if (!rc && pp->rest) {
		pp_sample_msg(pp, frames, depth, pp->rest, NULL, 0);
	}
	return pp->rc;
}

/* A ValueType {type, unit} as field of the Profile. */
static void value_type(struct pp *pp, unsigned field, const char *type, const char *unit)
{
	uint64_t t = string_new(pp, type);
	uint64_t u = string_new(pp, unit);
	spy_pb_uint(&pp->sub, 1, t);
	spy_pb_uint(&pp->sub, 2, u);
	spy_pb_msg(&pp->out, field, &pp->sub);
}

static int gzip_start(struct pp *pp)
{
	/* 15 + 16: a gzip header and trailer (mtime 0, so output is deterministic). */
	if (deflateInit2(&pp->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		return pp->rc = spy_err_set(pp->err, SPY_EIO, "writing the pprof profile: zlib init failed");
	}
	return 0;
}

/* Deflate what pp->out holds to f (with finish, the end of the gzip member) and empty it. */
static int gzip_some(struct pp *pp, bool finish)
{
	unsigned char out[16384];
	const unsigned char *in = (const unsigned char *)pp->out.buf;
	size_t left = pp->out.len;
	int zr = Z_OK;
	while (!pp->rc) {
		/* avail_in is 32-bit: a huge field goes in slices. */
		if (pp->z.avail_in == 0 && left) {
			size_t chunk = left > (1u << 30) ? (1u << 30) : left;
			pp->z.next_in = (unsigned char *)(uintptr_t)in;
			pp->z.avail_in = (uInt)chunk;
			in += chunk;
			left -= chunk;
		}
		pp->z.next_out = out;
		pp->z.avail_out = sizeof(out);
		zr = deflate(&pp->z, left || !finish ? Z_NO_FLUSH : Z_FINISH);
		size_t have = sizeof(out) - pp->z.avail_out;
		if (have && fwrite(out, 1, have, pp->f) != have) {
			pp->rc = spy_err_set(pp->err, SPY_EIO, "writing the pprof profile: %s", strerror(errno));
		} else if (zr == Z_STREAM_ERROR || (finish && zr == Z_BUF_ERROR && have == 0)) {
			pp->rc = spy_err_set(pp->err, SPY_EIO, "writing the pprof profile: zlib error %d", zr);
		} else if (finish ? zr == Z_STREAM_END : !left && pp->z.avail_in == 0 && pp->z.avail_out != 0) {
			break;
		}
	}
	spy_buf_reset(&pp->out);
	return pp->rc;
}

/* After a top-level field: deflated once enough is gathered. */
static void maybe_flush(struct pp *pp)
{
	if (pp->out.len >= FLUSH_AT) {
		gzip_some(pp, false);
	}
}

/* A metadata number, or 0 when unset or not a plain positive finite number. */
static double meta_number(const struct fg_profile *p, const char *key)
{
	const char *s = fg_profile_meta_get(p, key);
	double v = s ? strtod(s, NULL) : 0;
	return v > 0 && v < 1e15 ? v : 0;
}

int fg_profile_write_pprof(const struct fg_profile *p, const struct fg_pprof_opts *o, FILE *f,
			   struct spy_err *err)
{
	static const struct fg_pprof_opts defaults;
	o = o ? o : &defaults;
	struct pp pp;
	memset(&pp, 0, sizeof(pp));
	pp.p = p;
	pp.f = f;
	pp.err = err;
	if (gzip_start(&pp) < 0) {
		return pp.rc;
	}
	/* string_table[0] must be "". */
	spy_pb_bytes(&pp.out, 6, "", 0);
	pp.nstrings = 1;

	double rate = meta_number(p, FG_META_RATE_HZ);
	if (rate > 0 && rate < 1e9) {
		/* A crafted "# rate-hz: 1e-300" saturates, never overflows. */
		pp.period = (int64_t)spy_s_to_ns(1.0 / rate);
	}
	value_type(&pp, 1, "samples", "count");
	if (pp.period) {
		const char *time = o->cpu ? "cpu" : "wall";
		value_type(&pp, 1, time, "nanoseconds");
		value_type(&pp, 11, time, "nanoseconds");
		spy_pb_uint(&pp.out, 12, (uint64_t)pp.period);
	}
	/* Saturated too: "# duration-s: 1e14" is past 2^64 ns. */
	uint64_t duration = spy_s_to_ns(meta_number(p, FG_META_DURATION_S));
	if (duration) {
		spy_pb_uint(&pp.out, 10, duration);
	}
	if (o->time_ns > 0) {
		spy_pb_uint(&pp.out, 9, (uint64_t)o->time_ns);
	}

	size_t nframes = fg_profile_frame_count(p);
	for (uint32_t id = 0; id < nframes && !pp.rc; id++) {
		const struct fg_frame *fr = fg_profile_frame(p, id);
		uint64_t fid = function_id(&pp, fr);
		spy_pb_uint(&pp.sub2, 1, fid);
		if (fr->line) {
			spy_pb_uint(&pp.sub2, 2, fr->line);
		}
		spy_pb_uint(&pp.sub, 1, (uint64_t)id + 1);
		spy_pb_msg(&pp.sub, 4, &pp.sub2);
		spy_pb_msg(&pp.out, 4, &pp.sub);
		maybe_flush(&pp);
	}
	if (!pp.rc) {
		fg_profile_foreach_stack(p, pp_sample, &pp);
	}

	/* Comments are string indices, written unpacked (readers take both forms). */
	size_t nmeta = fg_profile_meta_count(p);
	struct spy_buf text = SPY_BUF_INIT;
	for (size_t i = 0; i < nmeta; i++) {
		const char *key, *value;
		fg_profile_meta_at(p, i, &key, &value);
		spy_buf_reset(&text);
		spy_buf_addf(&text, "%s: %s", key, value);
		spy_pb_uint(&pp.out, 13, string_new(&pp, text.buf));
	}
	spy_buf_release(&text);

	int rc = gzip_some(&pp, true);
	deflateEnd(&pp.z);
	if (!rc && fflush(f) != 0) {
		rc = spy_err_set(err, SPY_EIO, "writing the pprof profile: %s", strerror(errno));
	}
	spy_buf_release(&pp.out);
	spy_buf_release(&pp.sub);
	spy_buf_release(&pp.sub2);
	spy_buf_release(&pp.sub3);
	spy_hmap_release(&pp.strmap);
	spy_hmap_release(&pp.funcmap);
	free(pp.funcs);
	return rc;
}
