/*
 * The json output format (doc/json-format.md). Its string escaper is
 * common/json.c's, shared with the speedscope writer and `spy dump --json`.
 *
 * The document is the profile as flamegraph.h describes it, nothing more:
 * the metadata, the frames table (ids are array indices), the threads (the
 * synthetic "thread ..." frames, so a reader need not parse names to split
 * by thread) and every distinct stack as frame ids root first with its
 * count, in the folded file's order. A consumer gets exactly what the
 * folded file holds without re-parsing "func (file:line)" text, which is
 * ambiguous for hostile names.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "flamegraph/internal.h"

/* Bytes flushed to the FILE at a time: output size is unbounded, memory is not. */
#define JSON_FLUSH 65536

int fg_flush(struct spy_buf *b, FILE *f, bool force, const char *what, struct spy_err *err)
{
	if (!force && b->len < JSON_FLUSH) {
		return 0;
	}
	if (b->len && fwrite(b->buf, 1, b->len, f) != b->len) {
		return spy_err_set(err, SPY_EIO, "writing the %s: %s", what, strerror(errno));
	}
	spy_buf_reset(b);
	if (force && fflush(f) != 0) {
		return spy_err_set(err, SPY_EIO, "writing the %s: %s", what, strerror(errno));
	}
	return 0;
}

const char *fg_kind_name(uint8_t kind)
{
	switch (kind) {
	case SPY_FRAME_PYTHON:
		return "python";
	case SPY_FRAME_NATIVE:
		return "native";
	default:
		return "synthetic";
	}
}

bool fg_frame_is_root(const struct fg_frame *f, const char *prefix)
{
	return f->kind == SPY_FRAME_SYNTHETIC && !strncmp(f->func, prefix, strlen(prefix));
}

bool fg_frame_is_state(const struct fg_frame *f)
{
	static const char *const names[] = { "idle", "waiting", "sleeping", "gil", "[idle", "[waiting",
					      "[gil", "<idle", "<waiting", "<gil" };
	if (f->kind != SPY_FRAME_SYNTHETIC) {
		return false;
	}
	for (size_t i = 0; i < SPY_ARRAY_SIZE(names); i++) {
		if (!strncasecmp(f->func, names[i], strlen(names[i]))) {
			return true;
		}
	}
	return false;
}

enum fg_kind fg_stack_kind(const struct fg_profile *p, const uint32_t *ids, size_t depth)
{
	/* Innermost first: a state leaf wins, other synthetic frames (<GC>) are skipped. */
	for (size_t k = depth; k-- > 0;) {
		const struct fg_frame *f = &p->frames[ids[k]];
		if (f->kind == SPY_FRAME_NATIVE) {
			return FG_KIND_NATIVE;
		}
		if (f->kind == SPY_FRAME_PYTHON) {
			return FG_KIND_PYTHON;
		}
		if (fg_frame_is_state(f)) {
			return FG_KIND_IDLE;
		}
	}
	return FG_KIND_PYTHON;
}

struct json_ctx {
	struct spy_buf *b;
	FILE *f;
	struct spy_err *err;
	bool first;
	const struct fg_profile *p;
	bool first_label;
};

/* One label set of a stack: {"count": N, "labels": {"key": "value", ...}}. */
static int json_labels(void *ctx, const struct fg_label *l, size_t n, uint64_t count)
{
	struct json_ctx *c = ctx;
	spy_buf_addf(c->b, "%s{\"count\": %" PRIu64 ", \"labels\": {", c->first_label ? "" : ", ", count);
	c->first_label = false;
	for (size_t i = 0; i < n; i++) {
		spy_buf_adds(c->b, i ? ", " : "");
		fg_json_string(c->b, l[i].key);
		spy_buf_adds(c->b, ": ");
		fg_json_string(c->b, l[i].value);
	}
	spy_buf_adds(c->b, "}}");
	return 0;
}

