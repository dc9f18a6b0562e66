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
#include <stdlib.h>
#include <string.h>

#include "cmd/target.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "symbolize/symbolize.h"

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

int target_is_libpython(const char *path)
{
	const char *b = base_name(path);
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
	const char *b = base_name(path);
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
static const char *pick_binary(const struct proc *p)
{
	const struct spy_mem *mem = proc_mem(p);
	for (size_t i = 0; i < mem->nmaps; i++) {
		if (mem->maps[i].path[0] == '/' && target_is_libpython(mem->maps[i].path)) {
			return mem->maps[i].path;
		}
	}
	const char *exe = proc_exe(p);
	for (size_t i = 0; i < mem->nmaps; i++) {
		if (!strcmp(mem->maps[i].path, exe)) {
			return mem->maps[i].path;
		}
	}
	return NULL;
}

static void add_symbol(const struct sym_elf *e, uint64_t bias, const char *name, spy_addr_t *out)
{
	uint64_t v;
	if (sym_elf_lookup(e, name, &v) && v) {
		*out = bias + v;
		spy_log(SPY_LOG_DEBUG, "%s at 0x%llx", name, (unsigned long long)*out);
	}
}

static int fill_hints(struct target *t, struct pyrt_hints *h, struct spy_err *err)
{
	const struct spy_mem *mem = proc_mem(t->proc);
	struct spy_buf path = SPY_BUF_INIT;
	struct sym_elf *e = NULL;
	int rc;

	spy_buf_addf(&path, "%s%s", proc_root(t->proc), t->binary);
	rc = sym_elf_open(&e, path.buf, err);
	if (rc < 0) {
		goto out;
	}
	uint64_t bias;
	if (!sym_elf_bias(e, mem->maps, mem->nmaps, t->binary, &bias)) {
		rc = spy_err_set(err, SPY_ENOPY, "cannot find where %s is loaded in process %d",
				 t->binary, (int)proc_pid(t->proc));
		goto out;
	}
	memset(h, 0, sizeof(*h));
	h->binary = t->binary;
	h->pid = (int32_t)proc_pid(t->proc);
	h->version_hint = target_version_from_path(t->binary);
	add_symbol(e, bias, "_PyRuntime", &h->runtime);
	add_symbol(e, bias, "Py_Version", &h->py_version);
	add_symbol(e, bias, "interp_head", &h->interp_head);
	add_symbol(e, bias, "PyInterpreterState_Head", &h->interp_head_fn);
	add_symbol(e, bias, "_PyThreadState_Current", &h->tstate_current);

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
				 (int)proc_pid(t->proc), proc_cmdline(t->proc));
		goto out;
	}
	rc = 0;
out:
	sym_elf_free(e);
	spy_buf_release(&path);
	return rc;
}

int target_open_pid(struct target *t, pid_t pid, struct spy_err *err)
{
	struct pyrt_hints hints;
	int rc;

	memset(t, 0, sizeof(*t));
	rc = proc_open(&t->proc, pid, err);
	if (rc < 0) {
		goto fail;
	}
	const char *bin = pick_binary(t->proc);
	if (!bin) {
		rc = spy_err_set(err, SPY_ENOPY, "no Python interpreter found in process %d (%s)",
				 (int)pid, proc_cmdline(t->proc));
		goto fail;
	}
	t->binary = spy_xstrdup(bin);
	rc = fill_hints(t, &hints, err);
	if (rc < 0) {
		goto fail;
	}
	rc = pyrt_new(&t->rt, proc_mem(t->proc), &hints, &t->strs, err);
	if (rc < 0) {
		goto fail;
	}
	return 0;
fail:
	target_release(t);
	return rc;
}

void target_release(struct target *t)
{
	pyrt_free(t->rt);
	proc_free(t->proc);
	spy_strtab_release(&t->strs);
	free(t->binary);
	memset(t, 0, sizeof(*t));
}
