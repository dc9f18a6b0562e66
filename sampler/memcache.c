/*
 * The page cache behind proc_mem(): see sampler.h for what it promises and
 * internal.h for its layout.
 *
 * A 50-frame walk issues over a hundred small reads, most of them into a few
 * pages (the thread's frame stack, code objects, their strings), and each
 * process_vm_readv costs the same few microseconds whether it copies 8 bytes
 * or a page. So a read that misses fetches the whole 4 KiB lines it touches,
 * all of them in one syscall, and the reads after it that land in those lines
 * are a memcpy.
 *
 * Never worse than reading exactly: a fetch that comes back short (a line
 * running into an unreadable page, or any error) keeps the whole lines it
 * got and then does the caller's exact read, uncached, so the answer is the
 * one the plain reader would have given.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/err.h"
#include "common/util.h"
#include "sampler/internal.h"

/*
 * Two ways per set: the lines a walk reads come from a handful of mappings
 * whose addresses often agree in their low bits, and with one way a single
 * pair of them evicting each other costs two misses every sample.
 */
static size_t set_of(uint64_t line)
{
	return (size_t)(line % MEMCACHE_SETS) * MEMCACHE_WAYS;
}

static struct memcache_trail *trail_new(size_t cap)
{
	struct memcache_trail *t = spy_xcalloc(1, sizeof(*t));
	t->cap = cap;
	t->line = spy_xcalloc(cap, sizeof(*t->line));
	t->lo = spy_xcalloc(cap, sizeof(*t->lo));
	t->hi = spy_xcalloc(cap, sizeof(*t->hi));
	t->slot = spy_xcalloc(cap, sizeof(*t->slot));
	return t;
}

static void trail_free(struct memcache_trail *t)
{
	if (t) {
		free(t->line);
		free(t->lo);
		free(t->hi);
		free(t->slot);
		free(t);
	}
}

