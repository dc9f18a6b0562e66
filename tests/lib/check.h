/*
 * A minimal unit-test harness: CHECK macros record failures with file:line
 * and keep going; check_done() prints "N passed, N failed" for the file and
 * returns the exit code for main.
 */
#ifndef SPY_TESTS_CHECK_H
#define SPY_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/*
 * One count per test program, whichever of its files check (a fake backend
 * in tests/lib checks as it is driven): weak, so that each file including
 * this defines them and the linker keeps one.
 */
__attribute__((weak)) int check_passed, check_failed;

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (cond) {                                                      \
			check_passed++;                                          \
		} else {                                                         \
			check_failed++;                                          \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,   \
				__LINE__, #cond);                                \
		}                                                                \
	} while (0)

#define CHECK_INT(a, b)                                                          \
	do {                                                                     \
		long long a_ = (long long)(a), b_ = (long long)(b);              \
		if (a_ == b_) {                                                  \
			check_passed++;                                          \
		} else {                                                         \
			check_failed++;                                          \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, a_, #b, b_);             \
		}                                                                \
	} while (0)

#define CHECK_STR(a, b)                                                          \
	do {                                                                     \
		const char *a_ = (a), *b_ = (b);                                 \
		if (a_ && b_ && !strcmp(a_, b_)) {                               \
			check_passed++;                                          \
		} else {                                                         \
			check_failed++;                                          \
			fprintf(stderr, "%s:%d: %s == \"%s\", expected \"%s\"\n", \
				__FILE__, __LINE__, #a, a_ ? a_ : "(null)",      \
				b_ ? b_ : "(null)");                             \
		}                                                                \
	} while (0)

static inline int check_done(void)
{
	printf("%d passed, %d failed\n", check_passed, check_failed);
	return check_failed ? 1 : 0;
}

#endif
