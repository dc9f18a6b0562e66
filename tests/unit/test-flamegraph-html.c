/*
 * Unit tests for the HTML report writer (flamegraph/html.c): its two
 * escapers on hostile input (a script close, a comment open, U+2028/9,
 * invalid UTF-8, control bytes, an astral code point), the page's structure
 * (ASCII only, the writer's two scripts and no other, the data block's
 * keys, the stacks' prefix coding adding up to the profile's samples), the
 * windows and readings only when the profile has them, the errors in
 * words, the format's name and extension, and a write error.
 * tests/unit/check-html.py checks the page itself in Chromium.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"

static struct fg_profile *load(const char *text)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fg_profile_read_folded(p, text, strlen(text), "html", &err);
	CHECK_INT(rc, 0);
	if (rc) {
		fprintf(stderr, "  %s\n", err.msg);
	}
	return p;
}

static char *render(const struct fg_profile *p)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct fg_svg_opts o = { "t</title><script>x()</script>", false };
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_write_html(p, f, &o, &err), 0);
	fclose(f);
	CHECK_INT(strlen(text), len);
	return text;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *q = strstr(hay, needle); q; q = strstr(q + 1, needle)) {
		n++;
	}
	return n;
}

static void check_json(const char *in, const char *want)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_html_json_string(&b, in);
	CHECK_STR(b.buf, want);
	spy_buf_release(&b);
}

static void check_text(const char *in, const char *want)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_html_text(&b, in);
	CHECK_STR(b.buf ? b.buf : "", want);
	spy_buf_release(&b);
}

static void test_escape(void)
{
	check_json("plain", "\"plain\"");
	check_json("</script><!--", "\"\\u003c/script\\u003e\\u003c!--\"");
	check_json("a\"b\\c&", "\"a\\\"b\\\\c\\u0026\"");
	check_json("\xe2\x80\xa8\xe2\x80\xa9", "\"\\u2028\\u2029\"");
	check_json("x\xffy\x01", "\"x\\ufffdy\\u0001\"");
	check_json("\xf0\x9f\x98\x80", "\"\\ud83d\\ude00\"");
	check_json("\xc3\xa9", "\"\\u00e9\"");
	check_json(NULL, "\"\"");
	check_text("<a href='x'>&\"", "&lt;a href=&#39;x&#39;&gt;&amp;&quot;");
	check_text("\xc3\xa9\x1b[0m\xff", "&#xE9;?[0m&#xFFFD;");
	check_text("", "");
}

/* The sum of the counts in the data's prefix-coded stacks, checking each stack's coding on the way. */
static uint64_t stack_samples(const char *page, size_t *nstacks)
{
	const char *t = strstr(page, "\"T\":[");
	uint64_t sum = 0;
	uint64_t prev = 0;
	*nstacks = 0;
	CHECK(t != NULL);
	if (!t) {
		return 0;
	}
	t += 5;
	while (*t && *t != ']') {
		char *e;
		uint64_t shared = strtoull(t, &e, 10);
		CHECK(*e == ',');
		uint64_t fresh = strtoull(e + 1, &e, 10);
		/* A stack shares no more than the previous one had, and adds at least one frame or is a prefix. */
		CHECK(shared <= prev);
		CHECK(shared + fresh >= 1);
		for (uint64_t i = 0; i < fresh; i++) {
			CHECK(*e == ',');
			strtoull(e + 1, &e, 10);
		}
		CHECK(*e == ',');
		sum += strtoull(e + 1, &e, 10);
		prev = shared + fresh;
		(*nstacks)++;
		t = e;
		while (*t == ',' || *t == '\n') {
			t++;
		}
	}
	return sum;
}

static const char hostile[] =
	"# rate-hz: 100\n"
	"# errors: 3 (truncated 2, thread-gone 1)\n"
	"# startup: 5 2\n"
	"# source-file: 0 lib.py\n"
	"# source-line: 0:5 for x in xs:  # </script><!-- \xe2\x80\xa8\n"
	"process 1;thread 2 \"m\";main (app.py:1);compute (lib.py:5) 70\n"
	"process 1;thread 2 \"m\";main (app.py:1);</script><script>alert(1)</script> (e\xffvil.py:2) 20\n"
	"process 1;thread 3 \"w\";work (app.py:9) 10\n"
	"process 1;thread 3 \"w\";work (app.py:9);compute (lib.py:5) 5\n";

