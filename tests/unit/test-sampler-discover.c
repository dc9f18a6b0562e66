/*
 * Unit tests for sampler/discover.c: the cgroup, environment and
 * OTEL_RESOURCE_ATTRIBUTES parsers on hand-written input; discovery on a
 * directory laid out like /proc (PIDs born, reused, exec'd, gone, and a
 * budget of examinations); then on this machine's /proc with a child of
 * the test's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/util.h"
#include "sampler/discover.h"
#include "tests/lib/check.h"

#define ID64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void cgroup_is(const char *text, const char *cid, const char *pod)
{
	char c[65], p[37];
	proc_parse_cgroup(text, strlen(text), c, p);
	CHECK_STR(c, cid);
	CHECK_STR(p, pod);
}

static void test_cgroup(void)
{
	cgroup_is("0::/system.slice/docker-" ID64 ".scope\n", ID64, "");
	/* v1 hierarchies are not read: a named one is anyone's who mounts it. */
	cgroup_is("12:memory:/docker/" ID64 "\n11:cpu:/docker/" ID64 "\n", "", "");
	cgroup_is("12:memory:/docker/" ID64 "\n0::/docker/" ID64 "\n", ID64, "");
	/* Seen from another cgroup namespace (a DaemonSet's agent): the path climbs first. */
	cgroup_is("0::/../../kubepods.slice/kubepods-besteffort.slice/"
		  "kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-" ID64 ".scope\n",
		  ID64, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	/*
	 * Claims: a subtree delegated to a user, or a test's slice, names a
	 * scope like a container's; a container's own root names one below its
	 * scope (the outermost wins); a v1 named hierarchy; a pod outside kubepods.
	 */
	cgroup_is("0::/user.slice/user-1000.slice/user@1000.service/docker-" ID64 ".scope\n", "", "");
	cgroup_is("0::/spy-test.slice/docker-" ID64 ".scope\n", "", "");
	cgroup_is("0::/system.slice/docker-" ID64 ".scope/docker-"
		  "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210.scope\n", ID64, "");
	cgroup_is("1:name=evil:/docker/" ID64 "\n0::/user.slice\n", "", "");
	cgroup_is("0::/system.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/docker-" ID64 ".scope\n",
		  ID64, "");
	/* A pod component that goes bad late leaves no half of itself behind. */
	cgroup_is("0::/kubepods/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f90Z/" ID64 "\n", ID64, "");
	cgroup_is("0::/kubepods.slice/kubepods-burstable.slice/"
		  "kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
		  "cri-containerd-" ID64 ".scope\n",
		  ID64, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	cgroup_is("0::/kubepods/besteffort/pod1B2C3D4E-5F60-7182-93A4-B5C6D7E8F901/" ID64 "\n",
		  ID64, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	cgroup_is("0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-" ID64 ".scope",
		  ID64, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	cgroup_is("0::/machine.slice/libpod-" ID64 ".scope/container\n", ID64, "");
	/* Not containers: a user session, a short ID, a non-hex one, a pod
	 * component outside kubepods. */
	cgroup_is("0::/user.slice/user-0.slice/session-3.scope\n", "", "");
	cgroup_is("0::/system.slice/docker-0123abcd.scope\n", "", "");
	cgroup_is("0::/docker/" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg" "\n", "", "");
	cgroup_is("0::/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901\n", "", "");
	/* Hostile: no colons, empty, a line of slashes, no newline at the end. */
	cgroup_is("garbage", "", "");
	cgroup_is("", "", "");
	cgroup_is("0:://///////", "", "");
}

static void test_environ(void)
{
	static const char env[] = "PATH=/bin\0OTEL_SERVICE_NAME=checkout\0OTEL=x\0EMPTY=\0TAIL=cut";
	size_t vl = 0;
	const char *v = proc_environ_get(env, sizeof(env) - 1, "OTEL_SERVICE_NAME", &vl);
	CHECK(v && vl == 8 && !memcmp(v, "checkout", 8));
	CHECK(proc_environ_get(env, sizeof(env) - 1, "OTEL_SERVICE", &vl) == NULL);
	v = proc_environ_get(env, sizeof(env) - 1, "EMPTY", &vl);
	CHECK(v && vl == 0);
	v = proc_environ_get(env, sizeof(env) - 1, "TAIL", &vl);
	CHECK(v && vl == 3 && !memcmp(v, "cut", 3));
	CHECK(proc_environ_get(env, 0, "PATH", &vl) == NULL);
}

static void test_otel(void)
{
	struct about_label l[8];
	size_t n = otel_k8s_labels("service.name=x, k8s.pod.name=web-7f9%2Cb ,k8s.namespace.name=prod,"
				   "deployment.environment=p,k8s.node.name=",
				   l, 8);
	CHECK_INT(n, 2);
	CHECK_STR(l[0].name, "k8s_pod_name");
	CHECK_STR(l[0].value, "web-7f9,b");
	CHECK_STR(l[1].name, "k8s_namespace_name");
	CHECK_STR(l[1].value, "prod");
	/* Control bytes, bad escapes, names that make no label: skipped. */
	n = otel_k8s_labels("k8s.a=%0a,k8s.b=%zz,k8s.c d=1,k8s.=1,k8s.e=%4,k8s.f=ok", l, 8);
	CHECK_INT(n, 1);
	CHECK_STR(l[0].name, "k8s_f");
	CHECK_INT(otel_k8s_labels("k8s.a=1,k8s.b=2,k8s.c=3", l, 2), 2);
	CHECK_INT(otel_k8s_labels("", l, 8), 0);
	CHECK_INT(otel_k8s_labels(",,,=,k8s", l, 8), 0);
}

/* A directory laid out like /proc: uptime, and PID/{stat,exe,maps}. */
static char root[64];
/* The address space's size the fake stat lines give (field 23). */
static unsigned long fake_vsize = 1000;

static void put(const char *rel, const char *text)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(2);
	}
	fputs(text, f);
	fclose(f);
}

static void fake_pid(int pid, unsigned long start, const char *exe, const char *maps, char state)
{
	char rel[160], stat[256];
	snprintf(rel, sizeof(rel), "%s/%d", root, pid);
	if (mkdir(rel, 0700) && errno != EEXIST) {
		perror(rel);
		exit(2);
	}
	snprintf(stat, sizeof(stat),
		 "%d (a) b) %c 1 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 %lu %lu 100\n", pid, state, start,
		 fake_vsize);
	snprintf(rel, sizeof(rel), "%d/stat", pid);
	put(rel, stat);
	snprintf(rel, sizeof(rel), "%s/%d/exe", root, pid);
	unlink(rel);
	if (symlink(exe, rel)) {
		perror(rel);
		exit(2);
	}
	snprintf(rel, sizeof(rel), "%d/maps", pid);
	put(rel, maps);
}

static void remove_pid(int pid);

/* Replaces /proc/PID with a directory made while the old one still
 * exists, so that it has another inode, as procfs gives a new process. */
static void replace_pid(int pid, unsigned long start, const char *exe)
{
	char from[128], to[128];
	fake_pid(pid + 100000, start, exe, "", 'S');
	snprintf(from, sizeof(from), "%s/%d", root, pid + 100000);
	snprintf(to, sizeof(to), "%s/%d", root, pid);
	remove_pid(pid);
	if (rename(from, to)) {
		perror(to);
		exit(2);
	}
}

static void remove_pid(int pid)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/%d'", root, pid);
	if (system(cmd) != 0) {
		exit(2);
	}
}

static bool has(const pid_t *v, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++) {
		if (v[i] == pid) {
			return true;
		}
	}
	return false;
}

