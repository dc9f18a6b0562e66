/*
 * Unit tests for the json, speedscope and pprof writers: what can be checked
 * without a parser (the gzip magic, deterministic bytes whatever order the
 * samples came in, escaping of quotes and control bytes, a write error), on
 * a plain profile, one split by thread roots, one of hostile names, one
 * larger than the pprof writer's flush and an empty one.
 *
 * The structure is checked by tests/unit/check-formats.py, which runs this
 * program with a directory argument; it then also saves every output there
 * (NAME.json, NAME.speedscope.json, NAME.pb.gz) for Python's json module, a
 * small protobuf decoder and, when installed, `go tool pprof`.
 *
 * Usage: test-flamegraph-formats [OUTDIR]
 */
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"

static const char *outdir;

enum { FMT_JSON, FMT_SPEEDSCOPE, FMT_PPROF };

static const char *const exts[] = { ".json", ".speedscope.json", ".pb.gz" };

/* Output of one writer as bytes (caller frees); saved to OUTDIR/name+ext. */
static char *render(const struct fg_profile *p, int fmt, const char *name, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fmt == FMT_JSON ? fg_profile_write_json(p, f, &err)
	       : fmt == FMT_SPEEDSCOPE ? fg_profile_write_speedscope(p, f, &err)
	       : fg_profile_write_pprof(p, NULL, f, &err);
	CHECK_INT(rc, 0);
	fclose(f);
	if (outdir && name) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s%s", outdir, name, exts[fmt]);
		FILE *out = fopen(path, "w");
		CHECK(out != NULL);
		if (out) {
			fwrite(text, 1, *len, out);
			fclose(out);
		}
	}
	return text;
}

static void render_all(const struct fg_profile *p, const char *name)
{
	for (int fmt = FMT_JSON; fmt <= FMT_PPROF; fmt++) {
		size_t len;
		char *text = render(p, fmt, name, &len);
		if (fmt == FMT_PPROF) {
			CHECK(len > 10 && (unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b);
		} else {
			CHECK(len > 2 && text[0] == '{' && text[len - 1] == '\n');
		}
		free(text);
	}
}

static struct fg_profile *load(const char *text)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, text, strlen(text), "formats", &err), 0);
	return p;
}

static const char threaded[] =
	"# spy-version: 0.0-test\n"
	"# rate-hz: 100\n"
	"# duration-s: 0.230\n"
	"# samples: 23\n"
	"# command: python3 app.py\n"
	"process 42 \"python3 app.py\";thread 42 \"MainThread\";main (app.py:10);hot_function (app.py:20) 9\n"
	"process 42 \"python3 app.py\";thread 42 \"MainThread\";main (app.py:10) 2\n"
	"process 42 \"python3 app.py\";thread 43 \"worker\";run (threading.py:1012);sleep (libc.so.6) 7\n"
	"process 42 \"python3 app.py\";thread 43 \"worker\";run (threading.py:1012) 5\n";

static const char plain[] =
	"main (app.py:10);hot_function (app.py:20);helper (lib.py:5) 6\n"
	"main (app.py:10);hot_function (app.py:22) 3\n"
	"main (app.py:11);fib (app.py:30);fib (app.py:31) 4\n";

static void test_basic(void)
{
	struct fg_profile *p = load(threaded);
	render_all(p, "threaded");
	size_t len;
	char *json = render(p, FMT_JSON, NULL, &len);
	CHECK(strstr(json, "\"func\": \"thread 43 \\\"worker\\\"\"") != NULL);
	CHECK(strstr(json, "\"count\": 9}") != NULL);
	free(json);
	char *ss = render(p, FMT_SPEEDSCOPE, NULL, &len);
	/* Two threads, two profiles, named after the stripped roots. */
	CHECK(strstr(ss, "\"name\":\"process 42 \\\"python3 app.py\\\" / thread 42 \\\"MainThread\\\"\"") != NULL);
	CHECK(strstr(ss, "thread 43 \\\"worker\\\"\",\"unit\":\"seconds\"") != NULL);
	free(ss);
	fg_profile_free(p);

	p = load(plain);
	render_all(p, "plain");
	ss = render(p, FMT_SPEEDSCOPE, NULL, &len);
	CHECK(strstr(ss, "\"unit\":\"none\"") != NULL);
	free(ss);
	fg_profile_free(p);
}

