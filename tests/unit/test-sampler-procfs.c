/*
 * Unit tests for sampler's /proc parsers: proc_parse_maps and
 * proc_parse_stat_state, on hand-written hostile input and on this process's
 * own files. No target process is needed.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bounds.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/mem.h"
#include "common/util.h"
#include "sampler/sampler.h"
#include "tests/lib/check.h"

struct parsed {
	struct spy_map *maps;
	size_t n;
	char *paths;
	int rc;
	struct spy_err err;
};

static void parse(struct parsed *r, const char *text)
{
	spy_err_clear(&r->err);
	r->rc = proc_parse_maps(text, strlen(text), &r->maps, &r->n, &r->paths, &r->err);
}

static void release(struct parsed *r)
{
	free(r->maps);
	free(r->paths);
	r->maps = NULL;
	r->paths = NULL;
}

static void test_maps_basic(void)
{
	struct parsed r;
	parse(&r,
	      "557e326c1000-557e326c3000 r--p 00000000 fe:00 247134                     /usr/bin/cat\n"
	      "557e326c3000-557e326c8000 r-xp 00002000 fe:00 247134                     /usr/bin/cat\n"
	      "557e3c4d5000-557e3c4f6000 rw-p 00000000 00:00 0                          [heap]\n"
	      "7f8fec973000-7f8feca37000 rw-p 00000000 00:00 0 \n"
	      "7f8feca37000-7f8feca38000 rw-s 00001000 103:02 18446744073709551615     /dev/shm/x\n"
	      "7ffc1a000000-7ffc1a021000 rw-p 00000000 00:00 0                          [stack]\n"
	      "7ffc1a100000-7ffc1a102000 r-xp 00000000 00:00 0                          [vdso]\n"
	      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n");
	CHECK_INT(r.rc, 8);
	CHECK_INT(r.n, 8);
	if (r.n == 8) {
		CHECK(r.maps[0].lo == 0x557e326c1000ull);
		CHECK(r.maps[0].hi == 0x557e326c3000ull);
		CHECK_INT(r.maps[0].perms, SPY_MAP_R | SPY_MAP_P);
		CHECK_INT(r.maps[0].inode, 247134);
		CHECK_STR(r.maps[0].path, "/usr/bin/cat");
		CHECK_INT(r.maps[1].perms, SPY_MAP_R | SPY_MAP_X | SPY_MAP_P);
		CHECK(r.maps[1].offset == 0x2000);
		CHECK_STR(r.maps[2].path, "[heap]");
		CHECK_INT(r.maps[2].perms, SPY_MAP_R | SPY_MAP_W | SPY_MAP_P);
		CHECK_STR(r.maps[3].path, "");
		/* shared: no P bit; a three-digit major and the largest inode */
		CHECK_INT(r.maps[4].perms, SPY_MAP_R | SPY_MAP_W);
		CHECK(r.maps[4].inode == UINT64_MAX);
		CHECK(r.maps[4].offset == 0x1000);
		CHECK_STR(r.maps[4].path, "/dev/shm/x");
		CHECK_STR(r.maps[5].path, "[stack]");
		CHECK_STR(r.maps[6].path, "[vdso]");
		CHECK(r.maps[7].lo == 0xffffffffff600000ull);
		CHECK_INT(r.maps[7].perms, SPY_MAP_X | SPY_MAP_P);
		CHECK_STR(r.maps[7].path, "[vsyscall]");
	}
	release(&r);
}

