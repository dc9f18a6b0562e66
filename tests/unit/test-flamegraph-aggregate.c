/*
 * Unit tests for flamegraph/ aggregation: the trie's self and total counts,
 * distinct stacks, the trie view, -F merging, synthetic roots, bounds (depth,
 * stack and sample limits), adding only known stacks,
 * no growth when known stacks are added again, deterministic order, and the
 * metadata list.
 */
#include <stdlib.h>
#include <string.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"

/* Push a frame whose strings are interned in t. file NULL for synthetic. */
static void push(struct spy_stack *s, struct spy_strtab *t, uint8_t kind,
		 const char *func, const char *file, uint32_t line)
{
	struct spy_frame *f = spy_stack_push(s);
	f->func = spy_strtab_interns(t, func);
	f->file = file ? spy_strtab_interns(t, file) : NULL;
	f->line = line;
	f->kind = kind;
}

#define PY SPY_FRAME_PYTHON
#define NAT SPY_FRAME_NATIVE
#define SYN SPY_FRAME_SYNTHETIC

/*
 * Build a stack from a root-first list "func@file:line" separated by '|',
 * pushed innermost first as a walker would. "func@lib" is native, a frame
 * without '@' is synthetic.
 */
static void build(struct spy_stack *s, struct spy_strtab *t, const char *rootfirst)
{
	char *copy = strdup(rootfirst);
	char *parts[256];
	size_t n = 0;
	for (char *p = copy; p && n < 256;) {
		parts[n++] = p;
		char *bar = strchr(p, '|');
		if (bar) {
			*bar = '\0';
			p = bar + 1;
		} else {
			p = NULL;
		}
	}
	spy_stack_reset(s);
	while (n--) {
		char *at = strchr(parts[n], '@');
		if (!at) {
			push(s, t, SYN, parts[n], NULL, 0);
			continue;
		}
		*at = '\0';
		char *colon = strrchr(at + 1, ':');
		if (colon) {
			*colon = '\0';
			push(s, t, PY, parts[n], at + 1, (uint32_t)atoi(colon + 1));
		} else {
			push(s, t, NAT, parts[n], at + 1, 0);
		}
	}
	free(copy);
}

static void add(struct fg_profile *p, struct spy_stack *s, const char *rootfirst, uint64_t count)
{
	build(s, fg_profile_strtab(p), rootfirst);
	CHECK_INT(fg_profile_add(p, s, count), 0);
}

static char *folded(const struct fg_profile *p)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	return spy_buf_detach(&b, NULL);
}

/* The node of t reached from the root by the given frame texts (root first). */
static const struct fg_node *find(const struct fg_tree *t, const struct fg_profile *p,
				  const char *const *texts, size_t n)
{
	uint32_t cur = 0;
	struct spy_buf b = SPY_BUF_INIT;
	for (size_t k = 0; k < n && cur != FG_NONE; k++) {
		uint32_t next = FG_NONE;
		for (uint32_t c = t->start[cur]; c < t->start[cur + 1]; c++) {
			const struct fg_node *nd = &t->nodes[t->child[c]];
			spy_buf_reset(&b);
			fg_frame_format(fg_profile_frame(p, nd->frame), &b);
			if (!strcmp(b.buf, texts[k])) {
				next = t->child[c];
				break;
			}
		}
		cur = next;
	}
	spy_buf_release(&b);
	return cur == FG_NONE ? NULL : &t->nodes[cur];
}

