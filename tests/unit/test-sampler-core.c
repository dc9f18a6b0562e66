/*
 * Unit tests for core files (sampler/core.c) and the wait classifier
 * (sampler/tstate.c): a core is crafted byte by byte here -- two threads,
 * the command, one dumped segment and one file-backed segment the core
 * leaves out -- then opened, read, truncated and corrupted. No gdb needed.
 * The threads' registers are in the host's layout (common/arch.h), the one
 * thing here written per architecture; they are kept for the native walk
 * (core_regs), with the pac mask of arm64's note (ignored elsewhere) and the
 * vDSO's segment named from NT_AUXV. A core with more NT_PRSTATUS notes
 * than spy keeps threads, and one too short for its registers, opens.
 */
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/procfs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/bounds.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "sampler/sampler.h"
#include "tests/lib/check.h"

#define ANON_AT 0x10000
#define FILE_AT 0x20000
#define FILE0_AT 0x30000
/* Where the dumped page holds an `svc #0` (what an aarch64 pc in a syscall points at). */
#define SVC_AT (ANON_AT + 0x800)
#define PAGE 4096

static char dir[] = "/tmp/spy-core-test.XXXXXX";

static void note(struct spy_buf *b, uint32_t type, const char *name, const void *desc, size_t len)
{
	Elf64_Nhdr nh = { (uint32_t)strlen(name) + 1, (uint32_t)len, type };
	static const char zero[4];
	spy_buf_add(b, &nh, sizeof(nh));
	spy_buf_add(b, name, nh.n_namesz);
	spy_buf_add(b, zero, (4 - nh.n_namesz % 4) % 4);
	spy_buf_add(b, desc, len);
	spy_buf_add(b, zero, (4 - len % 4) % 4);
}

static void prstatus(struct spy_buf *b, pid_t tid, long nr, uint64_t arg0, uint64_t arg1)
{
	prstatus_t st;
	memset(&st, 0, sizeof(st));
	st.pr_pid = tid;
#if defined(__x86_64__)
	st.pr_reg[15] = (unsigned long)nr; /* orig_rax */
	st.pr_reg[14] = arg0;              /* rdi */
	st.pr_reg[13] = arg1;              /* rsi */
#elif defined(__aarch64__)
	st.pr_reg[8] = (unsigned long)nr;          /* x8 */
	st.pr_reg[0] = arg0;                       /* x0 */
	st.pr_reg[1] = arg1;                       /* x1 */
	st.pr_reg[32] = nr < 0 ? ANON_AT : SVC_AT; /* pc */
#endif
	note(b, NT_PRSTATUS, "CORE", &st, sizeof(st));
}

/* NT_FILE: one mapping of path at FILE_AT, from its page 2; its page 0 at FILE0_AT if first. */
static void nt_file(struct spy_buf *b, const char *path, bool first)
{
	struct spy_buf d = SPY_BUF_INIT;
	uint64_t head[5] = { 1, PAGE, FILE_AT, FILE_AT + PAGE, 2 };
	uint64_t head2[8] = { 2, PAGE, FILE0_AT, FILE0_AT + PAGE, 0, FILE_AT, FILE_AT + PAGE, 2 };
	if (first) {
		spy_buf_add(&d, head2, sizeof(head2));
		spy_buf_add(&d, path, strlen(path) + 1);
	} else {
		spy_buf_add(&d, head, sizeof(head));
	}
	spy_buf_add(&d, path, strlen(path) + 1);
	note(b, 0x46494c45, "CORE", d.buf, d.len);
	spy_buf_release(&d);
}

static void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(data, 1, len, f) == len);
	if (f) {
		fclose(f);
	}
}

/*
 * The first page of an ELF file whose build-id is 20 bytes of id: what the
 * kernel and gcore dump of each mapped ELF file.
 */
static void elf_page(unsigned char *page, unsigned char id)
{
	memset(page, 0, PAGE);
	Elf64_Ehdr eh = { .e_type = ET_DYN, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
			  .e_phoff = sizeof(Elf64_Ehdr), .e_ehsize = sizeof(Elf64_Ehdr),
			  .e_phentsize = sizeof(Elf64_Phdr), .e_phnum = 1 };
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	Elf64_Phdr ph = { .p_type = PT_NOTE, .p_offset = 0x100, .p_filesz = 12 + 4 + 20 };
	Elf64_Nhdr nh = { 4, 20, NT_GNU_BUILD_ID };
	memcpy(page, &eh, sizeof(eh));
	memcpy(page + sizeof(eh), &ph, sizeof(ph));
	memcpy(page + 0x100, &nh, sizeof(nh));
	memcpy(page + 0x100 + sizeof(nh), "GNU", 4);
	memset(page + 0x100 + sizeof(nh) + 4, id, 20);
}

