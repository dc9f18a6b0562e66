/*
 * Unit tests for the folded format: write -> read round trips (memory, plain
 * and .gz files, an fd fed in pieces), hostile names, the frame parsing
 * rules, -F at read time, what the reader tolerates, and every malformed
 * input giving -SPY_EFORMAT at the right line.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "common/sample.h"
#include "common/strtab.h"
#include "flamegraph/internal.h"
#include "tests/lib/check.h"
#include "tests/lib/gzip-mem.h"

static char tmpdir[] = "/tmp/spy-test-fg-XXXXXX";

static void push(struct spy_stack *s, struct spy_strtab *t, uint8_t kind,
		 const char *func, const char *file, uint32_t line)
{
	struct spy_frame *f = spy_stack_push(s);
	f->func = spy_strtab_interns(t, func);
	f->file = file ? spy_strtab_interns(t, file) : NULL;
	f->line = line;
	f->kind = kind;
}

static char *folded(const struct fg_profile *p)
{
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	return spy_buf_detach(&b, NULL);
}

/* A profile with a bit of everything: metadata, roots, python, native. */
static struct fg_profile *sample_profile(unsigned flags)
{
	struct fg_profile *p = fg_profile_new(NULL, flags);
	struct spy_strtab *t = fg_profile_strtab(p);
	struct spy_stack s = SPY_STACK_INIT;

	fg_profile_meta_set(p, FG_META_SPY_VERSION, "0.1.0");
	fg_profile_meta_set(p, FG_META_PID, "4242");
	fg_profile_meta_set(p, FG_META_PYTHON, "3.12.1");
	fg_profile_meta_set(p, FG_META_RATE_HZ, "100");
	fg_profile_meta_set(p, FG_META_DURATION_S, "2.5");
	fg_profile_meta_set(p, FG_META_SAMPLES, "250");
	fg_profile_meta_set(p, FG_META_ERRORS, "3");
	fg_profile_meta_set(p, FG_META_COMMAND, "python3 app.py --n 3");
	fg_profile_meta_set(p, "threads", "2");

	for (int i = 0; i < 40; i++) {
		spy_stack_reset(&s);
		if (i % 3 == 0) {
			push(&s, t, SPY_FRAME_NATIVE, "__select", "libc.so.6", 0);
		}
		push(&s, t, SPY_FRAME_PYTHON, i % 2 ? "work" : "idle", "/srv/app/app.py", (uint32_t)(10 + i % 4));
		push(&s, t, SPY_FRAME_PYTHON, "main", "/srv/app/app.py", 3);
		push(&s, t, SPY_FRAME_PYTHON, "<module>", "/srv/app/app.py", 1);
		push(&s, t, SPY_FRAME_SYNTHETIC, i % 5 ? "thread 11 \"MainThread\"" : "thread 12 \"worker\"", NULL, 0);
		push(&s, t, SPY_FRAME_SYNTHETIC, "process 4242 \"python3 app.py\"", NULL, 0);
		fg_profile_add(p, &s, (uint64_t)(1 + i % 7));
	}
	spy_stack_release(&s);
	return p;
}

static void check_mem_roundtrip(const struct fg_profile *p, unsigned flags)
{
	char *text = folded(p);
	struct fg_profile *q = fg_profile_new(NULL, flags);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "mem", &err), 0);
	char *text2 = folded(q);
	CHECK_STR(text2, text);
	struct fg_stats a, b;
	fg_profile_stats(p, &a);
	fg_profile_stats(q, &b);
	CHECK_INT(b.samples, a.samples);
	CHECK_INT(b.stacks, a.stacks);
	CHECK_INT(b.frame_ids, a.frame_ids);
	free(text);
	free(text2);
	fg_profile_free(q);
}

