/*
 * The differential profile behind spy diff: each function's self and total
 * share of samples in BASE and in NEW, the change in points, the CI gate,
 * and the text and JSON renderings.
 *
 * The decision a newcomer would question: the diff compares functions, not
 * stacks or lines. A stack-by-stack diff (Gregg's difffolded) breaks as
 * soon as one side was recorded with -F, on a Python whose line numbers
 * moved, or after a refactor inserted a wrapper frame; a function's share
 * survives all three. The per-function numbers are the cumtime table's
 * (fg_table_init), so recursion is counted once per stack exactly as there,
 * and this file only pairs the two tables' rows up.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

/* Order by the pointers themselves: both sides share one string table. */
static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return x == y ? 0 : (x < y ? -1 : 1);
}

static int cmp_key(const char *fa, const char *la, const char *fb, const char *lb)
{
	int c = cmp_ptr(fa, fb);
	return c ? c : cmp_ptr(la, lb);
}

static int cmp_table_rows(const void *x, const void *y)
{
	const struct fg_row *a = x, *b = y;
	return cmp_key(a->func, a->file, b->func, b->file);
}

static double absd(double v)
{
	return v < 0 ? -v : v;
}

static double biggest_change(const struct fg_diff_row *r)
{
	double t = absd(r->total_delta), s = absd(r->self_delta);
	return t > s ? t : s;
}

static int cmp_change(const void *x, const void *y)
{
	const struct fg_diff_row *a = x, *b = y;
	double ca = biggest_change(a), cb = biggest_change(b);
	if (ca != cb) {
		return ca > cb ? -1 : 1;
	}
	ca = absd(a->total_delta);
	cb = absd(b->total_delta);
	if (ca != cb) {
		return ca > cb ? -1 : 1;
	}
	/* As large a growth as a shrink: the growth is what a reader hunts. */
	if ((a->total_delta > 0) != (b->total_delta > 0)) {
		return a->total_delta > 0 ? -1 : 1;
	}
	int c = strcmp(a->func, b->func);
	return c ? c : strcmp(a->file ? a->file : "", b->file ? b->file : "");
}

static int cmp_byname(const void *x, const void *y, void *arg)
{
	const struct fg_diff_row *rows = arg;
	const struct fg_diff_row *a = &rows[*(const uint32_t *)x], *b = &rows[*(const uint32_t *)y];
	return cmp_key(a->func, a->file, b->func, b->file);
}

/* A function's name without its qualification: "inner" for "outer.<locals>.inner". */
static const char *bare_name(const char *func)
{
	const char *dot = strrchr(func, '.');
	return dot && dot[1] ? dot + 1 : func;
}

static bool one_sided(const struct fg_diff_row *r)
{
	return !r->base.total != !r->cur.total;
}

static int cmp_bare(const void *x, const void *y, void *arg)
{
	const struct fg_diff_row *rows = arg;
	const struct fg_diff_row *a = &rows[*(const uint32_t *)x], *b = &rows[*(const uint32_t *)y];
	int c = cmp_ptr(a->file, b->file);
	return c ? c : strcmp(bare_name(a->func), bare_name(b->func));
}

/*
 * Python 3.11+ records qualified names (Klass.method) where older versions
 * record bare ones (method), so across that line a method would look like
 * one function vanishing and another appearing, and fail the gate. Pair a
 * function found only in one profile with one found only in the other when
 * they are alone with that file and bare name, one of them qualified: the
 * same code under two spellings. The qualified spelling is kept.
 */
static void pair_qualified(struct fg_diff *d)
{
	uint32_t *idx = spy_xmalloc((d->n + 1) * sizeof(*idx));
	size_t m = 0;
	for (size_t i = 0; i < d->n; i++) {
		if (one_sided(&d->rows[i])) {
			idx[m++] = (uint32_t)i;
		}
	}
	qsort_r(idx, m, sizeof(*idx), cmp_bare, d->rows);
	for (size_t i = 0; i < m;) {
		size_t j = i + 1;
		while (j < m && !cmp_bare(&idx[i], &idx[j], d->rows)) {
			j++;
		}
		struct fg_diff_row *a = &d->rows[idx[i]], *b = &d->rows[idx[i + 1 < m ? i + 1 : i]];
		bool qa = strchr(a->func, '.') != NULL, qb = strchr(b->func, '.') != NULL;
		if (j == i + 2 && !a->base.total != !b->base.total && qa != qb) {
			struct fg_diff_row *keep = qa ? a : b, *drop = keep == a ? b : a;
			if (!keep->base.total) {
				keep->base = drop->base;
			} else {
				keep->cur = drop->cur;
			}
			drop->func = NULL;
		}
		i = j;
	}
	free(idx);
	size_t k = 0;
	for (size_t i = 0; i < d->n; i++) {
		if (d->rows[i].func) {
			d->rows[k++] = d->rows[i];
		}
	}
	d->n = k;
}

