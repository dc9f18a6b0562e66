/*
 * Reading the sampled source files of a recording (see sources.h).
 *
 * A code object's file name is the one the target saw: relative to the
 * target's root (a container, a chroot), or, before Python 3.9 for the
 * main script, to its working directory. So a file is opened under
 * /proc/PID/root (or /proc/PID/cwd for a relative name) with
 * common/mapfile.h's rules: symlinks resolved inside that root, never a
 * link planted to reach outside it, a regular file only, never blocking
 * (a FIFO or a device where a module was is refused before it is opened).
 *
 * The decision a newcomer would question: files are read while recording,
 * not at the end. A launched program that exits takes its /proc/PID/root
 * with it, and the end is when the file may have changed most; the first
 * sample naming a file is the closest moment to the code that ran. The
 * cost is once per file, and a profile with more distinct files than
 * CMD_SOURCE_MAX_FILES (or their bytes past CMD_SOURCE_MAX_TOTAL) keeps the
 * first ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/sources.h"
#include "common/credopen.h"
#include "common/json.h"
#include "common/log.h"
#include "common/mapfile.h"
#include "common/util.h"

struct cmd_source_file {
	const char *name;   /* interned */
	char *data;         /* NULL: could not be read */
	size_t len;
	bool withheld;      /* the program itself could not open it */
};

void cmd_sources_init(struct cmd_sources *s)
{
	memset(s, 0, sizeof(*s));
	s->rootfd = s->cwdfd = -1;
}

static void close_dirs(struct cmd_sources *s)
{
	if (s->rootfd >= 0) {
		close(s->rootfd);
	}
	if (s->cwdfd >= 0) {
		close(s->cwdfd);
	}
	s->rootfd = s->cwdfd = -1;
}

void cmd_sources_release(struct cmd_sources *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].data);
	}
	free(s->v);
	spy_hmap_release(&s->index);
	close_dirs(s);
	spy_credopen_free(s->co);
	cmd_sources_init(s);
}

/*
 * Whole file on fd, at most max bytes; NULL when larger, unreadable or
 * binary. *nread counts every byte read, kept or not: the budget is of
 * work done, so a file refused for a NUL byte costs what was read of it,
 * and reading stops at the first NUL.
 */
static char *read_bounded(int fd, size_t max, size_t *len, size_t *nread)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || (size_t)st.st_size > max) {
		return NULL;
	}
	/* The size may change under us: read at most max + 1 and refuse a file that grew past max. */
	size_t cap = (size_t)st.st_size + 1, n = 0;
	char *buf = spy_xmalloc(cap + 1);
	for (;;) {
		if (n == cap) {
			if (cap > max) {
				free(buf);
				return NULL;
			}
			cap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			buf = spy_xrealloc(buf, cap + 1);
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR) {
			continue;
		}
		if (r > 0) {
			*nread += (size_t)r;
		}
		/* A NUL byte: not Python source (a .pyc, a binary renamed .py). */
		if (r < 0 || (r > 0 && memchr(buf + n, '\0', (size_t)r))) {
			free(buf);
			return NULL;
		}
		if (r == 0) {
			break;
		}
		n += (size_t)r;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

/*
 * The directory a name of process pid is relative to: its root, or for a
 * relative name its working directory. Kept open for the next file of the
 * same process (the path walk through /proc/PID/root is a fifth of a
 * small file's cost); -1 if the process is gone.
 */
static int dir_for(struct cmd_sources *s, pid_t pid, bool relative)
{
	if (pid != s->dir_pid) {
		close_dirs(s);
		s->dir_pid = pid;
	}
	int *fd = relative ? &s->cwdfd : &s->rootfd;
	if (*fd < 0) {
		char dir[64];
		snprintf(dir, sizeof(dir), "/proc/%d/%s", (int)pid, relative ? "cwd" : "root");
		*fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	return *fd;
}

/*
 * The file name of process pid, opened with the process's own rights
 * (common/credopen.h): a name is the program's claim, and a file it could
 * not open itself is not read (*withheld is then set).
 */
static char *read_source(struct cmd_sources *s, pid_t pid, const struct spy_creds *then, const char *name,
			 size_t max, size_t *len, bool *withheld)
{
	int dirfd = dir_for(s, pid, name[0] != '/');
	if (dirfd < 0) {
		return NULL;
	}
	if (!s->co) {
		s->co = spy_credopen_new();
	}
	int fd = spy_credopen(s->co, pid, then, dirfd, name);
	if (fd < 0) {
		*withheld = spy_credopen_denied(fd);
		spy_log(SPY_LOG_DEBUG, "source %s of process %d: %s", name, (int)pid, strerror(-fd));
		return NULL;
	}
	char *data = read_bounded(fd, max, len, &s->read_bytes);
	close(fd);
	return data;
}

/* Names that are not files: "<string>", "<frozen importlib._bootstrap>", "<stdin>". */
static bool is_file_name(const char *name)
{
	return name && name[0] && name[0] != '<';
}

void cmd_sources_note(struct cmd_sources *s, const struct spy_stack *st, pid_t pid, const struct spy_creds *then,
		      bool untrusted)
{
	for (size_t i = 0; i < st->n; i++) {
		const struct spy_frame *f = &st->v[i];
		if (f->kind != SPY_FRAME_PYTHON || !f->line || !is_file_name(f->file)) {
			continue;
		}
		if (spy_hmap_has(&s->index, (uint64_t)(uintptr_t)f->file)) {
			continue;
		}
		/* Known from now on, read or not: each file is tried once. */
		SPY_GROW(s->v, s->alloc, s->n + 1);
		struct cmd_source_file *e = &s->v[s->n];
		*e = (struct cmd_source_file){ f->file, NULL, 0, untrusted };
		spy_hmap_add(&s->index, (uint64_t)(uintptr_t)f->file, s->n++);
		s->across_exec += untrusted;
		size_t room = s->read_bytes < CMD_SOURCE_MAX_TOTAL ? CMD_SOURCE_MAX_TOTAL - s->read_bytes : 0;
		if (!untrusted && s->n <= CMD_SOURCE_MAX_FILES && room) {
			uint64_t t0 = spy_thread_cpu_ns();
			e->data = read_source(s, pid, then, f->file, room < CMD_SOURCE_MAX_FILE ? room : CMD_SOURCE_MAX_FILE,
					      &e->len, &e->withheld);
			s->read_ns += spy_thread_cpu_ns() - t0;
		}
		if (e->data) {
			s->bytes += e->len;
		} else if (e->withheld) {
			s->withheld++;
		} else {
			s->unreadable++;
		}
	}
}

int cmd_sources_get(void *ctx, const char *file, const char **data, size_t *len)
{
	struct cmd_sources *s = ctx;
	uint64_t k = spy_hmap_get(&s->index, (uint64_t)(uintptr_t)file);
	if (k == SPY_HMAP_NONE || !s->v[k].data) {
		return -1;
	}
	*data = s->v[k].data;
	*len = s->v[k].len;
	return 0;
}

void cmd_sources_withheld(const struct cmd_sources *s, struct spy_buf *out)
{
	spy_buf_addf(out, "%zu file%s the program could not read", s->withheld, s->withheld == 1 ? "" : "s");
	if (s->across_exec) {
		spy_buf_addf(out, " (%zu named after it exec'd, not opened)", s->across_exec);
	}
	spy_buf_adds(out, ":");
	const char *sep = " ";
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].withheld) {
			spy_buf_adds(out, sep);
			spy_json_string(out, s->v[i].name);
			sep = ", ";
		}
	}
}
