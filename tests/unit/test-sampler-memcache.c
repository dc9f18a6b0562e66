/*
 * Unit tests for the page cache behind proc_mem() (sampler/memcache.c),
 * against a child this test forks. The child inherits our mappings, so the
 * addresses of the globals and regions below are the same in it:
 *   - mc_var, which the child sets to whatever we send down a pipe (and acks),
 *     so we can change target memory at a moment of our choosing;
 *   - region, REGION_PAGES pages filled with a pattern (each word holds its
 *     own address, mixed), enough to make lines collide in the cache;
 *   - guarded, two readable pages, a hole (unmapped), then one more page,
 *     so a read can straddle from a readable page into an unmapped one.
 *
 * What is checked is behaviour: values before and after invalidation,
 * correct bytes across line boundaries and cache collisions, failure exactly
 * where the plain reader fails, and the counters (hits without syscalls),
 * never timing. Run once through process_vm_readv and once, in a helper
 * whose seccomp filter refuses it, through /proc/PID/mem.
 *
 * Only the child this test started is signalled; it dies with us
 * (PR_SET_PDEATHSIG). Skips (exit 77) when ptrace is not permitted here.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/err.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/util.h"
#include "sampler/internal.h"
#include "sampler/sampler.h"
#include "tests/lib/check.h"
#include "tests/lib/ptrace-helpers.h"

/* More than the cache's 256 lines of 4 KiB, so some lines share a slot. */
#define REGION_PAGES 264

static volatile uint64_t mc_var = 1;
static uint8_t *region;
static size_t region_len;
static uint8_t *guarded; /* pages 0 and 1 readable, 2 unmapped, 3 readable */
static size_t pagesz;

struct child {
	pid_t pid;
	int cmd;  /* write end: values for mc_var */
	int ack;  /* read end: one byte per value set */
};

static uint64_t pattern(uintptr_t addr)
{
	return (uint64_t)addr * 0x9e3779b97f4a7c15ull ^ 0x5350595350595350ull;
}

static void fill(uint8_t *p, size_t len)
{
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = pattern((uintptr_t)(p + i));
		memcpy(p + i, &v, 8);
	}
}

