/*
 * Native symbols: pc -> frames, with libdwfl over the files behind the
 * target's mappings.
 *
 * Each ELF file gets its own Dwfl, reported at base 0, and is asked about
 * addresses in the file's own terms (the p_vaddr of the byte the pc maps
 * to). That makes the answer a property of the file alone, so the cache key
 * is (file, address in file): a library mapped at a new address after a
 * restart of the sampling, or in a child process, hits the same entries, and
 * a recording resolves each distinct pc once. Files are told apart by path
 * and inode, so a library replaced on disk is opened afresh.
 *
 * libdwfl does the finding of symbols: .symtab, else .dynsym (a stripped
 * distro binary), and a separate debug file by build-id under
 * /usr/lib/debug (the target's, then ours). DWARF, where there is some,
 * adds the inlined calls at a pc as frames of their own.
 *
 * libdwfl opens no file itself: left to it, it would open the path the maps
 * give, under /proc/PID/root -- wrong for a chroot, for a replaced library,
 * and a planted FIFO there would hang us. Each file is opened with
 * spy_open_mapped and handed over as a descriptor, and the debug files are
 * found by find_debuginfo below, inside the target's root.
 *
 * C++ names are demangled with libstdc++'s __cxa_demangle, looked up with
 * dlopen at run time so that spy itself does not link libstdc++; without it
 * names stay mangled.
 */
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/mapfile.h"
#include "common/util.h"
#include "symbolize/symbolize.h"

/* Distinct ELF files per process; past this, pcs in new files stay unknown. */
#define MAX_FILES 4096
/* Cached pcs; past this, new pcs are resolved every time (still correct). */
#define MAX_CACHED (1u << 21)
/* Inlined calls kept per pc: deeper nests keep their innermost ones. */
#define MAX_INLINE 16
/* Mappings remembered by address, so most pcs find their file without hashing its path. */
#define MAP_MEMO 64

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

struct load {
	uint64_t offset, filesz, vaddr;
};

/* What find_debuginfo keeps for one module (its libdwfl userdata). */
struct dbg {
	struct sym_native *s;
	bool found;                   /* its debug file is found */
	char dir[80];                 /* the directory of that file */
	unsigned char alt_id[64];     /* and the dwz file that one links to: its build-id */
	int alt_n;                    /* (0: none) */
	char *alt_name;               /* and the name the link gives */
};

struct nfile {
	const char *path;     /* interned, as the target sees it */
	uint64_t inode;
	const char *lib;      /* interned basename */
	Dwfl *dwfl;           /* NULL if the file could not be read */
	struct dbg *dbg;      /* on the heap: files[] moves when it grows */
	Dwfl_Module *mod;
	Dwarf_Addr bias;
	struct load *loads;
	size_t nloads;
};

struct centry {
	const struct nfile *file;
	uint64_t vaddr;
	uint32_t first, count;      /* into names[] */
};

/* A mapping seen before, and its file. The map itself may be freed when the
 * maps are re-read: it is compared by value, never dereferenced. */
struct map_memo {
	spy_addr_t lo, hi;
	uint64_t inode;
	const char *path;
	struct nfile *file;
};

struct sym_native {
	struct spy_strtab *strs;
	struct map_memo memo[MAP_MEMO];
	pid_t pid;
	struct sym_files core;   /* a core's; core.open NULL: spy_open_mapped(pid) */
	int rootfd;           /* /proc/PID/root, O_PATH, or the core's; -1 if none */
	bool own_root;        /* rootfd is ours to close */
	Dwfl_Callbacks cb;
	struct nfile *files;
	size_t nfiles, afiles;
	struct centry *cache;       /* resolved (file, vaddr)s */
	size_t ncache, acache;
	struct spy_hmap cache_index; /* centry_key -> index into cache */
	const char **names;
	size_t nnames, anames;
	const char *unknown;
	const char *jit, *anon;   /* SYM_JIT_FRAME, SYM_JIT_FILE */
	void *cxx;
	demangle_fn demangle;
	/* debuginfod_fetch's library and client, looked for on first use. The
	 * library stays loaded for the process's life (as libcurl does in
	 * common/http.c): it initialises libcurl, whose global state and exit
	 * handlers must not be unmapped under it. */
	bool dbgi_tried;
	void *dbgi, *dbgi_client;
	void *dbgi_find;
	struct sym_native_stats st;
};

