/*
 * Walking one thread's Python stack, and finding the GIL holder: one
 * strategy per model (offsets.h), picked once by pyrt_new.
 *
 *   PYFRAME_OBJECT (2.7-3.10): PyFrameObject chain through f_back
 *       (Include/frameobject.h; 3.10 Include/cpython/frameobject.h).
 *   PYFRAME_IFRAME / _EXEC (3.11+): _PyInterpreterFrame chain through
 *       previous (Include/internal/pycore_frame.h), skipping C-stack and
 *       interpreter shims (owner >= FRAME_OWNED_BY_CSTACK in 3.12/3.13,
 *       >= FRAME_OWNED_BY_INTERPRETER from 3.14), frames that have not
 *       started (CPython's _PyFrame_IsIncomplete), and in 3.13+ frames whose
 *       f_executable is not a code object. From 3.14 f_executable is a
 *       tagged _PyStackRef, and a free-threaded build runs each thread's
 *       own copy of the bytecode (co_tlbc->entries[tlbc_index]).
 *
 * Each frame is decoded from one copy of it, made by one read (into a local
 * buffer, or the reader's cache that one fetch filled): under a
 * non-stopping sampler separate reads could straddle two different frames.
 * A frame whose copy equals the one it was last decoded from is not decoded
 * again (the frame memo, internal.h): a steady-state sample of a deep stack
 * reads no code object for most of its frames. A walk that meets
 * unreadable memory, a bad pointer, a cycle or the depth bound keeps the
 * frames it has, marks the stack (and its last frame) truncated, and
 * returns 0: a partial stack is a normal sample.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/util.h"
#include "pystate/internal.h"

_Static_assert(PYRT_SEEN_MAX > SPY_MAX_PY_DEPTH && PYRT_SEEN_MAX > SPY_MAX_THREADS,
	       "a walk can add more addresses than pyrt_seen keeps");

void pyrt_seen_reset(struct pyrt *rt)
{
	memset(rt->seen_filter, 0, sizeof(rt->seen_filter));
	if (rt->seen_map) {
		/* Clearing costs the table's size, which the deepest walk so
		 * far set; deleting what this walk added costs what adding it
		 * did. The cheaper of the two. */
		if (spy_hmap_bytes(&rt->seen) <= 64 * rt->seen_n) {
			spy_hmap_clear(&rt->seen);
		} else {
			for (size_t i = 0; i < rt->seen_indexed; i++) {
				spy_hmap_del(&rt->seen, rt->seen_log[i]);
			}
		}
		rt->seen_map = false;
	}
	rt->seen_n = 0;
	rt->seen_indexed = 0;
}

static uint64_t seen_hash(spy_addr_t addr)
{
	_Static_assert(PYRT_SEEN_BITS == 1u << 12, "the hash below keeps 12 bits");
	return (addr * 0x9e3779b97f4a7c15ull) >> 52;
}

/* Index what pyrt_seen_note logged: the filter, or past PYRT_SEEN_SCAN the map. */
static void seen_index(struct pyrt *rt)
{
	for (; rt->seen_indexed < rt->seen_n; rt->seen_indexed++) {
		size_t i = rt->seen_indexed;
		if (!rt->seen_map && i >= PYRT_SEEN_SCAN) {
			for (size_t j = 0; j < i; j++) {
				spy_hmap_put(&rt->seen, rt->seen_log[j], 0);
			}
			rt->seen_map = true;
		}
		if (rt->seen_map) {
			spy_hmap_put(&rt->seen, rt->seen_log[i], 0);
		} else {
			uint64_t h = seen_hash(rt->seen_log[i]);
			rt->seen_filter[h >> 6] |= 1ull << (h & 63);
		}
	}
}

/*
 * Called for every frame of a walk that is not known new: a deep stack's
 * walk spent more in a hash map here than in decoding its frames. Most
 * walks are shorter than PYRT_SEEN_SCAN, where a bit per address
 * (Fibonacci hashing) answers "new" at once and only a collision, one in
 * 16 at worst, scans the log.
 */
bool pyrt_seen(struct pyrt *rt, spy_addr_t addr)
{
	if (rt->seen_n == PYRT_SEEN_MAX) {
		return true; /* cannot happen under the callers' caps; treat as a loop */
	}
	seen_index(rt);
	if (rt->seen_map) {
		/* Asks and adds in one probe. */
		if (!spy_hmap_put(&rt->seen, addr, 0)) {
			return true;
		}
		rt->seen_log[rt->seen_n++] = addr;
		rt->seen_indexed = rt->seen_n;
		return false;
	}
	uint64_t h = seen_hash(addr);
	if (rt->seen_filter[h >> 6] & (1ull << (h & 63))) {
		for (size_t i = 0; i < rt->seen_n; i++) {
			if (rt->seen_log[i] == addr) {
				return true;
			}
		}
	}
	rt->seen_log[rt->seen_n++] = addr;
	seen_index(rt);
	return false;
}