void memcache_init(struct proc *p)
{
	struct memcache *c = &p->mc;
	/* Mapped: page-aligned lines (see trim), and the untouched ones cost no memory until first fetched into. */
	void *d = mmap(NULL, MEMCACHE_LINES * (size_t)MEMCACHE_LINE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	c->data = d == MAP_FAILED ? NULL : d;
	c->gen = 1;
	c->on = false;
	c->trails[0] = trail_new(MEMCACHE_LINES);
}

void memcache_free(struct proc *p)
{
	if (p->mc.data) {
		munmap(p->mc.data, MEMCACHE_LINES * (size_t)MEMCACHE_LINE);
	}
	p->mc.data = NULL;
	for (size_t i = 0; i < MEMCACHE_TRAILS; i++) {
		trail_free(p->mc.trails[i]);
		p->mc.trails[i] = NULL;
	}
	p->mc.cur = NULL;
}

/* End the current view: its trail turns the slots it read into lines and bytes. */
static void view_end(struct memcache *c)
{
	struct memcache_trail *t = c->cur;
	c->cur = NULL;
	if (!t) {
		return;
	}
	for (size_t i = 0; i < t->n; i++) {
		/*
		 * Only what this view read of the line, in whole granules. A
		 * slot this view read two lines into is listed once, for the
		 * later line: the earlier is fetched on demand next time.
		 */
		size_t slot = t->slot[i];
		unsigned lo = c->used_lo[slot] & ~(MEMCACHE_GRANULE - 1);
		unsigned hi = (c->used_hi[slot] + MEMCACHE_GRANULE - 1) & ~(MEMCACHE_GRANULE - 1);
		if (hi > MEMCACHE_LINE || lo >= hi) {
			lo = 0;
			hi = MEMCACHE_LINE;
		}
		t->line[i] = c->line[slot];
		t->lo[i] = (uint16_t)lo;
		t->hi[i] = (uint16_t)hi;
	}
	t->gen = c->gen;
}

/*
 * Start a view by fetching, in one syscall, every line trail t read last
 * time: a sampler walks much the same memory each tick (the runtime, the
 * thread states, the frame stack, the code objects), so in steady state a
 * whole sample costs one process_vm_readv instead of one per line. Lines
 * the walk no longer touches drop out after one view; lines that became
 * unreadable simply fail here and are fetched (or not) on demand.
 */
static void prefetch_trail(struct proc *p, const struct memcache_trail *t)
{
	struct memcache *c = &p->mc;
	spy_addr_t addrs[MEMCACHE_LINES];
	size_t slots[MEMCACHE_LINES];
	struct iovec local[MEMCACHE_LINES];
	bool claimed[MEMCACHE_LINES] = { false };
	size_t n = 0;

	for (size_t i = 0; i < t->n && n < MEMCACHE_LINES; i++) {
		/* The way that holds the line already, else the least recently read one not claimed here. */
		size_t base = set_of(t->line[i]), slot = MEMCACHE_LINES;
		for (size_t w = 0; w < MEMCACHE_WAYS; w++) {
			if (c->line[base + w] == t->line[i]) {
				slot = base + w;
			}
		}
		bool found = slot != MEMCACHE_LINES;
		for (size_t w = 0; w < MEMCACHE_WAYS && !found; w++) {
			if (!claimed[base + w] && (slot == MEMCACHE_LINES ||
						   c->line_used[base + w] < c->line_used[slot])) {
				slot = base + w;
			}
		}
		if (slot == MEMCACHE_LINES || claimed[slot]) {
			continue; /* both ways taken by this prefetch: on demand */
		}
		claimed[slot] = true;
		c->line[slot] = t->line[i];
		c->line_gen[slot] = 0;
		c->lo[slot] = t->lo[i];
		c->hi[slot] = t->hi[i];
		addrs[n] = t->line[i] * MEMCACHE_LINE + t->lo[i];
		slots[n] = slot;
		local[n].iov_base = c->data[slot] + t->lo[i];
		local[n].iov_len = (size_t)(t->hi[i] - t->lo[i]);
		n++;
	}
	if (n == 0) {
		return;
	}
	ssize_t got = proc_fetch_scattered(p, addrs, local, n);
	size_t left = got > 0 ? (size_t)got : 0, whole = 0;
	/* The kernel stops at the first range it cannot read: those before it arrived whole. */
	for (size_t i = 0; i < n && left >= local[i].iov_len; i++) {
		left -= local[i].iov_len;
		c->line_gen[slots[i]] = c->gen;
		whole++;
	}
	c->stats.prefetched += whole;
}

static void view_start(struct proc *p, struct memcache_trail *t);

/*
 * The lines no view read since the last call are given back to the kernel
 * (their pages are only ever read once fetched into again: a line is
 * valid in the view that fetched it alone). Without it a cache kept its
 * every page once touched, 2 MiB a process however little its walks
 * read. On the caller's clock, not per so many views: a process that
 * sleeps takes no view for minutes, and its lines would wait as long.
 * Only where a line is a page.
 */
void proc_mem_trim(struct proc *p)
{
	struct memcache *c = &p->mc;
	/* Ends the current view, as a resume does: every read after this call is in a later one. */
	view_start(p, NULL);
	if (!c->data || sysconf(_SC_PAGESIZE) != MEMCACHE_LINE) {
		return;
	}
	for (size_t i = 0; i < MEMCACHE_LINES; i++) {
		if (c->line_used[i] && c->line_used[i] <= c->trim_mark) {
			madvise(c->data[i], MEMCACHE_LINE, MADV_DONTNEED);
			c->line_used[i] = 0;
			c->line_gen[i] = 0;
			c->stats.trimmed++;
		}
	}
	c->trim_mark = c->gen;
}

/* A new view recording into t (NULL: off), first fetching what t read last time. */
static void view_start(struct proc *p, struct memcache_trail *t)
{
	struct memcache *c = &p->mc;
	view_end(c);
	c->gen++;
	c->on = t != NULL;
	if (!t) {
		return;
	}
	/* Only a trail filled by the view it follows of its kind: t->gen 0 is none yet. */
	if (c->prefetch && c->data && t->gen) {
		prefetch_trail(p, t);
	}
	t->n = 0;
	c->cur = t;
}

void memcache_view(struct proc *p, bool on)
{
	view_start(p, on ? p->mc.trails[0] : NULL);
}

void memcache_view_held(struct proc *p, pid_t tid)
{
	struct memcache *c = &p->mc;
	size_t pick = 0;
	view_end(c);
	for (size_t i = 1; i < MEMCACHE_TRAILS; i++) {
		if (!c->trails[i]) {
			c->trails[i] = trail_new(MEMCACHE_TRAIL);
			c->trails[i]->key = tid;
			pick = i;
			break;
		}
		if (c->trails[i]->key == tid) {
			pick = i;
			break;
		}
		if (!pick || c->trails[i]->gen < c->trails[pick]->gen) {
			pick = i;
		}
	}
	/* pick is set: a free trail, tid's own, or the one filled longest ago. */
	struct memcache_trail *t = c->trails[pick];
	if (t->key != tid) {
		/* Another thread's: nothing to fetch ahead. */
		t->key = tid;
		t->gen = 0;
		t->n = 0;
	}
	view_start(p, t);
}

void proc_mem_uncached(struct proc *p)
{
	memcache_view(p, false);
}

void proc_mem_prefetch(struct proc *p, bool on)
{
	p->mc.prefetch = on;
}

void proc_mem_invalidate(struct proc *p)
{
	memcache_view(p, true);
}

void proc_mem_thread_view(struct proc *p, pid_t tid)
{
	memcache_view_held(p, tid);
}

void proc_mem_stats(const struct proc *p, struct proc_mem_stats *out)
{
	*out = p->mc.stats;
}

/* The slot holding line in the current view, or -1. */
static ptrdiff_t find_line(const struct memcache *c, uint64_t line)
{
	size_t base = set_of(line);
	for (size_t w = 0; w < MEMCACHE_WAYS; w++) {
		if (c->line_gen[base + w] == c->gen && c->line[base + w] == line) {
			return (ptrdiff_t)(base + w);
		}
	}
	return -1;
}

/* The slot holding bytes [off, end) of line in the current view, or -1. */
static ptrdiff_t find_bytes(const struct memcache *c, uint64_t line, size_t off, size_t end)
{
	ptrdiff_t slot = find_line(c, line);
	if (slot >= 0 && (off < c->lo[slot] || end > c->hi[slot])) {
		return -1;
	}
	return slot;
}

/* Bytes [off, end) of the line in slot were read in this view. */
static void mark_used(struct memcache *c, size_t slot, size_t off, size_t end)
{
	if (c->line_used[slot] != c->gen) {
		/* Once per slot and view: trails[0] has room for every slot. */
		if (c->cur && c->cur->n < c->cur->cap) {
			c->cur->slot[c->cur->n++] = (uint16_t)slot;
		}
		c->line_used[slot] = c->gen;
		c->used_lo[slot] = (uint16_t)off;
		c->used_hi[slot] = (uint16_t)end;
		return;
	}
	if (off < c->used_lo[slot]) {
		c->used_lo[slot] = (uint16_t)off;
	}
	if (end > c->used_hi[slot]) {
		c->used_hi[slot] = (uint16_t)end;
	}
}

/* Where to fetch line: the way that held it before, else the least recently read. */
static size_t victim(const struct memcache *c, uint64_t line)
{
	size_t base = set_of(line), best = base;
	for (size_t w = 0; w < MEMCACHE_WAYS; w++) {
		if (c->line[base + w] == line) {
			return base + w;
		}
		if (c->line_used[base + w] < c->line_used[best]) {
			best = base + w;
		}
	}
	return best;
}

/* Copy [addr, addr + len) out of lines that are all valid. */
static void copy_out(struct memcache *c, spy_addr_t addr, uint8_t *dst, size_t len)
{
	while (len > 0) {
		uint64_t line = addr / MEMCACHE_LINE;
		size_t off = (size_t)(addr % MEMCACHE_LINE);
		size_t n = MEMCACHE_LINE - off;
		if (n > len) {
			n = len;
		}
		size_t slot = (size_t)find_line(c, line);
		mark_used(c, slot, off, off + n);
		memcpy(dst, c->data[slot] + off, n);
		dst += n;
		addr += n;
		len -= n;
	}
}

static int read_exact(struct proc *p, spy_addr_t addr, void *dst, size_t len)
{
	p->mc.stats.uncached++;
	return p->raw_read(p, addr, dst, len);
}

/* Bytes [addr, addr + len) of one line, if this view holds them: counted a hit, and used. */
static const uint8_t *held_bytes(struct memcache *c, spy_addr_t addr, size_t len)
{
	size_t off = (size_t)(addr % MEMCACHE_LINE);
	ptrdiff_t slot = find_bytes(c, addr / MEMCACHE_LINE, off, off + len);
	if (slot < 0) {
		return NULL;
	}
	c->stats.hits++;
	mark_used(c, (size_t)slot, off, off + len);
	return c->data[slot] + off;
}

const void *memcache_peek(void *ctx, spy_addr_t addr, size_t len)
{
	struct proc *p = ctx;
	struct memcache *c = &p->mc;
	if (!c->on || !c->data || len == 0 || len > MEMCACHE_LINE - addr % MEMCACHE_LINE) {
		return NULL;
	}
	const uint8_t *b = held_bytes(c, addr, len);
	c->stats.reads += b != NULL;
	return b;
}

int memcache_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	struct proc *p = ctx;
	struct memcache *c = &p->mc;

	c->stats.reads++;
	if (len == 0) {
		return 0;
	}
	if (!c->on || !c->data || len > MEMCACHE_MAX_READ || addr > UINT64_MAX - (len - 1)) {
		return read_exact(p, addr, dst, len);
	}
	uint64_t first = addr / MEMCACHE_LINE;
	uint64_t last = (addr + (len - 1)) / MEMCACHE_LINE;
	if (first == last) {
		/* Most reads (a frame, a code object's header) sit in one line:
		 * one lookup, one copy. */
		const uint8_t *b = held_bytes(c, addr, len);
		if (b) {
			memcpy(dst, b, len);
			return 0;
		}
	}
	bool cached = true;
	for (uint64_t l = first; l <= last && cached; l++) {
		size_t off = l == first ? (size_t)(addr % MEMCACHE_LINE) : 0;
		size_t end = l == last ? (size_t)((addr + (len - 1)) % MEMCACHE_LINE) + 1 : MEMCACHE_LINE;
		cached = find_bytes(c, l, off, end) >= 0;
	}
	if (cached) {
		c->stats.hits++;
		copy_out(c, addr, dst, len);
		return 0;
	}

	/*
	 * Fetch every line the read spans, the valid ones too: one syscall
	 * either way, and the lines stay consecutive in a single remote
	 * range. At most 5 lines (16 KiB unaligned), consecutive, so in
	 * distinct sets. Each slot is marked invalid before the kernel writes
	 * into it, and valid again only once its whole line has arrived.
	 */
	c->stats.misses++;
	/* Zeroed: gcc cannot see that n >= 1 fills what proc_fetch_lines reads. */
	struct iovec local[MEMCACHE_MAX_READ / MEMCACHE_LINE + 2] = { { NULL, 0 } };
	size_t slots[MEMCACHE_MAX_READ / MEMCACHE_LINE + 2];
	size_t n = (size_t)(last - first + 1);
	for (size_t i = 0; i < n; i++) {
		size_t slot = victim(c, first + i);
		slots[i] = slot;
		c->line_gen[slot] = 0;
		c->line[slot] = first + i;
		local[i].iov_base = c->data[slot];
		local[i].iov_len = MEMCACHE_LINE;
	}
	ssize_t got = proc_fetch_lines(p, first * MEMCACHE_LINE, local, n);
	size_t whole = got > 0 ? (size_t)got / MEMCACHE_LINE : 0;
	for (size_t i = 0; i < whole && i < n; i++) {
		c->line_gen[slots[i]] = c->gen;
		c->lo[slots[i]] = 0;
		c->hi[slots[i]] = MEMCACHE_LINE;
	}
	if (whole >= n) {
		copy_out(c, addr, dst, len);
		return 0;
	}
	c->stats.fallbacks++;
	return read_exact(p, addr, dst, len);
}
