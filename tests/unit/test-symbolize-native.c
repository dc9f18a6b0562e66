/*
 * Unit tests for symbolize's native side: merging crafted native and Python
 * stacks (one eval call per Python frame as before 3.11, several per call as
 * from 3.11, 2.7's eval loop, --native-all, and both kinds of mismatch);
 * resolving pcs of this very process (symbols, the cache, an inlined call
 * as a frame of its own when the build has DWARF); and an unwind
 * that cannot work (a thread we do not trace) failing cleanly.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/arch.h"
#include "common/buf.h"
#include "common/strtab.h"
#include "sampler/sampler.h"
#include "symbolize/symbolize.h"
#include "tests/lib/check.h"
#include "tests/lib/ptrace-helpers.h"

static struct spy_strtab strs = SPY_STRTAB_INIT;

/*
 * A stack from a spec, innermost first, frames separated by ';'. Native
 * frames are "func@lib", with a trailing '^' for SPY_FRAME_INLINED; Python
 * frames are "func", with a trailing '!' for SPY_FRAME_PY_ENTRY.
 */
static void build(struct spy_stack *s, const char *spec)
{
	spy_stack_reset(s);
	char *copy = strdup(spec), *save = NULL;
	for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
		struct spy_frame *f = spy_stack_push(s);
		memset(f, 0, sizeof(*f));
		char *at = strchr(tok, '@');
		size_t len = strlen(tok);
		if (at) {
			bool inl = len && tok[len - 1] == '^';
			f->kind = SPY_FRAME_NATIVE;
			f->func = spy_strtab_intern(&strs, tok, (size_t)(at - tok));
			f->file = spy_strtab_intern(&strs, at + 1, (size_t)(tok + len - at - 1 - inl));
			f->flags = inl ? SPY_FRAME_INLINED : 0;
		} else {
			bool entry = len && tok[len - 1] == '!';
			f->kind = SPY_FRAME_PYTHON;
			f->func = spy_strtab_intern(&strs, tok, entry ? len - 1 : len);
			f->file = spy_strtab_interns(&strs, "t.py");
			f->line = 1;
			f->flags = entry ? SPY_FRAME_PY_ENTRY : 0;
		}
	}
	free(copy);
}

/* The merged stack as "a;b;c", innermost first, native frames with "@lib". */
static char *render(const struct spy_stack *s)
{
	struct spy_buf b = SPY_BUF_INIT;
	for (size_t i = 0; i < s->n; i++) {
		const struct spy_frame *f = &s->v[i];
		spy_buf_addf(&b, "%s%s", i ? ";" : "", f->func);
		if (f->kind == SPY_FRAME_NATIVE) {
			spy_buf_addf(&b, "@%s", f->file);
		}
	}
	return spy_buf_detach(&b, NULL);
}

static struct sym_merge_counts merge_where(const char *native, const struct sym_merge_where *w,
					   const char *py, bool all, const char *want, int line)
{
	struct spy_stack n = SPY_STACK_INIT, p = SPY_STACK_INIT, out = SPY_STACK_INIT;
	struct sym_merge_counts c = { 0, 0 };
	struct sym_merge_opts o = { all,
				     { spy_strtab_interns(&strs, "libpython3.so"),
				       spy_strtab_interns(&strs, "python3") },
				     spy_strtab_interns(&strs, "[incomplete]") };
	build(&n, native);
	build(&p, py);
	sym_merge(&n, w, &p, &o, &out, &c);
	char *got = render(&out);
	if (strcmp(got, want)) {
		fprintf(stderr, "line %d: merged %s\n  expected %s\n", line, got, want);
	}
	CHECK_STR(got, want);
	free(got);
	spy_stack_release(&n);
	spy_stack_release(&p);
	spy_stack_release(&out);
	return c;
}

static struct sym_merge_counts merge_check(const char *native, const char *py, bool all,
					   const char *want, int line)
{
	return merge_where(native, NULL, py, all, want, line);
}