double fg_diff_pvalue(uint64_t x1, uint64_t n1, uint64_t x2, uint64_t n2, double dispersion)
{
	if (!n1 || !n2) {
		return 1.0;
	}
	double p1 = (double)x1 / (double)n1, p2 = (double)x2 / (double)n2;
	double pool = ((double)x1 + (double)x2) / ((double)n1 + (double)n2);
	double var = dispersion * pool * (1 - pool) * (1.0 / (double)n1 + 1.0 / (double)n2);
	if (!(var > 0)) {
		return 1.0;
	}
	double z = fabs(p2 - p1) / sqrt(var);
	return erfc(z / sqrt(2.0));
}

struct holm_item {
	double p;
	double *out;
};

static int cmp_holm(const void *x, const void *y)
{
	const struct holm_item *a = x, *b = y;
	return a->p < b->p ? -1 : a->p > b->p ? 1 : 0;
}

/*
 * Holm's step-down adjustment of the n p-values: the k-th smallest
 * becomes the largest of (n - j) * p_(j) for j <= k, capped at 1, so
 * "adjusted p <= level" is Holm's rejection rule. It holds the
 * family-wise error at the level whatever the dependence between the
 * tests (the shares of one profile are dependent: self shares add up to
 * 100%), and rejects everything Bonferroni rejects, and more.
 */
static void holm_adjust(struct holm_item *it, size_t n)
{
	qsort(it, n, sizeof(*it), cmp_holm);
	double run = 0;
	for (size_t k = 0; k < n; k++) {
		double a = (double)(n - k) * it[k].p;
		a = a > 1 ? 1 : a;
		run = a > run ? a : run;
		*it[k].out = run;
	}
}

/* Each row's p-values, total and self each adjusted over the d->n functions. */
void fg_diff_set_dispersion(struct fg_diff *d, double dispersion)
{
	d->dispersion = dispersion;
	struct holm_item *t = spy_xmalloc((d->n + 1) * sizeof(*t));
	struct holm_item *s = spy_xmalloc((d->n + 1) * sizeof(*s));
	for (size_t k = 0; k < d->n; k++) {
		struct fg_diff_row *r = &d->rows[k];
		t[k] = (struct holm_item){ fg_diff_pvalue(r->base.total, d->base_samples, r->cur.total,
							  d->cur_samples, dispersion), &r->total_p };
		s[k] = (struct holm_item){ fg_diff_pvalue(r->base.self, d->base_samples, r->cur.self,
							  d->cur_samples, dispersion), &r->self_p };
	}
	holm_adjust(t, d->n);
	holm_adjust(s, d->n);
	free(t);
	free(s);
}

bool fg_diff_total_significant(const struct fg_diff_row *r)
{
	return r->total_p <= FG_DIFF_LEVEL;
}

bool fg_diff_self_significant(const struct fg_diff_row *r)
{
	return r->self_p <= FG_DIFF_LEVEL;
}

static void set_side(struct fg_diff_side *s, const struct fg_row *r)
{
	s->self = r->self;
	s->total = r->total;
	s->self_pct = r->self_pct;
	s->total_pct = r->total_pct;
	memcpy(s->kind_pct, r->kind_pct, sizeof(s->kind_pct));
}

