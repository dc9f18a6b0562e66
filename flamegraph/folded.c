/*
 * The folded format, out and in: "# key: value" metadata lines, then one line
 * per distinct stack, "root;...;leaf COUNT".
 *
 * Writing streams through a small sink (a spy_buf flushed every 64 KiB to a
 * FILE *, an fd or a gzFile), so a profile of any size is written with a
 * fixed amount of memory. Files are cmd/output.c's business: it hands the
 * writer a FILE * and replaces the output only once it is complete.
 *
 * Reading is one strict, hand-written parser, and the decision a newcomer
 * would question is why it does not use gzopen()/gzgets() or sscanf. gzgets
 * cannot tell a truncated gzip file from a complete one without extra
 * calls, cuts long lines silently, and works on fds only; sscanf("%s %d")
 * splits on the first space while frames contain spaces. So the reader
 * inflates with zlib's stream API over either memory or an fd (the same
 * code the fuzz test drives), splits lines itself with a bound on their
 * length, splits the count off at the last space, frames at ';', and parses
 * each frame with the rules stated in flamegraph.h. Every rejection names
 * the input and the line.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"
#include "common/term.h"
#include "common/util.h"
#include "flamegraph/internal.h"

/* ---- frame text ---------------------------------------------------------- */

void fg_escape(struct spy_buf *out, const char *s)
{
	/* Cap what is written so every frame fits the reader's FG_MAX_FRAME;
	 * strings decoded from a target are bounded like this already. Folded
	 * text is read in terminals too: the one terminal escaper, plus ';'. */
	spy_term_escape(out, s, strnlen(s, 4 * SPY_MAX_STR), SPY_MAX_STR, ";");
}

static void add_u64(struct spy_buf *out, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);
	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	spy_buf_add(out, tmp + i, sizeof(tmp) - i);
}

/*
 * A line number as the writer prints one: 0..UINT32_MAX without leading
 * zeros. 0 is only ever written to disambiguate (see fg_frame_format).
 */
static bool parse_lineno(const char *s, size_t n, uint32_t *out)
{
	if (!n || n > 10 || (s[0] == '0' && n > 1)) {
		return false;
	}
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9') {
			return false;
		}
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > UINT32_MAX) {
		return false;
	}
	*out = (uint32_t)v;
	return true;
}

/* True if a file name would read back as "name:line". */
static bool file_looks_numbered(const char *file)
{
	const char *colon = strrchr(file, ':');
	uint32_t ignored;
	return colon && parse_lineno(colon + 1, strlen(colon + 1), &ignored);
}

void fg_frame_format(const struct fg_frame *f, struct spy_buf *out)
{
	const char *func = f->func ? f->func : "";
	if (f->kind == SPY_FRAME_SYNTHETIC) {
		/* An empty frame would make the line unreadable. */
		if (!*func) {
			spy_buf_addch(out, '?');
		} else {
			fg_escape(out, func);
		}
		return;
	}
	const char *file = f->file ? f->file : "";
	fg_escape(out, func);
	spy_buf_add(out, " (", 2);
	fg_escape(out, file);
	/*
	 * Without a line, a file named "x:12" would read back as x, line 12
	 * (and -F would then drop the 12); an explicit ":0" keeps it whole.
	 * Escaping never touches digits or ':', so testing the raw name is
	 * testing what is written.
	 */
	if (f->line || file_looks_numbered(file)) {
		spy_buf_addch(out, ':');
		add_u64(out, f->line);
	}
	spy_buf_addch(out, ')');
}

/* ---- writing ------------------------------------------------------------- */

enum sink_kind { SINK_MEM, SINK_FILE, SINK_FD, SINK_GZ };

#define SINK_FLUSH_AT (64 * 1024)

struct sink {
	enum sink_kind kind;
	struct spy_buf *out;  /* where text is built; the caller's buffer for SINK_MEM */
	struct spy_buf own;
	FILE *f;
	int fd;
	gzFile gz;
	bool failed;
	int saved_errno;      /* errno of the failure, 0 for a zlib error */
	char zmsg[128];
};