/* The maps reads, in the fake tree test_fake_proc made (old: an old process's start). */
static void fake_maps_reads(unsigned long old)
{
	struct discover *d;
	const pid_t *born, *gone;
	size_t nb, ng;
	/* The maps are read once per executable and mapped size: 102, old,
	 * comes to map a libpython under the same exe and size; it is not
	 * found at its recheck, and is at the one after its size changed. */
	fake_pid(102, old, "/usr/bin/bash", "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libc.so.6\n", 'S');
	d = discover_new(root);
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK(!has(born, nb, 102));
	uint64_t reads;
	size_t waits;
	discover_stats(d, &reads, &waits);
	fake_pid(102, old, "/usr/bin/bash", "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libpython3.12.so.1.0\n", 'S');
	put("uptime", "1130.00 50.00\n");
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK(!has(born, nb, 102));
	uint64_t reads2;
	discover_stats(d, &reads2, &waits);
	CHECK_INT(reads2, reads);
	fake_vsize = 2000;
	fake_pid(102, old, "/usr/bin/bash", "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libpython3.12.so.1.0\n", 'S');
	fake_vsize = 1000;
	put("uptime", "1200.00 50.00\n");
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK(has(born, nb, 102));
	discover_free(d);
	fake_pid(102, old, "/usr/bin/python3.11", "", 'S');
	put("uptime", "1000.00 50.00\n");

	/* No CPU credit for the scans: the maps wait (106, found by its libpython alone), the
	 * executables named python* do not; 106 is found once there is credit. */
	fake_pid(106, old, "/usr/local/bin/uwsgi", "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libpython3.12.so.1.0\n", 'S');
	d = discover_new(root);
	discover_set_cpu_budget(d, 1e-12);
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK(!has(born, nb, 106) && has(born, nb, 103));
	discover_stats(d, &reads, &waits);
	CHECK_INT(reads, 0);
	CHECK(waits >= 1);
	discover_set_cpu_budget(d, 1);
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK(has(born, nb, 106));
	discover_stats(d, &reads, &waits);
	CHECK(reads >= 1);
	discover_free(d);
	remove_pid(106);
}

