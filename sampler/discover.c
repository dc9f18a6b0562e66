/*
 * Finding a host's Python processes (see discover.h for the cost model).
 *
 * A process is known by PID and start time, since PIDs are reused. The
 * directory entry's inode number, which readdir gives for nothing, says
 * whether /proc/PID is still the directory seen last time; only when it is
 * not is stat read again, because procfs may give the same process a new
 * inode after evicting the old one, so a new inode alone proves nothing.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/util.h"
#include "sampler/discover.h"
#include "sampler/internal.h"

/* pid_max's ceiling on 64-bit Linux: no /proc lists more. */
#define DISC_MAX_PIDS (1u << 22)
/* A process younger than this is examined again and again: entry points
 * (sh -c "exec python …", tini, dumb-init) exec within it. Not on every
 * scan: each look waits half the age of the last (0.25 s at least), so an
 * exec at age t is seen by 1.5 t, and a thousand young processes cost
 * about a dozen looks each, not sixty. */
#define DISC_YOUNG_S 30.0
#define DISC_YOUNG_STEP_S 0.25
/* Older non-candidates are examined again this often, for the rare late
 * exec (a supervisor replacing itself). */
#define DISC_RECHECK_S 60.0
/* Bytes of maps looked through for a libpython: a model server maps
 * thousands of files, and the interpreter's library comes early. */
#define DISC_MAPS_MAX (4u << 20)
#define DISC_ENVIRON_MAX (1u << 20)
#define DISC_CGROUP_MAX (64u << 10)

struct seen {
	pid_t pid;
	ino_t ino;
	uint64_t start; /* clock ticks after boot, from stat */
	double checked; /* uptime of the last examination */
	bool candidate;
	bool examined;
	/*
	 * The maps, the one costly read (a process with 20,000 mappings has a
	 * megabyte of them, 10-25 ms of kernel time), are read once per
	 * executable and mapped size: again only when the exe link or the
	 * size of the address space (stat's vsize) differs from what they were
	 * at the last read, as after an exec or a late dlopen of libpython.
	 */
	bool maps_read;
	bool maps_wait;     /* a read is due, and waits for the CPU budget */
	uint64_t exe_hash, vsize;           /* at this examination */
	uint64_t maps_exe_hash, maps_vsize; /* at the last maps read */
};

struct discover {
	int procfd;
	struct seen *known;
	size_t n_known, alloc_known;
	struct seen *next;
	size_t alloc_next;
	pid_t *born, *gone;
	size_t n_born, n_gone, alloc_born, alloc_gone;
	size_t budget;
	pid_t self;
	double hz;
	double uptime;       /* at the last scan */
	/* Thread CPU the scans may spend, per second, and what is left of it (ns; may go below 0). */
	double cpu_per_s, cpu_credit;
	uint64_t credit_at;  /* CLOCK_MONOTONIC of the last refill */
	uint64_t maps_reads;
	size_t maps_waiting;  /* processes whose maps read waits for credit, at the last scan */
};

struct discover *discover_new(const char *procdir)
{
	int fd = open(procdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		return NULL;
	}
	struct discover *d = spy_xcalloc(1, sizeof(*d));
	d->procfd = fd;
	d->budget = 256;
	d->cpu_per_s = 1e9;
	d->cpu_credit = 1e9;
	d->self = getpid();
	long hz = sysconf(_SC_CLK_TCK);
	d->hz = hz > 0 ? (double)hz : 100.0;
	return d;
}

void discover_free(struct discover *d)
{
	if (!d) {
		return;
	}
	close(d->procfd);
	free(d->known);
	free(d->next);
	free(d->born);
	free(d->gone);
	free(d);
}

void discover_set_budget(struct discover *d, size_t per_scan)
{
	d->budget = per_scan ? per_scan : 1;
}

void discover_set_cpu_budget(struct discover *d, double cpu_share)
{
	d->cpu_per_s = cpu_share > 0 ? cpu_share * 1e9 : 1e6;
	d->cpu_credit = d->cpu_per_s;
}

void discover_stats(const struct discover *d, uint64_t *maps_reads, size_t *maps_waiting)
{
	*maps_reads = d->maps_reads;
	*maps_waiting = d->maps_waiting;
}

int discover_age(const struct discover *d, pid_t pid, double *age_s)
{
	size_t lo = 0, hi = d->n_known;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->known[mid].pid < pid) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	if (lo == d->n_known || d->known[lo].pid != pid || !d->known[lo].examined) {
		return -1;
	}
	double age = d->uptime - (double)d->known[lo].start / d->hz;
	*age_s = age > 0 ? age : 0;
	return 0;
}