/* Structural invariants every tree must satisfy. */
static void check_tree(const struct fg_tree *t, const struct fg_profile *p)
{
	struct spy_buf a = SPY_BUF_INIT, b = SPY_BUF_INIT;
	CHECK(t->nnodes >= 1);
	CHECK_INT(t->start[0], 0);
	CHECK_INT(t->start[t->nnodes], t->nnodes - 1);
	for (uint32_t i = 0; i < t->nnodes; i++) {
		const struct fg_node *nd = &t->nodes[i];
		uint64_t sum = nd->self;
		for (uint32_t c = t->start[i]; c < t->start[i + 1]; c++) {
			const struct fg_node *ch = &t->nodes[t->child[c]];
			CHECK(t->child[c] > i);
			CHECK_INT(ch->parent, i);
			CHECK_INT(ch->depth, nd->depth + 1);
			sum += ch->total;
			if (c > t->start[i]) {
				/* Siblings strictly ascending by folded text. */
				spy_buf_reset(&a);
				spy_buf_reset(&b);
				fg_frame_format(fg_profile_frame(p, t->nodes[t->child[c - 1]].frame), &a);
				fg_frame_format(fg_profile_frame(p, ch->frame), &b);
				CHECK(strcmp(a.buf, b.buf) < 0);
			}
		}
		CHECK_INT(nd->total, sum);
	}
	spy_buf_release(&a);
	spy_buf_release(&b);
}

static void test_counts(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	struct fg_stats st;

	/* main -> f -> g twice, main -> f -> h once, main alone once. */
	add(p, &s, "main@app.py:1|f@app.py:5|g@app.py:9", 1);
	add(p, &s, "main@app.py:1|f@app.py:5|h@app.py:12", 1);
	add(p, &s, "main@app.py:1|f@app.py:5|g@app.py:9", 1);
	add(p, &s, "main@app.py:1", 1);

	fg_profile_stats(p, &st);
	CHECK_INT(st.samples, 4);
	CHECK_INT(st.stacks, 3);    /* distinct: main;f;g  main;f;h  main */
	CHECK_INT(st.frame_ids, 7); /* 3 + 3 + 1 */
	CHECK_INT(st.frames, 4);
	CHECK_INT(st.dropped, 0);

	struct fg_tree t;
	fg_tree_init(&t, p);
	check_tree(&t, p);
	CHECK_INT(t.nnodes, 5);     /* root, main, f, g, h */
	CHECK_INT(t.nodes[0].total, 4);
	CHECK_INT(t.nodes[0].self, 0);
	const char *m[] = { "main (app.py:1)", "f (app.py:5)", "g (app.py:9)" };
	const struct fg_node *nd = find(&t, p, m, 1);
	CHECK(nd && nd->total == 4 && nd->self == 1 && nd->depth == 1);
	nd = find(&t, p, m, 2);
	CHECK(nd && nd->total == 3 && nd->self == 0);
	nd = find(&t, p, m, 3);
	CHECK(nd && nd->total == 2 && nd->self == 2 && nd->depth == 3);
	const char *h[] = { "main (app.py:1)", "f (app.py:5)", "h (app.py:12)" };
	nd = find(&t, p, h, 3);
	CHECK(nd && nd->total == 1 && nd->self == 1);
	fg_tree_release(&t);

	/* The same stack with a count adds up rather than duplicating. */
	add(p, &s, "main@app.py:1|f@app.py:5|g@app.py:9", 5);
	fg_profile_stats(p, &st);
	CHECK_INT(st.stacks, 3);
	CHECK_INT(st.samples, 9);
	CHECK_INT(st.frame_ids, 7);
	fg_tree_init(&t, p);
	nd = find(&t, p, m, 3);
	CHECK(nd && nd->self == 7);
	fg_tree_release(&t);

	char *text = folded(p);
	CHECK_STR(text,
		  "main (app.py:1) 1\n"
		  "main (app.py:1);f (app.py:5);g (app.py:9) 7\n"
		  "main (app.py:1);f (app.py:5);h (app.py:12) 1\n");
	free(text);

	/* count 0 adds nothing; an empty stack is dropped and counted. */
	add(p, &s, "zzz@x.py:1", 0);
	spy_stack_reset(&s);
	CHECK_INT(fg_profile_add(p, &s, 3), 0);
	fg_profile_stats(p, &st);
	CHECK_INT(st.samples, 9);
	CHECK_INT(st.dropped, 3);
	CHECK_INT(st.stacks, 3);

	spy_stack_release(&s);
	fg_profile_free(p);
}

