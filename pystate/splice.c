/*
 * The stack splice: a 3.11+ walk that reaches a frame below which nothing
 * changed since the thread's last walk copies the rest of the stack from
 * that walk instead of visiting it frame by frame.
 *
 * A thread's frames lie in its data stack each below the one it called, so
 * the frames of the bottom part of a stack, and everything decoding them
 * reads of it (each frame's bytes, the shims between them), sit in one
 * range of bytes. The thread's record keeps the last walk's bottom run:
 * that range's bytes as decoded, the frames it pushed and their
 * addresses. The next walk compares the range, in the reader's cache,
 * with the record; the unchanged prefix (from the bottom up) says which of
 * the record's frames are still what they were, and the walk stops at the
 * highest of those and copies them and all below. Where the frame memo
 * compares each frame on its own (a lookup, a compare and a push per frame
 * per sample), this is one compare of contiguous bytes and one copy.
 *
 * Only bytes peeked in the reader's cache count (spy_mem_peek, a live
 * process's view), and a record is kept only when every frame of the run
 * came from such peeks and the range can be peeked whole after the walk:
 * then no line of it was fetched again during the walk, and the record's
 * bytes are the ones its frames were decoded from. Code objects are
 * trusted as long as the frame memo trusts them (PYFRAME_MEMO_TTL rounds),
 * then the walk decodes every frame again.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pystate/internal.h"

#define SPLICE_PAGE 4096u

static void rec_clear(struct pysplice_rec *r)
{
	r->tstate = 0;
	r->n = r->nshims = 0;
	r->lo = r->hi = 0;
}

void pysplice_release(struct pyrt *rt)
{
	for (size_t i = 0; i < PYSPLICE_THREADS; i++) {
		struct pysplice_rec *r = &rt->splice[i];
		free(r->snap);
		free(r->addr);
		free(r->fr);
		free(r->shims);
		memset(r, 0, sizeof(*r));
	}
}

/* tstate's record, or NULL when it has none. */
static struct pysplice_rec *rec_of(struct pyrt *rt, spy_addr_t tstate)
{
	for (size_t i = 0; i < PYSPLICE_THREADS; i++) {
		if (rt->splice[i].tstate == tstate) {
			return &rt->splice[i];
		}
	}
	return NULL;
}

/*
 * The bytes [lo + done, ...) the reader's cache holds within one of its
 * lines, *piece of them (at most len - done), or NULL. Valid until the next
 * call on the reader.
 */
static const unsigned char *peek_piece(struct pyrt *rt, spy_addr_t lo, size_t done, size_t len,
				       size_t *piece)
{
	spy_addr_t a = lo + done;
	*piece = SPLICE_PAGE - (size_t)(a % SPLICE_PAGE);
	if (*piece > len - done) {
		*piece = len - done;
	}
	return spy_mem_peek(rt->mem, a, *piece);
}

/*
 * How many bytes from lo on equal snap's (up to the 64-byte block where
 * they first differ), as far as the reader's cache holds them.
 */
static size_t same_prefix(struct pyrt *rt, spy_addr_t lo, size_t len, const unsigned char *snap)
{
	size_t done = 0, piece;
	while (done < len) {
		const unsigned char *p = peek_piece(rt, lo, done, len, &piece);
		if (!p) {
			break;
		}
		if (memcmp(p, snap + done, piece) == 0) {
			done += piece;
			continue;
		}
		size_t b = 0;
		while (b + 64 <= piece && memcmp(p + b, snap + done + b, 64) == 0) {
			b += 64;
		}
		return done + b;
	}
	return done;
}