static void test_structure(void)
{
	struct fg_profile *p = load(hostile);
	char *page = render(p);
	bool ascii = true;
	for (const unsigned char *c = (const unsigned char *)page; *c; c++) {
		ascii = ascii && *c < 0x80 && (*c >= 0x20 || *c == '\n' || *c == '\t');
	}
	CHECK(ascii);
	CHECK(!strncmp(page, "<!DOCTYPE html>", 15));
	CHECK_INT(count(page, "<script"), 2);
	CHECK_INT(count(page, "</script"), 2);
	CHECK_INT(count(page, "<script type=\"application/json\" id=\"spy-data\">{\"S\":["), 1);
	CHECK_INT(count(page, "<!--"), 0);
	CHECK_INT(count(page, "<title>t&lt;/title&gt;&lt;script&gt;x()&lt;/script&gt;</title>"), 1);
	CHECK_INT(count(page, "Content-Security-Policy\" content=\"default-src 'none';"), 1);
	/* No URL but the SVG namespace: nothing to fetch. */
	CHECK_INT(count(page, "://"), count(page, "http://www.w3.org/2000/svg"));
	const char *keys[] = { "\"F\":[", "\"P\":[", "\"T\":[", "\"N\":105,\"K\":[105,0,0]", "\"R\":[", "\"L\":[", "\"M\":[" };
	for (size_t i = 0; i < SPY_ARRAY_SIZE(keys); i++) {
		CHECK_INT(count(page, keys[i]), 1);
	}
	CHECK_INT(count(page, "\"W\":"), 0);
	CHECK_INT(count(page, "\"RS\":"), 0);
	size_t nstacks;
	CHECK_INT(stack_samples(page, &nstacks), 105);
	CHECK_INT(nstacks, 4);
	/* The hostile strings arrive escaped, the kept line and the errors in words among them. */
	CHECK_INT(count(page, "\"\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\""), 1);
	CHECK_INT(count(page, "\"e\\ufffdvil.py\""), 1);
	/* The kept line's U+2028 was escaped when stored (common/term.h): its backslash arrives. */
	CHECK_INT(count(page, "\"for x in xs:  # \\u003c/script\\u003e\\u003c!-- \\\\u2028\""), 1);
	CHECK_INT(count(page, "2 stacks cut short, in the start-up; 1 thread gone while read"), 1);
	free(page);
	fg_profile_free(p);
}

/*
 * S lists the strings in the order the frames first use them, each frame's
 * function before its file, on every machine: the order of a call's
 * arguments is not C's to promise, and x86-64's gcc put the file first.
 */
static void test_string_order(void)
{
	struct fg_profile *p = load("main (a.py:1);foo (b.py:5) 3\n");
	char *page = render(p);
	CHECK_INT(count(page, "{\"S\":[\"main\",\"a.py\",\"foo\",\"b.py\""), 1);
	free(page);
	fg_profile_free(p);
}

static void test_windows(void)
{
	struct fg_profile *p = load("# slice-s: 1\n"
				    "# slices: 2\n"
				    "# slice-0: 0:10 1:30\n"
				    "# slice-1: 0:40 1:5\n"
				    "# resources: t-s user-ms sys-ms rss-kb threads ctxsw read-bytes write-bytes\n"
				    "# res-0: 0.000 0 0 8000 1 1 - -\n"
				    "# res-1: 1.000 900 - 9000 1 2 - -\n"
				    "a (x.py:1);b (x.py:2) 50\n"
				    "a (x.py:1);c (x.py:3) 35\n");
	char *page = render(p);
	CHECK_INT(count(page, "\"W\":{\"s\":1,\"w\":["), 1);
	/* Window 0's stacks by their rank in the folded order (b before c). */
	CHECK_INT(count(page, "[0,10,1,30]") + count(page, "[1,30,0,10]"), 1);
	CHECK_INT(count(page, "\"RS\":[[0.000,0,0,8192000,1],[1.000,900000000,null,9216000,1]]"), 1);
	/* b rises from 25% to 89% of its window: the one rising function charted. */
	CHECK_INT(count(page, "\"t\":[["), 1);
	free(page);
	fg_profile_free(p);
}

static void test_errors_words(void)
{
	struct {
		const char *meta, *want;
	} cases[] = {
		{ "# errors: 0\n", "0" },
		{ "# errors: 1 (truncated 1)\n", "1 stack cut short" },
		{ "# errors: 1 (truncated 1)\n# startup: 4 1\n", "1 stack cut short, in the start-up" },
		{ "# errors: 3 (truncated 3)\n# startup: 4 1\n", "3 stacks cut short, 1 in the start-up" },
		{ "# errors: 2 (pause 1, bogus 1)\n", "1 pause that failed; bogus 1" },
		{ "# errors: 2 (((\n", "2 (((" },
		{ "", "" },
	};
	for (size_t i = 0; i < SPY_ARRAY_SIZE(cases); i++) {
		struct spy_buf text = SPY_BUF_INIT, words = SPY_BUF_INIT;
		spy_buf_adds(&text, cases[i].meta);
		spy_buf_adds(&text, "a 1\n");
		struct fg_profile *p = load(text.buf);
		fg_errors_words(p, &words);
		CHECK_STR(words.len ? words.buf : "", cases[i].want);
		fg_profile_free(p);
		spy_buf_release(&text);
		spy_buf_release(&words);
	}
}

static void test_format_and_errors(void)
{
	enum fg_format f;
	CHECK(fg_format_parse("html", &f) && f == FG_FORMAT_HTML);
	CHECK_INT(fg_format_from_path("out/Report.HTML"), FG_FORMAT_HTML);
	CHECK_INT(fg_format_from_path("r.htm"), FG_FORMAT_HTML);
	CHECK_STR(fg_format_ext(FG_FORMAT_HTML), ".html");
	CHECK_STR(fg_format_name(FG_FORMAT_HTML), "html");

	/* An empty profile still makes a page; a full disk is an I/O error. */
	struct fg_profile *p = fg_profile_new(NULL, 0);
	char *page = render(p);
	CHECK_INT(count(page, "\"T\":[]"), 1);
	free(page);
	fg_profile_free(p);
	p = load(hostile);
	FILE *full = fopen("/dev/full", "w");
	CHECK(full != NULL);
	if (full) {
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_profile_write_html(p, full, NULL, &err), -SPY_EIO);
		CHECK(strstr(err.msg, "HTML report") != NULL);
		fclose(full);
	}
	fg_profile_free(p);
}

int main(void)
{
	test_escape();
	test_structure();
	test_string_order();
	test_windows();
	test_errors_words();
	test_format_and_errors();
	return check_done();
}
