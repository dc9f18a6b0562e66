/*
 * Benchmark driver for flamegraph/ (run it through bench/fg-aggregate).
 *
 * Builds a synthetic workload shaped like a real recording: NSTACKS distinct
 * stacks of depth 20..60 under a process root and one of 8 thread roots,
 * drawn from 3000 functions in 300 files, each called from one of LINES
 * lines (its call sites; default 8, so ~24,000 distinct frames), each stack
 * sharing a random prefix with an earlier one (real stacks share their
 * outer frames). A large LINES (say 400) makes nearly every frame distinct,
 * a worst case for the frame table. Then it feeds
 * NSAMPLES samples, picked uniformly from those stacks (the worst case for
 * caches), into fg_profile_add exactly as record would: strings interned in
 * a session strtab the profile borrows, one spy_stack per sample.
 *
 * It prints figures and asserts nothing: time per sample and per frame, the
 * profile's own memory and the process's RSS before and after, a second
 * round of samples to show memory does not grow with duration, and the time
 * and size of writing (plain and gzip), reading back, and building the table.
 *
 * Usage: fg-aggregate-bench [NSAMPLES [NSTACKS [LINES [OUTDIR]]]]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "bench/bench.h"
#include "flamegraph/internal.h"

static double rss_peak(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_maxrss / 1024.0;
}

static double file_mib(const char *path)
{
	struct stat st;
	return stat(path, &st) ? 0 : (double)st.st_size / (1024.0 * 1024.0);
}

/* Write p as folded text, plain and gzipped, and read both back. */
static int bench_files(struct fg_profile *p, const char *outdir)
{
	double t0;
	char plain[4096], gz[4096 + 3];   /* room for plain + ".gz" */
	snprintf(plain, sizeof(plain), "%s/fg-aggregate-bench.%ld.folded", outdir, (long)getpid());
	snprintf(gz, sizeof(gz), "%s.gz", plain);
	struct spy_err err = SPY_ERR_INIT;
	t0 = now();
	int rc = bench_save_folded(p, plain, &err);
	double t_w = now() - t0;
	if (rc) {
		fprintf(stderr, "fg-aggregate: %s\n", err.msg);
		return -1;
	}
	t0 = now();
	rc = bench_save_folded(p, gz, &err);
	double t_wz = now() - t0;
	if (rc) {
		fprintf(stderr, "fg-aggregate: %s\n", err.msg);
		return -1;
	}
	printf("  folded write:             %.3f s, %.1f MiB (plain, fsync'd)\n", t_w, file_mib(plain));
	printf("  folded write .gz:         %.3f s, %.1f MiB (gzip -6, fsync'd)\n", t_wz, file_mib(gz));

	struct fg_profile *q = fg_profile_new(NULL, 0);
	t0 = now();
	rc = fg_profile_load_folded(q, plain, &err);
	double t_r = now() - t0;
	struct fg_profile *qz = fg_profile_new(NULL, 0);
	t0 = now();
	rc |= fg_profile_load_folded(qz, gz, &err);
	double t_rz = now() - t0;
	if (rc) {
		fprintf(stderr, "fg-aggregate: %s\n", err.msg);
		return -1;
	}
	struct fg_stats stq;
	fg_profile_stats(q, &stq);
	printf("  folded read:              %.3f s plain, %.3f s gzip (%zu stacks, %" PRIu64 " samples back)\n",
	       t_r, t_rz, stq.stacks, stq.samples);
	fg_profile_free(q);
	fg_profile_free(qz);
	unlink(plain);
	unlink(gz);
	return 0;
}

