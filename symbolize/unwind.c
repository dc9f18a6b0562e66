/*
 * Remote unwinding with libunwind-ptrace.
 *
 * One address space per process, with libunwind's global caching on: its
 * register-state cache is keyed by pc, so once a stack has been seen a step
 * costs a hash probe instead of a search of .eh_frame_hdr, and that is what
 * keeps a sample of a deep native stack cheap. Each walk gets a fresh
 * _UPT_create(tid) for the thread's registers.
 *
 * The design decision: _UPT's accessors read target memory a word at a time
 * with PTRACE_PEEKDATA, one syscall per word. We wrap them and send stack
 * reads to spy's memory reader instead (process_vm_readv behind a per-pause
 * page cache). The catch is that _UPT_find_proc_info passes its own argument
 * (the _UPT_info) down to access_mem for the unwind tables, so access_mem
 * sees two kinds of argument: ours starts with a magic word that no
 * _UPT_info can start with (its first field is a pid), and anything else is
 * handed back to _UPT_access_mem. That path runs only on cache misses.
 * Registers likewise: one PTRACE_GETREGSET per walk serves them all
 * (common/arch.h), where _UPT would issue a ptrace call per register read.
 * A core's thread is walked the same way from the registers its
 * NT_PRSTATUS saved: with that snapshot and the core's memory there is
 * nothing left to ask ptrace, so no _UPT_info is made at all, and the
 * stacks of a core and of the live process it was agree by construction.
 *
 * The unwind tables are found in the target's memory, not in files.
 * _UPT_find_proc_info opens the path /proc/PID/maps gives under
 * /proc/PID/root: wrong for a chroot (the path already carries the prefix,
 * so nothing is found and every stack is one frame), wrong for a library
 * replaced on disk, and a FIFO planted at that path would hang us with the
 * target stopped. Yet everything it needs is mapped: the ELF header and
 * program headers sit at the start of the file's first mapping, and
 * PT_GNU_EH_FRAME points at .eh_frame_hdr, whose binary-search table
 * libunwind searches through our access_mem anyway. So find_proc_info
 * locates the table from memory and hands it to libunwind's table search
 * (dwarf_search_unwind_table: not in libunwind's headers, but exported, and
 * what libunwind-ptrace itself calls). Objects without .eh_frame_hdr (only
 * .debug_frame) are not unwound through; distro binaries all have it.
 *
 * Signed return addresses (arm64 pointer authentication, -mbranch-protection
 * =pac-ret: Debian's arm64 builds since trixie, sid's Pythons among them). A
 * function that signs its return address says so in its CFI with
 * DW_CFA_AARCH64_negate_ra_state (0x2d, elsewhere SPARC's
 * DW_CFA_GNU_window_save). libunwind before 1.7 (Debian 12 ships 1.6.2)
 * knows no such opcode on arm64 and fails the step, so every walk ends in
 * the first such frame; and the address read back is signed, which only
 * 1.7 and later clear. spy does both itself, the same way on every
 * libunwind: find_proc_info decodes the CIE's and FDE's programs of the
 * function libunwind is about to interpret and notes where that opcode
 * sits; access_mem hands those bytes over as DW_CFA_nop; and after each
 * step the walk clears the authentication code (the kernel's mask) from
 * the return address. The sign state itself is never needed: the mask
 * clears the code from a signed address and changes nothing of an unsigned
 * one. x86-64 code never carries the opcode, so there the decoding finds
 * nothing and the mask is 0.
 */
#include <dwarf.h>
#include <elf.h>
#include <libunwind-ptrace.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/arch.h"
#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "symbolize/symbolize.h"

/* Low half negative as a pid_t: a _UPT_info (pid first) never matches it. */
#define WALK_MAGIC 0xfeedfacef00dbeefull

/* libunwind's default is 2^7 pcs; a profile touches far more distinct pcs. */
#define UNWIND_CACHE_LOG2 12
/* Loaded objects whose unwind table is remembered; past this, the oldest is replaced. */
#define MAX_TABLES 512
/* An ELF header claiming more program headers than this is not a real object. */
#define MAX_PHDRS 256
/* negate_ra_state opcodes kept of one function's CFI (gcc: one per prologue and epilogue). */
#define MAX_RA_OPS 64

/* The table search libunwind-ptrace uses (see above). */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);

