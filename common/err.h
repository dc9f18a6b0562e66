/*
 * The error carrier. A function that can fail returns 0 or a negative
 * -SPY_E* code and takes `struct spy_err *err` last; it records what went
 * wrong with spy_err_set(), which returns the negative code so that
 * `return spy_err_set(err, ...);` reads naturally.
 *
 * err may be NULL: the per-sample path passes NULL so that it never formats
 * a message a hundred times a second. Modules never print errors; cmd/main.c
 * prints the one line (message and remedy) and maps the code to the exit code
 * of the CLI contract with spy_err_exit_code().
 */
#ifndef SPY_COMMON_ERR_H
#define SPY_COMMON_ERR_H

#include <stdarg.h>

enum spy_errcode {
	SPY_OK = 0,
	SPY_EUSAGE,     /* bad option or argument (exit 2) */
	SPY_ENOPROC,    /* process does not exist (exit 3) */
	SPY_EPERM,      /* cannot trace or read the process (exit 3) */
	SPY_ENOPY,      /* no Python interpreter found (exit 4) */
	SPY_EVERSION,   /* Python found, layout unsupported (exit 4) */
	SPY_EIO,        /* I/O error on our own files (exit 5) */
	SPY_EFORMAT,    /* malformed input file (exit 5) */
	/* Below: per-sample conditions, normally counted rather than shown. */
	SPY_EMEM,       /* a read of target memory failed */
	SPY_ECORRUPT,   /* target memory did not validate */
	SPY_EBOUND,     /* a bound (bounds.h) was hit */
	SPY_EGONE,      /* the process or thread went away */
	SPY_EINTR,      /* interrupted by SIGINT/SIGTERM */
};

struct spy_err {
	int code;
	char msg[512];
	char remedy[256];
};

#define SPY_ERR_INIT { 0, "", "" }

/* Record code and message; returns -code. err may be NULL. */
int spy_err_set(struct spy_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Attach a remedy to an error already set. */
void spy_err_remedy(struct spy_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Prefix the message with context, e.g. "reading /proc/1/maps: ". */
void spy_err_prefix(struct spy_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void spy_err_clear(struct spy_err *err);
/* Exit code of the CLI contract for a (positive or negative) code. */
int spy_err_exit_code(int code);

#endif