/* Before 3.11: one eval call per Python frame; C calls back into Python. */
static void test_merge_per_frame(void)
{
	const char *native = "_PyEval_EvalFrameDefault@libpython3.so;_PyFunction_Vectorcall@libpython3.so;"
			     "PyObject_CallObject@libpython3.so;spin_and_call@ext.so;"
			     "cfunction_call@libpython3.so;_PyEval_EvalFrameDefault@libpython3.so;"
			     "_PyEval_EvalFrameDefault@libpython3.so;PyRun_File@libpython3.so;main@python3;"
			     "__libc_start_main@libc.so.6";
	struct sym_merge_counts c = merge_check(native, "callback!;caller!;<module>!", false,
						"callback;spin_and_call@ext.so;caller;<module>", __LINE__);
	CHECK_INT(c.extra_eval + c.extra_py, 0);
	/* --native-all keeps everything, the Python frames inside their eval frame. */
	merge_check(native, "callback!;caller!;<module>!", true,
		    "callback;_PyEval_EvalFrameDefault@libpython3.so;_PyFunction_Vectorcall@libpython3.so;"
		    "PyObject_CallObject@libpython3.so;spin_and_call@ext.so;cfunction_call@libpython3.so;"
		    "caller;_PyEval_EvalFrameDefault@libpython3.so;<module>;"
		    "_PyEval_EvalFrameDefault@libpython3.so;PyRun_File@libpython3.so;main@python3;"
		    "__libc_start_main@libc.so.6",
		    __LINE__);
}

/* 3.11+: one eval call runs several frames; the entry flag ends each group. */
static void test_merge_groups(void)
{
	const char *native = "leaf@libm.so;_PyEval_EvalFrameDefault@libpython3.so;ccall@ext.so;"
			     "_PyEval_EvalFrameDefault@libpython3.so;main@python3";
	struct sym_merge_counts c = merge_check(native, "c;b;a!;z;y!", false,
						"leaf@libm.so;c;b;a;ccall@ext.so;z;y", __LINE__);
	CHECK_INT(c.extra_eval + c.extra_py, 0);
	/* The names of internals are hidden even outside the interpreter's files. */
	merge_check("x@ext.so;PyObject_Call@other.so;method_vectorcall_O@other.so;"
		    "_PyEval_EvalFrameDefault.cold@other.so",
		    "f!", false, "x@ext.so;f", __LINE__);
}

/* 2.7's loop is PyEval_EvalFrameEx; in 3.x it only forwards to the default one. */
static void test_merge_eval_names(void)
{
	merge_check("cfn@ext.so;PyEval_EvalFrameEx@libpython2.7.so;PyEval_EvalFrameEx@libpython2.7.so",
		    "inner!;outer!", false, "cfn@ext.so;inner;outer", __LINE__);
	struct sym_merge_counts c = merge_check(
		"_PyEval_EvalFrameDefault@x.so;PyEval_EvalFrameEx@x.so;_PyEval_EvalFrameDefault@x.so",
		"g!;f!", true,
		"g;_PyEval_EvalFrameDefault@x.so;PyEval_EvalFrameEx@x.so;f;_PyEval_EvalFrameDefault@x.so",
		__LINE__);
	CHECK_INT(c.extra_eval + c.extra_py, 0);
	CHECK(sym_is_eval("_PyEval_EvalFrameDefault"));
	CHECK(sym_is_eval("_PyEval_EvalFrameDefault.cold"));
	CHECK(!sym_is_eval("_PyEval_EvalFrameDefaultX"));
	CHECK(sym_is_internal("_PyObject_VectorcallTstate"));
	CHECK(!sym_is_internal("spin_and_call"));
	CHECK(!sym_is_internal("clone_thing"));
}