/* The unwind table of one loaded object, keyed by where its file starts. */
struct table {
	spy_addr_t base;      /* its mapping at file offset 0 */
	uint64_t dev, inode;
	unw_dyn_info_t di;    /* format -1: the object has no usable table */
};

struct sym_unwinder {
	unw_addr_space_t as;
	struct table tables[MAX_TABLES];
	size_t ntables, next;
	bool pac_known;     /* pac_mask read from the process (it is the same for every thread) */
	uint64_t pac_mask;  /* spy_arch_pac_mask: cleared from every return address */
};

/* The argument of one walk, given to every accessor. */
struct walk {
	uint64_t magic;
	void *upt;                   /* NULL: a core's thread, saved registers only */
	struct sym_unwinder *u;
	const struct spy_mem *mem;
	int32_t tid;
	const spy_addr_t *anchors;   /* the Python stack's entry frames (sym_unwind) */
	size_t nanchors;
	int jit_steps;               /* JIT frames stepped past so far */
	int regs_state;   /* 0: not read yet, 1: read, -1: PTRACE_GETREGSET failed */
	struct spy_regs regs;
	/* Where the CFI libunwind is interpreting has negate_ra_state (see above; symbolize/cfi.c). */
	spy_addr_t ra_ops[MAX_RA_OPS];
	size_t nra_ops;
	spy_addr_t ra_lo, ra_hi;     /* bounds of ra_ops[], for a cheap test in access_mem */
};

static struct walk *as_walk(void *arg)
{
	uint64_t head;
	memcpy(&head, arg, sizeof(head));
	return head == WALK_MAGIC ? arg : NULL;
}

/* The _UPT_info to forward to: ours wraps one, theirs is one. */
static void *upt_of(void *arg)
{
	struct walk *w = as_walk(arg);
	return w ? w->upt : arg;
}

/* The mapping at file offset 0 of the object m belongs to (at or before m in the sorted maps). */
static const struct spy_map *object_start(const struct spy_mem *mem, const struct spy_map *m)
{
	for (size_t i = (size_t)(m - mem->maps) + 1; i-- > 0;) {
		const struct spy_map *b = &mem->maps[i];
		if (b->inode != m->inode || b->dev != m->dev || strcmp(b->path, m->path) != 0) {
			break;
		}
		if (b->offset == 0) {
			return b;
		}
	}
	return NULL;
}

/* Read a value of DWARF pointer encoding enc (absolute or pc-relative data forms only) at *p. */
static bool read_encoded(const struct spy_mem *mem, spy_addr_t *p, uint8_t enc, uint64_t *out)
{
	union {
		uint32_t u4;
		int32_t s4;
		uint64_t u8;
	} v;
	spy_addr_t at = *p;
	size_t len;
	switch (enc & 0x0f) {
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		len = 4;
		break;
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		len = 8;
		break;
	default:
		return false;
	}
	if ((enc & 0x70) != 0 && (enc & 0x70) != DW_EH_PE_pcrel) {
		return false;
	}
	if (spy_mem_read(mem, at, &v, len) < 0) {
		return false;
	}
	uint64_t val = len == 8 ? v.u8 : (enc & 0x0f) == DW_EH_PE_sdata4 ? (uint64_t)(int64_t)v.s4 : v.u4;
	if ((enc & 0x70) == DW_EH_PE_pcrel) {
		val += at;
	}
	*out = val;
	*p = at + len;
	return true;
}

/*
 * The table of the object whose file starts at base, from its headers in
 * memory: false (and di->format -1) if something does not add up.
 */