/* Every module is reported with a descriptor: there is nothing to find. */
static int no_find_elf(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr base,
		       char **file_name, Elf **elfp)
{
	return -1;
}

/* Whether the ELF file on fd carries the build-id id. */
static bool has_build_id(int fd, const unsigned char *id, int n)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	const void *have = NULL;
	bool yes = elf && dwelf_elf_gnu_build_id(elf, &have) == n && !memcmp(have, id, (size_t)n);
	if (elf) {
		elf_end(elf);
	}
	return yes;
}

/* The path under /usr/lib/debug that a build-id names. */
static void build_id_path(const unsigned char *id, int n, char *out, size_t size)
{
	int k = snprintf(out, size, "/usr/lib/debug/.build-id/%02x/", id[0]);
	for (int i = 1; i < n && (size_t)k < size; i++) {
		k += snprintf(out + k, size - (size_t)k, "%02x", id[i]);
	}
	if ((size_t)k < size) {
		snprintf(out + k, size - (size_t)k, ".debug");
	}
}

/*
 * path in the target's root (resolved inside it, so a link planted there
 * stays there), else in ours, if the file there carries build-id id.
 */
static int open_debug_file(const struct sym_native *s, const char *path, const unsigned char *id,
			   int n)
{
	for (int i = 0; i < 2; i++) {
		int fd = i == 1 ? spy_open_path(AT_FDCWD, path, SPY_OPEN_USER, NULL)
		       : s->rootfd >= 0 ? spy_open_path(s->rootfd, path, SPY_OPEN_IN_ROOT, NULL)
		       : -ENOENT;
		if (fd < 0) {
			continue;
		}
		if (has_build_id(fd, id, n)) {
			return fd;
		}
		close(fd);
	}
	return -1;
}

/* The dwz file a debug file links to (.gnu_debugaltlink: name, NUL, build-id), into d. */
static void note_altlink(struct dbg *d, int fd)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	size_t shstrndx;
	if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0) {
		goto out;
	}
	for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
		GElf_Shdr sh;
		const char *name = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
		if (!name || strcmp(name, ".gnu_debugaltlink") != 0) {
			continue;
		}
		Elf_Data *data = elf_getdata(scn, NULL);
		const char *buf = data ? data->d_buf : NULL;
		const char *nul = buf ? memchr(buf, '\0', data->d_size) : NULL;
		size_t idlen = nul ? data->d_size - (size_t)(nul - buf) - 1 : 0;
		if (idlen >= 2 && idlen <= sizeof(d->alt_id)) {
			memcpy(d->alt_id, nul + 1, idlen);
			d->alt_n = (int)idlen;
			d->alt_name = spy_xstrdup(buf);
		}
		break;
	}
out:
	if (elf) {
		elf_end(elf);
	}
}

/*
 * debuginfod (libdebuginfod, loaded at run time only when the user set
 * DEBUGINFOD_URLS, as gdb and libdw's own look-ups do): a debug file by
 * build-id from the servers named there, into its cache. The descriptor it
 * returns is of that cached file; *path gets its name.
 */
typedef void *(*dbgi_begin_fn)(void);
typedef int (*dbgi_find_fn)(void *, const unsigned char *, int, char **);
typedef void (*dbgi_end_fn)(void *);

static int debuginfod_fetch(struct sym_native *s, const unsigned char *id, int n, char *path,
			    size_t size)
{
	if (!s->dbgi_tried) {
		s->dbgi_tried = true;
		const char *urls = getenv("DEBUGINFOD_URLS");
		s->dbgi = urls && *urls ? dlopen("libdebuginfod.so.1", RTLD_LAZY | RTLD_LOCAL) : NULL;
		dbgi_begin_fn begin = s->dbgi ? (dbgi_begin_fn)dlsym(s->dbgi, "debuginfod_begin") : NULL;
		s->dbgi_find = s->dbgi ? (dbgi_find_fn)dlsym(s->dbgi, "debuginfod_find_debuginfo") : NULL;
		s->dbgi_client = begin && s->dbgi_find ? begin() : NULL;
		if (urls && *urls) {
			spy_log(SPY_LOG_DEBUG, "native symbols: debuginfod %s",
				s->dbgi_client ? "in use (DEBUGINFOD_URLS)" : "unavailable (no libdebuginfod.so.1)");
		}
	}
	if (!s->dbgi_client) {
		return -1;
	}
	char *got = NULL;
	int fd = ((dbgi_find_fn)s->dbgi_find)(s->dbgi_client, id, n, &got);
	if (fd >= 0 && got) {
		snprintf(path, size, "%s", got);
	}
	free(got);
	/* A server may answer anything: only the file asked for is taken. */
	if (fd >= 0 && !has_build_id(fd, id, n)) {
		close(fd);
		fd = -1;
	}
	return fd >= 0 ? fd : -1;
}