static void test_function_mode(void)
{
	struct spy_stack s = SPY_STACK_INIT;
	struct fg_stats st;
	const char *a = "main@app.py:3|work@app.py:10";
	const char *b = "main@app.py:4|work@app.py:12";

	struct fg_profile *lines = fg_profile_new(NULL, 0);
	add(lines, &s, a, 2);
	add(lines, &s, b, 3);
	fg_profile_stats(lines, &st);
	CHECK_INT(st.stacks, 2);
	CHECK_INT(st.frames, 4);

	struct fg_profile *funcs = fg_profile_new(NULL, FG_FUNCTION);
	CHECK_INT(fg_profile_flags(funcs), FG_FUNCTION);
	add(funcs, &s, a, 2);
	add(funcs, &s, b, 3);
	fg_profile_stats(funcs, &st);
	CHECK_INT(st.stacks, 1);
	CHECK_INT(st.frame_ids, 2);
	CHECK_INT(st.frames, 2);
	CHECK_INT(st.samples, 5);
	char *text = folded(funcs);
	CHECK_STR(text, "main (app.py);work (app.py) 5\n");
	free(text);

	fg_profile_free(lines);
	fg_profile_free(funcs);
	spy_stack_release(&s);
}

static void test_recursion_and_synthetic(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;

	/* A recursive stack is one path; each level is its own node. */
	add(p, &s, "process 7|thread 7 \"main\"|fib@f.py:2|fib@f.py:3|fib@f.py:3", 4);
	const char *path[] = { "process 7", "thread 7 \"main\"", "fib (f.py:2)", "fib (f.py:3)", "fib (f.py:3)" };
	struct fg_tree tr;
	fg_tree_init(&tr, p);
	for (size_t d = 1; d <= 5; d++) {
		const struct fg_node *nd = find(&tr, p, path, d);
		CHECK(nd && nd->total == 4);
		CHECK(nd && nd->self == (d == 5 ? 4u : 0u));
	}
	fg_tree_release(&tr);
	struct fg_stats st;
	fg_profile_stats(p, &st);
	CHECK_INT(st.frames, 4); /* fib (f.py:3) is one frame used twice */

	/* A synthetic frame is its name: file and line are ignored. */
	struct spy_strtab *t = fg_profile_strtab(p);
	spy_stack_reset(&s);
	push(&s, t, PY, "leaf", "f.py", 9);
	push(&s, t, SYN, "process 7", "ignored", 33);
	CHECK_INT(fg_profile_add(p, &s, 1), 0);
	fg_profile_stats(p, &st);
	CHECK_INT(st.frames, 5);
	const char *leaf[] = { "process 7", "leaf (f.py:9)" };
	fg_tree_init(&tr, p);
	CHECK(find(&tr, p, leaf, 2) != NULL);
	check_tree(&tr, p);
	fg_tree_release(&tr);

	/* NULL strings do not crash and are written as empty. */
	spy_stack_reset(&s);
	struct spy_frame *f = spy_stack_push(&s);
	f->kind = PY;
	f = spy_stack_push(&s);
	f->kind = SYN;
	CHECK_INT(fg_profile_add(p, &s, 1), 0);
	char *text = folded(p);
	CHECK(strstr(text, "\n? ()") == NULL);
	CHECK(strstr(text, "?; () 1\n") != NULL);
	free(text);

	spy_stack_release(&s);
	fg_profile_free(p);
}