static void test_maps_paths(void)
{
	struct parsed r;
	parse(&r,
	      "1000-2000 r-xp 00000000 08:01 11 /opt/my app/lib python.so\n"
	      "2000-3000 r--p 00001000 08:01 12 /tmp/gone.so (deleted)\n"
	      "3000-4000 rw-p 00002000 08:01 13 /tmp/dir with space/x (deleted)\n"
	      "4000-5000 rw-p 00000000 00:00 0\n"
	      "5000-6000 ---p 00000000 00:00 0   \n"
	      "6000-7000 rw-p 00000000 00:00 0 (deleted)\n"
	      "7000-8000 r--p 00000000 08:01 14 /a (deleted) b\n"
	      "8000-9000 r--p 00000000 08:01 15 /tab\there");
	CHECK_INT(r.rc, 8);
	if (r.n == 8) {
		CHECK_STR(r.maps[0].path, "/opt/my app/lib python.so");
		CHECK_STR(r.maps[1].path, "/tmp/gone.so");
		CHECK_STR(r.maps[2].path, "/tmp/dir with space/x");
		CHECK_STR(r.maps[3].path, "");
		CHECK_STR(r.maps[4].path, "");
		CHECK_INT(r.maps[4].perms, SPY_MAP_P);
		/* Only a trailing " (deleted)" is the kernel's. */
		CHECK_STR(r.maps[5].path, "(deleted)");
		CHECK_STR(r.maps[6].path, "/a (deleted) b");
		/* last line without a newline */
		CHECK_STR(r.maps[7].path, "/tab\there");
	}
	release(&r);
}

static void test_maps_sorting(void)
{
	struct parsed r;
	parse(&r,
	      "5000-6000 r--p 00000000 08:01 5 /five\n"
	      "1000-2000 r--p 00000000 08:01 1 /one\n"
	      "3000-4000 r--p 00000000 08:01 3 /three\n"
	      "2000-3000 r--p 00000000 08:01 2 /two\n");
	CHECK_INT(r.rc, 4);
	if (r.n == 4) {
		CHECK(r.maps[0].lo == 0x1000);
		CHECK_STR(r.maps[0].path, "/one");
		CHECK(r.maps[1].lo == 0x2000);
		CHECK_STR(r.maps[1].path, "/two");
		CHECK(r.maps[2].lo == 0x3000);
		CHECK_STR(r.maps[2].path, "/three");
		CHECK(r.maps[3].lo == 0x5000);
		CHECK_STR(r.maps[3].path, "/five");
		struct spy_mem m = { .read = NULL, .maps = r.maps, .nmaps = r.n };
		CHECK(spy_mem_find_map(&m, 0x2fff) == &r.maps[1]);
		CHECK(spy_mem_find_map(&m, 0x4000) == NULL);
	}
	release(&r);

	/* Overlaps (a file read in chunks while the target remaps) keep the first range. */
	parse(&r,
	      "1000-3000 r--p 00000000 08:01 1 /a\n"
	      "2000-4000 r--p 00000000 08:01 2 /b\n"
	      "4000-5000 r--p 00000000 08:01 3 /c\n"
	      "1000-3000 r--p 00000000 08:01 1 /a\n");
	CHECK_INT(r.rc, 2);
	if (r.n == 2) {
		CHECK_STR(r.maps[0].path, "/a");
		CHECK_STR(r.maps[1].path, "/c");
	}
	release(&r);

	parse(&r, "");
	CHECK_INT(r.rc, 0);
	CHECK_INT(r.n, 0);
	release(&r);
}

static void expect_malformed(const char *text, const char *line)
{
	struct parsed r;
	r.maps = (struct spy_map *)&r;
	r.paths = (char *)&r;
	parse(&r, text);
	CHECK_INT(r.rc, -SPY_EFORMAT);
	CHECK_INT(r.err.code, SPY_EFORMAT);
	CHECK(r.maps == NULL && r.paths == NULL && r.n == 0);
	if (!strstr(r.err.msg, line)) {
		fprintf(stderr, "message \"%s\" does not name %s\n", r.err.msg, line);
		CHECK(!"error names the line");
	}
}

