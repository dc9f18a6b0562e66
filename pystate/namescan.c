/*
 * Finding threading's thread names within a budget (see names.c for the
 * path through the target's memory, pystate.h for the API).
 *
 * A program controls what this reads: threading._active may hold any
 * number of entries, and each Thread object any number of attributes,
 * with _name last. Looked up all at once, 200 threads of 16,000 attributes
 * each cost 3.2 million remote string reads a second and dropped a 100 Hz
 * recording to under 40 Hz. So the lookup is a pass that can stop anywhere
 * and resume on the next call: each call does at most its budget of remote
 * reads (pyrt_count_begin), and remembers where it was (the
 * entry of _active, and of the Thread object's attributes). A name is used
 * as soon as it is found; the names of a finished pass replace the last
 * pass's, so a thread that ended or lost its name is forgotten then.
 *
 * Two things keep a pass short. The key "_name" of every Thread's dict is
 * the same interned str object: once one key has been read and matched,
 * an object's keys past its first PYRT_NAMES_KEY_READS are compared by
 * address, without reading them (should a whole pass find no name, the
 * next one reads keys again). And
 * threading._active is found once per interpreter (sys.modules, then the
 * module's dict), not on every pass.
 *
 * Bounds: _active is read up to PYRT_NAMES_ACTIVE_MAX entries, a Thread's
 * attributes up to PYRT_NAMES_ATTR_MAX; past either, the names found are
 * given and pyrt_names_cut() says some may be missing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/err.h"
#include "common/hashmap.h"
#include "common/util.h"
#include "pystate/internal.h"
#include "pystate/pystate.h"
#include "pystate/pystr.h"

/* What fn of pyrt_dict_each_from returns to stop where it is. */
enum { SCAN_FOUND = 1, SCAN_BUDGET = 2, SCAN_OBJECT = 3 };

/* The reads of a pass's step, against its budget. */
struct counted {
	struct pyrt_counted pc;
	size_t budget;
	bool moved;     /* an entry was looked at: the call made progress */
};

/* Every call looks at one entry at least, whatever the budget: a pass always ends. */
static bool spent(const struct counted *c)
{
	return c->moved && c->pc.reads >= c->budget;
}

/* ---- the names found, by (ident, tstate): an array the one hash map indexes ---- */

/*
 * A thread inside a sub-interpreter is named by the thread state it
 * started in, its outermost (see py_thread): the threading that started
 * it is that interpreter's, and its name stays put as it goes in and out.
 */
static spy_addr_t name_ts(const struct py_thread *t)
{
	return t->nouter ? t->outer[t->nouter - 1].tstate : t->tstate;
}

static spy_addr_t name_ip(const struct py_thread *t)
{
	return t->nouter ? t->outer[t->nouter - 1].interp : t->interp;
}

static uint64_t name_key(uint64_t ident, spy_addr_t tstate)
{
	return spy_hmap_pair(tstate, ident);
}

static struct pyname_ent *name_find(const struct pyrt *rt, uint64_t ident, spy_addr_t tstate)
{
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&rt->name_index, name_key(ident, tstate), it, v) {
		struct pyname_ent *e = &rt->names[v];
		if (e->ident == ident && e->tstate == tstate) {
			return e;
		}
	}
	return NULL;
}

/* Past PYRT_NAME_MAX entries a name is not remembered: ended threads
 * stay only until the next pass ends, so this is reached only by a
 * program with more threads than spy looks at. */
static void name_set(struct pyrt *rt, uint64_t ident, spy_addr_t tstate, const char *name, uint32_t gen)
{
	struct pyname_ent *e = name_find(rt, ident, tstate);
	if (!e) {
		if (rt->nnames >= PYRT_NAME_MAX) {
			return;
		}
		SPY_GROW(rt->names, rt->names_alloc, rt->nnames + 1);
		spy_hmap_add(&rt->name_index, name_key(ident, tstate), rt->nnames);
		e = &rt->names[rt->nnames++];
	}
	*e = (struct pyname_ent){ ident, tstate, name, gen };
}

/* Keeps only the entries of generation gen. */
static void keep_gen(struct pyrt *rt, uint32_t gen)
{
	size_t n = 0;
	spy_hmap_clear(&rt->name_index);
	for (size_t i = 0; i < rt->nnames; i++) {
		if (rt->names[i].gen == gen) {
			rt->names[n] = rt->names[i];
			spy_hmap_add(&rt->name_index, name_key(rt->names[n].ident, rt->names[n].tstate), n);
			n++;
		}
	}
	rt->nnames = n;
}

