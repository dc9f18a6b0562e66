/*
 * Splicing Python frames into a native stack.
 *
 * Both stacks are innermost first. Every C-level call of the eval loop runs
 * one group of Python frames, and pystate flags the outermost frame of each
 * group SPY_FRAME_PY_ENTRY (before 3.11 every frame is its own group; from
 * 3.11 on, Python-to-Python calls stay inside one eval call). Which native
 * frame is the eval call of a group is known one of two ways:
 *
 *   - by where it lies (3.12+): the eval call keeps a shim frame among its
 *     locals, pystate reports its address (the group's anchor), and the
 *     native frame whose stretch of stack holds that address is the call.
 *     This needs no symbol at all, so it places frames in a stripped build
 *     whose eval loop is mostly an unnamed ".cold" part, or in one whose
 *     names are all unknown.
 *   - by name (before 3.12): the i-th frame of the eval loop's function
 *     from the inside gets the i-th group.
 *
 * The stacks can still disagree: a native walk cut short, an eval loop the
 * symbolizer cannot name (a stripped build before 3.12), a frame chain
 * ahead of the C stack by one call. Rather than guess, the rule is fixed:
 * groups are placed in order until one cannot be; from there on the native
 * frames are dropped (their place among the remaining groups is unknown)
 * and one marker frame says so, followed by the remaining groups. Eval
 * frames found by name with no group left are dropped. Both are counted, so
 * a profile that relies on this says so.
 */
#include <string.h>

#include "symbolize/symbolize.h"

/* The name up to a compiler suffix: "_PyEval_EvalFrameDefault.cold" is the eval loop too. */
static bool name_is(const char *func, const char *want)
{
	/* The first byte rules out nearly every name before a strncmp: this runs per frame and pattern. */
	if (func[0] != want[0]) {
		return false;
	}
	size_t n = strlen(want);
	return !strncmp(func, want, n) && (func[n] == 0 || func[n] == '.');
}

bool sym_is_eval(const char *func)
{
	/* 3.6+; 2.7's loop is PyEval_EvalFrameEx (in 3.x a thin wrapper, see has_default_eval). */
	return name_is(func, "_PyEval_EvalFrameDefault") || name_is(func, "PyEval_EvalFrameEx");
}

/*
 * Call machinery between one Python frame and the next or the C function it
 * calls, by version: the Python-level call is already visible, so these only
 * add noise; so do the C library's process and thread entry points at the
 * root. Exact names, or prefixes ending in '*'.
 */
static const char *const internals[] = {
	"_PyEval_EvalFrame*", "PyEval_EvalFrame*", "_PyEval_Vector", "_PyEval_EvalCode*",
	"PyEval_EvalCode*", "_PyFunction_Vectorcall", "_PyFunction_FastCall*",
	"function_code_fastcall", "PyFunction_Call*", "function_call", "method_vectorcall*",
	"method_call", "instancemethod_call", "_PyObject_Vectorcall*", "PyObject_Vectorcall*",
	"_PyObject_Call*", "PyObject_Call*", "_PyObject_FastCall*", "PyObject_FastCall*",
	"_PyObject_MakeTpCall", "_PyVectorcall_Call", "PyVectorcall_Call", "slot_tp_call",
	"call_function", "fast_function", "do_call_core", "ext_do_call", "call_trampoline",
	"cfunction_call*", "cfunction_vectorcall*", "_PyCFunction_FastCall*", "PyCFunction_Call",
	"_PyMethodDef_RawFastCall*", "vectorcall_method", "vectorcall_unbound",
	"_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3",
	"__clone", "__clone3",
};

bool sym_is_internal(const char *func)
{
	for (size_t i = 0; i < sizeof(internals) / sizeof(internals[0]); i++) {
		const char *p = internals[i];
		if (p[0] != func[0]) {
			continue;
		}
		size_t n = strlen(p);
		if (p[n - 1] == '*' ? !strncmp(func, p, n - 1) : name_is(func, p)) {
			return true;
		}
	}
	return false;
}

static bool hidden(const struct spy_frame *f, const struct sym_merge_opts *o)
{
	if (o->all) {
		return false;
	}
	/* Interned in one table: equal names are equal pointers. */
	if (f->file && (f->file == o->hide_libs[0] || f->file == o->hide_libs[1])) {
		return true;
	}
	return sym_is_eval(f->func) || sym_is_internal(f->func);
}

/*
 * In 3.x PyEval_EvalFrameEx only forwards to _PyEval_EvalFrameDefault, so it
 * counts as the eval loop only in a stack that has no _PyEval_EvalFrameDefault
 * (2.7), or one frame would get two groups.
 */
