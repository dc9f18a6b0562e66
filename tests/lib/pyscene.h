/*
 * A scene for the pystate walk tests (test-pystate-walk, test-pystate-memo):
 * a synthetic image (tests/lib/fakepy) laid out as one row of the offsets
 * table, two threads with frames on their stacks (the first also a 3.12+
 * shim, and on 3.11+ a generator's and a frame not started yet), and what
 * a walk of each should give.
 */
#ifndef SPY_TESTS_LIB_PYSCENE_H
#define SPY_TESTS_LIB_PYSCENE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"

struct exp {
	const char *func, *file;
	uint32_t line;
};

struct scene {
	struct fakepy *fp;
	const struct pyoffsets *row;
	struct pyoffsets layout; /* row with the scene version's per-micro quirks */
	uint32_t version;
	spy_addr_t interp, t1, t2;
	spy_addr_t f_module, f_cafe, f_func, f_klass; /* t1's frames */
	spy_addr_t c_func;
	spy_addr_t shim;   /* t1's C-stack shim (3.12+), or 0 */
	struct exp e1[8], e2[4];
	size_t n1, n2;
	size_t entry_idx; /* index in e1 of the frame above the 3.12+ shim, or SIZE_MAX */
	struct spy_strtab strs;
};

static inline bool has_qualname(const struct pyoffsets *row)
{
	return row->code_qualname != PYOFF_NONE;
}

/* What the walker should name a code object called qual. */
static inline const char *shown(const struct pyoffsets *row, const char *qual)
{
	const char *dot = strrchr(qual, '.');
	return has_qualname(row) || !dot ? qual : dot + 1;
}

static inline void expect(struct exp *e, size_t *n, const struct pyoffsets *row, const char *qual,
		   const char *file, uint32_t line)
{
	e[*n].func = shown(row, qual);
	e[*n].file = file;
	e[*n].line = line;
	(*n)++;
}

/*
 * t1: <module> -> café -> [shim, 3.12+] -> Outer.функция -> Klass.𠀀 ->
 * [gen, 3.11+ generator] -> [not-started frame, 3.11+] -> [non-code, 3.13+].
 * t2: Worker.run -> 计算. t1 holds the GIL.
 */
static inline void scene_init(struct scene *s, const struct pyoffsets *row)
{
	memset(s, 0, sizeof(*s));
	s->row = row;
	s->version = row->version | 0x01f0; /* X.Y.1 final */
	/* X.Y.1 is 3.7.1 for the 3.7 row: lay it out as 3.7.1 was. */
	s->layout = *row;
	pyoffsets_apply_quirks(&s->layout, s->version);
	s->fp = fakepy_new(&s->layout, s->version);
	s->interp = fakepy_main_interp(s->fp);
	s->entry_idx = SIZE_MAX;
	struct spy_strtab init = SPY_STRTAB_INIT;
	s->strs = init;
	struct fakepy *fp = s->fp;
	bool iframes = row->frame_model != PYFRAME_OBJECT;
	bool u8 = row->line_model == PYLINE_LNOTAB_U8;

	s->t1 = fakepy_thread(fp, s->interp, FAKEPY_PID);
	s->t2 = fakepy_thread(fp, s->interp, 4300);

	spy_addr_t c;
	c = fakepy_code(fp, "<module>", "main.py", 1, 20, 3, 10);
	s->f_module = fakepy_push_frame(fp, s->t1, c, 3, 0);
	c = fakepy_code(fp, "café", "main.py", 20, 400, 300, 320); /* 300-line gap, > 255 bytes in */
	s->f_cafe = fakepy_push_frame(fp, s->t1, c, 300, 0);
	if (row->owner_shim != PYOWNER_NONE) {
		s->shim = fakepy_push_shim(fp, s->t1);
	}
	s->c_func = fakepy_code(fp, "Outer.функция", "lib/мод.py", 400, 10, 5, u8 ? 402 : 398);
	s->f_func = fakepy_push_frame(fp, s->t1, s->c_func, 5, 0);
	c = fakepy_code(fp, "Klass.𠀀", "计算.py", 1000, 300, 250, 1005);
	s->f_klass = fakepy_push_frame(fp, s->t1, c, 250, 0);
	if (iframes) {
		/* A generator is never "incomplete", whatever _co_firsttraceable says. */
		c = fakepy_code(fp, "gen", "main.py", 70, 20, 2, 72);
		fakepy_w32(fp, c + row->code_firsttraceable, 10);
		fakepy_push_frame(fp, s->t1, c, 2, row->owner_generator);
		/* Pushed but RESUME not reached: skipped. */
		c = fakepy_code(fp, "pending", "main.py", 80, 20, 0, 80);
		fakepy_w32(fp, c + row->code_firsttraceable, 4);
		fakepy_push_frame(fp, s->t1, c, 0, 0);
	}
	if (row->frame_model == PYFRAME_IFRAME_EXEC) {
		/* f_executable that is not a code object (3.13+): skipped. */
		fakepy_push_frame(fp, s->t1, fakepy_str(fp, "not code"), 0, 0);
	}
	if (iframes) {
		expect(s->e1, &s->n1, row, "gen", "main.py", 72);
	}
	expect(s->e1, &s->n1, row, "Klass.𠀀", "计算.py", 1005);
	expect(s->e1, &s->n1, row, "Outer.функция", "lib/мод.py", u8 ? 402 : 398);
	if (row->owner_shim != PYOWNER_NONE) {
		s->entry_idx = s->n1 - 1;
	}
	expect(s->e1, &s->n1, row, "café", "main.py", 320);
	expect(s->e1, &s->n1, row, "<module>", "main.py", 10);

	c = fakepy_code(fp, "Worker.run", "threading.py", 50, 30, 7, 60);
	fakepy_push_frame(fp, s->t2, c, 7, 0);
	c = fakepy_code(fp, "计算", "w.py", 1, 4, 0, 1);
	fakepy_push_frame(fp, s->t2, c, 0, 0);
	expect(s->e2, &s->n2, row, "计算", "w.py", 1);
	expect(s->e2, &s->n2, row, "Worker.run", "threading.py", 60);

	fakepy_set_gil(fp, s->interp, s->t1);
}

static inline void scene_release(struct scene *s)
{
	fakepy_free(s->fp);
	spy_strtab_release(&s->strs);
}

static inline struct pyrt *open_rt(struct scene *s)
{
	struct pyrt *rt = fakepy_open(s->fp, &s->strs);
	CHECK(rt != NULL);
	return rt;
}

/* scene_init and open_rt; on failure the scene is released and NULL returned. */
static inline struct pyrt *scene_open(struct scene *s, const struct pyoffsets *row)
{
	scene_init(s, row);
	struct pyrt *rt = open_rt(s);
	if (!rt) {
		scene_release(s);
	}
	return rt;
}

static inline void check_stack(const struct spy_stack *st, const struct exp *e, size_t n, uint32_t version)
{
	CHECK_INT(st->n, n);
	CHECK_INT(st->truncated, 0);
	for (size_t i = 0; i < n && i < st->n; i++) {
		CHECK_STR(st->v[i].func, e[i].func);
		CHECK_STR(st->v[i].file, e[i].file);
		if (st->v[i].line != e[i].line) {
			fprintf(stderr, "  version %x frame %zu (%s)\n", version, i, e[i].func);
		}
		CHECK_INT(st->v[i].line, e[i].line);
		CHECK_INT(st->v[i].kind, SPY_FRAME_PYTHON);
		CHECK(st->v[i].addr != 0);
	}
}

#endif