static void test_roundtrip_mem(void)
{
	struct fg_profile *p = sample_profile(0);
	check_mem_roundtrip(p, 0);

	/* Structure survives, not only text. */
	char *text = folded(p);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "mem", NULL), 0);
	bool saw_native = false, saw_py = false, saw_root = false;
	for (uint32_t i = 0; i < fg_profile_frame_count(q); i++) {
		const struct fg_frame *f = fg_profile_frame(q, i);
		if (!strcmp(f->func, "__select")) {
			saw_native = f->kind == SPY_FRAME_NATIVE && !strcmp(f->file, "libc.so.6") && !f->line;
		} else if (!strcmp(f->func, "main")) {
			saw_py = f->kind == SPY_FRAME_PYTHON && !strcmp(f->file, "/srv/app/app.py") && f->line == 3;
		} else if (!strcmp(f->func, "process 4242 \"python3 app.py\"")) {
			saw_root = f->kind == SPY_FRAME_SYNTHETIC && !f->file;
		}
	}
	CHECK(saw_native);
	CHECK(saw_py);
	CHECK(saw_root);
	CHECK_STR(fg_profile_meta_get(q, FG_META_COMMAND), "python3 app.py --n 3");
	CHECK_STR(fg_profile_meta_get(q, "threads"), "2");
	CHECK_INT(fg_profile_meta_count(q), 9);
	free(text);
	fg_profile_free(q);
	fg_profile_free(p);

	p = sample_profile(FG_FUNCTION);
	check_mem_roundtrip(p, FG_FUNCTION);
	fg_profile_free(p);
}

static char *path_in_tmp(const char *name)
{
	size_t n = strlen(tmpdir) + strlen(name) + 2;
	char *s = malloc(n);
	snprintf(s, n, "%s/%s", tmpdir, name);
	return s;
}

static size_t count_dir_entries(void)
{
	DIR *d = opendir(tmpdir);
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			n++;
		}
	}
	closedir(d);
	return n;
}

/* Write p to path as cmd/output.c would hand it a file: through the format registry. */
static int save_folded(const struct fg_profile *p, const char *path, struct spy_err *err)
{
	struct fg_writer w = { FG_FORMAT_FOLDED, p, NULL, NULL, NULL,
			       fg_format_gzip(fg_format_from_path(path), path), NULL };
	FILE *f = fopen(path, "w");
	if (!f) {
		return -SPY_EIO;
	}
	int rc = fg_write(&w, f, path, err);
	return fclose(f) != 0 && rc == 0 ? -SPY_EIO : rc;
}

static void test_roundtrip_files(void)
{
	struct fg_profile *p = sample_profile(0);
	char *text = folded(p);
	struct spy_err err = SPY_ERR_INIT;
	const char *names[] = { "out.folded", "out.folded.gz" };

	for (int i = 0; i < 2; i++) {
		char *path = path_in_tmp(names[i]);
		CHECK_INT(save_folded(p, path, &err), 0);
		/* Saving again replaces the file. */
		CHECK_INT(save_folded(p, path, &err), 0);

		unsigned char head[2] = { 0, 0 };
		int fd = open(path, O_RDONLY);
		CHECK(fd >= 0 && read(fd, head, 2) == 2);
		close(fd);
		bool is_gz = head[0] == 0x1f && head[1] == 0x8b;
		CHECK(is_gz == (i == 1));

		struct fg_profile *q = fg_profile_new(NULL, 0);
		CHECK_INT(fg_profile_load_folded(q, path, &err), 0);
		char *text2 = folded(q);
		CHECK_STR(text2, text);
		free(text2);
		fg_profile_free(q);
		free(path);
	}
	/* Only the two outputs: no temporary left behind. */
	CHECK_INT(count_dir_entries(), 2);

	/* Format is told by magic bytes, not by the name. */
	char *gz = path_in_tmp("out.folded.gz"), *renamed = path_in_tmp("really-gzip.txt");
	CHECK_INT(rename(gz, renamed), 0);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_load_folded(q, renamed, &err), 0);
	char *text2 = folded(q);
	CHECK_STR(text2, text);
	free(text2);
	fg_profile_free(q);
	unlink(renamed);
	free(gz);
	free(renamed);

	char *plain_gz = path_in_tmp("plain.gz");
	FILE *f = fopen(plain_gz, "w");
	fputs(text, f);
	fclose(f);
	q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_load_folded(q, plain_gz, &err), 0);
	text2 = folded(q);
	CHECK_STR(text2, text);
	free(text2);
	fg_profile_free(q);
	unlink(plain_gz);
	free(plain_gz);

	/* Writing to a FILE *. */
	char *viaf = path_in_tmp("via-file.folded");
	f = fopen(viaf, "w");
	CHECK_INT(fg_profile_write_folded(p, f, viaf, &err), 0);
	fclose(f);
	q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_load_folded(q, viaf, &err), 0);
	text2 = folded(q);
	CHECK_STR(text2, text);
	free(text2);
	fg_profile_free(q);
	unlink(viaf);
	free(viaf);

	/* Write errors are -SPY_EIO and name the path and the cause. */
	f = fopen("/dev/full", "w");
	if (f) {
		int rc = fg_profile_write_folded(p, f, "/dev/full", &err);
		CHECK_INT(rc, -SPY_EIO);
		CHECK(strstr(err.msg, "/dev/full") && strstr(err.msg, strerror(ENOSPC)));
		fclose(f);
	}
	char *missing = path_in_tmp("missing.folded");
	q = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_load_folded(q, missing, &err), -SPY_EIO);
	CHECK(strstr(err.msg, missing) && strstr(err.msg, strerror(ENOENT)));
	CHECK_INT(fg_profile_load_folded(q, tmpdir, &err), -SPY_EIO); /* a directory */
	fg_profile_free(q);
	free(missing);

	char *left = path_in_tmp("out.folded");
	unlink(left);
	free(left);
	CHECK_INT(count_dir_entries(), 0);
	free(text);
	fg_profile_free(p);
}