/*
 * The separate debug file of a module, by build-id, in the target's
 * /usr/lib/debug, then ours, then from debuginfod if the user asked. The .gnu_debuglink name is not followed: it
 * is a name chosen by the file, and every distro ships build-id paths.
 * libdwfl calls this again, once the debug file is found, for the dwz file
 * it links to (debuglink_file is then that link's name, the CRC 0): that
 * one is looked up by its own build-id, then by the name the link gives
 * (absolute, or relative to the debug file's directory), and must carry
 * the build-id the link records.
 */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
			  Dwarf_Addr base, const char *file_name, const char *debuglink_file,
			  GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	struct dbg *d = *userdata;
	char path[PATH_MAX];
	if (!d) {
		return -1;
	}
	if (d->found) {
		if (!d->alt_n || debuglink_crc != 0 || !debuglink_file ||
		    strcmp(debuglink_file, d->alt_name) != 0) {
			return -1;
		}
		build_id_path(d->alt_id, d->alt_n, path, sizeof(path));
		int fd = open_debug_file(d->s, path, d->alt_id, d->alt_n);
		if (fd < 0) {
			if (d->alt_name[0] == '/') {
				snprintf(path, sizeof(path), "%s", d->alt_name);
			} else {
				snprintf(path, sizeof(path), "%s/%s", d->dir, d->alt_name);
			}
			fd = open_debug_file(d->s, path, d->alt_id, d->alt_n);
		}
		if (fd < 0) {
			fd = debuginfod_fetch(d->s, d->alt_id, d->alt_n, path, sizeof(path));
		}
		if (fd >= 0) {
			*debuginfo_file_name = spy_xstrdup(path);
		}
		return fd;
	}
	const unsigned char *id;
	GElf_Addr vaddr;
	int n = dwfl_module_build_id(mod, &id, &vaddr);
	if (n < 2 || n > 64) {
		return -1;
	}
	build_id_path(id, n, path, sizeof(path));
	int fd = open_debug_file(d->s, path, id, n);
	if (fd < 0) {
		fd = debuginfod_fetch(d->s, id, n, path, sizeof(path));
	}
	if (fd >= 0) {
		d->found = true;
		note_altlink(d, fd);
		char *slash = strrchr(path, '/');
		snprintf(d->dir, sizeof(d->dir), "%.*s", (int)(slash - path), path);
		*debuginfo_file_name = spy_xstrdup(path);
	}
	return fd;
}

struct sym_native *sym_native_new(pid_t pid, const struct sym_files *files, struct spy_strtab *strs)
{
	struct sym_native *s = spy_xcalloc(1, sizeof(*s));
	s->strs = strs;
	s->pid = pid;
	if (files) {
		/* A core's pid is no process of ours: some other may have it now. */
		s->core = *files;
		s->rootfd = files->rootfd;
	} else {
		char root[64];
		snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
		s->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
		s->own_root = true;
	}
	s->cb.find_elf = no_find_elf;
	s->cb.find_debuginfo = find_debuginfo;
	s->cb.section_address = dwfl_offline_section_address;
	s->unknown = spy_strtab_interns(strs, "[unknown]");
	s->jit = spy_strtab_interns(strs, SYM_JIT_FRAME);
	s->anon = spy_strtab_interns(strs, SYM_JIT_FILE);
	s->cxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
	if (s->cxx) {
		*(void **)&s->demangle = dlsym(s->cxx, "__cxa_demangle");
	}
	spy_log(SPY_LOG_DEBUG, "native symbols: C++ demangling %s",
		s->demangle ? "via libstdc++" : "unavailable (names stay mangled)");
	return s;
}

