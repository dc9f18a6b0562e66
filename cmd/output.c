/*
 * Output files of record, report and diff (see output.h): the one place
 * spy writes to the file system, with one policy.
 *
 * spy often runs as root and is told to write into shared directories
 * (/tmp), where anyone may have planted a name first. So:
 *  - A regular file is never written into: a temporary is created beside
 *    it (mkostemp: O_EXCL, mode 0600) and renamed over the name once
 *    complete. rename() replaces whatever the name is, a link included,
 *    and never writes through it; a failed run leaves the old file whole.
 *  - What exists and is not a regular file (a FIFO, /dev/stdout, a
 *    terminal) is written in place, through the descriptor opened at the
 *    start: nothing is reopened by name at the end, so a name swapped for
 *    a link during a long recording is never followed.
 *  - A link, FIFO or device in a world-writable directory (sticky or not)
 *    is used only if it belongs to us, to root or to the directory's owner
 *    (the kernel's protected_symlinks rule); someone else's is refused.
 *  - The permissions are set on the descriptor: 0666 through the umask,
 *    but 0600 when spy runs as root, since a profile holds command lines.
 *  - "-" is standard output, for every format (binary ones too, for a
 *    pipe), as perf, tar and curl read it; never a file named "-" (name it
 *    "./-" for that).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd/output.h"
#include "common/buf.h"
#include "common/util.h"

static int write_error(const struct cmd_output *o, int e, struct spy_err *err)
{
	return spy_err_set(err, SPY_EIO, "cannot write %s: %s", o->path, strerror(e));
}

/* The directory path names (with its trailing '/'), "" for the current one. */
static void dir_of(const char *path, struct spy_buf *out)
{
	const char *base = spy_basename(path);
	spy_buf_add(out, path, (size_t)(base - path));
}

/* Whether st (of something already at the path) may be used: see the top of this file. */
static bool trusted(const char *path, const struct stat *st)
{
	if (st->st_uid == geteuid() || st->st_uid == 0) {
		return true;
	}
	struct spy_buf dir = SPY_BUF_INIT;
	dir_of(path, &dir);
	struct stat ds;
	bool ok = stat(dir.len ? dir.buf : ".", &ds) == 0 &&
		  (!(ds.st_mode & S_IWOTH) || ds.st_uid == st->st_uid);
	spy_buf_release(&dir);
	return ok;
}

/*
 * Open what is at path to write in place. A FIFO with no reader yet is
 * opened read-write (Linux allows it, and it does not block), so spy does
 * not wait here for a reader that will come when the profile does; it
 * waits at the end instead (wait_drained).
 */
static int open_in_place(struct cmd_output *o, bool is_link, const struct stat *lst, struct spy_err *err)
{
	int flags = O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | (is_link ? 0 : O_NOFOLLOW);
	int fd = open(o->path, flags);
	if (fd < 0 && errno == ENXIO) {
		fd = open(o->path, (flags & ~O_WRONLY) | O_RDWR);
		o->unread_fifo = fd >= 0;
	}
	if (fd < 0) {
		return write_error(o, errno, err);
	}
	struct stat st;
	/* What was checked must be what was opened: not swapped in between. */
	bool same = fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) &&
		    (is_link ? trusted(o->path, &st) : st.st_dev == lst->st_dev && st.st_ino == lst->st_ino);
	if (!same) {
		close(fd);
		return spy_err_set(err, SPY_EIO, "cannot write %s: it changed while being opened", o->path);
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	o->fd = fd;
	o->in_place = true;
	return 0;
}

static int open_temp(struct cmd_output *o, struct spy_err *err)
{
	struct spy_buf b = SPY_BUF_INIT;
	dir_of(o->path, &b);
	spy_buf_addf(&b, ".%s.spy-XXXXXX", spy_basename(o->path));
	o->tmp = spy_buf_detach(&b, NULL);
	o->fd = mkostemp(o->tmp, O_CLOEXEC);
	if (o->fd < 0) {
		int e = errno;
		free(o->tmp);
		o->tmp = NULL;
		return write_error(o, e, err);
	}
	return 0;
}

/*
 * Standard output, through a descriptor of its own, so that closing the
 * output leaves descriptor 1 (and stdio's stdout) open for what follows.
 */
static int open_stdout(struct cmd_output *o, struct spy_err *err)
{
	o->path = CMD_OUTPUT_STDOUT_NAME;
	o->in_place = true;
	o->is_stdout = true;
	o->fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
	return o->fd < 0 ? write_error(o, errno, err) : 0;
}

