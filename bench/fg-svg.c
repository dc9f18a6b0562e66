/*
 * Benchmark driver for the SVG flame graph writer (run it through
 * bench/fg-svg).
 *
 * The workload is bench/fg-aggregate.c's: NSTACKS distinct stacks of depth
 * 20..60 under a process root and one of 8 thread roots, drawn from 3000
 * functions in 300 files (one in ten native), each stack sharing a random
 * prefix with an earlier one, and NSAMPLES samples picked uniformly from
 * them. MODE "worst" instead makes every node of the picture sit just above
 * the one-pixel cut: 1180 unrelated stacks of depth 60 with equal counts,
 * the most nodes the writer can ever emit (one per pixel per level).
 *
 * The profile is built as record builds it and saved as folded text; then
 * the driver runs itself again ("--render FOLDED OUT"), which is what
 * `spy report -f svg` does: a fresh process loads the folded file and
 * renders it, and reports its load time, its render time, its peak RSS
 * (all of it: nothing of the generator is counted) and the file's size and
 * node count. It asserts nothing.
 *
 * OUT named .html writes the HTML report instead (bench/fg-html).
 *
 * Usage: fg-svg-bench [NSAMPLES [NSTACKS [OUT.svg [MODE]]]]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "bench/bench.h"
#include "flamegraph/internal.h"

#define LINES 8

/*
 * Peak resident set of this address space, from VmHWM in /proc/self/status,
 * in MiB. Not getrusage's ru_maxrss: that one survives exec, so the render
 * process would report the generator's peak.
 */
static double rss_peak(void)
{
	char line[256];
	double kib = 0;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f) {
		return 0;
	}
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "VmHWM:", 6)) {
			kib = strtod(line + 6, NULL);
		}
	}
	fclose(f);
	return kib / 1024.0;
}

/* Count the nodes of the SVG's node array (four numbers each). */
static size_t svg_nodes(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t commas = 0;
	int c, state = 0;
	static const char key[] = "var N=[";
	if (!f) {
		return 0;
	}
	while ((c = getc(f)) != EOF) {
		if (state < 7) {
			state = c == key[state] ? state + 1 : (c == key[0] ? 1 : 0);
		} else if (c == ']') {
			break;
		} else if (c == ',') {
			commas++;
		}
	}
	fclose(f);
	return (commas + 1) / 4;
}