static void test_order(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	/* Inserted out of order; written sorted by frame text at every level. */
	add(p, &s, "b@m.py:1|z@m.py:1", 1);
	add(p, &s, "b@m.py:1|a@m.py:1", 2);
	add(p, &s, "a@m.py:1", 3);
	add(p, &s, "b@m.py:1", 4);
	add(p, &s, "a@m.py:1|c@m.py:1", 5);
	char *text = folded(p);
	CHECK_STR(text,
		  "a (m.py:1) 3\n"
		  "a (m.py:1);c (m.py:1) 5\n"
		  "b (m.py:1) 4\n"
		  "b (m.py:1);a (m.py:1) 2\n"
		  "b (m.py:1);z (m.py:1) 1\n");

	/* The same samples in another order give the same bytes. */
	struct fg_profile *q = fg_profile_new(NULL, 0);
	add(q, &s, "a@m.py:1|c@m.py:1", 5);
	add(q, &s, "b@m.py:1", 4);
	add(q, &s, "b@m.py:1|a@m.py:1", 2);
	add(q, &s, "a@m.py:1", 3);
	add(q, &s, "b@m.py:1|z@m.py:1", 1);
	char *text2 = folded(q);
	CHECK_STR(text2, text);
	free(text);
	free(text2);
	fg_profile_free(q);
	spy_stack_release(&s);
	fg_profile_free(p);
}

static int count_cb(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	uint64_t *acc = ctx;
	acc[0]++;
	acc[1] += count;
	acc[2] += depth;
	return acc[0] == acc[3] ? 42 : 0;
}

static void test_foreach(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	add(p, &s, "a@m.py:1|b@m.py:2", 2);
	add(p, &s, "a@m.py:1", 3);
	add(p, &s, "c@m.py:1|d@m.py:2|e@m.py:3", 4);
	uint64_t acc[4] = { 0, 0, 0, 0 };
	CHECK_INT(fg_profile_foreach_stack(p, count_cb, acc), 0);
	CHECK_INT(acc[0], 3);
	CHECK_INT(acc[1], 9);
	CHECK_INT(acc[2], 2 + 1 + 3);
	uint64_t stop[4] = { 0, 0, 0, 2 };
	CHECK_INT(fg_profile_foreach_stack(p, count_cb, stop), 42);
	CHECK_INT(stop[0], 2);
	spy_stack_release(&s);
	fg_profile_free(p);
}

static void test_bounds(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	struct spy_strtab *t = fg_profile_strtab(p);
	struct fg_stats st;

	/* Deeper than FG_MAX_DEPTH: the root-most frames are kept. */
	char name[32];
	for (int i = FG_MAX_DEPTH + 5; i-- > 0;) {
		snprintf(name, sizeof(name), "f%d", i);
		push(&s, t, PY, name, "deep.py", (uint32_t)i + 1);
	}
	CHECK_INT(fg_profile_add(p, &s, 2), 0);
	fg_profile_stats(p, &st);
	CHECK_INT(st.truncated, 2);
	CHECK_INT(st.samples, 2);
	CHECK_INT(st.frame_ids, FG_MAX_DEPTH);
	const struct fg_frame *fr = fg_profile_frame(p, 0);
	CHECK_STR(fr->func, "f0"); /* the root end survives */
	fg_profile_free(p);

	/* Stack limit: a new stack beyond it is dropped and counted. */
	p = fg_profile_new(NULL, 0);
	fg_profile_limit_stacks(p, 2);
	add(p, &s, "a@m.py:1|b@m.py:2|c@m.py:3", 1);
	add(p, &s, "a@m.py:1|b@m.py:2", 2);
	build(&s, fg_profile_strtab(p), "a@m.py:1|x@m.py:9");
	CHECK_INT(fg_profile_add(p, &s, 7), -SPY_EBOUND);
	fg_profile_stats(p, &st);
	CHECK_INT(st.stacks, 2);
	CHECK_INT(st.dropped, 7);
	CHECK_INT(st.samples, 3);
	/* Known stacks still count at the limit. */
	add(p, &s, "a@m.py:1|b@m.py:2|c@m.py:3", 4);
	fg_profile_stats(p, &st);
	CHECK_INT(st.samples, 7);
	CHECK_INT(st.stacks, 2);
	fg_profile_free(p);

	/* The sample limit: a profile never holds more than FG_MAX_TOTAL. */
	p = fg_profile_new(NULL, 0);
	add(p, &s, "a@m.py:1", FG_MAX_TOTAL - 1);
	build(&s, fg_profile_strtab(p), "a@m.py:1");
	CHECK_INT(fg_profile_add(p, &s, 2), -SPY_EBOUND);
	CHECK_INT(fg_profile_add(p, &s, UINT64_MAX), -SPY_EBOUND);
	CHECK_INT(fg_profile_add(p, &s, 1), 0);
	fg_profile_stats(p, &st);
	CHECK(st.samples == FG_MAX_TOTAL);
	/* Written as lines of at most FG_MAX_COUNT that read back whole. */
	char *text = folded(p);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "big", NULL), 0);
	fg_profile_stats(q, &st);
	CHECK(st.samples == FG_MAX_TOTAL);
	CHECK_INT(st.stacks, 1);
	free(text);
	fg_profile_free(q);
	fg_profile_free(p);
	spy_stack_release(&s);
}