static bool load_table(const struct spy_mem *mem, spy_addr_t base, unw_dyn_info_t *di)
{
	Elf64_Ehdr eh;
	memset(di, 0, sizeof(*di));
	di->format = -1;
	if (spy_mem_read(mem, base, &eh, sizeof(eh)) < 0 || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_phnum > MAX_PHDRS || eh.e_phoff > UINT32_MAX) {
		return false;
	}
	uint64_t lo = UINT64_MAX, hi = 0, eh_frame = 0;
	bool have_eh = false;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		if (spy_mem_read(mem, base + eh.e_phoff + i * sizeof(ph), &ph, sizeof(ph)) < 0) {
			return false;
		}
		if (ph.p_type == PT_LOAD && ph.p_memsz < (1ull << 40) && ph.p_vaddr < (1ull << 47)) {
			lo = ph.p_vaddr < lo ? ph.p_vaddr : lo;
			hi = ph.p_vaddr + ph.p_memsz > hi ? ph.p_vaddr + ph.p_memsz : hi;
		} else if (ph.p_type == PT_GNU_EH_FRAME) {
			eh_frame = ph.p_vaddr;
			have_eh = true;
		}
	}
	if (!have_eh || lo >= hi) {
		return false;
	}
	/* The first PT_LOAD is mapped at base, page-aligned (cpython-internals.md 1.2). */
	uint64_t bias = base - (lo & ~(uint64_t)0xfff);
	spy_addr_t hdr = bias + eh_frame;
	uint8_t h[4];
	if (spy_mem_read(mem, hdr, h, sizeof(h)) < 0 || h[0] != 1 ||
	    h[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4)) {
		return false;
	}
	spy_addr_t p = hdr + 4;
	uint64_t eh_frame_ptr, count;
	if (!read_encoded(mem, &p, h[1], &eh_frame_ptr) || !read_encoded(mem, &p, h[2], &count) ||
	    count > SYM_CFI_MAX_TABLE) {
		return false;
	}
	di->format = UNW_INFO_FORMAT_REMOTE_TABLE;
	di->start_ip = bias + lo;
	di->end_ip = bias + hi;
	/* DT_PLTGOT-relative FDE pointers: x86-64 compilers do not emit them. */
	di->gp = 0;
	di->u.rti.name_ptr = 0;
	di->u.rti.segbase = hdr;
	di->u.rti.table_len = count * 8 / sizeof(unw_word_t);
	di->u.rti.table_data = p;
	return true;
}

/* The remembered table of the object holding ip, loading it on first use; NULL if none. */
static const unw_dyn_info_t *table_for(struct sym_unwinder *u, const struct spy_mem *mem,
				       unw_word_t ip)
{
	const struct spy_map *m = spy_mem_find_map(mem, ip);
	/* The vDSO is an ELF image in memory like any other (a clock read stops there often). */
	const struct spy_map *b = m && (m->path[0] == '/' || !strcmp(m->path, "[vdso]"))
					  ? object_start(mem, m)
					  : NULL;
	if (!b) {
		return NULL;
	}
	struct table *t = NULL;
	for (size_t i = 0; i < u->ntables && !t; i++) {
		struct table *c = &u->tables[i];
		if (c->base == b->lo && c->inode == b->inode && c->dev == b->dev) {
			t = c;
		}
	}
	if (!t) {
		t = u->ntables < MAX_TABLES ? &u->tables[u->ntables++] : &u->tables[u->next++ % MAX_TABLES];
		*t = (struct table){ .base = b->lo, .dev = b->dev, .inode = b->inode };
		if (!load_table(mem, b->lo, &t->di)) {
			spy_log(SPY_LOG_DEBUG, "unwind: no .eh_frame_hdr found in memory for %s", b->path);
		}
	}
	return t->di.format != -1 && ip >= t->di.start_ip && ip < t->di.end_ip ? &t->di : NULL;
}

static int acc_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi, int need,
			      void *arg)
{
	struct walk *w = as_walk(arg);
	const unw_dyn_info_t *di = w ? table_for(w->u, w->mem, ip) : NULL;
	if (!di) {
		return -UNW_ENOINFO;
	}
	unw_dyn_info_t copy = *di;
	int rc = UNW_OBJ(dwarf_search_unwind_table)(as, ip, &copy, pi, need, arg);
	/* libunwind interprets the programs next, reading them through access_mem. */
	w->nra_ops = 0;
	if (rc >= 0 && need) {
		w->nra_ops = sym_cfi_ra_state_ops(w->mem, di->u.rti.segbase, di->u.rti.table_data,
						  di->u.rti.table_len * sizeof(unw_word_t) / 8, ip,
						  w->ra_ops, MAX_RA_OPS);
		for (size_t i = 0; i < w->nra_ops; i++) {
			if (i == 0 || w->ra_ops[i] < w->ra_lo) {
				w->ra_lo = w->ra_ops[i];
			}
			if (i == 0 || w->ra_ops[i] >= w->ra_hi) {
				w->ra_hi = w->ra_ops[i] + 1;
			}
		}
	}
	return rc;
}

