/*
 * Remote unwinding with libunwind-ptrace.
 *
 * One address space per process, with libunwind's global caching on: its
 * register-state cache is keyed by pc, so once a stack has been seen a step
 * costs a hash probe instead of a search of .eh_frame_hdr, and that is what
 * keeps a sample of a deep native stack cheap. Each walk gets a fresh
 * _UPT_create(tid) for the thread's registers.
 *
 * The design decision: _UPT's accessors read target memory a word at a time
 * with PTRACE_PEEKDATA, one syscall per word. We wrap them and send stack
 * reads to spy's memory reader instead (process_vm_readv behind a per-pause
 * page cache). The catch is that _UPT_find_proc_info passes its own argument
 * (the _UPT_info) down to access_mem for the unwind tables, so access_mem
 * sees two kinds of argument: ours starts with a magic word that no
 * _UPT_info can start with (its first field is a pid), and anything else is
 * handed back to _UPT_access_mem. That path runs only on cache misses.
 * Registers likewise: on x86_64 one PTRACE_GETREGS per walk serves them
 * all, where _UPT would issue a PTRACE_PEEKUSER per register read.
 */
#include <libunwind-ptrace.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>

#include "common/bounds.h"
#include "common/log.h"
#include "common/util.h"
#include "symbolize/symbolize.h"

/* Low half negative as a pid_t: a _UPT_info (pid first) never matches it. */
#define WALK_MAGIC 0xfeedfacef00dbeefull

/* libunwind's default is 2^7 pcs; a profile touches far more distinct pcs. */
#define UNWIND_CACHE_LOG2 12

struct sym_unwinder {
	unw_addr_space_t as;
};

/* The argument of one walk, given to every accessor. */
struct walk {
	uint64_t magic;
	void *upt;
	const struct spy_mem *mem;
	int32_t tid;
#if defined(__x86_64__)
	int regs_state;   /* 0: not read yet, 1: read, -1: PTRACE_GETREGS failed */
	struct user_regs_struct regs;
#endif
};

static struct walk *as_walk(void *arg)
{
	uint64_t head;
	memcpy(&head, arg, sizeof(head));
	return head == WALK_MAGIC ? arg : NULL;
}

/* The _UPT_info to forward to: ours wraps one, theirs is one. */
static void *upt_of(void *arg)
{
	struct walk *w = as_walk(arg);
	return w ? w->upt : arg;
}

static int acc_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi, int need,
			      void *arg)
{
	return _UPT_find_proc_info(as, ip, pi, need, upt_of(arg));
}

static void acc_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	_UPT_put_unwind_info(as, pi, upt_of(arg));
}

static int acc_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	return _UPT_get_dyn_info_list_addr(as, addr, upt_of(arg));
}

static int acc_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
			  void *arg)
{
	struct walk *w = as_walk(arg);
	if (!w) {
		return _UPT_access_mem(as, addr, val, write, arg);
	}
	/* An unwinder only reads; never write into the target. */
	if (write) {
		return -UNW_EINVAL;
	}
	return spy_mem_read(w->mem, addr, val, sizeof(*val)) == 0 ? 0 : -UNW_EINVAL;
}

#if defined(__x86_64__)
/* The general registers from one GETREGS snapshot; false for others or if it failed. */
static bool snapshot_reg(struct walk *w, unw_regnum_t reg, unw_word_t *val)
{
	if (w->regs_state == 0) {
		w->regs_state = ptrace(PTRACE_GETREGS, w->tid, NULL, &w->regs) == 0 ? 1 : -1;
	}
	if (w->regs_state < 0) {
		return false;
	}
	const struct user_regs_struct *r = &w->regs;
	/* In libunwind's x86_64 numbering (libunwind-x86_64.h). */
	const unsigned long long by_num[] = {
		r->rax, r->rdx, r->rcx, r->rbx, r->rsi, r->rdi, r->rbp, r->rsp, r->r8,
		r->r9,  r->r10, r->r11, r->r12, r->r13, r->r14, r->r15, r->rip,
	};
	if (reg < 0 || (size_t)reg >= sizeof(by_num) / sizeof(by_num[0])) {
		return false;
	}
	*val = by_num[reg];
	return true;
}
#endif

