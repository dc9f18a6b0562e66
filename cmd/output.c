/*
 * Output files of report and diff, replaced atomically (see output.h). The
 * temporary is made with mkostemp in the target's own directory, since a
 * rename across file systems would not be atomic.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/output.h"
#include "common/buf.h"

int cmd_output_file(const char *path, cmd_write_fn fn, void *ctx, struct spy_err *err)
{
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode)) {
			return spy_err_set(err, SPY_EIO, "cannot write %s: it is a directory", path);
		}
		FILE *f = fopen(path, "w");
		if (!f) {
			return spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(errno));
		}
		int rc = fn(ctx, f, path, err);
		if (fclose(f) != 0 && rc == 0) {
			rc = spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(errno));
		}
		return rc;
	}
	const char *slash = strrchr(path, '/');
	struct spy_buf b = SPY_BUF_INIT;
	if (slash) {
		spy_buf_add(&b, path, (size_t)(slash - path) + 1);
	}
	spy_buf_addf(&b, ".%s.spy-XXXXXX", slash ? slash + 1 : path);
	char *tmp = spy_buf_detach(&b, NULL);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		free(tmp);
		return spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(e));
	}
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		unlink(tmp);
		free(tmp);
		return spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(e));
	}
	int rc = fn(ctx, f, path, err);
	if (rc == 0 && fflush(f) != 0) {
		rc = spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(errno));
	}
	if (rc == 0 && fsync(fileno(f)) != 0) {
		rc = spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(errno));
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(errno));
	}
	if (rc == 0) {
		/* mkstemp makes 0600; a profile is an ordinary file (0666 & ~umask). */
		mode_t um = umask(0);
		umask(um);
		if (chmod(tmp, 0666 & ~um) != 0 || rename(tmp, path) != 0) {
			rc = spy_err_set(err, SPY_EIO, "cannot write %s: %s", path, strerror(errno));
		}
	}
	if (rc != 0) {
		unlink(tmp);
	}
	free(tmp);
	return rc;
}

