/*
 * x86-64. elf_gregset_t is struct user_regs_struct, indexed by sys/reg.h.
 */
#include <elf.h>
#include <sys/ptrace.h>
#include <sys/reg.h>
#include <sys/uio.h>

#include "common/arch.h"

uint16_t spy_arch_elf_machine(void)
{
	return EM_X86_64;
}

const char *spy_arch_name(void)
{
	return "x86_64";
}

spy_addr_t spy_arch_user_end(void)
{
	/* 4-level paging; with 5-level pages the kernel still maps nothing
	 * above this unless a program asks with an mmap hint. */
	return 1ULL << 47;
}

int spy_arch_get_regs(pid_t tid, struct spy_regs *r)
{
	struct iovec io = { .iov_base = r->g, .iov_len = sizeof(r->g) };
	return ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_PRSTATUS, &io) == 0 ? 0 : -1;
}

int spy_arch_pac_mask(pid_t tid, uint64_t *mask)
{
	*mask = 0;
	return 0;
}

bool spy_arch_pac_note(uint32_t type, const void *desc, size_t len, uint64_t *mask)
{
	return false;
}

uint64_t spy_arch_pac_mask_unknown(void)
{
	return 0;
}

/* UNW_X86_64_RAX.. UNW_X86_64_RIP (libunwind-x86_64.h), which is also the DWARF numbering. */
static const unsigned char unwind_slot[] = {
	RAX, RDX, RCX, RBX, RSI, RDI, RBP, RSP, R8, R9, R10, R11, R12, R13, R14, R15, RIP,
};

bool spy_arch_unwind_reg(const struct spy_regs *r, int reg, uint64_t *val)
{
	if (reg < 0 || (size_t)reg >= sizeof(unwind_slot)) {
		return false;
	}
	*val = r->g[unwind_slot[reg]];
	return true;
}

bool spy_arch_set_unwind_reg(struct spy_regs *r, int reg, uint64_t val)
{
	if (reg < 0 || (size_t)reg >= sizeof(unwind_slot)) {
		return false;
	}
	r->g[unwind_slot[reg]] = val;
	return true;
}

const struct spy_arch_calls *spy_arch_calls(void)
{
	/*
	 * rbx, rbp, r12-r15 (the SysV ABI's callee-saved). A call pushes the
	 * return address, so the caller's rsp is just above it, and a callee
	 * that keeps a frame pointer pushes rbp right below it.
	 */
	static const int kept[] = { 3, 6, 12, 13, 14, 15 };
	static const struct spy_arch_slot slots[] = { { 8, false } };
	static const struct spy_arch_calls c = {
		.kept = kept, .nkept = 6, .pc = 16, .fp = 6, .lr = -1, .record_on_top = true, .sp_align = 16,
		.slots = slots, .nslots = 1,
	};
	return &c;
}

bool spy_arch_after_call(const uint8_t b[8])
{
	/* b[8 - k] is the byte k before the return address. E8 rel32: */
	if (b[3] == 0xe8) {
		return true;
	}
	/* FF /2 in any addressing form (a REX prefix before the FF changes nothing of where it ends). */
	for (size_t k = 2; k <= 7; k++) {
		uint8_t modrm = b[8 - k + 1];
		if (b[8 - k] != 0xff || ((modrm >> 3) & 7) != 2) {
			continue;
		}
		unsigned mod = modrm >> 6, rm = modrm & 7;
		size_t len = 2;
		if (mod != 3 && rm == 4) {
			if (k < 3) {
				continue;
			}
			len += 1 + (mod == 0 && (b[8 - k + 2] & 7) == 5 ? 4 : 0);
		}
		len += mod == 1 ? 1 : mod == 2 ? 4 : mod == 0 && rm == 5 ? 4 : 0;
		if (len == k) {
			return true;
		}
	}
	return false;
}

int spy_arch_stopped_syscall(const struct spy_regs *r, spy_arch_read_fn read, void *ctx,
			     long *nr, uint64_t args[2])
{
	/* The entry path saves the number in orig_rax, -1 when the thread
	 * was stopped in user code; the arguments stay in rdi, rsi. */
	*nr = (long)r->g[ORIG_RAX];
	args[0] = r->g[RDI];
	args[1] = r->g[RSI];
	return *nr < 0 ? 0 : 1;
}

void spy_arch_cpu_relax(void)
{
	__builtin_ia32_pause();
}
