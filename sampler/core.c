/*
 * A core file as a target: its memory through a struct spy_mem, its
 * mappings as a spy_map list (so the runtime is found as in a live
 * process), its threads, and the files it was running.
 *
 * Cores are ELF (libelf reads the headers and notes): PT_LOAD segments hold
 * the memory, PT_NOTE the threads (NT_PRSTATUS: TID and registers), the
 * command (NT_PRPSINFO) and the mapped files (NT_FILE). A core leaves out
 * what it can read back from files: gcore, like the kernel, dumps a
 * file-backed mapping only if it was written to, so the text and read-only
 * data of python and libpython (type names, sys.version) have p_filesz 0.
 * Such bytes are read from the mapped file itself at the mapping's offset,
 * which is why the segments carry their NT_FILE path.
 *
 * Which files: a core is input like any other, and its NT_FILE note can
 * name any path (/etc/shadow, a FIFO, a terminal), so a named file is read
 * only when the user vouches for it -- --exe for the executable, --root
 * for a root filesystem the paths live under (a container's, like gdb's
 * sysroot), resolved inside that root -- or when its GNU build-id is the
 * one the core recorded for that mapping. The kernel and gcore both dump
 * the first page of each mapped ELF file, which holds its headers and the
 * build-id note, so a core of this machine's own programs needs neither
 * option. A named file whose build-id differs from the recorded one is not
 * read either: it is some other build, and its bytes would be wrong.
 *
 * Why a thread's wait comes from its registers: there is no /proc for a
 * core, but a thread stopped inside a syscall keeps the syscall number and
 * its arguments in its registers (common/arch.h says where), which is what
 * task/TID/syscall would have shown. They are read once the segments are
 * known, since an architecture may need the instruction at the pc to tell.
 * The registers are the host's layout, so a core of another architecture
 * is refused. They are kept: they are where a native walk of the thread
 * starts (dump --core --native), as PTRACE_GETREGSET's are for a live one.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/bounds.h"
#include "common/log.h"
#include "common/mapfile.h"
#include "common/util.h"
#include "sampler/sampler.h"

#ifndef NT_FILE
#define NT_FILE 0x46494c45
#endif

/* Segments and NT_FILE entries: a big process has a few thousand mappings. */
#define CORE_MAX_SEGS 65536
/* A note segment larger than this is not a core gdb or the kernel wrote. */
#define CORE_MAX_NOTES (64u << 20)
/* SHA-1 build-ids are 20 bytes; nothing sane exceeds this. */
#define BUILD_ID_MAX 64
/* An ELF file's program headers and notes looked at for its build-id. */
#define ELF_MAX_PHDRS 256
#define ELF_MAX_NOTE (64u << 10)

struct core_seg {
	spy_addr_t lo, hi;
	uint64_t off, filesz;  /* in the core file */
	int file;              /* index in files[] of the mapped file, or -1 */
	uint64_t file_off;     /* offset of lo in that file */
	uint8_t perms;         /* SPY_MAP_* */
	const char *path;      /* NT_FILE name, "" if anonymous */
};

struct core {
	int fd;
	Elf *elf;
	uint64_t size;
	pid_t pid;
	char *cmdline, *exe;
	const char *exe_name;   /* the NT_FILE name of the executable, or NULL */
	char *user_exe;         /* --exe: the file standing for exe_name, or NULL */
	int rootfd;             /* --root, or -1 */
	char *root;             /* --root as given, for messages */
	struct core_seg *segs;
	size_t nsegs;
	struct spy_map *maps;
	char *map_paths;        /* NT_FILE names, NUL-separated (the maps point in) */
	size_t nmaps;
	struct proc_thread *threads;
	size_t nthreads, alloc_threads;
	struct spy_regs *regs;  /* of threads[i] */
	size_t alloc_regs;
	uint64_t pac_mask;      /* spy_arch_pac_note, 0 until one is read */
	bool pac_noted;
	spy_addr_t vdso;        /* AT_SYSINFO_EHDR from NT_AUXV, 0 if none */
	struct core_file {
		const char *path;
		int fd;            /* -2 until first needed, -1 if it cannot be opened */
		int err;           /* then why: -errno */
	} *files;
	size_t nfiles, alloc_files;
	struct spy_mem mem;
};

