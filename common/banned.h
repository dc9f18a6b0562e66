/*
 * Functions that are too easy to misuse, modelled on git's banned.h. Including
 * this header turns any use into a compile error. Use spy_buf or snprintf.
 */
#ifndef SPY_COMMON_BANNED_H
#define SPY_COMMON_BANNED_H

/*
 * The headers declaring them first: once included, a later #include is a
 * no-op. Otherwise, with _FORTIFY_SOURCE (Debian's package flags, Ubuntu's
 * compiler default), their inline wrappers (bits/stdio2.h) would be
 * expanded by the macros below and fail to compile.
 */
#include <stdio.h>
#include <string.h>

#define SPY_BANNED(func) sorry_##func##_is_banned

#undef strcpy
#define strcpy(x, y) SPY_BANNED(strcpy)
#undef strcat
#define strcat(x, y) SPY_BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) SPY_BANNED(strncpy)
#undef strtok
#define strtok(x, y) SPY_BANNED(strtok)
#undef sprintf
#define sprintf(...) SPY_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) SPY_BANNED(vsprintf)

#endif