size_t discover_count(const struct discover *d)
{
	size_t n = 0;
	for (size_t i = 0; i < d->n_known; i++) {
		n += d->known[i].candidate;
	}
	return n;
}

static int cmp_seen(const void *a, const void *b)
{
	pid_t x = ((const struct seen *)a)->pid, y = ((const struct seen *)b)->pid;
	return (x > y) - (x < y);
}

/* A small file under /proc/PID (or the test's tree), whole up to max. */
static int read_pid_file(int procfd, pid_t pid, const char *name, size_t max, struct spy_buf *out)
{
	char path[64];
	snprintf(path, sizeof(path), "%d", (int)pid);
	int dirfd = openat(procfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		return procfs_errno_code(errno);
	}
	int rc = procfs_read_file(dirfd, name, max, out);
	close(dirfd);
	return rc;
}

/* Fields 22 and 23 (starttime, vsize) of a stat line, and whether it is a
 * kernel thread (flags, field 9, PF_KTHREAD) or a zombie: neither can be
 * Python. */
static bool parse_stat(const char *text, size_t len, uint64_t *start, uint64_t *vsize, bool *eligible)
{
	struct proc_stat st;
	if (!proc_parse_stat(text, len, PROC_STAT_VSIZE, &st) || !proc_stat_has(&st, PROC_STAT_FLAGS) ||
	    !proc_stat_has(&st, PROC_STAT_STARTTIME) || !proc_stat_has(&st, PROC_STAT_VSIZE)) {
		return false;
	}
	*start = st.field[PROC_STAT_STARTTIME];
	*vsize = st.field[PROC_STAT_VSIZE];
	*eligible = st.state != 'Z' && st.state != 'X' && !(st.field[PROC_STAT_FLAGS] & 0x00200000u);
	return true;
}

/* Whether a line of maps names libpython (spy_is_libpython): its path is
 * from the first '/', the address and device fields have none. */
static bool maps_line_libpython(const char *line)
{
	const char *path = strchr(line, '/');
	return path && strstr(path, "/libpython") && spy_is_libpython(path);
}

/* Whether some mapped file is libpython. Reads at most DISC_MAPS_MAX
 * bytes, in pieces, whole lines at a time, stopping at the first hit. */
static bool maps_libpython(int procfd, pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "%d/maps", (int)pid);
	int fd = openat(procfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		return false;
	}
	char buf[64 * 1024];
	size_t have = 0, total = 0;
	bool hit = false;
	while (!hit && total < DISC_MAPS_MAX) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0) {
			break;
		}
		total += (size_t)n;
		have += (size_t)n;
		char *line = buf, *end = buf + have, *nl;
		while (!hit && (nl = memchr(line, '\n', (size_t)(end - line)))) {
			*nl = 0;
			hit = maps_line_libpython(line);
			line = nl + 1;
		}
		/* Keep a line cut between two reads; one longer than the buffer names no library. */
		have = (size_t)(end - line) < sizeof(buf) - 1 ? (size_t)(end - line) : 0;
		memmove(buf, line, have);
	}
	if (!hit && have) {
		buf[have] = 0;
		hit = maps_line_libpython(buf);
	}
	close(fd);
	return hit;
}

/* Whether pid's executable is named python*; *hash: its exe link's, 0 if unreadable. */
static bool exe_is_python(int procfd, pid_t pid, uint64_t *hash)
{
	char path[64], target[4096];
	snprintf(path, sizeof(path), "%d/exe", (int)pid);
	ssize_t n = readlinkat(procfd, path, target, sizeof(target) - 1);
	*hash = 0;
	if (n <= 0) {
		return false;
	}
	target[n] = 0;
	*hash = spy_hash_bytes(target, (size_t)n);
	/* A replaced executable reads "… (deleted)": still its name. */
	return !strncmp(spy_basename(target), "python", 6);
}

/*
 * Examines s->pid: its start time, and whether its executable's name makes
 * it a candidate; when it does not, whether its maps are to be read
 * (s->maps_wait: read by maps_look, under the CPU budget). false when the
 * process is gone (or unreadable) by now.
 */
