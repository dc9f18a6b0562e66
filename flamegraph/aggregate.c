/*
 * Aggregation: the profile, its interned frames, its distinct stacks, the
 * output order, the trie view and the metadata list.
 *
 * The design decision a newcomer would question: samples are not added to a
 * trie. Each distinct stack is stored once, flat, as its frame ids root
 * first, and found again through one hash of the whole id sequence. A trie
 * whose children are found by hashing (parent, frame) also adds in O(depth),
 * but each of those look-ups depends on the one before and lands on a
 * different cache line, so with ~10^6 nodes a 40-frame sample costs ~80
 * dependent cache misses; the flat table costs one look-up per frame in the
 * (small, hot) frame table plus ~3 misses for the stack, and 4 bytes per
 * stored frame instead of ~40 per trie node. On bench/fg-aggregate's
 * default workload (50,000 stacks, 1.2 million trie nodes) a trie was 5 to
 * 7 times slower per sample (~8 us against ~1.5 us) and held 65 MiB
 * against 20. The trie with self/total counts that flame graphs need is
 * built from the distinct stacks when output is written (fg_tree_init),
 * already sorted, which a live trie would have had to sort anyway.
 *
 * Frames are interned keyed by the pointers of their already interned
 * strings: hashing a pointer is cheaper than hashing a name, which is what
 * the session's spy_strtab is for.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/term.h"
#include "common/util.h"
#include "flamegraph/internal.h"

/* The map mixes keys (common/hashmap.h), so these only have to combine:
 * cheaply, and so that order matters. */
static inline uint64_t frame_hash(const char *func, const char *file, uint32_t line, uint8_t kind)
{
	uint64_t h = spy_hmap_pair((uint64_t)(uintptr_t)func, (uint64_t)(uintptr_t)file);
	return spy_hmap_pair(h, (uint64_t)line << 8 | kind);
}

/*
 * Multiply-xorshift per id, root first: a;b is not b;a, at a few cycles
 * per frame. The depth goes in last, so that the state after a prefix
 * serves every stack that shares it (fg_profile_add).
 */
#define PATH_SEED 0x9e3779b97f4a7c15ULL

static inline uint64_t path_step(uint64_t h, uint32_t id)
{
	h = (h ^ id) * 0xff51afd7ed558ccdULL;
	return h ^ (h >> 32);
}

static inline uint64_t path_end(uint64_t h, size_t n)
{
	return path_step(h, (uint32_t)n ^ (uint32_t)((uint64_t)n >> 32));
}

static inline uint64_t path_hash(const uint32_t *ids, size_t n)
{
	uint64_t h = PATH_SEED;
	for (size_t i = 0; i < n; i++) {
		h = path_step(h, ids[i]);
	}
	return path_end(h, n);
}

struct fg_profile *fg_profile_new(struct spy_strtab *strtab, unsigned flags)
{
	struct fg_profile *p = spy_xcalloc(1, sizeof(*p));
	p->flags = flags;
	p->strtab = strtab ? strtab : &p->own_strtab;
	p->max_stacks = FG_MAX_STACKS;
	p->max_read = FG_MAX_READ_BYTES;
	p->last_stack = FG_NONE;
	p->same_stack = FG_NONE;
	return p;
}

void fg_profile_free(struct fg_profile *p)
{
	if (!p) {
		return;
	}
	for (size_t i = 0; i < p->nmeta; i++) {
		free(p->meta[i].key);
		free(p->meta[i].value);
	}
	free(p->meta);
	free(p->frames);
	spy_hmap_release(&p->frame_index);
	free(p->stacks);
	spy_hmap_release(&p->stack_index);
	free(p->pool);
	free(p->ids);
	free(p->last);
	free(p->last_h);
	free(p->known_ids);
	fg_source_free(p->source);
	fg_labels_free(p->labels);
	spy_strtab_release(&p->own_strtab);
	free(p);
}

struct spy_strtab *fg_profile_strtab(struct fg_profile *p)
{
	return p->strtab;
}