static _Noreturn void child_main(int cmd, int ack)
{
	uint64_t v;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	while (read(cmd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
		mc_var = v;
		if (write(ack, "k", 1) != 1) {
			_exit(1);
		}
	}
	_exit(0);
}

static int child_start(struct child *c)
{
	int cmd[2], ack[2];
	if (pipe(cmd) < 0 || pipe(ack) < 0) {
		return -1;
	}
	c->pid = fork();
	if (c->pid < 0) {
		return -1;
	}
	if (c->pid == 0) {
		close(cmd[1]);
		close(ack[0]);
		child_main(cmd[0], ack[1]);
	}
	close(cmd[0]);
	close(ack[1]);
	c->cmd = cmd[1];
	c->ack = ack[0];
	return 0;
}

/* Have the child store v in mc_var; true once it says it has. */
static bool child_set(struct child *c, uint64_t v)
{
	char k;
	return write(c->cmd, &v, sizeof(v)) == (ssize_t)sizeof(v) && read(c->ack, &k, 1) == 1;
}

static void child_stop(struct child *c)
{
	close(c->cmd);
	close(c->ack);
	kill(c->pid, SIGKILL);
	waitpid(c->pid, NULL, 0);
}

static uint64_t read_var(struct proc *p)
{
	uint64_t v = 0;
	CHECK_INT(spy_mem_read(proc_mem(p), (spy_addr_t)(uintptr_t)&mc_var, &v, sizeof(v)), 0);
	return v;
}

static int read_at(struct proc *p, const void *addr, void *dst, size_t len)
{
	return spy_mem_read(proc_mem(p), (spy_addr_t)(uintptr_t)addr, dst, len);
}

/* Read len bytes at at (inside region or guarded) and compare with our own copy. */
static bool read_matches(struct proc *p, const uint8_t *at, size_t len)
{
	static uint8_t buf[64 * 1024];
	memset(buf, 0xee, len);
	return read_at(p, at, buf, len) == 0 && !memcmp(buf, at, len);
}

/*
 * A running target with no view asked for: every read goes to it, so
 * polling a running target sees it move, as before the cache existed.
 */
static void test_running_uncached(struct child *c, struct proc *p)
{
	struct proc_mem_stats a, b;
	CHECK(child_set(c, 10));
	proc_mem_stats(p, &a);
	CHECK_INT(read_var(p), 10);
	CHECK(child_set(c, 11));
	CHECK_INT(read_var(p), 11);
	proc_mem_stats(p, &b);
	CHECK_INT(b.hits - a.hits, 0);
	CHECK_INT(b.uncached - a.uncached, 2);
	CHECK_INT(b.syscalls - a.syscalls, 2);
}

/* proc_mem_invalidate on a running target: a view until the next one. */
static void test_invalidate_view(struct child *c, struct proc *p)
{
	struct proc_mem_stats a, b;
	CHECK(child_set(c, 20));
	proc_mem_invalidate(p);
	proc_mem_stats(p, &a);
	CHECK_INT(read_var(p), 20);
	CHECK(child_set(c, 21));
	/* The view holds what it fetched: the old value, without a syscall. */
	CHECK_INT(read_var(p), 20);
	proc_mem_stats(p, &b);
	CHECK_INT(b.misses - a.misses, 1);
	CHECK_INT(b.hits - a.hits, 1);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	proc_mem_invalidate(p);
	CHECK_INT(read_var(p), 21);
}

/* Repeated small reads of one page: one syscall, the rest hits. */
static void test_repeated_hits(struct proc *p)
{
	struct proc_mem_stats a, b;
	proc_mem_invalidate(p);
	proc_mem_stats(p, &a);
	for (int i = 0; i < 100; i++) {
		CHECK(read_matches(p, region + 8 * (size_t)i, 8));
	}
	proc_mem_stats(p, &b);
	CHECK_INT(b.reads - a.reads, 100);
	CHECK_INT(b.misses - a.misses, 1);
	CHECK_INT(b.hits - a.hits, 99);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	CHECK(b.hits > a.hits);
}

/*
 * spy_mem_peek: only bytes the view already holds, within one line, with
 * the same content a read gives and counted as a hit; never a fetch.
 */
static void test_peek(struct child *c, struct proc *p)
{
	struct proc_mem_stats a, b;
	const struct spy_mem *m = proc_mem(p);
	spy_addr_t at = (spy_addr_t)(uintptr_t)region + MEMCACHE_LINE + 64;
	proc_mem_uncached(p);
	CHECK(spy_mem_peek(m, at, 64) == NULL); /* no view: nothing held */
	proc_mem_invalidate(p);
	proc_mem_stats(p, &a);
	CHECK(spy_mem_peek(m, at, 64) == NULL); /* not fetched yet, and not fetched by a peek */
	proc_mem_stats(p, &b);
	CHECK_INT(b.syscalls - a.syscalls, 0);
	CHECK(read_matches(p, region + MEMCACHE_LINE + 64, 8));
	proc_mem_stats(p, &a);
	const uint8_t *got = spy_mem_peek(m, at, 256);
	CHECK(got != NULL && !memcmp(got, region + MEMCACHE_LINE + 64, 256));
	proc_mem_stats(p, &b);
	CHECK_INT(b.hits - a.hits, 1);
	CHECK_INT(b.syscalls - a.syscalls, 0);
	/* Across the line's end: a read's job. */
	CHECK(spy_mem_peek(m, at + MEMCACHE_LINE - 128, 256) == NULL);
	/* The view holds what it fetched even if the target moves on. */
	CHECK(child_set(c, 30));
	proc_mem_invalidate(p);
	CHECK(spy_mem_peek(m, at, 64) == NULL);
}

/*
 * proc_mem_trim gives back the lines no view read since its previous call,
 * and only those: a read of one later fetches it afresh, a line read in
 * between is kept.
 */
static void test_trim(struct proc *p)
{
	struct proc_mem_stats a, b;
	/* Twice: the lines the earlier tests read go back, the count starts clean. */
	proc_mem_trim(p);
	proc_mem_trim(p);
	proc_mem_invalidate(p);
	CHECK(read_matches(p, region, 8));
	CHECK(read_matches(p, region + 3 * 4096, 8));
	proc_mem_stats(p, &a);
	proc_mem_trim(p);
	proc_mem_stats(p, &b);
	CHECK_INT(b.trimmed - a.trimmed, 0);
	/* Many views, none of which reads the first line: it goes at the next trim, not before. */
	for (int i = 0; i < 2100; i++) {
		proc_mem_invalidate(p);
	}
	CHECK(read_matches(p, region + 3 * 4096, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.trimmed - a.trimmed, 0);
	proc_mem_trim(p);
	proc_mem_stats(p, &b);
	CHECK_INT(b.trimmed - a.trimmed, 1);
	/* A page given back reads as the target's again. */
	proc_mem_invalidate(p);
	CHECK(read_matches(p, region, 8));
	CHECK(read_matches(p, region + 3 * 4096, 8));
}

static void test_boundaries(struct proc *p)
{
	struct proc_mem_stats a, b;

	proc_mem_invalidate(p);
	/* Straddling two pages: both lines fetched by one syscall. */
	proc_mem_stats(p, &a);
	CHECK(read_matches(p, region + 5 * pagesz - 12, 24));
	proc_mem_stats(p, &b);
	CHECK_INT(b.misses - a.misses, 1);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	/* Each side alone is then a hit. */
	CHECK(read_matches(p, region + 5 * pagesz - 8, 8));
	CHECK(read_matches(p, region + 5 * pagesz, 8));
	CHECK(read_matches(p, region + 4 * pagesz, pagesz * 2));
	proc_mem_stats(p, &a);
	CHECK_INT(a.hits - b.hits, 3);
	CHECK_INT(a.syscalls - b.syscalls, 0);

	/* Lines that share a slot evict each other and never mix. */
	for (int round = 0; round < 3; round++) {
		for (size_t pg = 0; pg < REGION_PAGES; pg += 7) {
			CHECK(read_matches(p, region + pg * pagesz + 64, 32));
		}
		CHECK(read_matches(p, region, 16));
		CHECK(read_matches(p, region + 256 * 4096, 16));
	}

	/* Large reads bypass the cache, and are still right. */
	proc_mem_stats(p, &a);
	CHECK(read_matches(p, region + 3, 64 * 1024));
	CHECK(read_matches(p, region + pagesz, 16 * 1024 + 1));
	proc_mem_stats(p, &b);
	CHECK_INT(b.uncached - a.uncached, 2);
	CHECK_INT(b.misses - a.misses, 0);
	/* The largest cached read spans 5 lines when unaligned. */
	CHECK(read_matches(p, region + 7 * pagesz + 100, 16 * 1024));
	proc_mem_stats(p, &a);
	CHECK_INT(a.misses - b.misses, 1);
	CHECK_INT(a.uncached - b.uncached, 0);
}

static void test_guard(struct proc *p)
{
	struct proc_mem_stats a, b;
	uint8_t buf[64];

	proc_mem_invalidate(p);
	/* The very end of a mapping: its line is whole, so cached. */
	proc_mem_stats(p, &a);
	CHECK(read_matches(p, guarded + 2 * pagesz - 8, 8));
	CHECK(read_matches(p, guarded + 2 * pagesz - 16, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.misses - a.misses, 1);
	CHECK_INT(b.hits - a.hits, 1);
	CHECK_INT(b.fallbacks - a.fallbacks, 0);

	/* Straddling into the hole fails, as the plain reader does. */
	CHECK_INT(read_at(p, guarded + 2 * pagesz - 8, buf, 16), -SPY_EMEM);
	CHECK_INT(read_at(p, guarded + 2 * pagesz, buf, 8), -SPY_EMEM);
	CHECK_INT(read_at(p, guarded + 2 * pagesz + pagesz - 4, buf, 8), -SPY_EMEM);
	proc_mem_stats(p, &a);
	CHECK_INT(a.fallbacks - b.fallbacks, 3);
	/* ... and leaves what it could read readable. */
	CHECK(read_matches(p, guarded + pagesz + 8, 8));
	CHECK(read_matches(p, guarded + 3 * pagesz, 8));
	/* A large read that ends exactly at the hole, and one across it. */
	CHECK(read_matches(p, guarded, 2 * pagesz));
	CHECK_INT(read_at(p, guarded + pagesz, buf, sizeof(buf)) == 0, 1);
	static uint8_t big[4 * 65536];
	CHECK_INT(read_at(p, guarded, big, 4 * pagesz), -SPY_EMEM);

	/* Unmapped and absurd addresses fail, cached or not. */
	CHECK_INT(read_at(p, (void *)8, buf, 8), -SPY_EMEM);
	uint64_t v;
	CHECK_INT(spy_mem_read(proc_mem(p), UINT64_MAX - 3, &v, sizeof(v)), -SPY_EMEM);
	CHECK_INT(spy_mem_read(proc_mem(p), UINT64_MAX - 7, &v, 8), -SPY_EMEM);
	CHECK_INT(spy_mem_read(proc_mem(p), 0, &v, 0), 0);
}

/* Pause makes a view; resume ends it and turns the cache off. */
static void test_pause(struct child *c, struct proc *p)
{
	struct spy_err err = SPY_ERR_INIT;
	struct proc_mem_stats a, b;

	CHECK_INT(proc_attach(p, &err), 0);
	CHECK(child_set(c, 30));
	/* A stale view from before must not survive the pause. */
	proc_mem_invalidate(p);
	CHECK_INT(read_var(p), 30);
	CHECK(child_set(c, 31));
	CHECK_INT(proc_pause(p, &err), 0);
	proc_mem_stats(p, &a);
	for (int i = 0; i < 10; i++) {
		CHECK_INT(read_var(p), 31);
	}
	CHECK(read_matches(p, region + 2 * pagesz + 40, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.hits - a.hits, 9);
	CHECK_INT(b.syscalls - a.syscalls, 2);
	CHECK_INT(proc_resume(p, &err), 0);

	/* Running again, no view asked for: reads go to the target. */
	CHECK(child_set(c, 32));
	CHECK_INT(read_var(p), 32);
	CHECK(child_set(c, 33));
	CHECK_INT(read_var(p), 33);

	CHECK_INT(proc_pause(p, &err), 0);
	CHECK_INT(read_var(p), 33);
	CHECK_INT(proc_resume(p, &err), 0);
	CHECK(child_set(c, 34));
	CHECK_INT(proc_pause(p, &err), 0);
	CHECK_INT(read_var(p), 34);
	proc_detach(p);
	/* Detached: the cache is off again. */
	CHECK(child_set(c, 35));
	CHECK_INT(read_var(p), 35);
}

/*
 * With prefetch on, a view starts with what the previous view read, in one
 * syscall, and fresh: the target's changes since are seen.
 */
static void test_prefetch(struct child *c, struct proc *p)
{
	struct proc_mem_stats a, b;
	proc_mem_prefetch(p, true);
	proc_mem_invalidate(p);
	CHECK(child_set(c, 40));
	proc_mem_invalidate(p);
	CHECK_INT(read_var(p), 40);
	CHECK(read_matches(p, region + 1 * pagesz + 8, 8));
	CHECK(read_matches(p, region + 9 * pagesz + 8, 8));
	CHECK(read_matches(p, region + 30 * pagesz + 8, 8));
	CHECK(child_set(c, 41));

	proc_mem_stats(p, &a);
	proc_mem_invalidate(p);
	CHECK_INT(read_var(p), 41);
	CHECK(read_matches(p, region + 1 * pagesz + 16, 8));
	CHECK(read_matches(p, region + 9 * pagesz + 16, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	CHECK_INT(b.prefetched - a.prefetched, 4);
	CHECK_INT(b.hits - a.hits, 3);

	/* A prefetch copies only the granules read last time: the rest of
	 * the line is fetched on demand, never served from stale bytes. */
	proc_mem_stats(p, &a);
	proc_mem_invalidate(p);
	CHECK_INT(read_var(p), 41);
	CHECK(read_matches(p, region + 1 * pagesz + 16, 8));
	CHECK(read_matches(p, region + 1 * pagesz + 2048, 8));
	CHECK(read_matches(p, region + 9 * pagesz + 16, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.misses - a.misses, 1);
	CHECK_INT(b.hits - a.hits, 3);
	proc_mem_stats(p, &a);
	proc_mem_invalidate(p);
	CHECK(read_matches(p, region + 1 * pagesz + 16, 8));
	CHECK(read_matches(p, region + 1 * pagesz + 2048, 8));
	CHECK(read_matches(p, region + 9 * pagesz + 16, 8));
	CHECK_INT(read_var(p), 41);
	proc_mem_stats(p, &b);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	CHECK_INT(b.hits - a.hits, 4);

	/* Page 30 was not read in that view, so the next one leaves it out. */
	proc_mem_invalidate(p);
	proc_mem_stats(p, &a);
	CHECK_INT(a.prefetched - b.prefetched, 3);
	CHECK(read_matches(p, region + 30 * pagesz + 8, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.misses - a.misses, 1);

	/* A line that became unreadable fails in the prefetch, and on demand as before. */
	CHECK(read_matches(p, guarded + pagesz, 8));
	proc_mem_invalidate(p);
	proc_mem_prefetch(p, false);
	proc_mem_stats(p, &a);
	proc_mem_invalidate(p);
	CHECK_INT(read_var(p), 41);
	proc_mem_stats(p, &b);
	CHECK_INT(b.prefetched - a.prefetched, 0);
	CHECK_INT(b.misses - a.misses, 1);
}

/*
 * One thread held at a time (proc_stop_thread): each hold fetches ahead
 * what that thread's last hold read, fresh, and the whole-target views
 * between holds keep their own trail rather than the last hold's.
 */
static void test_held(struct child *c, struct proc *p)
{
	struct spy_err err = SPY_ERR_INIT;
	struct proc_mem_stats a, b;

	CHECK_INT(proc_attach(p, &err), 0);
	proc_mem_prefetch(p, true);
	CHECK(child_set(c, 50));
	CHECK_INT(proc_stop_thread(p, c->pid, 0), 0);
	CHECK_INT(read_var(p), 50);
	CHECK(read_matches(p, region + 1 * pagesz + 8, 8));
	CHECK(read_matches(p, region + 9 * pagesz + 8, 8));
	proc_resume_thread(p);
	proc_mem_invalidate(p);
	CHECK(read_matches(p, region + 30 * pagesz + 8, 8));
	CHECK(read_matches(p, region + 1 * pagesz + 8, 8));
	CHECK(child_set(c, 51));

	proc_mem_stats(p, &a);
	CHECK_INT(proc_stop_thread(p, c->pid, 0), 0);
	CHECK_INT(read_var(p), 51);
	CHECK(read_matches(p, region + 1 * pagesz + 8, 8));
	CHECK(read_matches(p, region + 9 * pagesz + 8, 8));
	proc_resume_thread(p);
	proc_mem_stats(p, &b);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	CHECK_INT(b.prefetched - a.prefetched, 3);
	CHECK_INT(b.hits - a.hits, 3);

	proc_mem_stats(p, &a);
	proc_mem_invalidate(p);
	CHECK(read_matches(p, region + 30 * pagesz + 8, 8));
	CHECK(read_matches(p, region + 1 * pagesz + 8, 8));
	proc_mem_stats(p, &b);
	CHECK_INT(b.syscalls - a.syscalls, 1);
	CHECK_INT(b.prefetched - a.prefetched, 2);
	CHECK_INT(b.hits - a.hits, 2);

	/* Not read since: a hold's view is as fresh as its own fetch. */
	CHECK(child_set(c, 52));
	CHECK_INT(proc_stop_thread(p, c->pid, 0), 0);
	CHECK_INT(read_var(p), 52);
	proc_resume_thread(p);
	proc_mem_prefetch(p, false);
	proc_detach(p);
}

static void test_reads(struct child *c, struct proc *p)
{
	test_running_uncached(c, p);
	test_invalidate_view(c, p);
	test_repeated_hits(p);
	test_trim(p);
	test_boundaries(p);
	test_guard(p);
	test_peek(c, p);
}

/* The same reads through /proc/PID/mem, in a helper where process_vm_readv is refused. */
static void test_pread_fallback(struct child *c)
{
	fflush(stdout);
	fflush(stderr);
	pid_t helper = fork();
	if (helper == 0) {
		if (!test_refuse_process_vm_readv()) {
			_exit(10);
		}
		struct proc *p;
		if (proc_open(&p, c->pid, NULL) < 0) {
			_exit(12);
		}
		check_failed = 0;
		test_reads(c, p);
		proc_free(p);
		_exit(check_failed ? 13 : 0);
	}
	int st = -1;
	CHECK_INT(waitpid(helper, &st, 0), helper);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), 0);
}

int main(void)
{
	struct spy_err err = SPY_ERR_INIT;
	struct child c;
	struct proc *p;

	spy_log_init_from_env();
	if (!test_ptrace_permitted()) {
		printf("skipped: ptrace is not permitted here (%s)\n", strerror(errno));
		return 77;
	}
	pagesz = (size_t)sysconf(_SC_PAGESIZE);
	region_len = REGION_PAGES * pagesz;
	region = mmap(NULL, region_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	guarded = mmap(NULL, 4 * pagesz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED || guarded == MAP_FAILED || munmap(guarded + 2 * pagesz, pagesz) < 0) {
		fprintf(stderr, "cannot map test regions\n");
		return 1;
	}
	fill(region, region_len);
	fill(guarded, 2 * pagesz);
	fill(guarded + 3 * pagesz, pagesz);
	if (child_start(&c) < 0) {
		fprintf(stderr, "cannot start the child\n");
		return 1;
	}
	int rc = proc_open(&p, c.pid, &err);
	CHECK_INT(rc, 0);
	if (rc == 0) {
		test_reads(&c, p);
		test_prefetch(&c, p);
		test_pause(&c, p);
		test_held(&c, p);
		proc_free(p);
	}
	test_pread_fallback(&c);
	child_stop(&c);
	return check_done();
}
