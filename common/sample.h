/*
 * The frame and stack types that cross module boundaries. Strings in a frame
 * are interned in the session's spy_strtab (strtab.h) and live until it is
 * released, so nobody frees them one by one.
 *
 * A stack is ordered innermost frame first, as it is walked.
 */
#ifndef SPY_COMMON_SAMPLE_H
#define SPY_COMMON_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"

enum spy_frame_kind {
	SPY_FRAME_PYTHON = 0,
	SPY_FRAME_NATIVE = 1,
	SPY_FRAME_SYNTHETIC = 2, /* a process or thread root added by cmd */
};

enum spy_frame_flags {
	SPY_FRAME_PY_ENTRY = 1,   /* first Python frame run by one C-level eval call */
	SPY_FRAME_TRUNCATED = 2,  /* the walk stopped here (bound hit or bad pointer) */
	SPY_FRAME_INLINED = 4,    /* native: a call inlined at the pc of the frame after it */
};

struct spy_frame {
	const char *func;   /* qualified name where the version has one */
	const char *file;   /* file name, or library for native frames */
	uint32_t line;      /* 0 when unknown */
	uint8_t kind;       /* enum spy_frame_kind */
	uint8_t flags;      /* enum spy_frame_flags */
	spy_addr_t addr;    /* code object (Python) or pc (native) */
};

struct spy_stack {
	struct spy_frame *v;
	size_t n, alloc;
	int32_t tid;
	uint8_t truncated;  /* nonzero when the walk did not reach the root */
};

#define SPY_STACK_INIT { NULL, 0, 0, 0, 0 }

/*
 * Per-sample failures, by kind: the profiler counts them, a profile's
 * errors metadata names them ("N (kind n, ...)") and the flame graph's
 * header says them in words, all from spy_sample_errors.
 */
enum spy_sample_error {
	SPY_SAMPLE_ERR_PAUSE,      /* the process could not be paused */
	SPY_SAMPLE_ERR_THREADS,    /* the thread list could not be read */
	SPY_SAMPLE_ERR_GONE,       /* a thread's stack could not be read (it exited) */
	SPY_SAMPLE_ERR_TORN,       /* --nonblocking: a walk did not reach the root */
	SPY_SAMPLE_ERR_TRUNCATED,  /* a walk stopped at a bound or bad memory (kept) */
	SPY_SAMPLE_ERR_DROPPED,    /* the command refused a stack (counted with prof_dropped) */
	SPY_SAMPLE_ERR_NATIVE,     /* --native: a thread could not be unwound (Python stack kept) */
	SPY_SAMPLE_ERR_STATE,      /* a thread's state file would not open (descriptors?): sampled anyway */
	SPY_SAMPLE_ERR_MAX
};
struct spy_sample_error_kind {
	const char *name;        /* in the errors metadata */
	const char *one, *many;  /* in words: "1 stack cut short", "2 stacks cut short" */
};
extern const struct spy_sample_error_kind spy_sample_errors[SPY_SAMPLE_ERR_MAX];
/* The kind named name, or SPY_SAMPLE_ERR_MAX (a newer spy's kind, or none). */
enum spy_sample_error spy_sample_error_named(const char *name);

/* Append a frame; reuses storage, so steady-state pushes do not allocate. */
struct spy_frame *spy_stack_push(struct spy_stack *s);
/* A zeroed SPY_FRAME_SYNTHETIC frame named name (interned) pushed on s. */
struct spy_frame *spy_stack_push_synthetic(struct spy_stack *s, const char *name);
/* Append n frames, as n pushes would, in one copy. */
void spy_stack_append(struct spy_stack *s, const struct spy_frame *v, size_t n);
void spy_stack_reset(struct spy_stack *s);
void spy_stack_release(struct spy_stack *s);
/* dst becomes a copy of src (frames, tid, truncated), reusing dst's storage. */
void spy_stack_copy(struct spy_stack *dst, const struct spy_stack *src);

#endif