static void test_hostile(void)
{
	/* The same names check-svg.py uses: quotes, backslash, controls, U+2028, bad UTF-8. */
	static const char *names[] = {
		"</text><script>alert(1)</script>",
		"\"'><g onload=alert(1)>",
		"x\\\";alert(3);//",
		"line\nbreak\r\ttab\x01\x7f",
		("sep\xe2\x80\xa8" "ara\xe2\x80\xa9tor"),
		"bad \xff\xfe utf8 \xc0\xaf \xed\xa0\x80 trunc \xe2\x82",
		"astral \xf0\x9f\x94\xa5 \xef\xbf\xbd &amp;",
	};
	enum { N = sizeof(names) / sizeof(names[0]) };
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_strtab *st = fg_profile_strtab(p);
	struct spy_stack s = SPY_STACK_INIT;
	for (size_t i = 0; i < N; i++) {
		spy_stack_reset(&s);
		struct spy_frame *f = spy_stack_push(&s);
		f->func = spy_strtab_interns(st, names[i]);
		f->file = spy_strtab_interns(st, names[(i + 1) % N]);
		f->line = 7;
		f->kind = i % 2 ? SPY_FRAME_NATIVE : SPY_FRAME_PYTHON;
		f = spy_stack_push(&s);
		f->func = spy_strtab_interns(st, names[(i + 3) % N]);
		f->file = NULL;
		f->kind = SPY_FRAME_SYNTHETIC;
		CHECK_INT(fg_profile_add(p, &s, 10 + i), 0);
	}
	spy_stack_release(&s);
	fg_profile_meta_set(p, FG_META_COMMAND, "\"q\" \\ </script>");
	fg_profile_meta_set(p, FG_META_RATE_HZ, "not a number");
	render_all(p, "hostile");
	size_t len;
	char *json = render(p, FMT_JSON, NULL, &len);
	/* Nothing below 0x20 and no raw U+2028 reaches the document. */
	for (size_t i = 0; i < len; i++) {
		CHECK((unsigned char)json[i] >= 0x20 || json[i] == '\n');
	}
	CHECK(strstr(json, "\xe2\x80\xa8") == NULL);
	CHECK(strstr(json, "sep\\u2028ara\\u2029tor") != NULL);
	CHECK(strstr(json, "line\\nbreak\\r\\ttab\\u0001\\u007f") != NULL);
	CHECK(strstr(json, "bad \\ufffd\\ufffd utf8 \\ufffd\\ufffd \\ufffd\\ufffd\\ufffd trunc \\ufffd\"") != NULL);
	free(json);
	fg_profile_free(p);
}

/* The same samples added in another order give the same bytes. */
static void test_deterministic(void)
{
	struct fg_profile *a = load(threaded);
	struct fg_profile *b = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	/* Lines reversed: frame ids differ, the folded order does not. */
	const char *lines[] = {
		("# spy-version: 0.0-test\n# rate-hz: 100\n# duration-s: 0.230\n# samples: 23\n"
		 "# command: python3 app.py\n"),
		"process 42 \"python3 app.py\";thread 43 \"worker\";run (threading.py:1012) 5\n",
		"process 42 \"python3 app.py\";thread 43 \"worker\";run (threading.py:1012);sleep (libc.so.6) 7\n",
		"process 42 \"python3 app.py\";thread 42 \"MainThread\";main (app.py:10) 2\n",
		"process 42 \"python3 app.py\";thread 42 \"MainThread\";main (app.py:10);hot_function (app.py:20) 9\n",
	};
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		CHECK_INT(fg_profile_read_folded(b, lines[i], strlen(lines[i]), "rev", &err), 0);
	}
	for (int fmt = FMT_JSON; fmt <= FMT_PPROF; fmt++) {
		size_t la, lb;
		char *x = render(a, fmt, NULL, &la);
		char *y = render(b, fmt, NULL, &lb);
		size_t la2;
		char *x2 = render(a, fmt, NULL, &la2);
		/* Same profile, same bytes, for every format. */
		CHECK(la == la2 && !memcmp(x, x2, la));
		if (fmt == FMT_SPEEDSCOPE) {
			/* Profiles come in folded order whatever the frame ids. */
			char *ma = strstr(x, "\"profiles\":"), *mb = strstr(y, "\"profiles\":");
			CHECK(ma && mb);
			if (ma && mb) {
				CHECK(strstr(ma, "MainThread") < strstr(ma, "worker"));
				CHECK(strstr(mb, "MainThread") < strstr(mb, "worker"));
			}
		}
		free(x);
		free(y);
		free(x2);
	}
	fg_profile_free(a);
	fg_profile_free(b);
}