/* The index of path in files[]; opened on first read (file_fd). */
static int file_index(struct core *c, const char *path)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		if (!strcmp(c->files[i].path, path)) {
			return (int)i;
		}
	}
	SPY_GROW(c->files, c->alloc_files, c->nfiles + 1);
	c->files[c->nfiles].path = path;
	c->files[c->nfiles].fd = -2;
	return (int)c->nfiles++;
}

static int open_named(struct core *c, const char *path);

static int file_fd(struct core *c, int i)
{
	struct core_file *f = &c->files[i];
	if (f->fd == -2) {
		f->fd = open_named(c, f->path);
		if (f->fd < 0) {
			f->err = f->fd;
			f->fd = -1;
		}
	}
	return f->fd;
}

static int seg_find(const struct core *c, spy_addr_t addr)
{
	size_t lo = 0, hi = c->nsegs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (addr < c->segs[mid].lo) {
			hi = mid;
		} else if (addr >= c->segs[mid].hi) {
			lo = mid + 1;
		} else {
			return (int)mid;
		}
	}
	return -1;
}

static bool pread_all(int fd, void *dst, size_t len, uint64_t off)
{
	ssize_t n = fd >= 0 ? pread(fd, dst, len, (off_t)off) : -1;
	return n == (ssize_t)len;
}

/* Read from the core and, where it leaves bytes out, from the mapped files if files. */
static int read_at(struct core *c, spy_addr_t addr, void *dst, size_t len, bool files)
{
	unsigned char *out = dst;
	while (len > 0) {
		int i = seg_find(c, addr);
		if (i < 0) {
			spy_log(SPY_LOG_TRACE, "core: 0x%llx is in no segment", (unsigned long long)addr);
			return -SPY_EMEM;
		}
		const struct core_seg *s = &c->segs[i];
		uint64_t off = addr - s->lo;
		size_t chunk = len < s->hi - addr ? len : (size_t)(s->hi - addr);
		bool ok;
		if (off < s->filesz) {
			if (chunk > s->filesz - off) {
				chunk = (size_t)(s->filesz - off);
			}
			ok = pread_all(c->fd, out, chunk, s->off + off);
		} else {
			ok = files && s->file >= 0 &&
			     pread_all(file_fd(c, s->file), out, chunk, s->file_off + off);
		}
		if (!ok) {
			spy_log(SPY_LOG_TRACE, "core: cannot read 0x%llx", (unsigned long long)addr);
			return -SPY_EMEM;
		}
		out += chunk;
		addr += chunk;
		len -= chunk;
	}
	return 0;
}

static int core_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	return read_at(ctx, addr, dst, len, true);
}

/* ---- build-ids ---- */

/* Read len bytes at offset off of an ELF image; false if they are not all there. */
typedef bool (*image_read_fn)(void *ctx, uint64_t off, void *dst, size_t len);

/*
 * The GNU build-id of an ELF image, from its PT_NOTE segments (which is
 * where the kernel's first dumped page has it); its length, or 0.
 */
