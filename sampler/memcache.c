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

#include "common/err.h"
#include "common/util.h"
#include "sampler/internal.h"

void memcache_init(struct proc *p)
{
	struct memcache *c = &p->mc;
	/* calloc: the untouched lines cost no memory until first fetched into. */
	c->data = spy_xcalloc(MEMCACHE_LINES, sizeof(*c->data));
	c->gen = 1;
	c->on = false;
}

void memcache_free(struct proc *p)
{
	free(p->mc.data);
	p->mc.data = NULL;
}

/*
 * Start a view by fetching, in one syscall, every line the previous view
 * read: a sampler walks much the same memory each tick (the runtime, the
 * thread states, the frame stack, the code objects), so in steady state a
 * whole sample costs one process_vm_readv instead of one per line. Lines
 * the walk no longer touches drop out after one view; lines that became
 * unreadable simply fail here and are fetched (or not) on demand.
 */
static void prefetch_lines(struct proc *p, uint64_t prev)
{
	struct memcache *c = &p->mc;
	spy_addr_t addrs[MEMCACHE_LINES];
	size_t slots[MEMCACHE_LINES];
	struct iovec local[MEMCACHE_LINES];
	size_t n = 0;

	if (c->marked_gen != prev) {
		return; /* that view read nothing cached */
	}
	for (size_t k = 0; k < c->nmarked; k++) {
		size_t slot = c->marked[k];
		if (c->line_used[slot] != prev) {
			continue;
		}
		c->line_gen[slot] = 0;
		/* Only what the last view read of the line, in whole granules. */
		unsigned lo = c->used_lo[slot] & ~(MEMCACHE_GRANULE - 1);
		unsigned hi = (c->used_hi[slot] + MEMCACHE_GRANULE - 1) & ~(MEMCACHE_GRANULE - 1);
		if (hi > MEMCACHE_LINE || lo >= hi) {
			lo = 0;
			hi = MEMCACHE_LINE;
		}
		c->lo[slot] = (uint16_t)lo;
		c->hi[slot] = (uint16_t)hi;
		addrs[n] = c->line[slot] * MEMCACHE_LINE + lo;
		slots[n] = slot;
		local[n].iov_base = c->data[slot] + lo;
		local[n].iov_len = hi - lo;
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

void memcache_view(struct proc *p, bool on)
{
	struct memcache *c = &p->mc;
	c->gen++;
	c->on = on;
	if (on) {
		/* The views in between (the target running) read nothing cached. */
		if (c->prefetch && c->data) {
			prefetch_lines(p, c->last_view);
		}
		c->last_view = c->gen;
	}
}

void proc_mem_prefetch(struct proc *p, bool on)
{
	p->mc.prefetch = on;
}

void memcache_view_bare(struct proc *p)
{
	p->mc.gen++;
	p->mc.on = true;
}

void proc_mem_invalidate(struct proc *p)
{
	memcache_view(p, true);
}

void proc_mem_stats(const struct proc *p, struct proc_mem_stats *out)
{
	*out = p->mc.stats;
}

/*
 * Two ways per set: the lines a walk reads come from a handful of mappings
 * whose addresses often agree in their low bits, and with one way a single
 * pair of them evicting each other costs two misses every sample.
 */
static size_t set_of(uint64_t line)
{
	return (size_t)(line % MEMCACHE_SETS) * MEMCACHE_WAYS;
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
		if (c->marked_gen != c->gen) {
			c->marked_gen = c->gen;
			c->nmarked = 0;
		}
		/* Once per slot and view: nmarked stays below MEMCACHE_LINES. */
		c->marked[c->nmarked++] = (uint16_t)slot;
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
		size_t off = (size_t)(addr % MEMCACHE_LINE);
		ptrdiff_t slot = find_bytes(c, first, off, off + len);
		if (slot >= 0) {
			c->stats.hits++;
			mark_used(c, (size_t)slot, off, off + len);
			memcpy(dst, c->data[slot] + off, len);
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
