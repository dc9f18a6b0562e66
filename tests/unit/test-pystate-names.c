/*
 * Thread names (pystate/names.c) on synthetic images of every row: the
 * sys.modules -> threading -> _active -> Thread -> _name chain built with
 * each row's dict layout (2.7's open table, 3.6-3.10 compact, 3.11+ str-only
 * entries and split tables) and each way an instance keeps its attributes
 * (tp_dictoffset, 3.11's managed values or dict, 3.12's tagged word, 3.13+
 * inline values valid or not). Then hostile images: counts and pointers
 * that lie must give no name, quickly, and never a crash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/offsets.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

struct img {
	struct fakepy *fp;
	const struct pyoffsets *o;
	spy_addr_t interp, t[4];
	spy_addr_t active;
	struct spy_strtab strs;
};

enum where { IN_DICT, IN_VALUES };

static void img_init(struct img *m, const struct pyoffsets *row, enum where where)
{
	memset(m, 0, sizeof(*m));
	m->o = row;
	m->fp = fakepy_new(row, row->version | 0x01f0);
	struct spy_strtab init = SPY_STRTAB_INIT;
	m->strs = init;
	m->interp = fakepy_main_interp(m->fp);
	for (int i = 0; i < 3; i++) {
		m->t[i] = fakepy_thread(m->fp, m->interp, 5000 + i);
	}
	/* t[0] "MainThread", t[1] "kafka-consumer"; t[2] threading never saw. */
	static const char *const names[2] = { "MainThread", "kafka-consumer" };
	struct fakepy_threading tg;
	fakepy_threading(m->fp, m->interp, m->t, names, 2, where == IN_VALUES, &tg);
	m->active = tg.active;
}

static struct pyrt *img_open(struct img *m)
{
	struct pyrt *rt = fakepy_open(m->fp, &m->strs);
	CHECK(rt != NULL);
	return rt;
}

static void img_release(struct img *m)
{
	fakepy_free(m->fp);
	spy_strtab_release(&m->strs);
}

/* names[i]: the name of m->t[i], however pyrt_threads orders them. */
static void names_of(struct img *m, struct pyrt *rt, const char **names)
{
	struct py_thread th[8];
	const char *got[8];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	CHECK_INT(n, 3);
	(void)pyrt_thread_names(rt, th, n, got, NULL);
	for (size_t i = 0; i < 3; i++) {
		names[i] = NULL;
		for (size_t j = 0; j < n && j < 8; j++) {
			if (th[j].tstate == m->t[i]) {
				names[i] = got[j];
			}
		}
	}
}

static void test_row(const struct pyoffsets *row, enum where where)
{
	struct img m;
	img_init(&m, row, where);
	struct pyrt *rt = img_open(&m);
	if (!rt) {
		img_release(&m);
		return;
	}
	const char *names[8];
	names_of(&m, rt, names);
	CHECK(names[0] && !strcmp(names[0], "MainThread"));
	CHECK(names[1] && !strcmp(names[1], "kafka-consumer"));
	CHECK(names[2] == NULL);
	if (!names[0] || !names[1]) {
		fprintf(stderr, "  row %x build %u where %d\n", row->version, row->build, where);
	}

	/* Hostile: a dict that claims 2^40 entries: the names of the entries
	 * read within the bound, and the cut said; then one whose table points
	 * at itself: no name, no crash, quickly. */
	spy_addr_t saved, at;
	if (row->dict_model == PYDICT_OPEN27) {
		at = m.active + row->dict_mask;
	} else {
		at = fakepy_r64(m.fp, m.active + row->dict_keys) + row->dk_nentries;
	}
	saved = fakepy_r64(m.fp, at);
	fakepy_w64(m.fp, at, 1ull << 40);
	CHECK(!pyrt_names_cut(rt));
	names_of(&m, rt, names);
	CHECK(pyrt_names_cut(rt));
	CHECK(!names[2]);
	fakepy_w64(m.fp, at, saved);
	if (row->dict_model != PYDICT_OPEN27) {
		spy_addr_t kp = m.active + row->dict_keys, keys = fakepy_r64(m.fp, kp);
		fakepy_w64(m.fp, kp, m.active);
		names_of(&m, rt, names);
		CHECK(!names[0] && !names[1]);
		fakepy_w64(m.fp, kp, 0);
		names_of(&m, rt, names);
		CHECK(!names[0] && !names[1]);
		fakepy_w64(m.fp, kp, keys);
	}
	names_of(&m, rt, names);
	CHECK(names[1] && !strcmp(names[1], "kafka-consumer"));
	pyrt_free(rt);
	img_release(&m);
}

/*
 * The sampler's path with a budget of a few reads a call: the pass stops
 * and goes on where it was, no call reads much past its budget, and the
 * names are all found in the end.
 */