/* Mismatches: fixed, deterministic outcomes, and counted. */
static void test_merge_mismatch(void)
{
	/* More eval frames than groups: the extra ones (rootward) are dropped. */
	struct sym_merge_counts c = merge_check(
		"_PyEval_EvalFrameDefault@libpython3.so;c1@ext.so;_PyEval_EvalFrameDefault@libpython3.so;"
		"c2@ext.so;_PyEval_EvalFrameDefault@libpython3.so",
		"f!", false, "f;c1@ext.so;c2@ext.so", __LINE__);
	CHECK_INT(c.extra_eval, 2);
	CHECK_INT(c.extra_py, 0);
	/*
	 * More groups than eval frames (a walk cut short, an eval loop with no
	 * name): the rest follow a marker, and the native frames outward of the
	 * last group placed are dropped (where they go among the rest is not
	 * known), never left inward of Python frames they called.
	 */
	c = merge_check("c1@ext.so;_PyEval_EvalFrameDefault@libpython3.so;c2@ext.so;_start@python3",
			"f!;g;h!;k!", false, "c1@ext.so;f;[incomplete];g;h;k", __LINE__);
	CHECK_INT(c.extra_eval, 0);
	CHECK_INT(c.extra_py, 2);
	/* No eval frame at all (a stripped 3.11): the marker, then the Python stack. */
	c = merge_check("x@python3;y@python3;main@python3;_start@python3", "f!;g!", true,
			"[incomplete];f;g", __LINE__);
	CHECK_INT(c.extra_py, 2);
	/* No Python frames: the native stack alone, eval frames counted. */
	c = merge_check("n@ext.so;_PyEval_EvalFrameDefault@libpython3.so;m@ext.so", "", false,
			"n@ext.so;m@ext.so", __LINE__);
	CHECK_INT(c.extra_eval, 1);
}

/*
 * 3.12+: each group's anchor (its eval call's shim, a local of that call)
 * picks the native frame whose stretch of stack holds it; no name needed.
 */
static void test_merge_anchors(void)
{
	/* pcs: leaf, eval A, ccall, eval B, main, _start; frame j spans [sps[j], sps[j + 1]). */
	const char *native = "leaf@libm.so;python3+0x10@python3;ccall@ext.so;python3+0x20@python3;"
			     "main@python3;_start@python3";
	spy_addr_t sps[] = { 0x1000, 0x1008, 0x1020, 0x1028, 0x1040, 0x1050 };
	spy_addr_t anchors[] = { 0x1010, 0x1030 };
	struct sym_merge_where w = { sps, 6, anchors, 2 };
	struct sym_merge_counts c = merge_where(native, &w, "c;b;a!;z;y!", false,
						"leaf@libm.so;c;b;a;ccall@ext.so;z;y", __LINE__);
	CHECK_INT(c.extra_eval + c.extra_py, 0);
	merge_where(native, &w, "c;b;a!;z;y!", true,
		    "leaf@libm.so;c;b;a;python3+0x10@python3;ccall@ext.so;z;y;python3+0x20@python3;"
		    "main@python3;_start@python3",
		    __LINE__);
	/* Names do not count once anchors are known: this eval frame ran nothing. */
	spy_addr_t sps1[] = { 0x1000, 0x1004, 0x1008, 0x1020, 0x1028, 0x1040, 0x1050 };
	struct sym_merge_where w1 = { sps1, 7, anchors, 2 };
	merge_where("leaf@libm.so;_PyEval_EvalFrameDefault@python3;python3+0x10@python3;ccall@ext.so;"
		    "python3+0x20@python3;main@python3;_start@python3",
		    &w1, "c;b;a!;z;y!", true,
		    "leaf@libm.so;_PyEval_EvalFrameDefault@python3;c;b;a;python3+0x10@python3;"
		    "ccall@ext.so;z;y;python3+0x20@python3;main@python3;_start@python3",
		    __LINE__);
	/* The second anchor in no frame walked (the walk stopped at ccall). */
	w.nsps = 3;
	c = merge_where("leaf@libm.so;python3+0x10@python3;ccall@ext.so", &w, "c;b;a!;z;y!", false,
			"leaf@libm.so;c;b;a;[incomplete];z;y", __LINE__);
	CHECK_INT(c.extra_py, 1);
	/* A group with no anchor (a walk of the frame chain cut short) is not placed. */
	w.nsps = 6;
	w.nanchors = 1;
	merge_where(native, &w, "c;b;a!;z;y!", false, "leaf@libm.so;c;b;a;[incomplete];z;y", __LINE__);
	/* Inlined calls at the eval call's pc are its callees: the group goes outward of them. */
	spy_addr_t sps2[] = { 0x1000, 0x1008, 0x1040 };
	spy_addr_t anchors2[] = { 0x1010 };
	struct sym_merge_where w2 = { sps2, 3, anchors2, 1 };
	merge_where("x@ext.so;inl@lib.so^;evalfn@lib.so;_start@lib.so", &w2, "f!", true,
		    "x@ext.so;inl@lib.so;f;evalfn@lib.so;_start@lib.so", __LINE__);
	/* JIT code shows once, attributed to the frame it runs. */
	spy_addr_t sps3[] = { 0x1000, 0x1004, 0x1008, 0x1040 };
	struct sym_merge_where w3 = { sps3, 4, anchors2, 1 };
	merge_where("[jit]@//anon;[jit]@//anon;python3+0x10@python3;_start@python3", &w3, "f!", false,
		    "[jit]@//anon;f", __LINE__);
}

