/*
 * symbolize: ELF symbols (libelf), native unwinding (libunwind), native
 * symbols with DWARF inlines (libdw), and the splicing of Python frames into
 * native stacks. It knows nothing of CPython structures: cmd asks it for the
 * addresses of named symbols and sections and hands them to pystate as
 * hints, and hands it Python frames as spy_frames to merge.
 */
#ifndef SPY_SYMBOLIZE_SYMBOLIZE_H
#define SPY_SYMBOLIZE_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/sample.h"
#include "common/strtab.h"

/* One ELF file opened for symbol look-ups. */
struct sym_elf;

/*
 * Read the ELF file open on fd (from spy_open_mapped or a core's rules;
 * the sym_elf owns it from here, success or not), path naming it in
 * messages. -SPY_EFORMAT if not ELF.
 */
int sym_elf_open(struct sym_elf **out, int fd, const char *path, struct spy_err *err);
void sym_elf_free(struct sym_elf *e);

/* st_value of the defined symbol name, from .dynsym or else .symtab. */
bool sym_elf_lookup(const struct sym_elf *e, const char *name, uint64_t *value);
/* sh_addr and sh_size of the named section. */
bool sym_elf_section(const struct sym_elf *e, const char *name, uint64_t *addr, uint64_t *size);

/*
 * The load bias of e in a process: the start of the mapping of path at file
 * offset 0 minus the lowest PT_LOAD p_vaddr rounded down to a page. A
 * symbol's runtime address is bias + st_value. false if path is not mapped.
 */
bool sym_elf_bias(const struct sym_elf *e, const struct spy_map *maps, size_t nmaps,
		  const char *path, uint64_t *bias);

/*
 * Native stacks (unwind.c with cfi.c, native.c, merge.c). The pieces are separate so
 * that the stopped window holds only the unwind: sym_unwind() runs while the
 * thread is ptrace-stopped and yields raw pcs; symbol look-up and merging
 * happen after the target runs again.
 */

/*
 * A remote unwinder for one process: a libunwind address space, created once
 * with its caches on and reused for every thread and sample. Registers come
 * from ptrace (the thread must be stopped by the calling thread, which must
 * be the tracer); memory comes through the spy_mem passed to sym_unwind, so
 * a paused sampler's page cache serves the stack reads.
 */
struct sym_unwinder;

int sym_unwinder_new(struct sym_unwinder **out, struct spy_err *err);
void sym_unwinder_free(struct sym_unwinder *u);
struct spy_regs;
/* A thread's registers saved elsewhere (a core's NT_PRSTATUS) and the pac
 * mask of its process (spy_arch_pac_note), for a walk without ptrace. */
struct sym_saved_regs {
	const struct spy_regs *regs;
	uint64_t pac_mask;
};
/*
 * Walk tid's stack (its registers from saved if not NULL, else from
 * ptrace) into pcs (innermost first; pcs[0] is the current pc, the
 * rest are return addresses) and sps (each frame's stack pointer: frame j
 * spans [sps[j], sps[j + 1]) of the stack), at most max (and
 * SPY_MAX_NATIVE_DEPTH) entries; *n is how many. anchors[0..nanchors) are
 * the thread's Python entry frames (pyrt_stack_anchors), or none: they
 * confirm where a frame in JIT code returns to (see step_past_jit).
 * Returns 0 when the walk reached the outermost frame (or a frame it cannot
 * step past), -SPY_EBOUND when it was cut by max, -SPY_EMEM when libunwind
 * could not start or a step failed (*n then holds what was walked, maybe 0).
 */
int sym_unwind(struct sym_unwinder *u, const struct spy_mem *mem, int32_t tid,
	       const struct sym_saved_regs *saved, const spy_addr_t *anchors, size_t nanchors,
	       spy_addr_t *pcs, spy_addr_t *sps, size_t max, size_t *n);
/* Whether m is anonymous executable memory: code a JIT wrote. */
static inline bool sym_map_is_jit(const struct spy_map *m)
{
	return !m->path[0] && (m->perms & SPY_MAP_X);
}
/* Whether pc lies in such memory. */
bool sym_is_jit_pc(const struct spy_mem *mem, spy_addr_t pc);

/* More entries than this, and an .eh_frame_hdr table is not a real one. */
#define SYM_CFI_MAX_TABLE (1u << 24)
/*
 * Where the CFI of the function holding ip has DW_CFA_AARCH64_negate_ra_state
 * (cfi.c): the addresses of those opcodes in its CIE's and FDE's programs,
 * at most max into ops, and how many. The FDE comes from an .eh_frame_hdr
 * table of count (start, FDE) pairs at table, each datarel sdata4 from hdr.
 * Exposed for unwind.c and its tests.
 */
