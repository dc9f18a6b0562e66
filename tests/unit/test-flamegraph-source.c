/*
 * Unit tests for kept source lines (flamegraph/source.c, lines.c): the
 * capture (sampled lines, context, the def line, names that are not files,
 * the budget), the folded round trip (same text, same bytes; merged with a
 * second profile; read by a reader that knows only "# key: value"), the
 * malformed block, hostile text in every output (folded, lines, SVG,
 * JSON), and the lines view with and without source.
 */
#include <stdlib.h>
#include <string.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"

static const char app_py[] =
	"import time\n"                       /* 1 */
	"\n"                                  /* 2 */
	"class Worker:\n"                     /* 3 */
	"    async def  run(self, n):\n"      /* 4 */
	"        total = 0\n"                 /* 5 */
	"        for i in range(n):\n"        /* 6 */
	"\ttotal += i * i  # hot\n"           /* 7: a tab, as Python reads it */
	"        return total\n"              /* 8 */
	"\n"                                  /* 9 */
	"def main():\n"                       /* 10 */
	"    Worker().run(10)\n"              /* 11 */
	"\n"                                  /* 12 */
	"main()\n";                           /* 13 */

static void push(struct spy_stack *s, struct spy_strtab *t, uint8_t kind, const char *func,
		 const char *file, uint32_t line)
{
	struct spy_frame *f = spy_stack_push(s);
	memset(f, 0, sizeof(*f));
	f->func = spy_strtab_interns(t, func);
	f->file = file ? spy_strtab_interns(t, file) : NULL;
	f->line = line;
	f->kind = kind;
}

/* main -> Worker.run at `hot` (innermost first, as walked), n samples. */
static void add(struct fg_profile *p, uint32_t hot, uint64_t n)
{
	struct spy_strtab *t = fg_profile_strtab(p);
	struct spy_stack s = SPY_STACK_INIT;
	push(&s, t, SPY_FRAME_PYTHON, "Worker.run", "/app/app.py", hot);
	push(&s, t, SPY_FRAME_PYTHON, "main", "/app/app.py", 11);
	push(&s, t, SPY_FRAME_PYTHON, "<module>", "/app/app.py", 13);
	push(&s, t, SPY_FRAME_PYTHON, "<lambda>", "<string>", 1);
	push(&s, t, SPY_FRAME_SYNTHETIC, "process 1", NULL, 0);
	CHECK_INT(fg_profile_add(p, &s, n), 0);
	spy_stack_release(&s);
}

struct files {
	int asked_string, asked_app, asked_other;
	const char *app;
};

static int get_file(void *ctx, const char *file, const char **data, size_t *len)
{
	struct files *f = ctx;
	if (!strcmp(file, "<string>")) {
		f->asked_string++;
		return -1;
	}
	if (!strcmp(file, "/app/app.py")) {
		f->asked_app++;
		*data = f->app;
		*len = strlen(f->app);
		return 0;
	}
	f->asked_other++;
	return -1;
}

static struct fg_profile *captured(struct spy_strtab *strs, const char *text, struct fg_source_stats *st)
{
	struct fg_profile *p = fg_profile_new(strs, 0);
	add(p, 7, 90);
	add(p, 6, 10);
	fg_profile_meta_set(p, FG_META_RATE_HZ, "100");
	struct files f = { 0, 0, 0, text };
	fg_profile_source_capture(p, get_file, &f, st);
	CHECK_INT(f.asked_app, 1);   /* each file once */
	CHECK_INT(f.asked_string, 0); /* "<string>" is no file */
	CHECK_INT(f.asked_other, 0);
	return p;
}