static void sink_init(struct sink *s, enum sink_kind kind, struct spy_buf *mem)
{
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->fd = -1;
	spy_buf_init(&s->own);
	s->out = kind == SINK_MEM ? mem : &s->own;
}

static void sink_fail_errno(struct sink *s, int e)
{
	if (!s->failed) {
		s->failed = true;
		s->saved_errno = e ? e : EIO;
	}
}

static void sink_flush(struct sink *s)
{
	struct spy_buf *b = s->out;
	if (s->kind == SINK_MEM) {
		return;
	}
	if (s->failed || !b->len) {
		spy_buf_reset(b);
		return;
	}
	switch (s->kind) {
	case SINK_FILE:
		errno = 0;
		if (fwrite(b->buf, 1, b->len, s->f) != b->len) {
			sink_fail_errno(s, errno);
		}
		break;
	case SINK_FD: {
		size_t done = 0;
		while (done < b->len) {
			ssize_t w = write(s->fd, b->buf + done, b->len - done);
			if (w < 0 && errno == EINTR) {
				continue;
			}
			if (w <= 0) {
				sink_fail_errno(s, w < 0 ? errno : EIO);
				break;
			}
			done += (size_t)w;
		}
		break;
	}
	case SINK_GZ:
		/* b->len < SINK_FLUSH_AT plus one line of at most FG_MAX_LINE
		 * bytes: well below INT_MAX. */
		if (gzwrite(s->gz, b->buf, (unsigned)b->len) != (int)b->len) {
			int zerr = 0;
			const char *m = gzerror(s->gz, &zerr);
			if (zerr == Z_ERRNO) {
				sink_fail_errno(s, errno);
			} else {
				s->failed = true;
				s->saved_errno = 0;
				snprintf(s->zmsg, sizeof(s->zmsg), "zlib: %s", m ? m : "error");
			}
		}
		break;
	case SINK_MEM:
		break;
	}
	spy_buf_reset(b);
}

static const char *sink_strerror(const struct sink *s)
{
	return s->saved_errno ? strerror(s->saved_errno) : s->zmsg;
}

struct emit_ctx {
	struct sink *sink;
	const struct fg_order *order;
	const uint32_t *frames; /* the stack held back, NULL if none */
	size_t depth;
	uint64_t count;
};

/* One line: the frames joined by ';', a space, the count. */
static void emit_line(struct spy_buf *out, const struct fg_order *t, const uint32_t *frames,
		      size_t depth, uint64_t count)
{
	for (size_t k = 0; k < depth; k++) {
		const char *text = t->texts.buf + t->text_off[frames[k]];
		size_t len = t->text_off[frames[k] + 1] - t->text_off[frames[k]];
		if (k) {
			spy_buf_addch(out, ';');
		} else if (len && text[0] == '#') {
			/* The line must not pass for metadata. */
			spy_buf_addch(out, '?');
			text++;
			len--;
		}
		spy_buf_add(out, text, len);
	}
	spy_buf_addch(out, ' ');
	add_u64(out, count);
	spy_buf_addch(out, '\n');
}

static int emit_counted(struct emit_ctx *e, const uint32_t *frames, size_t depth, uint64_t count)
{
	/*
	 * Identical lines add up when read, so a stack whose count outgrew
	 * what one line may carry (FG_MAX_COUNT) is written as several lines:
	 * the reader's bound holds and nothing is lost.
	 */
	for (;;) {
		uint64_t n = count > FG_MAX_COUNT ? FG_MAX_COUNT : count;
		emit_line(e->sink->out, e->order, frames, depth, n);
		if (e->sink->out->len >= SINK_FLUSH_AT) {
			sink_flush(e->sink);
		}
		count -= n;
		if (!count || e->sink->failed) {
			break;
		}
	}
	/* Stop at the first write error instead of formatting the rest. */
	return e->sink->failed ? 1 : 0;
}

