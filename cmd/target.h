/*
 * A target: a live process or a core file, with its Python runtime located. This is where
 * the modules meet: sampler opens the process, symbolize finds CPython's
 * anchors in the ELF file that holds the interpreter, and pystate is handed
 * those anchors as hints. No module talks to another directly.
 */
#ifndef SPY_CMD_TARGET_H
#define SPY_CMD_TARGET_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/strtab.h"
#include "pystate/pystate.h"
#include "sampler/engine.h"
#include "sampler/sampler.h"

struct target {
	struct proc *proc;      /* a live process; NULL for a core */
	struct core *core;      /* a core file; NULL for a live process */
	struct pyrt *rt;
	struct spy_strtab *strs;   /* the command's, for the whole invocation */
	char *binary;   /* path (as the target sees it) of the ELF holding the runtime */
	bool no_builtin_asyncio; /* binary has no .AsyncioDebug: not searched again */
};

/*
 * Open pid and find its Python runtime; the strings it decodes are interned
 * in strs, which must outlive it. On failure everything is released.
 */
int target_open_pid(struct target *t, pid_t pid, struct spy_strtab *strs, struct spy_err *err);
/* Open a core file (exe, root: see core_open) and find its Python runtime. */
int target_open_core(struct target *t, const char *path, const char *exe, const char *root,
		     struct spy_strtab *strs, struct spy_err *err);
/* The pid and command line, of the process or of the one that dumped core. */
int target_pid(const struct target *t);
const char *target_cmdline(const struct target *t);
/* The handle on what was opened, with its backend (live or core). */
struct spy_process target_process(const struct target *t);
/*
 * Where the target's _asyncio module says how to read its tasks (3.14+: the
 * .AsyncioDebug section of lib-dynload/_asyncio*.so, or of the interpreter
 * where the module is built in); h->debug_offsets stays 0 while asyncio is
 * not loaded. reread_maps: the module may have been loaded since the maps
 * were read (a live process only). -SPY_EGONE if the process went away.
 */
int target_async_hints(struct target *t, bool reread_maps, struct pyrt_async_hints *h);
/* Detach and free; safe on a zeroed or partly opened target. */
void target_release(struct target *t);

/* Exposed for unit tests: PY_VERSION_HEX (major.minor) from a path such as
 * ".../libpython3.11.so.1.0" or "/usr/bin/python2.7"; 0 if none. */
unsigned target_version_from_path(const char *path);
/* Whether a mapped file's name looks like libpython. */
int target_is_libpython(const char *path);

#endif