void fg_diff_init(struct fg_diff *d, const struct fg_profile *base, const struct fg_profile *cur)
{
	if (base->strtab != cur->strtab) {
		SPY_BUG("fg_diff_init: the profiles do not share a string table");
	}
	struct fg_table tb, tc;
	fg_table_init(&tb, base, NULL);
	fg_table_init(&tc, cur, NULL);
	qsort(tb.rows, tb.nfuncs, sizeof(*tb.rows), cmp_table_rows);
	qsort(tc.rows, tc.nfuncs, sizeof(*tc.rows), cmp_table_rows);

	memset(d, 0, sizeof(*d));
	d->base_samples = tb.samples;
	d->cur_samples = tc.samples;
	memcpy(d->base_kind_pct, tb.kind_pct, sizeof(d->base_kind_pct));
	memcpy(d->cur_kind_pct, tc.kind_pct, sizeof(d->cur_kind_pct));
	d->rows = spy_xcalloc(tb.nfuncs + tc.nfuncs + 1, sizeof(*d->rows));
	/* Merge the two tables, both sorted by (func, file). */
	size_t i = 0, j = 0;
	while (i < tb.nfuncs || j < tc.nfuncs) {
		const struct fg_row *b = i < tb.nfuncs ? &tb.rows[i] : NULL;
		const struct fg_row *c = j < tc.nfuncs ? &tc.rows[j] : NULL;
		int o = !b ? 1 : !c ? -1 : cmp_key(b->func, b->file, c->func, c->file);
		struct fg_diff_row *r = &d->rows[d->n++];
		r->func = o <= 0 ? b->func : c->func;
		r->file = o <= 0 ? b->file : c->file;
		if (o <= 0) {
			set_side(&r->base, b);
			i++;
		}
		if (o >= 0) {
			set_side(&r->cur, c);
			j++;
		}
	}
	fg_table_release(&tb);
	fg_table_release(&tc);
	pair_qualified(d);
	for (size_t k = 0; k < d->n; k++) {
		struct fg_diff_row *r = &d->rows[k];
		r->self_delta = r->cur.self_pct - r->base.self_pct;
		r->total_delta = r->cur.total_pct - r->base.total_pct;
	}
	fg_diff_set_dispersion(d, FG_DIFF_DISPERSION);

	qsort(d->rows, d->n, sizeof(*d->rows), cmp_change);
	d->byname = spy_xmalloc((d->n + 1) * sizeof(*d->byname));
	for (size_t k = 0; k < d->n; k++) {
		d->byname[k] = (uint32_t)k;
	}
	qsort_r(d->byname, d->n, sizeof(*d->byname), cmp_byname, d->rows);
}

void fg_diff_release(struct fg_diff *d)
{
	free(d->rows);
	free(d->byname);
	memset(d, 0, sizeof(*d));
}

const struct fg_diff_row *fg_diff_find(const struct fg_diff *d, const char *func, const char *file)
{
	size_t lo = 0, hi = d->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct fg_diff_row *r = &d->rows[d->byname[mid]];
		int c = cmp_key(r->func, r->file, func, file);
		if (!c) {
			return r;
		}
		if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	return NULL;
}

unsigned fg_diff_row_fails(const struct fg_diff_row *r, const struct fg_diff_gate *g)
{
	unsigned why = 0;
	if (g->total_pts >= 0 && r->total_delta > g->total_pts && r->cur.total >= g->min_samples &&
	    (!g->significance || fg_diff_total_significant(r))) {
		why |= 1;
	}
	if (g->self_pts >= 0 && r->self_delta > g->self_pts && r->cur.self >= g->min_samples &&
	    (!g->significance || fg_diff_self_significant(r))) {
		why |= 2;
	}
	return why;
}

/* ---- rendering ----------------------------------------------------------- */

static size_t shown(const struct fg_diff *d, size_t top)
{
	return top && top < d->n ? top : d->n;
}

/* "func (file)": the folded text of the function, hostile bytes escaped. */
static void add_function(struct spy_buf *out, const struct fg_diff_row *r)
{
	struct fg_frame f = { r->func, r->file, 0, SPY_FRAME_PYTHON };
	fg_frame_format(&f, out);
}