/* True if the two stacks are written as the same text. */
static bool same_text(const struct fg_order *t, const uint32_t *x, size_t nx, const uint32_t *y,
		      size_t ny)
{
	if (nx != ny) {
		return false;
	}
	for (size_t k = 0; k < nx; k++) {
		size_t lx = t->text_off[x[k] + 1] - t->text_off[x[k]];
		size_t ly = t->text_off[y[k] + 1] - t->text_off[y[k]];
		if (lx != ly || memcmp(t->texts.buf + t->text_off[x[k]], t->texts.buf + t->text_off[y[k]], lx)) {
			return false;
		}
	}
	return true;
}

/*
 * Distinct stacks that escape alike ("a\xda" typed as text, "a" then byte 0xda)
 * are one stack once read back, their counts added: write them as one
 * line already, or the round trip changes the text. fg_order puts them
 * next to each other, so holding back one stack is enough.
 */
static int emit_stack(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	struct emit_ctx *e = ctx;
	if (e->frames && same_text(e->order, e->frames, e->depth, frames, depth) &&
	    count <= UINT64_MAX - e->count) {
		e->count += count;
		return 0;
	}
	int rc = e->frames ? emit_counted(e, e->frames, e->depth, e->count) : 0;
	e->frames = frames;
	e->depth = depth;
	e->count = count;
	return rc;
}

static void emit_profile(const struct fg_profile *p, struct sink *s)
{
	for (size_t i = 0; i < p->nmeta; i++) {
		spy_buf_add(s->out, "# ", 2);
		spy_buf_adds(s->out, p->meta[i].key);
		spy_buf_add(s->out, ": ", 2);
		spy_buf_adds(s->out, p->meta[i].value);
		spy_buf_addch(s->out, '\n');
	}
	fg_source_emit(p, s->out);
	struct fg_order o;
	fg_order_init(&o, p);
	struct emit_ctx e = { s, &o, NULL, 0, 0 };
	if (fg_order_foreach_stack(&o, p, emit_stack, &e) == 0 && e.frames) {
		(void)emit_counted(&e, e.frames, e.depth, e.count);
	}
	fg_order_release(&o);
	sink_flush(s);
}

void fg_profile_format_folded(const struct fg_profile *p, struct spy_buf *out)
{
	struct sink s;
	sink_init(&s, SINK_MEM, out);
	emit_profile(p, &s);
}

int fg_profile_write_folded(const struct fg_profile *p, FILE *out, const char *name,
			    struct spy_err *err)
{
	struct sink s;
	sink_init(&s, SINK_FILE, NULL);
	s.f = out;
	emit_profile(p, &s);
	spy_buf_release(&s.own);
	if (!s.failed && fflush(out)) {
		sink_fail_errno(&s, errno);
	}
	if (s.failed) {
		return spy_err_set(err, SPY_EIO, "cannot write %s: %s", name, sink_strerror(&s));
	}
	return 0;
}

int fg_profile_write_folded_gz(const struct fg_profile *p, FILE *out, const char *name,
			       struct spy_err *err)
{
	struct sink s;
	sink_init(&s, SINK_GZ, NULL);
	/* gzclose closes its descriptor: give it a copy of out's, with out's buffer flushed first. */
	int zfd = fflush(out) ? -1 : dup(fileno(out));
	s.gz = zfd >= 0 ? gzdopen(zfd, "wb6") : NULL;
	if (!s.gz) {
		int e = errno;
		if (zfd >= 0) {
			close(zfd);
		}
		return spy_err_set(err, SPY_EIO, "cannot write %s: %s", name,
				   zfd < 0 ? strerror(e) : "zlib: cannot allocate a stream");
	}
	gzbuffer(s.gz, 128 * 1024);
	emit_profile(p, &s);
	int zrc = gzclose(s.gz);
	s.gz = NULL;
	if (zrc != Z_OK && !s.failed) {
		if (zrc == Z_ERRNO) {
			sink_fail_errno(&s, errno);
		} else {
			s.failed = true;
			snprintf(s.zmsg, sizeof(s.zmsg), "zlib: error %d on close", zrc);
		}
	}
	spy_buf_release(&s.own);
	if (s.failed) {
		return spy_err_set(err, SPY_EIO, "cannot write %s: %s", name, sink_strerror(&s));
	}
	return 0;
}