static void truncate_stack(struct spy_stack *out)
{
	out->truncated = 1;
	if (out->n) {
		out->v[out->n - 1].flags |= SPY_FRAME_TRUNCATED;
	}
}

/* Grown as deep as the stacks go (SPY_MAX_PY_DEPTH at most), not to the bound at once: an agent holds many processes. */
void pyrt_note_addr(spy_addr_t **v, size_t *n, size_t *alloc, spy_addr_t a)
{
	if (*n < SPY_MAX_PY_DEPTH) {
		SPY_GROW(*v, *alloc, *n + 1);
		(*v)[(*n)++] = a;
	}
}

/* Also remembers the frame's address, for pyrt_frame_locals(). */
static struct spy_frame *push(struct pyrt *rt, spy_addr_t frame, struct spy_stack *out,
			      const struct pycode *c, uint32_t line, uint8_t flags)
{
	if (rt->keep_frames) {
		pyrt_note_addr(&rt->frames, &rt->nframes, &rt->frames_alloc, frame);
	}
	struct spy_frame *f = spy_stack_push(out);
	f->func = c->func;
	f->file = c->file;
	f->line = line;
	f->kind = SPY_FRAME_PYTHON;
	f->flags = flags;
	f->addr = c->addr;
	return f;
}

/*
 * One memo entry: the frame's address (0: empty), what its decode gave and
 * when, then the frame_span bytes it was decoded from.
 */
struct pyframe_memo {
	spy_addr_t addr;
	uint64_t stamp;           /* rt->clock when decoded with its code object read */
	struct spy_frame fr;      /* what it pushed (strings interned) */
	bool skip;                /* not a frame of its own (not code, not started) */
};

static size_t memo_bytes(size_t stride)
{
	return (size_t)PYFRAME_MEMO_WAYS * PYFRAME_MEMO_SETS * stride;
}

void pyframe_memo_release(struct pyrt *rt)
{
	if (rt->memo) {
		munmap(rt->memo, memo_bytes(rt->memo_stride));
	}
	rt->memo = NULL;
	rt->memo_stride = 0;
}

/*
 * Frame f's entry, or the one to replace with it (an empty one, else the
 * one decoded longest ago); NULL when this walk keeps no memo.
 */
static struct pyframe_memo *memo_slot(struct pyrt *rt, spy_addr_t f)
{
	if (!rt->memo) {
		if (!rt->frame_span || rt->frame_span > PYRT_MAX_SPAN ||
		    rt->off.iframe_tlbc_index != PYOFF_NONE) {
			/* Free-threaded: the line also depends on co_tlbc's entries. */
			return NULL;
		}
		/*
		 * Mapped, not allocated: a walk fills the few entries its
		 * frames' addresses pick, and only their pages cost memory,
		 * where calloc from a reused heap would clear (touch) all of
		 * it, a megabyte a process held.
		 */
		size_t stride = (sizeof(struct pyframe_memo) + rt->frame_span + 7) & ~(size_t)7;
		void *m = mmap(NULL, memo_bytes(stride), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (m == MAP_FAILED) {
			return NULL;
		}
		rt->memo = m;
		rt->memo_stride = stride;
	}
	/*
	 * The set by address, not hashed: a thread's frames lie next to each
	 * other, at least 64 bytes apart, so they take neighbouring sets
	 * without colliding, and a walk after a sleep touches a few contiguous
	 * pages of the memo rather than a cache miss per frame. Ways, because
	 * threads' frame chunks are mapped alike: two at the same offset
	 * modulo the sets' span are common (4 threads: most runs), and with
	 * one way each thread's walk evicted the other's frames. Each way is
	 * an array of its own, so a process whose frames never collide
	 * touches only the first. And the 64 KiB block the frame lies in
	 * moves the sets by a hash of its number: a pool's threads all have
	 * their frames at the same offsets, and a set's ways were shared by
	 * 150 of them (no hit at all); nearby frames still take nearby sets.
	 */
	size_t block = (size_t)(((f >> 16) * 0x9E3779B97F4A7C15ull) >> 54);
	size_t set = ((size_t)(f >> 6) + block) & (PYFRAME_MEMO_SETS - 1);
	struct pyframe_memo *pick = NULL;
	for (size_t w = 0; w < PYFRAME_MEMO_WAYS; w++) {
		struct pyframe_memo *m = (struct pyframe_memo *)(rt->memo +
			(w * PYFRAME_MEMO_SETS + set) * rt->memo_stride);
		if (m->addr == f) {
			return m;
		}
		if (!pick || (pick->addr && (!m->addr || m->stamp < pick->stamp))) {
			pick = m;
		}
	}
	return pick;
}

/*
 * memcmp(a, b, n) == 0 for n >= 8 (a span is a field's offset plus 8),
 * inline: it runs for every frame of every sample, on a few dozen bytes,
 * where the call cost as much as the compare. Whole words, the last one
 * overlapping the one before.
 */
static bool same_bytes(const unsigned char *a, const unsigned char *b, size_t n)
{
	uint64_t x, y, diff = 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		diff |= x ^ y;
	}
	if (i < n) {
		memcpy(&x, a + n - 8, 8);
		memcpy(&y, b + n - 8, 8);
		diff |= x ^ y;
	}
	return diff == 0;
}