/* Read from a pipe fed in pieces, the gzip magic split across reads. */
static void test_fd_pieces(void)
{
	struct fg_profile *p = sample_profile(0);
	char *text = folded(p);
	size_t zlen;
	unsigned char *z = gzip_mem(text, strlen(text), &zlen);
	int fds[2];
	CHECK_INT(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		size_t off = 0;
		size_t steps[] = { 1, 1, 7, 100, 3000 };
		for (size_t i = 0; off < zlen; i++) {
			size_t n = i < 5 ? steps[i] : zlen - off;
			n = n < zlen - off ? n : zlen - off;
			if (write(fds[1], z + off, n) != (ssize_t)n) {
				_exit(1);
			}
			off += n;
			usleep(2000);
		}
		_exit(0);
	}
	close(fds[1]);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded_fd(q, fds[0], "<pipe>", &err), 0);
	close(fds[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char *text2 = folded(q);
	CHECK_STR(text2, text);
	free(text2);
	free(z);
	free(text);
	fg_profile_free(q);
	fg_profile_free(p);
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s; s++) {
		n += *s == '\n';
	}
	return n;
}

static const struct fg_frame *frame_by_func(const struct fg_profile *p, const char *func)
{
	for (uint32_t i = 0; i < fg_profile_frame_count(p); i++) {
		if (!strcmp(fg_profile_frame(p, i)->func, func)) {
			return fg_profile_frame(p, i);
		}
	}
	return NULL;
}

