/*
 * struct proc: opening a live process, its identity (cmdline, exe), its
 * mappings, and the spy_mem that reads its memory.
 *
 * The memory reader is process_vm_readv, at most one syscall per read with
 * no allocation, because pystate calls it thousands of times per sample;
 * memcache.c sits in front of it and serves most reads of a paused target
 * with none. Some kernels or seccomp policies refuse it while still allowing
 * /proc/PID/mem (the two are gated by the same ptrace access check, but
 * process_vm_readv can be compiled out or filtered), so proc_open() probes it
 * once on a real mapping and falls back to pread() on a /proc/PID/mem
 * descriptor kept open for the life of the proc. That descriptor also pins
 * the target's address space, so unlike a PID it cannot start reading a
 * different process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "sampler/internal.h"

static int mem_read_vm(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	struct proc *p = ctx;
	if (len == 0) {
		return 0;
	}
	if (len > SSIZE_MAX || addr > UINTPTR_MAX - len) {
		return -SPY_EMEM;
	}
	p->mc.stats.syscalls++;
	struct iovec local = { .iov_base = dst, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n = process_vm_readv(p->mem_tid, &local, 1, &remote, 1, 0);
	return n == (ssize_t)len ? 0 : -SPY_EMEM;
}

static int mem_read_pread(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	struct proc *p = ctx;
	if (len == 0) {
		return 0;
	}
	/* pread takes a signed offset; the upper half is kernel space anyway. */
	if (len > SSIZE_MAX || addr > (uint64_t)INT64_MAX - len) {
		return -SPY_EMEM;
	}
	p->mc.stats.syscalls++;
	ssize_t n = pread(p->memfd, dst, len, (off_t)addr);
	return n == (ssize_t)len ? 0 : -SPY_EMEM;
}

ssize_t proc_fetch_lines(struct proc *p, spy_addr_t addr, const struct iovec *local, size_t n)
{
	/* memcache never asks for more lines than a bounded read spans. */
	struct iovec remote[MEMCACHE_MAX_READ / MEMCACHE_LINE + 2];
	uint64_t len = (uint64_t)n * MEMCACHE_LINE;

	if (n == 0 || n > SPY_ARRAY_SIZE(remote)) {
		return -1;
	}
	if (p->memfd >= 0) {
		if (addr > (uint64_t)INT64_MAX - len) {
			return -1;
		}
		p->mc.stats.syscalls++;
		return preadv(p->memfd, local, (int)n, (off_t)addr);
	}
	if (addr > UINTPTR_MAX - len) {
		return -1;
	}
	/*
	 * One remote iovec per line: the kernel stops at the first page it
	 * cannot read and reports the bytes before it, and whole lines are
	 * what the caller can keep, whatever granularity that stop has.
	 */
	for (size_t i = 0; i < n; i++) {
		remote[i].iov_base = (void *)(uintptr_t)(addr + (uint64_t)i * MEMCACHE_LINE);
		remote[i].iov_len = MEMCACHE_LINE;
	}
	p->mc.stats.syscalls++;
	return process_vm_readv(p->mem_tid, local, n, remote, n, 0);
}

ssize_t proc_fetch_scattered(struct proc *p, const spy_addr_t *addrs, const struct iovec *local,
			     size_t n)
{
	struct iovec remote[MEMCACHE_LINES];

	if (p->memfd >= 0 || n == 0 || n > SPY_ARRAY_SIZE(remote)) {
		return -1;
	}
	/*
	 * Ranges that continue one another (a frame stack's lines, whole) are
	 * one remote range: the kernel looks up the mapping and takes the
	 * target's memory lock once per remote range, not per page. The bytes
	 * still stream into the local ranges in order, so the caller's
	 * accounting of what arrived whole is the same.
	 */
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (local[i].iov_len > MEMCACHE_LINE || addrs[i] > UINTPTR_MAX - MEMCACHE_LINE) {
			return -1;
		}
		if (m && (uintptr_t)remote[m - 1].iov_base + remote[m - 1].iov_len == addrs[i]) {
			remote[m - 1].iov_len += local[i].iov_len;
			continue;
		}
		remote[m].iov_base = (void *)(uintptr_t)addrs[i];
		remote[m].iov_len = local[i].iov_len;
		m++;
	}
	p->mc.stats.syscalls++;
	return process_vm_readv(p->mem_tid, local, n, remote, m, 0);
}

