/*
 * common/credopen.c against real processes (needs root: SKIP otherwise).
 * A child that becomes uid/gid 65534 with no groups is the "program":
 * a root-only 0600 file named for it is refused with -EACCES, a link it
 * could plant to that file too, a 0644 file opens, and the descriptor
 * reads the file's bytes. The same names for a root child (CAP_DAC_OVERRIDE
 * in effect) open all; with a snapshot of other credentials, the less
 * privileged of the two open. A helper that is stopped costs CREDOPEN_WAIT_MS,
 * once, and its files are then refused at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/credopen.h"
#include "tests/lib/check.h"

static char dir[] = "/tmp/spy-credopen-XXXXXX";

/* A child sleeping as uid (and gid) id, no groups; 0 keeps root. */
static pid_t child_as(uid_t id)
{
	int p[2];
	CHECK(pipe(p) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		if (id && (setgroups(0, NULL) != 0 || setgid(id) != 0 || setuid(id) != 0)) {
			_exit(1);
		}
		close(p[0]);
		(void)write(p[1], "x", 1);
		pause();
		_exit(0);
	}
	close(p[1]);
	char c;
	CHECK(read(p[0], &c, 1) == 1);
	close(p[0]);
	return pid;
}

static void end(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static int try_open_then(struct spy_credopen *co, pid_t pid, const struct spy_creds *then, const char *name,
			 char *got, size_t size)
{
	char path[256];
	snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
	int root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = spy_credopen(co, pid, then, root, path);
	close(root);
	if (fd >= 0) {
		ssize_t n = read(fd, got, size - 1);
		got[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	return fd;
}

static int try_open(struct spy_credopen *co, pid_t pid, const char *name, char *got, size_t size)
{
	return try_open_then(co, pid, NULL, name, got, size);
}

static void write_file(const char *name, const char *text, mode_t mode)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	CHECK(chmod(path, mode) == 0);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP: needs root (only root switches to a program's credentials)\n");
		return 77;
	}
	if (!mkdtemp(dir) || chmod(dir, 0755) != 0) {
		perror("mkdtemp");
		return 1;
	}
	write_file("secret", "root only\n", 0600);
	write_file("open", "anyone\n", 0644);
	char link[300], target[300];
	snprintf(link, sizeof(link), "%s/planted", dir);
	snprintf(target, sizeof(target), "%s/secret", dir);
	CHECK(symlink(target, link) == 0);

	struct spy_credopen *co = spy_credopen_new();
	char got[64];
	pid_t nobody = child_as(65534);
	CHECK_INT(try_open(co, nobody, "secret", got, sizeof(got)), -EACCES);
	CHECK_INT(try_open(co, nobody, "planted", got, sizeof(got)), -EACCES);
	CHECK(try_open(co, nobody, "open", got, sizeof(got)) >= 0 && !strcmp(got, "anyone\n"));
	CHECK(try_open(co, nobody, "missing", got, sizeof(got)) == -ENOENT);

	pid_t root = child_as(0);
	CHECK(try_open(co, root, "secret", got, sizeof(got)) >= 0 && !strcmp(got, "root only\n"));
	CHECK(try_open(co, root, "planted", got, sizeof(got)) >= 0 && !strcmp(got, "root only\n"));

	/*
	 * The rights from the snapshot taken when the process was opened, and
	 * now: the less privileged of the two. A program that was nobody when
	 * its names were read and is root now (it exec'd a set-uid program,
	 * timed to spy's opens) opens as nobody; root then and nobody now,
	 * as nobody; two different unprivileged users, nothing.
	 */
	struct spy_creds as_nobody, as_root, as_other;
	CHECK_INT(spy_creds_read(nobody, &as_nobody), 0);
	CHECK_INT(spy_creds_read(root, &as_root), 0);
	CHECK(!as_nobody.mixed && !as_root.mixed && as_nobody.exe_ino && as_nobody.exe_ino == as_root.exe_ino);
	CHECK_INT(try_open_then(co, root, &as_nobody, "secret", got, sizeof(got)), -EACCES);
	CHECK_INT(try_open_then(co, root, &as_nobody, "planted", got, sizeof(got)), -EACCES);
	CHECK(try_open_then(co, root, &as_nobody, "open", got, sizeof(got)) >= 0 && !strcmp(got, "anyone\n"));
	CHECK_INT(try_open_then(co, nobody, &as_root, "secret", got, sizeof(got)), -EACCES);
	CHECK(try_open_then(co, nobody, &as_nobody, "open", got, sizeof(got)) >= 0);
	CHECK(try_open_then(co, root, &as_root, "secret", got, sizeof(got)) >= 0);
	pid_t other = child_as(65533);
	CHECK_INT(spy_creds_read(other, &as_other), 0);
	CHECK_INT(try_open_then(co, nobody, &as_other, "open", got, sizeof(got)), -EPERM);
	/* An executable that changed: never opened by spy itself, even for root. */
	as_root.exe_ino ^= 1;
	CHECK(try_open_then(co, root, &as_root, "open", got, sizeof(got)) >= 0);
	end(other);
	spy_creds_release(&as_nobody);
	spy_creds_release(&as_root);
	spy_creds_release(&as_other);
	end(root);

	/* The program stops the helper (it may: same uid): one wait, then no more. */
	spy_credopen_free(co);
	co = spy_credopen_new();
	CHECK(try_open(co, nobody, "open", got, sizeof(got)) >= 0);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
	FILE *f = fopen(cmd, "r");
	int helper = 0;
	while (f && fscanf(f, "%d", &helper) == 1 && helper == nobody) {
	}
	if (f) {
		fclose(f);
	}
	CHECK(helper > 0 && helper != nobody);
	kill(helper, SIGSTOP);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(try_open(co, nobody, "open", got, sizeof(got)) == -ETIMEDOUT);
	CHECK(try_open(co, nobody, "open", got, sizeof(got)) < 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(took < 2.0 * CREDOPEN_WAIT_MS / 1000.0);
	spy_credopen_free(co);
	end(nobody);

	unlink(link);
	snprintf(link, sizeof(link), "%s/secret", dir);
	unlink(link);
	snprintf(link, sizeof(link), "%s/open", dir);
	unlink(link);
	rmdir(dir);
	return check_done();
}