static void acc_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	_UPT_put_unwind_info(as, pi, upt_of(arg));
}

static int acc_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	void *upt = upt_of(arg);
	return upt ? _UPT_get_dyn_info_list_addr(as, addr, upt) : -UNW_ENOINFO;
}

static int acc_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
			  void *arg)
{
	struct walk *w = as_walk(arg);
	if (!w) {
		return _UPT_access_mem(as, addr, val, write, arg);
	}
	/* An unwinder only reads; never write into the target. */
	if (write) {
		return -UNW_EINVAL;
	}
	if (spy_mem_read(w->mem, addr, val, sizeof(*val)) < 0) {
		return -UNW_EINVAL;
	}
	if (w->nra_ops && addr < w->ra_hi && addr + sizeof(*val) > w->ra_lo) {
		/* The bytes as read, so an opcode's index is its offset whatever the byte order. */
		uint8_t *b = (uint8_t *)val;
		for (size_t i = 0; i < w->nra_ops; i++) {
			if (w->ra_ops[i] - addr < sizeof(*val)) {
				b[w->ra_ops[i] - addr] = DW_CFA_nop;
			}
		}
	}
	return 0;
}

/* The general registers from one GETREGSET snapshot; false for others or if it failed. */
static bool snapshot_reg(struct walk *w, unw_regnum_t reg, unw_word_t *val)
{
	if (w->regs_state == 0) {
		w->regs_state = spy_arch_get_regs(w->tid, &w->regs) == 0 ? 1 : -1;
	}
	uint64_t v;
	if (w->regs_state < 0 || !spy_arch_unwind_reg(&w->regs, reg, &v)) {
		return false;
	}
	*val = v;
	return true;
}

static int acc_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
			  void *arg)
{
	if (write) {
		return -UNW_EINVAL;
	}
	struct walk *w = as_walk(arg);
	if (w && snapshot_reg(w, reg, val)) {
		return 0;
	}
	void *upt = upt_of(arg);
	return upt ? _UPT_access_reg(as, reg, val, write, upt) : -UNW_EBADREG;
}

static int acc_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			    void *arg)
{
	if (write) {
		return -UNW_EINVAL;
	}
	void *upt = upt_of(arg);
	return upt ? _UPT_access_fpreg(as, reg, val, write, upt) : -UNW_EBADREG;
}

/* Resuming the target from the unwinder would run it behind the sampler's back. */
static int acc_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	return -UNW_EINVAL;
}

/* Names come from symbolize/native.c; _UPT's would open the file by its maps path. */
static int acc_get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			     unw_word_t *off, void *arg)
{
	return -UNW_ENOINFO;
}

int sym_unwinder_new(struct sym_unwinder **out, struct spy_err *err)
{
	unw_accessors_t acc = {
		.find_proc_info = acc_find_proc_info,
		.put_unwind_info = acc_put_unwind_info,
		.get_dyn_info_list_addr = acc_get_dyn_info_list_addr,
		.access_mem = acc_access_mem,
		.access_reg = acc_access_reg,
		.access_fpreg = acc_access_fpreg,
		.resume = acc_resume,
		.get_proc_name = acc_get_proc_name,
	};
	*out = NULL;
	unw_addr_space_t as = unw_create_addr_space(&acc, 0);
	if (!as) {
		return spy_err_set(err, SPY_EIO, "libunwind: cannot create an address space");
	}
	unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
	unw_set_cache_size(as, 1u << UNWIND_CACHE_LOG2, 0);
	struct sym_unwinder *u = spy_xcalloc(1, sizeof(*u));
	u->as = as;
	*out = u;
	return 0;
}

void sym_unwinder_free(struct sym_unwinder *u)
{
	if (!u) {
		return;
	}
	unw_destroy_addr_space(u->as);
	free(u);
}

/*
 * Code in anonymous executable memory: what a JIT wrote (CPython 3.13+'s
 * experimental JIT, perf trampolines). It has no unwind tables, and the
 * frame-pointer guess libunwind falls back on is wrong for 3.14's JIT
 * (rbp there is still the eval loop's), so such a frame is stepped past
 * here: to its caller's return address, found through the frame pointer
 * (a JIT built with them, 3.15) or else by scanning the stack above it,
 * and accepted only if the frame it leads to holds the entry frame CPython
 * keeps in the eval call that called the JIT code (the first anchor above
 * the JIT frame): the JIT runs inside that eval call's frame, nowhere else.
 */
