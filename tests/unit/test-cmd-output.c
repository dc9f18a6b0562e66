/*
 * The one output path (cmd/output.c) against what can be planted at an
 * output name: links and FIFOs, in a sticky world-writable directory (like
 * /tmp), a non-sticky one, and a private one. Whatever is planted, no
 * other file is ever written; a FIFO swapped for a link between the start
 * and the end of a recording is not followed; files are 0600 as root.
 * "-" is standard output, never a file of that name.
 * Cases that need another user's files are made by chown as root; run
 * unprivileged, they SKIP and say so.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd/output.h"
#include "common/buf.h"
#include "tests/lib/check.h"

/* Someone else: nobody. */
#define OTHER_UID 65534

static char base[64];

static int write_hello(void *ctx, FILE *f, const char *name, struct spy_err *err)
{
	return fputs(ctx, f) < 0 ? spy_err_set(err, SPY_EIO, "short write") : 0;
}

static int write_fail(void *ctx, FILE *f, const char *name, struct spy_err *err)
{
	fputs("partial", f);
	return spy_err_set(err, SPY_EIO, "failed on purpose");
}

static char *path_in(const char *dir, const char *name)
{
	static char buf[16][256];
	static int k;
	char *p = buf[k++ % 16];
	snprintf(p, sizeof(buf[0]), "%s/%s/%s", base, dir, name);
	return p;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static bool holds(const char *path, const char *text)
{
	char buf[64] = "";
	FILE *f = fopen(path, "r");
	if (!f) {
		return false;
	}
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return !strcmp(buf, text);
}

static void make_dir(const char *name, mode_t mode)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", base, name);
	CHECK_INT(mkdir(p, 0700), 0);
	CHECK_INT(chmod(p, mode), 0);
}

/* A link planted at path, to the victim; owned by uid (as root) or by us. */
static void plant_link(const char *path, const char *victim, uid_t uid)
{
	CHECK_INT(symlink(victim, path), 0);
	if (geteuid() == 0) {
		CHECK_INT(lchown(path, uid, (gid_t)-1), 0);
	}
}

static void test_regular_and_mode(void)
{
	struct spy_err err = SPY_ERR_INIT;
	char *out = path_in("private", "out.svg");
	put(out, "old");
	CHECK_INT(cmd_output_file(out, write_hello, "hello", &err), 0);
	CHECK(holds(out, "hello"));
	struct stat st;
	CHECK_INT(stat(out, &st), 0);
	mode_t um = umask(0);
	umask(um);
	CHECK_INT(st.st_mode & 0777, geteuid() == 0 ? 0600 : (0666 & ~um));
	/* A failed write leaves the old file whole, and no temporary. */
	CHECK_INT(cmd_output_file(out, write_fail, NULL, &err), -SPY_EIO);
	CHECK(holds(out, "hello"));
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s/private' | wc -l) = 1", base);
	CHECK_INT(system(cmd), 0);
	/* A directory is refused; so is a missing one. */
	CHECK_INT(cmd_output_file(path_in("private", ""), write_hello, "x", &err), -SPY_EIO);
	CHECK_INT(cmd_output_file(path_in("nosuch", "out.svg"), write_hello, "x", &err), -SPY_EIO);
	CHECK(strstr(err.msg, strerror(ENOENT)) != NULL);
	/* Not a regular file: written in place, never renamed over. */
	CHECK_INT(cmd_output_file("/dev/null", write_hello, "x", &err), 0);
	CHECK(!stat("/dev/null", &st) && S_ISCHR(st.st_mode));
}

/* A link at the output name: the victim it points to is never written. */
static void test_links(const char *dir, bool shared)
{
	struct spy_err err = SPY_ERR_INIT;
	char *victim = path_in("private", "victim");
	put(victim, "secret");

	/* Ours: replaced by the output, never written through. */
	char *mine = path_in(dir, "mine.folded");
	plant_link(mine, victim, geteuid());
	CHECK_INT(cmd_output_file(mine, write_hello, "hello", &err), 0);
	CHECK(holds(victim, "secret"));
	struct stat st;
	CHECK(!lstat(mine, &st) && S_ISREG(st.st_mode) && holds(mine, "hello"));

	/* Dangling: the file is created in the link's place, not at its target. */
	char *dangling = path_in(dir, "dangling.svg");
	char *nowhere = path_in("private", "nowhere");
	plant_link(dangling, nowhere, geteuid());
	CHECK_INT(cmd_output_file(dangling, write_hello, "hello", &err), 0);
	CHECK(access(nowhere, F_OK) != 0);

	if (geteuid() != 0) {
		printf("SKIP links of another user in %s: not root, cannot make one\n", dir);
		return;
	}
	/* Someone else's, in a shared directory: refused, nothing written. */
	char *theirs = path_in(dir, "theirs.folded");
	plant_link(theirs, victim, OTHER_UID);
	int rc = cmd_output_file(theirs, write_hello, "hello", &err);
	CHECK(holds(victim, "secret"));
	if (shared) {
		CHECK_INT(rc, -SPY_EIO);
		CHECK(strstr(err.msg, "link") && strstr(err.msg, theirs));
		CHECK(!lstat(theirs, &st) && S_ISLNK(st.st_mode));
	} else {
		/* Only its owner (us) could have put it there: replaced like ours. */
		CHECK_INT(rc, 0);
	}
}

