/*
 * Turning a pid into proc + pyrt (see target.h).
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

#include "cmd/target.h"
#include "common/log.h"
#include "common/mapfile.h"
#include "common/util.h"
#include "symbolize/symbolize.h"

int target_is_libpython(const char *path)
{
	const char *b = spy_basename(path);
	const char *p = strstr(b, "libpython");
	if (p != b) {
		return 0;
	}
	p += strlen("libpython");
	/* A digit after the dot: libpython3.so is the stable-ABI stub, not the interpreter. */
	if ((p[0] != '2' && p[0] != '3') || p[1] != '.' || p[2] < '0' || p[2] > '9') {
		return 0;
	}
	return strstr(p, ".so") != NULL;
}

unsigned target_version_from_path(const char *path)
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
		if (mem->maps[i].path[0] == '/' && target_is_libpython(mem->maps[i].path)) {
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

static const struct spy_mem *target_mem(const struct target *t)
{
	return t->core ? core_mem(t->core) : proc_mem(t->proc);
}

int target_pid(const struct target *t)
{
	return t->core ? (int)core_pid(t->core) : (int)proc_pid(t->proc);
}

const char *target_cmdline(const struct target *t)
{
	return t->core ? core_cmdline(t->core) : proc_cmdline(t->proc);
}

/* The file mapped at offset 0 as path: a live process's as it has it
 * mapped (common/mapfile.h), a core's under the core's rules. */
static int open_mapped_path(const struct target *t, const char *path)
{
	if (t->core) {
		return core_open_file(t->core, path);
	}
	const struct spy_mem *mem = proc_mem(t->proc);
	int fd = -ENOENT;
	for (size_t i = 0; i < mem->nmaps && fd < 0; i++) {
		if (mem->maps[i].offset == 0 && !strcmp(mem->maps[i].path, path)) {
			fd = spy_open_mapped(proc_pid(t->proc), &mem->maps[i]);
		}
	}
	return fd;
}

/*
 * The file holding the runtime, opened the one safe way: a live process's
 * as it has it mapped (common/mapfile.h), a core's under the core's rules
 * (core_open_file: named by the user, or its build-id checked).
 */
static int open_binary(const struct target *t, struct spy_err *err)
{
	int fd = open_mapped_path(t, t->binary);
	if (t->core && fd < 0) {
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
				   "(replaced, or in another root)", t->binary, target_pid(t));
	}
	if (fd < 0) {
		return spy_err_set(err, SPY_EIO, "cannot open %s of process %d: %s", t->binary,
				   target_pid(t), strerror(-fd));
	}
	return fd;
}

/* The run-time address of section name of the mapped ELF path, or 0. */
static spy_addr_t mapped_section(const struct target *t, const char *path, const char *name)
{
	const struct spy_mem *mem = target_mem(t);
	struct sym_elf *e = NULL;
	uint64_t bias, addr = 0, size;
	spy_addr_t at = 0;
	int fd = open_mapped_path(t, path);
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

int target_async_hints(struct target *t, bool reread_maps, struct pyrt_async_hints *h)
{
	memset(h, 0, sizeof(*h));
	if (reread_maps && t->proc && proc_read_maps(t->proc, NULL) < 0) {
		return -SPY_EGONE;
	}
	const struct spy_mem *mem = target_mem(t);
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

static int fill_hints(struct target *t, struct pyrt_hints *h, struct spy_err *err)
{
	const struct spy_mem *mem = target_mem(t);
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
				 t->binary, target_pid(t));
		goto out;
	}
	memset(h, 0, sizeof(*h));
	h->binary = t->binary;
	h->pid = (int32_t)target_pid(t);
	h->version_hint = target_version_from_path(t->binary);
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
				 target_pid(t), target_cmdline(t));
		goto out;
	}
	rc = 0;
out:
	sym_elf_free(e);
	return rc;
}

/* Find the runtime of an opened process or core. */
static int find_runtime(struct target *t, struct spy_err *err)
{
	struct pyrt_hints hints;
	const char *exe = t->core ? core_exe(t->core) : proc_exe(t->proc);
	const char *bin = pick_binary(target_mem(t), exe);
	if (!bin) {
		return spy_err_set(err, SPY_ENOPY, "no Python interpreter found in process %d (%s)",
				   target_pid(t), target_cmdline(t));
	}
	t->binary = spy_xstrdup(bin);
	int rc = fill_hints(t, &hints, err);
	if (rc < 0) {
		return rc;
	}
	return pyrt_new(&t->rt, target_mem(t), &hints, t->strs, err);
}

int target_open_pid(struct target *t, pid_t pid, struct spy_strtab *strs, struct spy_err *err)
{
	memset(t, 0, sizeof(*t));
	t->strs = strs;
	int rc = proc_open(&t->proc, pid, err);
	if (rc == 0) {
		rc = find_runtime(t, err);
	}
	if (rc < 0) {
		target_release(t);
	}
	return rc;
}

int target_open_core(struct target *t, const char *path, const char *exe, const char *root,
		     struct spy_strtab *strs, struct spy_err *err)
{
	memset(t, 0, sizeof(*t));
	t->strs = strs;
	int rc = core_open(&t->core, path, exe, root, err);
	if (rc == 0) {
		rc = find_runtime(t, err);
	}
	if (rc < 0) {
		target_release(t);
	}
	return rc;
}

struct spy_process target_process(const struct target *t)
{
	return t->core ? spy_process_core(t->core) : spy_process_live(t->proc);
}

void target_release(struct target *t)
{
	pyrt_free(t->rt);
	proc_free(t->proc);
	core_free(t->core);
	free(t->binary);
	memset(t, 0, sizeof(*t));
}
