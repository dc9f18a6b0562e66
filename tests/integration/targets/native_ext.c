/*
 * A tiny C extension for test_native.py and bench/native-overhead, built at
 * test time against each interpreter's own headers (2.7 and 3.x alike).
 *
 *   spin_and_call(callback, iters): spins iters rounds in C, then calls
 *       callback() (Python), so a sample finds either this function alone on
 *       top of its Python caller, or the callback above it.
 *   deep(depth, iters): recurses depth levels in C (spyext_recurse), then
 *       spins iters rounds at the bottom: a deep, purely native stack.
 *   start_workers(duties): starts one pthread per duty (percent, 0-100)
 *       that never touches Python (no thread state, no GIL: an OpenMP or
 *       BLAS worker's kind; duty 0: an idle pool's): each period of 100 ms it spins duty% of it in
 *       spin_native_worker and sleeps the rest. Returns their TIDs, once
 *       every one has started.
 *
 * Built with -fno-inline -fno-optimize-sibling-calls so that every C call is
 * a real frame; the work after each call keeps it from being a tail call.
 */
#include <Python.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

unsigned long spyext_spin(unsigned long iters);
unsigned long spyext_recurse(int depth, unsigned long iters);
PyObject *spyext_spin_and_call(PyObject *self, PyObject *args);
PyObject *spyext_deep(PyObject *self, PyObject *args);
PyObject *spyext_start_workers(PyObject *self, PyObject *args);
void spin_native_worker(long ns);

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

#define MAX_WORKERS 256
#define PERIOD_NS 100000000L

static long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* The busy loop: the clock is read once every 4096 rounds, so samples land here. */
void spin_native_worker(long ns)
{
	long until = now_ns() + ns;
	unsigned long x = 0;
	do {
		for (int i = 0; i < 4096; i++) {
			x += (unsigned long)i * (unsigned long)i;
			sink = x;
		}
	} while (now_ns() < until);
}

static struct worker {
	pthread_t th;
	int duty;
	volatile long tid;
} workers[MAX_WORKERS];
static int nworkers;

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	w->tid = (long)syscall(SYS_gettid);
	long on = PERIOD_NS / 100 * w->duty;
	for (;;) {
		if (on) {
			spin_native_worker(on);
		}
		if (on < PERIOD_NS) {
			struct timespec off = { 0, PERIOD_NS - on };
			nanosleep(&off, NULL);
		}
	}
	return NULL;
}

PyObject *spyext_start_workers(PyObject *self, PyObject *args)
{
	PyObject *duties;
	if (!PyArg_ParseTuple(args, "O", &duties) || !PyTuple_Check(duties)) {
		PyErr_SetString(PyExc_TypeError, "start_workers(tuple of duties)");
		return NULL;
	}
	int first = nworkers;
	for (Py_ssize_t i = 0; i < PyTuple_Size(duties) && nworkers < MAX_WORKERS; i++) {
		struct worker *w = &workers[nworkers];
		long d = PyLong_AsLong(PyTuple_GetItem(duties, i));
		w->duty = d < 0 ? 0 : d > 100 ? 100 : (int)d;
		if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
			break;
		}
		nworkers++;
	}
	PyObject *tids = PyTuple_New(nworkers - first);
	for (int i = first; i < nworkers; i++) {
		while (!workers[i].tid) {
			usleep(1000);
		}
		PyTuple_SetItem(tids, i - first, PyLong_FromLong(workers[i].tid));
	}
	return tids;
}

static PyMethodDef methods[] = {
	{ "spin_and_call", spyext_spin_and_call, METH_VARARGS, NULL },
	{ "deep", spyext_deep, METH_VARARGS, NULL },
	{ "start_workers", spyext_start_workers, METH_VARARGS, NULL },
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
