/*
 * Reading /proc: whole text files, the maps table, stat lines and the
 * thread list.
 *
 * The parsers take text, not file names, so the unit tests can feed them
 * hostile input directly, and none of them uses scanf. The two formats have
 * traps that scanf walks into: a maps path may contain spaces and end in
 * " (deleted)", so the line is split into its first five fields by hand and
 * the rest is the path; a comm may contain spaces and ')', so a stat line is
 * read from its last ')'.
 *
 * Files are opened relative to the descriptor on /proc/PID that proc_open()
 * keeps (see internal.h), never by a fresh "/proc/PID/..." path.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "sampler/internal.h"

/* Map an errno from a /proc access to a spy code (negative). */
int procfs_errno_code(int e)
{
	switch (e) {
	case ENOENT:
	case ESRCH:
		return -SPY_EGONE;
	case EACCES:
	case EPERM:
		return -SPY_EPERM;
	default:
		return -SPY_EIO;
	}
}

int procfs_read_file(int dirfd, const char *name, size_t max, struct spy_buf *out)
{
	/* /proc files report size 0, so read until EOF in large chunks. */
	const size_t chunk = 64 * 1024;
	int rc = 0;

	spy_buf_reset(out);
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return procfs_errno_code(errno);
	}
	for (;;) {
		/* Ask for one byte past max so that "exactly max" and "more" differ. */
		size_t want = max + 1 - out->len;
		if (want > chunk) {
			want = chunk;
		}
		spy_buf_grow(out, want);
		ssize_t n = read(fd, out->buf + out->len, want);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			rc = procfs_errno_code(errno);
			break;
		}
		if (n == 0) {
			break;
		}
		out->len += (size_t)n;
		out->buf[out->len] = '\0';
		if (out->len > max) {
			out->len = max;
			out->buf[max] = '\0';
			rc = -SPY_EBOUND;
			break;
		}
	}
	close(fd);
	return rc;
}

/* Read a small file into buf (not NUL-terminated); bytes read or a negative code. */
static ssize_t read_small(int dirfd, const char *name, char *buf, size_t size)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return procfs_errno_code(errno);
	}
	size_t len = 0;
	while (len < size) {
		ssize_t n = read(fd, buf + len, size - len);
		if (n < 0) {
			if (errno == EINTR) {
				continue;
			}
			int rc = procfs_errno_code(errno);
			close(fd);
			return rc;
		}
		if (n == 0) {
			break;
		}
		len += (size_t)n;
	}
	close(fd);
	return (ssize_t)len;
}

/* One unsigned decimal field at *s, then a separator or the end; false if not one or it overflows. */
static bool parse_u64_field(const char **s, const char *end, uint64_t *out)
{
	const char *p = *s;
	uint64_t v = 0;
	if (p >= end || *p < '0' || *p > '9') {
		return false;
	}
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10) {
			return false;
		}
		v = v * 10 + d;
	}
	if (p < end && *p != ' ' && *p != '\n') {
		return false;
	}
	*out = v;
	*s = p < end ? p + 1 : p;
	return true;
}

bool proc_parse_schedstat(const char *text, size_t len, uint64_t *run_ns, uint64_t *delay_ns, uint64_t *pcount)
{
	/* "RUN_NS WAIT_NS TIMESLICES\n" */
	uint64_t v[3];
	const char *s = text, *end = text ? text + len : NULL;
	for (size_t i = 0; i < 3; i++) {
		if (!text || !parse_u64_field(&s, end, &v[i])) {
			return false;
		}
	}
	*run_ns = v[0];
	*delay_ns = v[1];
	*pcount = v[2];
	return true;
}

/* ---- /proc/PID/maps ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9') {
		return c - '0';
	}
	if (c >= 'a' && c <= 'f') {
		return c - 'a' + 10;
	}
	if (c >= 'A' && c <= 'F') {
		return c - 'A' + 10;
	}
	return -1;
}

/* 1..maxdigits hex digits at *s; more digits than that is an overflow, not a number. */
static bool take_hex(const char **s, const char *end, unsigned maxdigits, uint64_t *out)
{
	uint64_t v = 0;
	unsigned n = 0;
	while (*s < end && hexval(**s) >= 0) {
		if (++n > maxdigits) {
			return false;
		}
		v = (v << 4) | (uint64_t)hexval(**s);
		(*s)++;
	}
	*out = v;
	return n > 0;
}