/*
 * fg_profile_add_known (a budget's past-the-limit add): a held stack counts,
 * a new stack or frame changes nothing, not even the frame table, and
 * fg_profile_add's cache of its last stack is left as it was. names
 * counts each new frame's func and file bytes.
 */
static void test_add_known(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	struct fg_stats st;
	add(p, &s, "root|a@m.py:1|b@m.py:2", 1);
	fg_profile_stats(p, &st);
	/* root (4) + a, m.py (1 + 4) + b, m.py (1 + 4) */
	CHECK_INT(st.names, 14);
	build(&s, fg_profile_strtab(p), "root|a@m.py:1|b@m.py:2");
	CHECK_INT(fg_profile_add_known(p, &s, 3), 0);
	CHECK_INT(fg_profile_last_stack(p), 0);
	/* A new line is a new frame; a known prefix is a new stack: neither is added. */
	build(&s, fg_profile_strtab(p), "root|a@m.py:1|b@m.py:7");
	CHECK_INT(fg_profile_add_known(p, &s, 5), -SPY_EBOUND);
	build(&s, fg_profile_strtab(p), "root|a@m.py:1");
	CHECK_INT(fg_profile_add_known(p, &s, 5), -SPY_EBOUND);
	CHECK_INT(fg_profile_last_stack(p), FG_NONE);
	fg_profile_stats(p, &st);
	CHECK_INT(st.samples, 4);
	CHECK_INT(st.frames, 3);
	CHECK_INT(st.stacks, 1);
	CHECK_INT(st.dropped, 0);
	CHECK_INT(st.names, 14);
	/* The same stack again through fg_profile_add: its cache still right. */
	add(p, &s, "root|a@m.py:1|b@m.py:2", 1);
	add(p, &s, "root|a@m.py:1", 1);
	fg_profile_stats(p, &st);
	CHECK_INT(st.samples, 6);
	CHECK_INT(st.stacks, 2);
	char *text = folded(p);
	CHECK_STR(text, "root;a (m.py:1) 1\nroot;a (m.py:1);b (m.py:2) 5\n");
	free(text);
	/* A NULL file is "" in both. */
	spy_stack_reset(&s);
	struct spy_frame *f = spy_stack_push(&s);
	memset(f, 0, sizeof(*f));
	f->func = spy_strtab_interns(fg_profile_strtab(p), "n");
	f->kind = PY;
	CHECK_INT(fg_profile_add_known(p, &s, 1), -SPY_EBOUND);
	CHECK_INT(fg_profile_add(p, &s, 1), 0);
	CHECK_INT(fg_profile_add_known(p, &s, 1), 0);
	spy_stack_release(&s);
	fg_profile_free(p);
}