unsigned fg_profile_flags(const struct fg_profile *p)
{
	return p->flags;
}

void fg_profile_limit_stacks(struct fg_profile *p, size_t max_stacks)
{
	p->max_stacks = max_stacks < FG_MAX_STACKS ? max_stacks : FG_MAX_STACKS;
}

void fg_profile_limit_read(struct fg_profile *p, size_t max_bytes)
{
	p->max_read = max_bytes;
}

uint32_t fg_intern_frame(struct fg_profile *p, const char *func, const char *file,
			 uint32_t line, uint8_t kind)
{
	if (!func) {
		func = spy_strtab_intern(p->strtab, "", 0);
	}
	if (kind == SPY_FRAME_SYNTHETIC) {
		/* Only the name is written, so only the name may tell them apart. */
		file = NULL;
		line = 0;
	} else if (!file) {
		file = spy_strtab_intern(p->strtab, "", 0);
	}
	if (p->flags & FG_FUNCTION) {
		line = 0;
	}
	uint64_t h = frame_hash(func, file, line, kind);
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&p->frame_index, h, it, v) {
		const struct fg_frame *f = &p->frames[v];
		if (f->func == func && f->file == file && f->line == line && f->kind == kind) {
			return (uint32_t)v;
		}
	}
	/* Every new frame comes with a new stack, and stacks are capped below
	 * 2^32, so reaching this means the cap logic is broken. */
	if (p->nframes >= FG_NONE - 1) {
		SPY_BUG("more than %zu frames", p->nframes);
	}
	SPY_GROW(p->frames, p->frames_alloc, p->nframes + 1);
	uint32_t id = (uint32_t)p->nframes++;
	p->frames[id] = (struct fg_frame){ func, file, line, kind };
	spy_hmap_add(&p->frame_index, h, id);
	p->names += strlen(func) + (file ? strlen(file) : 0);
	return id;
}

/* fg_intern_frame's id for a frame the profile has, FG_NONE for one it has not (nothing added). */
static uint32_t find_frame(const struct fg_profile *p, const struct spy_frame *f)
{
	/* fg_intern_frame's normalisation, the same. */
	const char *func = f->func ? f->func : spy_strtab_intern(p->strtab, "", 0), *file = f->file;
	uint32_t line = p->flags & FG_FUNCTION ? 0 : f->line;
	if (f->kind == SPY_FRAME_SYNTHETIC) {
		file = NULL;
		line = 0;
	} else if (!file) {
		file = spy_strtab_intern(p->strtab, "", 0);
	}
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&p->frame_index, frame_hash(func, file, line, f->kind), it, v) {
		const struct fg_frame *e = &p->frames[v];
		if (e->func == func && e->file == file && e->line == line && e->kind == f->kind) {
			return (uint32_t)v;
		}
	}
	return FG_NONE;
}

int fg_profile_add_known(struct fg_profile *p, const struct spy_stack *s, uint64_t count)
{
	p->last_stack = FG_NONE;
	size_t n = s->n > FG_MAX_DEPTH ? FG_MAX_DEPTH : s->n;
	if (!count || !n || count > FG_MAX_TOTAL - p->samples) {
		return -SPY_EBOUND;
	}
	/* Its own scratch: ids and last are fg_profile_add's cache of the stack it added last. */
	SPY_GROW(p->known_ids, p->known_alloc, n);
	const struct spy_frame *v = s->v + (s->n - n);
	for (size_t k = 0; k < n; k++) {
		if ((p->known_ids[k] = find_frame(p, &v[n - 1 - k])) == FG_NONE) {
			return -SPY_EBOUND;
		}
	}
	uint64_t h = path_hash(p->known_ids, n);
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&p->stack_index, h, it, x) {
		struct fg_stack_ent *e = &p->stacks[x];
		if (e->depth == n && !memcmp(p->pool + e->off, p->known_ids, n * sizeof(*p->known_ids))) {
			e->count += count;
			p->samples += count;
			p->truncated += s->n > n ? count : 0;
			p->last_stack = (uint32_t)x;
			return 0;
		}
	}
	return -SPY_EBOUND;
}

