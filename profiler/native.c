/*
 * The glue of --native (see native.h). The one choice here: a thread whose
 * native walk fails keeps its Python stack alone, so --native never loses a
 * sample that a Python-only profile would have had; the failure is counted
 * and shows up in the errors summary.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "profiler/native.h"

/* Maps re-read for pcs in no mapping at most this often. */
#define NATIVE_MAPS_NS (100 * 1000 * 1000ull)

/* A core's files, under its rules (core_open_file through the handle). */
static int open_core_file(void *ctx, const char *path)
{
	const struct spy_process *h = ctx;
	return h->ops->open_mapped(h, path);
}

int native_init(struct native *n, const struct spy_process *h, const char *binary, struct spy_strtab *strs,
		bool all, struct spy_err *err)
{
	memset(n, 0, sizeof(*n));
	int rc = sym_unwinder_new(&n->uw, err);
	if (rc < 0) {
		return rc;
	}
	/* A process that does not run is a core: its files are not its pid's. */
	struct sym_files core_files = { open_core_file, (void *)h, h->ops->user_root(h) };
	n->syms = sym_native_new(h->ops->pid(h), h->tracer ? NULL : &core_files, strs);
	n->opts.all = all;
	n->opts.marker = spy_strtab_interns(strs, "[native stack incomplete]");
	/* The interpreter's own files: everything in them is the interpreter's business. */
	n->opts.hide_libs[0] = spy_strtab_interns(strs, spy_basename(binary));
	if (h->ops->exe(h)[0]) {
		n->opts.hide_libs[1] = spy_strtab_interns(strs, spy_basename(h->ops->exe(h)));
	}
#ifdef SPY_TEST_HOOKS
	n->fail_for_tests = getenv("SPY_TEST_NATIVE_FAIL") != NULL;
#endif
	return 0;
}

void native_release(struct native *n)
{
	sym_unwinder_free(n->uw);
	sym_native_free(n->syms);
	spy_stack_release(&n->nat);
	spy_stack_release(&n->merged);
	memset(n, 0, sizeof(*n));
}

void native_pcs_release(struct native_pcs *pcs)
{
	free(pcs->v);
	free(pcs->sp);
	free(pcs->anchors);
	memset(pcs, 0, sizeof(*pcs));
}

void native_pcs_set(struct native_pcs *pcs, const spy_addr_t *v, const spy_addr_t *sp, size_t n)
{
	if (!pcs->v) {
		pcs->v = spy_xcalloc(SPY_MAX_NATIVE_DEPTH, sizeof(*pcs->v));
		pcs->sp = spy_xcalloc(SPY_MAX_NATIVE_DEPTH, sizeof(*pcs->sp));
	}
	n = n < SPY_MAX_NATIVE_DEPTH ? n : SPY_MAX_NATIVE_DEPTH;
	memcpy(pcs->v, v, n * sizeof(*v));
	memcpy(pcs->sp, sp, n * sizeof(*sp));
	pcs->n = n;
	pcs->rc = 0;
	pcs->cpu_ns = 0;
}

void native_note_anchors(struct pyrt *rt, struct native_pcs *pcs)
{
	const spy_addr_t *a;
	size_t n = pyrt_stack_anchors(rt, &a);
	SPY_GROW(pcs->anchors, pcs->aanchors, n);
	pcs->nanchors = n;
	if (n) {
		memcpy(pcs->anchors, a, n * sizeof(*a));
	}
}

void native_unwind(struct native *n, const struct spy_process *h, int32_t tid, struct native_pcs *pcs)
{
	if (!pcs->v) {
		pcs->v = spy_xcalloc(SPY_MAX_NATIVE_DEPTH, sizeof(*pcs->v));
		pcs->sp = spy_xcalloc(SPY_MAX_NATIVE_DEPTH, sizeof(*pcs->sp));
	}
	pcs->n = 0;
	if (n->fail_for_tests) {
		pcs->rc = -SPY_EMEM;
		return;
	}
	uint64_t t0 = spy_thread_cpu_ns();
	struct sym_saved_regs saved = { NULL, 0 };
	saved.regs = h->ops->saved_regs(h, tid, &saved.pac_mask);
	pcs->rc = sym_unwind(n->uw, h->ops->mem(h), tid, saved.regs ? &saved : NULL, pcs->anchors,
			     pcs->nanchors, pcs->v, pcs->sp, SPY_MAX_NATIVE_DEPTH, &pcs->n);
	pcs->cpu_ns = spy_thread_cpu_ns() - t0;
	n->unwind_ns += pcs->cpu_ns;
	n->unwinds++;
}