/*
 * The crafted core's bytes; etype lets a test make it an ET_EXEC instead.
 * first, if not NULL, is the mapped file's page 0 as the core dumped it.
 */
/* What the kernel's auxiliary vector and arm64's NT_ARM_PAC_MASK say (the mask is ignored elsewhere). */
#define PAC_MASK 0x007f000000000000ull
static void other_notes(struct spy_buf *b)
{
	uint64_t auxv[6] = { AT_PAGESZ, PAGE, AT_SYSINFO_EHDR, ANON_AT, AT_NULL, 0 };
	note(b, NT_AUXV, "CORE", auxv, sizeof(auxv));
	uint64_t pac[2] = { PAC_MASK, PAC_MASK };
	note(b, 0x406 /* NT_ARM_PAC_MASK */, "LINUX", pac, sizeof(pac));
}

static void assemble(struct spy_buf *out, struct spy_buf *notes, uint16_t etype,
		     const unsigned char *first);

static void make_core_with(struct spy_buf *out, const char *mapped, uint16_t etype,
			   const unsigned char *first)
{
	struct spy_buf notes = SPY_BUF_INIT;
	prstatus(&notes, 1234, SYS_futex, ANON_AT + 0x40, 0x80 /* FUTEX_WAIT_PRIVATE */);
	prstatus(&notes, 1235, -1, 0, 0);
	prpsinfo_t ps;
	memset(&ps, 0, sizeof(ps));
	ps.pr_pid = 1234;
	memcpy(ps.pr_fname, "python3", 8);
	memcpy(ps.pr_psargs, "python3\0x.py", 12); /* gdb leaves NULs between arguments */
	note(&notes, NT_PRPSINFO, "CORE", &ps, sizeof(ps));
	nt_file(&notes, mapped, first != NULL);
	other_notes(&notes);
	assemble(out, &notes, etype, first);
}

/* The core around notes (released here): its headers, the dumped page, first if given. */
static void assemble(struct spy_buf *out, struct spy_buf *notes_in, uint16_t etype,
		     const unsigned char *first)
{
	struct spy_buf notes = *notes_in;

	Elf64_Ehdr eh;
	memset(&eh, 0, sizeof(eh));
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_type = etype;
	eh.e_machine = spy_arch_elf_machine();
	eh.e_version = EV_CURRENT;
	eh.e_phoff = sizeof(eh);
	eh.e_ehsize = sizeof(eh);
	eh.e_phentsize = sizeof(Elf64_Phdr);
	eh.e_phnum = first ? 4 : 3;
	uint64_t notes_at = sizeof(eh) + eh.e_phnum * sizeof(Elf64_Phdr);
	uint64_t anon_at = (notes_at + notes.len + PAGE - 1) & ~(uint64_t)(PAGE - 1);
	Elf64_Phdr ph[4] = {
		{ .p_type = PT_NOTE, .p_offset = notes_at, .p_filesz = notes.len },
		{ .p_type = PT_LOAD, .p_flags = PF_R | PF_W, .p_offset = anon_at, .p_vaddr = ANON_AT,
		  .p_filesz = PAGE, .p_memsz = PAGE },
		/* Read-only and file-backed: not in the core, read from the file. */
		{ .p_type = PT_LOAD, .p_flags = PF_R, .p_offset = anon_at + PAGE, .p_vaddr = FILE_AT,
		  .p_filesz = 0, .p_memsz = PAGE },
		/* The file's first page, dumped: where its build-id is. */
		{ .p_type = PT_LOAD, .p_flags = PF_R, .p_offset = anon_at + PAGE, .p_vaddr = FILE0_AT,
		  .p_filesz = PAGE, .p_memsz = PAGE },
	};
	spy_buf_add(out, &eh, sizeof(eh));
	spy_buf_add(out, ph, eh.e_phnum * sizeof(Elf64_Phdr));
	spy_buf_add(out, notes.buf, notes.len);
	while (out->len < anon_at) {
		spy_buf_addch(out, 0);
	}
	for (int i = 0; i < PAGE; i++) {
		spy_buf_addch(out, (char)(i & 0xff));
	}
	static const unsigned char svc0[4] = { 0x01, 0x00, 0x00, 0xd4 };
	memcpy(out->buf + anon_at + (SVC_AT - ANON_AT), svc0, sizeof(svc0));
	if (first) {
		spy_buf_add(out, first, PAGE);
	}
	spy_buf_release(&notes);
}

