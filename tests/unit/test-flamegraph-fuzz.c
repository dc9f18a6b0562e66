/*
 * Fuzz-ish test of the folded reader, runnable without libFuzzer: random
 * mutations of a valid profile (plain text, mutated-then-gzipped, and gzip
 * with its compressed bytes mutated) must each be either accepted or
 * rejected with -SPY_EFORMAT and a "NAME:LINE: " message, never crash or
 * leak (run it under -Db_sanitize=address,undefined). Whatever is accepted
 * must write back to text that reads again to the very same text.
 *
 * The seed is fixed so failures reproduce; SPY_FUZZ_SEED=N and
 * SPY_FUZZ_ITERS=N explore further.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "flamegraph/internal.h"
#include "tests/lib/check.h"
#include "tests/lib/gzip-mem.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64*: small, fast, and reproducible across platforms. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

static size_t rndn(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

static const char base_text[] =
	"# spy-version: 0.1.0\n"
	"# pid: 4242\n"
	"# python: 3.12.1\n"
	"# rate-hz: 100\n"
	"# duration-s: 2.50\n"
	"# samples: 250\n"
	"# errors: 0\n"
	"# command: python3 app.py --n 3\n"
	"process 4242 \"python3 app.py\";thread 1 \"MainThread\";<module> (app.py:1);main (app.py:3) 5\n"
	"process 4242 \"python3 app.py\";thread 1 \"MainThread\";<module> (app.py:1);main (app.py:3);work (app.py:10) 17\n"
	"process 4242 \"python3 app.py\";thread 1 \"MainThread\";<module> (app.py:1);main (app.py:3);work (app.py:11);__select (libc.so.6) 3\n"
	"process 4242 \"python3 app.py\";thread 2 \"worker\";run (threading.py:1012);loop (w.py:8);fib (w.py:2);fib (w.py:3) 41\n"
	"process 4242 \"python3 app.py\";thread 2 \"worker\";run (threading.py:1012);<lambda> (x) (w.py:20) 1\n"
	"h\xc3\xa9llo (/tmp/\xc3\xbcn\xc3\xaf.py:5);f (mod.py) 2\n"
	"x 1000000000000\n";

/*
 * Inputs that once broke a property, kept as standing tests (each is fed
 * with and without -F).
 */
static const char *const regressions[] = {
	/* libFuzzer: under -F, "f (p:1)" was a Python frame and "f (p)" a
	 * native one with the same text, so the output was not a fixed point. */
	("# pid: 1\nmain );b;f (p:1);f (a.py:1);f (1)p.p: y:);\377 () 1\n"
	 "main );b;f (p); ();'p: 31\n"),
	/* Identical lines summing past FG_MAX_COUNT. */
	"x 1000000000000\nx 1000000000000\nx 3\n",
	/* A file named like "name:line" under -F. */
	"run (threading.py:10:1);main (app.py:3) 3\n",
};

/* Bytes a mutation likes to insert: the format's own punctuation. */
static const char specials[] = ";: ()#\n\r0123456789\t\x00\x1f\x8b\xff.";

static void mutate(struct spy_buf *b)
{
	int n = 1 + (int)rndn(4);
	for (int m = 0; m < n; m++) {
		size_t len = b->len;
		size_t at = rndn(len + 1);
		switch (rndn(9)) {
		case 0: /* flip a bit */
			if (len) {
				b->buf[rndn(len)] ^= (char)(1u << rndn(8));
			}
			break;
		case 1: /* random byte */
			if (len) {
				b->buf[rndn(len)] = (char)rnd();
			}
			break;
		case 2: /* insert a special */
		case 3: {
			char c = specials[rndn(sizeof(specials) - 1)];
			spy_buf_addch(b, 0);
			memmove(b->buf + at + 1, b->buf + at, len - at);
			b->buf[at] = c;
			break;
		}
		case 4: { /* delete a range */
			size_t k = rndn(len - at + 1);
			k = k > 64 ? 64 : k;
			memmove(b->buf + at, b->buf + at + k, len - at - k);
			b->len -= k;
			b->buf[b->len] = '\0';
			break;
		}
		case 5: { /* duplicate a range */
			size_t k = rndn(len - at + 1);
			k = k > 128 ? 128 : k;
			char *copy = malloc(k + 1);
			memcpy(copy, b->buf + at, k);
			spy_buf_grow(b, k);
			memmove(b->buf + at + k, b->buf + at, len - at);
			memcpy(b->buf + at, copy, k);
			b->len += k;
			b->buf[b->len] = '\0';
			free(copy);
			break;
		}
		case 6: /* truncate */
			b->len = at;
			b->buf[b->len] = '\0';
			break;
		case 7: { /* a run of digits, to probe the count and line bounds */
			size_t k = 1 + rndn(24);
			for (size_t i = 0; i < k; i++) {
				spy_buf_addch(b, 0);
				memmove(b->buf + at + 1, b->buf + at, b->len - 1 - at);
				b->buf[at] = (char)('0' + rndn(10));
			}
			break;
		}
		case 8: /* append random junk */
			for (size_t i = rndn(32); i > 0; i--) {
				spy_buf_addch(b, (char)rnd());
			}
			break;
		}
	}
}