/*
 * A pc in no mapping ran in memory mapped since the maps were read (code a
 * JIT has just written): read them again, at most every NATIVE_MAPS_NS, so
 * that its frame is named for what it is.
 */
static void refresh_maps_for(struct native *n, struct spy_process *h, const struct native_pcs *pcs)
{
	const struct spy_mem *mem = h->ops->mem(h);
	for (size_t i = 0; i < pcs->n; i++) {
		if (!spy_mem_find_map(mem, pcs->v[i])) {
			uint64_t now = spy_now_ns();
			if (now - n->maps_read_ns >= NATIVE_MAPS_NS && h->tracer) {
				n->maps_read_ns = now;
				h->tracer->read_maps(h);
			}
			return;
		}
	}
}

int native_merge(struct native *n, struct spy_process *h, const struct native_pcs *pcs,
		 struct spy_stack *py)
{
	if (pcs->rc == -SPY_EMEM || pcs->n == 0) {
		n->unwind_failed++;
		return -SPY_EMEM;
	}
	uint64_t t0 = spy_thread_cpu_ns();
	refresh_maps_for(n, h, pcs);
	struct sym_native_stats before, after;
	sym_native_stats(n->syms, &before);
	spy_stack_reset(&n->nat);
	sym_native_resolve(n->syms, h->ops->mem(h), pcs->v, pcs->n, &n->nat);
	struct sym_merge_where where = { pcs->sp, pcs->n, pcs->anchors, pcs->nanchors };
	sym_merge(&n->nat, &where, py, &n->opts, &n->merged, &n->mismatch);
	if (pcs->rc == -SPY_EBOUND) {
		n->merged.truncated = 1;
	}
	/* Swap rather than copy: both keep their storage for the next sample. */
	struct spy_stack tmp = *py;
	*py = n->merged;
	n->merged = tmp;
	uint64_t spent = spy_thread_cpu_ns() - t0;
	n->merge_ns += spent;
	n->merges++;
	sym_native_stats(n->syms, &after);
	if (after.lookups - before.lookups == after.hits - before.hits) {
		n->warm++;
		n->warm_unwind_ns += pcs->cpu_ns;
		n->warm_merge_ns += spent;
	}
	return 0;
}

void native_log_stats(const struct native *n)
{
	struct sym_native_stats st;
	sym_native_stats(n->syms, &st);
	spy_log(SPY_LOG_DEBUG,
		"native: %llu unwinds (%.1f us CPU each), %llu symbolized and merged (%.1f us CPU "
		"each), %llu failed; symbol cache: %llu lookups, %.1f%% hits, %llu files; merge "
		"mismatches: %llu extra eval, %llu extra python",
		(unsigned long long)n->unwinds,
		n->unwinds ? (double)n->unwind_ns / 1e3 / (double)n->unwinds : 0.0,
		(unsigned long long)n->merges,
		n->merges ? (double)n->merge_ns / 1e3 / (double)n->merges : 0.0,
		(unsigned long long)n->unwind_failed, (unsigned long long)st.lookups,
		st.lookups ? 100.0 * (double)st.hits / (double)st.lookups : 0.0,
		(unsigned long long)st.files, (unsigned long long)n->mismatch.extra_eval,
		(unsigned long long)n->mismatch.extra_py);
	if (n->warm) {
		spy_log(SPY_LOG_DEBUG,
			"native after warm-up (%llu thread samples whose pcs were all cached): "
			"%.1f us unwind + %.1f us symbolize and merge per thread sample (CPU)",
			(unsigned long long)n->warm, (double)n->warm_unwind_ns / 1e3 / (double)n->warm,
			(double)n->warm_merge_ns / 1e3 / (double)n->warm);
	}
}