void pysplice_begin(struct pyrt *rt, spy_addr_t tstate, struct pysplice *s)
{
	memset(s, 0, sizeof(*s));
	s->prev = UINT64_MAX;
	s->oldest = UINT64_MAX;
	s->clean = true;
	if (!rt->keep_frames || !rt->mem->peek || rt->frame_span > PYSPLICE_SHIM_SPAN) {
		s->off = true; /* the run's frames are found in rt->frames; a core has no cache */
		return;
	}
	s->rec = rec_of(rt, tstate);
	s->tstate = tstate;
	struct pysplice_rec *r = s->rec;
	if (r && rt->clock - r->stamp >= PYFRAME_MEMO_TTL) {
		/* Decode every frame again, all at once: with the memo's own
		 * entries, whose ages differ, the record would expire every
		 * few walks. */
		s->refresh = true;
		return;
	}
	if (!r || !r->n) {
		return;
	}
	s->same = same_prefix(rt, r->lo, (size_t)(r->hi - r->lo), r->snap);
	/* The highest frame whose bytes, and all below them, are unchanged. */
	size_t i = 0;
	while (i < r->n && r->addr[i] + rt->frame_span > r->lo + s->same) {
		i++;
	}
	if (i < r->n) {
		s->at = r->addr[i];
		s->at_i = i;
	}
}

static void run_start(struct pyrt *rt, struct pysplice *s, size_t out_n)
{
	s->run_out = out_n;
	s->run_frames = rt->nframes;
	s->run_shims = s->nshims;
	s->run_hi = 0;
	s->oldest = UINT64_MAX;
	s->clean = true;
}

bool pysplice_try(struct pyrt *rt, struct pysplice *s, spy_addr_t f, struct spy_stack *out)
{
	struct pysplice_rec *r = s->rec;
	/* The bound on the stack's frames (those a full walk counts include shims). */
	if (!s->at || f != s->at || out->n + (r->n - s->at_i) > SPY_MAX_PY_DEPTH) {
		return false;
	}
	/* The shims below the splice are outside the bytes compared: each must be as it was. */
	size_t below = 0;
	while (below < r->nshims && r->shims[below].idx <= s->at_i) {
		below++;
	}
	for (size_t j = below; j < r->nshims; j++) {
		const unsigned char *b = spy_mem_peek(rt->mem, r->shims[j].addr, rt->frame_span);
		if (!b || memcmp(b, r->shims[j].bytes, rt->frame_span) != 0) {
			s->at = 0;
			return false;
		}
	}
	if (f >= s->prev) {
		/* Reached by a step up: the run is the record's frames alone. */
		run_start(rt, s, out->n);
		s->run_hi = f;
	}
	/* They are this walk's shims now, counted from its own frames. */
	size_t mine = out->n - s->run_out, nb = r->nshims - below;
	SPY_GROW(rt->splice_shims, rt->splice_shims_alloc, s->nshims + nb);
	for (size_t j = below; j < r->nshims; j++) {
		struct pysplice_shim *sh = &rt->splice_shims[s->nshims++];
		*sh = r->shims[j];
		sh->idx = sh->idx - s->at_i + mine;
		if (sh->anchor) {
			pyrt_note_addr(&rt->anchors, &rt->nanchors, &rt->anchors_alloc, sh->addr);
		}
	}
	if (r->stamp < s->oldest) {
		s->oldest = r->stamp;
	}
	size_t k = r->n - s->at_i;
	spy_stack_append(out, r->fr + s->at_i, k);
	/* What the walk would have noted of them. */
	SPY_GROW(rt->frames, rt->frames_alloc, rt->nframes + k);
	memcpy(rt->frames + rt->nframes, r->addr + s->at_i, k * sizeof(*r->addr));
	rt->nframes += k;
	s->spliced = true;
	rt->splice_hits++;
	return true;
}

void pysplice_visit(struct pyrt *rt, struct pysplice *s, spy_addr_t f, size_t out_n, bool peeked)
{
	if (s->off) {
		return;
	}
	if (f >= s->prev) {
		/* A step up: another chunk of the data stack, where a new run starts. */
		run_start(rt, s, out_n);
	}
	s->prev = f;
	s->clean = s->clean && peeked;
	if (!s->run_hi) {
		s->run_hi = f;
	}
}

void pysplice_shim(struct pyrt *rt, struct pysplice *s, spy_addr_t f, const unsigned char *fb,
		   size_t out_n, bool anchor)
{
	if (s->off) {
		return;
	}
	SPY_GROW(rt->splice_shims, rt->splice_shims_alloc, s->nshims + 1);
	struct pysplice_shim *sh = &rt->splice_shims[s->nshims++];
	sh->addr = f;
	sh->idx = out_n - s->run_out;
	sh->anchor = anchor;
	memcpy(sh->bytes, fb, rt->frame_span);
}

