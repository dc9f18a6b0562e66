/*
 * Unit tests for opening a target's mapped files (common/mapfile.c), on
 * this process's own mappings and on files planted the way a hostile
 * container or chroot would plant them: a symlink out of the root, a FIFO
 * (an open that blocks forever), a terminal, a file swapped in under a
 * mapped name; and a file on overlayfs as older kernels show it. An alarm
 * turns a blocking open into a failure, not a hang.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mapfile.h"
#include "tests/lib/check.h"

static char dir[] = "/tmp/spy-mapfile-test.XXXXXX";

static char *at(const char *rel)
{
	static char buf[8][256];
	static int i;
	char *b = buf[i++ % 8];
	snprintf(b, 256, "%s/%s", dir, rel);
	return b;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* The first bytes behind fd, as a string. */
static const char *content(int fd)
{
	static char buf[64];
	ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static ino_t inode_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* A mapping of path in this process, described as its maps line would be. */
static struct spy_map map_of(const char *path, void **addr)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	*addr = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK(*addr != MAP_FAILED);
	close(fd);
	return (struct spy_map){ .lo = (spy_addr_t)(uintptr_t)*addr,
				 .hi = (spy_addr_t)(uintptr_t)*addr + 4096,
				 .dev = st.st_dev, .inode = st.st_ino, .path = path };
}

static void test_mapped_and_replaced(void)
{
	void *addr;
	write_text(at("lib.so"), "original");
	struct spy_map m = map_of(at("lib.so"), &addr);
	int fd = spy_open_mapped(getpid(), &m);
	CHECK_STR(content(fd), "original");
	close(fd);

	/* A package upgrade: a new file renamed over the mapped one. */
	write_text(at("lib.new"), "upgraded");
	CHECK(rename(at("lib.new"), at("lib.so")) == 0);
	fd = spy_open_mapped(getpid(), &m);
	if (geteuid() == 0) {
		/* map_files reaches the file still mapped, not the one now at its name. */
		CHECK_STR(content(fd), "original");
	} else {
		/* Without map_files no candidate is the mapped file: refuse, never read the new one. */
		CHECK_INT(fd, -ESTALE);
	}
	if (fd >= 0) {
		close(fd);
	}
	munmap(addr, 4096);

	/* Not mapped at that range any more: only the path is left, and it is another inode. */
	fd = spy_open_mapped(getpid(), &m);
	CHECK_INT(fd, -ESTALE);
}

/* What a chroot's maps line looks like from outside: the path carries the prefix. */
static void test_prefixed_path(void)
{
	struct spy_map m = { .lo = 0x1000, .hi = 0x2000, .path = at("lib.so") };
	struct stat st;
	CHECK(stat(m.path, &st) == 0);
	m.dev = st.st_dev;
	m.inode = st.st_ino;
	int fd = spy_open_mapped(getpid(), &m);
	CHECK_STR(content(fd), "upgraded");
	close(fd);
	/* The same path with another device: some other file, refused. */
	m.dev ^= 1;
	CHECK_INT(spy_open_mapped(getpid(), &m), -ESTALE);
}

static void test_hostile_files(void)
{
	CHECK(mkfifo(at("fifo"), 0600) == 0);
	CHECK_INT(spy_open_path(AT_FDCWD, at("fifo"), SPY_OPEN_NOLINKS, NULL), -EINVAL);
	CHECK_INT(spy_open_path(AT_FDCWD, at("fifo"), SPY_OPEN_USER, NULL), -EINVAL);
	/* A terminal or any device: refused without being opened. */
	CHECK_INT(spy_open_path(AT_FDCWD, "/dev/tty", SPY_OPEN_USER, NULL), -EINVAL);
	CHECK_INT(spy_open_path(AT_FDCWD, "/dev/null", SPY_OPEN_USER, NULL), -EINVAL);
	CHECK_INT(spy_open_path(AT_FDCWD, dir, SPY_OPEN_USER, NULL), -EINVAL);

	/* A link, last or in the middle: refused when links are not allowed,
	 * followed when the user named it. */
	CHECK(symlink(at("lib.so"), at("link")) == 0);
	CHECK(symlink(dir, at("dirlink")) == 0);
	CHECK_INT(spy_open_path(AT_FDCWD, at("link"), SPY_OPEN_NOLINKS, NULL), -ELOOP);
	CHECK(spy_open_path(AT_FDCWD, at("dirlink/lib.so"), SPY_OPEN_NOLINKS, NULL) < 0);
	int fd = spy_open_path(AT_FDCWD, at("link"), SPY_OPEN_USER, NULL);
	CHECK_STR(content(fd), "upgraded");
	close(fd);

	/* A mapped name swapped for a FIFO or a link to a secret: refused, and no hang. */
	struct spy_map m = { .lo = 0x1000, .hi = 0x2000, .dev = 1, .inode = inode_of(at("lib.so")),
			     .path = at("fifo") };
	CHECK(spy_open_mapped(getpid(), &m) < 0);
	m.path = at("link");
	CHECK(spy_open_mapped(getpid(), &m) < 0);
}