/*
 * A crafted "# duration-s:" past 2^64 ns (here 1e14 s) is saturated, never
 * converted out of range (undefined behaviour; a trap under UBSan, a wrong
 * value otherwise): check-formats.py compares duration_nanos.
 */
static void test_long_duration(void)
{
	struct fg_profile *p = load("# rate-hz: 100\n# duration-s: 1e14\n"
				    "main (app.py:10);f (app.py:20) 3\n");
	render_all(p, "longrun");
	fg_profile_free(p);
}

/*
 * A profile whose pprof is many times the writer's 64 KiB flush (names of
 * 200 bytes, 400 stacks of 10 frames: 800 KB of them): written in many deflated pieces,
 * it must read back as the one message (check-formats.py compares it with
 * the JSON, frame by frame), and a write error midway is -SPY_EIO.
 */
static void test_large(void)
{
	struct spy_buf text = SPY_BUF_INIT;
	char pad[201];
	memset(pad, 'n', 200);
	pad[200] = '\0';
	spy_buf_adds(&text, "# rate-hz: 19\n# duration-s: 10\n");
	for (int i = 0; i < 400; i++) {
		for (int j = 0; j < 10; j++) {
			spy_buf_addf(&text, "%sf%d_%d_%s (big_%d.py:%d)", j ? ";" : "", i, j, pad, i, j + 1);
		}
		spy_buf_addf(&text, " %d\n", i % 7 + 1);
	}
	struct fg_profile *p = load(text.buf);
	spy_buf_release(&text);
	size_t len;
	char *pb = render(p, FMT_PPROF, "large", &len);
	CHECK(len > 10 && (unsigned char)pb[0] == 0x1f && (unsigned char)pb[1] == 0x8b);
	free(pb);
	render_all(p, "large");
	FILE *full = fopen("/dev/full", "w");
	if (full) {
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_profile_write_pprof(p, NULL, full, &err), -SPY_EIO);
		spy_err_clear(&err);
		fclose(full);
	}
	fg_profile_free(p);
}

static void test_empty_and_errors(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	render_all(p, "empty");
	fg_profile_free(p);

	/* A full disk is -SPY_EIO, never a crash or a silent success. */
	FILE *full = fopen("/dev/full", "w");
	if (full) {
		p = load(threaded);
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_profile_write_json(p, full, &err), -SPY_EIO);
		spy_err_clear(&err);
		CHECK_INT(fg_profile_write_speedscope(p, full, &err), -SPY_EIO);
		spy_err_clear(&err);
		CHECK_INT(fg_profile_write_pprof(p, NULL, full, &err), -SPY_EIO);
		spy_err_clear(&err);
		fclose(full);
		fg_profile_free(p);
	}
}

int main(int argc, char **argv)
{
	outdir = argc > 1 ? argv[1] : NULL;
	test_basic();
	test_hostile();
	test_deterministic();
	test_long_duration();
	test_large();
	test_empty_and_errors();
	return check_done();
}