/* ---- reading ------------------------------------------------------------- */

#define RAW_CHUNK (64 * 1024)
#define ZOUT_CHUNK (256 * 1024)
/* zlib counts input in uInt; hand it memory in slices well inside that. */
#define MEM_SLICE ((size_t)1 << 30)

struct reader {
	struct fg_profile *p;
	const char *name;
	struct spy_err *err;
	size_t lineno;

	/* Raw bytes: from memory, or read from fd into raw[]. */
	int fd;
	const unsigned char *mem;
	size_t memlen, mempos;
	unsigned char *raw;
	size_t rawlen, rawpos;
	bool raw_eof;

	/* Inflation, when the input starts with the gzip magic. */
	bool gzip, zinit, zend;
	z_stream zs;
	unsigned char *zout;

	/* The current decoded block and the line being assembled. */
	const unsigned char *blk;
	size_t blklen, blkpos;
	struct spy_buf line;

	uint32_t *ids;
	size_t ids_alloc;
	size_t kept;           /* bytes this read added to the profile, about */
	struct fg_source_ids srcids;  /* this file's "# source-file:" ids */
};

__attribute__((format(printf, 2, 3)))
static int bad(struct reader *r, const char *fmt, ...)
{
	char what[384];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return spy_err_set(r->err, SPY_EFORMAT, "%s:%zu: %s", r->name, r->lineno, what);
}

/* Fill raw[] with at least `want` bytes unless the fd ends first. */
static int fill_raw(struct reader *r, size_t want)
{
	while (!r->raw_eof && r->rawlen < want) {
		ssize_t n = read(r->fd, r->raw + r->rawlen, RAW_CHUNK - r->rawlen);
		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0) {
			return spy_err_set(r->err, SPY_EIO, "cannot read %s: %s", r->name, strerror(errno));
		}
		if (n == 0) {
			r->raw_eof = true;
		}
		r->rawlen += (size_t)n;
	}
	return 0;
}

/* The next run of raw bytes: 1 with *data and *len set, 0 at the end, < 0 on error. */
static int raw_next(struct reader *r, const unsigned char **data, size_t *len)
{
	if (r->fd < 0) {
		if (r->mempos == r->memlen) {
			r->raw_eof = true;
			return 0;
		}
		size_t n = r->memlen - r->mempos;
		n = n < MEM_SLICE ? n : MEM_SLICE;
		*data = r->mem + r->mempos;
		*len = n;
		r->mempos += n;
		r->raw_eof = r->mempos == r->memlen;
		return 1;
	}
	if (r->rawpos == r->rawlen) {
		r->rawpos = r->rawlen = 0;
		int rc = fill_raw(r, 1);
		if (rc < 0) {
			return rc;
		}
		if (!r->rawlen) {
			return 0;
		}
	}
	*data = r->raw + r->rawpos;
	*len = r->rawlen - r->rawpos;
	r->rawpos = r->rawlen;
	return 1;
}

