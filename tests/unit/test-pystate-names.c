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

	/* Hostile: a dict that claims 2^40 entries, then one whose table
	 * points at itself: no name, no crash, quickly. */
	spy_addr_t saved, at;
	if (row->dict_model == PYDICT_OPEN27) {
		at = m.active + row->dict_mask;
	} else {
		at = fakepy_r64(m.fp, m.active + row->dict_keys) + row->dk_nentries;
	}
	saved = fakepy_r64(m.fp, at);
	fakepy_w64(m.fp, at, 1ull << 40);
	names_of(&m, rt, names);
	CHECK(!names[0] && !names[1] && !names[2]);
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

int main(void)
{
	for (unsigned i = 0; i < pyoffsets_count; i++) {
		const struct pyoffsets *row = &pyoffsets_table[i];
		test_row(row, IN_DICT);
		if (row->idict_model != PYIDICT_OFFSET) {
			test_row(row, IN_VALUES);
		}
	}
	return check_done();
}
