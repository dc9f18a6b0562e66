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
#include <unistd.h>

#include "common/buf.h"
#include "common/strtab.h"
#include "sampler/sampler.h"
#include "symbolize/symbolize.h"
#include "tests/lib/check.h"

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

	struct sym_native *s = sym_native_new(getpid(), &strs);
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
	struct sym_native *s = sym_native_new(getpid(), &strs);
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

/* An unwind of a thread we do not trace fails cleanly, with nothing walked. */
static void test_unwind_fails(void)
{
	struct sym_unwinder *u = NULL;
	CHECK_INT(sym_unwinder_new(&u, NULL), 0);
	struct spy_mem mem = { .read = self_read, .maps = NULL, .nmaps = 0 };
	spy_addr_t pcs[8], sps[8];
	size_t n = 99;
	CHECK_INT(sym_unwind(u, &mem, 0, NULL, 0, pcs, sps, 8, &n), -SPY_EMEM);
	CHECK_INT(n, 0);
	n = 99;
	CHECK_INT(sym_unwind(u, &mem, (int32_t)getpid(), NULL, 0, pcs, sps, 8, &n), -SPY_EMEM);
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
	spy_strtab_release(&strs);
	return check_done();
}