static size_t image_build_id(image_read_fn rd, void *ctx, unsigned char *id)
{
	Elf64_Ehdr eh;
	if (!rd(ctx, 0, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_phnum > ELF_MAX_PHDRS) {
		return 0;
	}
	size_t found = 0;
	unsigned char *notes = NULL;
	for (unsigned i = 0; i < eh.e_phnum && !found; i++) {
		Elf64_Phdr ph;
		if (!rd(ctx, eh.e_phoff + (uint64_t)i * sizeof(ph), &ph, sizeof(ph))) {
			break;
		}
		if (ph.p_type != PT_NOTE || ph.p_filesz > ELF_MAX_NOTE || ph.p_filesz < 12) {
			continue;
		}
		notes = spy_xrealloc(notes, ph.p_filesz);
		if (!rd(ctx, ph.p_offset, notes, ph.p_filesz)) {
			continue;
		}
		for (size_t off = 0; off + 12 <= ph.p_filesz;) {
			uint32_t h[3];
			memcpy(h, notes + off, sizeof(h));
			size_t name = (h[0] + 3u) & ~3u, desc = (h[1] + 3u) & ~3u;
			if (name > ph.p_filesz - off - 12 || desc > ph.p_filesz - off - 12 - name) {
				break;
			}
			if (h[2] == NT_GNU_BUILD_ID && h[0] == 4 && !memcmp(notes + off + 12, "GNU", 4) &&
			    h[1] > 0 && h[1] <= BUILD_ID_MAX) {
				memcpy(id, notes + off + 12 + name, h[1]);
				found = h[1];
				break;
			}
			off += 12 + name + desc;
		}
	}
	free(notes);
	return found;
}

struct in_core {
	struct core *c;
	spy_addr_t base;
};

static bool read_in_core(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct in_core *ic = ctx;
	return off < UINT64_MAX - ic->base && read_at(ic->c, ic->base + off, dst, len, false) == 0;
}

static bool read_in_file(void *ctx, uint64_t off, void *dst, size_t len)
{
	return pread_all(*(int *)ctx, dst, len, off);
}

/* The build-id the core recorded for path: from the dumped start of its mapping at offset 0. */
static size_t recorded_build_id(struct core *c, const char *path, unsigned char *id)
{
	for (size_t i = 0; i < c->nsegs; i++) {
		const struct core_seg *s = &c->segs[i];
		if (s->file_off == 0 && s->filesz > 0 && !strcmp(s->path, path)) {
			struct in_core ic = { c, s->lo };
			return image_build_id(read_in_core, &ic, id);
		}
	}
	return 0;
}

static void hex(const unsigned char *id, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		snprintf(out + 2 * i, 3, "%02x", id[i]);
	}
	out[2 * n] = '\0';
}

/*
 * Open the file the core names path under the rules at the top: the user's
 * --exe or a path inside --root, else the path itself if the build-ids
 * agree. A descriptor, or -errno.
 */
static int open_named(struct core *c, const char *path)
{
	bool named = true;
	const char *shown = path;
	int fd;
	if (c->user_exe && c->exe_name && !strcmp(path, c->exe_name)) {
		shown = c->user_exe;
		fd = spy_open_path(AT_FDCWD, c->user_exe, SPY_OPEN_USER, NULL);
	} else if (c->rootfd >= 0) {
		fd = spy_open_path(c->rootfd, path, SPY_OPEN_IN_ROOT, NULL);
	} else {
		named = false;
		fd = spy_open_path(AT_FDCWD, path, SPY_OPEN_NOLINKS, NULL);
	}
	if (fd < 0) {
		spy_log(named ? SPY_LOG_WARN : SPY_LOG_DEBUG, "core: cannot open %s%s: %s",
			c->rootfd >= 0 && shown == path ? c->root : "", shown,
			fd == -EINVAL ? "not a regular file" : strerror(-fd));
		return fd;
	}
	unsigned char want[BUILD_ID_MAX], have[BUILD_ID_MAX];
	size_t nwant = recorded_build_id(c, path, want);
	size_t nhave = image_build_id(read_in_file, &fd, have);
	if (nwant && (nhave != nwant || memcmp(want, have, nwant) != 0)) {
		char w[2 * BUILD_ID_MAX + 1], h[2 * BUILD_ID_MAX + 1];
		hex(want, nwant, w);
		hex(have, nhave, h);
		spy_log(named ? SPY_LOG_WARN : SPY_LOG_DEBUG,
			"core: %s is not the file the core ran as %s (build-id %s, core has %s): not read",
			shown, path, nhave ? h : "none", w);
		close(fd);
		return -ESTALE;
	}
	if (!nwant && !named) {
		spy_log(SPY_LOG_DEBUG,
			"core: no build-id recorded for %s: not read (name its root with --root)", path);
		close(fd);
		return -EPERM;
	}
	return fd;
}

int core_open_file(struct core *c, const char *path)
{
	for (size_t i = 0; i < c->nfiles; i++) {
		if (!strcmp(c->files[i].path, path)) {
			int fd = file_fd(c, (int)i);
			if (fd < 0) {
				return c->files[i].err;
			}
			int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
			return dup < 0 ? -errno : dup;
		}
	}
	return open_named(c, path);
}

