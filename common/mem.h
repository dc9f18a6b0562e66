/*
 * The memory-reader interface: the only way pystate (and later the native
 * unwinder) sees a target. A live process, a core file, or a synthetic image
 * built by a unit test or a fuzzer all hand out a struct spy_mem, so the code
 * that decodes CPython never knows which one it is reading.
 *
 * A remote address is spy_addr_t, never a pointer: the compiler then refuses
 * to dereference it by accident.
 */
#ifndef SPY_COMMON_MEM_H
#define SPY_COMMON_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t spy_addr_t;

enum {
	SPY_MAP_R = 1,
	SPY_MAP_W = 2,
	SPY_MAP_X = 4,
	SPY_MAP_P = 8, /* private (copy-on-write) */
};

/* One line of /proc/PID/maps, or one PT_LOAD of a core file. */
struct spy_map {
	spy_addr_t lo, hi;   /* [lo, hi) */
	uint64_t offset;     /* file offset of lo */
	uint8_t perms;       /* SPY_MAP_* */
	uint64_t dev;        /* makedev(major, minor) of the maps line; 0 if unknown (a core) */
	uint64_t inode;
	const char *path;    /* "" for anonymous; " (deleted)" already stripped */
};

struct spy_mem {
	/*
	 * Copy len bytes at addr into dst. Called by pystate for every remote
	 * read. Returns 0 only when all len bytes were copied; a partial or
	 * failed read returns -SPY_EMEM and dst's content is unspecified. Must
	 * not print or allocate per call.
	 */
	int (*read)(void *ctx, spy_addr_t addr, void *dst, size_t len);
	/*
	 * Optional (NULL: none). The len bytes at addr where the backend
	 * already holds them (a cache), without copying, or NULL when it does
	 * not (then read). The bytes are the same a read would give, and stay
	 * so only until the next call on this spy_mem: copy what must outlive
	 * it. Never fetches, prints or allocates.
	 */
	const void *(*peek)(void *ctx, spy_addr_t addr, size_t len);
	void *ctx;
	/* The target's mappings, sorted by lo; may be empty (nmaps == 0). */
	const struct spy_map *maps;
	size_t nmaps;
};

static inline int spy_mem_read(const struct spy_mem *m, spy_addr_t addr, void *dst, size_t len)
{
	return m->read(m->ctx, addr, dst, len);
}

static inline const void *spy_mem_peek(const struct spy_mem *m, spy_addr_t addr, size_t len)
{
	return m->peek ? m->peek(m->ctx, addr, len) : NULL;
}

/* Read one little-endian pointer-sized word. */
int spy_mem_read_addr(const struct spy_mem *m, spy_addr_t addr, spy_addr_t *out);

/* The mapping containing addr, or NULL. Binary search over m->maps. */
const struct spy_map *spy_mem_find_map(const struct spy_mem *m, spy_addr_t addr);

/*
 * A cheap plausibility test for a pointer read from the target: non-NULL,
 * aligned to align (a power of two), and, when maps are known, inside a
 * readable mapping.
 */
bool spy_mem_plausible(const struct spy_mem *m, spy_addr_t addr, size_t align);

#endif