void pyrt_round(struct pyrt *rt, spy_addr_t tstate)
{
	_Static_assert((PYRT_ROUND_SLOTS & (PYRT_ROUND_SLOTS - 1)) == 0 && PYRT_ROUND_SLOTS <= 1024,
		       "a power of two, indexed by the hash's top 10 bits at most");
	rt->walks++;
	uint64_t mixed = tstate * 0x9E3779B97F4A7C15ull;
	uint32_t key = (uint32_t)(mixed >> 32), clock = (uint32_t)rt->clock;
	size_t home = (size_t)(mixed >> 54) & (PYRT_ROUND_SLOTS - 1), i = home;
	for (size_t probe = 0; rt->clock && probe < PYRT_ROUND_SLOTS; probe++) {
		struct pyrt_round_slot *s = &rt->round[i];
		if (s->clock != clock) {
			if (rt->round_n >= PYRT_ROUND_SLOTS / 2) {
				break;
			}
			s->tstate = key;
			s->clock = clock;
			rt->round_n++;
			return;
		}
		if (s->tstate == key) {
			break; /* walked already this round */
		}
		i = (i + 1) & (PYRT_ROUND_SLOTS - 1);
	}
	/* A new round, this thread its first: every slot is now another round's. */
	rt->clock++;
	rt->round[home].tstate = key;
	rt->round[home].clock = (uint32_t)rt->clock;
	rt->round_n = 1;
}

/* Still the frame memoized, byte for byte, and young enough to trust? */
static bool memo_hit(struct pyrt *rt, const struct pyframe_memo *m, spy_addr_t f,
		     const unsigned char *fbuf)
{
	if (!m || m->addr != f || rt->clock - m->stamp >= PYFRAME_MEMO_TTL ||
	    !same_bytes((const unsigned char *)(m + 1), fbuf, rt->frame_span)) {
		rt->memo_misses++;
		return false;
	}
	rt->memo_hits++;
	return true;
}

static void memo_store_at(struct pyrt *rt, struct pyframe_memo *m, spy_addr_t f,
			  const unsigned char *fbuf, const struct spy_frame *fr, uint64_t stamp)
{
	if (!m) {
		return;
	}
	m->addr = f;
	m->stamp = stamp;
	m->skip = fr == NULL;
	if (fr) {
		m->fr = *fr;
	}
	memcpy(m + 1, fbuf, rt->frame_span);
}

static void memo_store(struct pyrt *rt, struct pyframe_memo *m, spy_addr_t f,
		       const unsigned char *fbuf, const struct spy_frame *fr)
{
	memo_store_at(rt, m, f, fbuf, fr, rt->clock);
}

static void push_memo(struct pyrt *rt, spy_addr_t frame, struct spy_stack *out,
		      const struct pyframe_memo *m)
{
	if (rt->keep_frames) {
		pyrt_note_addr(&rt->frames, &rt->nframes, &rt->frames_alloc, frame);
	}
	spy_stack_append(out, &m->fr, 1);
}

/*
 * Read and decode the code object at addr (one read of its fixed part).
 * Returns 1 when addr is a readable object that is not a code object (3.13+
 * frames may run other executables), 0 with *c set, or a negative error.
 */
static int get_code(struct pyrt *rt, spy_addr_t addr, unsigned char *hdr, struct pycode **c)
{
	if (!spy_mem_plausible(rt->mem, addr, 8)) {
		return -SPY_ECORRUPT;
	}
	if (spy_mem_read(rt->mem, addr, hdr, rt->code_span) < 0) {
		return -SPY_EMEM;
	}
	if (!pyrt_is_type(rt, &rt->code_type, pyrt_u64(hdr, rt->off.ob_type), "code")) {
		return 1;
	}
	return pycode_get(rt, addr, hdr, c);
}

