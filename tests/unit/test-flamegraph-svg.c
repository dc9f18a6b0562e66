/*
 * Unit tests for the SVG flame graph writer: the structure of the output
 * (one script, only the elements the writer means to emit, the root's total
 * equal to the sample count), hostile names that try to break out of the
 * XML or the script, merging of frames under a pixel, deterministic bytes
 * whatever order samples came in, the icicle flag, an empty profile, and a
 * write error.
 *
 * The well-formedness check here is a small scanner (tags outside CDATA
 * must be ones the writer emits, and must balance); tests/unit/check-svg.py
 * runs this program with a directory argument, which makes it also save
 * its SVGs there, and parses them with Python's XML parser.
 *
 * Usage: test-flamegraph-svg [OUTDIR]
 */
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"

static const char *outdir;

static struct fg_profile *load(const char *text)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fg_profile_read_folded(p, text, strlen(text), "svg", &err);
	CHECK_INT(rc, 0);
	if (rc) {
		fprintf(stderr, "  %s\n", err.msg);
	}
	return p;
}

/* The SVG of p as a string (caller frees); saved to OUTDIR/name when given. */
static char *render(const struct fg_profile *p, const char *title, bool inverted, const char *name)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct fg_svg_opts o = { title, inverted };
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_write_svg(p, f, &o, &err), 0);
	fclose(f);
	CHECK_INT(strlen(text), len);
	if (outdir && name) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", outdir, name);
		FILE *out = fopen(path, "w");
		CHECK(out != NULL);
		if (out) {
			fwrite(text, 1, len, out);
			fclose(out);
		}
	}
	return text;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *s = strstr(hay, needle); s; s = strstr(s + 1, needle)) {
		n++;
	}
	return n;
}

/*
 * A tiny well-formedness and "no stray element" check. Outside CDATA
 * sections every '<' must open or close one of the elements the writer
 * emits, every '&' must start an entity or character reference, tags must
 * balance, and the bytes must be ASCII (the writer escapes everything else).
 * Counts the <script> elements into *scripts.
 */
static bool well_formed(const char *s, int *scripts)
{
	static const char *allowed[] = { "svg", "title", "style", "rect", "text", "g", "path", "script" };
	const char *stack[64];
	int sp = 0;
	*scripts = 0;
	for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
		if (*u >= 0x80 || (*u < 0x20 && *u != '\n')) {
			fprintf(stderr, "  byte 0x%02x at offset %zu\n", *u, (size_t)(u - (const unsigned char *)s));
			return false;
		}
	}
	if (strncmp(s, "<?xml ", 6)) {
		return false;
	}
	s = strstr(s, "?>") + 2;
	while (*s) {
		if (!strncmp(s, "<![CDATA[", 9)) {
			const char *e = strstr(s + 9, "]]>");
			if (!e) {
				return false;
			}
			s = e + 3;
			continue;
		}
		if (*s == '&') {
			size_t n = strspn(s + 1, "#abcdefghijklmnopqrstuvwxyzABCDEFX0123456789");
			if (!n || s[1 + n] != ';') {
				fprintf(stderr, "  bad reference at \"%.20s\"\n", s);
				return false;
			}
			s += n + 2;
			continue;
		}
		if (*s == '>') {
			fprintf(stderr, "  stray '>' at \"%.20s\"\n", s);
			return false;
		}
		if (*s != '<') {
			s++;
			continue;
		}
		bool closing = s[1] == '/';
		const char *name = s + 1 + closing;
		size_t nlen = strspn(name, "abcdefghijklmnopqrstuvwxyz");
		bool ok = false;
		for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
			if (strlen(allowed[i]) == nlen && !strncmp(name, allowed[i], nlen)) {
				ok = true;
			}
		}
		if (!ok || (name[nlen] != ' ' && name[nlen] != '>' && name[nlen] != '/')) {
			fprintf(stderr, "  unexpected tag at \"%.30s\"\n", s);
			return false;
		}
		/* Attribute values: no '<', and quotes balance. */
		const char *e = name + nlen;
		char quote = 0;
		for (; *e && (quote || *e != '>'); e++) {
			if (*e == '<') {
				return false;
			}
			if (quote && *e == quote) {
				quote = 0;
			} else if (!quote && (*e == '"' || *e == '\'')) {
				quote = *e;
			}
		}
		if (!*e) {
			return false;
		}
		bool empty = e[-1] == '/';
		if (closing) {
			if (!sp || strlen(stack[sp - 1]) != nlen || strncmp(stack[sp - 1], name, nlen)) {
				fprintf(stderr, "  unbalanced </%.*s>\n", (int)nlen, name);
				return false;
			}
			sp--;
		} else if (!empty) {
			if (sp == 64) {
				return false;
			}
			for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
				if (strlen(allowed[i]) == nlen && !strncmp(name, allowed[i], nlen)) {
					stack[sp++] = allowed[i];
				}
			}
			if (nlen == 6 && !strncmp(name, "script", 6)) {
				(*scripts)++;
			}
		}
		s = e + 1;
	}
	return sp == 0;
}

