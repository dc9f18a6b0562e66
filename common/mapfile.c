/*
 * Opening a target's files (see mapfile.h).
 *
 * openat2(2) does the containing: RESOLVE_IN_ROOT makes an absolute
 * symlink planted inside a container's or chroot's tree resolve inside
 * that tree, not in ours, and RESOLVE_NO_SYMLINKS refuses any link at all.
 * Where the kernel lacks openat2 (before 5.6), the fallback is openat with
 * O_NOFOLLOW: the last component is still never a link, the device and
 * inode check still rejects a file that is not the mapped one, and O_PATH
 * still never opens a device or a FIFO.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mapfile.h"
#include "common/util.h"

static int sys_openat2(int dirfd, const char *path, uint64_t flags, uint64_t resolve)
{
#ifdef SYS_openat2
	struct open_how how = { .flags = flags, .resolve = resolve };
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
#else
	(void)dirfd, (void)path, (void)flags, (void)resolve;
	return -ENOSYS;
#endif
}

/* O_PATH descriptor of path, resolved as how says; -errno on failure. */
static int open_opath(int dirfd, const char *path, enum spy_open_how how)
{
	uint64_t flags = O_PATH | O_CLOEXEC;
	uint64_t resolve = RESOLVE_NO_MAGICLINKS;
	if (how == SPY_OPEN_NOLINKS) {
		resolve |= RESOLVE_NO_SYMLINKS;
	} else if (how == SPY_OPEN_IN_ROOT) {
		resolve |= RESOLVE_IN_ROOT;
	} else {
		resolve = 0;
	}
	int fd = sys_openat2(dirfd, path, flags, resolve);
	if (fd != -ENOSYS) {
		return fd;
	}
	if (how == SPY_OPEN_IN_ROOT && path[0] == '/') {
		/* Without openat2 an absolute path would escape dirfd: make it relative. */
		while (*path == '/') {
			path++;
		}
	}
	fd = openat(dirfd, path, O_PATH | O_CLOEXEC | (how == SPY_OPEN_USER ? 0 : O_NOFOLLOW));
	return fd < 0 ? -errno : fd;
}

/* Turn a checked O_PATH descriptor into one open for reading; closes opath. */
static int reopen_rdonly(int opath)
{
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", opath);
	int fd = open(self, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	int e = errno;
	close(opath);
	return fd < 0 ? -e : fd;
}

int spy_open_path(int dirfd, const char *path, enum spy_open_how how, struct stat *st)
{
	struct stat sb;
	int o = open_opath(dirfd, path, how);
	if (o < 0) {
		return o;
	}
	if (fstat(o, &sb) < 0) {
		int e = errno;
		close(o);
		return -e;
	}
	if (!S_ISREG(sb.st_mode)) {
		close(o);
		return S_ISLNK(sb.st_mode) ? -ELOOP : -EINVAL;
	}
	if (st) {
		*st = sb;
	}
	return reopen_rdonly(o);
}

/* Whether the file open on fd (stat st) is the one the maps line names. */
static bool same_file(int fd, const struct stat *st, const struct spy_map *m)
{
	if ((uint64_t)st->st_ino != m->inode) {
		return false;
	}
	if ((uint64_t)st->st_dev == m->dev) {
		return true;
	}
	/*
	 * Before Linux 6.8, the maps line of a file on overlayfs (a Docker
	 * container's root) gives the device of the layer's file, while fstat
	 * gives the overlay's; the inode number is the layer's in both when
	 * the layers share a filesystem, as they usually do. Without this a
	 * spy inside a container with CAP_SYS_PTRACE alone (no map_files)
	 * could open none of its neighbours' files.
	 */
	struct statfs sf;
	return fstatfs(fd, &sf) == 0 && sf.f_type == OVERLAYFS_SUPER_MAGIC;
}

int spy_open_mapped(pid_t pid, const struct spy_map *m)
{
	char buf[96];
	struct stat st;
	int fd, why = -ENOENT;

	if (!m->path[0] || !m->inode) {
		return -ENOENT;
	}
	/* The kernel's own link to the mapped file: deleted, replaced or in another namespace. */
	snprintf(buf, sizeof(buf), "/proc/%d/map_files/%llx-%llx", (int)pid,
		 (unsigned long long)m->lo, (unsigned long long)m->hi);
	fd = spy_open_path(AT_FDCWD, buf, SPY_OPEN_USER, &st);
	if (fd >= 0 && same_file(fd, &st, m)) {
		return fd;
	}
	if (fd >= 0) {
		close(fd);
		why = -ESTALE;
	}
	/* The path in the target's root (a container), then in ours (a chroot's prefixed path). */
	snprintf(buf, sizeof(buf), "/proc/%d/root", (int)pid);
	int root = open(buf, O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < 2; i++) {
		int dirfd = i == 0 ? root : AT_FDCWD;
		if (dirfd < 0 && i == 0) {
			continue;
		}
		fd = spy_open_path(dirfd, m->path, i == 0 ? SPY_OPEN_IN_ROOT : SPY_OPEN_NOLINKS, &st);
		if (fd >= 0 && same_file(fd, &st, m)) {
			if (root >= 0) {
				close(root);
			}
			return fd;
		}
		if (fd >= 0) {
			close(fd);
			why = -ESTALE;
		}
	}
	if (root >= 0) {
		close(root);
	}
	spy_log(SPY_LOG_DEBUG, "process %d: no file of %s is the mapped one (%s)", (int)pid, m->path,
		why == -ESTALE ? "device or inode differ" : "not found");
	return why;
}