static void test_capture(void)
{
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct fg_source_stats st;
	struct fg_profile *p = captured(&strs, app_py, &st);
	const char *app = spy_strtab_interns(&strs, "/app/app.py");
	CHECK_INT(st.files, 1);
	CHECK_INT(st.unreadable, 0);
	CHECK(!st.budget_hit);
	/* Sampled 6, 7, 11, 13 with 3 lines either side: 3..13, all of it but 1 and 2. */
	CHECK(fg_profile_source(p, app, 1) == NULL);
	CHECK_STR(fg_profile_source(p, app, 4), "    async def  run(self, n):");
	CHECK_STR(fg_profile_source(p, app, 7), "        total += i * i  # hot");
	CHECK_STR(fg_profile_source(p, app, 9), "");
	CHECK_STR(fg_profile_source(p, app, 13), "main()");
	CHECK(fg_profile_source(p, app, 14) == NULL);  /* past the end */
	CHECK_INT(st.lines, 11);
	fg_profile_free(p);

	/* The def line is kept even far above the sampled line. */
	struct spy_buf big = SPY_BUF_INIT;
	spy_buf_adds(&big, "def main():\n");
	for (int i = 0; i < 150; i++) {
		spy_buf_adds(&big, "    x = 1\n");
	}
	/* line 152: */
	spy_buf_adds(&big, "    Worker().run(10)\n");
	p = fg_profile_new(&strs, 0);
	struct spy_stack s = SPY_STACK_INIT;
	push(&s, &strs, SPY_FRAME_PYTHON, "main", "/app/app.py", 152);
	fg_profile_add(p, &s, 1);
	struct files f = { 0, 0, 0, big.buf };
	fg_profile_source_capture(p, get_file, &f, &st);
	CHECK_STR(fg_profile_source(p, app, 1), "def main():");
	CHECK(fg_profile_source(p, app, 148) == NULL);
	CHECK_STR(fg_profile_source(p, app, 149), "    x = 1");
	CHECK_INT(st.lines, 1 + 3 + 1);  /* def, 149..151, 152; nothing past the end */
	fg_profile_free(p);
	spy_stack_release(&s);
	spy_buf_release(&big);

	/* -F: no lines, nothing asked. */
	p = fg_profile_new(&strs, FG_FUNCTION);
	add(p, 7, 1);
	struct files g = { 0, 0, 0, app_py };
	fg_profile_source_capture(p, get_file, &g, &st);
	CHECK_INT(g.asked_app, 0);
	CHECK_INT(fg_profile_source_count(p), 0);
	fg_profile_free(p);
	spy_strtab_release(&strs);
}

static const char *line_of(void *ctx, uint32_t line, size_t *len)
{
	const char *const *v = ctx;
	size_t i = 0;
	for (; v[i] && i + 1 < line; i++) {
	}
	if (!v[i] || i + 1 != line) {
		return NULL;
	}
	*len = strlen(v[i]);
	return v[i];
}

static void test_def_line(void)
{
	const char *src[] = {
		"@decorator",            /* 1 */
		"def outer(a):",         /* 2 */
		"    def inner(b):",     /* 3 */
		"        return b",      /* 4 */
		"    return inner(a)",   /* 5 */
		"x = 1",                 /* 6 */
		"    def inner(c):",     /* 7: not reached from 9 across module code? it is above */
		"        pass",          /* 8 */
		"        pass",          /* 9 */
		NULL,
	};
	CHECK_INT(fg_source_def_line("outer", 5, line_of, src), 2);
	CHECK_INT(fg_source_def_line("outer.<locals>.inner", 4, line_of, src), 3);
	CHECK_INT(fg_source_def_line("inner", 9, line_of, src), 7);
	/* Module-level code stops the scan: "outer" is not above line 9's block. */
	CHECK_INT(fg_source_def_line("outer", 9, line_of, src), 0);
	CHECK_INT(fg_source_def_line("<module>", 5, line_of, src), 0);
	CHECK_INT(fg_source_def_line("<lambda>", 5, line_of, src), 0);
	CHECK_INT(fg_source_def_line("out", 5, line_of, src), 0);  /* a prefix is not the name */
	CHECK_INT(fg_source_def_line("outer", 2, line_of, src), 2);
}

static char *folded(const struct fg_profile *p)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	return spy_buf_detach(&b, NULL);
}

