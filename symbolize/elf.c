/*
 * ELF symbol and section look-ups with libelf, for finding CPython's anchors
 * (_PyRuntime, Py_Version, interp_head, ...) in python or libpython.
 *
 * Both .dynsym and .symtab are indexed: a stripped distro build keeps only
 * .dynsym, and the statics of 2.7/3.6 (interp_head) exist only in .symtab.
 * The wanted names are few and looked up once per attach, so the symbols are
 * not kept: each look-up scans the tables (a few tens of thousands of entries,
 * well under a millisecond) instead of building a hash nobody reuses.
 */
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "symbolize/symbolize.h"

struct sym_elf {
	int fd;
	Elf *elf;
	Elf_Scn *dynsym, *symtab;
	uint64_t first_vaddr;
	bool have_load;
};

int sym_elf_open(struct sym_elf **out, int fd, const char *path, struct spy_err *err)
{
	*out = NULL;
	if (elf_version(EV_CURRENT) == EV_NONE) {
		close(fd);
		return spy_err_set(err, SPY_EIO, "libelf is unusable: %s", elf_errmsg(-1));
	}
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		if (elf) {
			elf_end(elf);
		}
		close(fd);
		return spy_err_set(err, SPY_EFORMAT, "%s is not an ELF file", path);
	}
	struct sym_elf *e = spy_xcalloc(1, sizeof(*e));
	e->fd = fd;
	e->elf = elf;

	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh)) {
			continue;
		}
		if (sh.sh_type == SHT_DYNSYM) {
			e->dynsym = scn;
		} else if (sh.sh_type == SHT_SYMTAB) {
			e->symtab = scn;
		}
	}

	size_t nph = 0;
	if (elf_getphdrnum(elf, &nph) == 0) {
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;
			if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD) {
				continue;
			}
			uint64_t v = ph.p_vaddr & ~(uint64_t)0xfff;
			if (!e->have_load || v < e->first_vaddr) {
				e->first_vaddr = v;
				e->have_load = true;
			}
		}
	}
	*out = e;
	return 0;
}

void sym_elf_free(struct sym_elf *e)
{
	if (!e) {
		return;
	}
	elf_end(e->elf);
	close(e->fd);
	free(e);
}

static bool lookup_in(const struct sym_elf *e, Elf_Scn *scn, const char *name, uint64_t *value)
{
	GElf_Shdr sh;
	if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_entsize == 0) {
		return false;
	}
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data) {
		return false;
	}
	size_t n = sh.sh_size / sh.sh_entsize;
	for (size_t i = 0; i < n; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF) {
			continue;
		}
		const char *s = elf_strptr(e->elf, sh.sh_link, sym.st_name);
		if (s && !strcmp(s, name)) {
			*value = sym.st_value;
			return true;
		}
	}
	return false;
}

bool sym_elf_lookup(const struct sym_elf *e, const char *name, uint64_t *value)
{
	return lookup_in(e, e->dynsym, name, value) || lookup_in(e, e->symtab, name, value);
}

bool sym_elf_section(const struct sym_elf *e, const char *name, uint64_t *addr, uint64_t *size)
{
	size_t shstrndx;
	if (elf_getshdrstrndx(e->elf, &shstrndx) != 0) {
		return false;
	}
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(e->elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh)) {
			continue;
		}
		const char *s = elf_strptr(e->elf, shstrndx, sh.sh_name);
		if (s && !strcmp(s, name)) {
			*addr = sh.sh_addr;
			*size = sh.sh_size;
			return true;
		}
	}
	return false;
}

bool sym_elf_bias(const struct sym_elf *e, const struct spy_map *maps, size_t nmaps,
		  const char *path, uint64_t *bias)
{
	if (!e->have_load) {
		return false;
	}
	for (size_t i = 0; i < nmaps; i++) {
		if (maps[i].offset == 0 && !strcmp(maps[i].path, path)) {
			*bias = maps[i].lo - e->first_vaddr;
			return true;
		}
	}
	return false;
}