void fg_diff_render(const struct fg_diff *d, size_t top, struct spy_buf *out)
{
	size_t n = shown(d, top);
	spy_buf_addf(out, "base %" PRIu64 " samples, new %" PRIu64 " samples; shares in %% of each, "
		     "delta in points; ", d->base_samples, d->cur_samples);
	if (n < d->n) {
		spy_buf_addf(out, "top %zu of %zu functions by change\n", n, d->n);
	} else {
		spy_buf_addf(out, "%zu functions by change\n", d->n);
	}
	spy_buf_adds(out, "by kind:");
	for (int k = 0; k < FG_KINDS; k++) {
		spy_buf_addf(out, "%s %s %.1f%% -> %.1f%% (%+.1f)", k ? "," : "", fg_kind_names[k],
			     d->base_kind_pct[k], d->cur_kind_pct[k], d->cur_kind_pct[k] - d->base_kind_pct[k]);
	}
	spy_buf_addch(out, '\n');
	spy_buf_addf(out, "*: a significant change at %g%% (two-proportion test, dispersion %g, "
		     "Holm-adjusted over %zu functions)\n", 100 * FG_DIFF_LEVEL, d->dispersion, d->n);
	spy_buf_addf(out, "%8s %8s %8s   %8s %8s %8s\n", "total%", "total%", "total",
		     "self%", "self%", "self");
	spy_buf_addf(out, "%8s %8s %8s   %8s %8s %8s   %s\n", "base", "new", "delta",
		     "base", "new", "delta", "function (file)");
	for (size_t i = 0; i < n; i++) {
		const struct fg_diff_row *r = &d->rows[i];
		spy_buf_addf(out, "%8.2f %8.2f %+8.2f%c  %8.2f %8.2f %+8.2f%c  ", r->base.total_pct,
			     r->cur.total_pct, r->total_delta, fg_diff_total_significant(r) ? '*' : ' ',
			     r->base.self_pct, r->cur.self_pct, r->self_delta,
			     fg_diff_self_significant(r) ? '*' : ' ');
		add_function(out, r);
		spy_buf_addch(out, '\n');
	}
}

/* ", "python_pct": P, "native_pct": N, "idle_pct": I" */
static void json_kinds(struct spy_buf *b, const double *pct)
{
	for (int k = 0; k < FG_KINDS; k++) {
		spy_buf_addf(b, ", \"%s_pct\": %.4f", fg_kind_names[k], pct[k]);
	}
}

static void json_side(struct spy_buf *b, const char *name, const struct fg_diff_side *s)
{
	spy_buf_addf(b, "\"%s\": {\"self\": %" PRIu64 ", \"total\": %" PRIu64
		     ", \"self_pct\": %.4f, \"total_pct\": %.4f", name, s->self, s->total,
		     s->self_pct, s->total_pct);
	json_kinds(b, s->kind_pct);
	spy_buf_addch(b, '}');
}

static void json_row(struct spy_buf *b, const struct fg_diff_row *r, const struct fg_diff_gate *g)
{
	unsigned why = fg_diff_row_fails(r, g);
	spy_buf_adds(b, "{\"func\": ");
	fg_json_string(b, r->func);
	spy_buf_adds(b, ", \"file\": ");
	fg_json_string(b, r->file ? r->file : "");
	spy_buf_adds(b, ", ");
	json_side(b, "base", &r->base);
	spy_buf_adds(b, ", ");
	json_side(b, "new", &r->cur);
	spy_buf_addf(b, ", \"self_delta\": %.4f, \"total_delta\": %.4f", r->self_delta, r->total_delta);
	spy_buf_addf(b, ", \"self_p\": %.6g, \"total_p\": %.6g, \"self_significant\": %s, "
		     "\"total_significant\": %s", r->self_p, r->total_p,
		     fg_diff_self_significant(r) ? "true" : "false",
		     fg_diff_total_significant(r) ? "true" : "false");
	spy_buf_addf(b, ", \"over\": [%s%s%s]}", why & 1 ? "\"total\"" : "", why == 3 ? ", " : "",
		     why & 2 ? "\"self\"" : "");
}

/* A threshold as a JSON number, or null when it is off. */
static void json_threshold(struct spy_buf *b, const char *name, double v)
{
	if (v >= 0) {
		spy_buf_addf(b, "\"%s\": %.4f, ", name, v);
	} else {
		spy_buf_addf(b, "\"%s\": null, ", name);
	}
}