static void test_maps_malformed(void)
{
	const char *good = "1000-2000 r--p 00000000 08:01 1 /ok\n";
	static const char *const bad[] = {
		"1000 2000 r--p 00000000 08:01 1 /x",      /* no dash */
		"1000-zz00 r--p 00000000 08:01 1 /x",      /* not hex */
		"-2000 r--p 00000000 08:01 1 /x",          /* no start */
		"2000-1000 r--p 00000000 08:01 1 /x",      /* inverted */
		"1000-1000 r--p 00000000 08:01 1 /x",      /* empty */
		"10000000000000000-20000000000000000 r--p 0 0:0 0", /* 17 digits */
		"1000-2000 rwxq 00000000 08:01 1 /x",      /* bad sharing letter */
		"1000-2000 xwrp 00000000 08:01 1 /x",      /* letters out of place */
		"1000-2000 rw 00000000 08:01 1",           /* short perms */
		"1000-2000 r--p",                          /* truncated */
		"1000-2000 r--p 00000000",
		"1000-2000 r--p 00000000 0801 1 /x",       /* device without colon */
		"1000-2000 r--p 00000000 08:01",           /* no inode */
		"1000-2000 r--p 00000000 08:01 x /x",      /* inode not a number */
		"1000-2000 r--p 00000000 08:01 99999999999999999999 /x", /* inode overflow */
		"1000-2000 r--p 00000000 08:01 12abc",     /* junk glued to inode */
		"1000-2000r--p 00000000 08:01 1 /x",       /* no separator */
		"",                                        /* empty line */
		" 1000-2000 r--p 00000000 08:01 1 /x",     /* leading blank */
		"garbage",
	};
	char text[512];
	for (size_t i = 0; i < SPY_ARRAY_SIZE(bad); i++) {
		/* The bad line is line 2, after a good one, and the error must say so. */
		snprintf(text, sizeof(text), "%s%s\n%s", good, bad[i], good);
		expect_malformed(text, "line 2");
	}

	/* A NUL byte inside a path cannot be a C string; reject rather than truncate. */
	static const char nul[] = "1000-2000 r--p 00000000 08:01 1 /a\0b\n";
	struct parsed r;
	r.rc = proc_parse_maps(nul, sizeof(nul) - 1, &r.maps, &r.n, &r.paths, NULL);
	CHECK_INT(r.rc, -SPY_EFORMAT);
	CHECK(r.maps == NULL);
}

static void test_maps_bounds(void)
{
	struct spy_map *maps;
	size_t n;
	char *paths;
	struct spy_err err = SPY_ERR_INIT;

	/* More bytes than SPY_MAX_PROCFILE: refused before anything is allocated. */
	size_t big = (size_t)SPY_MAX_PROCFILE + 1;
	char *huge = spy_xmalloc(big);
	memset(huge, '\n', big);
	CHECK_INT(proc_parse_maps(huge, big, &maps, &n, &paths, &err), -SPY_EBOUND);
	CHECK_INT(err.code, SPY_EBOUND);
	CHECK(maps == NULL && paths == NULL);
	free(huge);

	/* More lines than SPY_MAX_MAPS, each valid: refused by count. */
	struct spy_buf b = SPY_BUF_INIT;
	for (unsigned long i = 0; i < (unsigned long)SPY_MAX_MAPS + 1; i++) {
		spy_buf_addf(&b, "%lx-%lx r--p 0 0:0 0\n", (i + 1) << 12, (i + 2) << 12);
	}
	spy_err_clear(&err);
	CHECK_INT(proc_parse_maps(b.buf, b.len, &maps, &n, &paths, &err), -SPY_EBOUND);
	CHECK_INT(err.code, SPY_EBOUND);

	/* Exactly SPY_MAX_MAPS is fine. */
	const char *last = memrchr(b.buf, '\n', b.len - 1);
	size_t len = (size_t)(last - b.buf) + 1;
	CHECK_INT(proc_parse_maps(b.buf, len, &maps, &n, &paths, NULL), SPY_MAX_MAPS);
	CHECK_INT(n, SPY_MAX_MAPS);
	free(maps);
	free(paths);
	spy_buf_release(&b);
}