/* The next block of decoded text: 1, 0 at the end, < 0 on error. */
static int src_next(struct reader *r, const unsigned char **data, size_t *len)
{
	if (!r->gzip) {
		return raw_next(r, data, len);
	}
	for (;;) {
		if (!r->zs.avail_in && !r->raw_eof) {
			const unsigned char *in;
			size_t n;
			int rc = raw_next(r, &in, &n);
			if (rc < 0) {
				return rc;
			}
			if (rc > 0) {
				r->zs.next_in = (unsigned char *)in;
				r->zs.avail_in = (uInt)n;
			}
		}
		if (r->zend) {
			if (!r->zs.avail_in) {
				if (r->raw_eof) {
					return 0;
				}
				continue;
			}
			/* More bytes after a member: gzip allows concatenated
			 * members; anything else fails the header check below. */
			inflateReset(&r->zs);
			r->zend = false;
		}
		r->zs.next_out = r->zout;
		r->zs.avail_out = ZOUT_CHUNK;
		int zrc = inflate(&r->zs, Z_NO_FLUSH);
		size_t produced = ZOUT_CHUNK - r->zs.avail_out;
		switch (zrc) {
		case Z_STREAM_END:
			r->zend = true;
			break;
		case Z_OK:
		case Z_BUF_ERROR: /* no progress: more input is needed */
			break;
		case Z_MEM_ERROR:
			return spy_err_set(r->err, SPY_EIO, "cannot read %s: zlib is out of memory", r->name);
		default:
			return bad(r, "corrupt gzip data (%s)", r->zs.msg ? r->zs.msg : "bad stream");
		}
		/* Inflate may hold output back (a long match) with no input left,
		 * so the stream is truncated only once it has nothing more to give. */
		if (!produced && !r->zend && !r->zs.avail_in && r->raw_eof) {
			return bad(r, "truncated gzip data (the file ends inside the compressed stream)");
		}
		if (produced) {
			*data = r->zout;
			*len = produced;
			return 1;
		}
	}
}

/* Assemble the next line into r->line (without its '\n'). *have is false at the end. */
static int next_line(struct reader *r, bool *have)
{
	spy_buf_reset(&r->line);
	r->lineno++;
	for (;;) {
		if (r->blkpos == r->blklen) {
			int rc = src_next(r, &r->blk, &r->blklen);
			r->blkpos = 0;
			if (rc < 0) {
				return rc;
			}
			if (rc == 0) {
				r->blklen = 0;
				*have = r->line.len > 0;
				return 0;
			}
		}
		const unsigned char *s = r->blk + r->blkpos;
		size_t avail = r->blklen - r->blkpos;
		const unsigned char *nl = memchr(s, '\n', avail);
		size_t take = nl ? (size_t)(nl - s) : avail;
		if (r->line.len + take > FG_MAX_LINE) {
			return bad(r, "line longer than %zu bytes", FG_MAX_LINE);
		}
		spy_buf_add(&r->line, s, take);
		r->blkpos += take + (nl ? 1 : 0);
		if (nl) {
			*have = true;
			return 0;
		}
	}
}

static int parse_meta(struct reader *r, const char *s, size_t len)
{
	const char *colon = len > 2 ? memchr(s + 2, ':', len - 2) : NULL;
	if (len < 2 || s[1] != ' ' || !colon || !fg_meta_key_valid(s + 2, (size_t)(colon - s - 2))) {
		return bad(r, "malformed metadata line (expected \"# key: value\")");
	}
	const char *v = colon + 1;
	if (v < s + len && *v == ' ') {
		v++;
	}
	size_t vlen = (size_t)(s + len - v);
	if (vlen > FG_MAX_META_VALUE) {
		return bad(r, "metadata value longer than %d bytes", FG_MAX_META_VALUE);
	}
	char key[FG_MAX_META_KEY + 1];
	memcpy(key, s + 2, (size_t)(colon - s - 2));
	key[colon - s - 2] = '\0';
	const char *why = NULL;
	int src = fg_source_parse(r->p, &r->srcids, key, v, vlen, &why);
	if (src < 0) {
		return bad(r, "%s", why);
	}
	if (src == 0) {
		/* s is r->line, NUL-terminated by spy_buf, so v is a C string. */
		fg_profile_meta_set(r->p, key, v);
	}
	return 0;
}