const char *pyrt_thread_name(const struct pyrt *rt, const struct py_thread *t)
{
	const struct pyname_ent *e = name_find(rt, t->thread_id, name_ts(t));
	return e ? e->name : NULL;
}

/* Failed passes in a row run again at the next tick; then at the refresh. */
#define NAMES_RETRIES 10

bool pyrt_names_failing(const struct pyrt *rt)
{
	return rt->names_pass.retries && rt->names_pass.retries <= NAMES_RETRIES;
}

bool pyrt_names_cut(const struct pyrt *rt)
{
	return rt->names_cut;
}

uint64_t pyrt_names_reads(const struct pyrt *rt)
{
	return rt->names_reads;
}

/* ---- one pass ---- */

static bool read_ptr_ok(struct pyrt *rt, spy_addr_t at, spy_addr_t *p)
{
	return spy_mem_read_addr(rt->mem, at, p) == 0;
}

/* Remember the len bytes at addr for interp[at] of the pass (0: nothing to watch). */
static void watch_bytes(struct pyrt *rt, size_t at, spy_addr_t addr, size_t len)
{
	struct pyname_pass *p = &rt->names_pass;
	memset(p->watch_sig[at], 0, sizeof(p->watch_sig[at]));
	bool ok = addr && len <= sizeof(p->watch_sig[at]) &&
		  spy_mem_read(rt->mem, addr, p->watch_sig[at], len) == 0;
	p->watch[at] = ok ? addr : 0;
	p->watch_len[at] = ok ? (uint32_t)len : 0;
}

/*
 * A dict's state in one read: the words from ma_used to ma_keys/ma_values
 * (2.7: ma_mask/ma_table), so an insertion (used, 3.6-3.13's version tag)
 * or a resize (keys, table) changes it, and the refcount does not.
 */
static void watch_dict(struct pyrt *rt, size_t at, spy_addr_t dict)
{
	const struct pyoffsets *o = &rt->off;
	uint32_t end = o->dict_used, offs[] = { o->dict_keys, o->dict_values, o->dict_mask, o->dict_table };
	for (size_t i = 0; i < SPY_ARRAY_SIZE(offs); i++) {
		if (offs[i] != PYOFF_NONE && offs[i] > end) {
			end = offs[i];
		}
	}
	watch_bytes(rt, at, dict ? dict + o->dict_used : 0, end + 8 - o->dict_used);
}

/*
 * Whether the last pass may have left a thread unnamed that it would name
 * now: one read per interpreter with such a thread, each tick. A thread
 * starts running (and is seen) before threading puts it in _active, and a
 * program that imports threading later has a main thread threading names
 * only then; waiting for the next pass (a second) lost their names for a
 * second, and a launched program is always first seen without threading.
 */
static bool names_moved(struct pyrt *rt, const struct py_thread *th, size_t n)
{
	struct pyname_pass *p = &rt->names_pass;
	uint32_t checked = 0;
	for (size_t i = 0; i < n; i++) {
		const struct pyname_ent *e = name_find(rt, th[i].thread_id, name_ts(&th[i]));
		if (!e || e->name) {
			continue;
		}
		for (size_t j = 0; j < p->ninterp; j++) {
			uint64_t sig[PYRT_DICT_SIG_WORDS];
			if (p->interp[j] != name_ip(&th[i]) || (checked & (1u << j)) || !p->watch[j]) {
				continue;
			}
			checked |= 1u << j;
			if (spy_mem_read(rt->mem, p->watch[j], sig, p->watch_len[j]) == 0 &&
			    memcmp(sig, p->watch_sig[j], p->watch_len[j])) {
				return true;
			}
		}
	}
	return false;
}


/* Passes that may take an unchanged sys.modules for one still without threading. */
#define NAMES_MISS_SKIPS 10

/*
 * threading._active of interp in *active: remembered, else looked up
 * (sys.modules, the module's dict); 0 while threading is not (fully)
 * imported, or sys.modules not made yet. < 0 when the lookup could not be
 * made: a dict or key unreadable (memory mapped since the maps were read,
 * often sys.modules' table grown by the import of threading itself). That
 * is no news that threading is absent: the pass fails, so it is run again
 * at the next tick with the maps read again, not at the refresh a second
 * on (the dict watched need not change again before then).
 */