/*
 * The code object of frame f, taken on the memo's word without reading it:
 * the memo holds f, decoded from the same code object (the pointer at
 * code_off, and on 3.11+ the same owner) within PYFRAME_MEMO_TTL rounds,
 * and only other bytes of the frame moved (its instruction, as in the
 * frame a thread runs). A frame keeps its code object alive, and a full
 * memo hit trusts the same entry for as long, so this trusts nothing more;
 * the entry keeps its stamp, and the code is read again when it expires.
 * Spares a running frame's code object one read a sample, and its page
 * the prefetch. Not on a free-threaded build (its frames pick a copy of
 * the bytecode per thread).
 */
static struct pycode *memo_code(struct pyrt *rt, const struct pyframe_memo *m, spy_addr_t f,
				const unsigned char *fb, size_t code_off, spy_addr_t code)
{
	const struct pyoffsets *o = &rt->off;
	if (!m || m->addr != f || m->skip || rt->clock - m->stamp >= PYFRAME_MEMO_TTL ||
	    o->iframe_tlbc_index != PYOFF_NONE) {
		return NULL;
	}
	const unsigned char *mb = (const unsigned char *)(m + 1);
	if (pyrt_u64(mb, code_off) != pyrt_u64(fb, code_off) ||
	    (o->frame_model != PYFRAME_OBJECT && mb[o->iframe_owner] != fb[o->iframe_owner])) {
		return NULL;
	}
	return pycode_cached(rt, code);
}

int pyrt_walk_frameobj(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char fbuf[PYRT_MAX_SPAN], cbuf[PYRT_MAX_SPAN];
	spy_addr_t f;

	if (spy_mem_read_addr(rt->mem, t->tstate + o->tstate_frame, &f) < 0) {
		return -SPY_EMEM;
	}
	pyrt_seen_reset(rt);
	pyrt_round(rt, t->tstate);
	for (size_t depth = 0; f; depth++) {
		if (depth >= SPY_MAX_PY_DEPTH || pyrt_seen(rt, f)) {
			truncate_stack(out);
			return 0;
		}
		struct pyframe_memo *m = memo_slot(rt, f);
		/* A memoized address was plausible; the read itself still checks. */
		if ((!(m && m->addr == f) && !spy_mem_plausible(rt->mem, f, 8)) ||
		    spy_mem_read(rt->mem, f, fbuf, rt->frame_span) < 0) {
			truncate_stack(out);
			return 0;
		}
		if (memo_hit(rt, m, f, fbuf)) {
			push_memo(rt, f, out, m);
			f = pyrt_u64(fbuf, o->frame_back);
			continue;
		}
		spy_addr_t code = pyrt_u64(fbuf, o->frame_code);
		struct pycode *c = memo_code(rt, m, f, fbuf, o->frame_code, code);
		uint64_t stamp = c ? m->stamp : rt->clock;
		if (!c && get_code(rt, code, cbuf, &c) != 0) {
			truncate_stack(out);
			return 0;
		}
		int64_t lasti = (int32_t)pyrt_u32(fbuf, o->frame_lasti);
		int64_t addr = o->instr_model == PYINSTR_LASTI_UNITS ? 2 * lasti : lasti;
		/* Before 3.11 every Python call is its own C-level eval call. */
		memo_store_at(rt, m, f, fbuf,
			      push(rt, f, out, c, pycode_line(rt, c, addr), SPY_FRAME_PY_ENTRY), stamp);
		f = pyrt_u64(fbuf, o->frame_back);
	}
	return 0;
}

static int top_iframe(struct pyrt *rt, spy_addr_t tstate, spy_addr_t *f)
{
	const struct pyoffsets *o = &rt->off;
	if (o->tstate_current_frame != PYOFF_NONE) {
		return spy_mem_read_addr(rt->mem, tstate + o->tstate_current_frame, f);
	}
	/* 3.11/3.12: tstate->cframe lives on the thread's C stack. */
	spy_addr_t cf;
	if (spy_mem_read_addr(rt->mem, tstate + o->tstate_cframe, &cf) < 0) {
		return -SPY_EMEM;
	}
	if (!cf) {
		*f = 0;
		return 0;
	}
	if (!spy_mem_plausible(rt->mem, cf, 8)) {
		return -SPY_ECORRUPT;
	}
	return spy_mem_read_addr(rt->mem, cf + o->cframe_current_frame, f);
}

/*
 * Free-threaded builds: where the thread's copy of the bytecode starts,
 * co_tlbc->entries[index] (Include/internal/pycore_code.h _PyCodeArray).
 * Index 0 is co_code_adaptive itself, which *start already holds.
 */