/* A FIFO at the output name, opened at the start and written at the end. */
static void test_fifos(const char *dir, bool shared)
{
	struct spy_err err = SPY_ERR_INIT;
	char *victim = path_in("private", "victim2");
	put(victim, "secret");

	char *fifo = path_in(dir, "out.fifo");
	CHECK_INT(mkfifo(fifo, 0600), 0);
	struct cmd_output o;
	CHECK_INT(cmd_output_open(&o, fifo, &err), 0);
	/* During the recording, the FIFO is swapped for a link to the victim. */
	char *swap = path_in(dir, "swap");
	CHECK_INT(symlink(victim, swap), 0);
	CHECK_INT(rename(swap, fifo), 0);
	CHECK_INT(cmd_output_commit(&o, write_hello, "hello", &err), 0);
	CHECK(holds(victim, "secret"));
	unlink(fifo);

	if (geteuid() != 0) {
		printf("SKIP FIFOs of another user in %s: not root, cannot make one\n", dir);
		return;
	}
	char *theirs = path_in(dir, "theirs.fifo");
	CHECK_INT(mkfifo(theirs, 0666), 0);
	CHECK_INT(chown(theirs, OTHER_UID, (gid_t)-1), 0);
	int rc = cmd_output_open(&o, theirs, &err);
	if (shared) {
		/* Someone else's FIFO in a shared directory would hand them the profile. */
		CHECK_INT(rc, -SPY_EIO);
		CHECK(strstr(err.msg, theirs) != NULL);
	} else {
		CHECK_INT(rc, 0);
		cmd_output_abandon(&o);
	}
	unlink(theirs);
}

static void *late_reader(void *arg)
{
	struct spy_buf *got = arg;
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	/* Not blocking: with no writer left (the bytes dropped), EOF at once. */
	int fd = open(got->buf, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	spy_buf_reset(got);
	for (int i = 0; fd >= 0 && i < 500; i++) {
		struct pollfd pf = { fd, POLLIN, 0 };
		char b[256];
		ssize_t n = poll(&pf, 1, 10) == 1 ? read(fd, b, sizeof(b)) : -1;
		if (n == 0) {
			break; /* EOF: spy closed it */
		}
		if (n > 0) {
			spy_buf_add(got, b, (size_t)n);
		}
	}
	if (fd >= 0) {
		close(fd);
	}
	return NULL;
}

/*
 * A FIFO nobody reads yet when the profile is written: spy waits for a
 * reader to take it, and does not drop it by closing first.
 */
static void test_fifo_late_reader(void)
{
	struct spy_err err = SPY_ERR_INIT;
	char *fifo = path_in("private", "late.fifo");
	CHECK_INT(mkfifo(fifo, 0600), 0);
	struct cmd_output o;
	CHECK_INT(cmd_output_open(&o, fifo, &err), 0);
	struct spy_buf got = SPY_BUF_INIT;
	spy_buf_adds(&got, fifo);
	pthread_t th;
	CHECK_INT(pthread_create(&th, NULL, late_reader, &got), 0);
	CHECK_INT(cmd_output_commit(&o, write_hello, "hello", &err), 0);
	pthread_join(th, NULL);
	CHECK(got.len == 5 && !memcmp(got.buf, "hello", 5));
	spy_buf_release(&got);
	unlink(fifo);
}

/*
 * "-": standard output, after what stdio already holds for it, and still
 * open afterwards; no file named "-" appears in the working directory.
 */
static void test_stdout(void)
{
	struct spy_err err = SPY_ERR_INIT;
	char *cap = path_in("private", "stdout.txt");
	char old_cwd[4096];
	CHECK(getcwd(old_cwd, sizeof(old_cwd)) != NULL);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s/private", base);
	CHECK_INT(chdir(dir), 0);
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(saved >= 0 && fd >= 0);
	CHECK_INT(dup2(fd, STDOUT_FILENO), STDOUT_FILENO);
	close(fd);

	fputs("before;", stdout);  /* buffered in stdio: must come out first */
	CHECK_INT(cmd_output_file("-", write_hello, "hello;", &err), 0);
	struct cmd_output o;
	CHECK_INT(cmd_output_open(&o, "-", &err), 0);
	CHECK(o.is_stdout && o.in_place && !o.tmp);
	CHECK(!strcmp(o.path, CMD_OUTPUT_STDOUT_NAME));
	/* A failed writer is reported with stdout's name; nothing to remove. */
	CHECK_INT(cmd_output_commit(&o, write_fail, NULL, &err), -SPY_EIO);
	fputs(";after", stdout);  /* descriptor 1 survived both */
	fflush(stdout);

	CHECK_INT(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
	close(saved);
	CHECK(holds(cap, "before;hello;partial;after"));
	CHECK(access("-", F_OK) != 0);
	CHECK_INT(chdir(old_cwd), 0);

	/* A file of that name is still reachable as ./- */
	char dash[300];
	snprintf(dash, sizeof(dash), "%s/./-", dir);
	CHECK_INT(cmd_output_file(dash, write_hello, "dash", &err), 0);
	CHECK(holds(dash, "dash"));
	unlink(dash);
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	CHECK_INT(system(cmd), 0);
}

int main(void)
{
	snprintf(base, sizeof(base), "/tmp/spy-test-output-XXXXXX");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	make_dir("private", 0755);
	make_dir("sticky", 01777);
	make_dir("shared", 0777);
	test_regular_and_mode();
	test_stdout();
	test_links("sticky", true);
	test_links("shared", true);
	test_links("private", false);
	test_fifos("sticky", true);
	test_fifos("shared", true);
	test_fifos("private", false);
	test_fifo_late_reader();
	cleanup();
	return check_done();
}
