/* The LTO library test-symbolize-native resolves (lto-inner.c, lto-outer.c). */
#ifndef SPY_TESTS_LTO_H
#define SPY_TESTS_LTO_H

#include <stdint.h>

/* A return address in spy_lto_inner's code as inlined into spy_lto_outer. */
uintptr_t spy_lto_outer(int x);

/* Hidden: otherwise the call could be interposed, and is never inlined. */
__attribute__((visibility("hidden"))) uintptr_t spy_lto_inner(int x);
__attribute__((visibility("hidden"))) uintptr_t spy_lto_where(void);

#endif