static bool has_default_eval(const struct spy_stack *native)
{
	for (size_t i = 0; i < native->n; i++) {
		if (name_is(native->v[i].func, "_PyEval_EvalFrameDefault")) {
			return true;
		}
	}
	return false;
}

/* Copy the next group of py (from *pos through its entry frame) to out. */
static void push_group(const struct spy_stack *py, size_t *pos, struct spy_stack *out)
{
	while (*pos < py->n) {
		const struct spy_frame *f = &py->v[(*pos)++];
		*spy_stack_push(out) = *f;
		if (f->flags & SPY_FRAME_PY_ENTRY) {
			return;
		}
	}
}

static size_t count_groups(const struct spy_stack *py)
{
	size_t g = 0;
	for (size_t i = 0; i < py->n; i++) {
		g += (py->v[i].flags & SPY_FRAME_PY_ENTRY) || i + 1 == py->n;
	}
	return g;
}

/* How one merge places groups: by anchor or by name. */
struct placer {
	const struct sym_merge_where *w;
	const char *eval;     /* by name: the eval loop's function */
	size_t ngroups;
};

/*
 * Whether the frame f, the last of native pc j, runs group k. By anchor:
 * the group's shim lies in the frame's stretch of stack (the outermost
 * frame walked has no known end, so it runs none).
 */
static bool runs_group(const struct placer *p, const struct spy_frame *f, size_t j, size_t k)
{
	const struct sym_merge_where *w = p->w;
	if (w) {
		return k < w->nanchors && j + 1 < w->nsps && w->sps[j] <= w->anchors[k] &&
		       w->anchors[k] < w->sps[j + 1];
	}
	return name_is(f->func, p->eval);
}

/*
 * The first pass: how many groups are placed in order (*placed), and the
 * pc after which the native frames stop mattering (*cut: all of them when
 * every group is placed, else the pc of the last placed group, or none).
 */
static void plan(const struct placer *p, const struct spy_stack *native, size_t *placed,
		 size_t *cut, struct sym_merge_counts *c)
{
	size_t k = 0, j = 0, last = 0;
	for (size_t i = 0; i < native->n; i++) {
		const struct spy_frame *f = &native->v[i];
		if (f->flags & SPY_FRAME_INLINED) {
			continue;
		}
		if (runs_group(p, f, j, k)) {
			if (k < p->ngroups) {
				last = j + 1;
				k++;
			} else if (c) {
				c->extra_eval++;
			}
		}
		j++;
	}
	*placed = k;
	*cut = k == p->ngroups ? j : last;
}

static bool is_jit(const struct spy_frame *f)
{
	return f->func[0] == '[' && !strcmp(f->func, SYM_JIT_FRAME);
}

void sym_merge(const struct spy_stack *native, const struct sym_merge_where *where,
	       const struct spy_stack *py, const struct sym_merge_opts *opts, struct spy_stack *out,
	       struct sym_merge_counts *c)
{
	spy_stack_reset(out);
	out->tid = py->tid;
	out->truncated = py->truncated;
	struct placer p = { where && where->nanchors ? where : NULL,
			    has_default_eval(native) ? "_PyEval_EvalFrameDefault" : "PyEval_EvalFrameEx",
			    count_groups(py) };
	size_t placed, cut;
	plan(&p, native, &placed, &cut, c);
	size_t pos = 0, k = 0, j = 0;
	bool after_jit = false;
	for (size_t i = 0; i < native->n && j < cut; i++) {
		const struct spy_frame *f = &native->v[i];
		bool last_of_pc = !(f->flags & SPY_FRAME_INLINED);
		if (last_of_pc && k < placed && runs_group(&p, f, j, k)) {
			push_group(py, &pos, out);
			k++;
			after_jit = false;
		}
		j += last_of_pc;
		/* Code a JIT wrote shows once, however many frames of it there are. */
		bool jit = is_jit(f);
		if (!hidden(f, opts) && !(jit && after_jit)) {
			*spy_stack_push(out) = *f;
			after_jit = jit;
		}
	}
	if (pos < py->n) {
		if (c) {
			c->extra_py += p.ngroups - placed;
		}
		if (opts->marker) {
			struct spy_frame *m = spy_stack_push(out);
			*m = (struct spy_frame){ .func = opts->marker, .kind = SPY_FRAME_SYNTHETIC };
		}
		while (pos < py->n) {
			push_group(py, &pos, out);
		}
	}
}