static void test_hostile(void)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_strtab *t = fg_profile_strtab(p);
	struct spy_stack s = SPY_STACK_INIT;
	const char *script = "</text><script>alert('x')</script>";
	const char *quoted = "\"quoted\" 'file'.py";
	const char *utf8 = "h\xc3\xa9llo_\xe2\x98\x83_\xe5\x87\xbd\xe6\x95\xb0";

	push(&s, t, SPY_FRAME_PYTHON, "a;b", "x\ny.py", 3);
	push(&s, t, SPY_FRAME_PYTHON, script, quoted, 4);
	push(&s, t, SPY_FRAME_PYTHON, utf8, "/tmp/\xc3\xbcn\xc3\xaf.py", 5);
	/* C0, C1 (CSI), a bidi override, invalid UTF-8. */
	push(&s, t, SPY_FRAME_NATIVE, "sym\r\x1b[31m\xc2\x9b\xe2\x80\xae\xff", "lib;c.so", 0);
	push(&s, t, SPY_FRAME_PYTHON, "f (weird) ", "a (b).py", 6);
	push(&s, t, SPY_FRAME_SYNTHETIC, "process 1 \"py;thon\napp\"", NULL, 0);
	CHECK_INT(fg_profile_add(p, &s, 2), 0);
	spy_stack_reset(&s);
	push(&s, t, SPY_FRAME_PYTHON, "tab\there", "t.py", 1);
	push(&s, t, SPY_FRAME_SYNTHETIC, "#root: 1", NULL, 0);
	CHECK_INT(fg_profile_add(p, &s, 3), 0);
	fg_profile_meta_set(p, FG_META_COMMAND, "evil\n# pid: 1\x7f");

	char *text = folded(p);
	/* 1 metadata line + 2 stacks, however hostile the names. */
	CHECK_INT(count_lines(text), 3);
	for (const char *c = text; *c; c++) {
		CHECK(*c == '\n' || ((unsigned char)*c >= 0x20 && *c != 0x7f));
	}
	CHECK_STR(text,
		  "# command: evil\\x0a# pid: 1\\x7f\n"
		  "?root: 1;tab\\x09here (t.py:1) 3\n"
		  "process 1 \"py?thon\\x0aapp\";f (weird)  (a (b).py:6);"
		  "sym\\x0d\\x1b[31m\\u009b\\u202e\\xff (lib?c.so);"
		  "h\xc3\xa9llo_\xe2\x98\x83_\xe5\x87\xbd\xe6\x95\xb0 (/tmp/\xc3\xbcn\xc3\xaf.py:5);"
		  "</text><script>alert('x')</script> (\"quoted\" 'file'.py:4);a?b (x\\x0ay.py:3) 2\n");

	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "hostile", &err), 0);
	char *text2 = folded(q);
	CHECK_STR(text2, text);
	const struct fg_frame *f = frame_by_func(q, script);
	CHECK(f && !strcmp(f->file, quoted) && f->line == 4 && f->kind == SPY_FRAME_PYTHON);
	f = frame_by_func(q, utf8);
	CHECK(f && !strcmp(f->file, "/tmp/\xc3\xbcn\xc3\xaf.py") && f->line == 5);
	f = frame_by_func(q, "a?b");
	CHECK(f && !strcmp(f->file, "x\\x0ay.py") && f->line == 3);
	/* Split on the last " (": the function keeps its own parentheses. */
	f = frame_by_func(q, "f (weird)  (a");
	CHECK(f && !strcmp(f->file, "b).py") && f->line == 6);
	CHECK_STR(fg_profile_meta_get(q, FG_META_COMMAND), "evil\\x0a# pid: 1\\x7f");
	CHECK(fg_profile_meta_get(q, FG_META_PID) == NULL);

	/* .gz file round trip of the same. */
	char *path = path_in_tmp("hostile.folded.gz");
	CHECK_INT(save_folded(p, path, &err), 0);
	struct fg_profile *r = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_load_folded(r, path, &err), 0);
	char *text3 = folded(r);
	CHECK_STR(text3, text);
	unlink(path);
	free(path);
	free(text3);
	fg_profile_free(r);

	free(text);
	free(text2);
	fg_profile_free(q);
	spy_stack_release(&s);
	fg_profile_free(p);
}