static int tlbc_start(struct pyrt *rt, spy_addr_t arr, int32_t index, spy_addr_t *start)
{
	const struct pyoffsets *o = &rt->off;
	int64_t size;
	spy_addr_t entry;
	if (index == 0) {
		return 0;
	}
	if (index < 0 || !spy_mem_plausible(rt->mem, arr, 8) ||
	    spy_mem_read(rt->mem, arr + o->codearray_size, &size, sizeof(size)) < 0 || index >= size ||
	    spy_mem_read_addr(rt->mem, arr + o->codearray_entries + 8 * (uint64_t)index, &entry) < 0 ||
	    !entry) {
		return -SPY_ECORRUPT;
	}
	*start = entry;
	return 0;
}

/*
 * 3.11+ frames of one thread sit next to each other in its data stack, each
 * below the one it called: one copy of the bytes of a frame's page up to
 * its end holds the frames the walk meets next. Each frame is still decoded
 * from a single copy. A frame crossing a page, or a window that cannot be
 * read, is read on its own.
 */
#define FRAME_PAGE 4096u

struct frame_win {
	spy_addr_t lo, hi;                 /* [lo, hi) is at p; lo == hi: empty */
	const unsigned char *p;            /* buf, or the reader's cache (peeked) */
	bool peeked;                       /* p is valid until the next read only */
	bool cached;                       /* the last frame came from the reader's cache */
	unsigned char buf[FRAME_PAGE];
};

/*
 * frame_span bytes of frame f, NULL if unreadable: from the window of f's
 * page up to f's end. In the reader's cache when it has them (no copy, no
 * lookup per frame), else read into w. From the page's start, so that
 * every sample uses the same part of the reader's line: its next fetch
 * brings all of it, and the window is in the cache again. A frame crossing
 * a page is put together from its two pieces.
 */
static const unsigned char *read_frame(struct pyrt *rt, struct frame_win *w, spy_addr_t f,
				       unsigned char *fbuf)
{
	size_t span = rt->frame_span;
	if (f >= w->lo && f < w->hi && w->hi - f >= span) {
		w->cached = w->peeked;
		return w->p + (f - w->lo);
	}
	w->cached = false;
	if (f <= UINT64_MAX - span) {
		spy_addr_t end = f + span, page = f & ~(spy_addr_t)(FRAME_PAGE - 1);
		spy_addr_t last = (end - 1) & ~(spy_addr_t)(FRAME_PAGE - 1);
		if (last == page) {
			const unsigned char *held = spy_mem_peek(rt->mem, page, (size_t)(end - page));
			w->peeked = held != NULL;
			if (held || spy_mem_read(rt->mem, page, w->buf, (size_t)(end - page)) == 0) {
				w->lo = page;
				w->hi = end;
				w->p = held ? held : w->buf;
				w->cached = w->peeked;
				return w->p + (f - page);
			}
		} else {
			size_t head = (size_t)(last - f);
			const unsigned char *a = spy_mem_peek(rt->mem, f, head);
			if (a) {
				/* A peek lasts until the next call: copy before the second. */
				memcpy(fbuf, a, head);
				const unsigned char *b = spy_mem_peek(rt->mem, last, span - head);
				if (b) {
					memcpy(fbuf + head, b, span - head);
					w->cached = true;
					return fbuf;
				}
			}
		}
	}
	/* A read may refill the cache line a peeked window lies in. */
	w->lo = w->hi = 0;
	w->peeked = false;
	return spy_mem_read(rt->mem, f, fbuf, span) == 0 ? fbuf : NULL;
}

/*
 * pyrt_seen for frame f. A thread's frames lie each below the one it
 * called, until the stack moves to another chunk: a frame below every one
 * met so far (*lowest, UINT64_MAX at first) is new, and only a walk that
 * stepped up once can loop. Until then the set only logs.
 */
static bool seen_frame(struct pyrt *rt, spy_addr_t *lowest, spy_addr_t f)
{
	if (f < *lowest) {
		*lowest = f;
		pyrt_seen_note(rt, f);
		return false;
	}
	*lowest = 0; /* every frame from here on is asked */
	return pyrt_seen(rt, f);
}

/*
 * Decode frame f from its bytes fb, the memo having missed: push it, or
 * nothing when it is no frame of its own. With trust, a code object the
 * memo vouches for is not read (memo_code). 0, or -1 where the stack is cut.
 */