/*
 * Mappings worth probing: readable, and backed by ordinary memory. [vvar]
 * and device mappings are VM_PFNMAP/VM_IO, which both readers refuse with
 * EFAULT/EIO however permissive the kernel is.
 */
static bool probe_candidate(const struct spy_map *m)
{
	if (!(m->perms & SPY_MAP_R)) {
		return false;
	}
	if (m->path[0] == '[') {
		return !strcmp(m->path, "[heap]") || !strcmp(m->path, "[stack]");
	}
	return strncmp(m->path, "/dev/", 5) != 0;
}

static int perm_error(struct proc *p, int e, struct spy_err *err)
{
	int rc = spy_err_set(err, SPY_EPERM, "cannot read the memory of process %d: %s",
			     (int)p->pid, strerror(e));
	spy_err_remedy(err, "%s", SAMPLER_REMEDY_PERM);
	return rc;
}

/*
 * Whether the target's memory can be read. Every probe missing its mapping
 * (EFAULT, then EIO from /proc/PID/mem) is not a refusal: the address space
 * was replaced after the maps were read (an exec, e.g. a launch's shim
 * becoming Python). *stale then says so, and the caller reads the maps again.
 */
static int check_memory(struct proc *p, bool *stale, struct spy_err *err)
{
	/* The probes try a few mappings: one may be unmapped since we read maps. */
	const int max_probes = 4;
	uint64_t word;
	int probes = 0, e = 0;
	bool unmapped = true;

	*stale = false;

	p->raw_read = mem_read_vm;
	for (size_t i = 0; i < p->nmaps && probes < max_probes; i++) {
		if (!probe_candidate(&p->maps[i])) {
			continue;
		}
		probes++;
		struct iovec local = { .iov_base = &word, .iov_len = sizeof(word) };
		struct iovec remote = { .iov_base = (void *)(uintptr_t)p->maps[i].lo,
					.iov_len = sizeof(word) };
		ssize_t n = process_vm_readv(p->mem_tid, &local, 1, &remote, 1, 0);
		if (n == (ssize_t)sizeof(word)) {
			p->image_addr = p->maps[i].lo;
			return 0;
		}
		e = n < 0 ? errno : EFAULT;
		unmapped &= e == EFAULT;
		if (e == ESRCH) {
			return spy_err_set(err, SPY_ENOPROC, "process %d exited", (int)p->pid);
		}
		if (e != EFAULT) {
			break;
		}
	}
	if (probes == 0) {
		/* Nothing to read (a kernel thread has no maps): nothing to refuse us either. */
		return 0;
	}
	spy_log(SPY_LOG_DEBUG, "process_vm_readv on %d failed (%s); trying /proc/%d/mem",
		(int)p->pid, strerror(e), (int)p->pid);

	p->memfd = openat(p->memdirfd, "mem", O_RDONLY | O_CLOEXEC);
	if (p->memfd < 0) {
		return perm_error(p, errno == ENOENT ? e : errno, err);
	}
	p->raw_read = mem_read_pread;
	probes = 0;
	for (size_t i = 0; i < p->nmaps && probes < max_probes; i++) {
		if (!probe_candidate(&p->maps[i])) {
			continue;
		}
		probes++;
		errno = EIO;
		if (mem_read_pread(p, p->maps[i].lo, &word, sizeof(word)) == 0) {
			p->image_addr = p->maps[i].lo;
			return 0;
		}
		e = errno;
		unmapped &= e == EIO;
	}
	close(p->memfd);
	p->memfd = -1;
	if (p->statfd >= 0) {
		close(p->statfd);
	}
	p->statfd = -1;
	p->raw_read = mem_read_vm;
	if (unmapped) {
		*stale = true;
		return spy_err_set(err, SPY_EIO,
				   "process %d: its mappings changed while being read (an exec?)",
				   (int)p->pid);
	}
	return perm_error(p, e, err);
}