static void test_fake_proc(void)
{
	snprintf(root, sizeof(root), "/tmp/spy-discover-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		exit(2);
	}
	long hz = sysconf(_SC_CLK_TCK);
	/* Uptime 1000 s; processes started at 10 s are old, at 990 s young. */
	put("uptime", "1000.00 50.00\n");
	unsigned long old = 10ul * (unsigned long)hz, young = 990ul * (unsigned long)hz;
	fake_pid(100, old, "/usr/bin/python3.11", "", 'S');
	fake_pid(101, old, "/usr/local/bin/uwsgi",
		 "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0\n", 'S');
	fake_pid(102, old, "/usr/bin/bash", "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libc.so.6\n", 'S');
	fake_pid(103, young, "/bin/sh", "", 'S');
	fake_pid(104, old, "/usr/bin/python3.13", "", 'Z');
	fake_pid(105, old, "/usr/bin/python3 (deleted)", "", 'R');
	put("self", "not a pid");

	struct discover *d = discover_new(root);
	CHECK(d != NULL);
	if (!d) {
		return;
	}
	const pid_t *born, *gone;
	size_t nb, ng;
	CHECK_INT(discover_scan(d, &born, &nb, &gone, &ng), 6);
	CHECK_INT(nb, 3);
	CHECK(has(born, nb, 100) && has(born, nb, 101) && has(born, nb, 105));
	CHECK_INT(ng, 0);
	CHECK_INT(discover_count(d), 3);

	/* Nothing changed: nothing new, nothing gone. */
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK_INT(nb, 0);
	CHECK_INT(ng, 0);
	double age = -1;
	CHECK_INT(discover_age(d, 103, &age), 0);
	CHECK(age > 9.99 && age < 10.01);
	CHECK(discover_age(d, 99, &age) < 0);

	/* A young process is looked at again after half its age at the last look: 103, 10 s old
	 * then, not at 1004 s, at 1005. */
	fake_pid(103, young, "/usr/bin/python3.14", "", 'S');
	put("uptime", "1004.00 50.00\n");
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK_INT(nb, 0);
	put("uptime", "1005.00 50.00\n");

	/* 103 (young) exec'd python: the same PID and start, found anew.
	 * 100 exits; 101's PID is reused by a non-Python process (another
	 * start time, and the fake tree gives it another inode). */
	remove_pid(100);
	replace_pid(101, old + 5, "/usr/bin/bash");
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK_INT(nb, 1);
	CHECK(has(born, nb, 103));
	CHECK_INT(ng, 2);
	CHECK(has(gone, ng, 100) && has(gone, ng, 101));
	CHECK_INT(discover_count(d), 2);

	/* An old non-candidate that execs python is found at the recheck,
	 * not before: 102 stays unnoticed while its last look is recent. */
	fake_pid(102, old, "/usr/bin/python3.11", "", 'S');
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK_INT(nb, 0);
	put("uptime", "1061.00 50.00\n");
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK_INT(nb, 1);
	CHECK(has(born, nb, 102));
	discover_free(d);

	fake_maps_reads(old);

	/* A budget of 2 examinations a scan: 4 candidates take 2 scans, and
	 * none is reported twice. */
	d = discover_new(root);
	discover_set_budget(d, 2);
	size_t total = 0;
	for (int scan = 0; scan < 4; scan++) {
		discover_scan(d, &born, &nb, &gone, &ng);
		CHECK(nb <= 2);
		total += nb;
	}
	CHECK_INT(total, 3);
	discover_free(d);

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0) {
		CHECK(0);
	}
}