static void make_core(struct spy_buf *out, const char *mapped, uint16_t etype)
{
	make_core_with(out, mapped, etype, NULL);
}

/* Whether a core naming mapped (first page as given) lets dump read the file's page 2. */
static bool reads_file(const char *mapped, const unsigned char *first, const char *exe,
		       const char *root)
{
	char core[128];
	snprintf(core, sizeof(core), "%s/crafted", dir);
	struct spy_buf b = SPY_BUF_INIT;
	make_core_with(&b, mapped, ET_CORE, first);
	write_file(core, b.buf, b.len);
	spy_buf_release(&b);
	struct core *c = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(core_open(&c, core, exe, root, &err), 0);
	unsigned char buf[5];
	bool yes = c && spy_mem_read(core_mem(c), FILE_AT + 8, buf, 5) == 0 && !memcmp(buf, "page2", 5);
	core_free(c);
	return yes;
}

/*
 * What a crafted core can make dump read (#14): a file its NT_FILE names is
 * read only if the build-id the core recorded matches, or the user named
 * it (--exe) or its root (--root, inside which links resolve). A FIFO, a
 * terminal, a link out of the root: never, and without hanging.
 */
static void test_named_files(void)
{
	unsigned char ours[PAGE], other[PAGE];
	elf_page(ours, 0xab);
	elf_page(other, 0xcd);
	/* The refusals warn; the checks below say what matters. */
	int level = spy_log_level;
	spy_log_level = SPY_LOG_ERROR;
	char secret[128], elf[128], fifo[128], rootdir[128], link[160], path[160];
	snprintf(secret, sizeof(secret), "%s/secret", dir);
	snprintf(elf, sizeof(elf), "%s/lib.so", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(rootdir, sizeof(rootdir), "%s/root", dir);

	/* A secret (no build-id anywhere): not read unless the user names it. */
	char filedata[3 * PAGE];
	memset(filedata, 's', sizeof(filedata));
	memcpy(filedata + 2 * PAGE + 8, "page2", 5);
	write_file(secret, filedata, sizeof(filedata));
	CHECK(!reads_file(secret, NULL, NULL, NULL));
	CHECK(!reads_file(secret, ours, NULL, NULL));
	CHECK(reads_file(secret, NULL, secret, NULL) == false); /* --exe stands for the executable only */
	CHECK(reads_file(secret, NULL, NULL, "/"));

	/* An ELF file whose build-id the core recorded: read with no option; another build: never. */
	memcpy(filedata, ours, PAGE);
	write_file(elf, filedata, sizeof(filedata));
	CHECK(reads_file(elf, ours, NULL, NULL));
	CHECK(!reads_file(elf, other, NULL, NULL));
	CHECK(!reads_file(elf, other, NULL, "/"));
	/* A link to it is not the name the kernel would have written: refused without --root. */
	snprintf(link, sizeof(link), "%s/link.so", dir);
	CHECK(symlink(elf, link) == 0);
	CHECK(!reads_file(link, ours, NULL, NULL));

	/* A FIFO and a terminal: refused, even with a root, and no open blocks. */
	CHECK(mkfifo(fifo, 0600) == 0);
	alarm(20);
	CHECK(!reads_file(fifo, NULL, NULL, "/"));
	CHECK(!reads_file(fifo, ours, NULL, NULL));
	CHECK(!reads_file("/dev/tty", NULL, NULL, "/"));
	CHECK(!reads_file("/dev/zero", NULL, NULL, "/"));
	alarm(0);

	/* In a root, an absolute link planted there resolves inside the root, not to our secret. */
	snprintf(path, sizeof(path), "%s/lib", rootdir);
	CHECK(mkdir(rootdir, 0700) == 0 && mkdir(path, 0700) == 0);
	snprintf(path, sizeof(path), "%s/lib/planted.so", rootdir);
	CHECK(symlink(secret, path) == 0);
	CHECK(!reads_file("/lib/planted.so", NULL, NULL, rootdir));
	CHECK(!reads_file("/../../../../../../lib/planted.so", NULL, NULL, rootdir));
	/* The same file, really inside the root: read. */
	snprintf(path, sizeof(path), "%s/lib/real.so", rootdir);
	write_file(path, filedata, sizeof(filedata));
	CHECK(reads_file("/lib/real.so", NULL, NULL, rootdir));
	spy_log_level = level;
}

static void test_open_and_read(const char *core, const char *mapped)
{
	struct core *c = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(core_open(&c, core, NULL, "/", &err), 0);
	if (!c) {
		fprintf(stderr, "core_open: %s\n", err.msg);
		return;
	}
	CHECK_INT(core_pid(c), 1234);
	CHECK_STR(core_cmdline(c), "python3 x.py");
	size_t n;
	const struct proc_thread *t = core_threads(c, &n);
	CHECK_INT(n, 2);
	CHECK_INT(t[0].tid, 1234);
	CHECK_INT(t[1].tid, 1235);
	CHECK_INT(t[0].wait.kind, SPY_WAIT_FUTEX);
	CHECK_INT(t[0].wait.futex, ANON_AT + 0x40);
	CHECK_INT(t[1].wait.kind, SPY_WAIT_RUNNING);
	const struct spy_mem *m = core_mem(c);
	unsigned char buf[16];
	CHECK_INT(spy_mem_read(m, ANON_AT + 0x10, buf, 4), 0);
	CHECK(buf[0] == 0x10 && buf[3] == 0x13);
	CHECK_INT(spy_mem_read(m, FILE_AT + 8, buf, 5), 0);
	CHECK(!memcmp(buf, "page2", 5));
	/* Past the end of a segment into nothing, and below every segment. */
	CHECK(spy_mem_read(m, ANON_AT + PAGE - 4, buf, 8) < 0);
	CHECK(spy_mem_read(m, 0x1000, buf, 1) < 0);
	CHECK_INT(m->nmaps, 2);
	CHECK_STR(m->maps[1].path, mapped);
	CHECK_INT(m->maps[1].offset, 2 * PAGE);
	CHECK(spy_mem_plausible(m, FILE_AT, 8));
	core_free(c);

	CHECK_INT(core_open(&c, core, "/opt/python3", NULL, &err), 0);
	if (c) {
		CHECK_STR(core_exe(c), "/opt/python3");
		core_free(c);
	}
}

/* The first argument register of a thread's saved registers (common/arch.h's layout). */
static uint64_t arg0_of(const struct spy_regs *r)
{
#if defined(__x86_64__)
	return r->g[14]; /* rdi */
#else
	return r->g[0]; /* x0 */
#endif
}

/* What a native walk starts from: each thread's saved registers, the pac mask, the vDSO's name. */
static void test_regs(const char *core)
{
	struct core *c = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(core_open(&c, core, NULL, NULL, &err), 0);
	if (!c) {
		return;
	}
	uint64_t mask = 1;
	const struct spy_regs *r = core_regs(c, 1234, &mask);
	CHECK(r != NULL);
	CHECK(r && arg0_of(r) == ANON_AT + 0x40);
	CHECK_INT(mask, spy_arch_elf_machine() == EM_AARCH64 ? PAC_MASK : 0);
	r = core_regs(c, 1235, &mask);
	CHECK(r && arg0_of(r) == 0);
	CHECK(core_regs(c, 999, &mask) == NULL);
	CHECK_INT(core_root(c), -1);
	/* AT_SYSINFO_EHDR names the segment there, as /proc/PID/maps does. */
	CHECK_STR(core_mem(c)->maps[0].path, "[vdso]");
	core_free(c);
}

/* NT_PRSTATUS notes past SPY_MAX_THREADS, and one too short to hold registers. */
static void test_many_threads(void)
{
	struct spy_buf notes = SPY_BUF_INIT, b = SPY_BUF_INIT;
	char path[128];
	snprintf(path, sizeof(path), "%s/threads", dir);
	note(&notes, NT_PRSTATUS, "CORE", "short", 5);
	for (int i = 0; i < SPY_MAX_THREADS + 10; i++) {
		prstatus(&notes, 2000 + i, -1, (uint64_t)i, 0);
	}
	assemble(&b, &notes, ET_CORE, NULL);
	write_file(path, b.buf, b.len);
	spy_buf_release(&b);
	struct core *c = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(core_open(&c, path, NULL, NULL, &err), 0);
	if (!c) {
		return;
	}
	size_t n;
	const struct proc_thread *t = core_threads(c, &n);
	CHECK_INT(n, SPY_MAX_THREADS);
	CHECK_INT(t[0].tid, 2000);
	uint64_t mask;
	const struct spy_regs *r = core_regs(c, 2000 + SPY_MAX_THREADS - 1, &mask);
	CHECK(r && arg0_of(r) == SPY_MAX_THREADS - 1);
	/* No pac note: every bit above user space (arm64), nothing (x86-64). */
	CHECK_INT(mask, spy_arch_elf_machine() == EM_AARCH64 ? ~((1ull << 48) - 1) : 0);
	CHECK(core_regs(c, 2000 + SPY_MAX_THREADS, &mask) == NULL);
	core_free(c);
}

static void expect_error(const char *path, int code, const char *what)
{
	struct core *c = NULL;
	struct spy_err err = SPY_ERR_INIT;
	int rc = core_open(&c, path, NULL, NULL, &err);
	CHECK_INT(rc, -code);
	CHECK(c == NULL);
	CHECK(strstr(err.msg, what) != NULL);
	if (!strstr(err.msg, what)) {
		fprintf(stderr, "  message: %s\n", err.msg);
	}
}

static void test_bad_files(const struct spy_buf *good, const char *mapped)
{
	struct spy_buf b = SPY_BUF_INIT;
	char path[128];
	snprintf(path, sizeof(path), "%s/bad", dir);

	write_file(path, good->buf, good->len - 100);
	expect_error(path, SPY_EFORMAT, "truncated");
	write_file(path, good->buf, 40);
	expect_error(path, SPY_EFORMAT, "not a core file");
	write_file(path, "garbage, not ELF at all", 23);
	expect_error(path, SPY_EFORMAT, "not a core file");
	make_core(&b, mapped, ET_EXEC);
	write_file(path, b.buf, b.len);
	expect_error(path, SPY_EFORMAT, "not a core file");
	/* A core of another CPU: its registers are not in this layout. */
	Elf64_Ehdr *eh = (Elf64_Ehdr *)b.buf;
	eh->e_type = ET_CORE;
	eh->e_machine = EM_RISCV;
	write_file(path, b.buf, b.len);
	expect_error(path, SPY_EFORMAT, "another architecture");
	expect_error("/nonexistent/core", SPY_EIO, "cannot open");
	spy_buf_release(&b);
}

static void test_nt_file(void)
{
	struct spy_map *maps;
	size_t n;
	char *paths;
	struct spy_err err = SPY_ERR_INIT;
	uint64_t d[8] = { 2, PAGE, 0x1000, 0x3000, 0, 0x5000, 0x6000, 3 };
	unsigned char buf[sizeof(d) + 8];
	memcpy(buf, d, sizeof(d));
	memcpy(buf + sizeof(d), "/a\0/b/c\0", 8);
	CHECK_INT(core_parse_nt_file(buf, sizeof(buf), &maps, &n, &paths, &err), 0);
	CHECK_INT(n, 2);
	if (n == 2) {
		CHECK_INT(maps[1].lo, 0x5000);
		CHECK_INT(maps[1].offset, 3 * PAGE);
		CHECK_STR(maps[0].path, "/a");
		CHECK_STR(maps[1].path, "/b/c");
		free(maps);
		free(paths);
	}
	/* The names cut short: the second entry has none. */
	CHECK_INT(core_parse_nt_file(buf, sizeof(d) + 3, &maps, &n, &paths, &err), -SPY_EFORMAT);
	/* More entries than bytes. */
	d[0] = 1000;
	memcpy(buf, d, sizeof(d));
	CHECK_INT(core_parse_nt_file(buf, sizeof(buf), &maps, &n, &paths, &err), -SPY_EFORMAT);
	CHECK_INT(core_parse_nt_file(buf, 8, &maps, &n, &paths, &err), -SPY_EFORMAT);
}

static void test_classify(void)
{
	struct spy_wait w;
	char text[128];
	snprintf(text, sizeof(text), "%d 0x7f0000001000 0x80 0x0 0x0 0x0 0x0 0x7ffd0 0x7f12",
		 SYS_futex);
	proc_classify_wait('S', text, &w);
	CHECK_INT(w.kind, SPY_WAIT_FUTEX);
	CHECK_INT(w.futex, 0x7f0000001000);
	/* FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME | PRIVATE: still a wait. */
	snprintf(text, sizeof(text), "%d 0x1000 0x189 0x0", SYS_futex);
	proc_classify_wait('S', text, &w);
	CHECK_INT(w.kind, SPY_WAIT_FUTEX);
	/* FUTEX_WAKE does not block. */
	snprintf(text, sizeof(text), "%d 0x1000 0x81 0x1", SYS_futex);
	proc_classify_wait('S', text, &w);
	CHECK_INT(w.kind, SPY_WAIT_OTHER);
	proc_classify_wait('S', "230 0x1 0x0 0x7ffe 0x0 0x0 0x0 0x7ffd 0x7f12", &w);
	CHECK_INT(w.kind, SPY_WAIT_OTHER);
	CHECK_INT(w.nr, 230);
	proc_classify_wait('S', "-1 0x7ffd 0x7f12", &w);
	CHECK_INT(w.kind, SPY_WAIT_OTHER);
	proc_classify_wait('R', "running", &w);
	CHECK_INT(w.kind, SPY_WAIT_RUNNING);
	proc_classify_wait('S', "", &w);
	CHECK_INT(w.kind, SPY_WAIT_OTHER);
	proc_classify_wait(0, NULL, &w);
	CHECK_INT(w.kind, SPY_WAIT_UNKNOWN);
	snprintf(text, sizeof(text), "%d garbage", SYS_futex);
	proc_classify_wait('S', text, &w);
	CHECK_INT(w.kind, SPY_WAIT_OTHER);

	/* A futex wait restarted after a ptrace stop: wchan tells it, not the address. */
	snprintf(text, sizeof(text), "%d 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f12", SYS_restart_syscall);
	proc_classify_wait('S', text, &w);
	CHECK_INT(w.kind, SPY_WAIT_OTHER);
	proc_wait_note_wchan(&w, "futex_wait_queue");
	CHECK_INT(w.kind, SPY_WAIT_FUTEX);
	CHECK_INT(w.futex, 0);
	CHECK_STR(w.wchan, "futex_wait_queue");
	/* A restarted sleep stays a sleep. */
	proc_classify_wait('S', text, &w);
	proc_wait_note_wchan(&w, "hrtimer_nanosleep");
	CHECK_INT(w.kind, SPY_WAIT_OTHER);
	proc_wait_note_wchan(&w, "0");
	CHECK_STR(w.wchan, "");

	/* Where a sleeper sleeps (--native -i's kept unwinds): the last two fields. */
	spy_addr_t sp = 1, pc = 1;
	CHECK_INT(proc_parse_blocked_at(text, &sp, &pc), 1);
	CHECK_INT(sp, 0x7ffd);
	CHECK_INT(pc, 0x7f12);
	CHECK_INT(proc_parse_blocked_at("-1 0x7ffd 0x7f12", &sp, &pc), 0);
	CHECK_INT(proc_parse_blocked_at("running", &sp, &pc), 0);
	CHECK_INT(proc_parse_blocked_at("", &sp, &pc), 0);
	CHECK_INT(proc_parse_blocked_at("230 0x1 0x0 0x7ffe", &sp, &pc), 0);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char core[128], mapped[128];
	snprintf(core, sizeof(core), "%s/core", dir);
	snprintf(mapped, sizeof(mapped), "%s/mapped", dir);
	char filedata[3 * PAGE];
	memset(filedata, 'z', sizeof(filedata));
	memcpy(filedata + 2 * PAGE + 8, "page2", 5);
	write_file(mapped, filedata, sizeof(filedata));

	struct spy_buf good = SPY_BUF_INIT;
	make_core(&good, mapped, ET_CORE);
	write_file(core, good.buf, good.len);

	test_classify();
	test_nt_file();
	test_open_and_read(core, mapped);
	test_regs(core);
	test_many_threads();
	test_named_files();
	test_bad_files(&good, mapped);

	spy_buf_release(&good);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0) {
		fprintf(stderr, "could not remove %s\n", dir);
	}
	return check_done();
}
