/*
 * Fuzzing the core reader (sampler/core.c): headers, program headers,
 * notes (NT_PRSTATUS, NT_PRPSINFO, NT_FILE) and segments of a file anyone
 * can hand to `spy dump --core`. The input is the core itself, given to
 * core_open through a memfd; what opens is then read like dump does:
 * threads, command, executable, and memory at the seed's two segments and
 * at addresses taken from the input; then each thread's native stack is
 * walked as dump --core --native does, from the registers its NT_PRSTATUS
 * note gives (pc, sp and frame pointer are the input's), with the pac mask
 * and vDSO its other notes give. No crash, no read out of bounds.
 * Seeds name only files that do not exist; a file a mutated NT_FILE names
 * is opened only under the core's rules (no --exe, no --root here: only
 * a matching build-id), so nothing on the machine is read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/bounds.h"
#include "common/err.h"
#include "sampler/sampler.h"
#include "symbolize/symbolize.h"

/* Enough for a walk to go from the input's registers into its memory and back. */
#define WALK_MAX 64

/* Every thread's walk over the core: whatever its registers hold, it ends. */
static void walk_threads(const struct core *c, const struct proc_thread *t, size_t n)
{
	struct sym_unwinder *u = NULL;
	struct spy_err err = SPY_ERR_INIT;
	if (sym_unwinder_new(&u, &err) < 0) {
		abort();
	}
	spy_addr_t pcs[WALK_MAX], sps[WALK_MAX];
	for (size_t i = 0; i < n && i < 8; i++) {
		struct sym_saved_regs saved = { NULL, 0 };
		saved.regs = core_regs(c, t[i].tid, &saved.pac_mask);
		if (!saved.regs) {
			abort(); /* every listed thread has its registers */
		}
		size_t got = 0;
		(void)sym_unwind(u, core_mem(c), t[i].tid > 0 ? t[i].tid : 1, &saved, NULL, 0, pcs, sps,
				 WALK_MAX, &got);
		if (got > WALK_MAX) {
			abort();
		}
	}
	sym_unwinder_free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-core", MFD_CLOEXEC);
	if (fd < 0) {
		abort();
	}
	if (size && write(fd, data, size) != (ssize_t)size) {
		abort();
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct core *c = NULL;
	struct spy_err err = SPY_ERR_INIT;
	if (core_open(&c, path, NULL, NULL, &err) == 0) {
		size_t n;
		const struct proc_thread *t = core_threads(c, &n);
		for (size_t i = 0; i < n; i++) {
			(void)strnlen(t[i].wait.wchan, sizeof(t[i].wait.wchan));
		}
		(void)strlen(core_cmdline(c));
		(void)strlen(core_exe(c));
		(void)core_pid(c);
		const struct spy_mem *m = core_mem(c);
		uint8_t buf[256];
		static const spy_addr_t at[] = { 0x10000, 0x10ff0, 0x20000, 0x20ff8, 0, ~(spy_addr_t)0 - 8 };
		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
			(void)m->read(m->ctx, at[i], buf, 16);
		}
		for (size_t off = 0; off + 8 <= size && off < 4096; off += 512) {
			spy_addr_t a;
			memcpy(&a, data + off, 8);
			(void)m->read(m->ctx, a, buf, sizeof(buf));
		}
		walk_threads(c, t, n);
		core_free(c);
	}
	close(fd);
	return 0;
}
