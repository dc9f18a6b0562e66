/* Helpers over struct spy_mem (see mem.h). */
#include "common/arch.h"
#include "common/err.h"
#include "common/mem.h"

int spy_mem_read_addr(const struct spy_mem *m, spy_addr_t addr, spy_addr_t *out)
{
	uint64_t v;
	int rc = spy_mem_read(m, addr, &v, sizeof(v));
	if (rc < 0) {
		return rc;
	}
	*out = v;
	return 0;
}

const struct spy_map *spy_mem_find_map(const struct spy_mem *m, spy_addr_t addr)
{
	size_t lo = 0, hi = m->nmaps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct spy_map *mp = &m->maps[mid];
		if (addr < mp->lo) {
			hi = mid;
		} else if (addr >= mp->hi) {
			lo = mid + 1;
		} else {
			return mp;
		}
	}
	return NULL;
}

bool spy_mem_plausible(const struct spy_mem *m, spy_addr_t addr, size_t align)
{
	if (addr == 0 || (addr & (align - 1))) {
		return false;
	}
	/* Nothing is mapped above user space; such a pointer is garbage. */
	if (addr >= spy_arch_user_end()) {
		return false;
	}
	if (m->nmaps == 0) {
		return true;
	}
	const struct spy_map *mp = spy_mem_find_map(m, addr);
	return mp && (mp->perms & SPY_MAP_R);
}