/* ---- resolving our own pcs ---- */

static int self_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	memcpy(dst, (const void *)(uintptr_t)addr, len);
	return 0;
}

__attribute__((noinline)) int spy_test_marker_function(int x);
__attribute__((noinline)) int spy_test_marker_function(int x)
{
	return x * 3 + 1;
}

/* A return address inside code inlined from spy_test_inlined into spy_test_outer. */
__attribute__((noinline)) uintptr_t spy_test_where(void);
__attribute__((noinline)) uintptr_t spy_test_where(void)
{
	return (uintptr_t)__builtin_return_address(0);
}

static inline __attribute__((always_inline)) uintptr_t spy_test_inlined(int x)
{
	uintptr_t pc = spy_test_where();
	return pc + (uintptr_t)(x & 0);
}

__attribute__((noinline)) uintptr_t spy_test_outer(int x);
__attribute__((noinline)) uintptr_t spy_test_outer(int x)
{
	uintptr_t pc = spy_test_inlined(x);
	__asm__ volatile("" ::: "memory");
	return pc;
}

/* Whether this test program carries DWARF (not in a release build without -g). */
static bool have_dwarf(void)
{
	struct sym_elf *e = NULL;
	uint64_t addr, size;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	bool yes = fd >= 0 && sym_elf_open(&e, fd, "/proc/self/exe", NULL) == 0 &&
		   sym_elf_section(e, ".debug_info", &addr, &size);
	sym_elf_free(e);
	return yes;
}

static void test_resolve_inline(struct sym_native *s, const struct spy_mem *mem)
{
	if (!have_dwarf()) {
		printf("SKIP inlined frames: this build has no DWARF (.debug_info)\n");
		return;
	}
	struct spy_stack out = SPY_STACK_INIT;
	/* As the second frame of a walk: a return address, looked up at pc - 1. */
	spy_addr_t pcs[2] = { 0, (spy_addr_t)spy_test_outer(1) };
	sym_native_resolve(s, mem, pcs, 2, &out);
	CHECK_INT(out.n, 3);
	if (out.n == 3) {
		CHECK_STR(out.v[1].func, "spy_test_inlined");
		CHECK_STR(out.v[2].func, "spy_test_outer");
		CHECK(out.v[1].addr == pcs[1]);
		CHECK_INT(out.v[1].flags, SPY_FRAME_INLINED);
		CHECK_INT(out.v[2].flags, 0);
	}
	spy_stack_release(&out);
}

#ifdef SPY_TEST_LTO
#include "tests/lib/lto.h"
#endif