int core_parse_nt_file(const unsigned char *desc, size_t len, struct spy_map **maps, size_t *n,
		       char **paths, struct spy_err *err)
{
	uint64_t count, page;
	*maps = NULL;
	*paths = NULL;
	*n = 0;
	if (len < 16) {
		return spy_err_set(err, SPY_EFORMAT, "NT_FILE note too short (%zu bytes)", len);
	}
	memcpy(&count, desc, 8);
	memcpy(&page, desc + 8, 8);
	if (count > CORE_MAX_SEGS || page == 0 || (len - 16) / 24 < count) {
		return spy_err_set(err, SPY_EFORMAT, "NT_FILE note is malformed (%llu entries in %zu bytes)",
				   (unsigned long long)count, len);
	}
	size_t names = 16 + (size_t)count * 24;
	char *p = spy_xmalloc(len - names + 1);
	memcpy(p, desc + names, len - names);
	p[len - names] = '\0';
	struct spy_map *m = spy_xcalloc(count ? (size_t)count : 1, sizeof(*m));
	const char *name = p, *end = p + (len - names);
	for (size_t i = 0; i < count; i++) {
		uint64_t v[3];
		memcpy(v, desc + 16 + i * 24, 24);
		if (name >= end || v[1] < v[0]) {
			free(m);
			free(p);
			return spy_err_set(err, SPY_EFORMAT, "NT_FILE note is malformed (entry %zu)", i);
		}
		m[i].lo = v[0];
		m[i].hi = v[1];
		m[i].offset = v[2] * page;
		m[i].perms = SPY_MAP_R;
		m[i].path = name;
		name += strlen(name) + 1;
	}
	*maps = m;
	*paths = p;
	*n = (size_t)count;
	return 0;
}

static void add_thread(struct core *c, const unsigned char *desc, size_t len)
{
	prstatus_t st;
	if (len < sizeof(st) || c->nthreads >= SPY_MAX_THREADS) {
		return;
	}
	memcpy(&st, desc, sizeof(st));
	SPY_GROW(c->threads, c->alloc_threads, c->nthreads + 1);
	SPY_GROW(c->regs, c->alloc_regs, c->nthreads + 1);
	memcpy(c->regs[c->nthreads].g, st.pr_reg, sizeof(st.pr_reg));
	struct proc_thread *t = &c->threads[c->nthreads++];
	memset(t, 0, sizeof(*t));
	t->tid = st.pr_pid;
}

static bool read_insn(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	return read_at(ctx, addr, dst, len, true) == 0;
}

/* What each thread was blocked in, as task/TID/syscall would have said. */
static void classify_threads(struct core *c)
{
	for (size_t i = 0; i < c->nthreads; i++) {
		long nr;
		uint64_t args[2];
		int in = spy_arch_stopped_syscall(&c->regs[i], read_insn, c, &nr, args);
		char text[96];
		if (in > 0) {
			snprintf(text, sizeof(text), "%ld 0x%llx 0x%llx", nr, (unsigned long long)args[0],
				 (unsigned long long)args[1]);
			proc_classify_wait('S', text, &c->threads[i].wait);
		} else if (in == 0) {
			proc_classify_wait('R', "running", &c->threads[i].wait);
		} else {
			proc_classify_wait(0, NULL, &c->threads[i].wait);
		}
		c->threads[i].state = c->threads[i].wait.state;
	}
}

static void set_psinfo(struct core *c, const unsigned char *desc, size_t len)
{
	prpsinfo_t ps;
	if (len < sizeof(ps)) {
		return;
	}
	memcpy(&ps, desc, sizeof(ps));
	c->pid = ps.pr_pid;
	/* The kernel joins the arguments with spaces, gdb leaves NULs between them. */
	size_t n = sizeof(ps.pr_psargs) - 1;
	ps.pr_psargs[n] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (ps.pr_psargs[i] == '\0') {
			ps.pr_psargs[i] = ' ';
		}
	}
	while (n > 0 && ps.pr_psargs[n - 1] == ' ') {
		n--;
	}
	ps.pr_psargs[n] = '\0';
	free(c->cmdline);
	c->cmdline = spy_xstrdup(ps.pr_psargs);
	ps.pr_fname[sizeof(ps.pr_fname) - 1] = '\0';
	free(c->exe);
	c->exe = spy_xstrdup(ps.pr_fname); /* a base name until NT_FILE names the file */
}