void sym_native_free(struct sym_native *s)
{
	if (!s) {
		return;
	}
	for (size_t i = 0; i < s->nfiles; i++) {
		if (s->files[i].dwfl) {
			dwfl_end(s->files[i].dwfl);
		}
		if (s->files[i].dbg) {
			free(s->files[i].dbg->alt_name);
			free(s->files[i].dbg);
		}
		free(s->files[i].loads);
	}
	free(s->files);
	free(s->cache);
	spy_hmap_release(&s->cache_index);
	free(s->names);
	if (s->rootfd >= 0 && s->own_root) {
		close(s->rootfd);
	}
	if (s->cxx) {
		dlclose(s->cxx);
	}
	if (s->dbgi_client) {
		dbgi_end_fn end = (dbgi_end_fn)dlsym(s->dbgi, "debuginfod_end");
		if (end) {
			end(s->dbgi_client);
		}
	}
	free(s);
}

void sym_native_stats(const struct sym_native *s, struct sym_native_stats *out)
{
	*out = s->st;
}

/* ---- files ---- */

static const char *basename_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static void read_loads(struct nfile *f)
{
	GElf_Addr bias;
	Elf *elf = dwfl_module_getelf(f->mod, &bias);
	size_t nph = 0;
	if (!elf || elf_getphdrnum(elf, &nph) != 0) {
		return;
	}
	f->bias = bias;
	f->loads = spy_xcalloc(nph ? nph : 1, sizeof(*f->loads));
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD) {
			f->loads[f->nloads++] = (struct load){ ph.p_offset, ph.p_filesz, ph.p_vaddr };
		}
	}
}

static void open_file(struct sym_native *s, struct nfile *f, const struct spy_map *m)
{
	int fd = s->core.open ? s->core.open(s->core.ctx, m->path) : spy_open_mapped(s->pid, m);
	if (fd >= 0) {
		f->dwfl = dwfl_begin(&s->cb);
	}
	if (f->dwfl) {
		dwfl_report_begin(f->dwfl);
		f->mod = dwfl_report_elf(f->dwfl, f->lib, f->path, fd, 0, false);
		dwfl_report_end(f->dwfl, NULL, NULL);
		/* On success the module owns the descriptor; on failure it is still ours. */
		if (f->mod) {
			fd = -1;
		}
	}
	if (fd >= 0) {
		close(fd);
	}
	if (f->mod) {
		void **userdata;
		dwfl_module_info(f->mod, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
		f->dbg = spy_xcalloc(1, sizeof(*f->dbg));
		f->dbg->s = s;
		*userdata = f->dbg;
		read_loads(f);
	}
	spy_log(SPY_LOG_DEBUG, "native symbols: %s %s", f->path,
		f->nloads ? "opened" : "unreadable (its frames stay unknown)");
	s->st.files++;
}

static struct nfile *find_file_slow(struct sym_native *s, const struct spy_map *m)
{
	const char *path = spy_strtab_interns(s->strs, m->path);
	for (size_t i = 0; i < s->nfiles; i++) {
		if (s->files[i].path == path && s->files[i].inode == m->inode) {
			return &s->files[i];
		}
	}
	if (s->nfiles >= MAX_FILES) {
		return NULL;
	}
	SPY_GROW(s->files, s->afiles, s->nfiles + 1);
	struct nfile *f = &s->files[s->nfiles++];
	memset(f, 0, sizeof(*f));
	f->path = path;
	f->inode = m->inode;
	f->lib = spy_strtab_interns(s->strs, basename_of(path));
	/* Only real files: "[vdso]", "[heap]" and the like have nothing to open. */
	if (path[0] == '/') {
		open_file(s, f, m);
	}
	return f;
}

/*
 * The file of mapping m. Most pcs of a sample fall in a few mappings, so a
 * small memo by address saves interning the path for each. Files live in
 * one array that may move when it grows: the memo is cleared whenever a
 * file is added.
 */
static struct nfile *find_file(struct sym_native *s, const struct spy_map *m)
{
	struct map_memo *mm = &s->memo[(m->lo >> 12) % MAP_MEMO];
	if (mm->file && mm->lo == m->lo && mm->hi == m->hi && mm->inode == m->inode &&
	    mm->path == m->path) {
		return mm->file;
	}
	size_t before = s->nfiles;
	struct nfile *f = find_file_slow(s, m);
	if (s->nfiles != before) {
		memset(s->memo, 0, sizeof(s->memo));
	}
	*mm = (struct map_memo){ m->lo, m->hi, m->inode, m->path, f };
	return f;
}

/* The file's own address of the byte at file offset off, if some PT_LOAD maps it. */
static bool file_vaddr(const struct nfile *f, uint64_t off, uint64_t *vaddr)
{
	for (size_t i = 0; i < f->nloads; i++) {
		const struct load *l = &f->loads[i];
		if (off >= l->offset && off - l->offset < l->filesz) {
			*vaddr = l->vaddr + (off - l->offset);
			return true;
		}
	}
	return false;
}

/* ---- the cache ---- */

static uint64_t centry_key(const struct nfile *f, uint64_t vaddr)
{
	return spy_hmap_pair((uint64_t)(uintptr_t)f, vaddr);
}

static const struct centry *cache_find(const struct sym_native *s, const struct nfile *f, uint64_t vaddr)
{
	uint64_t k = centry_key(f, vaddr);
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&s->cache_index, k, it, v) {
		if (s->cache[v].file == f && s->cache[v].vaddr == vaddr) {
			return &s->cache[v];
		}
	}
	return NULL;
}