/* Memory does not grow with samples, only with distinct stacks. */
static void test_steady_state(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack stacks[64];
	char buf[256];
	for (int i = 0; i < 64; i++) {
		stacks[i] = (struct spy_stack)SPY_STACK_INIT;
		snprintf(buf, sizeof(buf), "main@a.py:1|w%d@b.py:%d|leaf%d@c.py:%d", i % 7, i, i % 5, i * 3 + 1);
		build(&stacks[i], fg_profile_strtab(p), buf);
		CHECK_INT(fg_profile_add(p, &stacks[i], 1), 0);
	}
	struct fg_stats before, after;
	fg_profile_stats(p, &before);
	for (int round = 0; round < 2000; round++) {
		for (int i = 0; i < 64; i++) {
			fg_profile_add(p, &stacks[(i * 37 + round) % 64], 1);
		}
	}
	fg_profile_stats(p, &after);
	CHECK_INT(after.bytes, before.bytes);
	CHECK_INT(after.frame_ids, before.frame_ids);
	CHECK_INT(after.frames, before.frames);
	CHECK_INT(after.stacks, 64);
	CHECK_INT(after.samples, 64 + 2000 * 64);
	for (int i = 0; i < 64; i++) {
		spy_stack_release(&stacks[i]);
	}
	fg_profile_free(p);
}

static void test_borrowed_strtab(void)
{
	struct spy_strtab session = SPY_STRTAB_INIT;
	struct fg_profile *p = fg_profile_new(&session, 0);
	CHECK(fg_profile_strtab(p) == &session);
	struct spy_stack s = SPY_STACK_INIT;
	add(p, &s, "main@app.py:1", 1);
	fg_profile_free(p);
	/* The session's strings outlive the profile. */
	CHECK_STR(s.v[0].func, "main");
	CHECK(spy_strtab_interns(&session, "main") == s.v[0].func);
	spy_stack_release(&s);
	spy_strtab_release(&session);
	fg_profile_free(NULL);
}

static void test_meta(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	const char *k, *v;

	fg_profile_meta_set(p, "zz-custom", "1");
	fg_profile_meta_set(p, FG_META_COMMAND, "python3 app.py --x\n--y");
	fg_profile_meta_setf(p, FG_META_PID, "%d", 1234);
	fg_profile_meta_set(p, "aa-custom", "2");
	fg_profile_meta_set(p, FG_META_SPY_VERSION, "0.1.0");
	fg_profile_meta_setf(p, FG_META_RATE_HZ, "%d", 100);
	CHECK_INT(fg_profile_meta_count(p), 6);
	/* Documented keys first, in cli.md order; the rest as set. */
	const char *want[] = { "spy-version", "pid", "rate-hz", "command", "zz-custom", "aa-custom" };
	for (size_t i = 0; i < 6; i++) {
		fg_profile_meta_at(p, i, &k, &v);
		CHECK_STR(k, want[i]);
	}
	/* Control bytes are made visible so the value stays on its line. */
	CHECK_STR(fg_profile_meta_get(p, FG_META_COMMAND), "python3 app.py --x\\x0a--y");
	CHECK_STR(fg_profile_meta_get(p, FG_META_PID), "1234");
	CHECK(fg_profile_meta_get(p, "missing") == NULL);

	/* Replace, then remove. */
	fg_profile_meta_set(p, FG_META_PID, "99");
	CHECK_STR(fg_profile_meta_get(p, FG_META_PID), "99");
	fg_profile_meta_set(p, "zz-custom", NULL);
	CHECK_INT(fg_profile_meta_count(p), 5);
	fg_profile_meta_at(p, 4, &k, &v);
	CHECK_STR(k, "aa-custom");

	/* Long values are cut at a UTF-8 boundary. */
	size_t n = FG_MAX_META_VALUE + 10;
	char *big = malloc(n + 1);
	for (size_t i = 0; i < n; i += 2) {
		big[i] = (char)0xc3; /* "é" = c3 a9 */
		big[i + 1] = (char)0xa9;
	}
	big[FG_MAX_META_VALUE - 1] = 'x'; /* make the cut land mid-sequence */
	big[n] = '\0';
	fg_profile_meta_set(p, FG_META_COMMAND, big);
	const char *got = fg_profile_meta_get(p, FG_META_COMMAND);
	CHECK(strlen(got) <= FG_MAX_META_VALUE);
	CHECK(((unsigned char)got[strlen(got) - 1] & 0xc0) != 0xc0);
	free(big);

	CHECK(fg_meta_key_valid("rate-hz", 7));
	CHECK(!fg_meta_key_valid("rate hz", 7));
	CHECK(!fg_meta_key_valid("a:b", 3));
	CHECK(!fg_meta_key_valid("", 0));

	char *text = folded(p);
	const char *head = "# spy-version: 0.1.0\n# pid: 99\n# rate-hz: 100\n# command: ";
	CHECK(!strncmp(text, head, strlen(head)));
	free(text);
	fg_profile_free(p);
}

