/*
 * Unit tests for cmd/sources.c, the source files a recording reads: files
 * refused for a NUL byte count against the 64 MiB budget like any other
 * read (they used not to, so a target naming many binary "sources" made
 * spy read without end), a file is read once however often it is named,
 * the credential helper's /proc/PID/status parsing, and a stack read
 * across an exec opens nothing it names.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/sources.h"
#include "common/buf.h"
#include "common/credopen.h"
#include "common/strtab.h"
#include "tests/lib/check.h"

static char dir[] = "/tmp/spy-sources-XXXXXX";

static const char *make(struct spy_strtab *strs, const char *name, const char *text, off_t sparse)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	if (text) {
		CHECK((size_t)write(fd, text, strlen(text)) == strlen(text));
	} else {
		/* A file of NUL bytes, sparse: no disk space, read as fast as memory. */
		CHECK(ftruncate(fd, sparse) == 0);
	}
	close(fd);
	return spy_strtab_intern(strs, path, strlen(path));
}

static void note_as(struct cmd_sources *s, const char *file, bool untrusted)
{
	struct spy_stack st = SPY_STACK_INIT;
	struct spy_frame *f = spy_stack_push(&st);
	memset(f, 0, sizeof(*f));
	f->func = "f";
	f->file = file;
	f->line = 1;
	f->kind = SPY_FRAME_PYTHON;
	cmd_sources_note(s, &st, getpid(), NULL, untrusted);
	spy_stack_release(&st);
}

static void note(struct cmd_sources *s, const char *file)
{
	note_as(s, file, false);
}

/*
 * A file first named by a stack read across an exec is withheld unopened
 * (readable as it is), named in the withheld list, and not read when a
 * later stack names it; one named before is kept.
 */
static void test_untrusted(void)
{
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct cmd_sources s;
	cmd_sources_init(&s);
	const char *before = make(&strs, "before.py", "a = 1\n", 0);
	const char *after = make(&strs, "after.py", "b = 2\n", 0);
	note(&s, before);
	note_as(&s, before, true);
	note_as(&s, after, true);
	note(&s, after);
	const char *data;
	size_t len;
	CHECK(cmd_sources_get(&s, before, &data, &len) == 0 && len == 6);
	CHECK(cmd_sources_get(&s, after, &data, &len) < 0);
	CHECK_INT(s.withheld, 1);
	CHECK_INT(s.across_exec, 1);
	CHECK_INT(s.read_bytes, 6);
	struct spy_buf b = SPY_BUF_INIT;
	cmd_sources_withheld(&s, &b);
	CHECK(strstr(b.buf, "1 file the program could not read (1 named after it exec'd, not opened): \"") != NULL);
	CHECK(strstr(b.buf, "after.py\"") && !strstr(b.buf, "before.py"));
	spy_buf_release(&b);
	cmd_sources_release(&s);
	unlink(before);
	unlink(after);
	spy_strtab_release(&strs);
}

static void test_nul_budget(void)
{
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct cmd_sources s;
	cmd_sources_init(&s);
	const char *small = make(&strs, "small.py", "x = 1\n", 0);
	/* Enough NUL-filled files of the largest size kept to spend the whole budget. */
	size_t nbin = CMD_SOURCE_MAX_TOTAL / CMD_SOURCE_MAX_FILE;
	for (size_t i = 0; i < nbin + 2; i++) {
		char name[32];
		snprintf(name, sizeof(name), "bin%zu.py", i);
		const char *f = make(&strs, name, NULL, (off_t)CMD_SOURCE_MAX_FILE);
		note(&s, f);
		note(&s, f); /* named again: not read again */
		const char *data;
		size_t len;
		CHECK(cmd_sources_get(&s, f, &data, &len) < 0);
		unlink(f);
	}
	CHECK_INT(s.n, nbin + 2);
	/* The budget is spent: a readable file named now is not read. */
	note(&s, small);
	const char *data;
	size_t len;
	CHECK(cmd_sources_get(&s, small, &data, &len) < 0);
	CHECK(s.read_bytes <= CMD_SOURCE_MAX_TOTAL);
	cmd_sources_release(&s);

	/* With budget left, the same file is read and kept. */
	cmd_sources_init(&s);
	note(&s, small);
	CHECK(cmd_sources_get(&s, small, &data, &len) == 0 && len == 6 && !memcmp(data, "x = 1\n", 6));
	CHECK_INT(s.withheld, 0);
	cmd_sources_release(&s);
	unlink(small);
	spy_strtab_release(&strs);
}

static void test_creds_parse(void)
{
	static const char ok[] = "Name:\tpython3\nUid:\t1000\t1001\t1002\t1003\nGid:\t50\t51\t52\t53\n"
				 "Groups:\t4 24 27 \nCapEff:\t0000000000000000\n";
	struct spy_creds c;
	CHECK_INT(spy_creds_parse(ok, sizeof(ok) - 1, &c), 0);
	CHECK(c.fsuid == 1003 && c.fsgid == 53 && c.ngroups == 3 && c.groups[2] == 27 && c.cap_eff == 0);
	spy_creds_release(&c);
	static const char none[] = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\t000001ffffffffff\n";
	CHECK_INT(spy_creds_parse(none, sizeof(none) - 1, &c), 0);
	CHECK(c.fsuid == 0 && c.ngroups == 0 && c.cap_eff == 0x1ffffffffffull);
	spy_creds_release(&c);
	/* Malformed: each refused, nothing taken on trust. */
	static const char *const bad[] = {
		"Uid:\t1\t2\t3\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\t0\n",             /* three ids */
		"Uid:\t1\t2\t3\t-4\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\t0\n",         /* a sign */
		"Uid:\t1\t2\t3\t99999999999\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\t0\n", /* too big */
		"Uid:\t1\t2\t3\t4\nGid:\t0\t0\t0\t0\nCapEff:\t0\n",                     /* no groups */
		"Uid:\t1\t2\t3\t4\nGid:\t0\t0\t0\t0\nGroups:\t1 x\nCapEff:\t0\n",        /* junk */
		"Uid:\t1\t2\t3\t4\nGid:\t0\t0\t0\t0\nGroups:\t\nCapEff:\tzz\n",         /* not hex */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_INT(spy_creds_parse(bad[i], strlen(bad[i]), &c), -EINVAL);
	}
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_nul_budget();
	test_creds_parse();
	test_untrusted();
	rmdir(dir);
	return check_done();
}