/* Where the vDSO was mapped: the kernel's auxiliary vector says, and the maps name it as live ones do. */
static void set_auxv(struct core *c, const unsigned char *desc, size_t len)
{
	for (size_t off = 0; off + 16 <= len; off += 16) {
		uint64_t kv[2];
		memcpy(kv, desc + off, sizeof(kv));
		if (kv[0] == AT_NULL) {
			break;
		}
		if (kv[0] == AT_SYSINFO_EHDR) {
			c->vdso = kv[1];
		}
	}
}

static int read_notes(struct core *c, const GElf_Phdr *ph, struct spy_err *err)
{
	if (ph->p_filesz > CORE_MAX_NOTES) {
		return spy_err_set(err, SPY_EFORMAT, "note segment of %llu bytes is too large",
				   (unsigned long long)ph->p_filesz);
	}
	Elf_Data *d = elf_getdata_rawchunk(c->elf, (int64_t)ph->p_offset, ph->p_filesz, ELF_T_NHDR);
	if (!d) {
		return spy_err_set(err, SPY_EFORMAT, "unreadable note segment: %s", elf_errmsg(-1));
	}
	size_t off = 0, name_off, desc_off;
	GElf_Nhdr nh;
	while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
		const unsigned char *desc = (const unsigned char *)d->d_buf + desc_off;
		if (nh.n_type == NT_PRSTATUS) {
			add_thread(c, desc, nh.n_descsz);
		} else if (nh.n_type == NT_PRPSINFO) {
			set_psinfo(c, desc, nh.n_descsz);
		} else if (nh.n_type == NT_AUXV) {
			set_auxv(c, desc, nh.n_descsz);
		} else if (!c->pac_noted && spy_arch_pac_note(nh.n_type, desc, nh.n_descsz, &c->pac_mask)) {
			c->pac_noted = true;
			spy_log(SPY_LOG_DEBUG, "core: pointer authentication mask 0x%llx",
				(unsigned long long)c->pac_mask);
		} else if (nh.n_type == NT_FILE && !c->maps) {
			int rc = core_parse_nt_file(desc, nh.n_descsz, &c->maps, &c->nmaps, &c->map_paths, err);
			if (rc < 0) {
				return rc;
			}
		}
	}
	return 0;
}

static uint8_t perms_of(uint32_t flags)
{
	return (uint8_t)(((flags & PF_R) ? SPY_MAP_R : 0) | ((flags & PF_W) ? SPY_MAP_W : 0) |
			 ((flags & PF_X) ? SPY_MAP_X : 0) | SPY_MAP_P);
}

