/*
 * Fuzzing sampler's text parsers: /proc/PID/maps, task stat, syscall and
 * wchan text (proc_parse_maps, proc_parse_stat_state, proc_classify_wait,
 * proc_wait_note_wchan), a core's NT_FILE note (core_parse_nt_file) and the
 * resource readings' stat, status and io (proc_parse_stat_resources,
 * proc_parse_status_ctxsw, proc_parse_io) and a thread's schedstat
 * (proc_parse_schedstat), and the agent's cgroup labels (proc_parse_cgroup).
 * A target or a core writes these bytes. Whatever they are: no crash, no
 * read outside the buffer (an exact-size copy: the sanitizers tell), and
 * what is accepted holds together (maps sorted, lo < hi, paths inside
 * their storage). Input: byte 0 picks the parser, the rest is its text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "sampler/discover.h"
#include "sampler/sampler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_maps(const struct spy_map *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (m[i].lo >= m[i].hi || (i && m[i - 1].hi > m[i].lo)) {
			abort();
		}
		if (m[i].path) {
			(void)strlen(m[i].path);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1) {
		return 0;
	}
	size_t n = size - 1;
	/* An exact-size copy, NUL-terminated one past for the C-string parsers. */
	char *text = malloc(n + 1);
	if (!text) {
		abort();
	}
	memcpy(text, data + 1, n);
	text[n] = '\0';
	struct spy_err err = SPY_ERR_INIT;
	struct spy_map *maps = NULL;
	char *paths = NULL;
	size_t nmaps = 0;
	switch (data[0] % 4) {
	case 0:
		if (proc_parse_maps(text, n, &maps, &nmaps, &paths, &err) >= 0) {
			check_maps(maps, nmaps);
		}
		break;
	case 1: {
		char st = proc_parse_stat_state(text, n);
		struct spy_wait w;
		memset(&w, 0, sizeof(w));
		proc_classify_wait(st, text, &w);
		proc_wait_note_wchan(&w, text);
		if (strnlen(w.wchan, sizeof(w.wchan)) >= sizeof(w.wchan)) {
			abort();
		}
		break;
	}
	case 3: {
		/* The three resource parsers over the same text: each says only what it read. */
		struct proc_resources r;
		memset(&r, 0, sizeof(r));
		uint64_t sum = 0, rd = 0, wr = 0;
		unsigned k = proc_parse_stat_resources(text, n, &r);
		if (k & ~(unsigned)(PROC_RES_CPU | PROC_RES_RSS | PROC_RES_THREADS)) {
			abort();
		}
		if ((proc_parse_status_ctxsw(text, n, &sum) & ~(unsigned)PROC_RES_CTXSW) ||
		    (proc_parse_io(text, n, &rd, &wr) & ~(unsigned)PROC_RES_IO)) {
			abort();
		}
		/* And the thread's schedstat, read every tick to tell who slept. */
		uint64_t run = 0, delay = 0, pcount = 0;
		(void)proc_parse_schedstat(text, n, &run, &delay, &pcount);
		/* And the agent's labels from /proc/PID/cgroup: empty, or a whole ID and UID. */
		char cid[65], pod[37];
		memset(cid, 0x55, sizeof(cid));
		memset(pod, 0x55, sizeof(pod));
		proc_parse_cgroup(text, n, cid, pod);
		if ((cid[0] && (strnlen(cid, sizeof(cid)) != 64)) || (pod[0] && strnlen(pod, sizeof(pod)) != 36)) {
			abort();
		}
		break;
	}
	case 2:
		if (core_parse_nt_file((const unsigned char *)text, n, &maps, &nmaps, &paths, &err) == 0) {
			for (size_t i = 0; i < nmaps; i++) {
				(void)strlen(maps[i].path);
			}
		}
		break;
	}
	free(maps);
	free(paths);
	free(text);
	return 0;
}