static bool examine(struct discover *d, struct seen *s, double now)
{
	struct spy_buf b = SPY_BUF_INIT;
	bool eligible = false, ok = read_pid_file(d->procfd, s->pid, "stat", 4096, &b) >= 0 &&
				    parse_stat(b.buf, b.len, &s->start, &s->vsize, &eligible);
	spy_buf_release(&b);
	if (!ok) {
		return false;
	}
	s->checked = now;
	s->examined = true;
	s->candidate = eligible && s->pid != d->self && exe_is_python(d->procfd, s->pid, &s->exe_hash);
	s->maps_wait = eligible && s->pid != d->self && !s->candidate &&
		       (!s->maps_read || s->exe_hash != s->maps_exe_hash || s->vsize != s->maps_vsize);
	return true;
}

/* The maps read examine asked for, if the budget has CPU left: whether it made s a candidate. */
static bool maps_look(struct discover *d, struct seen *s)
{
	if (!s->maps_wait || s->candidate) {
		return false;
	}
	if (d->cpu_credit <= 0) {
		d->maps_waiting++;
		return false;
	}
	s->maps_wait = false;
	s->maps_read = true;
	s->maps_exe_hash = s->exe_hash;
	s->maps_vsize = s->vsize;
	d->maps_reads++;
	s->candidate = maps_libpython(d->procfd, s->pid);
	return s->candidate;
}

static void note(pid_t **v, size_t *n, size_t *alloc, pid_t pid)
{
	SPY_GROW(*v, *alloc, *n + 1);
	(*v)[(*n)++] = pid;
}

/* The entries of /proc that are processes, sorted by PID, into d->next. */
static int list_pids(struct discover *d, size_t *n_out)
{
	int fd = openat(d->procfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	if (!dir) {
		if (fd >= 0) {
			close(fd);
		}
		return procfs_errno_code(errno);
	}
	size_t n = 0;
	struct dirent *e;
	while (n < DISC_MAX_PIDS && (e = readdir(dir))) {
		char *end;
		if (!isdigit((unsigned char)e->d_name[0])) {
			continue;
		}
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0 || pid > (long)DISC_MAX_PIDS) {
			continue;
		}
		SPY_GROW(d->next, d->alloc_next, n + 1);
		d->next[n] = (struct seen){ .pid = (pid_t)pid, .ino = e->d_ino };
		n++;
	}
	closedir(dir);
	qsort(d->next, n, sizeof(*d->next), cmp_seen);
	*n_out = n;
	return 0;
}

static double read_uptime(int procfd)
{
	int fd = openat(procfd, "uptime", O_RDONLY | O_CLOEXEC);
	char buf[64] = "";
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = 0;
		close(fd);
	}
	return strtod(buf, NULL);
}

/*
 * The maps reads due, while the credit lasts: the young processes' first,
 * so that a new embedding of libpython is not kept waiting behind old
 * hoarders of mappings, then the others, each in PID order. The scan's
 * CPU so far is charged before each read: one read past the credit at
 * most. cpu0: the thread's CPU at the scan's start.
 */
static void maps_looks(struct discover *d, size_t n, double now, uint64_t cpu0)
{
	for (int pass = 0; pass < 2; pass++) {
		for (size_t j = 0; j < n; j++) {
			struct seen *s = &d->next[j];
			bool young = now - (double)s->start / d->hz < DISC_YOUNG_S;
			if (!s->maps_wait || s->candidate || young != (pass == 0)) {
				continue;
			}
			uint64_t c = spy_thread_cpu_ns();
			d->cpu_credit -= (double)(c - cpu0);
			cpu0 = c;
			if (maps_look(d, s)) {
				note(&d->born, &d->n_born, &d->alloc_born, s->pid);
			}
		}
	}
	d->cpu_credit -= (double)(spy_thread_cpu_ns() - cpu0);
}

/* Whether s, known from an earlier scan, is due another examination. */
static bool due(const struct discover *d, const struct seen *s, double now)
{
	if (!s->examined) {
		return true;
	}
	if (s->candidate) {
		return false; /* found: the one attached watches it from now on */
	}
	double born = (double)s->start / d->hz, age = now - born, then = s->checked - born;
	double step = then / 2 > DISC_YOUNG_STEP_S ? then / 2 : DISC_YOUNG_STEP_S;
	return (age < DISC_YOUNG_S && now - s->checked >= step) || now - s->checked >= DISC_RECHECK_S;
}

/* The scans' CPU credit, refilled at cpu_per_s, at most a second's worth kept. */
static void refill(struct discover *d)
{
	uint64_t t = spy_now_ns();
	if (d->credit_at) {
		d->cpu_credit += (double)(t - d->credit_at) / 1e9 * d->cpu_per_s;
	}
	d->credit_at = t;
	d->cpu_credit = d->cpu_credit > d->cpu_per_s ? d->cpu_per_s : d->cpu_credit;
}