static void test_budget(const struct pyoffsets *row)
{
	struct img m;
	img_init(&m, row, IN_DICT);
	struct pyrt *rt = img_open(&m);
	if (!rt) {
		img_release(&m);
		return;
	}
	struct py_thread th[8];
	size_t n = 0;
	CHECK_INT(pyrt_threads(rt, th, 8, &n, NULL), 0);
	const size_t budget = 3;
	uint64_t most = 0, calls = 0;
	bool named = false;
	for (calls = 1; calls <= 2000 && !named; calls++) {
		uint64_t before = rt->names_reads;
		pyrt_names_update(rt, th, n, calls, 1000000000ull, budget);
		/* The first call also finds threading._active, once for the process. */
		if (calls > 1) {
			most = rt->names_reads - before > most ? rt->names_reads - before : most;
		}
		named = !rt->names_pass.on;
	}
	CHECK(named);
	CHECK_INT(rt->names_scans, 1);
	/* One step past the budget at most: _active's header and a chunk, an entry's int, the
	 * Thread's type and attribute header, a chunk, a key and the name (about 20 reads). */
	CHECK(most <= budget + 24);
	CHECK(calls > 2); /* it did take several calls */
	size_t found = 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = pyrt_thread_name(rt, &th[i]);
		found += name && (!strcmp(name, "MainThread") || !strcmp(name, "kafka-consumer"));
	}
	CHECK_INT(found, 2);
	if (found != 2 || most > budget + 24) {
		fprintf(stderr, "  row %x: %zu named, at most %llu reads a call\n", row->version, found,
			(unsigned long long)most);
	}
	pyrt_free(rt);
	img_release(&m);
}

/*
 * A launched program, first seen before it imports threading. Its name
 * must come a tick or two after threading registers the main thread, not
 * at the refresh a second on: the lookup that could not read a dict is
 * no news that threading is absent (it fails the pass, which profiler/walk.c
 * then runs again with the maps read again, as tick() here does), and a
 * sys.modules not made yet is watched until it is. Either way the dict
 * watched need not change again.
 */
enum late_how { LATE_GROWN, LATE_NO_MODULES };

struct late {
	struct fakepy *fp;
	struct spy_mem mem;   /* fakepy's, with maps of its own */
	struct spy_map map;
	spy_addr_t full_hi;
	struct py_thread th[4];
	size_t n;
};

static void tick(struct late *l, struct pyrt *rt, uint64_t now)
{
	pyrt_names_update(rt, l->th, l->n, now, 1000000000ull, PYRT_NAMES_TICK_READS);
	if (pyrt_names_failing(rt)) {
		l->map.hi = l->full_hi;
		pyrt_names_update(rt, l->th, l->n, now, 1000000000ull, PYRT_NAMES_TICK_READS);
	}
}

static void test_late_threading(const struct pyoffsets *row, enum late_how how)
{
	if (row->interp_modules == PYOFF_NONE || row->module_dict == PYOFF_NONE) {
		return;
	}
	struct late l;
	memset(&l, 0, sizeof(l));
	l.fp = fakepy_new(row, row->version | 0x01f0);
	struct spy_strtab strs = SPY_STRTAB_INIT;
	spy_addr_t interp = fakepy_main_interp(l.fp), t = fakepy_thread(l.fp, interp, 5000);
	spy_addr_t modules = fakepy_r64(l.fp, interp + row->interp_modules);
	l.mem = *fakepy_mem(l.fp);
	l.map = l.mem.maps[0];
	l.full_hi = l.map.hi;
	l.mem.maps = &l.map;
	struct pyrt *rt = NULL;
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(pyrt_new(&rt, &l.mem, fakepy_hints(l.fp), &strs, &err), 0);
	if (!rt) {
		fakepy_free(l.fp);
		return;
	}
	CHECK_INT(pyrt_threads(rt, l.th, 4, &l.n, NULL), 0);
	CHECK_INT(l.n, 1);
	if (how == LATE_NO_MODULES) {
		fakepy_w64(l.fp, interp + row->interp_modules, 0);
	}
	uint64_t now = 5000000000ull;
	tick(&l, rt, now);
	CHECK(pyrt_thread_name(rt, &l.th[0]) == NULL);

	/* import threading: what it allocates is past the maps spy read. */
	l.map.hi = fakepy_alloc(l.fp, 16);
	static const char *const names[1] = { "MainThread" };
	struct fakepy_threading tg;
	fakepy_threading(l.fp, interp, &t, names, 1, false, &tg);
	if (how == LATE_GROWN) {
		/* The same sys.modules, its table grown into the new memory. */
		spy_addr_t grown = fakepy_r64(l.fp, interp + row->interp_modules);
		memcpy(fakepy_at(l.fp, modules), fakepy_at(l.fp, grown), 0x60);
		fakepy_w64(l.fp, interp + row->interp_modules, modules);
	}
	int ticks = 0;
	while (ticks < 50 && !pyrt_thread_name(rt, &l.th[0])) {
		tick(&l, rt, now += 10000000ull);
		ticks++;
	}
	const char *name = pyrt_thread_name(rt, &l.th[0]);
	CHECK(name && !strcmp(name, "MainThread"));
	CHECK(ticks <= 2);
	if (!name || ticks > 2) {
		fprintf(stderr, "  row %x build %u how %d: named after %d ticks (10 ms)\n", row->version, row->build,
			how, ticks);
	}
	pyrt_free(rt);
	fakepy_free(l.fp);
	spy_strtab_release(&strs);
}

int main(void)
{
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		test_row(row, IN_DICT);
		test_budget(row);
		test_late_threading(row, LATE_GROWN);
		test_late_threading(row, LATE_NO_MODULES);
		if (row->idict_model != PYIDICT_OFFSET) {
			test_row(row, IN_VALUES);
		}
	}
	return check_done();
}