static bool take_dec(const char **s, const char *end, uint64_t *out)
{
	uint64_t v = 0;
	unsigned n = 0;
	while (*s < end && **s >= '0' && **s <= '9') {
		uint64_t d = (uint64_t)(**s - '0');
		if (v > (UINT64_MAX - d) / 10) {
			return false;
		}
		v = v * 10 + d;
		(*s)++;
		n++;
	}
	*out = v;
	return n > 0;
}

/* The kernel separates fields by one space; accept runs of blanks, but require one. */
static bool take_blanks(const char **s, const char *end)
{
	const char *start = *s;
	while (*s < end && (**s == ' ' || **s == '\t')) {
		(*s)++;
	}
	return *s > start;
}

static bool take_char(const char **s, const char *end, char c)
{
	if (*s < end && **s == c) {
		(*s)++;
		return true;
	}
	return false;
}

/* ---- resources ---- */

/* The value of "key:\tNUMBER" at the start of a line of text, or false. */
static bool field_value(const char *text, size_t len, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	const char *s = text, *end = text + len;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *le = nl ? nl : end;
		if ((size_t)(le - s) > kl && !memcmp(s, key, kl) && s[kl] == ':') {
			const char *v = s + kl + 1;
			while (v < le && (*v == ' ' || *v == '\t')) {
				v++;
			}
			return take_dec(&v, le, out) && (v == le || *v == ' ');
		}
		s = nl ? nl + 1 : end;
	}
	return false;
}

bool proc_parse_stat(const char *text, size_t len, unsigned upto, struct proc_stat *out)
{
	out->state = 0;
	out->have = 0;
	if (!text) {
		return false;
	}
	const char *s = text, *end = text + len;
	while (s < end && *s >= '0' && *s <= '9') {
		s++;
	}
	if (s == text || end - s < 2 || s[0] != ' ' || s[1] != '(') {
		return false;
	}
	s += 2;
	/* The fields after comm are numbers and letters, so the last ')' closes comm. */
	const char *rp = memrchr(s, ')', (size_t)(end - s));
	if (!rp) {
		return false;
	}
	s = rp + 1;
	if (s >= end || *s != ' ') {
		return false;
	}
	while (s < end && *s == ' ') {
		s++;
	}
	if (s >= end || !isalpha((unsigned char)*s) || (s + 1 < end && s[1] != ' ' && s[1] != '\n')) {
		return false;
	}
	out->state = *s++;
	/* Some fields (tty_nr, nice, priority) may be negative: not numbers here, and skipped. */
	for (unsigned i = PROC_STAT_STATE + 1; i <= upto && i < PROC_STAT_FIELDS; i++) {
		while (s < end && *s == ' ') {
			s++;
		}
		const char *tok = s;
		uint64_t v = 0;
		bool num = take_dec(&s, end, &v);
		for (; s < end && *s != ' ' && *s != '\n'; s++) {
			num = false;
		}
		if (s == tok) {
			break;
		}
		if (num) {
			out->field[i] = v;
			out->have |= 1u << i;
		}
	}
	return true;
}

char proc_parse_stat_state(const char *text, size_t len)
{
	struct proc_stat st;
	return proc_parse_stat(text, len, PROC_STAT_STATE, &st) ? st.state : 0;
}

unsigned proc_parse_stat_resources(const char *text, size_t len, struct proc_resources *out)
{
	struct proc_stat st;
	if (!proc_parse_stat(text, len, PROC_STAT_RSS, &st)) {
		return 0;
	}
	unsigned known = 0;
	if (proc_stat_has(&st, PROC_STAT_UTIME) && proc_stat_has(&st, PROC_STAT_STIME)) {
		out->utime = st.field[PROC_STAT_UTIME];
		out->stime = st.field[PROC_STAT_STIME];
		known |= PROC_RES_CPU;
	}
	if (proc_stat_has(&st, PROC_STAT_THREADS)) {
		out->threads = st.field[PROC_STAT_THREADS];
		known |= PROC_RES_THREADS;
	}
	if (proc_stat_has(&st, PROC_STAT_RSS)) {
		out->rss = st.field[PROC_STAT_RSS];
		known |= PROC_RES_RSS;
	}
	return known;
}

unsigned proc_parse_status_ctxsw(const char *text, size_t len, uint64_t *sum)
{
	uint64_t v, nv;
	if (!text || !field_value(text, len, "voluntary_ctxt_switches", &v) ||
	    !field_value(text, len, "nonvoluntary_ctxt_switches", &nv)) {
		return 0;
	}
	*sum = v + nv;
	return PROC_RES_CTXSW;
}

unsigned proc_parse_io(const char *text, size_t len, uint64_t *read_bytes, uint64_t *write_bytes)
{
	if (!text || !field_value(text, len, "read_bytes", read_bytes) ||
	    !field_value(text, len, "write_bytes", write_bytes)) {
		return 0;
	}
	return PROC_RES_IO;
}