static int cmp_seg(const void *a, const void *b)
{
	const struct core_seg *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool covered(const GElf_Phdr *loads, size_t n, spy_addr_t lo, spy_addr_t hi)
{
	for (size_t i = 0; i < n; i++) {
		if (loads[i].p_vaddr < hi && loads[i].p_vaddr + loads[i].p_memsz > lo) {
			return true;
		}
	}
	return false;
}

/*
 * Segments become the maps pystate and symbolize see: each PT_LOAD takes
 * the path and offset of the NT_FILE entry covering it, and each NT_FILE
 * entry no PT_LOAD covers (gdb leaves read-only file mappings out
 * entirely) becomes a segment read from its file alone. Only segments
 * that need it open their file.
 */
static void build_segments(struct core *c, const GElf_Phdr *loads, size_t n)
{
	struct spy_map *files = c->maps;
	size_t nfiles = c->nmaps, ns = 0;
	c->segs = spy_xcalloc(n + nfiles + 1, sizeof(*c->segs));
	for (size_t i = 0; i < n; i++) {
		struct core_seg *s = &c->segs[ns++];
		s->lo = loads[i].p_vaddr;
		s->hi = loads[i].p_vaddr + loads[i].p_memsz;
		s->off = loads[i].p_offset;
		s->filesz = loads[i].p_filesz;
		s->file = -1;
		s->perms = perms_of(loads[i].p_flags);
		/* The unwinder finds the vDSO's tables by that name (a nameless code mapping is a JIT's). */
		s->path = c->vdso && s->lo == c->vdso ? "[vdso]" : "";
		for (size_t k = 0; k < nfiles; k++) {
			if (files[k].lo <= s->lo && s->lo < files[k].hi) {
				s->path = files[k].path;
				s->file_off = files[k].offset + (s->lo - files[k].lo);
				s->file = s->filesz < loads[i].p_memsz ? file_index(c, s->path) : -1;
				break;
			}
		}
	}
	for (size_t k = 0; k < nfiles; k++) {
		if (!covered(loads, n, files[k].lo, files[k].hi)) {
			struct core_seg *s = &c->segs[ns++];
			s->lo = files[k].lo;
			s->hi = files[k].hi;
			s->perms = SPY_MAP_R | SPY_MAP_P;
			s->path = files[k].path;
			s->file_off = files[k].offset;
			s->file = file_index(c, s->path);
		}
	}
	qsort(c->segs, ns, sizeof(*c->segs), cmp_seg);
	c->maps = spy_xcalloc(ns + 1, sizeof(*c->maps));
	for (size_t i = 0; i < ns; i++) {
		c->maps[i] = (struct spy_map){ .lo = c->segs[i].lo, .hi = c->segs[i].hi,
					       .offset = c->segs[i].file_off, .perms = c->segs[i].perms,
					       .path = c->segs[i].path };
	}
	c->nsegs = c->nmaps = ns;
	spy_log(SPY_LOG_DEBUG, "core: %zu PT_LOAD segments, %zu mapped files, %zu segments in all", n,
		nfiles, ns);
	free(files);
}

static int read_phdrs(struct core *c, const char *path, struct spy_err *err)
{
	size_t nph;
	if (elf_getphdrnum(c->elf, &nph) != 0 || nph > CORE_MAX_SEGS) {
		return spy_err_set(err, SPY_EFORMAT, "%s: unreadable program headers", path);
	}
	GElf_Phdr *loads = spy_xcalloc(nph ? nph : 1, sizeof(*loads));
	size_t nl = 0;
	int rc = 0;
	for (size_t i = 0; i < nph && rc == 0; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(c->elf, (int)i, &ph)) {
			rc = spy_err_set(err, SPY_EFORMAT, "%s: unreadable program header %zu", path, i);
		} else if (ph.p_offset > c->size || ph.p_filesz > c->size - ph.p_offset) {
			rc = spy_err_set(err, SPY_EFORMAT, "%s is truncated: segment %zu ends past its end",
					 path, i);
		} else if (ph.p_type == PT_NOTE) {
			rc = read_notes(c, &ph, err);
		} else if (ph.p_type == PT_LOAD && ph.p_memsz > 0) {
			loads[nl++] = ph;
		}
	}
	if (rc == 0) {
		build_segments(c, loads, nl);
	}
	free(loads);
	return rc;
}

/*
 * The executable: the mapped file named like the command; --exe, if given,
 * stands for it (open_named), the maps keeping the name the core gives.
 */
static void pick_exe(struct core *c, const char *exe)
{
	const char *guess = NULL;
	for (size_t i = 0; i < c->nmaps && c->exe && !guess; i++) {
		const char *b = strrchr(c->maps[i].path, '/');
		if (b && c->exe[0] && !strncmp(b + 1, c->exe, strlen(c->exe))) {
			guess = c->maps[i].path;
		}
	}
	c->exe_name = guess;
	c->user_exe = exe ? spy_xstrdup(exe) : NULL;
	char *copy = spy_xstrdup(guess ? guess : exe ? exe : "");
	free(c->exe);
	c->exe = copy;
}

