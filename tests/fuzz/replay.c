/*
 * The replay main of the libFuzzer harnesses that take raw bytes (all but
 * fuzz-pystate, which builds scenes and generates its own): without
 * libFuzzer, the unit suite runs each harness over its committed corpus,
 * then over SPY_FUZZ_ITERS (default 2000) inputs mutated from it -- bytes
 * flipped, inserted, deleted, runs duplicated, inputs cut and spliced --
 * from the fixed SPY_FUZZ_SEED, so a failure reproduces. A crash, an abort
 * (a harness's own check) or a sanitizer report is the failure; otherwise
 * it prints the count line of the unit tests.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX (1 << 20)

struct input {
	uint8_t *v;
	size_t n;
};

static struct input *inputs;
static size_t ninputs;
static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static size_t rndn(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

static int load(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	uint8_t *buf = malloc(REPLAY_MAX);
	if (!buf) {
		abort();
	}
	size_t n = fread(buf, 1, REPLAY_MAX, f);
	fclose(f);
	struct input *v = realloc(inputs, (ninputs + 1) * sizeof(*inputs));
	if (!v) {
		abort();
	}
	inputs = v;
	inputs[ninputs++] = (struct input){ buf, n };
	return 0;
}

/* One mutation of in into out (capacity REPLAY_MAX); returns the new length. */
static size_t mutate(const struct input *in, uint8_t *out)
{
	size_t n = in->n;
	memcpy(out, in->v, n);
	int rounds = 1 + (int)rndn(8);
	for (int r = 0; r < rounds; r++) {
		switch (rndn(7)) {
		case 0: /* flip a byte */
			if (n) {
				out[rndn(n)] ^= (uint8_t)(1u << rndn(8));
			}
			break;
		case 1: /* an interesting byte */
			if (n) {
				static const uint8_t special[] = { 0, 0x0a, 0x1b, 0x7f, 0x80, 0x9b, 0xc2,
								   0xe2, 0xff, ';', ' ', '#', ':', '(',
								   ')', '0', '9' };
				out[rndn(n)] = special[rndn(sizeof(special))];
			}
			break;
		case 2: /* insert a random byte */
			if (n < REPLAY_MAX) {
				size_t at = rndn(n + 1);
				memmove(out + at + 1, out + at, n - at);
				out[at] = (uint8_t)rnd();
				n++;
			}
			break;
		case 3: /* delete a run */
			if (n) {
				size_t at = rndn(n), len = 1 + rndn(n - at < 16 ? n - at : 16);
				memmove(out + at, out + at + len, n - at - len);
				n -= len;
			}
			break;
		case 4: /* duplicate a run */
			if (n) {
				size_t at = rndn(n), len = 1 + rndn(n - at < 64 ? n - at : 64);
				if (n + len <= REPLAY_MAX) {
					memmove(out + at + len, out + at, n - at);
					n += len;
				}
			}
			break;
		case 5: /* cut */
			n = rndn(n + 1);
			break;
		case 6: { /* splice another input's tail */
			const struct input *o = &inputs[rndn(ninputs)];
			size_t at = rndn(n + 1), from = rndn(o->n + 1);
			size_t len = o->n - from;
			if (at + len > REPLAY_MAX) {
				len = REPLAY_MAX - at;
			}
			memcpy(out + at, o->v + from, len);
			n = at + len;
			break;
		}
		}
	}
	return n;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			if (load(argv[i]) < 0) {
				return 1;
			}
			continue;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.') {
				continue;
			}
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			if (load(path) < 0) {
				closedir(d);
				return 1;
			}
		}
		closedir(d);
	}
	if (!ninputs) {
		fprintf(stderr, "replay: no corpus given\n");
		return 1;
	}
	for (size_t i = 0; i < ninputs; i++) {
		LLVMFuzzerTestOneInput(inputs[i].v, inputs[i].n);
	}
	const char *seed = getenv("SPY_FUZZ_SEED"), *iters = getenv("SPY_FUZZ_ITERS");
	rng = seed ? strtoull(seed, NULL, 0) : 0x5eed5eedull;
	long nit = iters ? strtol(iters, NULL, 0) : 2000;
	uint8_t *buf = malloc(REPLAY_MAX);
	if (!buf) {
		abort();
	}
	for (long k = 0; k < nit; k++) {
		size_t n = mutate(&inputs[rndn(ninputs)], buf);
		LLVMFuzzerTestOneInput(buf, n);
	}
	free(buf);
	for (size_t i = 0; i < ninputs; i++) {
		free(inputs[i].v);
	}
	free(inputs);
	printf("%zu passed, 0 failed\n", ninputs + (size_t)nit);
	return 0;
}