static bool take_perms(const char **s, const char *end, uint8_t *perms)
{
	static const char yes[4] = { 'r', 'w', 'x', 'p' };
	static const char no[4] = { '-', '-', '-', 's' };
	static const uint8_t bit[4] = { SPY_MAP_R, SPY_MAP_W, SPY_MAP_X, SPY_MAP_P };
	if (end - *s < 4) {
		return false;
	}
	*perms = 0;
	for (int i = 0; i < 4; i++) {
		char c = (*s)[i];
		if (c == yes[i]) {
			*perms |= bit[i];
		} else if (c != no[i]) {
			return false;
		}
	}
	*s += 4;
	return true;
}

/*
 * One line (without its newline) into m; *path and *pathlen locate the path inside the line.
 * Returns NULL on success or what is wrong with the line.
 */
static const char *parse_maps_line(const char *s, const char *end, struct spy_map *m,
				   const char **path, size_t *pathlen)
{
	uint64_t lo, hi, off, major, minor, inode;
	uint8_t perms;
	static const char deleted[] = " (deleted)";
	const size_t ndeleted = sizeof(deleted) - 1;

	if (s == end) {
		return "empty line";
	}
	if (!take_hex(&s, end, 16, &lo) || !take_char(&s, end, '-') ||
	    !take_hex(&s, end, 16, &hi)) {
		return "bad address range";
	}
	if (lo >= hi) {
		return "empty or inverted address range";
	}
	if (!take_blanks(&s, end) || !take_perms(&s, end, &perms)) {
		return "bad permissions";
	}
	if (!take_blanks(&s, end) || !take_hex(&s, end, 16, &off)) {
		return "bad offset";
	}
	if (!take_blanks(&s, end) || !take_hex(&s, end, 8, &major) ||
	    !take_char(&s, end, ':') || !take_hex(&s, end, 8, &minor)) {
		return "bad device";
	}
	if (!take_blanks(&s, end) || !take_dec(&s, end, &inode)) {
		return "bad inode";
	}
	/*
	 * Everything after the padding is the path, spaces and all. A path
	 * that itself begins with blanks loses them; the kernel's padding makes
	 * that ambiguous anyway.
	 */
	if (s < end && !take_blanks(&s, end)) {
		return "junk after inode";
	}
	if (memchr(s, '\0', (size_t)(end - s))) {
		return "NUL byte in path";
	}
	size_t n = (size_t)(end - s);
	if (n >= ndeleted && !memcmp(end - ndeleted, deleted, ndeleted)) {
		n -= ndeleted;
	}
	m->lo = lo;
	m->hi = hi;
	m->offset = off;
	m->perms = perms;
	m->dev = makedev((unsigned)major, (unsigned)minor);
	m->inode = inode;
	*path = s;
	*pathlen = n;
	return NULL;
}

static int map_cmp(const void *a, const void *b)
{
	const struct spy_map *x = a, *y = b;
	if (x->lo != y->lo) {
		return x->lo < y->lo ? -1 : 1;
	}
	if (x->hi != y->hi) {
		return x->hi < y->hi ? -1 : 1;
	}
	return 0;
}

