/*
 * A tiny C extension for test_native.py and bench/native-overhead, built at
 * test time against each interpreter's own headers (2.7 and 3.x alike).
 *
 *   spin_and_call(callback, iters): spins iters rounds in C, then calls
 *       callback() (Python), so a sample finds either this function alone on
 *       top of its Python caller, or the callback above it.
 *   deep(depth, iters): recurses depth levels in C (spyext_recurse), then
 *       spins iters rounds at the bottom: a deep, purely native stack.
 *
 * Built with -fno-inline -fno-optimize-sibling-calls so that every C call is
 * a real frame; the work after each call keeps it from being a tail call.
 */
#include <Python.h>

static volatile unsigned long sink;

unsigned long spyext_spin(unsigned long iters);
unsigned long spyext_recurse(int depth, unsigned long iters);
PyObject *spyext_spin_and_call(PyObject *self, PyObject *args);
PyObject *spyext_deep(PyObject *self, PyObject *args);

unsigned long spyext_spin(unsigned long iters)
{
	unsigned long x = 0;
	for (unsigned long i = 0; i < iters; i++) {
		x += i * i;
		sink = x;
	}
	return x;
}

unsigned long spyext_recurse(int depth, unsigned long iters)
{
	if (depth <= 1) {
		return spyext_spin(iters);
	}
	return spyext_recurse(depth - 1, iters) + 1;
}

PyObject *spyext_spin_and_call(PyObject *self, PyObject *args)
{
	PyObject *callback;
	unsigned long iters;
	if (!PyArg_ParseTuple(args, "Ok", &callback, &iters)) {
		return NULL;
	}
	/* The loop is here, not in a helper: the samples in C land in this very function. */
	unsigned long x = 0;
	for (unsigned long i = 0; i < iters; i++) {
		x += i * i;
		sink = x;
	}
	PyObject *r = PyObject_CallObject(callback, NULL);
	sink = x;
	return r;
}

PyObject *spyext_deep(PyObject *self, PyObject *args)
{
	int depth;
	unsigned long iters;
	if (!PyArg_ParseTuple(args, "ik", &depth, &iters)) {
		return NULL;
	}
	unsigned long x = spyext_recurse(depth, iters);
	return Py_BuildValue("k", x);
}

static PyMethodDef methods[] = {
	{ "spin_and_call", spyext_spin_and_call, METH_VARARGS, NULL },
	{ "deep", spyext_deep, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

#if PY_MAJOR_VERSION >= 3
static struct PyModuleDef module = { PyModuleDef_HEAD_INIT, "spyext", NULL, -1, methods,
				     NULL, NULL, NULL, NULL };

PyMODINIT_FUNC PyInit_spyext(void)
{
	return PyModule_Create(&module);
}
#else
PyMODINIT_FUNC initspyext(void)
{
	Py_InitModule("spyext", methods);
}
#endif