/* The node array: "var N=[" depth,frame,total,self, ... "]". */
struct node {
	long long depth, frame, total, self;
};

static size_t parse_nodes(const char *svg, struct node *v, size_t max)
{
	const char *s = strstr(svg, "var N=[");
	size_t n = 0;
	if (!s) {
		return 0;
	}
	s += 7;
	while (*s && *s != ']' && n < max) {
		long long x[4];
		for (int k = 0; k < 4; k++) {
			char *end;
			x[k] = strtoll(s, &end, 10);
			s = end;
			while (*s == ',' || *s == '\n') {
				s++;
			}
		}
		v[n++] = (struct node){ x[0], x[1], x[2], x[3] };
	}
	return n;
}

static const char basic_text[] =
	"# spy-version: 0.1.0\n"
	"# python: 3.12.1\n"
	"# rate-hz: 100\n"
	"# duration-s: 2.50\n"
	"# samples: 20\n"
	"# errors: 0\n"
	"# command: python3 app.py --flag \"x\"\n"
	"process 42;main (app.py:10);work (app.py:20);helper (lib.py:5) 6\n"
	"process 42;main (app.py:10);work (app.py:22) 3\n"
	"process 42;main (app.py:11);fib (app.py:30);fib (app.py:31) 4\n"
	"process 42;main (app.py:10) 2\n"
	"process 42;main (app.py:10);sleep (libc.so.6) 3\n"
	"process 42;idle 2\n";

