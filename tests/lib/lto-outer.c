/* The other half of the LTO library (see lto-inner.c). */
#include <stdint.h>

#include "tests/lib/lto.h"

__attribute__((noinline)) uintptr_t spy_lto_outer(int x)
{
	uintptr_t pc = spy_lto_inner(x);
	__asm__ volatile("" ::: "memory");
	return pc;
}
