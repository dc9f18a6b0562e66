/*
 * symbolize: ELF symbols (libelf) today; DWARF, native unwinding and the
 * splicing of Python frames into native stacks later. It knows nothing of
 * CPython structures: cmd asks it for the addresses of named symbols and
 * sections and hands them to pystate as hints.
 */
#ifndef SPY_SYMBOLIZE_SYMBOLIZE_H
#define SPY_SYMBOLIZE_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/mem.h"

/* One ELF file opened for symbol look-ups. */
struct sym_elf;

/* Open path (already prefixed with the target's /proc/PID/root). -SPY_EIO if unreadable, -SPY_EFORMAT if not ELF. */
int sym_elf_open(struct sym_elf **out, const char *path, struct spy_err *err);
void sym_elf_free(struct sym_elf *e);

/* st_value of the defined symbol name, from .dynsym or else .symtab. */
bool sym_elf_lookup(const struct sym_elf *e, const char *name, uint64_t *value);
/* sh_addr and sh_size of the named section. */
bool sym_elf_section(const struct sym_elf *e, const char *name, uint64_t *addr, uint64_t *size);
/* True if the file has a .symtab (not stripped). */
bool sym_elf_has_symtab(const struct sym_elf *e);

/*
 * The load bias of e in a process: the start of the mapping of path at file
 * offset 0 minus the lowest PT_LOAD p_vaddr rounded down to a page. A
 * symbol's runtime address is bias + st_value. false if path is not mapped.
 */
bool sym_elf_bias(const struct sym_elf *e, const struct spy_map *maps, size_t nmaps,
		  const char *path, uint64_t *bias);

#endif
