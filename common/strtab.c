/*
 * Interned strings, indexed by a hash of their bytes (common/hashmap.h); the string bytes live in
 * large chunks so interning does one allocation per ~64 KB, not per string.
 */
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "common/util.h"

struct spy_strtab_ent {
	size_t len;
	char s[];
};

struct spy_strtab_chunk {
	struct spy_strtab_chunk *next;
	size_t used, size;
	char data[];
};

#define CHUNK_SIZE (64 * 1024)

static struct spy_strtab_ent *alloc_ent(struct spy_strtab *t, size_t len)
{
	size_t need = sizeof(struct spy_strtab_ent) + len + 1;
	need = (need + 7) & ~(size_t)7;
	struct spy_strtab_chunk *c = t->chunks;
	if (!c || c->size - c->used < need) {
		size_t size = need > CHUNK_SIZE ? need : CHUNK_SIZE;
		c = spy_xmalloc(sizeof(*c) + size);
		c->next = t->chunks;
		c->used = 0;
		c->size = size;
		t->chunks = c;
	}
	struct spy_strtab_ent *e = (struct spy_strtab_ent *)(c->data + c->used);
	c->used += need;
	return e;
}

const char *spy_strtab_intern(struct spy_strtab *t, const char *s, size_t len)
{
	uint64_t h = spy_hash_bytes(s, len);
	struct spy_hmap_it it;
	SPY_HMAP_FOR_KEY(&t->index, h, it, v) {
		const struct spy_strtab_ent *e = (const struct spy_strtab_ent *)(uintptr_t)v;
		if (e->len == len && !memcmp(e->s, s, len)) {
			return e->s;
		}
	}
	/* An entry, and its share of the index (at most half full: two slots of two words). */
	size_t cost = sizeof(struct spy_strtab_ent) + len + 1 + 4 * sizeof(uint64_t);
	if (t->max_bytes && t->bytes + cost > t->max_bytes) {
		t->over++;
		if (!t->over_s) {
			struct spy_strtab_ent *o = alloc_ent(t, sizeof(SPY_STRTAB_OVER) - 1);
			o->len = sizeof(SPY_STRTAB_OVER) - 1;
			memcpy(o->s, SPY_STRTAB_OVER, sizeof(SPY_STRTAB_OVER));
			spy_hmap_add(&t->index, spy_hash_bytes(o->s, o->len), (uint64_t)(uintptr_t)o);
			t->over_s = o->s;
		}
		return t->over_s;
	}
	t->bytes += cost;
	struct spy_strtab_ent *e = alloc_ent(t, len);
	e->len = len;
	memcpy(e->s, s, len);
	e->s[len] = '\0';
	spy_hmap_add(&t->index, h, (uint64_t)(uintptr_t)e);
	return e->s;
}

void spy_strtab_set_budget(struct spy_strtab *t, size_t max)
{
	t->max_bytes = max;
}

uint64_t spy_strtab_over(const struct spy_strtab *t)
{
	return t->over;
}

size_t spy_strtab_bytes(const struct spy_strtab *t)
{
	return t->bytes;
}

const char *spy_strtab_interns(struct spy_strtab *t, const char *s)
{
	return spy_strtab_intern(t, s, strlen(s));
}

size_t spy_strtab_count(const struct spy_strtab *t)
{
	return spy_hmap_count(&t->index);
}

void spy_strtab_release(struct spy_strtab *t)
{
	struct spy_strtab_chunk *c = t->chunks;
	while (c) {
		struct spy_strtab_chunk *next = c->next;
		free(c);
		c = next;
	}
	spy_hmap_release(&t->index);
	t->chunks = NULL;
	t->bytes = 0;
	t->over = 0;
	t->over_s = NULL;
}
