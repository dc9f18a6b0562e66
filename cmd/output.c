/*
 * Output files of record, report and diff, replaced atomically (see
 * output.h). The temporary is made with mkostemp in the target's own
 * directory, since a rename across file systems would not be atomic.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/output.h"
#include "common/buf.h"

static int write_error(const struct cmd_output *o, int e, struct spy_err *err)
{
	return spy_err_set(err, SPY_EIO, "cannot write %s: %s", o->path, strerror(e));
}

int cmd_output_open(struct cmd_output *o, const char *path, struct spy_err *err)
{
	struct stat st;
	memset(o, 0, sizeof(*o));
	o->path = path;
	o->fd = -1;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode)) {
			return spy_err_set(err, SPY_EIO, "cannot write %s: it is a directory", path);
		}
		o->in_place = true;
		return 0;
	}
	const char *slash = strrchr(path, '/');
	struct spy_buf b = SPY_BUF_INIT;
	if (slash) {
		spy_buf_add(&b, path, (size_t)(slash - path) + 1);
	}
	spy_buf_addf(&b, ".%s.spy-XXXXXX", slash ? slash + 1 : path);
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

int cmd_output_commit(struct cmd_output *o, cmd_write_fn fn, void *ctx, struct spy_err *err)
{
	FILE *f = o->in_place ? fopen(o->path, "w") : o->fd >= 0 ? fdopen(o->fd, "w") : NULL;
	if (!f) {
		int e = o->fd >= 0 || o->in_place ? errno : EBADF;
		cmd_output_abandon(o);
		return write_error(o, e, err);
	}
	if (!o->in_place) {
		o->fd = -1; /* f owns it now */
	}
	int rc = fn(ctx, f, o->path, err);
	if (rc == 0 && fflush(f) != 0) {
		rc = write_error(o, errno, err);
	}
	if (rc == 0 && !o->in_place && fsync(fileno(f)) != 0) {
		rc = write_error(o, errno, err);
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = write_error(o, errno, err);
	}
	if (rc == 0 && o->tmp) {
		/* mkstemp makes 0600; an output is an ordinary file (0666 & ~umask). */
		mode_t um = umask(0);
		umask(um);
		if (chmod(o->tmp, 0666 & ~um) != 0 || rename(o->tmp, o->path) != 0) {
			rc = write_error(o, errno, err);
		} else {
			free(o->tmp);
			o->tmp = NULL;
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
