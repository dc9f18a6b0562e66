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
	spy_addr_t module_type, thread_type, active;
	struct spy_strtab strs;
};

enum where { IN_DICT, IN_VALUES };

/* A Thread-like instance whose attribute attr is value, kept as `where` says. */
static spy_addr_t mk_instance(struct img *m, const char *attr, spy_addr_t value, enum where where)
{
	const struct pyoffsets *o = m->o;
	spy_addr_t keys[2] = { fakepy_str(m->fp, "_target"), fakepy_str(m->fp, attr) };
	spy_addr_t vals[2] = { fakepy_str(m->fp, "run"), value };
	const int64_t basicsize = 0x20;
	spy_addr_t obj = fakepy_alloc(m->fp, 0x40 + basicsize + 0x40) + 0x40; /* room before it */
	fakepy_w64(m->fp, obj, 1);
	fakepy_w64(m->fp, obj + o->ob_type, m->thread_type);
	if (where == IN_DICT || o->idict_model == PYIDICT_OFFSET) {
		spy_addr_t d = fakepy_dict(m->fp, keys, vals, 2, true);
		switch (o->idict_model) {
		case PYIDICT_OFFSET:
			fakepy_w64(m->fp, obj + 0x18, d); /* tp_dictoffset 0x18 */
			break;
		default:
			fakepy_w64(m->fp, obj - o->managed_dict_off, d);
			break;
		}
		return obj;
	}
	/* Split: the class's shared keys, this instance's values. */
	spy_addr_t values;
	if (o->idict_model == PYIDICT_INLINE313) {
		values = obj + basicsize;
		fakepy_w8(m->fp, values + o->dictvalues_valid, 1);
	} else {
		values = fakepy_alloc(m->fp, 0x40);
	}
	spy_addr_t ck = fakepy_dict_keys(m->fp, keys, vals, 2, true, values + o->dictvalues_values);
	fakepy_w64(m->fp, m->thread_type + o->heaptype_cached_keys, ck);
	if (o->idict_model == PYIDICT_MANAGED311) {
		fakepy_w64(m->fp, obj - o->managed_values_off, values);
	} else if (o->idict_model == PYIDICT_TAGGED312) {
		fakepy_w64(m->fp, obj - o->managed_dict_off, values - 1);
	}
	return obj;
}

static void img_init(struct img *m, const struct pyoffsets *row, enum where where)
{
	memset(m, 0, sizeof(*m));
	m->o = row;
	m->fp = fakepy_new(row, row->version | 0x01f0);
	struct spy_strtab init = SPY_STRTAB_INIT;
	m->strs = init;
	const struct pyoffsets *o = row;
	m->interp = fakepy_main_interp(m->fp);
	for (int i = 0; i < 3; i++) {
		m->t[i] = fakepy_thread(m->fp, m->interp, 5000 + i);
	}
	m->module_type = fakepy_type(m->fp, "module");
	m->thread_type = fakepy_object(m->fp, fakepy_type_type(m->fp), 0x600);
	fakepy_w64(m->fp, m->thread_type + o->type_name, fakepy_r64(m->fp, m->module_type + o->type_name));
	uint64_t flags = 0;
	if (o->tpflags_managed_dict != PYOFF_NONE) {
		flags |= o->tpflags_managed_dict;
	}
	if (o->tpflags_inline_values != PYOFF_NONE && where == IN_VALUES) {
		flags |= o->tpflags_inline_values;
	}
	fakepy_w64(m->fp, m->thread_type + o->type_flags, flags);
	fakepy_w64(m->fp, m->thread_type + o->type_basicsize, 0x20);
	fakepy_w64(m->fp, m->thread_type + o->type_dictoffset,
		   o->idict_model == PYIDICT_OFFSET ? 0x18 : 0);

	const char *attr = o->str_model == PYSTR_BYTES27 ? "_Thread__name" : "_name";
	/* t[0] "MainThread", t[1] "kafka-consumer"; t[2] threading never saw. */
	spy_addr_t ak[2] = { fakepy_int(m->fp, fakepy_thread_id(m->fp, m->t[0])),
			     fakepy_int(m->fp, fakepy_thread_id(m->fp, m->t[1])) };
	spy_addr_t av[2] = { mk_instance(m, attr, fakepy_str(m->fp, "MainThread"), where),
			     mk_instance(m, attr, fakepy_str(m->fp, "kafka-consumer"), where) };
	m->active = fakepy_dict(m->fp, ak, av, 2, false);
	spy_addr_t mk[2] = { fakepy_str(m->fp, "_active"), fakepy_str(m->fp, "_limbo") };
	spy_addr_t mv[2] = { m->active, fakepy_dict(m->fp, NULL, NULL, 0, true) };
	spy_addr_t module = fakepy_object(m->fp, m->module_type, 0x80);
	fakepy_w64(m->fp, module + o->module_dict, fakepy_dict(m->fp, mk, mv, 2, true));
	spy_addr_t sk[3] = { fakepy_str(m->fp, "sys"), fakepy_str(m->fp, "threading"),
			     fakepy_str(m->fp, "os") };
	spy_addr_t sv[3] = { fakepy_object(m->fp, m->module_type, 0x80), module,
			     fakepy_object(m->fp, m->module_type, 0x80) };
	fakepy_w64(m->fp, m->interp + o->interp_modules, fakepy_dict(m->fp, sk, sv, 3, true));
}

static struct pyrt *img_open(struct img *m)
{
	struct pyrt *rt = NULL;
	struct spy_err err = SPY_ERR_INIT;
	int rc = pyrt_new(&rt, fakepy_mem(m->fp), fakepy_hints(m->fp), &m->strs, &err);
	if (rc < 0) {
		fprintf(stderr, "pyrt_new(%x): %s\n", m->o->version, err.msg);
	}
	CHECK_INT(rc, 0);
	return rc < 0 ? NULL : rt;
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
