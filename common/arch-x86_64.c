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

bool spy_arch_unwind_reg(const struct spy_regs *r, int reg, uint64_t *val)
{
	/* UNW_X86_64_RAX.. UNW_X86_64_RIP (libunwind-x86_64.h), which is also the DWARF numbering. */
	static const unsigned char slot[] = {
		RAX, RDX, RCX, RBX, RSI, RDI, RBP, RSP, R8,
		R9,  R10, R11, R12, R13, R14, R15, RIP,
	};
	if (reg < 0 || (size_t)reg >= sizeof(slot)) {
		return false;
	}
	*val = r->g[slot[reg]];
	return true;
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
