/* Stack storage, reused across samples (see sample.h). */
#include <stdlib.h>
#include <string.h>

#include "common/sample.h"
#include "common/util.h"

struct spy_frame *spy_stack_push(struct spy_stack *s)
{
	SPY_GROW(s->v, s->alloc, s->n + 1);
	struct spy_frame *f = &s->v[s->n++];
	memset(f, 0, sizeof(*f));
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