static void test_basic(void)
{
	struct fg_profile *p = load(basic_text);
	char *svg = render(p, NULL, false, "svg-basic.svg");
	int scripts = 0;
	CHECK(well_formed(svg, &scripts));
	CHECK_INT(scripts, 1);
	CHECK(strstr(svg, "<title>spy flame graph</title>") != NULL);
	CHECK(strstr(svg, "Python 3.12.1") != NULL);
	CHECK(strstr(svg, "duration 2.50 s") != NULL);
	CHECK(strstr(svg, "20 samples") != NULL);
	CHECK(strstr(svg, "rate 100 Hz") != NULL);
	CHECK(strstr(svg, "errors: 0") != NULL);
	CHECK(strstr(svg, "python3 app.py --flag &quot;x&quot;") != NULL);
	CHECK(strstr(svg, "INV=0") != NULL);

	/* Root first, total = samples; every node has a parent one level up. */
	struct node v[64];
	size_t n = parse_nodes(svg, v, 64);
	CHECK(n > 0);
	CHECK_INT(v[0].depth, 0);
	CHECK_INT(v[0].frame, -1);
	CHECK_INT(v[0].total, 20);
	/* Nothing is under a pixel here: all 10 trie nodes plus the root. */
	CHECK_INT(n, 11);
	long long sum_self = 0;
	for (size_t i = 1; i < n; i++) {
		CHECK(v[i].depth >= 1 && v[i].depth <= v[i - 1].depth + 1);
		CHECK(v[i].frame >= 0);
		sum_self += v[i].self;
	}
	CHECK_INT(sum_self, 20);
	/* The frame table has the file once however many frames use it. */
	CHECK_INT(count(svg, "\"app.py\""), 1);
	CHECK_INT(count(svg, "\"helper\""), 1);
	free(svg);

	/* Icicle and a title of our own. */
	svg = render(p, "my <title> & \"more\"", true, "svg-inverted.svg");
	CHECK(well_formed(svg, &scripts));
	CHECK(strstr(svg, "INV=1") != NULL);
	CHECK(strstr(svg, "<title>my &lt;title&gt; &amp; &quot;more&quot;</title>") != NULL);
	/* No resource readings: no totals. */
	CHECK(strstr(svg, "peak RSS") == NULL && strstr(svg, "CPU user") == NULL);
	free(svg);

	/* With readings (record --slice): CPU between the first and last, the peak RSS. */
	fg_profile_meta_set(p, "resources", "t-s user-ms sys-ms rss-kb threads ctxsw read-bytes write-bytes");
	fg_profile_meta_set(p, "res-0", "0.000 100 10 2000 1 5 - -");
	fg_profile_meta_set(p, "res-1", "1.000 600 30 50000 2 9 - -");
	fg_profile_meta_set(p, "res-2", "2.000 1350 60 30000 2 20 - -");
	svg = render(p, NULL, false, NULL);
	CHECK(strstr(svg, " | CPU user 1.25 s, sys 0.05 s | peak RSS 51.2 MB | ") != NULL);
	free(svg);
	/* RSS unknown throughout: only the CPU. */
	fg_profile_meta_set(p, "res-0", "0.000 100 10 - 1 5 - -");
	fg_profile_meta_set(p, "res-1", "1.000 600 30 - 2 9 - -");
	fg_profile_meta_set(p, "res-2", "2.000 1350 60 - 2 20 - -");
	svg = render(p, NULL, false, NULL);
	CHECK(strstr(svg, "CPU user 1.25 s, sys 0.05 s") != NULL && strstr(svg, "peak RSS") == NULL);
	free(svg);
	fg_profile_free(p);
}