/* fg_add_path with the path's hash at hand. */
static int add_hashed(struct fg_profile *p, const uint32_t *ids, size_t n, uint64_t h, uint64_t count)
{
	p->last_stack = FG_NONE;
	/* samples <= FG_MAX_TOTAL always, so this cannot wrap. */
	if (count > FG_MAX_TOTAL - p->samples) {
		p->dropped += count;
		return -SPY_EBOUND;
	}
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&p->stack_index, h, it, v) {
		struct fg_stack_ent *e = &p->stacks[v];
		if (e->depth == n && !memcmp(p->pool + e->off, ids, n * sizeof(*ids))) {
			e->count += count;
			p->samples += count;
			p->last_stack = (uint32_t)v;
			return 0;
		}
	}
	if (p->nstacks >= p->max_stacks) {
		p->dropped += count;
		return -SPY_EBOUND;
	}
	SPY_GROW(p->pool, p->pool_alloc, p->npool + n);
	memcpy(p->pool + p->npool, ids, n * sizeof(*ids));
	SPY_GROW(p->stacks, p->stacks_alloc, p->nstacks + 1);
	p->stacks[p->nstacks] = (struct fg_stack_ent){ count, p->npool, (uint32_t)n };
	p->npool += n;
	spy_hmap_add(&p->stack_index, h, p->nstacks++);
	p->samples += count;
	p->last_stack = (uint32_t)p->nstacks - 1;
	return 0;
}

int fg_add_path(struct fg_profile *p, const uint32_t *ids, size_t n, uint64_t count)
{
	return add_hashed(p, ids, n, path_hash(ids, n), count);
}

/*
 * Frames compared a block at a time from the root side: a sampler's next
 * stack mostly differs near the leaf, and memcmp finds equal blocks
 * several times faster than the fields compared frame by frame (that loop
 * was a sixth of --nonblocking's user time on a 100-frame stack).
 */
#define SAME_BLOCK 8

/* Room for n frames in p->last, the nlast kept at its end. */
static void last_reserve(struct fg_profile *p, size_t n)
{
	if (n <= p->last_alloc) {
		return;
	}
	size_t cap = p->last_alloc * 2 > n ? p->last_alloc * 2 : n;
	cap = cap < 64 ? 64 : cap;
	struct spy_frame *v = spy_xcalloc(cap, sizeof(*v));
	if (p->nlast) {
		memcpy(v + cap - p->nlast, p->last + p->last_alloc - p->nlast, p->nlast * sizeof(*v));
	}
	free(p->last);
	p->last = v;
	p->last_alloc = cap;
}

static bool same_frame(const struct spy_frame *a, const struct spy_frame *b)
{
	return a->func == b->func && a->file == b->file && a->line == b->line && a->kind == b->kind;
}