/* The libpython rule on maps (spy_is_libpython, whole lines): the
 * stable-ABI stub libpython3.so is no interpreter; a libpython named in a
 * last line without a newline, after 100 KiB of maps (so cut between two
 * reads), is found. */
static void test_maps_rule(void)
{
	snprintf(root, sizeof(root), "/tmp/spy-discover-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		exit(2);
	}
	put("uptime", "1000.00 50.00\n");
	unsigned long old = 10ul * (unsigned long)sysconf(_SC_CLK_TCK);
	fake_pid(200, old, "/usr/bin/gimp", "7f00-7f01 r-xp 0 fe:00 1 /usr/lib/libpython3.so\n", 'S');
	struct spy_buf m = SPY_BUF_INIT;
	while (m.len < 100 * 1024) {
		spy_buf_adds(&m, "7f00-7f01 r--p 0 fe:00 1 /usr/share/fonts/some-font-with-a-long-name.ttf\n");
	}
	spy_buf_adds(&m, "7f00-7f01 r-xp 0 fe:00 1 /opt/py/lib/libpython3.12.so.1.0");
	fake_pid(201, old, "/opt/app/server", m.buf, 'S');
	spy_buf_release(&m);

	struct discover *d = discover_new(root);
	CHECK(d != NULL);
	if (d) {
		const pid_t *born, *gone;
		size_t nb, ng;
		discover_scan(d, &born, &nb, &gone, &ng);
		CHECK_INT(nb, 1);
		CHECK(has(born, nb, 201));
		discover_free(d);
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0) {
		CHECK(0);
	}
}

/* On this machine's /proc: a child that execs a program named python* (a
 * copy of /bin/sleep) is found, then reported gone once reaped. */
static void test_live(void)
{
	char dir[] = "/tmp/spy-discover-live-XXXXXX", exe[64];
	if (!mkdtemp(dir)) {
		CHECK(0);
		return;
	}
	snprintf(exe, sizeof(exe), "%s/python-fake", dir);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "cp /bin/sleep '%s'", exe);
	CHECK_INT(system(cmd), 0);

	struct discover *d = discover_new("/proc");
	CHECK(d != NULL);
	const pid_t *born, *gone;
	size_t nb, ng;
	discover_set_budget(d, 1u << 20);
	CHECK(discover_scan(d, &born, &nb, &gone, &ng) > 0);

	pid_t child = fork();
	if (child == 0) {
		execl(exe, "python-fake", "30", (char *)NULL);
		_exit(127);
	}
	bool found = false;
	for (int i = 0; i < 200 && !found; i++) {
		usleep(10000);
		discover_scan(d, &born, &nb, &gone, &ng);
		found = has(born, nb, child);
	}
	CHECK(found);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	discover_scan(d, &born, &nb, &gone, &ng);
	CHECK(has(gone, ng, child));

	struct proc_about a;
	CHECK_INT(proc_read_about(d, getpid(), &a), 0);
	CHECK(proc_read_about(d, child, &a) < 0);
	discover_free(d);
	unlink(exe);
	rmdir(dir);
}

int main(void)
{
	test_cgroup();
	test_environ();
	test_otel();
	test_fake_proc();
	test_maps_rule();
	test_live();
	return check_done();
}