size_t sym_cfi_ra_state_ops(const struct spy_mem *mem, spy_addr_t hdr, spy_addr_t table,
			    size_t count, spy_addr_t ip, spy_addr_t *ops, size_t max);

/*
 * Native symbols of one process, from the ELF files behind its mappings
 * (opened with spy_open_mapped: right in containers and chroots): .symtab,
 * .dynsym, or separate debug files found by build-id; inlined calls from
 * DWARF become frames of their own. Results are cached per (file, address in
 * the file), so a long recording resolves each pc once.
 */
struct sym_native;

struct sym_native_stats {
	uint64_t lookups;   /* pcs resolved */
	uint64_t hits;      /* of those, answered from the cache */
	uint64_t files;     /* ELF files opened */
};

/*
 * How a core's files are opened (files NULL: a live process pid's, with
 * spy_open_mapped, its debug files looked for in /proc/PID/root first).
 */
struct sym_files {
	/* The file at path, a descriptor or -errno (sampler's core_open_file). */
	int (*open)(void *ctx, const char *path);
	void *ctx;
	/* The root debug files are looked for in first (borrowed; -1: only ours). */
	int rootfd;
};
/* strs receives every name and must outlive the sym_native. */
struct sym_native *sym_native_new(pid_t pid, const struct sym_files *files, struct spy_strtab *strs);
void sym_native_free(struct sym_native *s);
/*
 * Append the frames of pcs[0..n) (as from sym_unwind) to out, innermost
 * first: for each pc its inlined calls (flagged SPY_FRAME_INLINED), then the
 * function containing it. Frames are SPY_FRAME_NATIVE, func the (demangled)
 * symbol, or "file+0xADDR" where no symbol covers the pc (ADDR in the
 * file's own terms, as addr2line takes it), file the basename of the
 * mapping, addr the pc. A pc in anonymous executable memory is one
 * SYM_JIT_FRAME frame of file SYM_JIT_FILE; one in no mapping "[unknown]".
 * mem supplies the mappings.
 */
#define SYM_JIT_FRAME "[jit]"
#define SYM_JIT_FILE "//anon"

void sym_native_resolve(struct sym_native *s, const struct spy_mem *mem, const spy_addr_t *pcs,
			size_t n, struct spy_stack *out);
void sym_native_stats(const struct sym_native *s, struct sym_native_stats *out);

/*
 * Merging a native stack with the Python stack of the same thread (see
 * merge.c): each group of Python frames (the frames through a
 * SPY_FRAME_PY_ENTRY frame) goes just outward of the native frame that ran
 * it, found by the group's anchor when there are anchors, else by the name
 * of the eval loop (_PyEval_EvalFrameDefault; PyEval_EvalFrameEx on 2.7).
 */
struct sym_merge_opts {
	bool all;                  /* keep interpreter internals (--native-all) */
	/* Libraries whose frames are internals, or NULL: interned in the table
	 * that holds the native frames' file names (compared as pointers). */
	const char *hide_libs[2];
	/* The frame that stands where groups could not be placed (interned; NULL: none). */
	const char *marker;
};

/* Where the frames lie: from sym_unwind and pyrt_stack_anchors. */
struct sym_merge_where {
	const spy_addr_t *sps;       /* per pc of the native stack */
	size_t nsps;
	const spy_addr_t *anchors;   /* per group, innermost first */
	size_t nanchors;
};

struct sym_merge_counts {
	uint64_t extra_eval;       /* eval frames by name with no Python group left (dropped) */
	uint64_t extra_py;         /* Python groups that could not be placed (after the marker) */
};

/*
 * out = native and py merged, innermost first (out is reset first). native
 * is as sym_native_resolve gives it (SPY_FRAME_INLINED tells its pcs
 * apart); where may be NULL or hold no anchors (placing by name). Without
 * opts->all, eval frames, frames of hide_libs and known call trampolines are
 * dropped; consecutive JIT frames show as one. Counts mismatches into *c
 * (may be NULL).
 */
void sym_merge(const struct spy_stack *native, const struct sym_merge_where *where,
	       const struct spy_stack *py, const struct sym_merge_opts *opts, struct spy_stack *out,
	       struct sym_merge_counts *c);
/* Whether a native symbol is the eval loop's, or an internal hidden by default. Exposed for tests. */
bool sym_is_eval(const char *func);
bool sym_is_internal(const char *func);

#endif