/* How single frames parse: func, file, line, kind. */
static void test_frame_rules(void)
{
	static const struct {
		const char *text, *func, *file;
		uint32_t line;
		uint8_t kind;
		const char *rewritten; /* NULL: the text itself */
	} cases[] = {
		{ "main (app.py:12)", "main", "app.py", 12, SPY_FRAME_PYTHON, NULL },
		{ "<lambda> (x) (app.py:3)", "<lambda> (x)", "app.py", 3, SPY_FRAME_PYTHON, NULL },
		{ "f (mod.py)", "f", "mod.py", 0, SPY_FRAME_PYTHON, NULL },
		{ "main (<frozen site>)", "main", "<frozen site>", 0, SPY_FRAME_PYTHON, NULL },
		{ "f (<>)", "f", "<>", 0, SPY_FRAME_PYTHON, NULL },
		{ "f (<x)", "f", "<x", 0, SPY_FRAME_NATIVE, NULL },
		{ "__select (libc.so.6)", "__select", "libc.so.6", 0, SPY_FRAME_NATIVE, NULL },
		{ "thread 12 \"main\"", "thread 12 \"main\"", NULL, 0, SPY_FRAME_SYNTHETIC, NULL },
		{ "f (C:\\a.py:7)", "f", "C:\\a.py", 7, SPY_FRAME_PYTHON, NULL },
		{ "f (a:012)", "f", "a:012", 0, SPY_FRAME_NATIVE, NULL },
		{ "f (a:0)", "f", "a", 0, SPY_FRAME_NATIVE, "f (a)" },
		{ "f (a.py:0)", "f", "a.py", 0, SPY_FRAME_PYTHON, "f (a.py)" },
		{ "f (a:12:0)", "f", "a:12", 0, SPY_FRAME_NATIVE, NULL },
		{ "f (a:0:0)", "f", "a:0", 0, SPY_FRAME_NATIVE, NULL },
		{ "f (a:0:7)", "f", "a:0", 7, SPY_FRAME_PYTHON, NULL },
		{ "f (a:4294967295)", "f", "a", 4294967295u, SPY_FRAME_PYTHON, NULL },
		{ "f (a:4294967296)", "f", "a:4294967296", 0, SPY_FRAME_NATIVE, NULL },
		{ "f (a:)", "f", "a:", 0, SPY_FRAME_NATIVE, NULL },
		{ "f ()", "f", "", 0, SPY_FRAME_NATIVE, NULL },
		{ " (x.py:1)", "", "x.py", 1, SPY_FRAME_PYTHON, NULL },
		{ "()", "()", NULL, 0, SPY_FRAME_SYNTHETIC, NULL },
		{ "f (x", "f (x", NULL, 0, SPY_FRAME_SYNTHETIC, NULL },
		{ "f(x.py:1)", "f(x.py:1)", NULL, 0, SPY_FRAME_SYNTHETIC, NULL },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char line[256];
		snprintf(line, sizeof(line), "%s 1\n", cases[i].text);
		struct fg_profile *p = fg_profile_new(NULL, 0);
		struct spy_err err = SPY_ERR_INIT;
		CHECK_INT(fg_profile_read_folded(p, line, strlen(line), "frame", &err), 0);
		CHECK_INT(fg_profile_frame_count(p), 1);
		const struct fg_frame *f = fg_profile_frame(p, 0);
		if (!f) {
			fg_profile_free(p);
			continue;
		}
		CHECK_STR(f->func, cases[i].func);
		if (cases[i].file) {
			CHECK_STR(f->file, cases[i].file);
		} else {
			CHECK(f->file == NULL);
		}
		CHECK_INT(f->line, cases[i].line);
		CHECK_INT(f->kind, cases[i].kind);
		/* Formatting what was parsed gives the text back. */
		char *text = folded(p);
		if (cases[i].rewritten) {
			snprintf(line, sizeof(line), "%s 1\n", cases[i].rewritten);
		}
		CHECK_STR(text, line);
		free(text);
		fg_profile_free(p);
	}
}

/* A file named like "x:12" keeps its name through writing and -F. */
static void test_numbered_file(void)
{
	for (unsigned flags = 0; flags <= FG_FUNCTION; flags += FG_FUNCTION) {
		struct fg_profile *p = fg_profile_new(NULL, flags);
		struct spy_stack s = SPY_STACK_INIT;
		push(&s, fg_profile_strtab(p), SPY_FRAME_PYTHON, "f", "cell:12", 9);
		push(&s, fg_profile_strtab(p), SPY_FRAME_NATIVE, "g", "lib:3", 0);
		CHECK_INT(fg_profile_add(p, &s, 1), 0);
		char *text = folded(p);
		CHECK_STR(text, flags ? "g (lib:3:0);f (cell:12:0) 1\n" : "g (lib:3:0);f (cell:12:9) 1\n");
		struct fg_profile *q = fg_profile_new(NULL, flags);
		CHECK_INT(fg_profile_read_folded(q, text, strlen(text), "numbered", NULL), 0);
		const struct fg_frame *f = frame_by_func(q, "f");
		CHECK(f && !strcmp(f->file, "cell:12") && f->line == (flags ? 0u : 9u));
		char *text2 = folded(q);
		CHECK_STR(text2, text);
		free(text);
		free(text2);
		fg_profile_free(q);
		spy_stack_release(&s);
		fg_profile_free(p);
	}
}

/*
 * Names longer than SPY_MAX_STR are cut (at a UTF-8 boundary) when written,
 * so even the deepest stack of the longest names reads back.
 */