/*
 * tstate's record to fill: its own, an empty one, or the one used longest
 * ago, but only one of those every PYFRAME_MEMO_TTL rounds (NULL: none).
 * Walked in turn, more threads than records would each evict another's
 * and copy their bytes for nothing; so most keep the memo alone, and the
 * threads that hold a record keep splicing.
 */
static struct pysplice_rec *rec_for(struct pyrt *rt, struct pysplice *s)
{
	if (s->rec) {
		return s->rec;
	}
	struct pysplice_rec *pick = &rt->splice[0];
	for (size_t i = 0; i < PYSPLICE_THREADS; i++) {
		struct pysplice_rec *r = &rt->splice[i];
		if (!r->tstate) {
			return r;
		}
		if (r->used < pick->used) {
			pick = r;
		}
	}
	if (rt->splice_evicted && rt->clock - rt->splice_evicted < PYFRAME_MEMO_TTL) {
		return NULL;
	}
	rt->splice_evicted = rt->clock;
	rec_clear(pick);
	return pick;
}

/* Copy [lo + keep, hi) into r->snap from the reader's cache; false if it does not hold it all. */
static bool capture(struct pyrt *rt, struct pysplice_rec *r, spy_addr_t lo, spy_addr_t hi, size_t keep)
{
	size_t len = (size_t)(hi - lo);
	SPY_GROW(r->snap, r->snap_alloc, len);
	size_t piece;
	for (size_t done = keep; done < len;) {
		const unsigned char *p = peek_piece(rt, lo, done, len, &piece);
		if (!p) {
			return false;
		}
		memcpy(r->snap + done, p, piece);
		done += piece;
	}
	return true;
}

void pysplice_end(struct pyrt *rt, struct pysplice *s, const struct spy_stack *out)
{
	if (s->off) {
		return;
	}
	struct pysplice_rec *old = s->rec;
	if (old) {
		old->used = rt->walks;
	}
	/* The run's lowest byte: the last frame visited, or the record's bottom below a splice. */
	spy_addr_t lo = s->spliced ? old->lo : s->prev, hi = s->run_hi + rt->frame_span;
	if (out->truncated || !s->clean || !s->run_hi || lo == UINT64_MAX || hi <= lo ||
	    hi - lo > PYSPLICE_MAX_BYTES) {
		if (old) {
			rec_clear(old);
		}
		return;
	}
	struct pysplice_rec *r = rec_for(rt, s);
	if (!r) {
		return;
	}
	/* Bytes from the bottom that the begin found unchanged are in the snapshot already. */
	size_t keep = r == old && old->lo == lo ? s->same : 0;
	if (keep > (size_t)(hi - lo)) {
		keep = (size_t)(hi - lo);
	}
	size_t n = out->n - s->run_out, nshims = s->nshims - s->run_shims;
	/* rt->frames holds every frame's address unless its bound was hit. */
	if (!n || rt->nframes - s->run_frames != n || !capture(rt, r, lo, hi, keep)) {
		rec_clear(r);
		return;
	}
	SPY_GROW(r->addr, r->addr_alloc, n);
	SPY_GROW(r->fr, r->fr_alloc, n);
	SPY_GROW(r->shims, r->shims_alloc, nshims);
	memcpy(r->addr, rt->frames + s->run_frames, n * sizeof(*r->addr));
	memcpy(r->fr, out->v + s->run_out, n * sizeof(*r->fr));
	if (nshims) {
		memcpy(r->shims, rt->splice_shims + s->run_shims, nshims * sizeof(*r->shims));
	}
	r->stamp = s->oldest < rt->clock ? s->oldest : rt->clock;
	r->n = n;
	r->nshims = nshims;
	r->lo = lo;
	r->hi = hi;
	r->tstate = s->tstate;
	r->used = rt->walks;
}