/*
 * fg_profile_add reuses the id of a frame equal to the last stack's at the
 * same depth: a change anywhere, in a line, an order or a depth, must still
 * make a stack of its own.
 */
static void test_last_stack(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	add(p, &s, "main@app.py:1|f@app.py:5|g@app.py:9", 1);
	add(p, &s, "main@app.py:1|f@app.py:6|g@app.py:9", 1);
	add(p, &s, "main@app.py:1|g@app.py:9|f@app.py:6", 1);
	add(p, &s, "main@app.py:1|f@app.py:5", 1);
	add(p, &s, "main@app.py:1|f@app.py:5|g@app.py:9|k", 1);
	add(p, &s, "main@app.py:1|f@b.py:5|g@app.py:9", 1);
	add(p, &s, "main@app.py:1|f@app.py:5|g@app.py:9", 2);
	char *text = folded(p);
	CHECK_STR(text,
		  "main (app.py:1);f (app.py:5) 1\n"
		  "main (app.py:1);f (app.py:5);g (app.py:9) 3\n"
		  "main (app.py:1);f (app.py:5);g (app.py:9);k 1\n"
		  "main (app.py:1);f (app.py:6);g (app.py:9) 1\n"
		  "main (app.py:1);f (b.py:5);g (app.py:9) 1\n"
		  "main (app.py:1);g (app.py:9);f (app.py:6) 1\n");
	free(text);
	spy_stack_release(&s);
	fg_profile_free(p);
}

/* The same stack added again and again counts on the one entry, also
 * across a path added by id in between (which leaves the frame cache). */
static void test_same_stack(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	add(p, &s, "main@app.py:1|f@app.py:5", 1);
	uint32_t a = fg_profile_last_stack(p);
	CHECK(fg_profile_add(p, &s, 1) == 0 && fg_profile_last_stack(p) == a);
	CHECK(fg_profile_add(p, &s, 2) == 0 && fg_profile_last_stack(p) == a);
	uint32_t ids[1] = { fg_intern_frame(p, spy_strtab_interns(fg_profile_strtab(p), "other"), NULL, 0,
					   SPY_FRAME_PYTHON) };
	CHECK_INT(fg_add_path(p, ids, 1, 1), 0);
	CHECK(fg_profile_last_stack(p) != a);
	CHECK(fg_profile_add(p, &s, 1) == 0 && fg_profile_last_stack(p) == a);
	add(p, &s, "main@app.py:1|f@app.py:6", 1);
	CHECK(fg_profile_last_stack(p) != a);
	add(p, &s, "main@app.py:1|f@app.py:5", 1);
	CHECK(fg_profile_last_stack(p) == a);
	char *text = folded(p);
	CHECK_STR(text,
		  "main (app.py:1);f (app.py:5) 6\n"
		  "main (app.py:1);f (app.py:6) 1\n"
		  "other () 1\n");
	free(text);
	spy_stack_release(&s);
	fg_profile_free(p);
}