static uint32_t parse_frame(struct reader *r, const char *t, size_t n)
{
	struct spy_strtab *st = r->p->strtab;
	size_t funclen = n;
	const char *file = NULL;
	size_t filelen = 0;
	uint32_t line = 0;
	uint8_t kind = SPY_FRAME_SYNTHETIC;

	if (n >= 3 && t[n - 1] == ')') {
		/* The last " (" before the closing ')': function names may hold
		 * " (" themselves ("<lambda> (x)"), the trailing part is ours. */
		for (size_t i = n - 2; i-- > 0;) {
			if (t[i] == ' ' && t[i + 1] == '(') {
				funclen = i;
				file = t + i + 2;
				filelen = n - i - 3;
				break;
			}
		}
	}
	if (file) {
		const char *colon = filelen ? memrchr(file, ':', filelen) : NULL;
		if (colon && parse_lineno(colon + 1, (size_t)(file + filelen - colon - 1), &line)) {
			filelen = (size_t)(colon - file);
		}
		/* Drop the line before guessing the kind from it, so that under
		 * -F "f (x:3)" and "f (x)" are one frame, as their text will be. */
		if (r->p->flags & FG_FUNCTION) {
			line = 0;
		}
		/* Python's pseudo-files, "<frozen site>" or "<string>", are
		 * Python too: no library is named like that. */
		if (line || (filelen >= 3 && !memcmp(file + filelen - 3, ".py", 3)) ||
		    (filelen >= 2 && file[0] == '<' && file[filelen - 1] == '>')) {
			kind = SPY_FRAME_PYTHON;
		} else {
			kind = SPY_FRAME_NATIVE;
		}
	}
	const char *func = spy_strtab_intern(st, t, funclen);
	const char *ifile = file ? spy_strtab_intern(st, file, filelen) : NULL;
	size_t before = r->p->nframes;
	uint32_t id = fg_intern_frame(r->p, func, ifile, line, kind);
	if (r->p->nframes > before) {
		/* Its names (at most: they may be shared), the frame, two hash slots. */
		r->kept += funclen + filelen + 2 + sizeof(struct fg_frame) + 2 * sizeof(uint32_t);
	}
	return id;
}

static int parse_stack(struct reader *r, const char *s, size_t len)
{
	const char *sp = memrchr(s, ' ', len);
	if (!sp) {
		return bad(r, "missing sample count (expected \"frame;frame;... COUNT\")");
	}
	const char *c = sp + 1;
	size_t clen = (size_t)(s + len - c);
	if (!clen) {
		return bad(r, "missing sample count after the last space");
	}
	uint64_t count = 0;
	for (size_t i = 0; i < clen; i++) {
		if (c[i] < '0' || c[i] > '9') {
			return bad(r, "bad sample count \"%.*s\" (expected a decimal number)",
				   (int)(clen < 24 ? clen : 24), c);
		}
		if (i >= 13) {
			return bad(r, "sample count \"%.*s...\" is larger than %llu", 16, c,
				   FG_MAX_COUNT);
		}
		count = count * 10 + (uint64_t)(c[i] - '0');
	}
	if (count > FG_MAX_COUNT) {
		return bad(r, "sample count %" PRIu64 " is larger than %llu", count, FG_MAX_COUNT);
	}
	size_t slen = (size_t)(sp - s);
	if (!slen) {
		return bad(r, "empty stack before the sample count");
	}
	size_t depth = 0;
	const char *f = s, *end = s + slen;
	for (;;) {
		const char *semi = memchr(f, ';', (size_t)(end - f));
		const char *fe = semi ? semi : end;
		size_t flen = (size_t)(fe - f);
		if (!flen) {
			return bad(r, "empty frame (frame %zu of the stack)", depth + 1);
		}
		if (flen > FG_MAX_FRAME) {
			return bad(r, "frame %zu is longer than %d bytes", depth + 1, FG_MAX_FRAME);
		}
		if (depth == FG_MAX_DEPTH) {
			return bad(r, "stack deeper than %d frames", FG_MAX_DEPTH);
		}
		SPY_GROW(r->ids, r->ids_alloc, depth + 1);
		r->ids[depth++] = parse_frame(r, f, flen);
		if (!semi) {
			break;
		}
		f = semi + 1;
	}
	if (!count) {
		return 0;
	}
	if (count > FG_MAX_TOTAL - r->p->samples) {
		return bad(r, "more than %llu samples in all", FG_MAX_TOTAL);
	}
	size_t before = r->p->nstacks;
	if (fg_add_path(r->p, r->ids, depth, count) < 0) {
		return spy_err_set(r->err, SPY_EBOUND, "%s:%zu: more distinct stacks than the limit of %zu",
				   r->name, r->lineno, r->p->max_stacks);
	}
	if (r->p->nstacks > before) {
		r->kept += depth * sizeof(uint32_t) + 32;
	}
	if (r->kept > r->p->max_read) {
		return bad(r, "the profile would take more than %zu MiB of memory (the read budget; "
			   "a decompression bomb?)", r->p->max_read >> 20);
	}
	return 0;
}