/* ---- names ---- */

static const char *intern_name(struct sym_native *s, const char *name)
{
	/* "clock_gettime@@GLIBC_2.17": the version is noise in a profile, and splits a function in two. */
	const char *at = strchr(name, '@');
	if (at && at != name) {
		return spy_strtab_intern(s->strs, name, (size_t)(at - name));
	}
	if (s->demangle && name[0] == '_' && name[1] == 'Z') {
		int status = -1;
		char *d = s->demangle(name, NULL, NULL, &status);
		if (d && status == 0) {
			const char *r = spy_strtab_interns(s->strs, d);
			free(d);
			return r;
		}
		free(d);
	}
	return spy_strtab_interns(s->strs, name);
}

static void push_name(struct sym_native *s, const char *name)
{
	SPY_GROW(s->names, s->anames, s->nnames + 1);
	s->names[s->nnames++] = name ? intern_name(s, name) : s->unknown;
}

/*
 * A pc no symbol covers: its file and address in the file's own terms,
 * "libfoo.so+0x1234", which addr2line -e or a debug file found later can
 * still turn into a name.
 */
static const char *offset_name(struct sym_native *s, const char *lib, uint64_t addr)
{
	char buf[PATH_MAX + 24];
	snprintf(buf, sizeof(buf), "%s+0x%llx", lib, (unsigned long long)addr);
	return spy_strtab_interns(s->strs, buf);
}

/* DIEs one inline look-up visits at most: a CU of an LTO build has hundreds of thousands. */
#define INLINE_WALK_DIES 200000

/*
 * The DIE under parent whose code holds pc: a function, an inlined call
 * or a block; a namespace (whose functions hold code, itself none) is
 * searched through. *budget counts DIEs visited.
 */
static bool scope_child(Dwarf_Die *parent, Dwarf_Addr pc, Dwarf_Die *out, long *budget, int depth)
{
	Dwarf_Die c;
	if (depth > 8 || dwarf_child(parent, &c) != 0) {
		return false;
	}
	do {
		if (--*budget < 0) {
			return false;
		}
		int tag = dwarf_tag(&c);
		if ((tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block) &&
		    dwarf_haspc(&c, pc) > 0) {
			*out = c;
			return true;
		}
		if ((tag == DW_TAG_namespace || tag == DW_TAG_module) && scope_child(&c, pc, out, budget, depth + 1)) {
			return true;
		}
	} while (dwarf_siblingof(&c, &c) == 0);
	return false;
}

/*
 * Names of the calls inlined at addr, innermost first, from DWARF if the
 * file has any: the scopes holding addr, walked down from its CU. Not
 * dwarf_getscopes: an LTO build's inlined call whose abstract origin lies
 * in another CU makes it find no scope at all (Debian's _ctypes, where gdb
 * and addr2line show _call_function_pointer inlined in _ctypes_callproc).
 */
static void push_inlines(struct sym_native *s, const struct nfile *f, Dwarf_Addr addr)
{
	Dwarf_Addr cubias;
	Dwarf_Die *cu = dwfl_module_addrdie(f->mod, addr, &cubias);
	if (!cu) {
		return;
	}
	Dwarf_Die at = *cu, next;
	const char *outer_first[MAX_INLINE];
	int n = 0, depth = 0;
	long budget = INLINE_WALK_DIES;
	while (depth++ < 64 && scope_child(&at, addr - cubias, &next, &budget, 0)) {
		at = next;
		if (dwarf_tag(&at) == DW_TAG_subprogram) {
			n = 0; /* a function nested in another (GNU C): only its own inlined calls */
		} else if (dwarf_tag(&at) == DW_TAG_inlined_subroutine && n < MAX_INLINE) {
			outer_first[n++] = dwarf_diename(&at);
		}
	}
	while (n > 0) {
		push_name(s, outer_first[--n]);
	}
}

