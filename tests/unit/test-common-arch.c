/*
 * Unit tests for common/arch-<cpu>.c on the CPU they run on, against the
 * real kernel and libunwind rather than a restatement of the layouts:
 *   - every register spy hands libunwind (spy_arch_unwind_reg) is the value
 *     libunwind-ptrace's own accessor reads from the same stopped thread,
 *     and the ip and sp are among them;
 *   - a thread stopped while blocked in read(2) is seen in that syscall,
 *     with its fd, from its registers alone (what a core keeps), and a
 *     thread stopped while spinning in user code is seen running;
 *   - the ELF machine is this executable's own;
 *   - spy_arch_after_call knows the return addresses of this program's own
 *     direct and indirect calls as such, and not bytes of no call; every
 *     register spy_arch_calls names can be set and read back.
 */
#include <elf.h>
#include <errno.h>
#include <libunwind-ptrace.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/arch.h"
#include "tests/lib/check.h"
#include "tests/lib/ptrace-helpers.h"

/* How many libunwind register numbers to compare: past every general register of both. */
#define UNW_REGS_LOOKED_AT 64

static bool read_child(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	pid_t pid = *(pid_t *)ctx;
	struct iovec local = { dst, len }, remote = { (void *)(uintptr_t)addr, len };
	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Seize pid and stop it where it is; false if that failed. */
static bool seize_stop(pid_t pid)
{
	int st;
	if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) != 0 || ptrace(PTRACE_INTERRUPT, pid, NULL, NULL) != 0) {
		return false;
	}
	return waitpid(pid, &st, __WALL) == pid && WIFSTOPPED(st);
}

static void finish(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* A child spinning in user code, never entering the kernel on its own. */
static pid_t spawn_spinner(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		for (volatile unsigned long i = 0;; i++) {
		}
	}
	return pid;
}

static void test_unwind_regs(void)
{
	pid_t pid = spawn_spinner();
	CHECK(pid > 0);
	sleep_ms(20);
	CHECK(seize_stop(pid));
	struct spy_regs r;
	CHECK_INT(spy_arch_get_regs(pid, &r), 0);
	unw_addr_space_t as = unw_create_addr_space(&_UPT_accessors, 0);
	void *upt = _UPT_create(pid);
	int compared = 0;
	for (int reg = 0; reg < UNW_REGS_LOOKED_AT; reg++) {
		uint64_t ours;
		unw_word_t theirs;
		if (!spy_arch_unwind_reg(&r, reg, &ours)) {
			continue;
		}
		CHECK_INT(_UPT_access_reg(as, reg, &theirs, 0, upt), 0);
		if (ours != theirs) {
			fprintf(stderr, "register %d: spy 0x%llx, libunwind 0x%llx\n", reg,
				(unsigned long long)ours, (unsigned long long)theirs);
		}
		CHECK(ours == theirs);
		compared++;
	}
	/* x86-64: rax..rip (17); aarch64: x0..x30, sp, pc, pstate (34). */
	CHECK(compared >= 17);
	uint64_t v;
	CHECK(spy_arch_unwind_reg(&r, UNW_REG_IP, &v));
	CHECK(spy_arch_unwind_reg(&r, UNW_REG_SP, &v));
	CHECK(!spy_arch_unwind_reg(&r, -1, &v));
	/* The pc spy_arch_calls names is the register libunwind starts a walk at. */
	unw_cursor_t cur;
	unw_word_t ip = 0;
	CHECK_INT(unw_init_remote(&cur, as, upt), 0);
	CHECK_INT(unw_get_reg(&cur, UNW_REG_IP, &ip), 0);
	CHECK(spy_arch_unwind_reg(&r, spy_arch_calls()->pc, &v) && v == ip && ip != 0);
	_UPT_destroy(upt);
	unw_destroy_addr_space(as);

	long nr = 0;
	uint64_t args[2];
	CHECK_INT(spy_arch_stopped_syscall(&r, read_child, &pid, &nr, args), 0);
	finish(pid);
}