int fg_profile_add(struct fg_profile *p, const struct spy_stack *s, uint64_t count)
{
	p->last_stack = FG_NONE;
	if (!count) {
		return 0;
	}
	if (!s->n) {
		p->dropped += count;
		return 0;
	}
	size_t n = s->n;
	if (n > FG_MAX_DEPTH) {
		n = FG_MAX_DEPTH;
		p->truncated += count;
	}
	SPY_GROW(p->ids, p->ids_alloc, n);
	SPY_GROW(p->last_h, p->last_h_alloc, n);
	last_reserve(p, n);
	/* The n root-side frames, leaf first, and last time's, both ending at the root. */
	const struct spy_frame *v = s->v + (s->n - n);
	const struct spy_frame *vend = v + n, *lend = p->last + p->last_alloc;
	size_t common = n < p->nlast ? n : p->nlast;
	/* ids[0..eq) stand: those frames are byte for byte last time's. */
	size_t eq = 0;
	/* Mostly only the leaf's block changed: all below it in one compare. */
	if (common > SAME_BLOCK) {
		size_t b = common - SAME_BLOCK;
		if (memcmp(vend - b, lend - b, b * sizeof(*v)) == 0) {
			eq = b;
		}
	}
	while (eq < common) {
		size_t b = common - eq < SAME_BLOCK ? common - eq : SAME_BLOCK;
		if (memcmp(vend - eq - b, lend - eq - b, b * sizeof(*v)) != 0) {
			break;
		}
		eq += b;
	}
	bool same = n == p->nlast;
	size_t kept = n; /* ids[0..kept) and their hash states are the last add's */
	for (size_t k = eq; k < n; k++) {
		const struct spy_frame *f = vend - 1 - k;
		/* Flags, the address or padding may differ where the frame does not. */
		if (k < p->nlast && same_frame(f, lend - 1 - k)) {
			continue; /* ids[k] is still this frame's */
		}
		same = false;
		kept = k < kept ? k : kept;
		p->ids[k] = fg_intern_frame(p, f->func, f->file, f->line, f->kind);
	}
	/* Frames k >= eq sit at v[0 .. n - eq). */
	memcpy(p->last + p->last_alloc - n, v, (n - eq) * sizeof(*v));
	kept = kept < p->nlast ? kept : p->nlast;
	uint64_t h = kept ? p->last_h[kept - 1] : PATH_SEED;
	for (size_t k = kept; k < n; k++) {
		h = path_step(h, p->ids[k]);
		p->last_h[k] = h;
	}
	p->nlast = n;
	if (same && p->same_stack != FG_NONE && count <= FG_MAX_TOTAL - p->samples) {
		p->stacks[p->same_stack].count += count;
		p->samples += count;
		p->last_stack = p->same_stack;
		return 0;
	}
	int rc = add_hashed(p, p->ids, n, path_end(p->last_h[n - 1], n), count);
	p->same_stack = p->last_stack;
	return rc;
}

void fg_profile_stats(const struct fg_profile *p, struct fg_stats *st)
{
	st->samples = p->samples;
	st->dropped = p->dropped;
	st->truncated = p->truncated;
	st->frames = p->nframes;
	st->stacks = p->nstacks;
	st->frame_ids = p->npool;
	st->names = p->names;
	st->bytes = p->frames_alloc * sizeof(*p->frames) +
		    spy_hmap_bytes(&p->frame_index) +
		    p->stacks_alloc * sizeof(*p->stacks) +
		    spy_hmap_bytes(&p->stack_index) +
		    p->pool_alloc * sizeof(*p->pool) +
		    p->ids_alloc * sizeof(*p->ids) + p->last_alloc * sizeof(*p->last) +
		    p->last_h_alloc * sizeof(*p->last_h) + p->known_alloc * sizeof(*p->known_ids) +
		    fg_labels_bytes(p->labels);
}

uint32_t fg_profile_last_stack(const struct fg_profile *p)
{
	return p->last_stack;
}

size_t fg_profile_frame_count(const struct fg_profile *p)
{
	return p->nframes;
}

const struct fg_frame *fg_profile_frame(const struct fg_profile *p, uint32_t id)
{
	return id < p->nframes ? &p->frames[id] : NULL;
}

/* ---- output order -------------------------------------------------------- */

static int cmp_str_null_first(const char *a, const char *b)
{
	if (!a || !b) {
		return (a != NULL) - (b != NULL);
	}
	return strcmp(a, b);
}

struct frame_order {
	const struct fg_profile *p;
	const struct fg_order *o;
};

static int cmp_frames_by_text(const void *a, const void *b, void *arg)
{
	const struct frame_order *fo = arg;
	const struct fg_order *o = fo->o;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	size_t lx = o->text_off[x + 1] - o->text_off[x];
	size_t ly = o->text_off[y + 1] - o->text_off[y];
	int c = memcmp(o->texts.buf + o->text_off[x], o->texts.buf + o->text_off[y], lx < ly ? lx : ly);
	if (c) {
		return c;
	}
	if (lx != ly) {
		return lx < ly ? -1 : 1;
	}
	/* Equal text from different frames (escaping made them alike): order
	 * by the raw strings so the output still does not depend on ids. */
	const struct fg_frame *fx = &fo->p->frames[x], *fy = &fo->p->frames[y];
	c = strcmp(fx->func, fy->func);
	if (!c) {
		c = cmp_str_null_first(fx->file, fy->file);
	}
	if (!c && fx->line != fy->line) {
		c = fx->line < fy->line ? -1 : 1;
	}
	if (!c && fx->kind != fy->kind) {
		c = fx->kind < fy->kind ? -1 : 1;
	}
	return c;
}