int discover_scan(struct discover *d, const pid_t **born, size_t *n_born,
		  const pid_t **gone, size_t *n_gone)
{
	d->n_born = d->n_gone = 0;
	d->maps_waiting = 0;
	refill(d);
	uint64_t cpu0 = spy_thread_cpu_ns();
	size_t n = 0;
	int rc = list_pids(d, &n);
	if (rc < 0) {
		return rc;
	}
	double now = read_uptime(d->procfd);
	d->uptime = now;
	size_t budget = d->budget;
	size_t i = 0; /* in d->known */
	for (size_t j = 0; j < n; j++) {
		struct seen *s = &d->next[j];
		while (i < d->n_known && d->known[i].pid < s->pid) {
			if (d->known[i].candidate) {
				note(&d->gone, &d->n_gone, &d->alloc_gone, d->known[i].pid);
			}
			i++;
		}
		const struct seen *old = i < d->n_known && d->known[i].pid == s->pid ? &d->known[i++] : NULL;
		if (old) {
			ino_t ino = s->ino;
			*s = *old;
			if (old->ino != ino) {
				/* Same directory name, another inode: the same process
				 * only if its start time says so. */
				uint64_t start = 0;
				bool eligible;
				struct spy_buf b = SPY_BUF_INIT;
				uint64_t vsize;
				bool same = read_pid_file(d->procfd, s->pid, "stat", 4096, &b) >= 0 &&
					    parse_stat(b.buf, b.len, &start, &vsize, &eligible) &&
					    start == old->start;
				spy_buf_release(&b);
				s->ino = ino;
				if (!same) {
					if (old->candidate) {
						note(&d->gone, &d->n_gone, &d->alloc_gone, s->pid);
					}
					*s = (struct seen){ .pid = old->pid, .ino = ino };
				}
			}
		}
		bool was = s->candidate;
		if (due(d, s, now) && budget > 0) {
			budget--;
			if (!examine(d, s, now)) {
				continue;
			}
		}
		if (s->candidate && !was) {
			note(&d->born, &d->n_born, &d->alloc_born, s->pid);
		}
	}
	maps_looks(d, n, now, cpu0);
	for (; i < d->n_known; i++) {
		if (d->known[i].candidate) {
			note(&d->gone, &d->n_gone, &d->alloc_gone, d->known[i].pid);
		}
	}
	/* next becomes known; the old array is next's storage next time. */
	struct seen *t = d->known;
	size_t ta = d->alloc_known;
	d->known = d->next;
	d->alloc_known = d->alloc_next;
	d->n_known = n;
	d->next = t;
	d->alloc_next = ta;
	*born = d->born;
	*n_born = d->n_born;
	*gone = d->gone;
	*n_gone = d->n_gone;
	return (int)(n > (size_t)INT32_MAX ? INT32_MAX : n);
}

const char *proc_environ_get(const char *env, size_t len, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);
	const char *p = env, *end = env + len;
	while (p < end) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		const char *e = z ? z : end;
		if ((size_t)(e - p) > nl && !memcmp(p, name, nl) && p[nl] == '=') {
			*vlen = (size_t)(e - p) - nl - 1;
			return p + nl + 1;
		}
		p = e + 1;
	}
	return NULL;
}

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!isxdigit((unsigned char)s[i])) {
			return false;
		}
	}
	return true;
}

/* A container ID in one path component: 64 hex digits, bare (cgroupfs
 * drivers: /docker/ID, /kubepods/…/ID) or as a systemd scope
 * (docker-ID.scope, cri-containerd-ID.scope, crio-ID.scope,
 * libpod-ID.scope). */
static bool component_container(const char *c, size_t n, char out[65])
{
	static const char *const prefixes[] = { "docker-", "cri-containerd-", "crio-", "libpod-", "containerd-" };
	if (n > 6 && !memcmp(c + n - 6, ".scope", 6)) {
		n -= 6;
		for (size_t i = 0; i < SPY_ARRAY_SIZE(prefixes); i++) {
			size_t pl = strlen(prefixes[i]);
			if (n > pl && !memcmp(c, prefixes[i], pl)) {
				c += pl;
				n -= pl;
				break;
			}
		}
	}
	if (n != 64 || !all_hex(c, 64)) {
		return false;
	}
	memcpy(out, c, 64);
	out[64] = 0;
	return true;
}