static int active_of(struct pyrt *rt, spy_addr_t interp, spy_addr_t *active)
{
	struct pyname_pass *p = &rt->names_pass;
	*active = 0;
	for (size_t i = 0; i < p->nknown; i++) {
		if (p->known_interp[i] == interp) {
			*active = p->known_active[i];
			return 0;
		}
	}
	const struct pyoffsets *o = &rt->off;
	spy_addr_t modules, threading, md;
	/* Set again only by a lookup that found no threading. */
	bool missed = p->miss_interp == interp;
	p->miss_interp = 0;
	if (!read_ptr_ok(rt, interp + o->interp_modules, &modules)) {
		return -SPY_EMEM;
	}
	if (!modules) {
		/* Seen before its start-up made sys.modules: the slot is what changes next. */
		watch_bytes(rt, p->at, interp + o->interp_modules, sizeof(modules));
		return 0;
	}
	/*
	 * A program that never imports threading: looking for it is reading
	 * every key of sys.modules, each pass (100 us a second a process).
	 * An import adds an entry to sys.modules, so while it has as many
	 * entries (in use, and in use or deleted) at the same place,
	 * threading is still not there; looked up anyway every
	 * NAMES_MISS_SKIPS passes, should a dict change escape the measure.
	 */
	/* Read before the lookup: an import during it shows as a change. */
	watch_dict(rt, p->at, modules);
	struct dview mv;
	uint64_t used = 0;
	if (pyrt_dict_view(rt, modules, &mv) < 0 ||
	    spy_mem_read(rt->mem, modules + o->dict_used, &used, sizeof(used)) < 0) {
		return -SPY_EMEM;
	}
	if (missed && p->miss_modules == modules && p->miss_entries == mv.entries && p->miss_n == mv.n &&
	    p->miss_used == used && p->miss_skips < NAMES_MISS_SKIPS) {
		p->miss_interp = interp;
		p->miss_skips++;
		return 0;
	}
	int rc = pyrt_dict_find(rt, modules, "threading", &threading);
	if (rc < 0) {
		return rc;
	}
	if (rc == 0) {
		p->miss_interp = interp;
		p->miss_modules = modules;
		p->miss_entries = mv.entries;
		p->miss_n = mv.n;
		p->miss_used = used;
		p->miss_skips = 0;
		return 0;
	}
	if (!read_ptr_ok(rt, threading + o->module_dict, &md)) {
		return -SPY_EMEM;
	}
	/* threading still being imported: _active and MainThread are added to its dict. */
	watch_dict(rt, p->at, md);
	if ((rc = pyrt_dict_find(rt, md, "_active", active)) < 0) {
		return rc;
	}
	if (*active && p->nknown < SPY_ARRAY_SIZE(p->known_interp)) {
		p->known_interp[p->nknown] = interp;
		p->known_active[p->nknown++] = *active;
	}
	return 0;
}

struct step {
	struct pyrt *rt;
	const struct py_thread *th;
	size_t n;
	struct counted *c;
	const char *attr;       /* "_name", 2.7's "_Thread__name" */
};

/* An entry of _active: stop at a Thread object of ours not named in this pass. */
static int active_entry(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t thread)
{
	struct step *s = ctx;
	struct pyname_pass *p = &rt->names_pass;
	if (spent(s->c)) {
		return SCAN_BUDGET;
	}
	s->c->moved = true;
	struct py_value k;
	pyrt_read_value(rt, key, &k);
	if (k.kind != PYV_INT || k.ndigits) {
		return 0;
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct py_thread *t = &s->th[i];
		if (name_ip(t) != p->interp[p->at] || t->thread_id != (uint64_t)k.ival) {
			continue;
		}
		const struct pyname_ent *e = name_find(rt, t->thread_id, name_ts(t));
		if (e && e->gen == p->gen) {
			continue;
		}
		p->obj = thread;
		p->ident = (uint64_t)k.ival;
		p->obj_entry = 0;
		return SCAN_OBJECT;
	}
	return 0;
}

/* The str object at obj as an interned name, or NULL. */
static const char *name_text(struct pyrt *rt, spy_addr_t obj)
{
	struct py_value name;
	pyrt_read_value(rt, obj, &name);
	if (name.kind == PYV_BYTES) {
		/* 2.7 str: its raw bytes, as function names are kept. */
		char buf[PYSTR_BUF];
		size_t len;
		int trunc;
		if (pystr_read(rt->mem, &rt->off, obj, buf, sizeof(buf), &len, &trunc, NULL) == 0) {
			return spy_strtab_intern(rt->strs, buf, len);
		}
		return NULL;
	}
	return name.kind == PYV_STR && name.text && *name.text ? name.text : NULL;
}