static int json_stack(void *ctx, const uint32_t *frames, size_t depth, uint64_t count)
{
	struct json_ctx *c = ctx;
	spy_buf_adds(c->b, c->first ? "\n    {\"frames\": [" : ",\n    {\"frames\": [");
	c->first = false;
	for (size_t i = 0; i < depth; i++) {
		spy_buf_addf(c->b, i ? ", %" PRIu32 : "%" PRIu32, frames[i]);
	}
	spy_buf_addf(c->b, "], \"count\": %" PRIu64, count);
	size_t at = c->b->len;
	spy_buf_adds(c->b, ", \"labelled\": [");
	c->first_label = true;
	(void)fg_profile_stack_labels(c->p, frames, json_labels, c);
	if (c->first_label) {
		c->b->len = at; /* none: the stack as it always was */
		c->b->buf[at] = 0;
	} else {
		spy_buf_addch(c->b, ']');
	}
	spy_buf_addch(c->b, '}');
	return fg_flush(c->b, c->f, false, "json profile", c->err);
}

int fg_profile_write_json(const struct fg_profile *p, FILE *f, struct spy_err *err)
{
	struct spy_buf b = SPY_BUF_INIT;
	struct fg_stats st;
	fg_profile_stats(p, &st);
	spy_buf_adds(&b, "{\n  \"format\": \"spy-json\",\n  \"version\": 1,\n  \"metadata\": {");
	size_t nmeta = fg_profile_meta_count(p);
	for (size_t i = 0; i < nmeta; i++) {
		const char *key, *value;
		fg_profile_meta_at(p, i, &key, &value);
		spy_buf_adds(&b, i ? ",\n    " : "\n    ");
		fg_json_string(&b, key);
		spy_buf_adds(&b, ": ");
		fg_json_string(&b, value);
	}
	spy_buf_adds(&b, nmeta ? "\n  },\n" : "},\n");
	spy_buf_addf(&b, "  \"samples\": %" PRIu64 ",\n  \"frames\": [", st.samples);
	size_t nframes = fg_profile_frame_count(p);
	int rc = 0;
	for (uint32_t id = 0; id < nframes && !rc; id++) {
		const struct fg_frame *fr = fg_profile_frame(p, id);
		spy_buf_adds(&b, id ? ",\n    {\"func\": " : "\n    {\"func\": ");
		fg_json_string(&b, fr->func);
		spy_buf_adds(&b, ", \"file\": ");
		if (fr->file) {
			fg_json_string(&b, fr->file);
		} else {
			spy_buf_adds(&b, "null");
		}
		spy_buf_addf(&b, ", \"line\": %" PRIu32 ", \"kind\": \"%s\"", fr->line,
			     fg_kind_name(fr->kind));
		const char *text = fr->kind == SPY_FRAME_PYTHON ? fg_profile_source(p, fr->file, fr->line) : NULL;
		if (text) {
			spy_buf_adds(&b, ", \"source\": ");
			fg_json_string(&b, text);
		}
		spy_buf_addch(&b, '}');
		rc = fg_flush(&b, f, false, "json profile", err);
	}
	spy_buf_adds(&b, nframes ? "\n  ],\n  \"threads\": [" : "],\n  \"threads\": [");
	bool any = false;
	for (uint32_t id = 0; id < nframes; id++) {
		const struct fg_frame *fr = fg_profile_frame(p, id);
		if (fg_frame_is_root(fr, "thread ")) {
			spy_buf_addf(&b, "%s{\"frame\": %" PRIu32 ", \"name\": ",
				     any ? ",\n    " : "\n    ", id);
			fg_json_string(&b, fr->func);
			spy_buf_addch(&b, '}');
			any = true;
		}
	}
	spy_buf_adds(&b, any ? "\n  ],\n  \"stacks\": [" : "],\n  \"stacks\": [");
	struct json_ctx c = { &b, f, err, true, p, true };
	if (!rc) {
		rc = fg_profile_foreach_stack(p, json_stack, &c);
	}
	spy_buf_adds(&b, c.first ? "]\n}\n" : "\n  ]\n}\n");
	if (!rc) {
		rc = fg_flush(&b, f, true, "json profile", err);
	}
	spy_buf_release(&b);
	return rc;
}