/* Stack scanned above a JIT frame for its caller's return address. */
#define JIT_SCAN_BYTES 16384
/* Candidate return addresses tried past one JIT frame. */
#define JIT_MAX_TRIES 32
/* Callers of a candidate checked to be return addresses too. */
#define JIT_CHECK_CALLERS 3
/* JIT frames stepped past in one walk (each costs up to a stack scan). */
#define JIT_MAX_PER_WALK 8
/* Frame records followed from one JIT frame. */
#define JIT_MAX_RECORDS 8

bool sym_is_jit_pc(const struct spy_mem *mem, spy_addr_t pc)
{
	const struct spy_map *m = spy_mem_find_map(mem, pc);
	return m && sym_map_is_jit(m);
}

/*
 * Whether ret could be a return address: in the code of a mapped file, right
 * after a call instruction (spy_arch_after_call).
 */
static bool returns_into_code(const struct spy_mem *mem, spy_addr_t ret)
{
	const struct spy_map *m = spy_mem_find_map(mem, ret);
	uint8_t b[8];
	return m && m->path[0] == '/' && (m->perms & SPY_MAP_X) && ret - m->lo >= sizeof(b) &&
	       spy_mem_read(mem, ret - sizeof(b), b, sizeof(b)) == 0 && spy_arch_after_call(b);
}

/*
 * Clear the authentication code from the return address a step just read.
 * libunwind keeps it as the cursor's ip, which the next step looks its
 * unwind info up by. Setting the ip updates that first; libunwind then
 * also tries to write the value back where it was saved, which the
 * accessors refuse, as they refuse every write: that failure is expected.
 */
static void clear_pac(struct walk *w, unw_cursor_t *cur)
{
	unw_word_t ip;
	if (w->u->pac_mask && unw_get_reg(cur, UNW_REG_IP, &ip) == 0 && (ip & w->u->pac_mask)) {
		(void)unw_set_reg(cur, UNW_REG_IP, ip & ~w->u->pac_mask);
	}
}

/*
 * Restart the walk at a frame with pc ip, stack pointer sp and frame pointer
 * fp (the other registers a callee keeps as base has them), if ip looks like
 * a return address and, with an anchor, the frame it starts holds it, or
 * that frame's caller does: a shim with unwind tables may sit between the
 * JIT code and the eval loop (3.15's _PyJIT_Entry).
 */
static bool try_caller(struct walk *w, unw_cursor_t *cur, const struct spy_regs *base,
		       spy_addr_t ip, spy_addr_t sp, spy_addr_t fp, spy_addr_t anchor, int *tries)
{
	ip &= ~w->u->pac_mask;
	if (sp % spy_arch_calls()->sp_align || !returns_into_code(w->mem, ip)) {
		return false;
	}
	(*tries)++;
	w->regs = *base;
	(void)spy_arch_set_unwind_reg(&w->regs, spy_arch_calls()->pc, ip);
	(void)spy_arch_set_unwind_reg(&w->regs, UNW_REG_SP, sp);
	(void)spy_arch_set_unwind_reg(&w->regs, spy_arch_calls()->fp, fp);
	w->regs_state = 1;
	if (unw_init_remote(cur, w->u->as, w) < 0) {
		return false;
	}
	if (!anchor) {
		return true;
	}
	/*
	 * A cursor is plain data: a copy steps on its own. A stale return
	 * address left in the JIT frame's slots can pass the anchor test by
	 * chance; the walk it starts soon leaves the code, so the callers it
	 * leads to must look like return addresses too.
	 */
	unw_cursor_t probe = *cur;
	unw_word_t lo = sp, hi, caller_ip;
	bool held = false;
	for (int i = 0; i < 2 + JIT_CHECK_CALLERS; i++) {
		int rc = unw_step(&probe);
		if (rc <= 0) {
			return held;
		}
		clear_pac(w, &probe);
		if (unw_get_reg(&probe, UNW_REG_SP, &hi) < 0 || unw_get_reg(&probe, UNW_REG_IP, &caller_ip) < 0 ||
		    !returns_into_code(w->mem, caller_ip)) {
			return false;
		}
		if (!held) {
			if (i == 2 || hi <= lo || anchor < lo) {
				return false;
			}
			held = anchor < hi;
			lo = hi;
		}
	}
	return held;
}