static int parse_line(struct reader *r)
{
	char *s = r->line.buf;
	size_t len = r->line.len;
	if (len && s[len - 1] == '\r') {
		s[--len] = '\0';
	}
	if (!len) {
		return 0;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f) {
			return bad(r, "control byte 0x%02x at column %zu (binary data, not a folded profile)",
				   c, i + 1);
		}
	}
	if (s[0] == '#') {
		return parse_meta(r, s, len);
	}
	return parse_stack(r, s, len);
}

static int read_all(struct reader *r)
{
	int rc;
	const unsigned char *head;
	size_t headlen;

	if (r->fd >= 0) {
		r->raw = spy_xmalloc(RAW_CHUNK);
		rc = fill_raw(r, 2);
		if (rc < 0) {
			return rc;
		}
		head = r->raw;
		headlen = r->rawlen;
	} else {
		head = r->mem;
		headlen = r->memlen;
		r->raw_eof = r->memlen == 0;
	}
	/* Plain or gzip by the magic bytes (RFC 1952), never by the name. */
	if (headlen >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
		r->gzip = true;
		r->zout = spy_xmalloc(ZOUT_CHUNK);
		if (inflateInit2(&r->zs, 16 + MAX_WBITS) != Z_OK) {
			return spy_err_set(r->err, SPY_EIO, "cannot read %s: zlib cannot start", r->name);
		}
		r->zinit = true;
	}
	for (;;) {
		bool have = false;
		rc = next_line(r, &have);
		if (rc < 0 || !have) {
			return rc;
		}
		rc = parse_line(r);
		if (rc < 0) {
			return rc;
		}
	}
}

static int read_common(struct reader *r)
{
	spy_buf_init(&r->line);
	int rc = read_all(r);
	if (!rc) {
		struct fg_stats st;
		fg_profile_stats(r->p, &st);
		spy_log(SPY_LOG_DEBUG, "read %s: %zu lines%s, %zu stacks, %" PRIu64 " samples",
			r->name, r->lineno - 1, r->gzip ? " (gzip)" : "", st.stacks, st.samples);
	}
	if (r->zinit) {
		inflateEnd(&r->zs);
	}
	free(r->zout);
	free(r->raw);
	free(r->ids);
	free(r->srcids.file);
	spy_buf_release(&r->line);
	return rc;
}

int fg_profile_read_folded(struct fg_profile *p, const void *data, size_t len,
			   const char *name, struct spy_err *err)
{
	struct reader r;
	memset(&r, 0, sizeof(r));
	r.p = p;
	r.name = name;
	r.err = err;
	r.fd = -1;
	r.mem = data;
	r.memlen = len;
	return read_common(&r);
}

int fg_profile_read_folded_fd(struct fg_profile *p, int fd, const char *name,
			      struct spy_err *err)
{
	struct reader r;
	memset(&r, 0, sizeof(r));
	r.p = p;
	r.name = name;
	r.err = err;
	r.fd = fd;
	return read_common(&r);
}

int fg_profile_load_folded(struct fg_profile *p, const char *path, struct spy_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return spy_err_set(err, SPY_EIO, "cannot open %s: %s", path, strerror(errno));
	}
	int rc = fg_profile_read_folded_fd(p, fd, path, err);
	close(fd);
	return rc;
}
