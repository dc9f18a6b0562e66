/*
 * Labels some samples carry (the OpenTelemetry span a sample was taken
 * in: span_id, trace_id, span_name): per distinct stack, how many of its
 * samples carried each set of labels. Beside the stacks, not in them: a
 * stack's frames and count stay what they are, so the folded file and the
 * formats that have no place for labels do not change; json and pprof
 * split a stack's count by its label sets.
 *
 * Bounded: at most FG_MAX_LABEL_SETS distinct sets and FG_MAX_LABEL_ENTS
 * (stack, set) pairs; a sample past them is counted in its stack alone,
 * unlabelled, and in fg_stats.labels_dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

struct fg_label_set {
	uint32_t first, n; /* into labels */
	uint64_t hash;
};

struct fg_label_ent {
	uint32_t set;
	uint32_t next; /* the stack's next entry, FG_NONE at the end */
	uint64_t count;
};

struct fg_labels {
	struct fg_label *labels;
	size_t nlabels, labels_alloc;
	struct fg_label_set *sets;
	size_t nsets, sets_alloc;
	struct spy_hmap set_index; /* hash -> set */
	struct fg_label_ent *ents;
	size_t nents, ents_alloc;
	struct spy_hmap stack_first; /* stack's pool offset -> its first entry */
	uint64_t dropped;
};

void fg_labels_free(struct fg_labels *l)
{
	if (!l) {
		return;
	}
	free(l->labels);
	free(l->sets);
	spy_hmap_release(&l->set_index);
	free(l->ents);
	spy_hmap_release(&l->stack_first);
	free(l);
}

size_t fg_labels_bytes(const struct fg_labels *l)
{
	return l ? l->labels_alloc * sizeof(*l->labels) + l->sets_alloc * sizeof(*l->sets) +
			       spy_hmap_bytes(&l->set_index) + l->ents_alloc * sizeof(*l->ents) +
			       spy_hmap_bytes(&l->stack_first)
		 : 0;
}

/* The set of the n labels at in (interned in p), made if new; FG_NONE when
 * full. */
static uint32_t set_of(struct fg_labels *l, const struct fg_label *in, size_t n)
{
	uint64_t h = 0x51ab31u;
	for (size_t i = 0; i < n; i++) {
		h = spy_hmap_pair(h, (uint64_t)(uintptr_t)in[i].key);
		h = spy_hmap_pair(h, (uint64_t)(uintptr_t)in[i].value);
	}
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&l->set_index, h, it, v)
	{
		const struct fg_label_set *s = &l->sets[v];
		if (s->n == n && !memcmp(l->labels + s->first, in, n * sizeof(*in))) {
			return (uint32_t)v;
		}
	}
	if (l->nsets >= FG_MAX_LABEL_SETS) {
		return FG_NONE;
	}
	SPY_GROW(l->labels, l->labels_alloc, l->nlabels + n);
	memcpy(l->labels + l->nlabels, in, n * sizeof(*in));
	SPY_GROW(l->sets, l->sets_alloc, l->nsets + 1);
	l->sets[l->nsets] = (struct fg_label_set){ (uint32_t)l->nlabels, (uint32_t)n, h };
	l->nlabels += n;
	spy_hmap_add(&l->set_index, h, l->nsets);
	return (uint32_t)l->nsets++;
}

int fg_profile_label_last(struct fg_profile *p, const struct fg_label *in, size_t n, uint64_t count)
{
	if (p->last_stack == FG_NONE || !n || !count) {
		return 0;
	}
	if (n > FG_MAX_LABELS) {
		n = FG_MAX_LABELS;
	}
	if (!p->labels) {
		p->labels = spy_xcalloc(1, sizeof(*p->labels));
	}
	struct fg_labels *l = p->labels;
	struct fg_label v[FG_MAX_LABELS];
	for (size_t i = 0; i < n; i++) {
		v[i].key = spy_strtab_interns(p->strtab, in[i].key);
		v[i].value = spy_strtab_interns(p->strtab, in[i].value ? in[i].value : "");
	}
	uint32_t set = set_of(l, v, n);
	uint64_t off = p->stacks[p->last_stack].off;
	uint64_t first = spy_hmap_get(&l->stack_first, off);
	for (uint64_t e = first; e != SPY_HMAP_NONE && e != FG_NONE; e = l->ents[e].next) {
		if (l->ents[e].set == set) {
			l->ents[e].count += count;
			return 0;
		}
	}
	if (set == FG_NONE || l->nents >= FG_MAX_LABEL_ENTS) {
		l->dropped += count;
		return 0;
	}
	SPY_GROW(l->ents, l->ents_alloc, l->nents + 1);
	l->ents[l->nents] =
		(struct fg_label_ent){ set, first == SPY_HMAP_NONE ? FG_NONE : (uint32_t)first, count };
	spy_hmap_put(&l->stack_first, off, l->nents);
	l->nents++;
	return 0;
}

int fg_profile_stack_labels(const struct fg_profile *p, const uint32_t *frames, fg_label_fn fn, void *ctx)
{
	const struct fg_labels *l = p->labels;
	if (!l || frames < p->pool || frames >= p->pool + p->npool) {
		return 0;
	}
	uint64_t off = (uint64_t)(frames - p->pool);
	for (uint64_t e = spy_hmap_get(&l->stack_first, off); e != SPY_HMAP_NONE && e != FG_NONE;
	     e = l->ents[e].next) {
		const struct fg_label_set *s = &l->sets[l->ents[e].set];
		int rc = fn(ctx, l->labels + s->first, s->n, l->ents[e].count);
		if (rc) {
			return rc;
		}
	}
	return 0;
}
