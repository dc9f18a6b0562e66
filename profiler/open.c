/*
 * Opening a process or a core and finding its Python runtime (see
 * internal.h). The handle comes from sampler, CPython's anchors from the
 * ELF file that holds the interpreter (symbolize), and pystate is handed
 * those anchors as hints: the three meet here and nowhere else.
 *
 * The interpreter lives either in a shared libpython (pyenv's
 * --enable-shared builds, most distros' "python3-dev" setups) or statically
 * in the executable (Debian's /usr/bin/python3.11). libpython wins when both
 * are mapped: a static python that loads libpython is not a thing, but an
 * embedding application (uwsgi, a C++ server) is an executable without
 * CPython symbols of its own that maps libpython.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/credopen.h"
#include "common/log.h"
#include "common/util.h"
#include "profiler/internal.h"
#include "symbolize/symbolize.h"

unsigned prof_version_from_path(const char *path)
{
	const char *b = spy_basename(path);
	const char *p = strstr(b, "python");
	if (!p) {
		return 0;
	}
	p += strlen("python");
	if ((p[0] != '2' && p[0] != '3') || p[1] != '.' || p[2] < '0' || p[2] > '9') {
		return 0;
	}
	unsigned major = (unsigned)(p[0] - '0');
	unsigned minor = 0;
	const char *q = p + 2;
	for (int i = 0; i < 3 && *q >= '0' && *q <= '9'; i++, q++) {
		minor = minor * 10 + (unsigned)(*q - '0');
	}
	return (major << 24) | (minor << 16);
}

/* The mapped file that should hold the interpreter's symbols. */
static const char *pick_binary(const struct spy_mem *mem, const char *exe)
{
	for (size_t i = 0; i < mem->nmaps; i++) {
		if (mem->maps[i].path[0] == '/' && spy_is_libpython(mem->maps[i].path)) {
			return mem->maps[i].path;
		}
	}
	for (size_t i = 0; i < mem->nmaps; i++) {
		if (!strcmp(mem->maps[i].path, exe)) {
			return mem->maps[i].path;
		}
	}
	return NULL;
}

static const struct spy_mem *pp_mem(const struct prof_process *pp)
{
	return pp->h.ops->mem(&pp->h);
}

static bool is_core(const struct prof_process *pp)
{
	return !pp->h.tracer;
}

/*
 * The file holding the runtime, opened the one safe way: a live process's
 * as it has it mapped (common/mapfile.h), a core's under the core's rules
 * (core_open_file: named by the user, or its build-id checked).
 */
static int open_binary(const struct prof_process *t, struct spy_err *err)
{
	int fd = t->h.ops->open_mapped(&t->h, t->binary);
	if (is_core(t) && fd < 0) {
		return spy_err_set(err, SPY_EIO,
				   "cannot read %s, which the core's process ran: %s (name the file with "
				   "--exe, or the root it lives in with --root)", t->binary,
				   fd == -ESTALE ? "the file of that name is another build"
				   : fd == -EPERM ? "the core records no build-id to check it against"
				   : strerror(-fd));
	}
	if (fd == -ESTALE) {
		return spy_err_set(err, SPY_EIO,
				   "cannot open %s: the file of that name is not the one process %d runs "
				   "(replaced, or in another root)", t->binary, (int)t->pid);
	}
	if (fd < 0) {
		return spy_err_set(err, SPY_EIO, "cannot open %s of process %d: %s", t->binary,
				   (int)t->pid, strerror(-fd));
	}
	return fd;
}

/* The run-time address of section name of the mapped ELF path, or 0. */
static spy_addr_t mapped_section(const struct prof_process *t, const char *path, const char *name)
{
	const struct spy_mem *mem = pp_mem(t);
	struct sym_elf *e = NULL;
	uint64_t bias, addr = 0, size;
	spy_addr_t at = 0;
	int fd = t->h.ops->open_mapped(&t->h, path);
	if (fd < 0 || sym_elf_open(&e, fd, path, NULL) < 0) {
		return 0;
	}
	if (sym_elf_section(e, name, &addr, &size) && addr &&
	    sym_elf_bias(e, mem->maps, mem->nmaps, path, &bias)) {
		at = bias + addr;
	}
	sym_elf_free(e);
	return at;
}