/* An attribute of the Thread object: stop at its name. */
static int attr_entry(struct pyrt *rt, void *ctx, spy_addr_t key, spy_addr_t value)
{
	struct step *s = ctx;
	struct pyname_pass *p = &rt->names_pass;
	if (spent(s->c)) {
		return SCAN_BUDGET;
	}
	s->c->moved = true;
	if (key != rt->names_key) {
		/* Past the first few keys of an object, only the remembered key object is compared. */
		if (rt->names_key && p->key_reads >= PYRT_NAMES_KEY_READS) {
			return 0;
		}
		p->key_reads++;
		char buf[32];
		size_t len;
		int trunc;
		if (pystr_read(rt->mem, &rt->off, key, buf, sizeof(buf), &len, &trunc, NULL) != 0 || trunc ||
		    len != strlen(s->attr) || memcmp(buf, s->attr, len)) {
			return 0;
		}
		rt->names_key = key;
	}
	const char *name = name_text(rt, value);
	for (size_t i = 0; i < s->n; i++) {
		const struct py_thread *t = &s->th[i];
		if (name_ip(t) == p->interp[p->at] && t->thread_id == p->ident) {
			name_set(rt, t->thread_id, name_ts(t), name, p->gen);
			p->found += name != NULL;
		}
	}
	return SCAN_FOUND;
}

/* Go on with the Thread object p->obj; false when the budget ran out first. */
static bool step_object(struct step *s)
{
	struct pyrt *rt = s->rt;
	struct pyname_pass *p = &rt->names_pass;
	struct dview v;
	size_t at = p->obj_entry;
	int rc = pyrt_attr_view(rt, p->obj, &v, PYRT_NAMES_ATTR_MAX);
	if (rc == 0) {
		rt->names_cut |= v.cut;
		rc = pyrt_dict_each_from(rt, &v, p->obj_entry, attr_entry, s, &at);
	}
	p->failed |= rc < 0;
	if (rc == SCAN_BUDGET) {
		p->obj_entry = at;
		return false;
	}
	p->obj = 0;
	p->key_reads = 0;
	return true;
}

/* Go on with the pass, within the budget; true when it is over. */
static bool step_pass(struct step *s)
{
	struct pyrt *rt = s->rt;
	struct pyname_pass *p = &rt->names_pass;
	while (p->at < p->ninterp) {
		if (spent(s->c)) {
			return false;
		}
		if (p->obj) {
			/* Entry p->entry of _active is this Thread: the next one after it. */
			if (!step_object(s)) {
				return false;
			}
			p->entry++;
			continue;
		}
		/* Finding _active is done once per interpreter (then remembered): not the pass's work. */
		size_t before = s->c->pc.reads;
		spy_addr_t active;
		bool failed = active_of(rt, p->interp[p->at], &active) < 0;
		if (active && p->entry == 0) {
			watch_dict(rt, p->at, active);
		}
		s->c->budget += s->c->pc.reads - before;
		struct dview v;
		if (!active || pyrt_dict_view_max(rt, active, &v, PYRT_NAMES_ACTIVE_MAX) < 0) {
			p->failed |= failed || active != 0;
			p->at++;
			p->entry = 0;
			continue;
		}
		rt->names_cut |= v.cut;
		size_t at = p->entry;
		int rc = pyrt_dict_each_from(rt, &v, p->entry, active_entry, s, &at);
		p->failed |= rc < 0;
		if (rc == SCAN_BUDGET || rc == SCAN_OBJECT) {
			p->entry = at;
			if (rc == SCAN_BUDGET) {
				return false;
			}
			continue;
		}
		p->at++;
		p->entry = 0;
	}
	return true;
}

static void pass_start(struct pyrt *rt, const struct py_thread *th, size_t n, uint64_t now_ns)
{
	struct pyname_pass *p = &rt->names_pass;
	if (++rt->names_gen == 0) {
		rt->names_gen = 1;
	}
	p->on = true;
	p->gen = rt->names_gen;
	p->started_ns = now_ns;
	p->ninterp = p->at = p->entry = 0;
	memset(p->watch, 0, sizeof(p->watch));
	p->obj = 0;
	p->found = 0;
	p->failed = false;
	/* Each interpreter has its own sys.modules, so its own threading. */
	for (size_t i = 0; i < n; i++) {
		bool seen = false;
		for (size_t j = 0; j < p->ninterp && !seen; j++) {
			seen = p->interp[j] == name_ip(&th[i]);
		}
		if (!seen && p->ninterp < SPY_ARRAY_SIZE(p->interp)) {
			p->interp[p->ninterp++] = name_ip(&th[i]);
		}
	}
	rt->names_scans++;
}