/*
 * The caller found at slot s may keep its frame pointer as the CFA's base
 * (3.14's eval loop on x86-64 does), and the JIT code may have used the
 * frame pointer register for its own ends after saving the caller's among
 * its slots [sp, s): the caller's then is one of those words, above the
 * anchor (the anchor is a local of that frame, below where its frame
 * pointer points).
 */
static bool try_saved_fp(struct walk *w, unw_cursor_t *cur, const struct spy_regs *base,
			 spy_addr_t ret, spy_addr_t sp, spy_addr_t s, spy_addr_t caller_sp,
			 spy_addr_t base_fp, spy_addr_t anchor, int *tries)
{
	if (!anchor) {
		return false;
	}
	for (spy_addr_t at = s; at > sp && *tries < JIT_MAX_TRIES;) {
		at -= 8;
		spy_addr_t fp;
		if (spy_mem_read(w->mem, at, &fp, sizeof(fp)) < 0) {
			return false;
		}
		if (fp > anchor && fp - anchor < JIT_SCAN_BYTES && fp != base_fp &&
		    try_caller(w, cur, base, ret, caller_sp, fp, anchor, tries)) {
			return true;
		}
	}
	return false;
}

/* step_past_jit's candidates, in order; 0 when one was taken. */
static int jit_callers(struct walk *w, unw_cursor_t *cur, const struct spy_regs *base, spy_addr_t sp,
		       spy_addr_t end, spy_addr_t base_fp, spy_addr_t lr, spy_addr_t anchor, int *tries)
{
	const struct spy_arch_calls *a = spy_arch_calls();
	spy_addr_t fp = base_fp, rec[2];
	for (int i = 0; a->record_on_top && i < JIT_MAX_RECORDS && fp >= sp && fp < end && !(fp & 7) &&
			spy_mem_read(w->mem, fp, rec, sizeof(rec)) == 0; i++) {
		if (!sym_is_jit_pc(w->mem, rec[1] & ~w->u->pac_mask)) {
			if (try_caller(w, cur, base, rec[1], fp + 16, rec[0], anchor, tries)) {
				return 0;
			}
			break;
		}
		if (rec[0] <= fp) {
			break;
		}
		fp = rec[0];
	}
	if (lr && try_caller(w, cur, base, lr, sp, base_fp, anchor, tries)) {
		return 0;
	}
	spy_addr_t below = 0;
	for (spy_addr_t s = sp; s < end && *tries < JIT_MAX_TRIES; s += 8) {
		spy_addr_t ret;
		if (spy_mem_read(w->mem, s, &ret, sizeof(ret)) < 0) {
			break;
		}
		for (size_t k = 0; k < a->nslots; k++) {
			const struct spy_arch_slot *sl = &a->slots[k];
			if ((!sl->record || s > sp) &&
			    try_caller(w, cur, base, ret, s + sl->sp, sl->record ? below : base_fp, anchor, tries)) {
				return 0;
			}
		}
		if (a->record_on_top &&
		    try_saved_fp(w, cur, base, ret, sp, s, s + a->slots[0].sp, base_fp, anchor, tries)) {
			return 0;
		}
		below = ret;
	}
	return -1;
}

/*
 * Move cur from a JIT frame whose stack pointer is sp to its caller; -1 if
 * not found. innermost: the frame is the thread's own (its link register,
 * where there is one, is live). In order: where frame records sit at the
 * top of their frames (x86-64), the records the frame pointer chains, past
 * those whose return address is in JIT code too; the link register; then
 * each stack slot above sp as a saved return address, nearest first.
 */
