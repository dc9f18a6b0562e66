/*
 * The floor for holding one thread (bench/hold-time): seize thread TID,
 * then N times interrupt it, wait for its stop (blocking) and restart it,
 * reading nothing. Prints the medians of the whole round trip and of the
 * time held (stop reported to restart), in microseconds:
 *   round_us X held_us X
 * Built by the script with one cc call.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: ptrace-floor TID N\n");
		return 2;
	}
	pid_t tid = (pid_t)atoi(argv[1]);
	int n = atoi(argv[2]);
	if (n < 1 || n > 100000 || ptrace(PTRACE_SEIZE, tid, 0, 0) < 0) {
		perror("ptrace-floor");
		return 1;
	}
	uint64_t *round = calloc((size_t)n, sizeof(*round)), *held = calloc((size_t)n, sizeof(*held));
	int k = 0;
	for (int i = 0; i < n; i++) {
		int st;
		uint64_t t0 = now_ns();
		if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) < 0 || waitpid(tid, &st, __WALL) != tid ||
		    !WIFSTOPPED(st)) {
			break;
		}
		uint64_t t1 = now_ns();
		/* A signal that beat the interrupt is handed back. */
		int sig = (st >> 16) == PTRACE_EVENT_STOP ? 0 : WSTOPSIG(st);
		ptrace(PTRACE_CONT, tid, 0, (void *)(long)sig);
		uint64_t t2 = now_ns();
		round[k] = t2 - t0;
		held[k++] = t2 - t1;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	int st;
	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) == 0 && waitpid(tid, &st, __WALL) == tid) {
		ptrace(PTRACE_DETACH, tid, 0, 0);
	}
	if (!k) {
		return 1;
	}
	qsort(round, (size_t)k, sizeof(*round), cmp);
	qsort(held, (size_t)k, sizeof(*held), cmp);
	printf("round_us %.1f held_us %.1f\n", (double)round[k / 2] / 1e3, (double)held[k / 2] / 1e3);
	return 0;
}