int main(int argc, char **argv)
{
	size_t nsamples = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000000;
	size_t nstacks = argc > 2 ? strtoul(argv[2], NULL, 0) : 50000;
	uint32_t nlines = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 0) : 8;
	const char *outdir = argc > 4 ? argv[4] : "/tmp";
	if (!nstacks || !nsamples || !nlines) {
		fprintf(stderr, "usage: %s [NSAMPLES [NSTACKS [LINES [OUTDIR]]]]\n", argv[0]);
		return 2;
	}

	struct spy_strtab session = SPY_STRTAB_INIT;

	/* The vocabulary: function names, files and the roots, interned once. */
	struct bench_vocab voc;
	bench_vocab_init(&voc, &session);

	struct spy_stack *stacks = bench_stacks(&voc, nstacks, (unsigned)nlines, 0);
	uint32_t *pick = malloc(nsamples * sizeof(*pick));
	uint64_t picked_frames = 0;
	for (size_t i = 0; i < nsamples; i++) {
		pick[i] = (uint32_t)(rnd() % nstacks);
		picked_frames += stacks[pick[i]].n;
	}

	printf("fg-aggregate: %zu samples over %zu distinct stacks (depth %d-%d + 2 roots, "
	       "mean %.1f frames per sample, %u call lines per function)\n",
	       nsamples, nstacks, MIN_DEPTH, MAX_DEPTH, (double)picked_frames / (double)nsamples, nlines);
	double rss_input = rss_now();
	printf("  input stacks in memory:   RSS %.1f MiB (peak %.1f MiB)\n", rss_input, rss_peak());

	/* Round 1: every stack is new at first, then seen again. */
	struct fg_profile *p = fg_profile_new(&session, 0);
	fg_profile_meta_set(p, FG_META_SPY_VERSION, SPY_VERSION);
	fg_profile_meta_set(p, FG_META_RATE_HZ, "100");
	double t0 = now();
	for (size_t i = 0; i < nsamples; i++) {
		fg_profile_add(p, &stacks[pick[i]], 1);
	}
	double t_add = now() - t0;
	struct fg_stats st1;
	fg_profile_stats(p, &st1);
	double rss1 = rss_now();
	printf("  aggregate (round 1):      %.3f s, %.0f ns/sample, %.1f ns/frame, %.2f M samples/s\n",
	       t_add, t_add * 1e9 / (double)nsamples, t_add * 1e9 / (double)picked_frames,
	       (double)nsamples / t_add / 1e6);
	printf("  profile:                  %zu stacks, %zu frames, %zu frame ids stored, %.1f MiB held\n",
	       st1.stacks, st1.frames, st1.frame_ids, (double)st1.bytes / (1024.0 * 1024.0));
	printf("  RSS after round 1:        %.1f MiB (+%.1f MiB over the input; peak %.1f MiB)\n",
	       rss1, rss1 - rss_input, rss_peak());

	/* Round 2: the same number of samples, all of known stacks (steady state). */
	t0 = now();
	for (size_t i = 0; i < nsamples; i++) {
		fg_profile_add(p, &stacks[pick[nsamples - 1 - i]], 1);
	}
	double t_add2 = now() - t0;
	struct fg_stats st2;
	fg_profile_stats(p, &st2);
	double rss2 = rss_now();
	printf("  aggregate (round 2):      %.3f s, %.0f ns/sample (steady state, no allocation)\n",
	       t_add2, t_add2 * 1e9 / (double)nsamples);
	printf("  after 2x the samples:     %zu stacks, %.1f MiB held, RSS %.1f MiB (%+.1f MiB vs round 1)\n",
	       st2.stacks, (double)st2.bytes / (1024.0 * 1024.0), rss2, rss2 - rss1);

	/* The trie view renderers build. */
	struct fg_tree tree;
	t0 = now();
	fg_tree_init(&tree, p);
	double t_tree = now() - t0;
	printf("  trie view:                %.3f s to build, %zu nodes (%.1f MiB while it lives)\n",
	       t_tree, tree.nnodes,
	       (double)tree.nnodes * (sizeof(*tree.nodes) + 2 * sizeof(*tree.start)) / (1024.0 * 1024.0));
	fg_tree_release(&tree);

	if (bench_files(p, outdir) < 0) {
		return 1;
	}

	struct fg_table_opts o = FG_TABLE_OPTS_INIT;
	o.top = 20;
	struct fg_table t;
	t0 = now();
	fg_table_init(&t, p, &o);
	double t_t = now() - t0;
	printf("  cumtime table:            %.3f s (%zu functions)\n", t_t, t.nfuncs);
	printf("  peak RSS:                 %.1f MiB\n", rss_peak());

	fg_table_release(&t);
	fg_profile_free(p);
	for (size_t k = 0; k < nstacks; k++) {
		spy_stack_release(&stacks[k]);
	}
	free(stacks);
	free(pick);
	spy_strtab_release(&session);
	return 0;
}