static void test_longest(void)
{
	size_t n = 3 * SPY_MAX_STR;
	char *big = malloc(n + 1);
	for (size_t i = 0; i < n; i += 3) {
		memcpy(big + i, "\xe2\x98\x83", 3); /* U+2603, 3 bytes */
	}
	big[n] = '\0';
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_stack s = SPY_STACK_INIT;
	for (int i = 0; i < FG_MAX_DEPTH; i++) {
		push(&s, fg_profile_strtab(p), SPY_FRAME_PYTHON, big, big, 4000000000u);
	}
	CHECK_INT(fg_profile_add(p, &s, 1), 0);
	struct spy_buf b = SPY_BUF_INIT;
	fg_profile_format_folded(p, &b);
	CHECK(b.len <= FG_MAX_LINE + 1);
	struct fg_profile *q = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(q, b.buf, b.len, "longest", &err), 0);
	const struct fg_frame *f = fg_profile_frame(q, 0);
	CHECK(f && strlen(f->func) <= SPY_MAX_STR && strlen(f->func) % 3 == 0);
	CHECK(f && !strncmp(f->func, big, strlen(f->func)));
	struct fg_stats st;
	fg_profile_stats(q, &st);
	CHECK_INT(st.frame_ids, FG_MAX_DEPTH);
	spy_buf_release(&b);
	fg_profile_free(q);
	spy_stack_release(&s);
	fg_profile_free(p);
	free(big);
}

static void test_tolerated(void)
{
	struct spy_err err = SPY_ERR_INIT;
	const char *in =
		"# spy-version: 0.1.0\r\n"
		"# empty:\r\n"
		"\r\n"
		"main (a.py:1);f (a.py:2) 3\r\n"
		"\n"
		"main (a.py:1);f (a.py:2) 007\n"
		"main (a.py:1);g (a.py:9) 0\n"
		"# late: ok\n"
		"main (a.py:1) 2"; /* no final newline */
	struct fg_profile *p = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_read_folded(p, in, strlen(in), "ok", &err), 0);
	char *text = folded(p);
	CHECK_STR(text,
		  "# spy-version: 0.1.0\n"
		  "# empty: \n"
		  "# late: ok\n"
		  "main (a.py:1) 2\n"
		  "main (a.py:1);f (a.py:2) 10\n");
	CHECK_STR(fg_profile_meta_get(p, "empty"), "");
	free(text);
	fg_profile_free(p);

	/* Empty input is an empty profile. */
	p = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_read_folded(p, "", 0, "empty", &err), 0);
	struct fg_stats st;
	fg_profile_stats(p, &st);
	CHECK_INT(st.stacks, 0);
	CHECK_INT(st.samples, 0);
	fg_profile_free(p);

	/* -F at read time merges lines of one function. */
	const char *lines = "main (a.py:1);f (a.py:2) 3\nmain (a.py:4);f (a.py:7) 4\nx (lib.so) 1\n";
	p = fg_profile_new(NULL, FG_FUNCTION);
	CHECK_INT(fg_profile_read_folded(p, lines, strlen(lines), "F", &err), 0);
	text = folded(p);
	CHECK_STR(text, "main (a.py);f (a.py) 7\nx (lib.so) 1\n");
	free(text);
	fg_profile_free(p);

	/* Under -F "f (p:1)" and "f (p)" become one frame, kind included. */
	const char *merge = "m );f (p:1);x 1\nm );f (p);y 1\n";
	p = fg_profile_new(NULL, FG_FUNCTION);
	CHECK_INT(fg_profile_read_folded(p, merge, strlen(merge), "F", &err), 0);
	CHECK_INT(fg_profile_frame_count(p), 4);
	fg_profile_free(p);

	/* Concatenated gzip members are one stream; files merge into one profile. */
	const char *m1 = "a (x.py:1) 1\n", *m2 = "a (x.py:1) 2\nb (x.py:2) 5\n";
	size_t l1, l2;
	unsigned char *z1 = gzip_mem(m1, strlen(m1), &l1), *z2 = gzip_mem(m2, strlen(m2), &l2);
	unsigned char *cat = malloc(l1 + l2);
	memcpy(cat, z1, l1);
	memcpy(cat + l1, z2, l2);
	p = fg_profile_new(NULL, 0);
	CHECK_INT(fg_profile_read_folded(p, cat, l1 + l2, "cat.gz", &err), 0);
	CHECK_INT(fg_profile_read_folded(p, m1, strlen(m1), "again", &err), 0);
	text = folded(p);
	CHECK_STR(text, "a (x.py:1) 4\nb (x.py:2) 5\n");
	free(text);
	fg_profile_free(p);
	free(z1);
	free(z2);
	free(cat);
}