static int step_past_jit(struct walk *w, unw_cursor_t *cur, spy_addr_t sp, bool innermost)
{
	if (++w->jit_steps > JIT_MAX_PER_WALK) {
		return -1;
	}
	const struct spy_arch_calls *a = spy_arch_calls();
	struct spy_regs base;
	memset(&base, 0, sizeof(base));
	for (size_t i = 0; i < a->nkept; i++) {
		unw_word_t v;
		if (unw_get_reg(cur, a->kept[i], &v) == 0) {
			(void)spy_arch_set_unwind_reg(&base, a->kept[i], v);
		}
	}
	unw_word_t base_fp = 0, lr = 0;
	(void)unw_get_reg(cur, a->fp, &base_fp);
	if (innermost && a->lr >= 0 && unw_get_reg(cur, a->lr, &lr) < 0) {
		lr = 0;
	}
	spy_addr_t anchor = 0;
	for (size_t i = 0; i < w->nanchors; i++) {
		if (w->anchors[i] > sp && (!anchor || w->anchors[i] < anchor)) {
			anchor = w->anchors[i];
		}
	}
	spy_addr_t end = anchor && anchor - sp < JIT_SCAN_BYTES ? anchor : sp + JIT_SCAN_BYTES;
	int tries = 0;
	int rc = jit_callers(w, cur, &base, sp, end, base_fp, lr, anchor, &tries);
	spy_log(SPY_LOG_TRACE, "unwind %d: JIT frame at sp 0x%llx (anchor 0x%llx): %s after %d tries", (int)w->tid,
		(unsigned long long)sp, (unsigned long long)anchor, rc == 0 ? "caller found" : "no caller", tries);
	return rc;
}

/* The walk proper, once the cursor is set up. */
static int walk_frames(struct walk *w, unw_cursor_t *cur, spy_addr_t *pcs, spy_addr_t *sps,
		       size_t max, size_t *n)
{
	for (;;) {
		unw_word_t ip, sp;
		if (unw_get_reg(cur, UNW_REG_IP, &ip) < 0 || unw_get_reg(cur, UNW_REG_SP, &sp) < 0) {
			return -SPY_EMEM;
		}
		if (ip == 0) {
			return 0;
		}
		if (*n >= max) {
			return -SPY_EBOUND;
		}
		pcs[*n] = ip;
		sps[(*n)++] = sp;
		/*
		 * A pc in no mapping at all is in memory mapped since the maps
		 * were read: in a Python process, most likely code the JIT has
		 * just written. Stepped past the same way, but only where an
		 * anchor can confirm the step.
		 */
		const struct spy_map *m = spy_mem_find_map(w->mem, ip);
		if (m ? sym_map_is_jit(m) : w->nanchors > 0) {
			if (step_past_jit(w, cur, sp, *n == 1) < 0) {
				return *n > 1 ? 0 : -SPY_EMEM;
			}
			continue;
		}
		int rc = unw_step(cur);
		if (rc == 0) {
			return 0;
		}
		if (rc < 0) {
			/*
			 * A step that fails below a frame whose unwind info is
			 * missing (the thread's start routine) is the usual end
			 * of a stack without a terminating frame record.
			 */
			return *n > 1 ? 0 : -SPY_EMEM;
		}
		clear_pac(w, cur);
	}
}

int sym_unwind(struct sym_unwinder *u, const struct spy_mem *mem, int32_t tid,
	       const struct sym_saved_regs *saved, const spy_addr_t *anchors, size_t nanchors,
	       spy_addr_t *pcs, spy_addr_t *sps, size_t max, size_t *n)
{
	*n = 0;
	if (max > SPY_MAX_NATIVE_DEPTH) {
		max = SPY_MAX_NATIVE_DEPTH;
	}
	if (tid <= 0) {
		return -SPY_EMEM;
	}
	struct walk w = { .magic = WALK_MAGIC, .u = u, .mem = mem, .tid = tid,
			  .anchors = anchors, .nanchors = nanchors };
	if (saved) {
		/* Everything a walk reads is in the snapshot and mem: no ptrace at all. */
		w.regs = *saved->regs;
		w.regs_state = 1;
		u->pac_mask = saved->pac_mask;
		u->pac_known = true;
	} else if (!(w.upt = _UPT_create(tid))) {
		return -SPY_EMEM;
	}
	if (!u->pac_known) {
		uint64_t mask;
		if (spy_arch_pac_mask(tid, &mask) == 0) {
			u->pac_mask = mask;
			u->pac_known = true;
		}
	}
	unw_cursor_t cur;
	int rc = unw_init_remote(&cur, u->as, &w);
	if (rc < 0) {
		spy_log(SPY_LOG_TRACE, "unwind %d: init failed (%d)", (int)tid, rc);
		rc = -SPY_EMEM;
	} else {
		rc = walk_frames(&w, &cur, pcs, sps, max, n);
	}
	if (w.upt) {
		_UPT_destroy(w.upt);
	}
	return rc;
}