int prof_async_hints(struct prof_process *t, bool reread_maps, struct pyrt_async_hints *h)
{
	memset(h, 0, sizeof(*h));
	if (reread_maps && t->h.tracer) {
		t->h.tracer->read_maps(&t->h);
	}
	const struct spy_mem *mem = pp_mem(t);
	for (size_t i = 0; i < mem->nmaps && !h->debug_offsets; i++) {
		const char *b = spy_basename(mem->maps[i].path);
		if (mem->maps[i].offset == 0 && mem->maps[i].path[0] == '/' &&
		    !strncmp(b, "_asyncio.", strlen("_asyncio.")) && strstr(b, ".so")) {
			h->debug_offsets = mapped_section(t, mem->maps[i].path, ".AsyncioDebug");
		}
	}
	/* Built in (Debian's 3.15): in the interpreter's own ELF, or never. */
	if (!h->debug_offsets && !t->no_builtin_asyncio) {
		h->debug_offsets = mapped_section(t, t->binary, ".AsyncioDebug");
		t->no_builtin_asyncio = !h->debug_offsets;
	}
	spy_log(SPY_LOG_DEBUG, "_AsyncioDebug at 0x%llx", (unsigned long long)h->debug_offsets);
	return 0;
}

static void add_symbol(const struct sym_elf *e, uint64_t bias, const char *name, spy_addr_t *out)
{
	uint64_t v;
	if (sym_elf_lookup(e, name, &v) && v) {
		*out = bias + v;
		spy_log(SPY_LOG_DEBUG, "%s at 0x%llx", name, (unsigned long long)*out);
	}
}

/*
 * Where the GIL is in 2.7 and 3.6, whose runtime does not say: 3.6's
 * statics in ceval_gil.h, 2.7's interpreter_lock (a PyThread lock: a sem_t
 * with pyenv's and distros' builds). Both only in a non-stripped .symtab;
 * without them dump cannot tell a GIL wait from a lock wait, and says idle.
 */
static void add_gil_symbols(const struct sym_elf *e, uint64_t bias, struct pyrt_hints *h)
{
	static const char *const statics[] = { "gil_mutex", "gil_cond", "switch_mutex", "switch_cond" };
	for (size_t i = 0; i < SPY_ARRAY_SIZE(statics); i++) {
		add_symbol(e, bias, statics[i], &h->gil_static[i]);
		h->gil_static_size[i] = (uint32_t)(i % 2 ? sizeof(pthread_cond_t) : sizeof(pthread_mutex_t));
	}
	add_symbol(e, bias, "interpreter_lock", &h->gil_lock_ptr);
	h->gil_lock_size = (uint32_t)sizeof(sem_t);
}

