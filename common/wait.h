/*
 * What a thread waits on: read by sampler from /proc before any stop (a
 * live process) or from a core's registers, and judged by profiler (the
 * GIL's futex or another lock). One definition for both layers, so the
 * reading is handed up as it is, never copied from one struct into another.
 */
#ifndef SPY_COMMON_WAIT_H
#define SPY_COMMON_WAIT_H

#include <stdint.h>

#include "common/mem.h"

enum spy_wait_kind {
	SPY_WAIT_UNKNOWN = 0, /* unreadable (thread gone, stat unreadable) */
	SPY_WAIT_RUNNING,     /* R */
	SPY_WAIT_FUTEX,       /* blocked in a futex wait on futex */
	SPY_WAIT_OTHER,       /* blocked elsewhere: sleep, I/O, select/poll/epoll */
};

struct spy_wait {
	uint8_t kind;          /* enum spy_wait_kind */
	char state;            /* the stat letter; 0 if unknown */
	long nr;               /* syscall number; -1 if not in one or unknown */
	spy_addr_t futex;      /* 0 if unknown (a restarted wait) */
	char wchan[32];        /* kernel function it sleeps in; "" if unknown */
};

#endif