static int acc_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
			  void *arg)
{
	if (write) {
		return -UNW_EINVAL;
	}
#if defined(__x86_64__)
	struct walk *w = as_walk(arg);
	if (w && snapshot_reg(w, reg, val)) {
		return 0;
	}
#endif
	return _UPT_access_reg(as, reg, val, write, upt_of(arg));
}

static int acc_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			    void *arg)
{
	if (write) {
		return -UNW_EINVAL;
	}
	return _UPT_access_fpreg(as, reg, val, write, upt_of(arg));
}

/* Resuming the target from the unwinder would run it behind the sampler's back. */
static int acc_resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	return -UNW_EINVAL;
}

static int acc_get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			     unw_word_t *off, void *arg)
{
	return _UPT_get_proc_name(as, addr, buf, len, off, upt_of(arg));
}

int sym_unwinder_new(struct sym_unwinder **out, struct spy_err *err)
{
	unw_accessors_t acc = {
		.find_proc_info = acc_find_proc_info,
		.put_unwind_info = acc_put_unwind_info,
		.get_dyn_info_list_addr = acc_get_dyn_info_list_addr,
		.access_mem = acc_access_mem,
		.access_reg = acc_access_reg,
		.access_fpreg = acc_access_fpreg,
		.resume = acc_resume,
		.get_proc_name = acc_get_proc_name,
	};
	*out = NULL;
	unw_addr_space_t as = unw_create_addr_space(&acc, 0);
	if (!as) {
		return spy_err_set(err, SPY_EIO, "libunwind: cannot create an address space");
	}
	unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
	unw_set_cache_size(as, 1u << UNWIND_CACHE_LOG2, 0);
	struct sym_unwinder *u = spy_xcalloc(1, sizeof(*u));
	u->as = as;
	*out = u;
	return 0;
}

void sym_unwinder_free(struct sym_unwinder *u)
{
	if (!u) {
		return;
	}
	unw_destroy_addr_space(u->as);
	free(u);
}

/* The walk proper, once the cursor is set up. */
static int walk_frames(unw_cursor_t *cur, spy_addr_t *pcs, size_t max, size_t *n)
{
	for (;;) {
		unw_word_t ip;
		if (unw_get_reg(cur, UNW_REG_IP, &ip) < 0) {
			return -SPY_EMEM;
		}
		if (ip == 0) {
			return 0;
		}
		if (*n >= max) {
			return -SPY_EBOUND;
		}
		pcs[(*n)++] = ip;
		int rc = unw_step(cur);
		if (rc == 0) {
			return 0;
		}
		if (rc < 0) {
			/*
			 * A step that fails below a frame whose unwind info is
			 * missing (the thread's start routine) is the usual end
			 * of a stack without a terminating frame record.
			 */
			return *n > 1 ? 0 : -SPY_EMEM;
		}
	}
}

int sym_unwind(struct sym_unwinder *u, const struct spy_mem *mem, int32_t tid, spy_addr_t *pcs,
	       size_t max, size_t *n)
{
	*n = 0;
	if (max > SPY_MAX_NATIVE_DEPTH) {
		max = SPY_MAX_NATIVE_DEPTH;
	}
	if (tid <= 0) {
		return -SPY_EMEM;
	}
	struct walk w = { .magic = WALK_MAGIC, .upt = _UPT_create(tid), .mem = mem, .tid = tid };
	if (!w.upt) {
		return -SPY_EMEM;
	}
	unw_cursor_t cur;
	int rc = unw_init_remote(&cur, u->as, &w);
	if (rc < 0) {
		spy_log(SPY_LOG_TRACE, "unwind %d: init failed (%d)", (int)tid, rc);
		rc = -SPY_EMEM;
	} else {
		rc = walk_frames(&cur, pcs, max, n);
	}
	_UPT_destroy(w.upt);
	return rc;
}
