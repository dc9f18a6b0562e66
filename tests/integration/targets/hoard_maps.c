/*
 * A maps hoarder for test_agent.py and bench/agent-hoard (issue #37 case
 * 4): a program with no Python in it that makes N (argv[1]) separate
 * small mappings, then sleeps until killed or argv[2] seconds have passed.
 * Run under a name like `python-hoard` it is a candidate the agent must
 * open to find out; under another it is a process the agent's discovery
 * must examine and leave.
 *
 * Separate: one page mapped, one page left unmapped, so that no two
 * mappings are neighbours the kernel could merge. Never touched: they cost
 * the kernel a VMA each (~200 bytes), not a page. Each line of
 * /proc/PID/maps is one of them, which is what reading it costs.
 *
 * Prints "ready N" once all are mapped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
	long lifetime = argc > 2 ? strtol(argv[2], NULL, 10) : 300;
	long page = sysconf(_SC_PAGESIZE);
	if (n < 1 || n > 60000 || lifetime < 1) {
		fprintf(stderr, "usage: hoard_maps [N (1-60000)] [SECONDS]\n");
		return 2;
	}
	/* One reservation, then every other page given back: n mappings apart. */
	char *base = mmap(NULL, (size_t)(2 * n * page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (long i = 0; i < n; i++) {
		if (munmap(base + (2 * i + 1) * page, (size_t)page) != 0) {
			perror("munmap");
			return 1;
		}
	}
	printf("ready %ld\n", n);
	fflush(stdout);
	struct timespec ts = { lifetime, 0 };
	while (nanosleep(&ts, &ts) != 0) {
	}
	return 0;
}