/* The same through an LTO build's DWARF, where libdw's dwarf_getscopes finds no scope at all. */
static void test_resolve_lto_inline(struct sym_native *s, const struct spy_mem *mem)
{
#ifdef SPY_TEST_LTO
	struct spy_stack out = SPY_STACK_INIT;
	spy_addr_t pcs[2] = { 0, (spy_addr_t)spy_lto_outer(1) };
	sym_native_resolve(s, mem, pcs, 2, &out);
	CHECK_INT(out.n, 3);
	if (out.n == 3) {
		CHECK_STR(out.v[1].func, "spy_lto_inner");
		CHECK_STR(out.v[2].func, "spy_lto_outer");
		CHECK_STR(out.v[1].file, "libspy-test-lto.so");
		CHECK_INT(out.v[1].flags, SPY_FRAME_INLINED);
	}
	spy_stack_release(&out);
#else
	printf("SKIP inlined frames of an LTO build: the test's LTO library is built by GCC only\n");
#endif
}

static void test_resolve_self(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f != NULL);
	if (!f) {
		return;
	}
	char *text = NULL;
	size_t cap = 0, len = 0;
	text = malloc(cap = 1 << 20);
	len = fread(text, 1, cap - 1, f);
	fclose(f);
	struct spy_map *maps = NULL;
	size_t nmaps = 0;
	char *paths = NULL;
	CHECK(proc_parse_maps(text, len, &maps, &nmaps, &paths, NULL) >= 0);
	struct spy_mem mem = { .read = self_read, .maps = maps, .nmaps = nmaps };

	struct sym_native *s = sym_native_new(getpid(), NULL, &strs);
	struct spy_stack out = SPY_STACK_INIT;
	spy_addr_t pcs[2] = { (spy_addr_t)(uintptr_t)&spy_test_marker_function + 2,
			      (spy_addr_t)(uintptr_t)&strlen + 1 };
	for (int round = 0; round < 3; round++) {
		spy_stack_reset(&out);
		sym_native_resolve(s, &mem, pcs, 1, &out);
		CHECK_INT(out.n, 1);
		CHECK_STR(out.v[0].func, "spy_test_marker_function");
		CHECK_STR(out.v[0].file, "test-symbolize-native");
		CHECK_INT(out.v[0].kind, SPY_FRAME_NATIVE);
		CHECK(out.v[0].addr == pcs[0]);
	}
	struct sym_native_stats st;
	sym_native_stats(s, &st);
	CHECK_INT(st.lookups, 3);
	CHECK_INT(st.hits, 2);
	/* A pc outside every mapping is unknown, not a crash. */
	spy_addr_t bad = 8;
	spy_stack_reset(&out);
	sym_native_resolve(s, &mem, &bad, 1, &out);
	CHECK_INT(out.n, 1);
	CHECK_STR(out.v[0].func, "[unknown]");
	/* A pc no symbol covers (our own ELF header) is its file and address there. */
	const struct spy_map *self = NULL;
	for (size_t i = 0; i < nmaps && !self; i++) {
		if (maps[i].offset == 0 && strstr(maps[i].path, "test-symbolize-native")) {
			self = &maps[i];
		}
	}
	CHECK(self != NULL);
	if (self) {
		spy_addr_t hdr = self->lo + 0x10;
		spy_stack_reset(&out);
		sym_native_resolve(s, &mem, &hdr, 1, &out);
		CHECK_INT(out.n, 1);
		CHECK(!strncmp(out.v[0].func, "test-symbolize-native+0x", 24));
		CHECK_STR(out.v[0].file, "test-symbolize-native");
	}
	test_resolve_inline(s, &mem);
	test_resolve_lto_inline(s, &mem);
	sym_native_free(s);
	spy_stack_release(&out);
	free(maps);
	free(paths);
	free(text);
}