static int decode_iframe(struct pyrt *rt, struct pyframe_memo *m, spy_addr_t f,
			 const unsigned char *fb, bool trust, struct spy_stack *out)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char cbuf[PYRT_MAX_SPAN];
	spy_addr_t code = pyrt_ref(o, pyrt_u64(fb, o->iframe_code));
	if (!code) {
		/* No frame of a thread's own has no code (shims hold None):
		 * this is memory that is not a frame, e.g. a C stack a core
		 * left out (gdb 13's gcore writes zeros for a stack with a
		 * guard region). Say the stack is cut, rather than end it. */
		return -1;
	}
	/* _PyInterpreterFrame_LASTI: code units from the first instruction. */
	spy_addr_t start = code + o->code_adaptive;
	struct pycode *c = trust ? memo_code(rt, m, f, fb, o->iframe_code, code) : NULL;
	uint64_t stamp = c ? m->stamp : rt->clock;
	if (!c) {
		int rc = get_code(rt, code, cbuf, &c);
		if (rc == 1 && o->frame_model == PYFRAME_IFRAME_EXEC) {
			memo_store(rt, m, f, fb, NULL);
			return 0; /* 3.13+: f_executable may be None or a non-code object */
		}
		if (rc != 0) {
			return -1;
		}
		if (o->iframe_tlbc_index != PYOFF_NONE &&
		    tlbc_start(rt, pyrt_u64(cbuf, o->code_tlbc), (int32_t)pyrt_u32(fb, o->iframe_tlbc_index),
			       &start) < 0) {
			return -1;
		}
	}
	spy_addr_t instr = pyrt_u64(fb, o->iframe_instr);
	int64_t idx = (int64_t)(instr - start) / 2;
	if (fb[o->iframe_owner] != o->owner_generator && o->code_firsttraceable != PYOFF_NONE &&
	    idx < c->firsttraceable) {
		memo_store(rt, m, f, fb, NULL);
		return 0; /* _PyFrame_IsIncomplete: RESUME has not run yet */
	}
	/* ob_size of a 3.11+ code object counts its code units. */
	uint32_t line = (idx < -1 || idx > c->nunits) ? 0 : pycode_line(rt, c, 2 * idx);
	uint8_t flags = 0;
	if (o->iframe_is_entry != PYOFF_NONE && fb[o->iframe_is_entry]) {
		flags |= SPY_FRAME_PY_ENTRY;
	}
	memo_store_at(rt, m, f, fb, push(rt, f, out, c, line, flags), stamp);
	return 0;
}

int pyrt_walk_iframe(struct pyrt *rt, const struct py_thread *t, struct spy_stack *out)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char fbuf[PYRT_MAX_SPAN];
	struct frame_win win; /* buf is filled before it is read: not cleared per walk */
	win.lo = win.hi = 0;
	win.p = NULL;
	win.peeked = win.cached = false;
	spy_addr_t f;

	if (top_iframe(rt, t->tstate, &f) < 0) {
		return -SPY_EMEM;
	}
	pyrt_seen_reset(rt);
	pyrt_round(rt, t->tstate);
	struct pysplice sp;
	pysplice_begin(rt, t->tstate, &sp);
	spy_addr_t lowest = UINT64_MAX; /* see seen_frame */
	for (size_t depth = 0; f; depth++) {
		if (depth >= SPY_MAX_PY_DEPTH || seen_frame(rt, &lowest, f)) {
			truncate_stack(out);
			break;
		}
		if (pysplice_try(rt, &sp, f, out)) {
			break;
		}
		struct pyframe_memo *m = memo_slot(rt, f);
		/* A memoized address was plausible; the read itself still checks. */
		const unsigned char *fb;
		if ((!(m && m->addr == f) && !spy_mem_plausible(rt->mem, f, 8)) ||
		    !(fb = read_frame(rt, &win, f, fbuf))) {
			truncate_stack(out);
			break;
		}
		spy_addr_t prev = pyrt_u64(fb, o->iframe_previous);
		if (fb[o->iframe_owner] >= o->owner_shim) {
			/*
			 * The frame above the shim is the first of its eval-loop
			 * call, and the shim itself is that call's local: where it
			 * lies on the C stack tells which native frame ran the
			 * group. A shim with no frame of its own above it (a call
			 * that has not pushed one yet, or the thread's base frame)
			 * ends no group.
			 */
			bool anchor = out->n && !(out->v[out->n - 1].flags & SPY_FRAME_PY_ENTRY);
			if (anchor) {
				out->v[out->n - 1].flags |= SPY_FRAME_PY_ENTRY;
				if (rt->keep_frames) {
					pyrt_note_addr(&rt->anchors, &rt->nanchors, &rt->anchors_alloc, f);
				}
			}
			pysplice_shim(rt, &sp, f, fb, out->n, anchor);
			f = prev;
			continue;
		}
		pysplice_visit(rt, &sp, f, out->n, win.cached);
		if (!sp.refresh && memo_hit(rt, m, f, fb)) {
			if (!m->skip) {
				push_memo(rt, f, out, m);
			}
		} else {
			if (win.peeked) {
				/* What follows reads more, which the reader's cache may
				 * not outlive: keep this frame, drop the window. */
				if (fb != fbuf) {
					memcpy(fbuf, fb, rt->frame_span);
					fb = fbuf;
				}
				win.lo = win.hi = 0;
				win.peeked = false;
			}
			if (decode_iframe(rt, m, f, fb, !sp.refresh, out) < 0) {
				truncate_stack(out);
				break;
			}
		}
		if (m && m->addr == f && m->stamp < sp.oldest) {
			/* The record is trusted no longer than the entries it took (a hit, a code object). */
			sp.oldest = m->stamp;
		}
		f = prev;
	}
	pysplice_end(rt, &sp, out);
	return 0;
}