int cmd_output_open(struct cmd_output *o, const char *path, struct spy_err *err)
{
	struct stat lst, st;
	memset(o, 0, sizeof(*o));
	o->path = path;
	o->fd = -1;
	if (!strcmp(path, "-")) {
		return open_stdout(o, err);
	}
	if (lstat(path, &lst) != 0) {
		return errno == ENOENT ? open_temp(o, err) : write_error(o, errno, err);
	}
	bool is_link = S_ISLNK(lst.st_mode);
	if ((is_link || !S_ISREG(lst.st_mode)) && !trusted(path, &lst)) {
		return spy_err_set(err, SPY_EIO, "cannot write %s: %s owned by uid %d in a shared directory "
				   "(remove it, or name another file)", path, is_link ? "a link" : "a special file",
				   (int)lst.st_uid);
	}
	if (is_link && stat(path, &st) != 0) {
		/* A dangling link: the file created replaces the link, never its target. */
		return open_temp(o, err);
	}
	const struct stat *what = is_link ? &st : &lst;
	if (S_ISDIR(what->st_mode)) {
		return spy_err_set(err, SPY_EIO, "cannot write %s: it is a directory", path);
	}
	return S_ISREG(what->st_mode) ? open_temp(o, err) : open_in_place(o, is_link, &lst, err);
}

void cmd_output_abandon(struct cmd_output *o)
{
	if (o->fd >= 0) {
		close(o->fd);
		o->fd = -1;
	}
	if (o->tmp) {
		unlink(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
	}
}

/*
 * A FIFO opened with no reader holds what spy wrote only while spy keeps it
 * open: closed before a reader came, the bytes were dropped, and the reader
 * then waited for a writer for ever. So spy waits until a reader has taken
 * every byte, as `echo > fifo` waits at its open, or a signal ends the wait,
 * or the FIFO has no name left for a reader to open it by.
 */
static void wait_drained(int fd)
{
	int left;
	struct stat st;
	struct timespec ts = { 0, 5 * 1000 * 1000 };
	while (ioctl(fd, FIONREAD, &left) == 0 && left > 0 && fstat(fd, &st) == 0 && st.st_nlink > 0) {
		if (nanosleep(&ts, NULL) != 0 && errno == EINTR) {
			return;
		}
	}
}

/* Best effort: makes the rename durable where the file system can sync a directory. */
static void sync_dir_of(const char *path)
{
	struct spy_buf dir = SPY_BUF_INIT;
	dir_of(path, &dir);
	int fd = open(dir.len ? dir.buf : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
	spy_buf_release(&dir);
}

/* The temporary is complete: its mode, set by descriptor, and its bytes on disk. */
static int publish(struct cmd_output *o, int fd, struct spy_err *err)
{
	mode_t um = umask(0);
	umask(um);
	mode_t mode = geteuid() == 0 ? 0600 : 0666 & ~um;
	if (fchmod(fd, mode) != 0 || fsync(fd) != 0) {
		return write_error(o, errno, err);
	}
	return 0;
}

int cmd_output_commit(struct cmd_output *o, cmd_write_fn fn, void *ctx, struct spy_err *err)
{
	FILE *f = o->fd >= 0 ? fdopen(o->fd, "w") : NULL;
	if (!f) {
		int e = o->fd >= 0 ? errno : EBADF;
		cmd_output_abandon(o);
		return write_error(o, e, err);
	}
	o->fd = -1; /* f owns it now */
	if (o->is_stdout) {
		/* What stdio holds for stdout goes first, in the order it was printed. */
		fflush(stdout);
	}
	int rc = fn(ctx, f, o->path, err);
	if (rc == 0 && fflush(f) != 0) {
		rc = write_error(o, errno, err);
	}
	if (rc == 0 && o->tmp) {
		rc = publish(o, fileno(f), err);
	}
	if (rc == 0 && o->unread_fifo) {
		wait_drained(fileno(f));
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = write_error(o, errno, err);
	}
	if (rc == 0 && o->tmp) {
		if (rename(o->tmp, o->path) != 0) {
			rc = write_error(o, errno, err);
		} else {
			free(o->tmp);
			o->tmp = NULL;
			sync_dir_of(o->path);
		}
	}
	cmd_output_abandon(o);
	return rc;
}

int cmd_output_file(const char *path, cmd_write_fn fn, void *ctx, struct spy_err *err)
{
	struct cmd_output o;
	int rc = cmd_output_open(&o, path, err);
	return rc < 0 ? rc : cmd_output_commit(&o, fn, ctx, err);
}

int cmd_output_text(FILE *f, struct spy_buf *text, const char *name, struct spy_err *err)
{
	int rc = 0;
	if (fwrite(text->buf, 1, text->len, f) != text->len) {
		rc = spy_err_set(err, SPY_EIO, "cannot write %s: %s", name, strerror(errno));
	}
	spy_buf_release(text);
	return rc;
}