/* Code in anonymous executable memory is a JIT's: one marker frame, and the unwinder knows it. */
static void test_resolve_jit(void)
{
	struct spy_map maps[] = {
		{ 0x10000, 0x20000, 0, SPY_MAP_R | SPY_MAP_X | SPY_MAP_P, 0, 0, "" },
		{ 0x20000, 0x30000, 0, SPY_MAP_R | SPY_MAP_W | SPY_MAP_P, 0, 0, "" },
	};
	struct spy_mem mem = { .read = self_read, .maps = maps, .nmaps = 2 };
	struct sym_native *s = sym_native_new(getpid(), NULL, &strs);
	struct spy_stack out = SPY_STACK_INIT;
	spy_addr_t pcs[2] = { 0x10010, 0x20010 };
	sym_native_resolve(s, &mem, pcs, 2, &out);
	CHECK_INT(out.n, 2);
	CHECK_STR(out.v[0].func, SYM_JIT_FRAME);
	CHECK_STR(out.v[0].file, SYM_JIT_FILE);
	CHECK_STR(out.v[1].func, "[unknown]");
	CHECK(sym_is_jit_pc(&mem, 0x10010));
	CHECK(!sym_is_jit_pc(&mem, 0x20010));
	CHECK(!sym_is_jit_pc(&mem, 0x40000));
	sym_native_free(s);
	spy_stack_release(&out);
}

/* ---- unwinding through CFI that toggles return address signing ---- */

/*
 * An .eh_frame_hdr table, a CIE and an FDE in a buffer of ours, read as
 * target memory: sym_cfi_ra_state_ops must name exactly the bytes 0x2d
 * that are negate_ra_state opcodes, not those that are operands.
 */
static void test_cfi_ra_ops(void)
{
	static uint8_t img[0x200] __attribute__((aligned(8)));
	memset(img, 0, sizeof(img));
	/* The table: (start, FDE) pairs, datarel from img. */
	const int32_t tab[4] = { 0x1000, 0x100, 0x2000, 0x180 };
	memcpy(img, tab, sizeof(tab));
	/* CIE at 0x40, "zR" (FDE pointers pcrel sdata4), def_cfa sp+0, then a negate at 0x54. */
	static const uint8_t cie[] = { 0x11, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 4, 0x78, 30,
				       1, 0x1b, 0x0c, 31, 0, 0x2d };
	memcpy(img + 0x40, cie, sizeof(cie));
	/* FDE at 0x100, its program at 0x111. */
	static const uint8_t fde[] = {
		0x26, 0, 0, 0, 0xc4, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0,
		0x2d,                   /* 0x111 negate_ra_state */
		0x41, 0x0e, 0x10,       /* advance_loc 1, def_cfa_offset 16 */
		0x9d, 0x02, 0x9e, 0x01, /* offset x29, x30 */
		0x0f, 0x02, 0x2d, 0x2d, /* def_cfa_expression: a block of two 0x2d */
		0x10, 30, 0x01, 0x2d,   /* expression x30: a block of one */
		0x02, 0x2d,             /* advance_loc1 0x2d */
		0x0a, 0x2d, 0x0b,       /* remember, negate at 0x124, restore */
		0x05, 0xad, 0x01, 0x2d, /* offset_extended r173, 0x2d */
	};
	memcpy(img + 0x100, fde, sizeof(fde));
	struct spy_mem mem = { .read = self_read };
	spy_addr_t base = (spy_addr_t)(uintptr_t)img, ops[8];
	CHECK_INT((int)sym_cfi_ra_state_ops(&mem, base, base, 2, base + 0x1010, ops, 8), 3);
	CHECK(ops[0] == base + 0x54 && ops[1] == base + 0x111 && ops[2] == base + 0x124);
	/* Only as many as asked for. */
	CHECK_INT((int)sym_cfi_ra_state_ops(&mem, base, base, 2, base + 0x1010, ops, 2), 2);
	/* Before the first function: no FDE, nothing. */
	CHECK_INT((int)sym_cfi_ra_state_ops(&mem, base, base, 2, base + 0x10, ops, 8), 0);
	/* An augmentation whose data has no known size: nothing of the CIE or FDE. */
	img[0x40 + 10] = 'X';
	CHECK_INT((int)sym_cfi_ra_state_ops(&mem, base, base, 2, base + 0x1010, ops, 8), 0);
	img[0x40 + 10] = 'R';
	/* An opcode DWARF does not have ends the FDE's program there. */
	img[0x111 + 1] = 0x3f;
	CHECK_INT((int)sym_cfi_ra_state_ops(&mem, base, base, 2, base + 0x1010, ops, 8), 2);
	img[0x111 + 1] = 0x41;
	/* An FDE longer than its bound is not read at all. */
	img[0x100 + 3] = 0x10;
	CHECK_INT((int)sym_cfi_ra_state_ops(&mem, base, base, 2, base + 0x1010, ops, 8), 0);
}

