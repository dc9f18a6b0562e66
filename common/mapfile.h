/*
 * Opening the files a target has mapped, and the files a core names, the
 * one way that is right in containers, chroots and across upgrades.
 *
 * A path in /proc/PID/maps is relative to the *reader's* root when the file
 * is reachable from it (a chroot in our mount namespace: the path carries
 * the chroot's prefix) and to the target's root otherwise (a container).
 * The one name that is always right is /proc/PID/map_files/LO-HI (root or
 * CAP_SYS_ADMIN; it also reaches a deleted or replaced file); without it
 * the path is tried under /proc/PID/root, then as it is, and a candidate is
 * accepted only if its device and inode are the ones the maps line gives
 * (on overlayfs, the inode: see same_file).
 *
 * Why here, in common: cmd (the interpreter's symbols), symbolize (the
 * native symbolizer, which cannot include sampler) and sampler (core files)
 * all open such files, and this needs nothing but the maps line.
 *
 * The files are hostile: a target can plant a symlink, a FIFO or a device
 * node where one of its libraries was. Every candidate is first opened
 * O_PATH (which opens no device and never blocks) without following
 * symlinks, checked to be a regular file, and only then reopened for
 * reading through /proc/self/fd.
 */
#ifndef SPY_COMMON_MAPFILE_H
#define SPY_COMMON_MAPFILE_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/mem.h"

/*
 * The file behind mapping m of process pid (m->path, m->dev, m->inode as
 * /proc/PID/maps gives them), open O_RDONLY|O_CLOEXEC. Returns the
 * descriptor, or -errno: -ENOENT when no candidate exists, -ESTALE when
 * candidates exist but none is the mapped file.
 */
int spy_open_mapped(pid_t pid, const struct spy_map *m);

/* How spy_open_path resolves path. */
enum spy_open_how {
	/* No symlink anywhere in path (a core's NT_FILE names are canonical). */
	SPY_OPEN_NOLINKS,
	/* Symlinks followed, but resolved inside dirfd as if it were "/"
	 * (a root filesystem the user named, like gdb's sysroot). */
	SPY_OPEN_IN_ROOT,
	/* A path the user named: symlinks followed as usual. */
	SPY_OPEN_USER,
};

/*
 * Open path (relative to dirfd, AT_FDCWD for the current directory) for
 * reading under the rules above: a regular file only, never blocking, never
 * opening a device. Returns the descriptor or -errno (-EINVAL: not a regular
 * file; -ELOOP: a symlink where none is allowed). st, if not NULL, receives
 * the file's stat.
 */
int spy_open_path(int dirfd, const char *path, enum spy_open_how how, struct stat *st);

#endif
