/*
 * Private to flamegraph/: the layout of struct fg_profile and the helpers
 * its files share. Nothing outside this folder includes it.
 */
#ifndef SPY_FLAMEGRAPH_INTERNAL_H
#define SPY_FLAMEGRAPH_INTERNAL_H

#include "common/json.h"
#include "flamegraph/flamegraph.h"

struct fg_meta_ent {
	char *key;
	char *value;
	int rank; /* position of a documented key, or FG_META_OTHER */
};

#define FG_META_OTHER 1000

/* One distinct stack: depth frame ids at pool[off], root first. */
struct fg_stack_ent {
	uint64_t hash;
	uint64_t count;
	size_t off;
	uint32_t depth;
};

struct fg_profile {
	unsigned flags;
	struct spy_strtab *strtab;    /* == &own_strtab unless borrowed */
	struct spy_strtab own_strtab;

	struct fg_meta_ent *meta;
	size_t nmeta, meta_alloc;

	/* Frames by id, and an open-addressing hash of id + 1 (0 = empty). */
	struct fg_frame *frames;
	size_t nframes, frames_alloc;
	uint32_t *fslots;
	size_t nfslots;

	/* Distinct stacks, a hash of index + 1 over them, and their frames. */
	struct fg_stack_ent *stacks;
	size_t nstacks, stacks_alloc, max_stacks;
	uint32_t *sslots;
	size_t nsslots;
	uint32_t *pool;
	size_t npool, pool_alloc;

	/* Scratch for fg_profile_add, reused so adding allocates nothing. */
	uint32_t *ids;
	size_t ids_alloc;

	uint64_t samples, dropped, truncated;
	/* Index of the stack the last add counted, FG_NONE if it counted none
	 * (fg_profile_last_stack, for the time windows of slices.c). */
	uint32_t last_stack;
};

/*
 * Intern a frame (applying FG_FUNCTION and the synthetic normalisation);
 * func and file must already be in p->strtab. Returns its id.
 */
uint32_t fg_intern_frame(struct fg_profile *p, const char *func, const char *file,
			 uint32_t line, uint8_t kind);
/*
 * Add count samples of the stack ids[0..n), root first, 1 <= n <=
 * FG_MAX_DEPTH. Returns 0 or -SPY_EBOUND (stack or sample limit; nothing
 * changed, counted as dropped).
 */
int fg_add_path(struct fg_profile *p, const uint32_t *ids, size_t n, uint64_t count);

/*
 * The functions of a profile, as the table counts them (table.c): frame id
 * -> function id in fmap (FG_NONE for synthetic frames), and each
 * function's func and file, interned. For the table and the trend alike.
 */
struct fg_funcs {
	uint32_t *fmap;
	const char **func, **file;
	size_t n;
};

void fg_funcs_init(struct fg_funcs *fs, const struct fg_profile *p);
void fg_funcs_release(struct fg_funcs *fs);

/*
 * Append s with ';' and control bytes replaced by '?', at most SPY_MAX_STR
 * bytes of it (the one folded escaper).
 */
void fg_escape(struct spy_buf *out, const char *s);

/*
 * The output order: every frame's folded text (frame f is
 * texts.buf[text_off[f] .. text_off[f + 1])) and the distinct stacks sorted
 * by their frames' texts, root first, a stack before the ones it prefixes.
 * That is the depth-first order of the trie with children sorted by text.
 */
struct fg_order {
	struct spy_buf texts;
	size_t *text_off;
	uint32_t *stack;   /* nstacks indices into p->stacks */
};

void fg_order_init(struct fg_order *o, const struct fg_profile *p);
void fg_order_release(struct fg_order *o);

/* fg_profile_foreach_stack over an order already built. */
int fg_order_foreach_stack(const struct fg_order *o, const struct fg_profile *p,
			   fg_stack_fn fn, void *ctx);

/*
 * Helpers of the JSON-based writers (json.c). fg_utf8_decode reads one code
 * point of s[0..n), n >= 1: returns the bytes used and sets *cp, or U+FFFD
 * for a maximal invalid subpart (1 to 3 bytes). fg_json_string appends str
 * as a quoted JSON string (the one JSON escaper: common/json.c). fg_flush
 * writes b to f when it holds 64 KiB or more, or always with force (then
 * fflush too); -SPY_EIO "writing the WHAT: strerror" on error. fg_kind_name: "python", "native" or
 * "synthetic". fg_frame_is_root: a synthetic frame whose name starts with
 * prefix ("process ", "thread ").
 */
static inline size_t fg_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	return spy_utf8_decode(s, n, cp);
}
static inline void fg_json_string(struct spy_buf *out, const char *str)
{
	spy_json_string(out, str);
}
int fg_flush(struct spy_buf *b, FILE *f, bool force, const char *what,
	     struct spy_err *err);
const char *fg_kind_name(uint8_t kind);
bool fg_frame_is_root(const struct fg_frame *f, const char *prefix);

#endif