static void test_round_trip(void)
{
	struct spy_strtab a = SPY_STRTAB_INIT, b = SPY_STRTAB_INIT;
	struct fg_source_stats st;
	struct fg_profile *p = captured(&a, app_py, &st);
	char *text = folded(p);
	CHECK(strstr(text, "# source-file: 0 /app/app.py\n") != NULL);
	CHECK(strstr(text, "# source-line: 0:7         total += i * i  # hot\n") != NULL);
	/* The block comes before the stacks, so every folded tool skips it. */
	CHECK(strstr(text, "# source-line: 0:13 main()\n") < strstr(text, "process 1;"));

	struct fg_profile *q = fg_profile_new(&b, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "t.folded", &err), 0);
	const char *app = spy_strtab_interns(&b, "/app/app.py");
	CHECK_STR(fg_profile_source(q, app, 7), "        total += i * i  # hot");
	CHECK_INT(fg_profile_source_count(q), fg_profile_source_count(p));
	/* Not metadata: the JSON and pprof metadata do not carry it. */
	CHECK(fg_profile_meta_get(q, FG_META_SOURCE_LINE) == NULL);
	char *again = folded(q);
	CHECK_STR(again, text);

	/* Merged with a profile that has none (and a second file): both kept, renumbered. */
	const char *other = "# source-file: 0 /app/b.py\n# source-line: 0:1 import os\n"
			    "# source-line: 0:2 \nprocess 1;f (/app/b.py:1) 3\n";
	CHECK_INT(fg_profile_read_folded(q, other, strlen(other), "b.folded", &err), 0);
	CHECK_STR(fg_profile_source(q, spy_strtab_interns(&b, "/app/b.py"), 1), "import os");
	CHECK_STR(fg_profile_source(q, spy_strtab_interns(&b, "/app/b.py"), 2), "");
	CHECK_STR(fg_profile_source(q, app, 7), "        total += i * i  # hot");
	char *merged = folded(q);
	CHECK(strstr(merged, "# source-file: 0 /app/app.py\n") != NULL);
	CHECK(strstr(merged, "# source-file: 1 /app/b.py\n# source-line: 1:1 import os\n") != NULL);

	/*
	 * What a reader that predates the block sees: "# key: value" lines
	 * with a valid key, a value within FG_MAX_META_VALUE and no control
	 * byte, the rules every spy reader has applied to metadata.
	 */
	for (const char *l = merged; *l == '#'; l = strchr(l, '\n') + 1) {
		const char *colon = strchr(l, ':'), *nl = strchr(l, '\n');
		CHECK(l[1] == ' ' && colon && colon < nl && fg_meta_key_valid(l + 2, (size_t)(colon - l - 2)));
		CHECK((size_t)(nl - colon) <= FG_MAX_META_VALUE + 2);
	}
	free(merged);
	free(again);
	free(text);
	fg_profile_free(q);
	fg_profile_free(p);
	spy_strtab_release(&a);
	spy_strtab_release(&b);
}

static void test_malformed(void)
{
	static const char *const bad[] = {
		"# source-line: 0:7 x\n",                 /* no file named */
		"# source-file: 0 /a.py\n# source-line: 1:7 x\n",
		"# source-file: x /a.py\n",
		"# source-file: 0\n",
		"# source-file: 01 /a.py\n",
		"# source-file: 99999999999 /a.py\n",
		"# source-file: 0 /a.py\n# source-line: 0:0 x\n",
		"# source-file: 0 /a.py\n# source-line: 0:4294967296 x\n",
		"# source-file: 0 /a.py\n# source-line: 0:7x\n",
		"# source-file: 0 /a.py\n# source-line: 0 x\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct fg_profile *p = fg_profile_new(NULL, 0);
		struct spy_err err = SPY_ERR_INIT;
		int rc = fg_profile_read_folded(p, bad[i], strlen(bad[i]), "bad.folded", &err);
		if (rc != -SPY_EFORMAT) {
			fprintf(stderr, "accepted: %s", bad[i]);
		}
		CHECK_INT(rc, -SPY_EFORMAT);
		CHECK(strstr(err.msg, "bad.folded:") != NULL);
		spy_err_clear(&err);
		fg_profile_free(p);
	}
	/* Text may be empty, and the line may end right after the number. */
	const char *ok = "# source-file: 0 /a.py\n# source-line: 0:7\n# source-line: 0:8 \n";
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, ok, strlen(ok), "ok.folded", &err), 0);
	CHECK_INT(fg_profile_source_count(p), 2);
	fg_profile_free(p);
}

static bool has_control(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\n') || c == 0x7f) {
			return true;
		}
	}
	return false;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *s = strstr(hay, needle); s; s = strstr(s + 1, needle)) {
		n++;
	}
	return n;
}