static int fill_hints(struct prof_process *t, struct pyrt_hints *h, struct spy_err *err)
{
	const struct spy_mem *mem = pp_mem(t);
	struct sym_elf *e = NULL;
	int rc = open_binary(t, err);
	if (rc < 0) {
		return rc;
	}
	rc = sym_elf_open(&e, rc, t->binary, err);
	if (rc < 0) {
		goto out;
	}
	uint64_t bias;
	if (!sym_elf_bias(e, mem->maps, mem->nmaps, t->binary, &bias)) {
		rc = spy_err_set(err, SPY_ENOPY, "cannot find where %s is loaded in process %d",
				 t->binary, (int)t->pid);
		goto out;
	}
	memset(h, 0, sizeof(*h));
	h->binary = t->binary;
	/* The main thread's TID as the target's memory holds it: its own namespace's. */
	h->pid = (int32_t)(int)(t->h.tracer ? t->h.tracer->ns_pid(&t->h) : t->pid);
	h->version_hint = prof_version_from_path(t->binary);
	add_symbol(e, bias, "_PyRuntime", &h->runtime);
	add_symbol(e, bias, "Py_Version", &h->py_version);
	add_symbol(e, bias, "interp_head", &h->interp_head);
	add_symbol(e, bias, "PyInterpreterState_Head", &h->interp_head_fn);
	add_symbol(e, bias, "_PyThreadState_Current", &h->tstate_current);
	add_gil_symbols(e, bias, h);

	uint64_t addr, size;
	if (!h->runtime && sym_elf_section(e, ".PyRuntime", &addr, &size) && addr) {
		h->runtime = bias + addr;
	}
	spy_addr_t lo = 0, hi = 0;
	static const char *const data_sections[] = { ".data", ".bss" };
	for (size_t i = 0; i < SPY_ARRAY_SIZE(data_sections); i++) {
		if (sym_elf_section(e, data_sections[i], &addr, &size) && addr) {
			if (!lo || bias + addr < lo) {
				lo = bias + addr;
			}
			if (bias + addr + size > hi) {
				hi = bias + addr + size;
			}
		}
	}
	h->data_lo = lo;
	h->data_hi = hi;

	/*
	 * A fully stripped python still has its data: pystate can scan it, but
	 * only bother when the file is named like an interpreter, so that a
	 * dump of an unrelated program fails at once.
	 */
	bool scannable = h->version_hint && h->data_lo < h->data_hi;
	if (!h->runtime && !h->py_version && !h->interp_head && !h->interp_head_fn &&
	    !h->tstate_current && !scannable) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in process %d (%s)",
				 (int)t->pid, t->h.ops->cmdline(&t->h));
		goto out;
	}
	rc = 0;
out:
	sym_elf_free(e);
	return rc;
}

/* Find the runtime of an opened process or core. */
static int find_runtime(struct prof_process *t, struct spy_err *err)
{
	struct pyrt_hints hints;
	const char *bin = pick_binary(pp_mem(t), t->h.ops->exe(&t->h));
	if (!bin) {
		return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in process %d (%s)",
				   (int)t->pid, t->h.ops->cmdline(&t->h));
	}
	t->binary = spy_xstrdup(bin);
	int rc = fill_hints(t, &hints, err);
	if (rc < 0) {
		return rc;
	}
	return pyrt_new(&t->rt, pp_mem(t), &hints, t->strs, err);
}

#ifdef SPY_TEST_HOOKS
int (*prof_test_open)(pid_t pid, struct spy_process *h, struct pyrt_hints *hints);
#endif

/* The root frame of pp's samples. */
static void name_root(struct prof_process *pp)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "process %d \"%s\"", (int)pp->pid, pp->h.ops->cmdline(&pp->h));
	pp->root = spy_strtab_interns(pp->strs, b.buf);
	spy_buf_release(&b);
}

/* The handle is open: its runtime, and the root frame. */
static int opened(struct prof_process **out, struct prof_process *pp, struct spy_err *err)
{
	pp->pid = pp->h.ops->pid(&pp->h);
	int rc = find_runtime(pp, err);
	if (rc < 0) {
		prof_process_free(pp);
		return rc;
	}
	name_root(pp);
	*out = pp;
	return 0;
}