int fg_diff_write_json(const struct fg_diff *d, size_t top, const struct fg_diff_gate *g,
		       const char *base_name, const char *cur_name, FILE *f, struct spy_err *err)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_adds(&b, "{\n  \"format\": \"spy-diff\",\n  \"version\": 1,\n  \"base\": {\"name\": ");
	fg_json_string(&b, base_name);
	spy_buf_addf(&b, ", \"samples\": %" PRIu64, d->base_samples);
	json_kinds(&b, d->base_kind_pct);
	spy_buf_adds(&b, "},\n  \"new\": {\"name\": ");
	fg_json_string(&b, cur_name);
	spy_buf_addf(&b, ", \"samples\": %" PRIu64, d->cur_samples);
	json_kinds(&b, d->cur_kind_pct);
	spy_buf_adds(&b, "},\n  \"gate\": {");
	json_threshold(&b, "fail_over", g->total_pts);
	json_threshold(&b, "fail_over_self", g->self_pts);
	spy_buf_addf(&b, "\"min_samples\": %" PRIu64 ", \"significance\": %s, \"level\": %g, "
		     "\"dispersion\": %g},\n  \"functions_total\": %zu,\n  \"functions\": [",
		     g->min_samples, g->significance ? "true" : "false", FG_DIFF_LEVEL, d->dispersion, d->n);
	size_t n = shown(d, top);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		spy_buf_adds(&b, i ? ",\n    " : "\n    ");
		json_row(&b, &d->rows[i], g);
		rc = fg_flush(&b, f, false, "json diff", err);
	}
	spy_buf_adds(&b, n ? "\n  ],\n  \"failed\": [" : "],\n  \"failed\": [");
	size_t nfail = 0;
	for (size_t i = 0; i < d->n && !rc; i++) {
		if (fg_diff_row_fails(&d->rows[i], g)) {
			spy_buf_adds(&b, nfail++ ? ",\n    " : "\n    ");
			json_row(&b, &d->rows[i], g);
			rc = fg_flush(&b, f, false, "json diff", err);
		}
	}
	spy_buf_adds(&b, nfail ? "\n  ]\n}\n" : "]\n}\n");
	if (!rc) {
		rc = fg_flush(&b, f, true, "json diff", err);
	}
	spy_buf_release(&b);
	return rc;
}

/* ---- the differential flame graph ----------------------------------------- */

/* Colours of "no change", "grew most" and "shrank most". */
#define DIFF_NEUTRAL 0xeeeeeeu
#define DIFF_GREW 0xd62020u
#define DIFF_SHRANK 0x2060d6u
/* Changes below this many points are noise at any sample count spy records. */
#define DIFF_EPSILON 0.005

uint32_t fg_diff_colour(double delta, double scale)
{
	double mag = absd(delta);
	if (mag < DIFF_EPSILON || !(scale > 0)) {
		return DIFF_NEUTRAL;
	}
	double t = mag >= scale ? 1.0 : mag / scale;
	/* Even the smallest visible change must not look neutral. */
	t = 0.15 + 0.85 * t;
	uint32_t to = delta > 0 ? DIFF_GREW : DIFF_SHRANK, out = 0;
	for (int shift = 16; shift >= 0; shift -= 8) {
		double a = (DIFF_NEUTRAL >> shift) & 0xff, b = (to >> shift) & 0xff;
		out |= (uint32_t)(a + (b - a) * t + 0.5) << shift;
	}
	return out;
}

struct diff_style {
	const struct fg_diff *d;
	double scale;
};

static bool diff_frame_style(void *ctx, const struct fg_frame *fr, uint32_t *rgb, struct spy_buf *note)
{
	const struct diff_style *ds = ctx;
	if (fr->kind == SPY_FRAME_SYNTHETIC) {
		return false;
	}
	const struct fg_diff_row *r = fg_diff_find(ds->d, fr->func, fr->file);
	if (!r) {
		return false;
	}
	*rgb = fg_diff_colour(r->self_delta, ds->scale);
	spy_buf_addf(note, "base %.2f%% total, %.2f%% self; new %.2f%%, %.2f%%; change %+.2f, %+.2f points",
		     r->base.total_pct, r->base.self_pct, r->cur.total_pct, r->cur.self_pct,
		     r->total_delta, r->self_delta);
	return true;
}

int fg_diff_write_svg(const struct fg_diff *d, const struct fg_profile *cur, FILE *f,
		      const struct fg_svg_opts *opts, struct spy_err *err)
{
	static const struct fg_svg_legend legend[] = {
		{ "self share grew", DIFF_GREW },
		{ "shrank", DIFF_SHRANK },
		{ "unchanged", DIFF_NEUTRAL },
	};
	struct diff_style ds = { d, 0 };
	for (size_t i = 0; i < d->n; i++) {
		double m = absd(d->rows[i].self_delta);
		ds.scale = m > ds.scale ? m : ds.scale;
	}
	struct fg_svg_style style = { diff_frame_style, &ds, legend, SPY_ARRAY_SIZE(legend) };
	return fg_profile_write_svg_styled(cur, f, opts, &style, err);
}