static char *render(const struct fg_profile *p, int which, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(which ? fg_profile_write_json(p, f, &err) : fg_profile_write_svg(p, f, NULL, &err), 0);
	fclose(f);
	return text;
}

struct one {
	const char *data;
	size_t len;
};

static int get_one(void *ctx, const char *file, const char **data, size_t *len)
{
	const struct one *o = ctx;
	*data = o->data;
	*len = o->len;
	return 0;
}

static void test_hostile(void)
{
	/* A file of the target is anything: escapes, markup, bidi, invalid UTF-8, a huge line. */
	struct spy_buf src = SPY_BUF_INIT;
	spy_buf_adds(&src, "def f():\n");
	spy_buf_adds(&src, "    x = '\x1b]52;c;AAAA\x07' # </script><script>alert(1)</script> ]]> & \"q\"\n");
	spy_buf_adds(&src, "    y = '\xe2\x80\xae' + '\xff\xfe' + '\r' # bidi, invalid, CR\x0b\x0c\n");
	spy_buf_add(&src, "    z = 1\0\n", 11);
	spy_buf_adds(&src, "    w = '");
	for (int i = 0; i < 5000; i++) {
		spy_buf_addch(&src, i % 2 ? '\t' : 'x');
	}
	spy_buf_adds(&src, "'\n");

	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct fg_profile *p = fg_profile_new(&strs, 0);
	const char *file = "/app/e\x1b[31mvil;\nname.py";
	for (uint32_t l = 2; l <= 5; l++) {
		struct spy_stack s = SPY_STACK_INIT;
		push(&s, &strs, SPY_FRAME_PYTHON, "f", file, l);
		push(&s, &strs, SPY_FRAME_SYNTHETIC, "process 1", NULL, 0);
		fg_profile_add(p, &s, l);
		spy_stack_release(&s);
	}
	struct fg_source_stats st;
	/* get() for this one file: the whole buffer, NUL byte included. */
	struct one one = { src.buf, src.len };
	fg_profile_source_capture(p, get_one, &one, &st);
	CHECK_INT(st.files, 1);
	const char *ifile = spy_strtab_interns(&strs, file);
	const char *l2 = fg_profile_source(p, ifile, 2);
	CHECK(l2 && !has_control(l2, strlen(l2)) && strstr(l2, "\\x1b]52"));
	const char *l3 = fg_profile_source(p, ifile, 3);
	CHECK(l3 && strstr(l3, "\\u202e") && strstr(l3, "\\xff") && strstr(l3, "\\x0d"));
	const char *l4 = fg_profile_source(p, ifile, 4);
	CHECK(l4 && strstr(l4, "\\x00"));
	const char *l5 = fg_profile_source(p, ifile, 5);
	CHECK(l5 && strlen(l5) <= FG_MAX_SOURCE_TEXT && !has_control(l5, strlen(l5)));

	/* Folded: reads back to the same store, no line broken, no control byte. */
	char *text = folded(p);
	CHECK(!has_control(text, strlen(text)));
	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "h.folded", &err), 0);
	CHECK_INT(fg_profile_source_count(q), fg_profile_source_count(p));
	char *again = folded(q);
	CHECK_STR(again, text);

	/* The lines view: the text, escaped; no control byte reaches a terminal. */
	struct spy_buf out = SPY_BUF_INIT;
	fg_lines_render(q, NULL, &out);
	CHECK(!has_control(out.buf, out.len));
	CHECK(strstr(out.buf, "\\x1b]52;c;AAAA\\x07") != NULL);

	/* SVG: one script, its CDATA never closed early, no markup from the text. */
	size_t len;
	char *svg = render(q, 0, &len);
	CHECK_INT(count(svg, "</script"), 1);
	CHECK_INT(count(svg, "]]>"), 2);  /* the style's and the script's */
	CHECK_INT(count(svg, "<script"), 1);
	CHECK(!has_control(svg, len));
	CHECK(strstr(svg, "var Q=[") != NULL);
	free(svg);
	/* JSON: the text as an escaped string. */
	char *json = render(q, 1, &len);
	CHECK(!has_control(json, len));
	CHECK(strstr(json, "\"source\": \"    x = '\\\\x1b]52;c;AAAA\\\\x07' # </script>") != NULL);
	free(json);

	spy_buf_release(&out);
	free(again);
	free(text);
	fg_profile_free(q);
	fg_profile_free(p);
	spy_strtab_release(&strs);
	spy_buf_release(&src);
}