static bool text_equal(const struct fg_order *o, uint32_t x, uint32_t y)
{
	size_t lx = o->text_off[x + 1] - o->text_off[x];
	return lx == o->text_off[y + 1] - o->text_off[y] &&
	       !memcmp(o->texts.buf + o->text_off[x], o->texts.buf + o->text_off[y], lx);
}

struct stack_order {
	const struct fg_profile *p;
	const uint32_t *rank;  /* distinct per frame */
	const uint32_t *trank; /* equal for frames whose text is equal */
};

/*
 * Lexicographic on the frames' texts, root first, a prefix first; only
 * stacks written alike are then ordered by raw frames. Ranking by raw
 * frames alone put "a\xda;f" (text) before "a<0xda>" (byte), which is
 * written "a\xda" too: once read back the two are one frame, and the
 * prefix stack moved ahead, so the round trip changed the text.
 */
static int cmp_stacks(const void *a, const void *b, void *arg)
{
	const struct stack_order *so = arg;
	const struct fg_stack_ent *x = &so->p->stacks[*(const uint32_t *)a];
	const struct fg_stack_ent *y = &so->p->stacks[*(const uint32_t *)b];
	const uint32_t *px = so->p->pool + x->off, *py = so->p->pool + y->off;
	uint32_t n = x->depth < y->depth ? x->depth : y->depth;
	for (uint32_t k = 0; k < n; k++) {
		if (so->trank[px[k]] != so->trank[py[k]]) {
			return so->trank[px[k]] < so->trank[py[k]] ? -1 : 1;
		}
	}
	if (x->depth != y->depth) {
		return x->depth < y->depth ? -1 : 1;
	}
	for (uint32_t k = 0; k < n; k++) {
		if (px[k] != py[k]) {
			return so->rank[px[k]] < so->rank[py[k]] ? -1 : 1;
		}
	}
	return 0;
}

void fg_order_init(struct fg_order *o, const struct fg_profile *p)
{
	size_t nf = p->nframes;
	spy_buf_init(&o->texts);
	o->text_off = spy_xmalloc((nf + 1) * sizeof(*o->text_off));
	for (size_t f = 0; f < nf; f++) {
		o->text_off[f] = o->texts.len;
		fg_frame_format(&p->frames[f], &o->texts);
	}
	o->text_off[nf] = o->texts.len;

	/* Rank frames by text once, so stacks compare by integers. */
	uint32_t *byrank = spy_xmalloc((nf + 1) * sizeof(*byrank));
	uint32_t *rank = spy_xmalloc((nf + 1) * sizeof(*rank));
	for (size_t f = 0; f < nf; f++) {
		byrank[f] = (uint32_t)f;
	}
	struct frame_order fo = { p, o };
	qsort_r(byrank, nf, sizeof(*byrank), cmp_frames_by_text, &fo);
	uint32_t *trank = spy_xmalloc((nf + 1) * sizeof(*trank));
	for (size_t r = 0; r < nf; r++) {
		rank[byrank[r]] = (uint32_t)r;
		bool same = r && text_equal(o, byrank[r - 1], byrank[r]);
		trank[byrank[r]] = same ? trank[byrank[r - 1]] : (uint32_t)r;
	}

	o->stack = spy_xmalloc((p->nstacks + 1) * sizeof(*o->stack));
	for (size_t i = 0; i < p->nstacks; i++) {
		o->stack[i] = (uint32_t)i;
	}
	struct stack_order so = { p, rank, trank };
	qsort_r(o->stack, p->nstacks, sizeof(*o->stack), cmp_stacks, &so);
	free(trank);
	free(rank);
	free(byrank);
}