int prof_process_open(struct prof_process **out, pid_t pid, bool prefetch, struct spy_strtab *strs,
		      struct spy_err *err)
{
	struct prof_process *pp = spy_xcalloc(1, sizeof(*pp));
	pp->strs = strs;
#ifdef SPY_TEST_HOOKS
	if (prof_test_open) {
		struct pyrt_hints hints;
		int rc = prof_test_open(pid, &pp->h, &hints);
		if (rc == 0) {
			pp->pid = pp->h.ops->pid(&pp->h);
			pp->binary = spy_xstrdup("python");
			rc = pyrt_new(&pp->rt, pp_mem(pp), &hints, strs, err);
		}
		if (rc < 0) {
			prof_process_free(pp);
			return rc;
		}
		name_root(pp);
		*out = pp;
		return 0;
	}
#endif
	int rc = spy_process_open_pid(&pp->h, pid, err);
	if (rc < 0) {
		free(pp);
		return rc;
	}
	/*
	 * Whose rights the files its memory names are opened with is decided
	 * from what it was before any of that memory was read, as well as from
	 * what it is when they are opened (common/credopen.h). Taken once the
	 * handle is open, whose exec check (proc_same_image) starts before
	 * this: an exec between the two is seen, and no stack read after it
	 * has its files opened with these credentials (tick.c's image_check).
	 */
	pp->has_creds = spy_creds_read(pid, &pp->creds) == 0;
	rc = opened(out, pp, err);
	/* Once the runtime is found: what finding it read is no pattern a walk repeats. */
	if (rc == 0) {
		spy_process_prefetch(&pp->h, prefetch);
	}
	return rc;
}

int prof_process_open_watched(struct prof_process **out, pid_t pid, struct spy_strtab *strs,
			      struct spy_err *err)
{
	struct prof_process *pp = spy_xcalloc(1, sizeof(*pp));
	pp->strs = strs;
	pp->watched = true;
#ifdef SPY_TEST_HOOKS
	int rc = prof_test_open ? prof_test_open(pid, &pp->h, NULL) : spy_process_open_pid(&pp->h, pid, err);
#else
	int rc = spy_process_open_pid(&pp->h, pid, err);
#endif
	if (rc < 0) {
		free(pp);
		return rc;
	}
	pp->pid = pp->h.ops->pid(&pp->h);
	name_root(pp);
	*out = pp;
	return 0;
}

int prof_process_open_core(struct prof_process **out, const char *path, const char *exe, const char *root,
			   struct spy_strtab *strs, struct spy_err *err)
{
	struct prof_process *pp = spy_xcalloc(1, sizeof(*pp));
	pp->strs = strs;
	int rc = spy_process_open_core(&pp->h, path, exe, root, err);
	if (rc < 0) {
		free(pp);
		return rc;
	}
	return opened(out, pp, err);
}

int prof_native_start(struct prof_process *pp, bool all, struct spy_err *err)
{
	if (pp->nat) {
		return 0;
	}
	pp->nat = spy_xcalloc(1, sizeof(*pp->nat));
	int rc = native_init(pp->nat, &pp->h, pp->binary, pp->strs, all, err);
	if (rc < 0) {
		free(pp->nat);
		pp->nat = NULL;
	}
	return rc;
}

void prof_process_free(struct prof_process *pp)
{
	if (!pp) {
		return;
	}
	if (pp->h.ops) {
		spy_process_log_stats(&pp->h);
	}
	if (pp->nat) {
		native_log_stats(pp->nat);
		native_release(pp->nat);
		free(pp->nat);
	}
	prof_threads_clear(pp);
	free(pp->th);
	free(pp->tids);
	free(pp->un);
	spy_hmap_release(&pp->th_index);
	for (size_t i = 0; i < pp->walloc; i++) {
		spy_stack_release(&pp->w[i].stack);
		native_pcs_release(&pp->w[i].pcs);
	}
	free(pp->w);
	free(pp->py);
	pyrt_free(pp->rt);
	spy_process_close(&pp->h);
	free(pp->binary);
	spy_creds_release(&pp->creds);
	free(pp);
}

pid_t prof_process_pid(const struct prof_process *pp)
{
	return pp->pid;
}

const struct spy_creds *prof_process_creds(const struct prof_process *pp)
{
	return pp->has_creds ? &pp->creds : NULL;
}

const char *prof_process_cmdline(const struct prof_process *pp)
{
	return pp->h.ops->cmdline(&pp->h);
}

const char *prof_process_python(const struct prof_process *pp)
{
	return pp->rt ? pyrt_version_string(pp->rt) : "";
}