/*
 * A sampler's run of deep stacks that change near the leaf, in the
 * middle, in depth, and only in what the profile does not key on (flags,
 * address): counted as each stack interned afresh and added by path would
 * be. The frames a stack keeps from the last add are found a block at a
 * time from the root side; a change at a block's edge, or on a frame that
 * is byte-unequal but the same frame, must not shift or lose an id.
 */
static void test_kept_frames(void)
{
	struct spy_strtab *t = spy_xcalloc(1, sizeof(*t));
	struct fg_profile *p = fg_profile_new(t, 0), *ref = fg_profile_new(t, 0);
	struct spy_stack s = SPY_STACK_INIT;
	const char *funcs[] = { "a", "b", "c", "d", "e" };
	uint32_t ids[64];
	uint64_t x = 88172645463325252u;
	size_t rounds = 4000, same_kept = 0;
	for (size_t i = 0; i < 40; i++) {
		push(&s, t, PY, funcs[i % 5], "m.py", (uint32_t)i + 1);
	}
	for (size_t r = 0; r < rounds; r++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t at = (size_t)(x >> 8) % s.n;
		switch (x % 6) {
		case 0: /* the leaf's line moves */
			s.v[0].line = (uint32_t)(x >> 40) % 7 + 1;
			break;
		case 1: /* a frame anywhere becomes another */
			s.v[at].func = spy_strtab_interns(t, funcs[(x >> 20) % 5]);
			s.v[at].line = (uint32_t)(x >> 30) % 50 + 1;
			break;
		case 2: /* the same frame, another code object and flags */
			s.v[at].addr = x >> 12;
			s.v[at].flags ^= 1;
			same_kept++;
			break;
		case 3: /* calls deeper */
			if (s.n < 60) {
				memmove(s.v + 1, s.v, s.n * sizeof(*s.v));
				s.n++;
				s.v[0] = s.v[1];
				s.v[0].line = (uint32_t)(x >> 24) % 9 + 1;
			}
			break;
		case 4: /* returns */
			if (s.n > 1) {
				size_t k = 1 + (size_t)(x >> 33) % (s.n < 12 ? s.n - 1 : 11);
				memmove(s.v, s.v + k, (s.n - k) * sizeof(*s.v));
				s.n -= k;
			}
			break;
		default: /* the same stack again */
			break;
		}
		CHECK_INT(fg_profile_add(p, &s, 1), 0);
		for (size_t k = 0; k < s.n; k++) {
			const struct spy_frame *f = &s.v[s.n - 1 - k];
			ids[k] = fg_intern_frame(ref, f->func, f->file, f->line, f->kind);
		}
		CHECK_INT(fg_add_path(ref, ids, s.n, 1), 0);
	}
	CHECK(same_kept > 0);
	char *got = folded(p), *want = folded(ref);
	CHECK_STR(got, want);
	struct fg_stats a, b;
	fg_profile_stats(p, &a);
	fg_profile_stats(ref, &b);
	CHECK(a.samples == rounds && a.stacks == b.stacks && a.frames == b.frames);
	free(got);
	free(want);
	spy_stack_release(&s);
	fg_profile_free(p);
	fg_profile_free(ref);
	spy_strtab_release(t);
	free(t);
}

int main(void)
{
	test_same_stack();
	test_kept_frames();
	test_counts();
	test_function_mode();
	test_recursion_and_synthetic();
	test_order();
	test_foreach();
	test_bounds();
	test_add_known();
	test_steady_state();
	test_last_stack();
	test_borrowed_strtab();
	test_meta();
	return check_done();
}
