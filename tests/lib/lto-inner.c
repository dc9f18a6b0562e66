/*
 * Half of test-symbolize-native's LTO library (tests/meson.build): a
 * function that lto-outer.c's spy_lto_outer calls and link-time
 * optimisation inlines there, so that the inlined call's DWARF names an
 * abstract origin in this file's CU from the one LTO makes for the code,
 * as a distro's LTO build of an extension module does.
 */
#include <stdint.h>

#include "tests/lib/lto.h"

__attribute__((noinline)) uintptr_t spy_lto_where(void)
{
	return (uintptr_t)__builtin_return_address(0);
}

uintptr_t spy_lto_inner(int x)
{
	uintptr_t pc = spy_lto_where();
	return pc + (uintptr_t)(x & 0);
}
