/*
 * Splicing Python frames into a native stack.
 *
 * Both stacks are innermost first. Every C-level call of the eval loop runs
 * one group of Python frames, and pystate flags the outermost frame of each
 * group SPY_FRAME_PY_ENTRY (before 3.11 every frame is its own group; from
 * 3.11 on, Python-to-Python calls stay inside one eval call). So the i-th
 * eval frame from the inside gets the i-th group, and no address matching is
 * needed: the order alone pairs them.
 *
 * The stacks are read at one moment, but they can still disagree: a native
 * walk cut short, an eval frame the symbolizer could not name (a stripped
 * build), a frame chain ahead of the C stack by one call. Rather than guess,
 * the rule is fixed: eval frames with no group left are dropped, groups
 * with no eval frame left go at the root end, in order, and both are
 * counted so a profile that relies on this says so.
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

void sym_merge(const struct spy_stack *native, const struct spy_stack *py,
	       const struct sym_merge_opts *opts, struct spy_stack *out, struct sym_merge_counts *c)
{
	spy_stack_reset(out);
	out->tid = py->tid;
	out->truncated = py->truncated;
	const char *eval = has_default_eval(native) ? "_PyEval_EvalFrameDefault" : "PyEval_EvalFrameEx";
	size_t pos = 0;
	for (size_t i = 0; i < native->n; i++) {
		const struct spy_frame *f = &native->v[i];
		if (name_is(f->func, eval)) {
			if (pos < py->n) {
				push_group(py, &pos, out);
			} else if (c) {
				c->extra_eval++;
			}
		}
		if (!hidden(f, opts)) {
			*spy_stack_push(out) = *f;
		}
	}
	if (pos < py->n && c) {
		c->extra_py++;
	}
	while (pos < py->n) {
		push_group(py, &pos, out);
	}
}