static void test_budget(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	const char *file = spy_strtab_interns(fg_profile_strtab(p), "/a.py");
	size_t kept = 0;
	for (uint32_t l = 1; l <= FG_MAX_SOURCE_LINES + 10; l++) {
		kept += fg_profile_source_set(p, file, l, "x", 1);
	}
	CHECK_INT(kept, FG_MAX_SOURCE_LINES);
	CHECK_INT(fg_profile_source_count(p), FG_MAX_SOURCE_LINES);
	fg_profile_free(p);

	/* Bytes: lines of FG_MAX_SOURCE_TEXT fill FG_MAX_SOURCE_BYTES first. */
	p = fg_profile_new(NULL, 0);
	file = spy_strtab_interns(fg_profile_strtab(p), "/a.py");
	char line[FG_MAX_SOURCE_TEXT];
	memset(line, 'y', sizeof(line));
	kept = 0;
	for (uint32_t l = 1; l <= FG_MAX_SOURCE_LINES; l++) {
		kept += fg_profile_source_set(p, file, l, line, sizeof(line));
	}
	CHECK_INT(kept, FG_MAX_SOURCE_BYTES / FG_MAX_SOURCE_TEXT);
	fg_profile_free(p);
}

static void test_lines_view(void)
{
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct fg_source_stats st;
	struct fg_profile *p = captured(&strs, app_py, &st);
	struct spy_buf out = SPY_BUF_INIT;
	struct fg_lines_opts o = FG_LINES_OPTS_INIT;
	fg_lines_render(p, &o, &out);
	if (getenv("SHOW")) {
		fputs(out.buf, stderr);
	}
	/* Worker.run first (all the self samples), its def, the hot line with 90 of 100. */
	const char *run = strstr(out.buf, "Worker.run (/app/app.py): self 100 (100.00%)");
	CHECK(run != NULL);
	CHECK(run && strstr(run, "\n       4                                      async def  run(self, n):\n") != NULL);
	CHECK(run && strstr(run, "       7     90   90.00%     90   90.00%          total += i * i  # hot") != NULL);
	CHECK_INT(count(out.buf, "(source unavailable: not kept in the profile)"), 0);
	const char *lam = strstr(out.buf, "<lambda> (<string>): self 0 (0.00%), total 100 (100.00%)");
	CHECK(lam && strstr(lam, "s\n  (no source: the code is not from a file)\n") == strchr(lam, '\n') - 1);
	/* main: its total on line 11, def at 10 shown (context 2). */
	const char *m = strstr(out.buf, "\nmain (/app/app.py)");
	CHECK(m && strstr(m, "\n      10                                  def main():\n"
			    "      11                    100  100.00%      Worker().run(10)\n") != NULL);

	/* The same profile without its source: the figures, and the reason. */
	struct fg_profile *q = fg_profile_new(NULL, 0);
	add(q, 7, 90);
	add(q, 6, 10);
	spy_buf_reset(&out);
	fg_lines_render(q, &o, &out);
	CHECK(strstr(out.buf, "source not in this profile") != NULL);
	CHECK(strstr(out.buf, "(source unavailable: not kept in the profile)") != NULL);
	CHECK(strstr(out.buf, "       7     90   90.00%     90   90.00%\n") != NULL);

	/* -F: no lines to show, said once. */
	struct fg_profile *r = fg_profile_new(NULL, FG_FUNCTION);
	add(r, 7, 1);
	spy_buf_reset(&out);
	fg_lines_render(r, &o, &out);
	CHECK(strstr(out.buf, "no function has line numbers") != NULL);

	spy_buf_release(&out);
	fg_profile_free(r);
	fg_profile_free(q);
	fg_profile_free(p);
	spy_strtab_release(&strs);
}

int main(void)
{
	test_capture();
	test_def_line();
	test_round_trip();
	test_malformed();
	test_hostile();
	test_budget();
	test_lines_view();
	return check_done();
}