static void expect_bad(const char *what, const void *data, size_t len, size_t line, const char *needle)
{
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fg_profile_read_folded(p, data, len, "in.folded", &err);
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "in.folded:%zu: ", line);
	bool ok = rc == -SPY_EFORMAT && !strncmp(err.msg, prefix, strlen(prefix)) && strstr(err.msg, needle);
	CHECK(ok);
	if (!ok) {
		fprintf(stderr, "  case \"%s\": rc %d, msg \"%s\"; wanted \"%s...%s\"\n", what, rc, err.msg,
			prefix, needle);
	}
	fg_profile_free(p);
}

#define BAD(what, lit, line, needle) expect_bad(what, lit, sizeof(lit) - 1, line, needle)

static void test_malformed(void)
{
	BAD("bad count", "# pid: 1\na;b 3\na;c x1\n", 3, "bad sample count \"x1\"");
	BAD("negative count", "a -1\n", 1, "bad sample count");
	BAD("plus count", "a +1\n", 1, "bad sample count");
	BAD("float count", "a 1.5\n", 1, "bad sample count");
	BAD("missing count", "a;b 3\na;b\n", 2, "missing sample count");
	BAD("space, no count", "a;b 3\n\na;b \n", 3, "missing sample count after the last space");
	BAD("count too large", "a 1\na 1000000000001\n", 2, "larger than 1000000000000");
	BAD("count far too large", "a 123456789012345678901234567890\n", 1, "larger than");
	BAD("empty frame", "a 1\na;;b 2\n", 2, "empty frame (frame 2 ");
	BAD("leading ;", ";a 2\n", 1, "empty frame (frame 1 ");
	BAD("trailing ;", "x 1\ny 1\na; 2\n", 3, "empty frame (frame 2 ");
	BAD("empty stack", "a 1\n 5\n", 2, "empty stack");
	BAD("metadata without space", "# pid: 1\n#pid: 2\n", 2, "malformed metadata");
	BAD("metadata without colon", "# pid\n", 1, "malformed metadata");
	BAD("metadata bad key", "a 1\n# my key: 1\n", 2, "malformed metadata");
	BAD("lone #", "#\n", 1, "malformed metadata");
	BAD("tab", "a 1\nb\tc 1\n", 2, "control byte 0x09 at column 2");
	BAD("escape sequence", "a\x1b[2J 1\n", 1, "control byte 0x1b");
	BAD("binary junk", "\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0", 1, "control byte 0x7f at column 1");
	BAD("NUL", "ok 1\nab\0c 1\n", 2, "control byte 0x00 at column 3");
	BAD("bare CR", "a 1\rb 2\n", 1, "control byte 0x0d");

	/* Generated: bounds. */
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_adds(&b, "a 1\nb 2\n");
	spy_buf_grow(&b, FG_MAX_LINE + 1);
	memset(b.buf + b.len, 'x', FG_MAX_LINE + 1);
	b.len += FG_MAX_LINE + 1;
	b.buf[b.len] = '\0';
	spy_buf_adds(&b, " 1\n");
	expect_bad("overlong line", b.buf, b.len, 3, "line longer than");
	spy_buf_reset(&b);

	spy_buf_adds(&b, "# ok: 1\n");
	for (int i = 0; i <= FG_MAX_DEPTH; i++) {
		spy_buf_adds(&b, i ? ";f" : "f");
	}
	spy_buf_adds(&b, " 1\n");
	expect_bad("too deep", b.buf, b.len, 2, "deeper than");
	spy_buf_reset(&b);

	spy_buf_adds(&b, "a;");
	for (int i = 0; i <= FG_MAX_FRAME; i++) {
		spy_buf_addch(&b, 'y');
	}
	spy_buf_adds(&b, " 1\n");
	expect_bad("long frame", b.buf, b.len, 1, "frame 2 is longer than");
	spy_buf_reset(&b);

	spy_buf_adds(&b, "a 1\n# command: ");
	for (int i = 0; i <= FG_MAX_META_VALUE; i++) {
		spy_buf_addch(&b, 'c');
	}
	spy_buf_adds(&b, "\n");
	expect_bad("long metadata", b.buf, b.len, 2, "metadata value longer than");
	spy_buf_reset(&b);

	/* gzip: truncated at several points, corrupted, trailing junk. */
	for (int i = 0; i < 30; i++) {
		spy_buf_addf(&b, "main (app.py:1);f%d (app.py:%d) %d\n", i, i + 1, i + 1);
	}
	size_t zlen;
	unsigned char *z = gzip_mem(b.buf, b.len, &zlen);
	for (size_t cut = 3; cut < zlen; cut += zlen / 7 + 1) {
		struct fg_profile *p = fg_profile_new(NULL, 0);
		struct spy_err err = SPY_ERR_INIT;
		int rc = fg_profile_read_folded(p, z, cut, "in.folded", &err);
		CHECK_INT(rc, -SPY_EFORMAT);
		CHECK(strstr(err.msg, "truncated gzip") || strstr(err.msg, "corrupt gzip"));
		fg_profile_free(p);
	}
	/* Cut inside the 8-byte trailer: all text decoded, CRC/size missing. */
	expect_bad("truncated trailer", z, zlen - 4, 31, "truncated gzip");
	unsigned char *junk = malloc(zlen + 4);
	memcpy(junk, z, zlen);
	memcpy(junk + zlen, "junk", 4);
	expect_bad("trailing junk", junk, zlen + 4, 31, "corrupt gzip");
	memcpy(junk, z, zlen);
	junk[zlen / 2] ^= 0x55;
	junk[zlen / 2 + 1] ^= 0xaa;
	struct fg_profile *p = fg_profile_new(NULL, 0);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, junk, zlen, "in.folded", &err), -SPY_EFORMAT);
	CHECK(!strncmp(err.msg, "in.folded:", 10));
	fg_profile_free(p);
	free(junk);
	free(z);

	/* A gzip stream holding binary junk: the error is on the decoded line. */
	const char bin[] = "a 1\n\x01\x02\x03 9\n";
	z = gzip_mem(bin, sizeof(bin) - 1, &zlen);
	expect_bad("gzip of binary", z, zlen, 2, "control byte 0x01");
	free(z);
	spy_buf_release(&b);
}

