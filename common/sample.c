/* Stack storage, reused across samples (see sample.h). */
#include <stdlib.h>
#include <string.h>

#include "common/sample.h"
#include "common/util.h"

const struct spy_sample_error_kind spy_sample_errors[SPY_SAMPLE_ERR_MAX] = {
	[SPY_SAMPLE_ERR_PAUSE] = { "pause", "pause that failed", "pauses that failed" },
	[SPY_SAMPLE_ERR_THREADS] = { "threads", "thread list unread", "thread lists unread" },
	[SPY_SAMPLE_ERR_GONE] = { "thread-gone", "thread gone while read", "threads gone while read" },
	[SPY_SAMPLE_ERR_TORN] = { "torn", "stack torn while read (dropped)", "stacks torn while read (dropped)" },
	[SPY_SAMPLE_ERR_TRUNCATED] = { "truncated", "stack cut short", "stacks cut short" },
	[SPY_SAMPLE_ERR_DROPPED] = { "dropped", "stack refused", "stacks refused" },
	[SPY_SAMPLE_ERR_NATIVE] = { "native", "native unwind that failed (Python stack kept)",
				    "native unwinds that failed (Python stacks kept)" },
	[SPY_SAMPLE_ERR_STATE] = { "state", "thread state unread", "thread states unread" },
};

enum spy_sample_error spy_sample_error_named(const char *name)
{
	unsigned i = 0;
	while (i < SPY_SAMPLE_ERR_MAX && strcmp(spy_sample_errors[i].name, name)) {
		i++;
	}
	return (enum spy_sample_error)i;
}

struct spy_frame *spy_stack_push(struct spy_stack *s)
{
	SPY_GROW(s->v, s->alloc, s->n + 1);
	struct spy_frame *f = &s->v[s->n++];
	memset(f, 0, sizeof(*f));
	return f;
}

struct spy_frame *spy_stack_push_synthetic(struct spy_stack *s, const char *name)
{
	struct spy_frame *f = spy_stack_push(s);
	f->func = name;
	f->kind = SPY_FRAME_SYNTHETIC;
	return f;
}

void spy_stack_append(struct spy_stack *s, const struct spy_frame *v, size_t n)
{
	if (n) {
		SPY_GROW(s->v, s->alloc, s->n + n);
		memcpy(s->v + s->n, v, n * sizeof(*v));
		s->n += n;
	}
}

void spy_stack_reset(struct spy_stack *s)
{
	s->n = 0;
	s->truncated = 0;
}

void spy_stack_copy(struct spy_stack *dst, const struct spy_stack *src)
{
	if (src->n) {
		SPY_GROW(dst->v, dst->alloc, src->n);
		memcpy(dst->v, src->v, src->n * sizeof(*src->v));
	}
	dst->n = src->n;
	dst->tid = src->tid;
	dst->truncated = src->truncated;
}

void spy_stack_release(struct spy_stack *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}