static void test_hostile(void)
{
	/*
	 * Names built to break out: of a text node, of an attribute, of the
	 * CDATA section, of the script, and of a JS string; a newline and
	 * U+2028 (a JS line terminator), invalid UTF-8, and an astral code
	 * point. Added through fg_profile_add, which takes them as they are
	 * (folded text would have replaced some bytes first).
	 */
	static const char *names[] = {
		"</text><script>alert(1)</script>",
		"\"'><g onload=alert(1)>",
		"]]><script>alert(2)</script><![CDATA[",
		"x\\\";alert(3);//",
		"line\nbreak\r\ttab",
		("sep\xe2\x80\xa8" "ara\xe2\x80\xa9tor"),
		"bad \xff\xfe utf8 \xc0\xaf \xed\xa0\x80 trunc \xe2\x82",
		"astral \xf0\x9f\x94\xa5 &amp; &#60;",
		"</script><script>alert(4)</script>",
	};
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_strtab *st = fg_profile_strtab(p);
	struct spy_stack s = SPY_STACK_INIT;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		spy_stack_reset(&s);
		struct spy_frame *f = spy_stack_push(&s);
		f->func = spy_strtab_interns(st, names[i]);
		f->file = spy_strtab_interns(st, names[(i + 1) % 9]);
		f->line = 7;
		f->kind = i % 2 ? SPY_FRAME_NATIVE : SPY_FRAME_PYTHON;
		f = spy_stack_push(&s);
		f->func = spy_strtab_interns(st, names[(i + 3) % 9]);
		f->file = NULL;
		f->kind = SPY_FRAME_SYNTHETIC;
		CHECK_INT(fg_profile_add(p, &s, 10 + i), 0);
	}
	spy_stack_release(&s);
	fg_profile_meta_set(p, FG_META_COMMAND, "</text><script>alert(5)</script> ]]> \\ \"q\"");
	fg_profile_meta_set(p, FG_META_PYTHON, "3.12 <b>");

	char *svg = render(p, "</title><script>alert(6)</script>", false, "svg-hostile.svg");
	int scripts = 0;
	CHECK(well_formed(svg, &scripts));
	CHECK_INT(scripts, 1);
	CHECK_INT(count(svg, "<script"), 1);
	CHECK_INT(count(svg, "</script"), 1);
	/* The style's and the script's CDATA sections, nothing else. */
	CHECK_INT(count(svg, "<![CDATA["), 2);
	CHECK_INT(count(svg, "]]>"), 2);
	CHECK(strstr(svg, "alert(1)") != NULL);
	CHECK(strstr(svg, "<g onload") == NULL);
	/* Line terminators and non-ASCII reach the script as escapes. */
	CHECK(strstr(svg, "line\\u000abreak\\u000d\\u0009tab") != NULL);
	CHECK(strstr(svg, "sep\\u2028ara\\u2029tor") != NULL);
	CHECK(strstr(svg, "astral \\ud83d\\udd25 \\x26amp;") != NULL);
	CHECK(strstr(svg, "bad \\ufffd\\ufffd utf8 \\ufffd\\ufffd \\ufffd\\ufffd\\ufffd trunc \\ufffd\\ufffd") != NULL);
	CHECK(strstr(svg, "\"x\\\\\\\";alert(3);//\"") != NULL);
	/* In markup, entities. */
	CHECK(strstr(svg, "&lt;/title&gt;&lt;script&gt;alert(6)") != NULL);
	CHECK(strstr(svg, "Python 3.12 &lt;b&gt;") != NULL);
	free(svg);
	fg_profile_free(p);
}

/*
 * 100,000 samples on one stack, and 2,000 sibling frames of one sample
 * each: a pixel is ceil(102,000 / 1,180) = 87 samples, so the siblings
 * become one merged node of 2,000 samples standing for 2,000 frames; and
 * 40 more under another parent, 40 samples together, are dropped.
 */
static void test_merge(void)
{
	struct spy_buf text = SPY_BUF_INIT;
	spy_buf_adds(&text, "# samples: 102040\n");
	spy_buf_adds(&text, "root;big (a.py:1) 100000\n");
	for (int i = 0; i < 2000; i++) {
		spy_buf_addf(&text, "root;tiny_parent (a.py:2);leaf_%04d (b.py:%d) 1\n", i, i + 1);
	}
	for (int i = 0; i < 40; i++) {
		spy_buf_addf(&text, "root;small_parent (a.py:3);dropped_%02d (c.py:1) 1\n", i);
	}
	struct fg_profile *p = load(text.buf);
	spy_buf_release(&text);
	char *svg = render(p, NULL, false, "svg-merged.svg");
	int scripts = 0;
	CHECK(well_formed(svg, &scripts));
	struct node v[64];
	size_t n = parse_nodes(svg, v, 64);
	/* all, root, big, tiny_parent, [2000 merged]; small_parent is 40 < 87. */
	CHECK_INT(n, 5);
	CHECK_INT(v[0].total, 102040);
	CHECK_INT(v[1].total, 102040);
	CHECK_INT(v[4].frame, -2);
	CHECK_INT(v[4].depth, 3);
	CHECK_INT(v[4].total, 2000);
	CHECK_INT(v[4].self, 2000);
	CHECK(strstr(svg, "leaf_") == NULL);
	CHECK(strstr(svg, "small_parent") == NULL);
	CHECK(strlen(svg) < 20000);
	free(svg);
	fg_profile_free(p);
}