/* Resolve one address of f into names[], returning where they start. */
static uint32_t resolve_into(struct sym_native *s, const struct nfile *f, uint64_t vaddr)
{
	uint32_t first = (uint32_t)s->nnames;
	if (!f->mod) {
		SPY_GROW(s->names, s->anames, s->nnames + 1);
		s->names[s->nnames++] = offset_name(s, f->lib, vaddr);
		return first;
	}
	Dwarf_Addr addr = vaddr + f->bias;
	push_inlines(s, f, addr);
	GElf_Off off = 0;
	GElf_Sym sym;
	const char *name = dwfl_module_addrinfo(f->mod, addr, &off, &sym, NULL, NULL, NULL);
	/* The nearest symbol below is not ours if the pc lies past its end (a stripped static). */
	if (name && sym.st_size && off >= sym.st_size) {
		name = NULL;
	}
	if (name) {
		push_name(s, name);
	} else {
		SPY_GROW(s->names, s->anames, s->nnames + 1);
		s->names[s->nnames++] = offset_name(s, f->lib, vaddr);
	}
	return first;
}

/*
 * The names for pc: from the cache, or resolved and cached. Returns false
 * when the answer could not be cached (cache full): the caller then drops
 * its names from names[] once used.
 */
static bool lookup(struct sym_native *s, const struct nfile *f, uint64_t vaddr, uint32_t *first,
		   uint32_t *count)
{
	s->st.lookups++;
	const struct centry *e = cache_find(s, f, vaddr);
	if (e) {
		s->st.hits++;
		*first = e->first;
		*count = e->count;
		return true;
	}
	*first = resolve_into(s, f, vaddr);
	*count = (uint32_t)(s->nnames - *first);
	if (s->ncache >= MAX_CACHED) {
		return false;
	}
	SPY_GROW(s->cache, s->acache, s->ncache + 1);
	s->cache[s->ncache] = (struct centry){ f, vaddr, *first, *count };
	spy_hmap_add(&s->cache_index, centry_key(f, vaddr), s->ncache++);
	return true;
}

static void push_frame(struct spy_stack *out, const char *func, const char *lib, spy_addr_t pc,
		       uint8_t flags)
{
	struct spy_frame *fr = spy_stack_push(out);
	*fr = (struct spy_frame){ func, lib, 0, SPY_FRAME_NATIVE, flags, pc };
}

static void resolve_pc(struct sym_native *s, const struct spy_mem *mem, spy_addr_t pc,
		       bool is_return, struct spy_stack *out)
{
	/* A return address points after the call: look up the call itself. */
	spy_addr_t at = is_return && pc ? pc - 1 : pc;
	const struct spy_map *m = spy_mem_find_map(mem, at);
	if (m && sym_map_is_jit(m)) {
		push_frame(out, s->jit, s->anon, pc, 0);
		return;
	}
	struct nfile *f = m && m->path[0] ? find_file(s, m) : NULL;
	uint64_t vaddr;
	if (!f || !file_vaddr(f, at - m->lo + m->offset, &vaddr)) {
		/* Unreadable, or not of a loaded segment: the offset in the file. */
		push_frame(out, f ? offset_name(s, f->lib, at - m->lo + m->offset) : s->unknown,
			   f ? f->lib : s->unknown, pc, 0);
		return;
	}
	uint32_t first, count;
	bool cached = lookup(s, f, vaddr, &first, &count);
	for (uint32_t i = 0; i < count; i++) {
		push_frame(out, s->names[first + i], f->lib, pc, i + 1 < count ? SPY_FRAME_INLINED : 0);
	}
	/* Uncached answers must not pile up in names[]. */
	if (!cached) {
		s->nnames = first;
	}
}

void sym_native_resolve(struct sym_native *s, const struct spy_mem *mem, const spy_addr_t *pcs,
			size_t n, struct spy_stack *out)
{
	for (size_t i = 0; i < n; i++) {
		resolve_pc(s, mem, pcs[i], i > 0, out);
	}
}