/* A root filesystem: an absolute link planted in it must resolve inside it. */
static void test_in_root(void)
{
	CHECK(mkdir(at("root"), 0700) == 0 && mkdir(at("root/etc"), 0700) == 0 &&
	      mkdir(at("root/lib"), 0700) == 0);
	write_text(at("root/etc/hostname"), "inside");
	CHECK(symlink("/etc/hostname", at("root/lib/libc.so.6")) == 0);
	CHECK(symlink("../../../../../../../../etc/hostname", at("root/lib/up.so")) == 0);
	int root = open(at("root"), O_PATH | O_DIRECTORY);
	CHECK(root >= 0);
	int fd = spy_open_path(root, "/lib/libc.so.6", SPY_OPEN_IN_ROOT, NULL);
	CHECK_STR(content(fd), "inside");
	close(fd);
	fd = spy_open_path(root, "/lib/up.so", SPY_OPEN_IN_ROOT, NULL);
	CHECK_STR(content(fd), "inside");
	close(fd);
	fd = spy_open_path(root, "/../../etc/hostname", SPY_OPEN_IN_ROOT, NULL);
	CHECK_STR(content(fd), "inside");
	close(fd);
	close(root);
}

/*
 * A file on overlayfs as a kernel before 6.8 shows its mapping: the layer's
 * device, the overlay's path. Needs root (a private mount namespace, so the
 * mount goes away with the test).
 */
static void test_overlay(void)
{
	if (geteuid() != 0) {
		printf("SKIP overlay: needs root to mount one\n");
		return;
	}
	const char *const dirs[] = { "ov", "ov/lower", "ov/upper", "ov/work", "ov/merged" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		CHECK(mkdir(at(dirs[i]), 0700) == 0);
	}
	write_text(at("ov/lower/lib.so"), "layered");
	char opts[600];
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s", at("ov/lower"),
		 at("ov/upper"), at("ov/work"));
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("overlay", at("ov/merged"), "overlay", 0, opts) != 0) {
		printf("SKIP overlay: cannot mount one here (%s)\n", strerror(errno));
		return;
	}
	struct stat layer, merged;
	CHECK(stat(at("ov/lower/lib.so"), &layer) == 0 && stat(at("ov/merged/lib.so"), &merged) == 0);
	/* Not mapped at that range: map_files fails and the path is what is left. */
	struct spy_map m = { .lo = 0x1000, .hi = 0x2000, .dev = layer.st_dev, .inode = merged.st_ino,
			     .path = at("ov/merged/lib.so") };
	if (layer.st_ino != merged.st_ino || layer.st_dev == merged.st_dev) {
		printf("SKIP overlay: this overlay does not keep the layer's inode numbers\n");
	} else {
		int fd = spy_open_mapped(getpid(), &m);
		CHECK_STR(content(fd), "layered");
		close(fd);
	}
	/* Another inode on the overlay is still another file. */
	m.inode++;
	CHECK_INT(spy_open_mapped(getpid(), &m), -ESTALE);
	umount2(at("ov/merged"), MNT_DETACH);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "test-common-mapfile: an open blocked (FIFO?)\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

int main(void)
{
	signal(SIGALRM, on_alarm);
	alarm(20);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_mapped_and_replaced();
	test_prefixed_path();
	test_hostile_files();
	test_in_root();
	test_overlay();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
	return check_done();
}