/* Whether pid is asleep (state S in /proc/PID/stat), waiting up to 2 s. */
static bool asleep(pid_t pid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 200; i++) {
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f) {
			fclose(f);
		}
		buf[n] = '\0';
		const char *p = strrchr(buf, ')');
		if (p && p[1] == ' ' && p[2] == 'S') {
			return true;
		}
		sleep_ms(10);
	}
	return false;
}

static void test_stopped_syscall(void)
{
	int fds[2];
	CHECK_INT(pipe(fds), 0);
	/* A number no other descriptor of the child has. */
	int fd = dup2(fds[0], 57);
	CHECK_INT(fd, 57);
	pid_t pid = fork();
	if (pid == 0) {
		char c;
		_exit(read(fd, &c, 1) == 1 ? 0 : 1);
	}
	CHECK(pid > 0);
	CHECK(asleep(pid));
	CHECK(seize_stop(pid));
	struct spy_regs r;
	CHECK_INT(spy_arch_get_regs(pid, &r), 0);
	long nr = -1;
	uint64_t args[2] = { 0, 0 };
	CHECK_INT(spy_arch_stopped_syscall(&r, read_child, &pid, &nr, args), 1);
	CHECK_INT(nr, SYS_read);
	CHECK_INT(args[0], fd);
	finish(pid);
	close(fds[0]);
	close(fds[1]);
	close(fd);
}

/* The return address of the call into it, and the bytes before it. */
static uintptr_t noted_ret;
__attribute__((noinline)) static void note_return(void)
{
	noted_ret = (uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0));
	__asm__ __volatile__("" ::: "memory");
}

static bool after_call(uintptr_t ret)
{
	uint8_t b[8];
	memcpy(b, (const void *)(ret - sizeof(b)), sizeof(b));
	return spy_arch_after_call(b);
}

static void test_after_call(void)
{
	note_return();
	CHECK(noted_ret && after_call(noted_ret));
	void (*volatile indirect)(void) = note_return;
	noted_ret = 0;
	indirect();
	CHECK(noted_ret && after_call(noted_ret));
	static const uint8_t none[8];
	CHECK(!spy_arch_after_call(none));

	const struct spy_arch_calls *a = spy_arch_calls();
	CHECK(a->nkept > 0 && a->nslots > 0 && a->sp_align >= 8);
	struct spy_regs r;
	memset(&r, 0, sizeof(r));
	uint64_t v = 0;
	for (size_t i = 0; i < a->nkept; i++) {
		CHECK(spy_arch_set_unwind_reg(&r, a->kept[i], 0x1000 + i));
		CHECK(spy_arch_unwind_reg(&r, a->kept[i], &v) && v == 0x1000 + i);
	}
	CHECK(spy_arch_set_unwind_reg(&r, a->pc, 0x4321) && spy_arch_unwind_reg(&r, a->pc, &v) && v == 0x4321);
	CHECK(spy_arch_set_unwind_reg(&r, UNW_REG_SP, 0x8765) && spy_arch_unwind_reg(&r, UNW_REG_SP, &v) &&
	      v == 0x8765);
	CHECK(spy_arch_unwind_reg(&r, a->fp, &v));
	CHECK(a->lr < 0 || spy_arch_unwind_reg(&r, a->lr, &v));
	CHECK(!spy_arch_set_unwind_reg(&r, -1, 0));
}

int main(void)
{
	Elf64_Ehdr self;
	FILE *f = fopen("/proc/self/exe", "rb");
	CHECK(f && fread(&self, sizeof(self), 1, f) == 1);
	if (f) {
		fclose(f);
	}
	CHECK_INT(self.e_machine, spy_arch_elf_machine());
	CHECK(spy_arch_user_end() > (spy_addr_t)(uintptr_t)&self);
	test_after_call();

	if (!test_ptrace_permitted()) {
		printf("skipped: ptrace is not permitted here (%s)\n", strerror(errno));
		return 77;
	}
	test_unwind_regs();
	test_stopped_syscall();
	return check_done();
}