/* NUL-separated arguments, joined by single spaces. */
static void read_cmdline(struct proc *p)
{
	struct spy_buf b = SPY_BUF_INIT;
	size_t len;
	int rc = procfs_read_file(p->memdirfd, "cmdline", SPY_MAX_PROCFILE, &b);
	if (rc < 0 && rc != -SPY_EBOUND) {
		spy_buf_reset(&b);
	}
	char *s = spy_buf_detach(&b, &len);
	while (len > 0 && s[len - 1] == '\0') {
		len--;
	}
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\0') {
			s[i] = ' ';
		}
	}
	s[len] = '\0';
	/* Read in 64 KiB pieces: what is kept is the line alone (an agent keeps hundreds). */
	p->cmdline = spy_xrealloc(s, len + 1);
}

static void read_exe(struct proc *p)
{
	static const char deleted[] = " (deleted)";
	const size_t ndeleted = sizeof(deleted) - 1;
	char buf[PATH_MAX + 1];

	/* Unreadable (a kernel thread, or no permission) is "", as sampler.h promises. */
	ssize_t n = readlinkat(p->memdirfd, "exe", buf, sizeof(buf) - 1);
	if (n < 0) {
		n = 0;
	}
	size_t len = (size_t)n;
	if (len >= ndeleted && !memcmp(buf + len - ndeleted, deleted, ndeleted)) {
		len -= ndeleted;
	}
	buf[len] = '\0';
	p->exe = spy_xstrdup(buf);
}

int proc_read_maps(struct proc *p, struct spy_err *err)
{
	struct spy_buf b = SPY_BUF_INIT;
	struct spy_map *maps;
	char *paths;
	size_t n;

	int rc = procfs_read_file(p->memdirfd, "maps", SPY_MAX_PROCFILE, &b);
	if (rc < 0) {
		spy_buf_release(&b);
		switch (-rc) {
		case SPY_EGONE:
			return spy_err_set(err, SPY_EGONE, "process %d has exited", (int)p->pid);
		case SPY_EPERM:
			rc = spy_err_set(err, SPY_EPERM, "cannot read /proc/%d/maps: permission denied",
					 (int)p->pid);
			spy_err_remedy(err, "%s", SAMPLER_REMEDY_PERM);
			return rc;
		case SPY_EBOUND:
			return spy_err_set(err, SPY_EBOUND, "/proc/%d/maps is larger than %u bytes",
					   (int)p->pid, SPY_MAX_PROCFILE);
		default:
			return spy_err_set(err, SPY_EIO, "cannot read /proc/%d/maps", (int)p->pid);
		}
	}
	rc = proc_parse_maps(b.buf, b.len, &maps, &n, &paths, err);
	spy_buf_release(&b);
	if (rc < 0) {
		spy_err_prefix(err, "/proc/%d/maps: ", (int)p->pid);
		return rc;
	}
	free(p->maps);
	free(p->map_paths);
	p->maps = maps;
	p->map_paths = paths;
	p->nmaps = n;
	p->mem.maps = maps;
	p->mem.nmaps = n;
	return 0;
}

static bool is_dead_state(char state)
{
	return state == 'Z' || state == 'X' || state == 'x';
}

/*
 * Choose memdirfd and mem_tid (see internal.h). Returns 0, or -SPY_ENOPROC
 * when no thread is alive: a zombie still has a /proc entry, but nothing to
 * sample.
 */