int core_open(struct core **out, const char *path, const char *exe, const char *root,
	      struct spy_err *err)
{
	struct core *c = spy_xcalloc(1, sizeof(*c));
	struct stat st;
	int rc = 0;
	*out = NULL;
	c->rootfd = -1;
	c->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (c->fd < 0 || fstat(c->fd, &st) < 0) {
		rc = spy_err_set(err, SPY_EIO, "cannot open core file %s: %m", path);
		goto fail;
	}
	if (root) {
		c->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (c->rootfd < 0) {
			rc = spy_err_set(err, SPY_EIO, "cannot open root directory %s: %m", root);
			goto fail;
		}
		/* Shown before the core's paths in messages: "/" adds nothing. */
		size_t n = strlen(root);
		while (n > 0 && root[n - 1] == '/') {
			n--;
		}
		c->root = spy_xmalloc(n + 1);
		memcpy(c->root, root, n);
		c->root[n] = '\0';
	}
	c->size = (uint64_t)st.st_size;
	elf_version(EV_CURRENT);
	c->elf = elf_begin(c->fd, ELF_C_READ, NULL);
	GElf_Ehdr eh;
	if (!c->elf || elf_kind(c->elf) != ELF_K_ELF || !gelf_getehdr(c->elf, &eh) || eh.e_type != ET_CORE) {
		rc = spy_err_set(err, SPY_EFORMAT, "%s is not a core file", path);
		goto fail;
	}
	if (eh.e_machine != spy_arch_elf_machine() || gelf_getclass(c->elf) != ELFCLASS64) {
		rc = spy_err_set(err, SPY_EFORMAT,
				 "%s is a core of another architecture (ELF machine %u); this spy reads %s cores",
				 path, (unsigned)eh.e_machine, spy_arch_name());
		goto fail;
	}
	rc = read_phdrs(c, path, err);
	if (rc < 0) {
		goto fail;
	}
	if (c->nthreads == 0) {
		rc = spy_err_set(err, SPY_EFORMAT, "%s has no threads (no NT_PRSTATUS note): truncated?", path);
		goto fail;
	}
	if (!c->pid) {
		c->pid = c->threads[0].tid;
	}
	if (!c->cmdline) {
		c->cmdline = spy_xstrdup("");
	}
	if (!c->pac_noted) {
		c->pac_mask = spy_arch_pac_mask_unknown();
	}
	pick_exe(c, exe);
	c->mem.read = core_read;
	c->mem.ctx = c;
	c->mem.maps = c->maps;
	c->mem.nmaps = c->nmaps;
	classify_threads(c);
	*out = c;
	return 0;
fail:
	core_free(c);
	return rc;
}

void core_free(struct core *c)
{
	if (!c) {
		return;
	}
	for (size_t i = 0; i < c->nfiles; i++) {
		if (c->files[i].fd >= 0) {
			close(c->files[i].fd);
		}
	}
	free(c->files);
	if (c->elf) {
		elf_end(c->elf);
	}
	if (c->fd >= 0) {
		close(c->fd);
	}
	free(c->segs);
	free(c->maps);
	free(c->map_paths);
	free(c->threads);
	free(c->regs);
	free(c->cmdline);
	free(c->exe);
	free(c->user_exe);
	free(c->root);
	if (c->rootfd >= 0) {
		close(c->rootfd);
	}
	free(c);
}

const struct spy_mem *core_mem(const struct core *c)
{
	return &c->mem;
}

pid_t core_pid(const struct core *c)
{
	return c->pid;
}

const char *core_cmdline(const struct core *c)
{
	return c->cmdline;
}

const char *core_exe(const struct core *c)
{
	return c->exe;
}

const struct proc_thread *core_threads(const struct core *c, size_t *n)
{
	*n = c->nthreads;
	return c->threads;
}

int core_root(const struct core *c)
{
	return c->rootfd;
}

const struct spy_regs *core_regs(const struct core *c, pid_t tid, uint64_t *pac_mask)
{
	*pac_mask = c->pac_mask;
	for (size_t i = 0; i < c->nthreads; i++) {
		if (c->threads[i].tid == tid) {
			return &c->regs[i];
		}
	}
	return NULL;
}