/*
 * A decompression bomb: a small .gz of many distinct deep stacks. Read
 * under a 1 MiB budget it fails with the budget named (FILE:LINE, exit 5
 * in report); the default budget (1 GiB) takes it. Before the budget, any
 * size was read: the same shape scaled up is gigabytes from megabytes.
 */
static void test_bomb(void)
{
	struct spy_buf text = SPY_BUF_INIT;
	for (int i = 0; i < 4000; i++) {
		for (int d = 0; d < 200; d++) {
			spy_buf_adds(&text, "frame_of_a_deep_stack (deep.py:1);");
		}
		spy_buf_addf(&text, "leaf (deep.py:%d) 1\n", i + 1);
	}
	size_t gzlen;
	void *gz = gzip_mem(text.buf, text.len, &gzlen);
	CHECK(gzlen * 100 < text.len); /* small on disk */
	struct fg_profile *p = fg_profile_new(NULL, 0);
	fg_profile_limit_read(p, (size_t)1 << 20);
	struct spy_err err = SPY_ERR_INIT;
	CHECK_INT(fg_profile_read_folded(p, gz, gzlen, "bomb.gz", &err), -SPY_EFORMAT);
	CHECK(strstr(err.msg, "bomb.gz:") && strstr(err.msg, "more than 1 MiB"));
	fg_profile_free(p);
	p = fg_profile_new(NULL, 0);
	spy_err_clear(&err);
	CHECK_INT(fg_profile_read_folded(p, gz, gzlen, "bomb.gz", &err), 0);
	fg_profile_free(p);
	free(gz);
	spy_buf_release(&text);
}

int main(void)
{
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_roundtrip_mem();
	test_roundtrip_files();
	test_fd_pieces();
	test_hostile();
	test_frame_rules();
	test_numbered_file();
	test_longest();
	test_tolerated();
	test_malformed();
	test_bomb();
	rmdir(tmpdir);
	return check_done();
}