/* The pass's names replace the last ones; a thread it did not name is remembered as unnamed. */
static void pass_end(struct pyrt *rt, const struct py_thread *th, size_t n)
{
	struct pyname_pass *p = &rt->names_pass;
	p->on = false;
	/*
	 * A read that failed (a dict resized or an object built while the
	 * target runs on) is no news that a thread lost its name: the last
	 * names stay, and the pass is run again at the next tick, a few times.
	 */
	p->retries = p->failed ? p->retries + 1 : 0;
	if (!p->failed) {
		keep_gen(rt, p->gen);
	}
	for (size_t i = 0; i < n; i++) {
		if (!name_find(rt, th[i].thread_id, name_ts(&th[i]))) {
			name_set(rt, th[i].thread_id, name_ts(&th[i]), NULL, p->gen);
		}
	}
	rt->names_scanned_ns = p->started_ns;
	if (!p->found) {
		/* Perhaps the key object is not the one remembered any more: read keys next time. */
		rt->names_key = 0;
	}
}

/* Run the pass on with at most budget remote reads; true when it ended. */
static bool pass_run(struct pyrt *rt, const struct py_thread *th, size_t n, size_t budget)
{
	struct counted c = { .budget = budget };
	pyrt_count_begin(rt, &c.pc);
	struct step s = { rt, th, n, &c, rt->off.str_model == PYSTR_BYTES27 ? "_Thread__name" : "_name" };
	bool done = step_pass(&s);
	pyrt_count_end(rt, &c.pc);
	rt->names_reads += c.pc.reads;
	return done;
}

void pyrt_names_update(struct pyrt *rt, const struct py_thread *th, size_t n, uint64_t now_ns,
		       uint64_t refresh_ns, size_t budget)
{
	const struct pyoffsets *o = &rt->off;
	if (o->interp_modules == PYOFF_NONE || o->module_dict == PYOFF_NONE) {
		return;
	}
	if (!rt->names_pass.on) {
		bool due = !rt->names_scans || now_ns - rt->names_scanned_ns >= refresh_ns;
		for (size_t i = 0; i < n && !due; i++) {
			due = !name_find(rt, th[i].thread_id, name_ts(&th[i]));
		}
		due = due || pyrt_names_failing(rt);
		if (!due && !names_moved(rt, th, n)) {
			return;
		}
		pass_start(rt, th, n, now_ns);
	}
	if (pass_run(rt, th, n, budget)) {
		pass_end(rt, th, n);
		/* A thread registered while the pass ran: named now, not a tick late. */
		if (names_moved(rt, th, n)) {
			pass_start(rt, th, n, now_ns);
			if (pass_run(rt, th, n, budget)) {
				pass_end(rt, th, n);
			}
		}
	}
}

int pyrt_thread_names(struct pyrt *rt, const struct py_thread *th, size_t n, const char **names,
		      struct spy_err *err)
{
	const struct pyoffsets *o = &rt->off;
	for (size_t i = 0; i < n; i++) {
		names[i] = NULL;
	}
	if (o->interp_modules == PYOFF_NONE || o->module_dict == PYOFF_NONE) {
		return 0;
	}
	pass_start(rt, th, n, 0);
	bool done = pass_run(rt, th, n, PYRT_NAMES_CALL_READS);
	uint32_t gen = rt->names_pass.gen;
	bool looked = rt->names_pass.nknown > 0;
	int found = 0;
	for (size_t i = 0; i < n; i++) {
		const struct pyname_ent *e = name_find(rt, th[i].thread_id, name_ts(&th[i]));
		if (e && e->gen == gen && e->name) {
			names[i] = e->name;
			found++;
		}
	}
	pass_end(rt, th, n);
	if (!done) {
		spy_err_set(err, SPY_ECORRUPT, "thread names: lookup stopped after %d remote reads",
			    PYRT_NAMES_CALL_READS);
	} else if (rt->names_cut) {
		spy_err_set(err, SPY_ECORRUPT, "thread names: threading's lists are too long to read in full");
	}
	if (!found && !looked) {
		return spy_err_set(err, SPY_ECORRUPT, "threading._active not found");
	}
	return found;
}