static int accepted, rejected;

static void feed(const void *data, size_t len, unsigned flags)
{
	struct fg_profile *p = fg_profile_new(NULL, flags);
	struct spy_err err = SPY_ERR_INIT;
	int rc = fg_profile_read_folded(p, data, len, "fuzz", &err);
	if (rc == 0) {
		accepted++;
		struct spy_buf once = SPY_BUF_INIT, twice = SPY_BUF_INIT;
		fg_profile_format_folded(p, &once);
		struct fg_profile *q = fg_profile_new(NULL, flags);
		int rc2 = fg_profile_read_folded(q, once.buf, once.len, "rewritten", &err);
		CHECK_INT(rc2, 0);
		if (rc2) {
			fprintf(stderr, "  rewritten text rejected: %s\n", err.msg);
		}
		fg_profile_format_folded(q, &twice);
		bool same = once.len == twice.len && !memcmp(once.buf, twice.buf, once.len);
		CHECK(same);
		if (!same) {
			fprintf(stderr, "  not a fixed point:\n---\n%s---\n%s---\n", once.buf, twice.buf);
		}
		/* Nor a trie, whose root must hold every sample. */
		struct fg_tree tree;
		struct fg_stats st;
		fg_tree_init(&tree, p);
		fg_profile_stats(p, &st);
		CHECK(tree.nodes[0].total == st.samples);
		CHECK(tree.nnodes <= st.frame_ids + 1);
		fg_tree_release(&tree);
		/* A table over whatever was accepted must not crash either. */
		struct fg_table t;
		fg_table_init(&t, p, NULL);
		struct spy_buf tb = SPY_BUF_INIT;
		fg_table_render(&t, &tb);
		CHECK(t.n == t.nfuncs);
		spy_buf_release(&tb);
		fg_table_release(&t);
		spy_buf_release(&once);
		spy_buf_release(&twice);
		fg_profile_free(q);
	} else {
		rejected++;
		bool ok = rc == -SPY_EFORMAT && !strncmp(err.msg, "fuzz:", 5) &&
			  err.msg[5] >= '1' && err.msg[5] <= '9' && strstr(err.msg + 5, ": ");
		CHECK(ok);
		if (!ok) {
			fprintf(stderr, "  rc %d msg \"%s\"\n", rc, err.msg);
		}
	}
	fg_profile_free(p);
}

int main(void)
{
	const char *seed = getenv("SPY_FUZZ_SEED");
	const char *iters_env = getenv("SPY_FUZZ_ITERS");
	rng_state = seed ? strtoull(seed, NULL, 0) : 0x5eed5eedULL;
	if (!rng_state) {
		rng_state = 1;
	}
	long iters = iters_env ? atol(iters_env) : 6000;
	size_t base_len = sizeof(base_text) - 1;
	size_t zbase_len;
	unsigned char *zbase = gzip_mem(base_text, base_len, &zbase_len);

	/* The unmutated inputs are accepted, and so are the regressions. */
	feed(base_text, base_len, 0);
	feed(zbase, zbase_len, 0);
	for (size_t i = 0; i < sizeof(regressions) / sizeof(regressions[0]); i++) {
		feed(regressions[i], strlen(regressions[i]), 0);
		feed(regressions[i], strlen(regressions[i]), FG_FUNCTION);
	}
	CHECK_INT(accepted, 2 + 2 * (int)(sizeof(regressions) / sizeof(regressions[0])));

	struct spy_buf b = SPY_BUF_INIT;
	for (long i = 0; i < iters; i++) {
		unsigned flags = (i & 1) ? FG_FUNCTION : 0;
		spy_buf_reset(&b);
		switch (i % 3) {
		case 0: /* mutated text */
			spy_buf_add(&b, base_text, base_len);
			mutate(&b);
			feed(b.buf, b.len, flags);
			break;
		case 1: { /* mutated text, then gzipped */
			spy_buf_add(&b, base_text, base_len);
			mutate(&b);
			size_t zl;
			unsigned char *z = gzip_mem(b.buf, b.len, &zl);
			feed(z, zl, flags);
			free(z);
			break;
		}
		case 2: /* gzip with its compressed bytes mutated */
			spy_buf_add(&b, zbase, zbase_len);
			mutate(&b);
			feed(b.buf, b.len, flags);
			break;
		}
	}
	/* Pure noise, of a few sizes. */
	for (int i = 0; i < 200; i++) {
		spy_buf_reset(&b);
		size_t n = rndn(4096);
		if (i % 2) {
			spy_buf_add(&b, "\x1f\x8b", 2);
		}
		for (size_t k = 0; k < n; k++) {
			spy_buf_addch(&b, (char)rnd());
		}
		feed(b.buf, b.len, 0);
	}
	spy_buf_release(&b);
	free(zbase);
	printf("fuzz: %d inputs accepted, %d rejected\n", accepted, rejected);
	/* Both outcomes must actually be exercised. */
	CHECK(accepted > 100);
	CHECK(rejected > 100);
	return check_done();
}