int pyrt_iframe_decode(struct pyrt *rt, spy_addr_t frame, struct spy_frame *out)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char fbuf[PYRT_MAX_SPAN], cbuf[PYRT_MAX_SPAN];
	struct pycode *c;
	if (o->iframe_code == PYOFF_NONE || !spy_mem_plausible(rt->mem, frame, 8) ||
	    spy_mem_read(rt->mem, frame, fbuf, rt->frame_span) < 0) {
		return -SPY_EMEM;
	}
	spy_addr_t code = pyrt_ref(o, pyrt_u64(fbuf, o->iframe_code));
	if (!code || get_code(rt, code, cbuf, &c) != 0) {
		return -SPY_ECORRUPT;
	}
	spy_addr_t start = code + o->code_adaptive;
	if (o->iframe_tlbc_index != PYOFF_NONE &&
	    tlbc_start(rt, pyrt_u64(cbuf, o->code_tlbc), (int32_t)pyrt_u32(fbuf, o->iframe_tlbc_index),
		       &start) < 0) {
		return -SPY_ECORRUPT;
	}
	int64_t idx = (int64_t)(pyrt_u64(fbuf, o->iframe_instr) - start) / 2;
	int64_t nunits = (int64_t)pyrt_u64(cbuf, o->ob_size);
	*out = (struct spy_frame){ .func = c->func, .file = c->file, .kind = SPY_FRAME_PYTHON,
				   .addr = c->addr };
	out->line = (idx < -1 || idx > nunits) ? 0 : pycode_line(rt, c, 2 * idx);
	return 0;
}

int pyrt_frameobj_decode(struct pyrt *rt, spy_addr_t frame, struct spy_frame *out)
{
	const struct pyoffsets *o = &rt->off;
	unsigned char fbuf[PYRT_MAX_SPAN], cbuf[PYRT_MAX_SPAN];
	struct pycode *c;
	if (o->frame_code == PYOFF_NONE || !spy_mem_plausible(rt->mem, frame, 8) ||
	    spy_mem_read(rt->mem, frame, fbuf, rt->frame_span) < 0) {
		return -SPY_EMEM;
	}
	if (get_code(rt, pyrt_u64(fbuf, o->frame_code), cbuf, &c) != 0) {
		return -SPY_ECORRUPT;
	}
	int64_t lasti = (int32_t)pyrt_u32(fbuf, o->frame_lasti);
	*out = (struct spy_frame){ .func = c->func, .file = c->file, .kind = SPY_FRAME_PYTHON,
				   .addr = c->addr };
	out->line = pycode_line(rt, c, o->instr_model == PYINSTR_LASTI_UNITS ? 2 * lasti : lasti);
	return 0;
}

/* 2.7/3.6: the exported _PyThreadState_Current variable is the holder. */
spy_addr_t pyrt_gil_tstate_current(struct pyrt *rt, spy_addr_t interp)
{
	spy_addr_t t = 0;
	if (!rt->tstate_current || spy_mem_read_addr(rt->mem, rt->tstate_current, &t) < 0) {
		return 0;
	}
	return t;
}

/* 3.7-3.11: _PyRuntime.gilstate.tstate_current, NULL while nobody holds it. */
spy_addr_t pyrt_gil_runtime(struct pyrt *rt, spy_addr_t interp)
{
	spy_addr_t t = 0;
	if (spy_mem_read_addr(rt->mem, rt->runtime + rt->off.rt_gilstate_tstate_current, &t) < 0) {
		return 0;
	}
	return t;
}

/* A free-threaded build's GIL is off unless something switched it on. */
static bool gil_enabled(struct pyrt *rt, spy_addr_t g)
{
	int32_t enabled;
	return rt->off.gil_enabled == PYOFF_NONE ||
	       (spy_mem_read(rt->mem, g + rt->off.gil_enabled, &enabled, sizeof(enabled)) == 0 &&
		enabled != 0);
}