void fg_order_release(struct fg_order *o)
{
	spy_buf_release(&o->texts);
	free(o->text_off);
	free(o->stack);
	memset(o, 0, sizeof(*o));
}

int fg_order_foreach_stack(const struct fg_order *o, const struct fg_profile *p,
			   fg_stack_fn fn, void *ctx)
{
	for (size_t i = 0; i < p->nstacks; i++) {
		const struct fg_stack_ent *e = &p->stacks[o->stack[i]];
		int rc = fn(ctx, p->pool + e->off, e->depth, e->count);
		if (rc) {
			return rc;
		}
	}
	return 0;
}

int fg_profile_foreach_stack(const struct fg_profile *p, fg_stack_fn fn, void *ctx)
{
	struct fg_order o;
	fg_order_init(&o, p);
	int rc = fg_order_foreach_stack(&o, p, fn, ctx);
	fg_order_release(&o);
	return rc;
}

/* ---- the trie view ------------------------------------------------------- */

void fg_tree_init(struct fg_tree *t, const struct fg_profile *p)
{
	struct fg_order o;
	fg_order_init(&o, p);
	memset(t, 0, sizeof(*t));
	if (p->npool >= FG_NONE) {
		SPY_BUG("%zu frames stored: too many for a 32-bit trie", p->npool);
	}
	/* At most one node per stored frame, plus the root. */
	t->nodes = spy_xmalloc((p->npool + 1) * sizeof(*t->nodes));
	t->nodes[0] = (struct fg_node){ FG_NONE, FG_NONE, 0, 0, 0 };
	t->nnodes = 1;

	/*
	 * In sorted order a stack shares a prefix with the previous one and
	 * branches off after it, so one pass with the current path builds the
	 * trie in depth-first order, children already sorted.
	 */
	uint32_t *path = spy_xmalloc((FG_MAX_DEPTH + 1) * sizeof(*path));
	const uint32_t *prev = NULL;
	uint32_t prevlen = 0;
	path[0] = 0;
	for (size_t i = 0; i < p->nstacks; i++) {
		const struct fg_stack_ent *e = &p->stacks[o.stack[i]];
		const uint32_t *ids = p->pool + e->off;
		uint32_t common = 0;
		while (common < prevlen && common < e->depth && prev[common] == ids[common]) {
			common++;
		}
		for (uint32_t k = common; k < e->depth; k++) {
			uint32_t id = (uint32_t)t->nnodes++;
			t->nodes[id] = (struct fg_node){ path[k], ids[k], k + 1, 0, 0 };
			path[k + 1] = id;
		}
		t->nodes[path[e->depth]].self += e->count;
		prev = ids;
		prevlen = e->depth;
	}
	free(path);
	/* Children have higher ids than parents: one backward pass sums totals. */
	for (size_t id = t->nnodes; id-- > 0;) {
		t->nodes[id].total += t->nodes[id].self;
		if (id) {
			t->nodes[t->nodes[id].parent].total += t->nodes[id].total;
		}
	}
	t->start = spy_xcalloc(t->nnodes + 1, sizeof(*t->start));
	t->child = spy_xmalloc(t->nnodes * sizeof(*t->child));
	for (size_t id = 1; id < t->nnodes; id++) {
		t->start[t->nodes[id].parent + 1]++;
	}
	for (size_t id = 0; id < t->nnodes; id++) {
		t->start[id + 1] += t->start[id];
	}
	uint32_t *pos = spy_xmalloc((t->nnodes + 1) * sizeof(*pos));
	memcpy(pos, t->start, (t->nnodes + 1) * sizeof(*pos));
	for (size_t id = 1; id < t->nnodes; id++) {
		t->child[pos[t->nodes[id].parent]++] = (uint32_t)id;
	}
	free(pos);
	fg_order_release(&o);
}

void fg_tree_release(struct fg_tree *t)
{
	free(t->nodes);
	free(t->start);
	free(t->child);
	memset(t, 0, sizeof(*t));
}

