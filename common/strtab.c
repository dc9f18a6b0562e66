/*
 * Interned strings in an open-addressing hash table; the string bytes live in
 * large chunks so interning does one allocation per ~64 KB, not per string.
 */
#include <stdlib.h>
#include <string.h>

#include "common/strtab.h"
#include "common/util.h"

struct spy_strtab_ent {
	uint64_t hash;
	size_t len;
	char s[];
};

struct spy_strtab_chunk {
	struct spy_strtab_chunk *next;
	size_t used, size;
	char data[];
};

#define CHUNK_SIZE (64 * 1024)

static uint64_t hash_bytes(const char *s, size_t len)
{
	/* FNV-1a: short keys, no adversary gains much from collisions here
	 * because the table is bounded by what the target names. */
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

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

static void rehash(struct spy_strtab *t)
{
	size_t n = t->nslots ? t->nslots * 2 : 1024;
	struct spy_strtab_ent **slots = spy_xcalloc(n, sizeof(*slots));
	for (size_t i = 0; i < t->nslots; i++) {
		struct spy_strtab_ent *e = t->slots[i];
		if (!e) {
			continue;
		}
		size_t j = e->hash & (n - 1);
		while (slots[j]) {
			j = (j + 1) & (n - 1);
		}
		slots[j] = e;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = n;
}

const char *spy_strtab_intern(struct spy_strtab *t, const char *s, size_t len)
{
	if ((t->count + 1) * 2 > t->nslots) {
		rehash(t);
	}
	uint64_t h = hash_bytes(s, len);
	size_t j = h & (t->nslots - 1);
	for (;;) {
		struct spy_strtab_ent *e = t->slots[j];
		if (!e) {
			break;
		}
		if (e->hash == h && e->len == len && !memcmp(e->s, s, len)) {
			return e->s;
		}
		j = (j + 1) & (t->nslots - 1);
	}
	struct spy_strtab_ent *e = alloc_ent(t, len);
	e->hash = h;
	e->len = len;
	memcpy(e->s, s, len);
	e->s[len] = '\0';
	t->slots[j] = e;
	t->count++;
	return e->s;
}

const char *spy_strtab_interns(struct spy_strtab *t, const char *s)
{
	return spy_strtab_intern(t, s, strlen(s));
}

size_t spy_strtab_count(const struct spy_strtab *t)
{
	return t->count;
}

void spy_strtab_release(struct spy_strtab *t)
{
	struct spy_strtab_chunk *c = t->chunks;
	while (c) {
		struct spy_strtab_chunk *next = c->next;
		free(c);
		c = next;
	}
	free(t->slots);
	memset(t, 0, sizeof(*t));
}
