/*
 * --native for record and dump: one thread's native stack, unwound while the
 * target is paused, then symbolized and merged with its Python stack once
 * the target runs again. The sampler and symbolize meet here, since neither
 * may include the other (profiler's own: see internal.h).
 */
#ifndef SPY_PROFILER_NATIVE_H
#define SPY_PROFILER_NATIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/strtab.h"
#include "common/sample.h"
#include "pystate/pystate.h"
#include "sampler/process.h"
#include "symbolize/symbolize.h"

/* The raw pcs of one thread, kept from the pause to the merge. */
struct native_pcs {
	spy_addr_t *v;
	spy_addr_t *sp;   /* each frame's stack pointer, parallel to v */
	size_t n;
	/* The Python stack's anchors (pyrt_stack_anchors), noted when it was walked. */
	spy_addr_t *anchors;
	size_t nanchors, aanchors;
	int rc;   /* of sym_unwind: 0, -SPY_EBOUND (cut), or -SPY_EMEM (failed) */
	uint64_t cpu_ns;   /* spy's CPU time in the walk */
};

struct native {
	struct sym_unwinder *uw;
	struct sym_native *syms;
	struct sym_merge_opts opts;
	struct spy_stack nat, merged;   /* scratch, reused across samples */
	struct sym_merge_counts mismatch;
	uint64_t unwind_failed;         /* threads whose native walk failed (Python stack kept) */
	uint64_t unwinds, merges;
	uint64_t unwind_ns, merge_ns;   /* spy's CPU time in each (includes the first, cold ones) */
	/* The same for the thread samples whose pcs were all in the symbol
	 * cache already: the cost of --native once warmed up. */
	uint64_t warm, warm_unwind_ns, warm_merge_ns;
	bool fail_for_tests;            /* SPY_TEST_NATIVE_FAIL: every unwind fails */
	uint64_t maps_read_ns;          /* when a pc in no mapping last had them re-read */
};

/* binary: the interpreter's file (its frames are the interpreter's business). */
int native_init(struct native *n, const struct spy_process *h, const char *binary, struct spy_strtab *strs,
		bool all, struct spy_err *err);
void native_release(struct native *n);
void native_pcs_release(struct native_pcs *pcs);
/* pcs as a walk of n frames (v, sp) found them, unwound whole. */
void native_pcs_set(struct native_pcs *pcs, const spy_addr_t *v, const spy_addr_t *sp, size_t n);

/* Right after the thread's pyrt_stack(): keep where its groups ran, for the unwind and the merge. */
void native_note_anchors(struct pyrt *rt, struct native_pcs *pcs);
/* While tid is ptrace-stopped: walk its native stack into pcs. */
void native_unwind(struct native *n, const struct spy_process *h, int32_t tid, struct native_pcs *pcs);
/*
 * After the target resumed: replace py (the thread's Python stack) with the
 * merged stack. A failed walk leaves py as it is, is counted, and returns
 * -SPY_EMEM; otherwise 0.
 */
int native_merge(struct native *n, struct spy_process *h, const struct native_pcs *pcs,
		  struct spy_stack *py);
/* Log the counters (SPY_LOG=debug): cache hit rate, mismatches, failures. */
void native_log_stats(const struct native *n);

#endif