/* ---- metadata ------------------------------------------------------------ */

static const char *const documented_keys[] = {
	FG_META_SPY_VERSION, FG_META_PID, FG_META_PYTHON, FG_META_RATE_HZ,
	FG_META_DURATION_S, FG_META_SAMPLES, FG_META_ERRORS, FG_META_COMMAND,
};

bool fg_meta_key_valid(const char *key, size_t len)
{
	if (!len || len > FG_MAX_META_KEY) {
		return false;
	}
	for (size_t i = 0; i < len; i++) {
		char c = key[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.')) {
			return false;
		}
	}
	return true;
}

static int key_rank(const char *key)
{
	for (size_t i = 0; i < SPY_ARRAY_SIZE(documented_keys); i++) {
		if (!strcmp(key, documented_keys[i])) {
			return (int)i;
		}
	}
	return FG_META_OTHER;
}

static char *sanitize_value(const char *value)
{
	/* A command line is the target's: the one terminal escaper, bounded
	 * (whole escapes and code points only). */
	struct spy_buf b = SPY_BUF_INIT;
	spy_term_escape(&b, value, strnlen(value, 4 * FG_MAX_META_VALUE), FG_MAX_META_VALUE, NULL);
	return spy_buf_detach(&b, NULL);
}

void fg_profile_meta_set(struct fg_profile *p, const char *key, const char *value)
{
	if (!fg_meta_key_valid(key, strlen(key))) {
		SPY_BUG("invalid metadata key \"%s\"", key);
	}
	for (size_t i = 0; i < p->nmeta; i++) {
		if (strcmp(p->meta[i].key, key)) {
			continue;
		}
		free(p->meta[i].value);
		if (value) {
			p->meta[i].value = sanitize_value(value);
			return;
		}
		free(p->meta[i].key);
		memmove(&p->meta[i], &p->meta[i + 1], (p->nmeta - i - 1) * sizeof(*p->meta));
		p->nmeta--;
		return;
	}
	if (!value) {
		return;
	}
	/* Keep the list in written order: after every entry of lower or equal
	 * rank, so documented keys sort by rank and the rest stay as set. */
	int rank = key_rank(key);
	size_t at = p->nmeta;
	while (at > 0 && p->meta[at - 1].rank > rank) {
		at--;
	}
	SPY_GROW(p->meta, p->meta_alloc, p->nmeta + 1);
	memmove(&p->meta[at + 1], &p->meta[at], (p->nmeta - at) * sizeof(*p->meta));
	p->meta[at] = (struct fg_meta_ent){ spy_xstrdup(key), sanitize_value(value), rank };
	p->nmeta++;
}

void fg_profile_meta_setf(struct fg_profile *p, const char *key, const char *fmt, ...)
{
	struct spy_buf b = SPY_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	spy_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	fg_profile_meta_set(p, key, b.buf);
	spy_buf_release(&b);
}

const char *fg_profile_meta_get(const struct fg_profile *p, const char *key)
{
	for (size_t i = 0; i < p->nmeta; i++) {
		if (!strcmp(p->meta[i].key, key)) {
			return p->meta[i].value;
		}
	}
	return NULL;
}

size_t fg_profile_meta_count(const struct fg_profile *p)
{
	return p->nmeta;
}

void fg_profile_meta_at(const struct fg_profile *p, size_t i, const char **key, const char **value)
{
	if (i >= p->nmeta) {
		SPY_BUG("metadata index %zu of %zu", i, p->nmeta);
	}
	*key = p->meta[i].key;
	*value = p->meta[i].value;
}

int fg_profile_add_at(struct fg_profile *p, const struct spy_stack *s, double t, struct fg_slices *sl,
		      struct fg_timeline *tl, const struct fg_track *track)
{
	int rc = fg_profile_add(p, s, 1);
	/* Both count the stack just added (fg_profile_last_stack): after the add, before any other. */
	if (sl) {
		fg_slices_add(sl, p, t, 1);
	}
	if (tl) {
		fg_timeline_add(tl, p, track, t);
	}
	return rc;
}