static void test_maps_self(void)
{
	struct spy_buf b = SPY_BUF_INIT;
	int fd = open("/proc/self/maps", O_RDONLY);
	CHECK(fd >= 0);
	char chunk[4096];
	ssize_t got;
	while (fd >= 0 && (got = read(fd, chunk, sizeof(chunk))) > 0) {
		spy_buf_add(&b, chunk, (size_t)got);
	}
	if (fd >= 0) {
		close(fd);
	}
	struct parsed r;
	spy_err_clear(&r.err);
	r.rc = proc_parse_maps(b.buf, b.len, &r.maps, &r.n, &r.paths, &r.err);
	CHECK(r.rc > 0);
	for (size_t i = 1; i < r.n; i++) {
		CHECK(r.maps[i - 1].hi <= r.maps[i].lo);
	}
	/* This very function lives in an executable mapping of this binary. */
	struct spy_mem m = { .read = NULL, .maps = r.maps, .nmaps = r.n };
	const struct spy_map *mp = spy_mem_find_map(&m, (spy_addr_t)(uintptr_t)&test_maps_self);
	CHECK(mp != NULL);
	if (mp) {
		CHECK(mp->perms & SPY_MAP_X);
		CHECK(strstr(mp->path, "test-sampler-procfs") != NULL);
	}
	int local;
	mp = spy_mem_find_map(&m, (spy_addr_t)(uintptr_t)&local);
	CHECK(mp != NULL && !strcmp(mp->path, "[stack]"));
	release(&r);
	spy_buf_release(&b);
}

static char stat_state(const char *s)
{
	return proc_parse_stat_state(s, strlen(s));
}

static void test_stat(void)
{
	CHECK_INT(stat_state("1234 (python3) S 1 1234 1234 0 -1 4194560 1234"), 'S');
	CHECK_INT(stat_state("1234 (a b c) R 1 2 3"), 'R');
	CHECK_INT(stat_state("77 (x) t 1"), 't');
	CHECK_INT(stat_state("77 (x) Z\n"), 'Z');
	CHECK_INT(stat_state("77 (x) D"), 'D');
	/* comm with ')' and things that look like a state */
	CHECK_INT(stat_state("1234 (evil) S (x) ) t 1 2 3"), 't');
	CHECK_INT(stat_state("5 ()) D 1"), 'D');
	CHECK_INT(stat_state("5 () ) ) ) I 1"), 'I');
	CHECK_INT(stat_state("5 () X 1"), 'X');
	CHECK_INT(stat_state("5 (a\nb) T 1"), 'T');
	CHECK_INT(stat_state("5 (15 chars long!) R 1"), 'R');

	/* malformed */
	CHECK_INT(proc_parse_stat_state(NULL, 0), 0);
	CHECK_INT(stat_state(""), 0);
	CHECK_INT(stat_state("1234"), 0);
	CHECK_INT(stat_state("1234 "), 0);
	CHECK_INT(stat_state("1234 (noclose S 1"), 0);
	CHECK_INT(stat_state("1234 (x)"), 0);
	CHECK_INT(stat_state("1234 (x) "), 0);
	CHECK_INT(stat_state("1234 (x)S 1"), 0);
	CHECK_INT(stat_state("1234 (x) 5 1"), 0);
	CHECK_INT(stat_state("1234 (x) SS 1"), 0);
	CHECK_INT(stat_state("1234 (x) ( 1"), 0);
	CHECK_INT(stat_state("(x) S 1"), 0);
	CHECK_INT(stat_state("abc (x) S 1"), 0);
	CHECK_INT(stat_state("12 x) S 1"), 0);
	/* len is honoured: the letter lies beyond it */
	CHECK_INT(proc_parse_stat_state("1234 (x) S 1", 9), 0);
	CHECK_INT(proc_parse_stat_state("1234 (x) S 1", 10), 'S');

	/* our own stat: we are running */
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
	if (fd >= 0) {
		close(fd);
	}
	CHECK(n > 0);
	if (n > 0) {
		CHECK_INT(proc_parse_stat_state(buf, (size_t)n), 'R');
	}
}