/* The same samples in two orders, through fg_profile_add: the same bytes. */
static void test_deterministic(void)
{
	static const char *funcs[] = { "a", "b", "c", "d", "e" };
	struct fg_profile *p[2];
	for (int k = 0; k < 2; k++) {
		p[k] = fg_profile_new(NULL, 0);
		struct spy_strtab *st = fg_profile_strtab(p[k]);
		/* Intern in a different order too, so pointers differ. */
		if (k) {
			for (int i = 4; i >= 0; i--) {
				spy_strtab_interns(st, funcs[i]);
			}
		}
		struct spy_stack s = SPY_STACK_INIT;
		for (int j = 0; j < 200; j++) {
			int i = k ? 199 - j : j;
			spy_stack_reset(&s);
			for (int d = 0; d < 1 + i % 4; d++) {
				struct spy_frame *f = spy_stack_push(&s);
				f->func = spy_strtab_interns(st, funcs[(i + d) % 5]);
				f->file = spy_strtab_interns(st, d % 2 ? "x.py" : "libfoo.so");
				f->line = (uint32_t)d;
				f->kind = d % 2 ? SPY_FRAME_PYTHON : SPY_FRAME_NATIVE;
			}
			CHECK_INT(fg_profile_add(p[k], &s, 1 + (uint64_t)i % 3), 0);
		}
		spy_stack_release(&s);
		fg_profile_meta_set(p[k], FG_META_RATE_HZ, "100");
	}
	char *a = render(p[0], NULL, false, NULL);
	char *b = render(p[1], NULL, false, NULL);
	char *c = render(p[0], NULL, false, NULL);
	CHECK(!strcmp(a, b));
	CHECK(!strcmp(a, c));
	free(a);
	free(b);
	free(c);
	fg_profile_free(p[0]);
	fg_profile_free(p[1]);
}

static void test_empty_and_errors(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	char *svg = render(p, NULL, false, "svg-empty.svg");
	int scripts = 0;
	CHECK(well_formed(svg, &scripts));
	CHECK_INT(scripts, 1);
	CHECK(strstr(svg, "var N=[0,-1,0,0];") != NULL);
	free(svg);

	FILE *full = fopen("/dev/full", "w");
	if (full) {
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_profile_write_svg(p, full, NULL, &err), -SPY_EIO);
		CHECK(strstr(err.msg, "writing the SVG") != NULL);
		fclose(full);
	}
	fg_profile_free(p);

	/*
	 * Colours: one file, one colour; Python, native and synthetic frames
	 * differ, and a synthetic thread state ("waiting for the GIL") is told
	 * from a root.
	 */
	p = load("p;f (m.py:1);g (m.py:2);h (n.py:3) 1\np;x (libc.so.6) 1\np;waiting for the GIL 1\n");
	svg = render(p, NULL, false, NULL);
	const char *F = strstr(svg, "var F=[");
	CHECK(F != NULL);
	if (F) {
		long long v[6][5];
		const char *s = F + 7;
		for (int i = 0; i < 6; i++) {
			for (int k = 0; k < 5; k++) {
				char *end;
				v[i][k] = strtoll(s, &end, 10);
				s = end + strspn(end, ",\n");
			}
		}
		/* Frame order: p, f, g, h, waiting, x; class 2, 0, 0, 0, 3, 1. */
		CHECK_INT(v[0][3], 2);
		CHECK_INT(v[1][3], 0);
		CHECK_INT(v[4][3], 3);
		CHECK_INT(v[5][3], 1);
		CHECK_INT(v[1][4], v[2][4]);
		CHECK(v[1][4] != v[3][4]);
		CHECK(v[1][4] != v[4][4]);
		CHECK(v[1][4] != v[5][4]);
		CHECK(v[0][4] != v[4][4]);
	}
	free(svg);
	fg_profile_free(p);
}

int main(int argc, char **argv)
{
	outdir = argc > 1 ? argv[1] : NULL;
	test_basic();
	test_hostile();
	test_merge();
	test_deterministic();
	test_empty_and_errors();
	return check_done();
}