static int choose_live_thread(struct proc *p, struct spy_err *err)
{
	char state = 0, path[32];
	size_t n;

	int rc = procfs_thread_state(p->dirfd, p->pid, &state);
	if (rc == 0 && !is_dead_state(state)) {
		p->memdirfd = p->dirfd;
		p->mem_tid = p->pid;
		return 0;
	}
	if (rc == 0 && procfs_list_tids(p, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			if (procfs_thread_state(p->dirfd, p->tids[i], &state) < 0 ||
			    is_dead_state(state)) {
				continue;
			}
			snprintf(path, sizeof(path), "task/%d", (int)p->tids[i]);
			p->memdirfd = openat(p->dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (p->memdirfd >= 0) {
				p->mem_tid = p->tids[i];
				spy_log(SPY_LOG_DEBUG,
					"process %d: main thread has exited; reading through thread %d",
					(int)p->pid, (int)p->mem_tid);
				return 0;
			}
		}
	}
	return spy_err_set(err, SPY_ENOPROC, "process %d has exited", (int)p->pid);
}

int proc_open(struct proc **out, pid_t pid, struct spy_err *err)
{
	char path[32];
	int rc;

	*out = NULL;
	/* kill() gives 0 and -1 meanings of their own; they are never a target. */
	if (pid <= 0) {
		return spy_err_set(err, SPY_ENOPROC, "process %d not found", (int)pid);
	}
	/* EPERM means it exists but is not ours to signal; the ptrace check comes later. */
	if (kill(pid, 0) < 0 && errno == ESRCH) {
		return spy_err_set(err, SPY_ENOPROC, "process %d not found", (int)pid);
	}

	/* A thread costs a descriptor (tasks.c): thousands of threads, thousands. */
	proc_fd_limit_raise();
	struct proc *p = spy_xcalloc(1, sizeof(*p));
	p->pid = pid;
	p->mem_tid = pid;
	p->memdirfd = -1;
	p->memfd = -1;
	p->statfd = -1;
	p->iofd = -1;
	p->imagefd = -1;
	p->raw_read = mem_read_vm;
	p->mem.read = memcache_read;
	p->mem.peek = memcache_peek;
	p->mem.ctx = p;
	memcache_init(p);

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	p->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dirfd < 0) {
		if (errno == ENOENT) {
			rc = spy_err_set(err, SPY_ENOPROC,
					 "process %d not found in /proc (another PID namespace?)",
					 (int)pid);
		} else {
			rc = spy_err_set(err, SPY_EIO, "cannot open %s: %s", path, strerror(errno));
		}
		goto fail;
	}

	rc = choose_live_thread(p, err);
	if (rc < 0) {
		goto fail;
	}
	proc_ns_init(p);

	/* An exec between reading the maps and probing them is seen as stale maps: read again. */
	bool stale = true;
	for (int attempt = 0; stale && attempt < 3; attempt++) {
		/* Before anything of the image is read: an exec from here on is seen. */
		if (p->imagefd >= 0) {
			close(p->imagefd);
		}
		p->imagefd = openat(p->memdirfd, "mem", O_RDONLY | O_CLOEXEC);
		free(p->cmdline);
		free(p->exe);
		read_cmdline(p);
		read_exe(p);
		rc = proc_read_maps(p, err);
		if (rc == -SPY_EGONE) {
			rc = spy_err_set(err, SPY_ENOPROC, "process %d has exited", (int)pid);
		}
		if (rc < 0) {
			goto fail;
		}
		rc = check_memory(p, &stale, err);
	}
	if (rc < 0) {
		goto fail;
	}
	/* The word proc_same_image reads: the executable's, mapped for life, rather than a probe's that may go. */
	for (size_t i = 0; p->exe && i < p->nmaps; i++) {
		if ((p->maps[i].perms & SPY_MAP_R) && !strcmp(p->maps[i].path, p->exe)) {
			p->image_addr = p->maps[i].lo;
			break;
		}
	}
	*out = p;
	return 0;
fail:
	proc_free(p);
	return rc;
}

void proc_free(struct proc *p)
{
	if (!p) {
		return;
	}
	proc_detach(p);
	tracer_forget(p);
	if (p->memfd >= 0) {
		close(p->memfd);
	}
	if (p->statfd >= 0) {
		close(p->statfd);
	}
	if (p->imagefd >= 0) {
		close(p->imagefd);
	}
	if (p->iofd >= 0) {
		close(p->iofd);
	}
	if (p->memdirfd >= 0 && p->memdirfd != p->dirfd) {
		close(p->memdirfd);
	}
	if (p->dirfd >= 0) {
		close(p->dirfd);
	}
	free(p->cmdline);
	free(p->exe);
	free(p->maps);
	free(p->map_paths);
	free(p->threads);
	free(p->tids);
	free(p->tracees);
	proc_ns_free(p);
	memcache_free(p);
	free(p);
}

pid_t proc_pid(const struct proc *p)
{
	return p->pid;
}

const char *proc_cmdline(const struct proc *p)
{
	return p->cmdline;
}

bool proc_same_image(const struct proc *p)
{
	uint8_t b;
	/* 0 bytes: the address space it was opened on is gone; EIO: the word is unmapped. */
	return p->imagefd >= 0 && p->image_addr && p->image_addr <= INT64_MAX &&
	       pread(p->imagefd, &b, 1, (off_t)p->image_addr) == 1;
}

const char *proc_exe(const struct proc *p)
{
	return p->exe;
}

const struct spy_mem *proc_mem(const struct proc *p)
{
	return &p->mem;
}