int proc_parse_maps(const char *text, size_t len, struct spy_map **maps_out, size_t *n_out,
		    char **paths_out, struct spy_err *err)
{
	*maps_out = NULL;
	*n_out = 0;
	*paths_out = NULL;

	if (len > SPY_MAX_PROCFILE) {
		return spy_err_set(err, SPY_EBOUND, "maps text of %zu bytes exceeds the %u-byte bound",
				   len, SPY_MAX_PROCFILE);
	}
	const char *end = text + len;
	size_t nlines = 0;
	for (const char *s = text; s < end; nlines++) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		s = nl ? nl + 1 : end;
	}
	if (nlines > SPY_MAX_MAPS) {
		return spy_err_set(err, SPY_EBOUND, "%zu mappings exceed the bound of %d", nlines,
				   SPY_MAX_MAPS);
	}

	struct spy_map *maps = spy_xcalloc(nlines, sizeof(*maps));
	/*
	 * Each path plus its NUL fits in its line plus that line's newline, so
	 * len + 1 bytes hold them all.
	 */
	char *paths = spy_xmalloc(len + 1);
	size_t used = 0, n = 0;
	bool sorted = true;

	const char *s = text;
	for (size_t lineno = 1; s < end; lineno++) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *eol = nl ? nl : end;
		const char *path;
		size_t pathlen;
		const char *why = parse_maps_line(s, eol, &maps[n], &path, &pathlen);
		if (why) {
			free(maps);
			free(paths);
			return spy_err_set(err, SPY_EFORMAT, "malformed maps line %zu: %s", lineno, why);
		}
		if (pathlen == 0) {
			maps[n].path = "";
		} else {
			memcpy(paths + used, path, pathlen);
			paths[used + pathlen] = '\0';
			maps[n].path = paths + used;
			used += pathlen + 1;
		}
		if (n > 0 && map_cmp(&maps[n - 1], &maps[n]) > 0) {
			sorted = false;
		}
		n++;
		s = nl ? nl + 1 : end;
	}
	if (!sorted) {
		qsort(maps, n, sizeof(*maps), map_cmp);
	}
	/*
	 * Lookups binary-search these, which needs disjoint ranges. The kernel
	 * never overlaps them, but a file read in several chunks while the
	 * target maps and unmaps can; keep the first of an overlapping pair.
	 */
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (out > 0 && maps[i].lo < maps[out - 1].hi) {
			spy_log(SPY_LOG_TRACE, "maps: dropping %llx-%llx, it overlaps %llx-%llx",
				(unsigned long long)maps[i].lo, (unsigned long long)maps[i].hi,
				(unsigned long long)maps[out - 1].lo,
				(unsigned long long)maps[out - 1].hi);
			continue;
		}
		maps[out++] = maps[i];
	}
	*maps_out = maps;
	*n_out = out;
	*paths_out = paths;
	return (int)out;
}

/* ---- threads ---- */

static pid_t parse_tid(const char *name)
{
	long v = 0;
	if (!*name) {
		return 0;
	}
	for (const char *s = name; *s; s++) {
		if (*s < '0' || *s > '9' || v > (INT_MAX - 9) / 10) {
			return 0;
		}
		v = v * 10 + (*s - '0');
	}
	return (pid_t)v;
}

static int tid_cmp(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * One pass of getdents64 over the open task/ directory into p->tids. Returns
 * the count, or a negative code; *truncated is set when SPY_MAX_THREADS cut
 * the list.
 */
static ssize_t read_tids(struct proc *p, int fd, bool *truncated)
{
	/*
	 * getdents64 into a stack buffer rather than opendir(): this runs at
	 * every pause, and opendir mallocs its buffer each time.
	 */
	_Alignas(8) char buf[8192];
	const size_t name_off = offsetof(struct dirent64, d_name);
	const size_t reclen_off = offsetof(struct dirent64, d_reclen);
	size_t n = 0;

	*truncated = false;
	for (;;) {
		ssize_t got = getdents64(fd, buf, sizeof(buf));
		if (got < 0) {
			if (errno == EINTR) {
				continue;
			}
			return procfs_errno_code(errno);
		}
		if (got == 0) {
			break;
		}
		size_t off = 0;
		while (off + name_off < (size_t)got) {
			unsigned short reclen;
			memcpy(&reclen, buf + off + reclen_off, sizeof(reclen));
			if (reclen <= name_off || off + reclen > (size_t)got) {
				break;
			}
			/* The kernel NUL-terminates d_name inside the record. */
			pid_t tid = parse_tid(buf + off + name_off);
			off += reclen;
			if (tid <= 0) {
				continue;
			}
			if (n == SPY_MAX_THREADS) {
				*truncated = true;
				continue;
			}
			SPY_GROW(p->tids, p->tids_alloc, n + 1);
			p->tids[n++] = tid;
		}
	}
	return (ssize_t)n;
}

int procfs_list_tids(struct proc *p, size_t *n_out)
{
	/* Passes over task/ when one comes out short (see below). */
	const int max_passes = 4;
	bool truncated = false;
	ssize_t n = 0;

	*n_out = 0;
	int fd = openat(p->dirfd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		return procfs_errno_code(errno);
	}
	for (int pass = 0; pass < max_passes; pass++) {
		if (pass > 0 && lseek(fd, 0, SEEK_SET) < 0) {
			break;
		}
		n = read_tids(p, fd, &truncated);
		if (n < 0) {
			close(fd);
			return (int)n;
		}
		/*
		 * The kernel's readdir of task/ walks the thread list and stops
		 * early, silently, when the thread it stands on is released
		 * under it, so one dying thread can hide every thread after it.
		 * The directory's link count is 2 + the number of threads: a
		 * listing shorter than that is read again.
		 */
		struct stat st;
		if (truncated || fstat(fd, &st) < 0 || st.st_nlink < 2 ||
		    (size_t)n >= (size_t)(st.st_nlink - 2)) {
			break;
		}
	}
	close(fd);
	if (truncated) {
		spy_log(SPY_LOG_DEBUG, "process %d has more than %d threads; looking at %d",
			(int)p->pid, SPY_MAX_THREADS, SPY_MAX_THREADS);
	}
	qsort(p->tids, (size_t)n, sizeof(*p->tids), tid_cmp);
	*n_out = (size_t)n;
	return 0;
}

int procfs_thread_state(int dirfd, pid_t tid, char *state)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "task/%d/stat", (int)tid);
	/* A prefix is enough: nothing after the state letter contains ')'. */
	ssize_t n = read_small(dirfd, path, buf, sizeof(buf));
	if (n < 0) {
		*state = 0;
		return (int)n;
	}
	*state = proc_parse_stat_state(buf, (size_t)n);
	return 0;
}