/* A pod UID in one component of a kubepods path: podUID (cgroupfs) or
 * kubepods-QOS-podUID.slice with the UID's dashes as underscores (systemd). */
static bool component_pod(const char *c, size_t n, char out[37])
{
	const char *p = NULL;
	for (size_t i = 0; i + 3 <= n; i++) {
		if (!memcmp(c + i, "pod", 3) && (i == 0 || c[i - 1] == '-')) {
			p = c + i + 3;
		}
	}
	if (!p) {
		return false;
	}
	size_t m = (size_t)(c + n - p);
	if (m > 6 && !memcmp(p + m - 6, ".slice", 6)) {
		m -= 6;
	}
	if (m != 36) {
		return false;
	}
	/* Into a copy: out is left empty unless the whole UID is good. */
	char uid[37];
	for (size_t i = 0; i < 36; i++) {
		char ch = p[i] == '_' ? '-' : p[i];
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? ch != '-' : !isxdigit((unsigned char)ch)) {
			return false;
		}
		uid[i] = (char)tolower((unsigned char)ch);
	}
	uid[36] = 0;
	memcpy(out, uid, sizeof(uid));
	return true;
}

/*
 * Whether component c[0..n) is a root under which only a container runtime
 * (or systemd for it) makes cgroups: never a subtree delegated to a user
 * (user@UID.service, a service with Delegate=yes), where the user names
 * the cgroups and so could claim any container's ID. *kube: a Kubernetes
 * root, under which pods are found.
 */
static bool runtime_root(const char *c, size_t n, bool *kube)
{
	static const char *const roots[] = { "docker", "kubepods", "kubepods.slice", "system.slice", "machine.slice" };
	for (size_t i = 0; i < SPY_ARRAY_SIZE(roots); i++) {
		if (strlen(roots[i]) == n && !memcmp(c, roots[i], n)) {
			*kube = i == 1 || i == 2;
			return true;
		}
	}
	return false;
}

void proc_parse_cgroup(const char *text, size_t len, char container_id[65], char pod_uid[37])
{
	container_id[0] = pod_uid[0] = 0;
	const char *line = text, *end = text + len;
	const char *le = NULL;
	/*
	 * The unified hierarchy's line only ("0::PATH"): a v1 hierarchy, a
	 * named one above all, can be mounted and filled by whoever holds it.
	 */
	while (line < end) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		le = nl ? nl : end;
		if (le - line >= 4 && !memcmp(line, "0::/", 4)) {
			break;
		}
		line = nl ? nl + 1 : end;
	}
	if (line < end) {
		const char *c = line + 4;
		/* Outside spy's cgroup namespace the path climbs first: "/../../kubepods.slice/...". */
		while (le - c >= 3 && !memcmp(c, "../", 3)) {
			c += 3;
		}
		const char *slash = memchr(c, '/', (size_t)(le - c));
		bool kube = false;
		if (!slash || !runtime_root(c, (size_t)(slash - c), &kube)) {
			return;
		}
		/*
		 * The outermost container wins: below it the container's own root
		 * may make cgroups (its cgroup namespace is delegated to it), and
		 * name one like another container's scope; podman nests a
		 * container's own cgroup below its scope (…/libpod-ID.scope/container).
		 */
		for (c = slash + 1; c < le;) {
			const char *ce = memchr(c, '/', (size_t)(le - c));
			ce = ce ? ce : le;
			if (kube && !pod_uid[0] && !container_id[0]) {
				component_pod(c, (size_t)(ce - c), pod_uid);
			}
			if (component_container(c, (size_t)(ce - c), container_id)) {
				return;
			}
			c = ce + 1;
		}
	}
}

static int hexval(char c)
{
	return isdigit((unsigned char)c) ? c - '0' : isxdigit((unsigned char)c) ? (tolower((unsigned char)c) - 'a' + 10) : -1;
}

/* Percent-decodes [s, s+n) into out (size bytes), trimming blanks; false if
 * it does not fit, is empty, or decodes to a control byte. */
static bool decode_attr(const char *s, size_t n, char *out, size_t size, bool is_name)
{
	while (n && (*s == ' ' || *s == '\t')) {
		s++;
		n--;
	}
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) {
		n--;
	}
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int ch = (unsigned char)s[i];
		if (ch == '%' && !is_name) {
			int h = i + 2 < n ? hexval(s[i + 1]) : -1, l = h >= 0 ? hexval(s[i + 2]) : -1;
			if (l < 0) {
				return false;
			}
			ch = h * 16 + l;
			i += 2;
		}
		if (ch < 0x20 || ch == 0x7f || o + 1 >= size) {
			return false;
		}
		if (is_name) {
			/* Label names: [a-zA-Z0-9_], dots as underscores. */
			if (ch == '.') {
				ch = '_';
			} else if (!isalnum(ch) && ch != '_') {
				return false;
			}
		}
		out[o++] = (char)ch;
	}
	out[o] = 0;
	return o > 0;
}

