/*
 * AArch64 (arm64). elf_gregset_t is struct user_pt_regs: x0..x30, sp, pc,
 * pstate.
 */
#include <elf.h>
#include <errno.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>

#include "common/arch.h"

enum { X0 = 0, X1 = 1, X8 = 8, PC = 32, PSTATE = 33 };

/* `svc #0`, the one instruction Linux syscalls enter by. */
#define INSN_SVC0 0xd4000001u

uint16_t spy_arch_elf_machine(void)
{
	return EM_AARCH64;
}

const char *spy_arch_name(void)
{
	return "aarch64";
}

spy_addr_t spy_arch_user_end(void)
{
	/* 48-bit virtual addresses (Debian's arm64 kernels); a 52-bit kernel
	 * maps nothing above this unless a program asks with an mmap hint. */
	return 1ULL << 48;
}

int spy_arch_get_regs(pid_t tid, struct spy_regs *r)
{
	struct iovec io = { .iov_base = r->g, .iov_len = sizeof(r->g) };
	return ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_PRSTATUS, &io) == 0 ? 0 : -1;
}

int spy_arch_pac_mask(pid_t tid, uint64_t *mask)
{
	/* struct user_pac_mask (asm/ptrace.h): what the kernel's keys sign. */
	uint64_t m[2] = { 0, 0 };
	struct iovec io = { .iov_base = m, .iov_len = sizeof(m) };
	*mask = 0;
	if (ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_ARM_PAC_MASK, &io) == 0) {
		*mask = m[1]; /* insn_mask: code addresses, return addresses among them */
		return 0;
	}
	/* The kernel offers the regset only where it enables address authentication. */
	return errno == EINVAL ? 0 : -1;
}

bool spy_arch_pac_note(uint32_t type, const void *desc, size_t len, uint64_t *mask)
{
	/* struct user_pac_mask again, as the kernel and gdb dump it. */
	uint64_t m[2];
	if (type != NT_ARM_PAC_MASK || len < sizeof(m)) {
		return false;
	}
	memcpy(m, desc, sizeof(m));
	*mask = m[1];
	return true;
}

uint64_t spy_arch_pac_mask_unknown(void)
{
	return ~(spy_arch_user_end() - 1);
}

bool spy_arch_unwind_reg(const struct spy_regs *r, int reg, uint64_t *val)
{
	/* UNW_AARCH64_X0..X30, SP, PC, PSTATE (libunwind-aarch64.h) are
	 * numbered as user_pt_regs lays them out. */
	if (reg < X0 || reg > PSTATE) {
		return false;
	}
	*val = r->g[reg];
	return true;
}

bool spy_arch_set_unwind_reg(struct spy_regs *r, int reg, uint64_t val)
{
	if (reg < X0 || reg > PSTATE) {
		return false;
	}
	r->g[reg] = val;
	return true;
}

const struct spy_arch_calls *spy_arch_calls(void)
{
	/*
	 * x19-x29 (AAPCS64's callee-saved). A call leaves the return address
	 * in x30; a callee that calls on saves it, where in its frame its
	 * compiler chooses (gcc puts the frame record low, clang high). Code
	 * without unwind tables saves it at the top: alone in a 16-byte slot
	 * (CPython 3.15's JIT), or as a frame record with x29 below it (3.14's).
	 */
	static const int kept[] = { 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29 };
	static const struct spy_arch_slot slots[] = { { 16, false }, { 8, true } };
	static const struct spy_arch_calls c = {
		.kept = kept, .nkept = 11, .pc = 32, .fp = 29, .lr = 30, .record_on_top = false, .sp_align = 16,
		.slots = slots, .nslots = 2,
	};
	return &c;
}

bool spy_arch_after_call(const uint8_t b[8])
{
	uint32_t insn = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
	return (insn & 0xfc000000u) == 0x94000000u ||  /* BL imm26 */
	       (insn & 0xfffffc1fu) == 0xd63f0000u ||  /* BLR Xn */
	       (insn & 0xfefff800u) == 0xd63f0800u;    /* BLRAA, BLRAB, BLRAAZ, BLRABZ */
}

int spy_arch_stopped_syscall(const struct spy_regs *r, spy_arch_read_fn read, void *ctx,
			     long *nr, uint64_t args[2])
{
	/*
	 * There is no orig_x0/syscallno in NT_PRSTATUS, and the signal that
	 * stopped the thread (gcore's SIGSTOP, the kernel's dump) cleared the
	 * kernel's own record. But that signal delivery rewound an interrupted
	 * syscall for its restart: pc is back on the `svc`, x0 holds the first
	 * argument again, and x8 still the number. So a thread whose pc is on
	 * an `svc` was in that syscall, any other was running user code.
	 */
	uint32_t insn;
	if (!read || !read(ctx, (spy_addr_t)r->g[PC], &insn, sizeof(insn))) {
		return -1;
	}
	if (insn != INSN_SVC0) {
		return 0;
	}
	*nr = (long)r->g[X8];
	args[0] = r->g[X0];
	args[1] = r->g[X1];
	return 1;
}

void spy_arch_cpu_relax(void)
{
	__asm__ __volatile__("yield");
}
