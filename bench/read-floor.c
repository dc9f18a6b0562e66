/*
 * The floor for one non-blocking sample (bench/sample-cost): what a sampler
 * that knew exactly where everything is would still have to do per sample,
 * N times, on process PID and its thread TID:
 *   one 16 KiB process_vm_readv of the target's heap (a deep stack's frames
 *   and code objects fit in that), and one pread of the thread's
 *   /proc/PID/task/TID/stat, opened once and kept open (its state).
 * Flat out (PERIOD_US 0) and with a sleep of PERIOD_US between samples (a
 * sampler at 1e6 / PERIOD_US Hz, whose caches go cold while it sleeps).
 * With a fifth argument "stop", each sample also holds TID as spy's default
 * mode holds the GIL holder (seized once; PTRACE_INTERRUPT, a blocking
 * wait for the stop, the reads, PTRACE_CONT): the floor of a stopping
 * sample.
 * Prints the median CPU time of the reads (and the stop) alone and this
 * process's whole CPU time (user + system, the sleeps' own cost included)
 * per sample, in microseconds:
 *   reads_us X total_us X
 * Built by the script with one cc call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SPAN (16 * 1024)

static uint64_t cpu_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The start of the target's heap, else of its first writable mapping of SPAN bytes. */
static uint64_t pick_addr(int pid)
{
	char path[64], line[512];
	uint64_t any = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "r");
	if (!f) {
		return 0;
	}
	while (fgets(line, sizeof(line), f)) {
		uint64_t lo, hi;
		char perms[8];
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s", &lo, &hi, perms) != 3 ||
		    hi - lo < SPAN || perms[0] != 'r' || perms[1] != 'w') {
			continue;
		}
		if (strstr(line, "[heap]")) {
			any = lo;
			break;
		}
		if (!any) {
			any = lo;
		}
	}
	fclose(f);
	return any;
}

int main(int argc, char **argv)
{
	if (argc != 5 && !(argc == 6 && strcmp(argv[5], "stop") == 0)) {
		fprintf(stderr, "usage: read-floor PID TID N PERIOD_US [stop]\n");
		return 2;
	}
	int stop = argc == 6;
	int pid = atoi(argv[1]), tid = atoi(argv[2]), n = atoi(argv[3]);
	long period = atol(argv[4]);
	char path[64], stat[1024];
	static char buf[SPAN];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint64_t addr = pick_addr(pid);
	if (n < 1 || n > 10000000 || period < 0 || fd < 0 || !addr ||
	    (stop && ptrace(PTRACE_SEIZE, tid, 0, 0) < 0)) {
		perror("read-floor");
		return 1;
	}
	uint64_t *reads = calloc((size_t)n, sizeof(*reads));
	struct iovec local = { buf, SPAN }, remote = { (void *)(uintptr_t)addr, SPAN };
	struct timespec gap = { period / 1000000, (period % 1000000) * 1000 };
	/* Twice: the whole CPU time without the per-sample clock reads (each
	 * a syscall of its own), then the reads alone, timed one by one. */
	uint64_t all0 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID), all1 = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < n; i++) {
			uint64_t t0 = pass ? cpu_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
			int st;
			if (stop && (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0 ||
				     waitpid(tid, &st, __WALL) != tid || !WIFSTOPPED(st))) {
				perror("read-floor: stop");
				return 1;
			}
			if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != SPAN ||
			    pread(fd, stat, sizeof(stat), 0) <= 0) {
				perror("read-floor");
				return 1;
			}
			if (stop && ptrace(PTRACE_CONT, tid, 0, 0) < 0) {
				perror("read-floor: restart");
				return 1;
			}
			if (pass) {
				reads[i] = cpu_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
			}
			if (period) {
				nanosleep(&gap, NULL);
			}
		}
		if (!pass) {
			all1 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
		}
	}
	if (stop) {
		ptrace(PTRACE_DETACH, tid, 0, 0);
	}
	double total = (double)(all1 - all0) / n;
	qsort(reads, (size_t)n, sizeof(*reads), cmp);
	printf("reads_us %.2f total_us %.2f\n", (double)reads[n / 2] / 1e3, total / 1e3);
	return 0;
}
