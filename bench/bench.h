/*
 * What the C benchmark drivers share: a fixed-seed random source (so runs
 * are comparable), a monotonic clock, the resident set now, and the shape
 * and names of the synthetic profiles they generate. Header-only: each driver is built by
 * its script with one cc call, no extra objects.
 */
#ifndef SPY_BENCH_BENCH_H
#define SPY_BENCH_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <unistd.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "flamegraph/flamegraph.h"

/* The synthetic workload: functions spread over files, stacks 20-60 deep. */
#define NFUNCS 3000
#define NFILES 300
#define NTHREADS 8
#define MIN_DEPTH 20
#define MAX_DEPTH 60

/* xorshift64*, fixed seed: the same profile on every run. */
static uint64_t bench_rng = 0x9e3779b97f4a7c15ULL;

static inline uint64_t rnd(void)
{
	bench_rng ^= bench_rng >> 12;
	bench_rng ^= bench_rng << 25;
	bench_rng ^= bench_rng >> 27;
	return bench_rng * 0x2545f4914f6cdd1dULL;
}

static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resident set now, from /proc/self/statm, in MiB. */
static inline double rss_now(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &resident) != 2) {
			resident = 0;
		}
		fclose(f);
	}
	return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* Names of the synthetic workload, interned once in the session's table. */
struct bench_vocab {
	const char *funcs[NFUNCS];
	const char *files[NFILES];
	const char *threads[NTHREADS];
	const char *process;
};

static inline void bench_vocab_init(struct bench_vocab *v, struct spy_strtab *t)
{
	char name[128];
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "/usr/lib/python3.12/site-packages/pkg%d/module_%d.py", i % 17, i);
		v->files[i] = spy_strtab_interns(t, name);
	}
	for (int i = 0; i < NFUNCS; i++) {
		snprintf(name, sizeof(name), "Class%d.method_%d", i % 97, i);
		v->funcs[i] = spy_strtab_interns(t, name);
	}
	for (int i = 0; i < NTHREADS; i++) {
		snprintf(name, sizeof(name), "thread %d \"worker-%d\"", 1000 + i, i);
		v->threads[i] = spy_strtab_interns(t, name);
	}
	v->process = spy_strtab_interns(t, "process 4242 \"python3 bench.py\"");
}

/*
 * nstacks distinct stacks as spy_stacks, innermost first as the walker hands
 * them over: each MIN_DEPTH..MAX_DEPTH frames deep under a thread root and
 * the process root, sharing a random prefix with an earlier one (so the
 * trie has real structure), at lines 10, 20, ... 10 * nlines; one function
 * in native_every is native (0: none). Free each with spy_stack_release.
 */
static inline struct spy_stack *bench_stacks(const struct bench_vocab *v, size_t nstacks,
					     unsigned nlines, unsigned native_every)
{
	struct def {
		uint32_t func, line;
	};
	struct def **defs = malloc(nstacks * sizeof(*defs));
	uint8_t *depth = malloc(nstacks), *thread = malloc(nstacks);
	for (size_t k = 0; k < nstacks; k++) {
		size_t d = MIN_DEPTH + rnd() % (MAX_DEPTH - MIN_DEPTH + 1);
		defs[k] = malloc(d * sizeof(**defs));
		depth[k] = (uint8_t)d;
		size_t shared = 0;
		thread[k] = 0;
		if (k) {
			size_t parent = rnd() % k;
			size_t pd = depth[parent];
			shared = rnd() % ((d < pd ? d : pd));
			memcpy(defs[k], defs[parent], shared * sizeof(**defs));
			thread[k] = thread[parent];
		}
		if (!shared) {
			thread[k] = (uint8_t)(rnd() % NTHREADS);
		}
		for (size_t i = shared; i < d; i++) {
			defs[k][i].func = (uint32_t)(rnd() % NFUNCS);
			defs[k][i].line = 10 * (1 + (uint32_t)(rnd() % nlines));
		}
	}
	struct spy_stack *stacks = calloc(nstacks, sizeof(*stacks));
	for (size_t k = 0; k < nstacks; k++) {
		for (size_t i = depth[k]; i-- > 0;) {
			struct spy_frame *f = spy_stack_push(&stacks[k]);
			uint32_t fn = defs[k][i].func;
			f->func = v->funcs[fn];
			f->file = v->files[fn % NFILES];
			f->line = defs[k][i].line;
			f->kind = native_every && fn % native_every == 0 ? SPY_FRAME_NATIVE
									 : SPY_FRAME_PYTHON;
		}
		struct spy_frame *f = spy_stack_push(&stacks[k]);
		f->func = v->threads[thread[k]];
		f->kind = SPY_FRAME_SYNTHETIC;
		f = spy_stack_push(&stacks[k]);
		f->func = v->process;
		f->kind = SPY_FRAME_SYNTHETIC;
		free(defs[k]);
	}
	free(defs);
	free(depth);
	free(thread);
	return stacks;
}

/*
 * Write p as folded text to path (gzip for a ".gz" name), synced, through
 * the format registry's one writer call: what record's output path costs,
 * without its temporary and rename.
 */
static inline int bench_save_folded(const struct fg_profile *p, const char *path, struct spy_err *err)
{
	struct fg_writer w = { FG_FORMAT_FOLDED, p, NULL, NULL, NULL,
			       fg_format_gzip(FG_FORMAT_FOLDED, path), NULL };
	FILE *f = fopen(path, "w");
	if (!f) {
		return spy_err_set(err, SPY_EIO, "cannot write %s", path);
	}
	int rc = fg_write(&w, f, path, err);
	if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
		rc = spy_err_set(err, SPY_EIO, "cannot write %s", path);
	}
	fclose(f);
	return rc;
}

#endif