bool pyrt_has_gil(struct pyrt *rt)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t interp = pyrt_first_interp(rt), g;
	if (o->gil_enabled == PYOFF_NONE) {
		return true;
	}
	return interp && spy_mem_read_addr(rt->mem, interp + o->interp_ceval_gil, &g) == 0 &&
	       spy_mem_plausible(rt->mem, g, 8) && gil_enabled(rt, g);
}

int pyrt_gc_collecting(struct pyrt *rt, spy_addr_t interp)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t at = o->interp_gc_collecting != PYOFF_NONE ? interp + o->interp_gc_collecting :
			o->rt_gc_collecting != PYOFF_NONE && rt->runtime ? rt->runtime + o->rt_gc_collecting :
									  0;
	int32_t c;
	if (!at || spy_mem_read(rt->mem, at, &c, sizeof(c)) < 0) {
		return -1;
	}
	return c != 0;
}

bool pyrt_free_threaded(const struct pyrt *rt)
{
	return (rt->off.build & PYBUILD_FT) != 0;
}

/*
 * 3.12+: interp->ceval.gil -> _gil_runtime_state. last_holder keeps its
 * value after a release; only locked says whether it is held now.
 */
spy_addr_t pyrt_gil_interp(struct pyrt *rt, spy_addr_t interp)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t g, holder;
	int32_t locked;
	if (spy_mem_read_addr(rt->mem, interp + o->interp_ceval_gil, &g) < 0 ||
	    !spy_mem_plausible(rt->mem, g, 8) || !gil_enabled(rt, g) ||
	    spy_mem_read(rt->mem, g + o->gil_locked, &locked, sizeof(locked)) < 0 || locked != 1 ||
	    spy_mem_read_addr(rt->mem, g + o->gil_last_holder, &holder) < 0) {
		return 0;
	}
	return holder;
}

int pyrt_gil_switches(struct pyrt *rt, spy_addr_t interp, uint64_t *count, spy_addr_t *last_holder)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t g, switches, last;
	if (o->build & PYBUILD_FT) {
		return -1;
	}
	if (o->gil_model == PYGIL_RUNTIME && o->rt_gil_switch_number != PYOFF_NONE &&
	    o->rt_gil_last_holder != PYOFF_NONE && rt->runtime) {
		switches = rt->runtime + o->rt_gil_switch_number;
		last = rt->runtime + o->rt_gil_last_holder;
	} else if (o->gil_model == PYGIL_INTERP && o->gil_switch_number != PYOFF_NONE &&
		   o->gil_last_holder != PYOFF_NONE &&
		   spy_mem_read_addr(rt->mem, interp + o->interp_ceval_gil, &g) == 0 &&
		   spy_mem_plausible(rt->mem, g, 8)) {
		switches = g + o->gil_switch_number;
		last = g + o->gil_last_holder;
	} else {
		return -1;
	}
	/* The count first: a holder read after it is at least as new. */
	if (spy_mem_read(rt->mem, switches, count, sizeof(*count)) < 0 ||
	    spy_mem_read_addr(rt->mem, last, last_holder) < 0) {
		return -1;
	}
	return 0;
}

size_t pyrt_gil_ranges(struct pyrt *rt, spy_addr_t interp, struct pyrt_range *out, size_t max)
{
	const struct pyoffsets *o = &rt->off;
	spy_addr_t g = 0;
	size_t n = 0;
	if (o->rt_ceval_gil != PYOFF_NONE && rt->runtime) {
		g = rt->runtime + o->rt_ceval_gil;
	} else if (o->interp_ceval_gil != PYOFF_NONE &&
		   spy_mem_read_addr(rt->mem, interp + o->interp_ceval_gil, &g) < 0) {
		g = 0;
	}
	if (g && o->gil_size != PYOFF_NONE && n < max) {
		out[n++] = (struct pyrt_range){ g, g + o->gil_size };
	}
	for (size_t i = 0; i < SPY_ARRAY_SIZE(rt->gil_static) && n < max; i++) {
		if (rt->gil_static[i]) {
			out[n++] = (struct pyrt_range){ rt->gil_static[i],
							rt->gil_static[i] + rt->gil_static_size[i] };
		}
	}
	/* 2.7: interpreter_lock points to the sem_t the GIL is. */
	spy_addr_t lock;
	if (rt->gil_lock_ptr && n < max && spy_mem_read_addr(rt->mem, rt->gil_lock_ptr, &lock) == 0 &&
	    lock) {
		out[n++] = (struct pyrt_range){ lock, lock + rt->gil_lock_size };
	}
	return n;
}