static int render(const char *folded, const char *path)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	double t0 = now();
	if (fg_profile_load_folded(p, folded, &err)) {
		fprintf(stderr, "fg-svg: %s\n", err.msg);
		return 1;
	}
	double t1 = now();
	double rss0 = rss_now();
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		return 1;
	}
	/* An OUT named .html renders the HTML report instead (bench/fg-html). */
	struct fg_svg_opts o = { "fg-svg bench", false };
	struct fg_writer w = { fg_format_from_path(path), p, NULL, NULL, &o, false, NULL };
	bool svg = w.format == FG_FORMAT_SVG;
	double t2 = now();
	int rc = svg ? fg_profile_write_svg(p, f, &o, &err) : fg_write(&w, f, path, &err);
	if (fclose(f) || rc) {
		fprintf(stderr, "fg-svg: %s\n", rc ? err.msg : "close failed");
		return 1;
	}
	double t3 = now();
	struct stat sb;
	if (stat(path, &sb)) {
		sb.st_size = 0;
	}
	printf("  load folded (report):     %.3f s, RSS %.1f MiB after\n", t1 - t0, rss0);
	printf("  render %-4s               %.3f s (%s + write)\n", svg ? "SVG:" : "HTML:", t3 - t2,
	       svg ? "trie + tables" : "order + tables");
	printf("  peak RSS (load+render):   %.1f MiB\n", rss_peak());
	if (svg) {
		printf("  SVG:                      %.2f MiB, %zu nodes\n",
		       (double)sb.st_size / (1024.0 * 1024.0), svg_nodes(path));
	} else {
		printf("  HTML:                     %.2f MiB\n", (double)sb.st_size / (1024.0 * 1024.0));
	}
	fg_profile_free(p);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--render")) {
		return render(argv[2], argv[3]);
	}
	size_t nsamples = argc > 1 ? strtoul(argv[1], NULL, 0) : 1000000;
	size_t nstacks = argc > 2 ? strtoul(argv[2], NULL, 0) : 50000;
	char defpath[4096];
	snprintf(defpath, sizeof(defpath), "/tmp/fg-svg-bench.%ld.svg", (long)getpid());
	const char *path = argc > 3 ? argv[3] : defpath;
	if (!nstacks || !nsamples) {
		fprintf(stderr, "usage: %s [NSAMPLES [NSTACKS [OUT.svg]]]\n", argv[0]);
		return 2;
	}

	struct spy_strtab session = SPY_STRTAB_INIT;
	struct bench_vocab voc;
	bench_vocab_init(&voc, &session);

	struct spy_stack *stacks = bench_stacks(&voc, nstacks, LINES, 10);

	bool worst = argc > 4 && !strcmp(argv[4], "worst");
	struct fg_profile *p = fg_profile_new(&session, 0);
	fg_profile_meta_set(p, FG_META_SPY_VERSION, SPY_VERSION);
	fg_profile_meta_set(p, FG_META_PYTHON, "3.12.1");
	fg_profile_meta_set(p, FG_META_RATE_HZ, "100");
	fg_profile_meta_setf(p, FG_META_DURATION_S, "%.2f", (double)nsamples / 100.0);
	fg_profile_meta_set(p, FG_META_ERRORS, "0");
	fg_profile_meta_set(p, FG_META_COMMAND, "python3 bench.py --synthetic");
	if (worst) {
		/* 1180 stacks, no shared prefix below the thread root, equal counts
		 * rounded up to a pixel: every node is emitted. */
		struct spy_stack s = SPY_STACK_INIT;
		uint64_t each = (nsamples + 1179) / 1180;
		for (size_t k = 0; k < 1180; k++) {
			spy_stack_reset(&s);
			for (size_t i = 0; i < MAX_DEPTH; i++) {
				struct spy_frame *f = spy_stack_push(&s);
				f->func = voc.funcs[(k * 61 + i * 7) % NFUNCS];
				f->file = voc.files[(k * 61 + i * 7) % NFUNCS % NFILES];
				f->line = 10 + (uint32_t)(k % 977);
				f->kind = i % 10 ? SPY_FRAME_PYTHON : SPY_FRAME_NATIVE;
			}
			struct spy_frame *f = spy_stack_push(&s);
			f->func = voc.threads[0];
			f->kind = SPY_FRAME_SYNTHETIC;
			f = spy_stack_push(&s);
			f->func = voc.process;
			f->kind = SPY_FRAME_SYNTHETIC;
			fg_profile_add(p, &s, each);
		}
		spy_stack_release(&s);
	} else {
		for (size_t i = 0; i < nsamples; i++) {
			fg_profile_add(p, &stacks[rnd() % nstacks], 1);
		}
	}
	for (size_t k = 0; k < nstacks; k++) {
		spy_stack_release(&stacks[k]);
	}
	free(stacks);
	struct fg_stats st;
	fg_profile_stats(p, &st);
	fg_profile_meta_setf(p, FG_META_SAMPLES, "%" PRIu64, st.samples);
	printf("fg-svg (%s): %" PRIu64 " samples over %zu distinct stacks (%zu frames, %zu frame ids)\n",
	       worst ? "worst" : "uniform", st.samples, st.stacks, st.frames, st.frame_ids);

	char folded[4200];
	snprintf(folded, sizeof(folded), "%s.folded", path);
	struct spy_err err = SPY_ERR_INIT;
	if (bench_save_folded(p, folded, &err)) {
		fprintf(stderr, "fg-svg: %s\n", err.msg);
		return 1;
	}
	/* Render in a fresh process, so its peak RSS is the renderer's own. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "--render", folded, path, (char *)NULL);
		perror("exec");
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	unlink(folded);
	if (argc <= 3) {
		unlink(path);
	} else {
		printf("  kept:                     %s\n", path);
	}
	fg_profile_free(p);
	spy_strtab_release(&session);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