/*
 * The value of "Key:" (key given as "\nKey:") in the status file at path
 * under dirfd, read into buf (size bytes), its blanks skipped; NULL when
 * the file or the line is missing.
 */
static const char *status_field(int dirfd, const char *path, const char *key, char *buf, size_t size)
{
	ssize_t n = read_small(dirfd, path, buf, size - 1);
	if (n <= 0) {
		return NULL;
	}
	buf[n] = '\0';
	const char *s = strstr(buf, key);
	if (!s) {
		return NULL;
	}
	s += strlen(key);
	while (*s == ' ' || *s == '\t') {
		s++;
	}
	return s;
}

pid_t procfs_tracer_pid(int dirfd, pid_t tid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "task/%d/status", (int)tid);
	const char *s = status_field(dirfd, path, "\nTracerPid:", buf, sizeof(buf));
	if (!s) {
		return 0;
	}
	char *e;
	long v = strtol(s, &e, 10);
	return (e > s && v > 0 && v <= INT_MAX) ? (pid_t)v : 0;
}

int procfs_nspid(int dirfd, const char *name, pid_t *first, pid_t *last)
{
	char buf[4096];
	const char *s = status_field(dirfd, name, "\nNSpid:", buf, sizeof(buf));
	if (!s) {
		return 0;
	}
	/* One number a namespace, spy's procfs's first: 32 levels at most (the kernel's). */
	int k = 0;
	for (char *e; k < 33; s = e) {
		long v = strtol(s, &e, 10);
		if (e == s || v <= 0 || v > INT_MAX) {
			break;
		}
		*(k++ ? last : first) = (pid_t)v;
	}
	if (k == 1) {
		*last = *first;
	}
	return k;
}

static int read_thread(struct proc *p, struct proc_thread *t)
{
	char path[64], buf[64];
	int rc = procfs_thread_state(p->dirfd, t->tid, &t->state);
	if (rc < 0) {
		return rc;
	}
	snprintf(path, sizeof(path), "task/%d/comm", (int)t->tid);
	ssize_t n = read_small(p->dirfd, path, buf, sizeof(buf));
	if (n < 0) {
		/* It exited between the two reads; report it gone rather than nameless. */
		return (int)n;
	}
	size_t len = (size_t)n;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\0')) {
		len--;
	}
	if (len > sizeof(t->comm) - 1) {
		len = sizeof(t->comm) - 1;
	}
	memcpy(t->comm, buf, len);
	t->comm[len] = '\0';
	return 0;
}

int proc_list_threads(struct proc *p, struct spy_err *err)
{
	size_t n;
	int rc = procfs_list_tids(p, &n);
	if (rc == -SPY_EGONE) {
		return spy_err_set(err, SPY_EGONE, "process %d has exited", (int)p->pid);
	}
	if (rc < 0) {
		rc = spy_err_set(err, -rc, "cannot list the threads of process %d", (int)p->pid);
		if (rc == -SPY_EPERM) {
			spy_err_remedy(err, "%s", SAMPLER_REMEDY_PERM);
		}
		return rc;
	}
	SPY_GROW(p->threads, p->threads_alloc, n);
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		struct proc_thread *t = &p->threads[out];
		memset(t, 0, sizeof(*t));
		t->tid = p->tids[i];
		/* A thread that exits while we read is simply not listed. */
		if (read_thread(p, t) == 0) {
			out++;
		}
	}
	p->nthreads = out;
	if (out == 0) {
		return spy_err_set(err, SPY_EGONE, "process %d has exited", (int)p->pid);
	}
	return 0;
}

const struct proc_thread *proc_threads(const struct proc *p, size_t *n)
{
	*n = p->nthreads;
	return p->threads;
}