static volatile int ra_spinning;

__attribute__((noinline)) void spy_test_ra_spin(void);
__attribute__((noinline)) void spy_test_ra_spin(void)
{
	ra_spinning = 1;
	for (;;) {
		__asm__ volatile("" ::: "memory");
	}
}

/*
 * Its CFI holds DW_CFA_AARCH64_negate_ra_state, as every function of an
 * arm64 build with -mbranch-protection=pac-ret does, here on any
 * architecture (the assembler's name for the opcode is SPARC's). It sits
 * before the call, so it is in the row libunwind computes for the return
 * address. Nothing is signed: on arm64 the mask leaves an unsigned address
 * as it is, and on x86-64 nothing reads the sign state.
 */
__attribute__((noinline)) int spy_test_ra_signing(int x);
__attribute__((noinline)) int spy_test_ra_signing(int x)
{
	__asm__ volatile(".cfi_window_save" ::: "memory");
	spy_test_ra_spin();
	return x + 1;
}

__attribute__((noinline)) int spy_test_ra_outer(int x);
__attribute__((noinline)) int spy_test_ra_outer(int x)
{
	int r = spy_test_ra_signing(x);
	__asm__ volatile("" ::: "memory");
	return r * 2;
}

static int child_read(void *ctx, spy_addr_t addr, void *dst, size_t len)
{
	pid_t pid = *(const pid_t *)ctx;
	struct iovec local = { dst, len }, remote = { (void *)(uintptr_t)addr, len };
	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

/*
 * libunwind before 1.7 fails the step out of such a function: without
 * spy's handling the walk ends at spy_test_ra_signing, and
 * spy_test_ra_outer and main never show. The walk from saved registers
 * (dump --core --native's) must give the same frames.
 */
static void test_unwind_ra_state(void)
{
	if (!test_ptrace_permitted()) {
		printf("SKIP unwind through negate_ra_state: ptrace is not permitted here (%s)\n",
		       strerror(errno));
		return;
	}
	int ready[2];
	CHECK_INT(pipe(ready), 0);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ready[0]);
		(void)!write(ready[1], "r", 1);
		spy_test_ra_outer(1);
		_exit(0);
	}
	close(ready[1]);
	char c;
	CHECK_INT((int)read(ready[0], &c, 1), 1);
	close(ready[0]);
	/* Until the spin has surely begun (it sets the flag in the child's copy). */
	int spinning = 0;
	for (int i = 0; i < 500 && !spinning; i++) {
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
		child_read(&pid, (spy_addr_t)(uintptr_t)&ra_spinning, &spinning, sizeof(spinning));
	}
	CHECK_INT(spinning, 1);
	int st = 0;
	CHECK(ptrace(PTRACE_SEIZE, pid, NULL, NULL) == 0 && ptrace(PTRACE_INTERRUPT, pid, NULL, NULL) == 0 &&
	      waitpid(pid, &st, __WALL) == pid && WIFSTOPPED(st));

	char path[64], *text = malloc(1 << 20);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "r");
	size_t len = f ? fread(text, 1, (1 << 20) - 1, f) : 0;
	if (f) {
		fclose(f);
	}
	struct spy_map *maps = NULL;
	size_t nmaps = 0;
	char *paths = NULL;
	CHECK(proc_parse_maps(text, len, &maps, &nmaps, &paths, NULL) >= 0);
	struct spy_mem mem = { .read = child_read, .ctx = &pid, .maps = maps, .nmaps = nmaps };

	struct sym_unwinder *u = NULL;
	CHECK_INT(sym_unwinder_new(&u, NULL), 0);
	spy_addr_t pcs[32], sps[32];
	size_t n = 0;
	int rc = sym_unwind(u, &mem, (int32_t)pid, NULL, NULL, 0, pcs, sps, 32, &n);
	CHECK_INT(rc, 0);

	struct sym_native *s = sym_native_new(pid, NULL, &strs);
	struct spy_stack out = SPY_STACK_INIT;
	sym_native_resolve(s, &mem, pcs, n, &out);
	static const char *const want[] = { "spy_test_ra_spin", "spy_test_ra_signing",
					    "spy_test_ra_outer", "test_unwind_ra_state", "main" };
	size_t next = 0;
	for (size_t i = 0; i < out.n && next < SPY_ARRAY_SIZE(want); i++) {
		if (out.v[i].func && !strcmp(out.v[i].func, want[next])) {
			next++;
		}
	}
	if (next < SPY_ARRAY_SIZE(want)) {
		fprintf(stderr, "unwind through negate_ra_state: %s not found in %zu frames:", want[next], out.n);
		for (size_t i = 0; i < out.n; i++) {
			fprintf(stderr, " %s", out.v[i].func ? out.v[i].func : "?");
		}
		fprintf(stderr, "\n");
	}
	CHECK_INT((int)next, (int)SPY_ARRAY_SIZE(want));

	/*
	 * The same walk from saved registers (what a core's NT_PRSTATUS
	 * holds), on an unwinder of its own so that no cache carries over:
	 * the same pcs and stack pointers, frame for frame.
	 */
	struct sym_saved_regs saved = { NULL, 0 };
	struct spy_regs regs;
	CHECK_INT(spy_arch_get_regs(pid, &regs), 0);
	CHECK_INT(spy_arch_pac_mask(pid, &saved.pac_mask), 0);
	saved.regs = &regs;
	struct sym_unwinder *u2 = NULL;
	CHECK_INT(sym_unwinder_new(&u2, NULL), 0);
	spy_addr_t pcs2[32], sps2[32];
	size_t n2 = 0;
	CHECK_INT(sym_unwind(u2, &mem, (int32_t)pid, &saved, NULL, 0, pcs2, sps2, 32, &n2), 0);
	CHECK_INT(n2, n);
	CHECK(n2 == n && !memcmp(pcs, pcs2, n * sizeof(*pcs)) && !memcmp(sps, sps2, n * sizeof(*sps)));
	sym_unwinder_free(u2);

	spy_stack_release(&out);
	sym_native_free(s);
	sym_unwinder_free(u);
	free(maps);
	free(paths);
	free(text);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, __WALL);
}

/* An unwind of a thread we do not trace fails cleanly, with nothing walked. */
static void test_unwind_fails(void)
{
	struct sym_unwinder *u = NULL;
	CHECK_INT(sym_unwinder_new(&u, NULL), 0);
	struct spy_mem mem = { .read = self_read, .maps = NULL, .nmaps = 0 };
	spy_addr_t pcs[8], sps[8];
	size_t n = 99;
	CHECK_INT(sym_unwind(u, &mem, 0, NULL, NULL, 0, pcs, sps, 8, &n), -SPY_EMEM);
	CHECK_INT(n, 0);
	n = 99;
	CHECK_INT(sym_unwind(u, &mem, (int32_t)getpid(), NULL, NULL, 0, pcs, sps, 8, &n), -SPY_EMEM);
	CHECK_INT(n, 0);
	sym_unwinder_free(u);
	sym_unwinder_free(NULL);
}

int main(void)
{
	test_merge_per_frame();
	test_merge_groups();
	test_merge_eval_names();
	test_merge_mismatch();
	test_merge_anchors();
	test_resolve_self();
	test_resolve_jit();
	test_unwind_fails();
	test_cfi_ra_ops();
	test_unwind_ra_state();
	spy_strtab_release(&strs);
	return check_done();
}