static bool schedstat(const char *s, uint64_t *run, uint64_t *pcount)
{
	uint64_t delay;
	return proc_parse_schedstat(s, strlen(s), run, &delay, pcount);
}

/* schedstat's three numbers, and the rule that skips stat for a thread not scheduled since. */
static void test_schedstat(void)
{
	uint64_t run = 7, pc = 7, dl = 7;
	CHECK(schedstat("123456789 2000 42\n", &run, &pc));
	CHECK_INT(run, 123456789);
	CHECK_INT(pc, 42);
	CHECK(schedstat("0 0 0", &run, &pc));
	CHECK_INT(run, 0);
	CHECK(schedstat("18446744073709551615 1 2\n", &run, &pc));
	CHECK(run == UINT64_MAX);

	/* malformed: nothing is written */
	run = pc = 7;
	CHECK(!proc_parse_schedstat(NULL, 0, &run, &dl, &pc));
	CHECK(!schedstat("", &run, &pc));
	CHECK(!schedstat("1 2", &run, &pc));
	CHECK(!schedstat("1 2\n", &run, &pc));
	CHECK(!schedstat("1  2 3", &run, &pc));
	CHECK(!schedstat("-1 2 3", &run, &pc));
	CHECK(!schedstat("1 2x 3", &run, &pc));
	CHECK(!schedstat("18446744073709551616 1 2", &run, &pc));
	CHECK(!schedstat(" 1 2 3", &run, &pc));
	/* len is honoured */
	CHECK(!proc_parse_schedstat("1 2 3", 3, &run, &dl, &pc));
	CHECK_INT(run, 7);
	CHECK_INT(pc, 7);
	CHECK(proc_parse_schedstat("1 2 345", 6, &run, &dl, &pc));
	CHECK_INT(pc, 34);
	/* the second number is the runqueue wait */
	CHECK(proc_parse_schedstat("10 98765 3\n", 11, &run, &dl, &pc));
	CHECK_INT(dl, 98765);

	/*
	 * The activity rule for a thread read R, over 10 ms: a sleeper woken
	 * by a pause runs microseconds; a starved thread runs as little but
	 * was R at the previous refresh too.
	 */
	CHECK(proc_task_ran('S', 1000000, 10000000));
	CHECK(!proc_task_ran('S', 20000, 10000000));
	CHECK(!proc_task_ran('t', 20000, 10000000));
	CHECK(!proc_task_ran(0, 0, 10000000));
	CHECK(proc_task_ran('R', 0, 10000000));

	/* our own: readable, and we have been scheduled */
	char buf[128];
	int fd = open("/proc/thread-self/schedstat", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
	if (fd >= 0) {
		close(fd);
	}
	if (n > 0) {
		CHECK(proc_parse_schedstat(buf, (size_t)n, &run, &dl, &pc));
		CHECK(pc > 0);
	} else {
		printf("SKIP own schedstat: this kernel has none\n");
	}

	struct proc_task t;
	memset(&t, 0, sizeof(t));
	t.state = 'S';
	t.run_ns = 500;
	t.pcount = 3;
	CHECK(proc_task_slept(&t, 500, 3));
	/* scheduled since, or ran since (a count that did not move but time did: be safe) */
	CHECK(!proc_task_slept(&t, 500, 4));
	CHECK(!proc_task_slept(&t, 501, 3));
	/* running when last read: it may still run without being scheduled again */
	t.state = 'R';
	CHECK(!proc_task_slept(&t, 500, 3));
	/* state unknown, or no schedstat reading to compare with */
	t.state = 0;
	CHECK(!proc_task_slept(&t, 500, 3));
	t.state = 'D';
	CHECK(proc_task_slept(&t, 500, 3));
	t.pcount = 0;
	CHECK(!proc_task_slept(&t, 500, 0));
}

/* The resource parsers: a real stat (negative nice, comm with ") ") and the fields spy takes. */
static void test_resources(void)
{
	const char *st = "4242 (py ) 3) R 1 4242 4242 0 -1 4194560 2810 0 0 0 157 3 0 0 20 -5 2 0 123456 "
			 "31707136 8989 18446744073709551615 1 1 0 0\n";
	struct proc_resources r;
	memset(&r, 0, sizeof(r));
	CHECK_INT(proc_parse_stat_resources(st, strlen(st), &r), PROC_RES_CPU | PROC_RES_RSS | PROC_RES_THREADS);
	CHECK_INT(r.utime, 157);
	CHECK_INT(r.stime, 3);
	CHECK_INT(r.threads, 2);
	CHECK_INT(r.rss, 8989);
	/* Cut before rss: CPU and threads only; a field that is not a number: not taken. */
	const char *cut = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 7 8 0 0 20 0 3 0";
	memset(&r, 0, sizeof(r));
	CHECK_INT(proc_parse_stat_resources(cut, strlen(cut), &r), PROC_RES_CPU | PROC_RES_THREADS);
	const char *bad = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 7x 8 0 0 20 0 z 0 0 0 99999999999999999999999";
	CHECK_INT(proc_parse_stat_resources(bad, strlen(bad), &r), 0);
	CHECK_INT(proc_parse_stat_resources("garbage", 7, &r), 0);
	CHECK_INT(proc_parse_stat_resources(NULL, 0, &r), 0);

	/* The fields discovery takes: flags (9) and starttime (22), a negative field skipped, upto honoured. */
	struct proc_stat ps;
	CHECK(proc_parse_stat(st, strlen(st), PROC_STAT_STARTTIME, &ps));
	CHECK_INT(ps.state, 'R');
	CHECK(proc_stat_has(&ps, PROC_STAT_FLAGS) && ps.field[PROC_STAT_FLAGS] == 4194560);
	CHECK(proc_stat_has(&ps, PROC_STAT_STARTTIME) && ps.field[PROC_STAT_STARTTIME] == 123456);
	CHECK(!proc_stat_has(&ps, 8) && !proc_stat_has(&ps, 19)); /* tpgid -1, nice -5 */
	CHECK(!proc_stat_has(&ps, PROC_STAT_RSS) && !proc_stat_has(&ps, PROC_STAT_FIELDS));
	CHECK(!proc_parse_stat("garbage", 7, PROC_STAT_RSS, &ps) && ps.state == 0 && ps.have == 0);

	const char *status = "Name:\tvoluntary_ctxt_switches: 9\nvoluntary_ctxt_switches:\t150\n"
			     "nonvoluntary_ctxt_switches:\t545\n";
	uint64_t sum = 0;
	CHECK_INT(proc_parse_status_ctxsw(status, strlen(status), &sum), PROC_RES_CTXSW);
	CHECK_INT(sum, 695);
	const char *half = "voluntary_ctxt_switches:\t150\n";
	CHECK_INT(proc_parse_status_ctxsw(half, strlen(half), &sum), 0);
	const char *neg = "voluntary_ctxt_switches:\t-1\nnonvoluntary_ctxt_switches:\t2\n";
	CHECK_INT(proc_parse_status_ctxsw(neg, strlen(neg), &sum), 0);

	const char *io = "rchar: 1948\nread_bytes: 4096\nwrite_bytes: 12288\ncancelled_write_bytes: 0\n";
	uint64_t rd = 0, wr = 0;
	CHECK_INT(proc_parse_io(io, strlen(io), &rd, &wr), PROC_RES_IO);
	CHECK_INT(rd, 4096);
	CHECK_INT(wr, 12288);
	/* Cut mid-file (a short read): the missing key is unknown, not 0. */
	CHECK_INT(proc_parse_io(io, 30, &rd, &wr), 0);
}

int main(void)
{
	test_maps_basic();
	test_maps_paths();
	test_maps_sorting();
	test_maps_malformed();
	test_maps_bounds();
	test_maps_self();
	test_stat();
	test_schedstat();
	test_resources();
	return check_done();
}
