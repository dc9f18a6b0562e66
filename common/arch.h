/*
 * What differs between the CPUs spy runs on, behind one small interface:
 * one file per architecture (common/arch-<cpu_family>.c, the one meson
 * picks for the host), nothing else in the tree tests the architecture.
 *
 *   - which ELF machine a core must be (spy reads cores of its own
 *     architecture: prstatus_t and its registers are the host's),
 *   - where user space ends (a bound for pointers read from a target),
 *   - a thread's general registers: from a stopped thread
 *     (PTRACE_GETREGSET NT_PRSTATUS) or from a core's NT_PRSTATUS note, in
 *     the kernel's elf_gregset_t layout either way, and each register in
 *     libunwind's numbering for that architecture,
 *   - the syscall a thread stopped in, from those registers (a core has no
 *     /proc/PID/task/TID/syscall to ask),
 *   - which bits of a return address hold a pointer authentication code,
 *   - what a call leaves for a walk to step past code without unwind
 *     tables (a JIT's): the registers a callee keeps, where a return
 *     address is saved, the call instructions a return address follows,
 *   - the spin-loop hint of the ticker's busy wait.
 */
#ifndef SPY_COMMON_ARCH_H
#define SPY_COMMON_ARCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/procfs.h>
#include <sys/types.h>

#include "common/mem.h"

/* The registers of one thread, as NT_PRSTATUS carries them. */
struct spy_regs {
	elf_gregset_t g;
};

/* e_machine of this architecture's cores (EM_X86_64, EM_AARCH64). */
uint16_t spy_arch_elf_machine(void);

/* The name Debian and the kernel give it (uname -m), for messages. */
const char *spy_arch_name(void);

/* The first address above user space: nothing a target points at is there. */
spy_addr_t spy_arch_user_end(void);

/* Read a ptrace-stopped thread's registers; -1 with errno set on failure. */
int spy_arch_get_regs(pid_t tid, struct spy_regs *r);

/* Register reg in libunwind's numbering (UNW_X86_64_*, UNW_AARCH64_*);
 * false for one the general registers do not hold (libunwind asks ptrace). */
bool spy_arch_unwind_reg(const struct spy_regs *r, int reg, uint64_t *val);

/*
 * The bits of a code address that carry a pointer authentication code in
 * tid's process (a ptrace-stopped thread): a return address read off the
 * stack is that with them cleared. 0 where nothing is signed (x86-64, an
 * arm64 CPU or kernel without it); -1 with errno set if it cannot be asked.
 */
int spy_arch_pac_mask(pid_t tid, uint64_t *mask);

/*
 * The same mask from a core: the note of type type (desc, len bytes) that
 * records it, the one its threads' registers come with (arm64's
 * NT_ARM_PAC_MASK); false for any other note (x86-64 has none).
 */
bool spy_arch_pac_note(uint32_t type, const void *desc, size_t len, uint64_t *mask);
/*
 * The mask for a core without that note (an older gdb's): every bit above
 * user space, which clears a signature from a return address and changes
 * nothing of an unsigned one. 0 where nothing is ever signed (x86-64).
 */
uint64_t spy_arch_pac_mask_unknown(void);

/* Set register reg (libunwind's numbering) of r; false for one the general registers do not hold. */
bool spy_arch_set_unwind_reg(struct spy_regs *r, int reg, uint64_t val);

/*
 * What calls leave on the stack and in registers, for stepping past a frame
 * without unwind tables to its caller (symbolize/unwind.c, a JIT's code).
 * Registers in libunwind's numbering.
 */
struct spy_arch_slot {
	uint8_t sp;        /* the caller's stack pointer is the slot's address + sp */
	bool record;       /* the word below the slot is the caller's frame pointer (a frame record) */
};
struct spy_arch_calls {
	const int *kept;          /* the registers a callee keeps for its caller, fp among them */
	size_t nkept;
	int pc;                   /* where libunwind reads a frame's pc (not UNW_REG_IP: that is x30 on arm64) */
	int fp;                   /* the frame pointer: a frame record {caller's fp, return address} */
	int lr;                   /* the link register a call leaves the return address in; -1: pushed */
	bool record_on_top;       /* a frame record is always at the top of its frame (caller's sp 16 above) */
	unsigned sp_align;        /* a caller's stack pointer at a call is a multiple of this */
	/* Where a callee saves a return address: the slots it may be in, most likely first. */
	const struct spy_arch_slot *slots;
	size_t nslots;
};
const struct spy_arch_calls *spy_arch_calls(void);

/* Whether code ending in the 8 bytes before (before[7] the last) ends in a call instruction. */
bool spy_arch_after_call(const uint8_t before[8]);

/* Reads len bytes of the thread's memory at addr; false if it cannot. */
typedef bool (*spy_arch_read_fn)(void *ctx, spy_addr_t addr, void *dst, size_t len);

/*
 * The syscall a stopped thread (a core's) was in: 1 with its number and
 * first two arguments, 0 if it was running user code, -1 if its registers
 * do not say (read, used where the registers alone cannot tell, may be
 * NULL: then -1 for such threads).
 */
int spy_arch_stopped_syscall(const struct spy_regs *r, spy_arch_read_fn read, void *ctx,
			     long *nr, uint64_t args[2]);

/* Tell the CPU this is a spin loop (it yields to a sibling hyperthread). */
void spy_arch_cpu_relax(void);

#endif