size_t otel_k8s_labels(const char *attrs, struct about_label *out, size_t max)
{
	size_t n = 0;
	const char *p = attrs;
	while (*p && n < max) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		if (eq) {
			size_t kl = (size_t)(eq - p);
			const char *k = p;
			while (kl && (*k == ' ' || *k == '\t')) {
				k++;
				kl--;
			}
			if (kl > 4 && !memcmp(k, "k8s.", 4) &&
			    decode_attr(k, kl, out[n].name, sizeof(out[n].name), true) &&
			    decode_attr(eq + 1, len - kl - (size_t)(k - p) - 1, out[n].value, sizeof(out[n].value), false)) {
				n++;
			}
		}
		p += len;
		if (*p == ',') {
			p++;
		}
	}
	return n;
}

/* Copies a variable's value into out whole, or leaves it empty: a value cut
 * short would make a label that is not the process's. */
static void copy_whole(const char *v, size_t vlen, char *out, size_t size)
{
	out[0] = 0;
	if (v && vlen < size && !memchr(v, 0, vlen)) {
		memcpy(out, v, vlen);
		out[vlen] = 0;
	}
}

int proc_read_about(const struct discover *d, pid_t pid, struct proc_about *out)
{
	memset(out, 0, sizeof(*out));
	struct spy_buf b = SPY_BUF_INIT;
	int rc = read_pid_file(d->procfd, pid, "cgroup", DISC_CGROUP_MAX, &b);
	if (rc < 0) {
		spy_buf_release(&b);
		return rc;
	}
	proc_parse_cgroup(b.buf, b.len, out->container_id, out->pod_uid);
	/* Unreadable (another user's, without root) or oversized: no names. */
	if (read_pid_file(d->procfd, pid, "environ", DISC_ENVIRON_MAX, &b) >= 0) {
		size_t vl = 0;
		const char *v = proc_environ_get(b.buf, b.len, "OTEL_SERVICE_NAME", &vl);
		if (!v || !vl) {
			v = proc_environ_get(b.buf, b.len, "PYROSCOPE_APPLICATION_NAME", &vl);
		}
		copy_whole(v, vl, out->service, sizeof(out->service));
		v = proc_environ_get(b.buf, b.len, "OTEL_RESOURCE_ATTRIBUTES", &vl);
		copy_whole(v, vl, out->resource_attrs, sizeof(out->resource_attrs));
	}
	spy_buf_release(&b);
	return 0;
}

int proc_read_exe(const struct discover *d, pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "%d/exe", (int)pid);
	ssize_t n = size > 1 ? readlinkat(d->procfd, path, buf, size - 1) : -1;
	if (n < 0) {
		return procfs_errno_code(errno);
	}
	buf[n] = 0;
	return 0;
}

int proc_read_owner(const struct discover *d, pid_t pid, uid_t *uid, char *cmdline, size_t size)
{
	struct spy_buf b = SPY_BUF_INIT;
	int rc = read_pid_file(d->procfd, pid, "status", 64u << 10, &b);
	const char *u = rc >= 0 ? memmem(b.buf, b.len, "\nUid:", 5) : NULL;
	unsigned long v = 0;
	if (rc >= 0 && (!u || sscanf(u + 5, "%lu", &v) != 1)) {
		rc = -SPY_EIO;
	}
	*uid = (uid_t)v;
	if (rc >= 0) {
		rc = read_pid_file(d->procfd, pid, "cmdline", size ? size - 1 : 0, &b);
		/* A longer command line is looked at cut: its start names the program. */
		rc = rc == -SPY_EBOUND ? 0 : rc;
	}
	size_t n = rc >= 0 ? (b.len < size ? b.len : size - 1) : 0;
	for (size_t i = 0; i < n; i++) {
		cmdline[i] = b.buf[i] ? b.buf[i] : ' ';
	}
	while (n > 0 && cmdline[n - 1] == ' ') {
		n--;
	}
	if (size) {
		cmdline[n] = '\0';
	}
	spy_buf_release(&b);
	return rc < 0 ? rc : 0;
}
